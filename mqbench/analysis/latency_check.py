"""Is a cell's latency the broker's or the generator's? (the ``latency`` verdict).

The headline latency runs from each message's intended send time, so it includes the
send lag: how late the generator handed the message to its client. When that lag is a
material share of the latency, the figure describes mqbench, not the broker, and the cell
is marked ``generator-bound`` (docs/results.md). This verdict is separate from the
throughput self-check (``generator_saturated``): a cell can deliver every message on time
in aggregate and still have its latency shaped by the generator.

With the machine's wake-up floor under the policy the cell's workers ran (the calibrated
one, ``cells[].timing.wakeup_floor`` from ``mqbench calibrate``, and the one a probe above
the workers measured during the cell, ``wakeup_during``: the larger at each percentile,
``TimingEntry.machine_floor``), the machine's own wake-up is
what any process that sleeps and wakes pays (the broker's threads too), so only the lag
*beyond* it is the generator's, and that excess is what must be a material share:

    generator-bound  if  send_lag.p50 - floor.p50 > 10 % of latency.p50
                     or  send_lag.p99 > 2 x floor.p99
                         and  send_lag.p99 - floor.p99 > 25 % of latency.p99

The tail has the extra guard because two samples of the same machine noise differ most
there: a lag p99 within ``FLOOR_P99_FACTOR`` x the floor's p99 (issue 21's target for the
generator) is never the generator's. Subtracting the floor keeps the verdict from
flipping on the floor's own run-to-run noise: a lag p50 of 17 µs against a floor p50 of
16 µs is 1 µs of the generator's, not 17. Without a floor the excess cannot be known and
the whole lag counts:

    generator-bound  if  send_lag.p50 > 10 % of latency.p50  and  send_lag.p50 > FLOOR_US
                     or  send_lag.p99 > 25 % of latency.p99  and  send_lag.p99 > FLOOR_US

``FLOOR_US`` is the cost of handing a message to a client in Python (one clock read and a
function call); no broker is that fast here, and no floor figure counts below it.
docs/calibration.md ("What the floor changes in the latency verdict") has the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

P50_SHARE: Final = 0.10
"""Send-lag p50 above this share of the headline p50 marks the latency generator-bound."""
P99_SHARE: Final = 0.25
"""Send-lag p99 above this share of the headline p99 marks the latency generator-bound."""
FLOOR_US: Final = 5.0
"""Send lag at or below this (µs) is never counted against a cell, and no floor figure is
taken as less."""
FLOOR_P99_FACTOR: Final = 2.0
"""Send-lag p99 within this many times the machine's wake-up p99 is the machine's (the
guard of the p99 rule; the floor's p99 itself is what is subtracted)."""

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
    marked_by: tuple[str, ...] = ()
    """Which percentiles' rule marked it: ``("p50",)``, ``("p99",)`` or both."""

    @property
    def generator_bound(self) -> bool:
        """True when the generator, not the broker, shaped the latency."""
        return self.kind == "generator-bound"


@dataclass(frozen=True)
class Allowance:
    """The send lag (µs) of one percentile that is the machine's, not the generator's."""

    subtracted: float
    """Taken off the lag before it is compared with the latency."""
    guard: float
    """Lag at or below this never counts."""


def allowances(floor: _Percentiles | None) -> tuple[Allowance, Allowance]:
    """The p50 and p99 allowances given the machine's wake-up floor (None: not calibrated)."""
    if floor is None:
        return Allowance(0.0, FLOOR_US), Allowance(0.0, FLOOR_US)
    p50 = max(FLOOR_US, floor.p50_us)
    p99 = max(FLOOR_US, floor.p99_us)
    return Allowance(p50, p50), Allowance(p99, max(FLOOR_US, FLOOR_P99_FACTOR * floor.p99_us))


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
    allow50, allow99 = allowances(floor)
    calibrated = floor is not None
    judged = {
        "p50": _judge("p50", P50_SHARE, send_lag.p50_us, latency.p50_us, allow50, calibrated),
        "p99": _judge("p99", P99_SHARE, send_lag.p99_us, latency.p99_us, allow99, calibrated),
    }
    reasons = {name: reason for name, reason in judged.items() if reason is not None}
    if reasons:
        return LatencyVerdict("generator-bound", "; ".join(reasons.values()), tuple(reasons))
    return LatencyVerdict("ok")


def _judge(
    name: str, share: float, lag_us: float, lat_us: float, allow: Allowance, calibrated: bool
) -> str | None:
    """The reason one percentile marks the cell, or None."""
    excess = lag_us - allow.subtracted
    if lag_us <= allow.guard or excess <= share * lat_us:
        return None
    limit = f"(limit {100 * share:.0f}%)"
    if not calibrated:
        return (
            f"send lag {name} {_ms(lag_us)} is {_pct(lag_us, lat_us)} of latency {name} "
            f"{_ms(lat_us)} {limit}"
        )
    return (
        f"send lag {name} {_ms(lag_us)} is {_ms(excess)} above the machine's wake-up {name} "
        f"{_ms(allow.subtracted)}: {_pct(excess, lat_us)} of latency {name} {_ms(lat_us)} "
        f"{limit}"
    )


def _ms(us: float) -> str:
    return f"{us / 1000:.3f} ms"


def _pct(part_us: float, whole_us: float) -> str:
    return f"{100 * part_us / whole_us:.0f}%" if whole_us > 0 else "inf%"
