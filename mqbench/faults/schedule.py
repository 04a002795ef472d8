"""When faults are injected and recovered: exponential (MTTF/MTTR) or fixed schedules.

Times are seconds relative to the start of the fault phase (the end of the warm-up). Every
fault is recovered before the phase ends, so the run always finishes healthy and the
drain measures recovery.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class FaultWindow:
    """One fault: injected at ``start_s``, recovered at ``end_s`` (relative seconds)."""

    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        """How long the fault lasts."""
        return self.end_s - self.start_s


def exponential_schedule(
    mttf_s: float, mttr_s: float, horizon_s: float, seed: int, *, max_faults: int = 10_000
) -> list[FaultWindow]:
    """Alternate exponentially distributed up times (mean MTTF) and down times (mean MTTR).

    Faults that would not be recovered before ``horizon_s`` are cut at the horizon; a
    fault is never started in the last 100 ms.
    """
    rng = random.Random(seed)
    windows: list[FaultWindow] = []
    t = 0.0
    while len(windows) < max_faults:
        t += rng.expovariate(1.0 / mttf_s)
        if t >= horizon_s - 0.1:
            break
        down = rng.expovariate(1.0 / mttr_s)
        end = min(t + down, horizon_s)
        windows.append(FaultWindow(t, end))
        t = end
    return windows


def fixed_schedule(
    every_s: float, duration_s: float, horizon_s: float, first_s: float | None = None
) -> list[FaultWindow]:
    """A fault of ``duration_s`` every ``every_s`` seconds (first at ``first_s``)."""
    windows: list[FaultWindow] = []
    t = every_s if first_s is None else first_s
    while t < horizon_s - 0.1 and len(windows) < 10_000:
        windows.append(FaultWindow(t, min(t + duration_s, horizon_s)))
        t += every_s
    return windows


def downtime_fraction(windows: list[FaultWindow], horizon_s: float) -> float:
    """Share of the horizon spent in faults."""
    if horizon_s <= 0:
        return 0.0
    return sum(w.duration_s for w in windows) / horizon_s
