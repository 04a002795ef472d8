"""The live rates come from the workers' own report times, from the first report on."""

from __future__ import annotations

import pytest

from mqbench.records.worker_stats import WorkerStats
from mqbench.workload.rates import RateMeter

S = 1_000_000_000
START = 1_000 * S


def report(t_s: float, sent: int, received: int = 0) -> WorkerStats:
    return WorkerStats(sent=sent, received=received, t_ns=START + int(t_s * S))


def test_the_first_report_after_the_start_gives_the_true_rate() -> None:
    meter = RateMeter()
    meter.start(START)
    meter.add(0, report(0.5, 100, 99))  # 200 msg/s from the first half second on
    assert meter.rates() == pytest.approx((200.0, 198.0))


def test_reports_before_publishing_began_do_not_dilute_the_rate() -> None:
    meter = RateMeter()
    meter.add(0, report(-3.0, 0))  # while connecting: no start yet, ignored
    meter.start(START)
    meter.add(0, report(-0.1, 0))  # taken before the start
    meter.add(0, report(1.0, 200))
    assert meter.rates()[0] == pytest.approx(200.0)


def test_the_same_report_seen_twice_counts_once_and_late_pipe_delivery_does_not_matter() -> None:
    meter = RateMeter()
    meter.start(START)
    for _ in range(3):
        meter.add(0, report(1.0, 200))
    meter.add(0, report(1.5, 300))
    assert meter.rates()[0] == pytest.approx(200.0)


def test_rates_are_summed_over_workers_each_on_its_own_report_times() -> None:
    meter = RateMeter()
    meter.start(START)
    meter.add(0, report(0.5, 50))  # 100 msg/s
    meter.add(1, report(0.7, 210))  # 300 msg/s, reporting at other times
    assert meter.rates()[0] == pytest.approx(400.0)


def test_the_rate_follows_the_last_two_seconds_of_reports() -> None:
    meter = RateMeter(window_s=2.0)
    meter.start(START)
    sent = 0
    for k in range(1, 21):  # 100 msg/s for 5 s, then 300 msg/s
        sent += 50 if k <= 10 else 150
        meter.add(0, report(k * 0.5, sent))
    assert meter.rates()[0] == pytest.approx(300.0)


def test_nothing_reported_yet_is_no_rate() -> None:
    meter = RateMeter()
    assert meter.rates() == (0.0, 0.0)
    meter.start(START)
    assert meter.rates() == (0.0, 0.0)
