"""Is a cell's latency the broker's or the generator's? (the ``latency`` verdict).

The headline latency runs from each message's intended send time, so it includes the
send lag: how late the generator handed the message to its client. When that lag is a
material share of the latency, the figure describes mqbench, not the broker, and the cell
is marked ``generator-bound`` (docs/results.md). This verdict is separate from the
throughput self-check (``generator_saturated``): a cell can deliver every message on time
in aggregate and still have its latency shaped by the generator.

The rule, on the exact percentiles of the measured window:

    generator-bound  if  send_lag.p50 > 10 % of latency.p50
                     or  send_lag.p99 > 25 % of latency.p99

Lag at or below ``FLOOR_US`` never counts: that much is the cost of handing a message to
a client in Python (one clock read and a function call) and no broker is that fast here.
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


def judge_latency(latency: _Percentiles | None, send_lag: _Percentiles | None) -> LatencyVerdict:
    """Apply the rule above; ``n/a`` when the cell has no deliveries or no send records."""
    if latency is None or send_lag is None:
        return LatencyVerdict("n/a")
    reasons = []
    for name, share, lag_us, lat_us in (
        ("p50", P50_SHARE, send_lag.p50_us, latency.p50_us),
        ("p99", P99_SHARE, send_lag.p99_us, latency.p99_us),
    ):
        if lag_us > FLOOR_US and lag_us > share * lat_us:
            pct = 100 * lag_us / lat_us if lat_us > 0 else float("inf")
            reasons.append(
                f"send lag {name} {lag_us / 1000:.3f} ms is {pct:.0f}% of latency {name} "
                f"{lat_us / 1000:.3f} ms (limit {100 * share:.0f}%)"
            )
    if reasons:
        return LatencyVerdict("generator-bound", "; ".join(reasons))
    return LatencyVerdict("ok")
