"""``mqbench history`` over three real runs of one scenario (nats, started by mqbench)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqbench.cli.app import app

pytestmark = pytest.mark.integration

SCENARIO = (
    "name: trend\ntargets: [nats]\n"
    "workload: {pairs: 2, rate: 40, payload: 64B, warmup: 1s, duration: 3s, drain: 1s}\n"
)


def test_history_of_three_runs_is_in_time_order_and_steady_throughput_is_no_step(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "trend.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "results"
    runner = CliRunner()
    for _ in range(3):
        result = runner.invoke(app, ["run", str(scenario), "--out", str(out), "--no-analyze"])
        assert result.exit_code == 0, result.output
    runs = sorted(p for p in (out / "trend").iterdir() if p.is_dir())
    assert len(runs) == 3
    figure = tmp_path / "trend.pdf"
    result = runner.invoke(
        app,
        [
            "history",
            *(str(p) for p in reversed(runs)),
            "--metric",
            "throughput,p99",
            "--format",
            "json",
            "--figure",
            str(figure),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["run"] for r in data["runs"]] == [p.name for p in runs]
    throughput = [p for p in data["points"] if p["metric"] == "throughput"]
    assert [p["run"] for p in throughput] == [p.name for p in runs]
    assert len({p["cell"] for p in throughput}) == 1  # the same cell, run after run
    assert all(76 <= p["mean"] <= 84 for p in throughput)  # 2 x 40 msg/s offered
    assert throughput[0]["change_pct"] is None and abs(throughput[2]["change_pct"]) < 10
    assert not [s for s in data["steps"] if s["metric"] == "throughput"]
    text = runner.invoke(app, ["history", *(str(p) for p in runs), "--metric", "throughput"])
    assert text.exit_code == 0 and "0 step change(s)" in text.stdout
    assert text.stdout.index(runs[0].name) < text.stdout.index(runs[2].name)
    raw = figure.read_bytes()
    assert raw.startswith(b"%PDF") and b"/Type3" not in raw
