"""The latency verdict: when the generator's send lag, not the broker, shaped the latency."""

from __future__ import annotations

from dataclasses import dataclass

from mqbench.analysis.latency_check import judge_latency


@dataclass
class P:
    p50_us: float
    p99_us: float


def test_small_lag_leaves_the_latency_ok() -> None:
    verdict = judge_latency(P(400.0, 900.0), P(2.0, 60.0))
    assert verdict.kind == "ok" and verdict.reason is None and not verdict.generator_bound


def test_lag_above_ten_percent_of_p50_marks_the_latency_generator_bound() -> None:
    # the 1,000 msg/s case: lag p50 0.54 ms inside a 0.83 ms headline p50
    verdict = judge_latency(P(830.0, 1526.0), P(540.0, 1264.0))
    assert verdict.generator_bound
    assert verdict.reason is not None
    assert "send lag p50 0.540 ms is 65% of latency p50 0.830 ms (limit 10%)" in verdict.reason
    assert "send lag p99 1.264 ms is 83% of latency p99 1.526 ms (limit 25%)" in verdict.reason


def test_a_lag_tail_alone_marks_the_latency_generator_bound() -> None:
    verdict = judge_latency(P(300.0, 800.0), P(1.0, 250.0))
    assert verdict.generator_bound
    assert verdict.reason is not None and "p99" in verdict.reason and "p50" not in verdict.reason


def test_the_limits_are_exclusive() -> None:
    assert judge_latency(P(300.0, 800.0), P(30.0, 200.0)).kind == "ok"
    assert judge_latency(P(300.0, 800.0), P(30.1, 200.0)).generator_bound


def test_lag_below_the_floor_never_counts_even_for_a_tiny_latency() -> None:
    assert judge_latency(P(20.0, 30.0), P(5.0, 5.0)).kind == "ok"
    assert judge_latency(P(20.0, 30.0), P(5.1, 5.0)).generator_bound


def test_cells_without_deliveries_or_sends_are_not_judged() -> None:
    assert judge_latency(None, P(1.0, 1.0)).kind == "n/a"
    assert judge_latency(P(1.0, 1.0), None).kind == "n/a"


def test_the_cli_results_table_marks_a_generator_bound_latency_with_its_reason_below() -> None:
    import dataclasses
    from pathlib import Path

    from mqbench.analysis.summary import read_summary_json
    from mqbench.cli.tables import results_view

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "report"
    path = next(fixture.glob("*/cells/alpha-64B-1pairs-1000hz-qos0/summary.json"))
    ok = dataclasses.replace(read_summary_json(path), latency_verdict="ok")
    bound = dataclasses.replace(
        ok, cell_id="bound", latency_verdict="generator-bound", latency_reason="send lag p50 x"
    )
    lines = [line.plain for line in results_view([ok, bound], 100).lines(100)]
    row = next(line for line in lines if line.startswith("bound "))
    assert row.endswith("‡1")
    assert "‡1 bound: latency generator-bound: send lag p50 x" in lines
    alpha = next(line for line in lines if line.startswith("alpha"))
    assert alpha.endswith("ok")


def test_lag_within_the_machines_wakeup_floor_is_not_the_generators() -> None:
    # the real-time 4,000 msg/s cell: lag p50 16 µs is 26 % of a 62 µs p50, and the
    # machine's own wake-up p50 under SCHED_FIFO + DMA latency 0 is 16 µs
    floor = P(16.0, 26.0)
    assert judge_latency(P(62.0, 150.0), P(16.0, 50.0)).generator_bound
    assert judge_latency(P(62.0, 150.0), P(16.0, 50.0), floor).kind == "ok"


def test_lag_above_twice_the_wakeup_p99_still_marks_the_generator() -> None:
    floor = P(16.0, 26.0)
    verdict = judge_latency(P(62.0, 150.0), P(10.0, 52.1), floor)
    assert verdict.generator_bound
    assert verdict.reason is not None
    assert "above the machine's wake-up 2x p99 0.052 ms" in verdict.reason
    assert judge_latency(P(62.0, 150.0), P(10.0, 52.0), floor).kind == "ok"


def test_a_floor_never_lowers_the_allowance_below_the_python_cost() -> None:
    assert judge_latency(P(20.0, 30.0), P(5.0, 5.0), P(1.0, 1.0)).kind == "ok"
    assert judge_latency(P(20.0, 30.0), P(5.1, 5.0), P(1.0, 1.0)).generator_bound
