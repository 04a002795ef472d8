"""The CI gate: thresholds, noise-aware verdicts, JSON output and exit code 3."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from aggregates import agg
from typer.testing import CliRunner

from mqbench.analysis.compare import (
    Options,
    compare_aggregates,
    compare_runs,
    noise_halfwidth,
    parse_thresholds,
)
from mqbench.analysis.repeats import RepeatAggregate, mean_ci
from mqbench.cli.report_cmd import compare, report
from mqbench.errors import UsageError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "20260101T000000Z-fixture"


def one(result_cells: list, metric: str) -> dict:  # type: ignore[type-arg]
    (row,) = [m for c in result_cells for m in c.metrics if m["metric"] == metric]
    return row


def test_default_thresholds_are_throughput_p95_and_loss() -> None:
    t = parse_thresholds(None)
    assert [str(x) for x in t.values()] == ["throughput=-5%", "p95=+10%", "loss=+0.1"]
    assert t["loss"].relative is False and t["p95"].relative is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("throughput=+5%", "higher throughput is better.*throughput=-5%"),
        ("p95=-10%", "lower p95 is better.*p95=\\+10%"),
        ("latency=5%", "unknown metric 'latency'"),
        ("p95", "expected METRIC="),
        ("p95=ten", "expected METRIC="),
        ("p95=1%,p95=2%", "given twice"),
        (" , ", "no thresholds"),
    ],
)
def test_malformed_thresholds_raise_usage_errors_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_thresholds(text)


def test_unsigned_threshold_means_the_bad_direction() -> None:
    t = parse_thresholds("throughput=5%,p99=2")
    assert (t["throughput"].value, t["p99"].value, t["p99"].relative) == (5.0, 2.0, False)


def test_single_runs_regress_when_the_change_crosses_the_threshold() -> None:
    base = [agg(latency_p95_us=[12_000.0], throughput_msg_s=[1000.0])]
    cur = [agg(latency_p95_us=[13_300.0], throughput_msg_s=[960.0])]
    res = compare_aggregates(base, cur, parse_thresholds("throughput=-5%,p95=+10%"))
    assert one(res.cells, "p95")["verdict"] == "regression"  # +10.8 % > 10 %
    assert one(res.cells, "throughput")["verdict"] == "ok"  # -4 % within 5 %
    assert res.exit_code == 3 and res.regressions == 1


def test_improvements_are_reported_and_do_not_fail_the_gate() -> None:
    res = compare_aggregates(
        [agg(throughput_msg_s=[1000.0])],
        [agg(throughput_msg_s=[1100.0])],
        parse_thresholds("throughput=-5%"),
    )
    assert one(res.cells, "throughput")["verdict"] == "improvement" and res.exit_code == 0


def test_absolute_loss_threshold_is_in_percentage_points() -> None:
    t = parse_thresholds("loss=+0.1")
    ok = compare_aggregates([agg(loss_pct=[0.0])], [agg(loss_pct=[0.1])], t)
    bad = compare_aggregates([agg(loss_pct=[0.0])], [agg(loss_pct=[0.11])], t)
    assert one(ok.cells, "loss")["verdict"] == "ok"
    assert one(bad.cells, "loss")["verdict"] == "regression"


def test_welch_half_width_matches_the_hand_computation() -> None:
    # sb = sc = 2, n = 3: se = sqrt(4/3 + 4/3) = 1.632993, df = 4, t = 2.776445
    h = noise_halfwidth(mean_ci([10.0, 12.0, 14.0]), mean_ci([15.0, 17.0, 19.0]))
    assert h == pytest.approx(2.776445 * 1.632993, abs=1e-5)


def test_repeats_absorb_a_change_that_is_within_the_noise() -> None:
    base = agg(latency_p95_us=[10_000.0, 12_000.0, 14_000.0])
    cur = agg(latency_p95_us=[15_000.0, 17_000.0, 19_000.0])
    rel = compare_aggregates([base], [cur], parse_thresholds("p95=+10%"))
    row = one(rel.cells, "p95")
    # change 5 ms, noise 4.534 ms, limit 1.2 ms: 5 - 4.534 = 0.466 < 1.2 -> ok
    assert row["change"] == pytest.approx(5.0) and row["noise"] == pytest.approx(4.5339, abs=1e-3)
    assert row["verdict"] == "ok" and rel.exit_code == 0
    tight = compare_aggregates([base], [cur], parse_thresholds("p95=+0.4"))
    assert one(tight.cells, "p95")["verdict"] == "regression"  # 0.466 ms > 0.4 ms


def test_one_sided_repeats_use_that_sides_deviation_for_both() -> None:
    h = noise_halfwidth(mean_ci([10.0, 12.0, 14.0]), mean_ci([20.0]))
    # s = 2, se = 2 * sqrt(1/3 + 1) = 2.309401, t(0.975, 2) = 4.302653
    assert h == pytest.approx(4.302653 * 2.309401, abs=1e-5)
    assert noise_halfwidth(mean_ci([1.0]), mean_ci([2.0])) == 0.0


def test_missing_metrics_and_cells_are_reported_as_missing() -> None:
    res = compare_aggregates(
        [agg("a", ack_latency_p95_us=[100.0]), agg("gone")],
        [agg("a"), agg("new")],
        parse_thresholds("ack_p95=+10%"),
    )
    verdicts = {c.cell: c.verdict for c in res.cells}
    assert verdicts == {"a": "missing", "gone": "missing", "new": "missing"}
    assert [c.status for c in res.cells] == ["both", "baseline only", "current only"]
    assert res.exit_code == 0 and res.counts()["missing"] == 3


def test_saturated_cells_get_a_note() -> None:
    res = compare_aggregates(
        [agg(throughput_msg_s=[1.0])],
        [agg(saturated=True, throughput_msg_s=[1.0])],
        parse_thresholds(None),
    )
    assert any("current: generator saturated" in n for n in res.cells[0].notes)


def _slower_copy(tmp_path: Path, factor: float) -> Path:
    current = tmp_path / "current"
    shutil.copytree(FIXTURE, current)
    for path in current.glob("cells/alpha-64B-1pairs*/summary.json"):
        data = json.loads(path.read_text())
        data["throughput_msg_s"] *= factor
        path.write_text(json.dumps(data))
    return current


def test_compare_runs_flags_a_throughput_drop_in_one_cell(tmp_path: Path) -> None:
    current = _slower_copy(tmp_path, 0.8)
    res = compare_runs(FIXTURE, current, "throughput=-5%", options=Options(allow_invalid=True))
    verdicts = {c.cell: c.verdict for c in res.cells}
    assert verdicts["alpha-64B-1pairs-1000hz-qos0"] == "regression"
    assert [v for k, v in verdicts.items() if k != "alpha-64B-1pairs-1000hz-qos0"] == ["ok"] * 3


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(report)
    app.command()(compare)
    return app


def test_compare_cli_exits_3_on_regression_and_prints_json(tmp_path: Path) -> None:
    current = _slower_copy(tmp_path, 0.8)
    result = CliRunner().invoke(
        _cli(), ["compare", str(FIXTURE), str(current), "--format", "json", "--allow-invalid"]
    )
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "regression" and data["counts"]["regression"] == 1


def test_compare_cli_exits_0_when_nothing_regressed(tmp_path: Path) -> None:
    # the fixture has a † cell, a § cell and a ‡ cell: both flags are needed to judge them all
    args = ["compare", str(FIXTURE), str(FIXTURE), "--allow-invalid", "--allow-generator-bound"]
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "OK: 12 ok"


def test_compare_cli_rejects_a_bad_threshold_with_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        _cli(), ["compare", str(FIXTURE), str(FIXTURE), "--threshold", "throughput=+5%"]
    )
    assert result.exit_code == 2
    assert "error:" in result.stderr and "Traceback" not in result.output


def _latency_bound_copy(tmp_path: Path) -> Path:
    current = tmp_path / "bound"
    shutil.copytree(FIXTURE, current)
    for path in current.glob("cells/alpha-64B-1pairs*/summary.json"):
        data = json.loads(path.read_text())
        data.update(schema_version=3, latency_verdict="generator-bound", latency_reason="lag")
        path.write_text(json.dumps(data))
    return current


def test_latency_of_generator_bound_cells_is_refused_not_judged() -> None:
    bound = agg(latency_p95_us=[500.0], throughput_msg_s=[100.0])
    bound = RepeatAggregate(**{**bound.__dict__, "any_latency_bound": True})
    res = compare_aggregates(
        [agg(latency_p95_us=[100.0], throughput_msg_s=[100.0])],
        [bound],
        parse_thresholds("p95=+10%,throughput=-5%"),
    )
    assert one(res.cells, "p95")["verdict"] == "refused"
    assert one(res.cells, "throughput")["verdict"] == "ok"  # not from the intended time
    assert res.cells[0].verdict == "refused" and res.exit_code == 4
    assert any("--allow-generator-bound" in n for n in res.cells[0].notes)


def test_allow_generator_bound_judges_latency_anyway() -> None:
    bound = agg(latency_p95_us=[500.0])
    bound = RepeatAggregate(**{**bound.__dict__, "any_latency_bound": True})
    res = compare_aggregates(
        [agg(latency_p95_us=[100.0])],
        [bound],
        parse_thresholds("p95=+10%"),
        allow_generator_bound=True,
    )
    assert one(res.cells, "p95")["verdict"] == "regression" and res.exit_code == 3


def test_compare_cli_exits_4_when_latency_is_generator_bound(tmp_path: Path) -> None:
    current = _latency_bound_copy(tmp_path)
    args = ["compare", str(FIXTURE), str(current), "--allow-invalid"]  # the fixture's † cell
    result = CliRunner().invoke(_cli(), args)
    assert result.exit_code == 4, result.output
    assert result.stdout.splitlines()[-1].startswith("REFUSED:")
    allowed = CliRunner().invoke(_cli(), [*args, "--allow-generator-bound"])
    assert allowed.exit_code == 0, allowed.output
