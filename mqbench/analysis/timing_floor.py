"""The timing floor of the CI gate: how much of a latency change two runs without repeats
show as the machine's and the tool's own timing noise (docs/ci.md, "The timing floor").

Without repeats ``compare`` cannot estimate the run-to-run noise of a latency percentile
(its half-width is 0), yet on a virtual machine two back-to-back runs of the same scenario
differ by more than a 10 % threshold at sub-millisecond latencies: every hop of a message
waits for a process to wake up, and how late wake-ups come changes from run to run. Each
run measures that timing itself, per cell:

- the send lag (summary ``send_lag``): how late the generator's own timed wake-ups handed
  messages out. The publish loop arms its timer ahead by about the 90th percentile of its
  recent wake-ups and busy-waits the rest (docs/performance.md), so the lag shows only the
  wake-ups that came later than usual, and its tail (p99.9) is how late the machine ran a
  timed task in that run;
- the machine's wake-up latency under the workers' policy: the calibrated floor
  (``cells[].timing.wakeup_floor``, ``mqbench calibrate``) and the one a probe measured
  during the cell (``cells[].timing.wakeup_during``), the larger at each percentile.

The floor of a latency percentile is the largest of these figures over both runs
(:data:`LAG_SOURCE`, :data:`WAKEUP_SOURCE`), at most half the baseline value
(:data:`CAP_SHARE`); the gate judges a latency change only beyond the larger of the
threshold's limit and the floor, and only when neither run has repeats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from mqbench.analysis.repeats import base_id
from mqbench.records.cell_entry import CellEntry
from mqbench.records.timing import WakeupFloor, combined_floor

LAG_SOURCE: Final[dict[str, str]] = {
    "p50": "p999",
    "p95": "p999",
    "p99": "p999",
    "p999": "max",
}
"""Latency percentile -> the send-lag percentile (summary ``send_lag``) its floor takes:
the lag's tail, where the late wake-ups show (docs/ci.md has the measured swings)."""
WAKEUP_SOURCE: Final[dict[str, str]] = {
    "p50": "p50",
    "p95": "p99",
    "p99": "p99",
    "p999": "p999",
}
"""Latency percentile -> the machine wake-up percentile its floor takes (the probe
records no p95: the next one up)."""
CAP_SHARE: Final = 0.5
"""The floor is never more than this share of the baseline value: a change of half the
baseline or more is always judged (a doubled p95 is a regression however noisy the runs)."""
LAG_METRIC: Final[dict[str, str]] = {
    q: f"send_lag_{q}_us" for q in ("p50", "p95", "p99", "p999", "max")
}
"""Send-lag percentile -> its name in ``mqbench.analysis.repeats.METRICS``."""

_LABEL: Final = {"p50": "p50", "p95": "p95", "p99": "p99", "p999": "p99.9", "max": "max"}


@dataclass(frozen=True)
class SideTiming:
    """One run's timing figures of one cell (µs; None where not measured)."""

    send_lag_us: Mapping[str, float | None]
    """Send-lag percentile (``p50``, ``p95``, ``p99``, ``p999``, ``max``) -> µs."""
    wakeup: WakeupFloor | None = None


@dataclass(frozen=True)
class Floor:
    """The timing floor of one latency metric of one cell, and what set it."""

    ms: float
    source: str
    """e.g. ``send lag p99.9 of the current run``."""
    measured_ms: float | None = None
    """The figure before the cap, when the cap lowered it (None: not capped)."""


def wakeup_us(floor: WakeupFloor, percentile: str) -> float:
    """The wake-up floor's figure at ``percentile`` (``p50``, ``p99``, ``p999``)."""
    return {"p50": floor.p50_us, "p99": floor.p99_us, "p999": floor.p999_us}[percentile]


def timing_floor(
    percentile: str, baseline: SideTiming, current: SideTiming, baseline_ms: float
) -> Floor | None:
    """The floor of latency ``percentile`` (``p50``, ``p95``, ``p99``, ``p999``) whose
    baseline value is ``baseline_ms``: the largest of both runs' send lag at
    :data:`LAG_SOURCE` and machine wake-up at :data:`WAKEUP_SOURCE`, at most
    :data:`CAP_SHARE` of the baseline; None when neither run measured any (or all are 0)."""
    candidates: list[tuple[float, str]] = []
    for side, timing in (("baseline", baseline), ("current", current)):
        lag_q = LAG_SOURCE[percentile]
        lag = timing.send_lag_us.get(lag_q)
        if lag is not None:
            candidates.append((lag, f"send lag {_LABEL[lag_q]} of the {side} run"))
        if timing.wakeup is not None:
            wake_q = WAKEUP_SOURCE[percentile]
            candidates.append(
                (
                    wakeup_us(timing.wakeup, wake_q),
                    f"machine wake-up {_LABEL[wake_q]} of the {side} run",
                )
            )
    if not candidates or baseline_ms == 0:
        return None
    us, source = max(candidates, key=lambda c: c[0])
    cap = CAP_SHARE * abs(baseline_ms)
    if us / 1000.0 > cap:
        return Floor(cap, f"{source}, capped at {100 * CAP_SHARE:g} % of the baseline", us / 1e3)
    return Floor(us / 1000.0, source) if us > 0 else None


def wakeup_floors(cells: Mapping[str, CellEntry]) -> dict[str, WakeupFloor]:
    """The wake-up floor of every cell that has one, by base id (a run's
    ``LoadedRun.cells``): the calibrated floor and the ones measured during each repeat,
    the larger at each percentile (``TimingEntry.machine_floor``)."""
    out: dict[str, WakeupFloor] = {}
    for cell_id, entry in cells.items():
        floor = entry.timing.machine_floor if entry.timing is not None else None
        if floor is not None:
            key = base_id(cell_id, entry.repeat)
            out[key] = combined_floor(out.get(key), floor) or floor
    return out
