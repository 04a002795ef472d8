"""The ceiling search: a fake measurement (a generator that holds up to some rate) and an
injected clock."""

from __future__ import annotations

import pytest

from mqbench.calibration.ceiling import SearchPlan, judge, search_ceiling
from mqbench.calibration.model import CeilingBounds, CeilingStep, CellFigures

BOUNDS = CeilingBounds()


def figures(rate: float, relay_cpu: float = 0.1) -> CellFigures:
    return CellFigures(
        offered_msg_s=rate,
        pairs=10,
        rate_per_publisher=rate / 10,
        payload_bytes=64,
        window_s=3.0,
        sent=100,
        received=100,
        lost=0,
        latency_p50_us=100.0,
        latency_p99_us=200.0,
        from_send_p50_us=90.0,
        from_send_p99_us=180.0,
        send_lag_p50_us=5.0,
        send_lag_p99_us=20.0,
        generator_cpu_cores=0.2,
        worker_cpu_fraction=0.2,
        peer_cpu_cores=relay_cpu,
        generator_saturated=False,
    )


class FakeGenerator:
    """Holds its bounds up to ``limit`` msg/s; each step takes ``step_s`` of fake time."""

    def __init__(self, limit: float, step_s: float = 5.0, relay_cpu_above: float | None = None):
        self.limit = limit
        self.step_s = step_s
        self.relay_cpu_above = relay_cpu_above
        self.now = 0.0
        self.rates: list[float] = []

    def clock(self) -> float:
        return self.now

    def measure(self, rate: float) -> CeilingStep:
        self.rates.append(rate)
        self.now += self.step_s
        passed = rate <= self.limit
        relay = 0.95 if self.relay_cpu_above is not None and rate > self.relay_cpu_above else 0.1
        return CeilingStep(
            offered_msg_s=rate,
            passed=passed,
            reasons=[] if passed else ["send lag p99 too high"],
            figures=figures(rate, relay),
        )


def test_the_search_climbs_until_a_step_fails_then_bisects_between_pass_and_fail() -> None:
    gen = FakeGenerator(limit=1300)
    outcome = search_ceiling(gen.measure, SearchPlan(start=250, refine=2), BOUNDS, gen.clock)
    assert gen.rates[:4] == [250, 500, 1000, 2000]
    assert gen.rates[4] == pytest.approx((1000 * 2000) ** 0.5)  # 1414: fails
    assert gen.rates[5] == pytest.approx((1000 * 1414.2) ** 0.5, rel=1e-3)  # 1189: passes
    assert outcome.ceiling == pytest.approx(1189.2, rel=1e-3)
    assert outcome.limited_by == "generator"
    assert [s.offered_msg_s for s in outcome.steps] == gen.rates


def test_a_failing_first_step_makes_the_search_descend_until_one_passes() -> None:
    gen = FakeGenerator(limit=100)
    outcome = search_ceiling(gen.measure, SearchPlan(start=250, refine=0), BOUNDS, gen.clock)
    assert gen.rates == [250, 125, 62.5]
    assert outcome.ceiling == 62.5
    assert outcome.limited_by == "generator"


def test_nothing_passing_down_to_the_minimum_rate_gives_no_ceiling() -> None:
    gen = FakeGenerator(limit=1)
    outcome = search_ceiling(
        gen.measure, SearchPlan(start=100, min_rate=20, refine=0), BOUNDS, gen.clock
    )
    assert gen.rates == [100, 50, 25]
    assert outcome.ceiling is None
    assert outcome.limited_by == "min_rate"


def test_reaching_the_top_of_the_ladder_says_so() -> None:
    gen = FakeGenerator(limit=10**9)
    outcome = search_ceiling(gen.measure, SearchPlan(start=1000, max_rate=4000), BOUNDS, gen.clock)
    assert gen.rates == [1000, 2000, 4000]
    assert outcome.ceiling == 4000
    assert outcome.limited_by == "max_rate"


def test_the_step_budget_bounds_the_search() -> None:
    gen = FakeGenerator(limit=10**9)
    outcome = search_ceiling(
        gen.measure, SearchPlan(start=100, max_rate=10**6, max_steps=3), BOUNDS, gen.clock
    )
    assert len(gen.rates) == 3
    assert outcome.ceiling == 400
    assert outcome.limited_by == "steps"


def test_the_time_budget_is_checked_before_each_step_and_never_cuts_one_short() -> None:
    gen = FakeGenerator(limit=10**9, step_s=10.0)
    outcome = search_ceiling(
        gen.measure, SearchPlan(start=100, max_rate=10**6, budget_s=25.0), BOUNDS, gen.clock
    )
    assert gen.rates == [100, 200, 400]  # at t=20 s one more step may start; at 30 s none
    assert outcome.limited_by == "budget"
    assert outcome.ceiling == 400


def test_a_failure_where_the_relay_was_at_its_cpu_limit_is_charged_to_the_relay() -> None:
    gen = FakeGenerator(limit=1000, relay_cpu_above=1000)
    outcome = search_ceiling(gen.measure, SearchPlan(start=250), BOUNDS, gen.clock)
    assert gen.rates == [250, 500, 1000, 2000]
    assert outcome.ceiling == 1000
    assert outcome.limited_by == "relay"


def verdict(**changes: object) -> list[str]:
    args: dict[str, object] = {
        "lag_p99_us": 900.0,
        "worker_cpu_fraction": 0.5,
        "generator_saturated": False,
        "generator_reason": None,
        "lost": 0,
        "received": 10,
        **changes,
    }
    return judge(bounds=BOUNDS, **args)  # type: ignore[arg-type]


def test_a_step_passes_only_within_every_bound() -> None:
    assert verdict() == []
    assert verdict(lag_p99_us=1500.0) == ["send lag p99 1,500 µs > 1,000 µs"]
    assert verdict(lag_p99_us=None) == ["no send lag measured"]
    assert verdict(worker_cpu_fraction=0.95) == ["worker CPU 95% >= 90% of a core"]
    assert verdict(generator_saturated=True, generator_reason="late") == [
        "generator saturated (late)"
    ]
    assert verdict(lost=3) == ["3 messages lost"]
    assert "nothing was received" in verdict(received=0)
