"""``mqbench history``: runs in time order, step changes flagged only beyond the noise."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import Traits, scenario_run

from mqbench.analysis.repeats import MeanCI
from mqbench.cli.app import app
from mqbench.report.history import build_history, history_figure, is_step, parse_metrics

SCENARIO: dict[str, Any] = {"name": "trend", "targets": ["nats"], "workload": {"pairs": [1]}}


def _runs(tmp_path: Path, latencies: list[float]) -> list[Path]:
    """One run per latency, created a day apart, given in reverse order."""
    out = []
    for day, lat in enumerate(latencies, 1):
        root = scenario_run(
            tmp_path / f"run{day}", SCENARIO, lambda c, lat=lat: Traits(latency_us=lat, spread_us=1)
        )
        manifest = json.loads((root / "manifest.json").read_text())
        manifest["created_utc"] = f"2026-11-0{day}T00:00:00Z"
        manifest["tool"] = {"name": "mqbench", "git_commit": f"c0ffee{day}"}
        (root / "manifest.json").write_text(json.dumps(manifest))
        out.append(root)
    return out[::-1]


def test_runs_are_put_in_time_order_and_a_jump_is_a_step(tmp_path: Path) -> None:
    history = build_history(_runs(tmp_path, [200.0, 205.0, 400.0]), ["p50"], 0.10)
    assert [r.path.name for r in history.runs] == ["run1", "run2", "run3"]
    changes = [p.change_pct for p in history.points]
    assert changes[0] is None and abs(changes[1] or 0) < 10 and (changes[2] or 0) > 80
    assert [p.step for p in history.points] == [False, False, True]
    (step,) = history.steps
    assert (step.run, step.commit, step.metric) == ("run3", "c0ffee3", "p50")


def test_overlapping_intervals_are_noise_not_a_step() -> None:
    assert is_step(MeanCI(3, 100.0, 5.0, 30.0), MeanCI(3, 125.0, 5.0, 30.0), 0.1) == (25.0, False)
    assert is_step(MeanCI(3, 100.0, 1.0, 3.0), MeanCI(3, 125.0, 1.0, 3.0), 0.1) == (25.0, True)
    assert is_step(MeanCI(1, 100.0, None, None), MeanCI(1, 105.0, None, None), 0.1)[1] is False


def test_unknown_metrics_and_a_single_run_are_usage_errors(tmp_path: Path) -> None:
    assert parse_metrics(None) == ["throughput", "p50", "p99"]
    runner = CliRunner()
    result = runner.invoke(app, ["history", "a", "b", "--metric", "speed"])
    assert result.exit_code == 2 and "--metric 'speed'" in result.stderr
    (one,) = _runs(tmp_path, [200.0])
    result = runner.invoke(app, ["history", str(one)])
    assert result.exit_code == 2 and "at least two" in result.stderr


def test_the_cli_prints_the_table_and_draws_the_figure(tmp_path: Path) -> None:
    runs = _runs(tmp_path, [200.0, 205.0, 400.0])
    figure = tmp_path / "trend.png"
    result = CliRunner().invoke(
        app, ["history", *map(str, runs), "--metric", "p50,throughput", "--figure", str(figure)]
    )
    assert result.exit_code == 0, result.output
    assert "STEP" in result.stdout and "1 step change(s):" in result.stdout
    assert result.stdout.index("run1") < result.stdout.index("run3")
    assert figure.stat().st_size > 5000
    data = history_figure(build_history(runs, ["p50", "throughput"]))
    assert [p.ylabel for p in data.panels] == ["p50 (ms)", "throughput (msg/s)"]
    assert data.panels[0].marked_x == (2.0,) and data.width == 7.0


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_machine_formats_carry_every_value_and_the_steps(tmp_path: Path, fmt: str) -> None:
    runs = _runs(tmp_path, [200.0, 400.0])
    result = CliRunner().invoke(
        app, ["history", *map(str, runs), "--metric", "p50", "--format", fmt]
    )
    assert result.exit_code == 0, result.output
    if fmt == "json":
        data = json.loads(result.stdout)
        assert len(data["points"]) == 2 and len(data["steps"]) == 1
    else:
        lines = result.stdout.splitlines()
        assert lines[0].startswith("run,created_utc,commit,cell,metric,mean,ci95,n,change_pct,step")
        assert len(lines) == 3
