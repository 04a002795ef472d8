"""The generator's ceiling: step the offered rate until one worker leaves its bounds.

The search is pure logic around an injected ``measure(rate) -> CeilingStep`` and clock:

1. climb a geometric ladder from ``start`` (x ``factor`` per step) while steps pass, up to
   ``max_rate``;
2. if the very first step fails, descend (/ ``factor``) until one passes or ``min_rate``;
3. between the highest passing and the lowest failing rate, bisect geometrically
   ``refine`` times.

It stops early when ``max_steps`` steps were run or ``budget_s`` seconds have passed
(checked before each step; a step is never cut short). A failing step whose relay used more
CPU than ``bounds.relay_cpu_cores`` ends the search at once and is reported as
``limited_by="relay"``: the relay, not the generator, was the limit, so the ceiling found so
far is a lower bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mqbench.calibration.model import CeilingBounds, CeilingStep, CellFigures, LimitedBy

MeasureFn = Callable[[float], CeilingStep]
"""Run one step at an offered rate (msg/s for the worker) and judge it."""


@dataclass(frozen=True)
class SearchPlan:
    """The ladder and the limits of one ceiling search."""

    start: float = 250.0
    factor: float = 2.0
    max_rate: float = 64_000.0
    min_rate: float = 25.0
    refine: int = 2
    max_steps: int = 10
    budget_s: float = 180.0
    resolution: float = 0.05
    """Stop refining when the failing rate is within this fraction of the passing one."""


@dataclass
class SearchOutcome:
    """What the search found: the ceiling (None: nothing passed) and why it stopped."""

    ceiling: float | None
    limited_by: LimitedBy
    steps: list[CeilingStep] = field(default_factory=list)


def judge_figures(figures: CellFigures, bounds: CeilingBounds) -> list[str]:
    """:func:`judge` of one measured cell's figures."""
    return judge(
        lag_p99_us=figures.send_lag_p99_us,
        worker_cpu_fraction=figures.worker_cpu_fraction,
        generator_saturated=figures.generator_saturated,
        generator_reason=figures.generator_reason,
        lost=figures.lost,
        received=figures.received,
        bounds=bounds,
    )


def judge(
    *,
    lag_p99_us: float | None,
    worker_cpu_fraction: float | None,
    generator_saturated: bool,
    generator_reason: str | None,
    lost: int,
    received: int,
    bounds: CeilingBounds,
) -> list[str]:
    """Why a step is out of bounds (empty: it passed)."""
    reasons = []
    if received == 0:
        reasons.append("nothing was received")
    if lag_p99_us is None:
        reasons.append("no send lag measured")
    elif lag_p99_us > bounds.lag_p99_us:
        reasons.append(f"send lag p99 {lag_p99_us:,.0f} µs > {bounds.lag_p99_us:,.0f} µs")
    if worker_cpu_fraction is not None and worker_cpu_fraction >= bounds.worker_cpu_fraction:
        reasons.append(
            f"worker CPU {100 * worker_cpu_fraction:.0f}% >= "
            f"{100 * bounds.worker_cpu_fraction:.0f}% of a core"
        )
    if generator_saturated:
        reasons.append(f"generator saturated ({generator_reason or 'self-check'})")
    if lost > 0:
        reasons.append(f"{lost} messages lost")
    return reasons


def relay_bound(step: CeilingStep, bounds: CeilingBounds) -> bool:
    """True when a failing step's relay was itself at its CPU limit."""
    figures = step.figures
    return (
        not step.passed
        and figures is not None
        and figures.peer_cpu_cores is not None
        and figures.peer_cpu_cores >= bounds.relay_cpu_cores
    )


def search_ceiling(
    measure: MeasureFn,
    plan: SearchPlan,
    bounds: CeilingBounds,
    clock: Callable[[], float] = time.monotonic,
) -> SearchOutcome:
    """Run the search described in the module docstring."""
    steps: list[CeilingStep] = []
    started = clock()
    best: float | None = None
    worst: float | None = None

    def out_of_time() -> LimitedBy | None:
        if len(steps) >= plan.max_steps:
            return "steps"
        if clock() - started >= plan.budget_s:
            return "budget"
        return None

    def run(rate: float) -> CeilingStep:
        step = measure(rate)
        steps.append(step)
        return step

    rate = plan.start
    first = run(rate)
    if first.passed:
        best = rate
        while True:
            if rate >= plan.max_rate:
                return SearchOutcome(best, "max_rate", steps)
            if (stop := out_of_time()) is not None:
                return SearchOutcome(best, stop, steps)
            rate = min(rate * plan.factor, plan.max_rate)
            step = run(rate)
            if not step.passed:
                worst = rate
                if relay_bound(step, bounds):
                    return SearchOutcome(best, "relay", steps)
                break
            best = rate
    else:
        worst = rate
        if relay_bound(first, bounds):
            return SearchOutcome(None, "relay", steps)
        while best is None:
            if rate / plan.factor < plan.min_rate:
                return SearchOutcome(None, "min_rate", steps)
            if (stop := out_of_time()) is not None:
                return SearchOutcome(None, stop, steps)
            rate = rate / plan.factor
            step = run(rate)
            if step.passed:
                best = rate
            else:
                worst = rate
    assert best is not None and worst is not None
    for _ in range(plan.refine):
        if worst <= best * (1 + plan.resolution):
            break
        if (stop := out_of_time()) is not None:
            return SearchOutcome(best, stop, steps)
        rate = math.sqrt(best * worst)
        step = run(rate)
        if step.passed:
            best = rate
        else:
            worst = rate
            if relay_bound(step, bounds):
                return SearchOutcome(best, "relay", steps)
    return SearchOutcome(best, "generator", steps)
