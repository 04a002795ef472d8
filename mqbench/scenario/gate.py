"""The CI gate's thresholds: the metrics ``mqbench compare`` judges, their grammar, and the
scenario's ``gate:`` section that keeps them with the scenario (docs/ci.md).

A threshold is the tolerated *worsening* of one metric against the baseline:
``throughput=-5%`` (relative to the baseline mean), ``loss=+0.1`` (absolute, in the
metric's unit). The sign is optional; when given it must point in the metric's bad
direction, so a typo cannot silently turn the gate off. ``compare --threshold`` uses the
same grammar and replaces a scenario's ``gate.thresholds`` as a whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator


@dataclass(frozen=True)
class MetricSpec:
    """A metric the gate can judge: where it comes from, its unit and its good direction."""

    name: str
    source: str  # key of mqbench.analysis.repeats.METRICS
    unit: str
    scale: float  # multiply the source value to get the unit
    higher_is_better: bool
    from_intended: bool = False
    """Latency from the intended send time: includes the generator's send lag."""
    timing_percentile: str | None = None
    """The latency percentile this metric is (``p50`` ... ``p999``): without repeats its
    limit has the timing floor (``mqbench.analysis.timing_floor``); None for the others."""


COMPARE_METRICS: Final[dict[str, MetricSpec]] = {
    m.name: m
    for m in (
        MetricSpec("throughput", "throughput_msg_s", "msg/s", 1.0, True),
        MetricSpec("p50", "latency_p50_us", "ms", 1e-3, False, True, "p50"),
        MetricSpec("p95", "latency_p95_us", "ms", 1e-3, False, True, "p95"),
        MetricSpec("p99", "latency_p99_us", "ms", 1e-3, False, True, "p99"),
        MetricSpec("p999", "latency_p999_us", "ms", 1e-3, False, True, "p999"),
        MetricSpec("loss", "loss_pct", "%", 1.0, False),
        MetricSpec("ack_p95", "ack_latency_p95_us", "ms", 1e-3, False, False, "p95"),
        MetricSpec("cpu", "broker_cpu_cores_mean", "cores", 1.0, False),
        MetricSpec("rss", "broker_rss_mb_max", "MB", 1.0, False),
    )
}
"""Metric names a threshold may name; latencies are in ms, loss in percentage points."""

DEFAULT_THRESHOLDS: Final = "throughput=-5%,p95=+10%,loss=+0.1"


@dataclass(frozen=True)
class Threshold:
    """Tolerated worsening of one metric: ``value`` percent (relative) or metric units."""

    metric: str
    value: float  # magnitude, >= 0
    relative: bool

    def limit(self, baseline: float) -> float:
        """The tolerated worsening in metric units for a given baseline mean."""
        return self.value / 100.0 * abs(baseline) if self.relative else self.value

    def __str__(self) -> str:
        sign = "+" if not COMPARE_METRICS[self.metric].higher_is_better else "-"
        return f"{self.metric}={sign}{self.value:g}{'%' if self.relative else ''}"


class ThresholdError(ValueError):
    """A threshold that does not parse; the message says why and what to write."""


_VALUE = re.compile(r"^\s*([+-]?)\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(%?)\s*$")
EXAMPLE: Final = "e.g. throughput=-5%,p95=+10%,loss=+0.1"


def parse_threshold(name: str, value: str) -> Threshold:
    """One threshold, ``name`` and ``[+|-]NUMBER[%]`` (ThresholdError otherwise)."""
    spec = COMPARE_METRICS.get(name.strip())
    if spec is None:
        known = ", ".join(COMPARE_METRICS)
        raise ThresholdError(f"unknown metric {name.strip()!r} (known: {known})")
    match = _VALUE.match(value)
    if not match:
        raise ThresholdError(
            f"{name.strip()}: {value.strip()!r}: expected METRIC=[+|-]NUMBER[%], {EXAMPLE}"
        )
    sign, number, pct = match.groups()
    bad = "-" if spec.higher_is_better else "+"
    if sign and sign != bad:
        better = "higher" if spec.higher_is_better else "lower"
        raise ThresholdError(
            f"{better} {spec.name} is better, so the threshold is the tolerated change in the "
            f"other direction: write {spec.name}={bad}{number}{pct}"
        )
    return Threshold(spec.name, float(number), relative=pct == "%")


def parse_thresholds(text: str | None) -> dict[str, Threshold]:
    """Parse ``throughput=-5%,p95=+10%,loss=+0.1`` (None: :data:`DEFAULT_THRESHOLDS`);
    ThresholdError naming the item otherwise."""
    text = DEFAULT_THRESHOLDS if text is None else text
    out: dict[str, Threshold] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ThresholdError(f"{item!r}: expected METRIC=[+|-]NUMBER[%], {EXAMPLE}")
        try:
            threshold = parse_threshold(name, value)
        except ThresholdError as exc:
            raise ThresholdError(f"{item!r}: {exc}") from None
        if threshold.metric in out:
            raise ThresholdError(f"metric {threshold.metric!r} is given twice")
        out[threshold.metric] = threshold
    if not out:
        raise ThresholdError("no thresholds given")
    return out


class Gate(BaseModel):
    """``gate:`` in a scenario: what ``mqbench compare`` judges a run of it by."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    thresholds: dict[str, str | float] = Field(
        min_length=1,
        description="metric -> tolerated worsening, e.g. {throughput: -5%, p95: +10%, loss: 0.1}",
    )
    fail_on_missing: bool = Field(
        default=False, description="a cell or metric without a value on one side fails the gate"
    )

    @field_validator("thresholds")
    @classmethod
    def _parse(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name, threshold in value.items():
            parse_threshold(name, str(threshold))
        return value

    def parsed(self) -> dict[str, Threshold]:
        """The thresholds as :class:`Threshold` by metric."""
        return {name: parse_threshold(name, str(value)) for name, value in self.thresholds.items()}
