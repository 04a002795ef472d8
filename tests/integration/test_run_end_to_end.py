"""Whole runs through the CLI against real brokers started by mqbench on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.cli.app import app
from mqbench.records.events import EventKind, read_events
from mqbench.records.format import RECORD_SIZE

pytestmark = pytest.mark.integration
runner = CliRunner()

WINDOW_START, WINDOW_END = EventKind.WINDOW_START, EventKind.WINDOW_END
SHORT = ["--set", "workload.warmup=2s", "--set", "workload.duration=8s"]


def scenario(tmp_path: Path, target: str, extra: str = "") -> Path:
    path = tmp_path / f"{target}.yaml"
    path.write_text(
        f"name: e2e-{target}\ntargets: [{target}]\n"
        "workload: {pairs: 20, rate: 20, payload: 256B, qos: 0, drain: 3s}\n" + extra
    )
    return path


def only_result_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.glob("*/*") if p.is_dir()]
    return run_dir


def assert_complete_delivery_at_offered_rate(summary: dict) -> None:
    assert summary["status"] == "completed"
    assert summary["lost"] == 0
    assert summary["duplicates"] == 0
    assert summary["expected"] == summary["received"] > 0
    offered = summary["offered_rate"]
    assert abs(summary["send_rate"] - offered) / offered < 0.02
    assert abs(summary["throughput_msg_s"] - offered) / offered < 0.02
    assert summary["latency"]["p50_us"] > 0
    assert summary["latency"]["p99_us"] >= summary["latency"]["p50_us"]


@pytest.mark.spark
def test_quickstart_sized_run_on_nats_loses_nothing_and_is_analysed_by_spark(
    tmp_path: Path,
) -> None:
    out = tmp_path / "results"
    result = runner.invoke(app, ["run", str(scenario(tmp_path, "nats")), "--out", str(out), *SHORT])
    assert result.exit_code == 0, result.output
    run_dir = only_result_dir(out)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    (cell,) = manifest["cells"]
    summary = json.loads((run_dir / "cells" / cell["id"] / "summary.json").read_text())
    assert_complete_delivery_at_offered_rate(summary)
    assert (run_dir / "summary.parquet").is_file()
    assert "p99" in result.output and cell["id"] in result.output
    assert "client nats" in result.output  # which client drove the cell
    assert cell["params"]["transport"] == "nats"
    resources = (run_dir / "cells" / cell["id"] / "resources.csv").read_text().splitlines()
    assert resources[0] == "t_ns,role,pid,cpu_cores,rss_bytes"
    assert any(",broker," in line for line in resources[1:])


def test_quickstart_sized_run_on_mosquitto_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = runner.invoke(
        app,
        ["run", str(scenario(tmp_path, "mosquitto")), "--out", str(out), "--no-analyze", *SHORT],
    )
    assert result.exit_code == 0, result.output
    run_dir = only_result_dir(out)
    (cell,) = json.loads((run_dir / "manifest.json").read_text())["cells"]
    summary = analyze_cell_numpy(cell, run_dir / "cells" / cell["id"]).to_dict()
    assert_complete_delivery_at_offered_rate(summary)
    assert not summary["generator_saturated"], summary["generator_reason"]
    events = read_events(run_dir / "cells" / cell["id"])
    marks = {e.kind: e.t_ns for e in events if e.kind in (WINDOW_START, WINDOW_END)}
    assert marks == {WINDOW_START: cell["window"]["start_ns"], WINDOW_END: cell["window"]["end_ns"]}


def test_qos1_run_on_mosquitto_records_an_ack_for_every_send(tmp_path: Path) -> None:
    out = tmp_path / "results"
    path = scenario(tmp_path, "mosquitto")
    result = runner.invoke(
        app,
        ["run", str(path), "--out", str(out), "--no-analyze", "--set", "workload.qos=1", *SHORT],
    )
    assert result.exit_code == 0, result.output
    run_dir = only_result_dir(out)
    (cell,) = json.loads((run_dir / "manifest.json").read_text())["cells"]
    summary = analyze_cell_numpy(cell, run_dir / "cells" / cell["id"]).to_dict()
    assert summary["lost"] == 0
    assert summary["ack_latency"]["count"] == summary["sent"]


def test_taken_port_fails_the_cell_with_a_clear_message(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        path = scenario(tmp_path, "nats", f"broker: {{port: {port}}}\n")
        result = runner.invoke(
            app, ["run", str(path), "--out", str(tmp_path / "r"), "--no-analyze", *SHORT]
        )
    assert result.exit_code == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.output
    assert "Traceback" not in result.output


def test_ctrl_c_leaves_flushed_records_and_an_interrupted_manifest(tmp_path: Path) -> None:
    out = tmp_path / "results"
    path = scenario(tmp_path, "nats")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MQBENCH_DEBUG", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mqbench.cli",
            "run",
            str(path),
            "--out",
            str(out),
            "--set",
            "workload.duration=60s",
            "--set",
            "workload.warmup=1s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            records = list(out.glob("*/*/cells/*/sends-0.bin"))
            if records and records[0].stat().st_size > 0:
                break
            time.sleep(0.2)
        time.sleep(5.0)  # records reach the disk every second: wait past warm-up + drain (3 s)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "interrupted" in output
    assert "Traceback" not in output
    run_dir = only_result_dir(out)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    (cell,) = manifest["cells"]
    assert cell["status"] == "interrupted"
    cell_dir = run_dir / "cells" / cell["id"]
    for name in ("sends-0.bin", "deliveries-0.bin"):
        size = (cell_dir / name).stat().st_size
        assert size > 0 and size % RECORD_SIZE == 0
    summary = analyze_cell_numpy(cell, cell_dir).to_dict()
    assert summary["sent"] > 0
    (end,) = [e.t_ns for e in read_events(cell_dir) if e.kind is WINDOW_END]
    assert end == cell["window"]["end_ns"]  # the stop, well before the planned end
