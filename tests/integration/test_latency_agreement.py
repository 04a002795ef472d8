"""mqbench's latency agrees with an independent native subscriber on the same broker.

``mosquitto_sub`` (C, libmosquitto) subscribes to every topic of the run and prints each
message's receive time and payload; its latency is computed from the wire header's
``t_sent``, exactly like mqbench's latency from the actual send time. The two are timed by
different programs on different connections, so they agree only loosely: the test checks
correctness (the same order of magnitude, no systematic offset of milliseconds), not speed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.brokers.base import RunningBroker
from mqbench.records.format import HEADER
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.workload.run import SilentReporter, run_scenario

pytestmark = pytest.mark.integration
NATIVE_ARGS = ("-t", "mqbench/#", "-F", "%U %x")


def _native_latencies_us(out: Path, start_ns: int, end_ns: int) -> np.ndarray:
    values = []
    for line in out.read_text(encoding="ascii", errors="replace").splitlines():
        stamp, _, payload = line.partition(" ")
        if len(payload) < 48 or "." not in stamp:
            continue
        secs, frac = stamp.split(".")
        t_recv = int(secs) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
        t_sent = HEADER.unpack(bytes.fromhex(payload[:48]))[2]
        if start_ns <= t_sent < end_ns:
            values.append((t_recv - t_sent) / 1e3)
    return np.array(values)


@pytest.mark.parametrize("layout", ["shared", "split"])
def test_latency_from_send_agrees_with_an_independent_native_subscriber(
    mosquitto: RunningBroker, tmp_path: Path, layout: str
) -> None:
    if shutil.which("mosquitto_sub") is None:
        pytest.skip("mosquitto_sub is not installed; install it with: scripts/install.sh")
    port = mosquitto.endpoint.port
    captured = tmp_path / "native.txt"
    with captured.open("wb") as sink:
        native = subprocess.Popen(
            ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), *NATIVE_ARGS],
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )
        try:
            data = {
                "name": "agreement",
                "targets": ["mosquitto"],
                "runtime": "external",
                "broker": {"port": port, "pid": mosquitto.pids[0]},
                "workload": {
                    "pairs": 10,
                    "rate": 20,
                    "payload": "64B",
                    "warmup": "1s",
                    "duration": "4s",
                    "drain": "1s",
                },
                "generator": {"layout": layout},
            }
            result = run_scenario(
                validate_scenario(data, "test"),
                source=ScenarioSource("test", data),
                out_root=tmp_path / "results",
                argv=["pytest"],
                reporter=SilentReporter(),
            )
        finally:
            native.terminate()
            native.wait(5)
    (cell,) = result.cells
    assert cell.status == "completed", cell.error
    assert cell.params["layout"] == layout
    assert cell.generator is not None
    roles = sorted(str(w.role) for w in cell.generator.workers)
    assert roles == (["both"] if layout == "shared" else ["publishers", "subscribers"])
    summary = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
    assert summary.lost == 0 and summary.latency_from_send is not None
    assert summary.latency_verdict in ("ok", "generator-bound")
    native_us = _native_latencies_us(captured, summary.window_start_ns, summary.window_end_ns)
    # the native client saw the same messages (windowed by t_sent, not the intended time)
    assert abs(native_us.size - summary.received) <= 2
    ours = summary.latency_from_send.p50_us
    theirs = float(np.percentile(native_us, 50))
    # loose: same order of magnitude and no millisecond-scale offset between the two
    assert theirs / 4 - 100 <= ours <= theirs * 4 + 100, (ours, theirs)
    assert abs(ours - theirs) < 1000, (ours, theirs)
