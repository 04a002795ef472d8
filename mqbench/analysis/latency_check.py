"""Is a cell's latency the broker's or the generator's? (the ``latency`` verdict).

The headline latency runs from each message's intended send time, so it includes the
send lag: how late the generator handed the message to its client. When that lag is a
material share of the latency, the figure describes mqbench, not the broker, and the cell
is marked ``generator-bound`` (docs/results.md). This verdict is separate from the
throughput self-check (``generator_saturated``): a cell can deliver every message on time
in aggregate and still have its latency shaped by the generator.

The rule, on the exact percentiles of the measured window:

    generator-bound  if  send_lag.p50 > 10 % of latency.p50  and  send_lag.p50 > allowance p50
                     or  send_lag.p99 > 25 % of latency.p99  and  send_lag.p99 > allowance p99

The allowances are what the machine itself imposes on any process that sleeps and wakes:
with a calibrated wake-up floor under the policy the cell's workers ran
(``cells[].timing.wakeup_floor``, ``mqbench calibrate``), allowance p50 = the floor's p50
and allowance p99 = ``FLOOR_P99_FACTOR`` x the floor's p99; lag within them is the
hypervisor's and the kernel's wake-up noise, which the broker pays as well, not the
generator's doing. Without a floor, and never below, the allowance is ``FLOOR_US``: that
much is the cost of handing a message to a client in Python (one clock read and a function
call) and no broker is that fast here. docs/calibration.md has the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

P50_SHARE: Final = 0.10
"""Send-lag p50 above this share of the headline p50 marks the latency generator-bound."""
P99_SHARE: Final = 0.25
"""Send-lag p99 above this share of the headline p99 marks the latency generator-bound."""
FLOOR_US: Final = 5.0
"""Send lag at or below this (µs) is never counted against a cell."""
FLOOR_P99_FACTOR: Final = 2.0
"""Send-lag p99 within this many times the machine's wake-up p99 is the machine's."""

LatencyVerdictKind = Literal["ok", "generator-bound", "n/a"]


class _Percentiles(Protocol):
    @property
    def p50_us(self) -> float: ...

    @property
    def p99_us(self) -> float: ...


@dataclass(frozen=True)
class LatencyVerdict:
    """``kind`` and, when generator-bound, the figures that made it so."""

    kind: LatencyVerdictKind
    reason: str | None = None

    @property
    def generator_bound(self) -> bool:
        """True when the generator, not the broker, shaped the latency."""
        return self.kind == "generator-bound"


def allowances(floor: _Percentiles | None) -> tuple[float, float]:
    """Send lag (µs) at p50 and p99 that never counts against a cell, given the machine's
    wake-up floor (None: not calibrated)."""
    if floor is None:
        return FLOOR_US, FLOOR_US
    return max(FLOOR_US, floor.p50_us), max(FLOOR_US, FLOOR_P99_FACTOR * floor.p99_us)


def judge_latency(
    latency: _Percentiles | None,
    send_lag: _Percentiles | None,
    floor: _Percentiles | None = None,
) -> LatencyVerdict:
    """Apply the rule above; ``n/a`` when the cell has no deliveries or no send records.

    ``floor``: the machine's wake-up latency (µs) under the cell's scheduling policy.
    """
    if latency is None or send_lag is None:
        return LatencyVerdict("n/a")
    reasons = []
    allow50, allow99 = allowances(floor)
    for name, share, lag_us, lat_us, allow in (
        ("p50", P50_SHARE, send_lag.p50_us, latency.p50_us, allow50),
        ("p99", P99_SHARE, send_lag.p99_us, latency.p99_us, allow99),
    ):
        if lag_us > allow and lag_us > share * lat_us:
            pct = 100 * lag_us / lat_us if lat_us > 0 else float("inf")
            above = ""
            if floor is not None:
                what = "p50" if name == "p50" else f"{FLOOR_P99_FACTOR:g}x p99"
                above = f", above the machine's wake-up {what} {allow / 1000:.3f} ms"
            reasons.append(
                f"send lag {name} {lag_us / 1000:.3f} ms is {pct:.0f}% of latency {name} "
                f"{lat_us / 1000:.3f} ms (limit {100 * share:.0f}%{above})"
            )
    if reasons:
        return LatencyVerdict("generator-bound", "; ".join(reasons))
    return LatencyVerdict("ok")
