"""Real-time workers on a real broker, the refusal of ``realtime: on``, the wake-up probes.

The real-time cell needs root (SCHED_FIFO, the broker's cgroup) and two CPUs; elsewhere it
skips with the reason (the decisions themselves are unit-tested from injected facts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mqbench.brokers.resources.cgroups import CgroupError, CgroupManager
from mqbench.calibration.wakeup import probe_policy
from mqbench.cli.app import app
from mqbench.workload.realtime import RealtimeSettings, probe_permission

pytestmark = pytest.mark.integration

SCENARIO = {
    "name": "rt",
    "targets": ["mosquitto"],
    "runtime": "native",
    "workload": {
        "topology": "pairs",
        "pairs": 5,
        "rate": 20,
        "payload": "64B",
        "qos": 0,
        "warmup": "1s",
        "duration": "2s",
        "drain": "1s",
    },
    "generator": {"realtime": "on"},
}


@pytest.fixture(scope="module")
def realtime_allowed() -> None:
    why = probe_permission()
    if why is not None:
        pytest.skip(f"SCHED_FIFO not permitted here: {why}")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no room to keep the workers off the broker's CPU")
    try:
        CgroupManager().check_writable()
    except CgroupError as exc:
        pytest.skip(f"cgroups not writable here: {exc}")


def _run(tmp_path: Path, scenario: dict[str, object], *extra: str) -> tuple[int, str]:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    env = {"MQBENCH_CALIBRATION": str(tmp_path / "no-calibration.json")}
    args = ["run", str(path), "--out", str(tmp_path / "out"), "--no-analyze", *extra]
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.output


def test_a_real_time_cell_records_its_policy_and_cpus_and_delivers_everything(
    tmp_path: Path, realtime_allowed: None
) -> None:
    code, output = _run(tmp_path, {**SCENARIO, "resources": ["1cpu-2g"]})
    assert code == 0, output
    manifest = json.loads(next((tmp_path / "out").rglob("manifest.json")).read_text())
    cell = manifest["cells"][0]
    timing = cell["timing"]
    assert (timing["mode"], timing["policy"], timing["priority"]) == ("on", "fifo", 1)
    assert timing["broker_cpus"] and timing["worker_cpus"]
    assert not set(timing["broker_cpus"]) & set(timing["worker_cpus"])
    assert cell["broker"]["resources"]["cgroup"]["cpuset_cpus"] == ",".join(
        str(c) for c in timing["broker_cpus"]
    )
    assert timing["receive_stamp"] == "kernel" and timing["throttle_share"] is not None
    # the probe above the workers, on their CPU, through the 2 s window (one wake-up every 2 ms)
    during = timing["wakeup_during"]
    assert during is not None, timing["wakeup_during_reason"]
    assert during["policy"] == "fifo" and 500 <= during["samples"] <= 1001
    assert 0 <= during["p50_us"] <= during["p99_us"] <= during["p999_us"] <= during["max_us"]
    workers = cell["generator"]["workers"]
    assert workers and all(w["sched_policy"] == "fifo" for w in workers)
    assert cell["totals"]["sent"] == cell["totals"]["received"] == 5 * 20 * 3


def test_realtime_on_without_room_is_refused_in_one_line_before_any_load(
    tmp_path: Path, realtime_allowed: None
) -> None:
    # no resources profile: the broker may use every CPU, and 6,000 msg/s each way needs
    # more generator CPU than real time may take beside it
    busy = {**SCENARIO, "workload": {**SCENARIO["workload"], "pairs": 10, "rate": 600}}  # type: ignore[dict-item]
    code, output = _run(tmp_path, busy)
    assert code == 1
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert "generator.realtime on: the broker may use every CPU" in lines[0]
    assert not list((tmp_path / "out").rglob("manifest.json"))


def test_the_wakeup_probe_returns_sane_numbers() -> None:
    outcome = probe_policy(None, duration_s=0.3)
    floor = outcome.floor
    assert floor is not None, outcome.reason
    assert floor.samples == 300 and floor.policy == "other"
    assert 0 <= floor.p50_us <= floor.p99_us <= floor.p999_us <= floor.max_us
    assert floor.p50_us < 20_000  # a wake-up is microseconds, even on a loaded machine
    if probe_permission() is None:
        fifo = probe_policy(RealtimeSettings(dma_latency_us=None, timer_slack_ns=None), 0.3)
        assert fifo.floor is not None and fifo.policy == "fifo"
        assert fifo.floor.p50_us < 20_000
