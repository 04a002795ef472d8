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
    assert verdict.generator_bound and verdict.marked_by == ("p99",)
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


def test_a_lag_tail_within_twice_the_wakeup_p99_is_the_machines() -> None:
    floor = P(16.0, 26.0)
    assert judge_latency(P(62.0, 150.0), P(10.0, 52.0), floor).kind == "ok"


def test_a_lag_tail_above_twice_the_wakeup_p99_counts_its_excess_over_the_floor() -> None:
    floor = P(16.0, 26.0)
    # 63 µs is above 2 x 26 µs, but only 37 µs of it is the generator's: < 25 % of 150 µs
    assert judge_latency(P(62.0, 150.0), P(10.0, 63.0), floor).kind == "ok"
    verdict = judge_latency(P(62.0, 150.0), P(10.0, 70.0), floor)
    assert verdict.generator_bound and verdict.marked_by == ("p99",)
    assert verdict.reason == (
        "send lag p99 0.070 ms is 0.044 ms above the machine's wake-up p99 0.026 ms: "
        "29% of latency p99 0.150 ms (limit 25%)"
    )


def test_a_lag_just_above_the_wakeup_floor_counts_only_its_excess() -> None:
    # lag p50 17 µs against a probed floor p50 of 14 µs in a 70 µs p50: 3 µs (4 %) is the
    # generator's; before, the whole 17 µs (24 %) marked the cell
    floor = P(14.0, 45.0)
    assert judge_latency(P(70.0, 550.0), P(17.0, 87.0), floor).kind == "ok"
    verdict = judge_latency(P(70.0, 550.0), P(22.1, 87.0), floor)
    assert verdict.generator_bound and verdict.marked_by == ("p50",)
    assert verdict.reason is not None
    assert "0.008 ms above the machine's wake-up p50 0.014 ms: 12% of latency p50" in (
        verdict.reason
    )


def test_the_quiet_sweeps_rows_are_judged_against_the_floor_of_their_policy() -> None:
    # benchmarks/latency_sweep.py, mosquitto, 20 pairs, quiet machine (docs/performance.md);
    # floors: cyclictest's p50/p99 under each policy in the same run
    other, fifo_dma = P(80.0, 120.0), P(31.0, 70.0)
    rows = [  # headline p50/p99, lag p50/p99 (µs), floor, verdict
        (P(98.0, 377.0), P(11.0, 126.0), fifo_dma, "ok"),  # 1,000 msg/s, real time
        (P(70.0, 497.0), P(17.0, 87.0), fifo_dma, "ok"),  # 4,000 msg/s, real time
        (P(104.0, 220.0), P(52.0, 203.0), other, "ok"),  # 1,000 msg/s, normal
        (P(110.0, 831.0), P(59.0, 251.0), other, "ok"),  # 4,000, normal: 131 µs = 16 %
        (P(110.0, 1445.0), P(60.0, 504.0), other, "generator-bound"),  # 384 µs = 27 %
    ]
    for latency, lag, floor, expected in rows:
        assert judge_latency(latency, lag, None).generator_bound  # no floor: every row
        assert judge_latency(latency, lag, floor).kind == expected


def test_a_generator_really_behind_is_marked_whatever_the_floor() -> None:
    # timer: loop wakes ~1 ms late: far above any wake-up floor
    verdict = judge_latency(P(900.0, 2500.0), P(600.0, 1500.0), P(80.0, 120.0))
    assert verdict.generator_bound and verdict.marked_by == ("p50", "p99")


def test_a_floor_never_lowers_the_allowance_below_the_python_cost() -> None:
    # a floor of 1 µs counts as 5 µs: 7 µs of lag is 2 µs of the generator's, 10 % of 20 µs
    assert judge_latency(P(20.0, 30.0), P(7.0, 5.0), P(1.0, 1.0)).kind == "ok"
    assert judge_latency(P(20.0, 30.0), P(7.1, 5.0), P(1.0, 1.0)).generator_bound
