"""Compare two result folders cell by cell: the CI regression gate (docs/ci.md).

Cells are matched by base id (the cell id without its ``-r<n>`` repeat suffix); repeats of
a cell are aggregated to a mean with a Student-t interval. For each metric named in the
thresholds the change is judged *noise aware*: with ``h`` the 95 % half-width of the
difference of means (Welch), a change counts only as far as it exceeds ``h``:

    worse = change in the metric's bad direction (current - baseline, sign-adjusted)
    regression   if worse - h > limit
    improvement  if -worse - h > limit
    ok           otherwise;  missing when either side has no value

``limit`` is ``|T| * |baseline mean|`` for a relative threshold ``T%`` and ``|T|`` for an
absolute one (in the metric's unit). Without repeats ``h = 0``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from mqbench.analysis.repeats import MeanCI, RepeatAggregate, aggregate_repeats, t_quantile
from mqbench.errors import MqbenchError, UsageError

REGRESSION_EXIT_CODE: Final = 3
REFUSED_EXIT_CODE: Final = 4
"""The gate could not judge honestly: an invalid cell, or latency the generator shaped."""
INVALID_EXIT_CODE: Final = REFUSED_EXIT_CODE


class InvalidCellsError(MqbenchError):
    """Compare refuses to gate on invalid cells (exit code 4) unless ``--allow-invalid``."""

    exit_code = INVALID_EXIT_CODE

    def __init__(self, message: str, cells: list[tuple[str, str, tuple[str, ...]]]) -> None:
        super().__init__(message)
        self.cells = cells
        """``(base id, "baseline" | "current", invalid kinds)`` of every invalid cell."""


def invalid_cells(
    baseline: Sequence[RepeatAggregate], current: Sequence[RepeatAggregate]
) -> list[tuple[str, str, tuple[str, ...]]]:
    """Cells (base id, side, kinds) that are invalid in some repeat, baseline first."""
    out = []
    for side, aggs in (("baseline", baseline), ("current", current)):
        for agg in aggs:
            if not agg.all_valid:
                out.append((agg.base_id, side, agg.invalid_kinds or ("generator_saturated",)))
    return out


Verdict = Literal["ok", "regression", "improvement", "missing", "refused"]


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


COMPARE_METRICS: Final[dict[str, MetricSpec]] = {
    m.name: m
    for m in (
        MetricSpec("throughput", "throughput_msg_s", "msg/s", 1.0, True),
        MetricSpec("p50", "latency_p50_us", "ms", 1e-3, False, from_intended=True),
        MetricSpec("p95", "latency_p95_us", "ms", 1e-3, False, from_intended=True),
        MetricSpec("p99", "latency_p99_us", "ms", 1e-3, False, from_intended=True),
        MetricSpec("p999", "latency_p999_us", "ms", 1e-3, False, from_intended=True),
        MetricSpec("loss", "loss_pct", "%", 1.0, False),
        MetricSpec("ack_p95", "ack_latency_p95_us", "ms", 1e-3, False),
        MetricSpec("cpu", "broker_cpu_cores_mean", "cores", 1.0, False),
        MetricSpec("rss", "broker_rss_mb_max", "MB", 1.0, False),
    )
}
"""Metric names accepted by ``--threshold``; latencies are in ms, loss in percentage points."""

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


_ITEM = re.compile(
    r"^\s*([a-z0-9_]+)\s*=\s*([+-]?)\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(%?)\s*$"
)


def parse_thresholds(text: str | None) -> dict[str, Threshold]:
    """Parse ``throughput=-5%,p95=+10%,loss=+0.1`` (UsageError with the reason otherwise).

    The sign is optional; when given it must point in the metric's bad direction (``-`` for
    throughput, ``+`` for latency, loss, cpu and rss). ``%`` makes a threshold relative to
    the baseline mean; without it the value is in the metric's unit (ms, %-points, ...).
    """
    text = DEFAULT_THRESHOLDS if text is None else text
    out: dict[str, Threshold] = {}
    for item in (part for part in text.split(",") if part.strip()):
        match = _ITEM.match(item)
        if not match:
            raise UsageError(
                f"--threshold {item.strip()!r}: expected METRIC=[+|-]NUMBER[%], "
                "e.g. throughput=-5%,p95=+10%,loss=+0.1"
            )
        name, sign, number, pct = match.groups()
        spec = COMPARE_METRICS.get(name)
        if spec is None:
            raise UsageError(
                f"--threshold {item.strip()!r}: unknown metric {name!r} "
                f"(known: {', '.join(COMPARE_METRICS)})"
            )
        bad = "-" if spec.higher_is_better else "+"
        if sign and sign != bad:
            better = "higher" if spec.higher_is_better else "lower"
            raise UsageError(
                f"--threshold {item.strip()!r}: {better} {name} is better, so the threshold is "
                f"the tolerated change in the other direction: write {name}={bad}{number}{pct}"
            )
        if name in out:
            raise UsageError(f"--threshold: metric {name!r} is given twice")
        out[name] = Threshold(name, float(number), relative=pct == "%")
    if not out:
        raise UsageError("--threshold: no thresholds given")
    return out


def _scaled(m: MeanCI, scale: float) -> MeanCI:
    def f(v: float | None) -> float | None:
        return None if v is None else v * scale

    return MeanCI(m.n, f(m.mean), f(m.std), f(m.ci95))


def noise_halfwidth(base: MeanCI, cur: MeanCI, confidence: float = 0.95) -> float:
    """Half-width of the confidence interval of ``cur.mean - base.mean``.

    Both sides with >= 2 repeats: Welch (``se = sqrt(sb²/nb + sc²/nc)``, Welch-Satterthwaite
    degrees of freedom). One side with >= 2: its standard deviation for both sides
    (``se = s * sqrt(1/nb + 1/nc)``, its ``n - 1`` degrees of freedom). Otherwise 0.
    """
    p = 0.5 + confidence / 2.0
    if base.n >= 2 and cur.n >= 2 and base.std is not None and cur.std is not None:
        vb, vc = base.std**2 / base.n, cur.std**2 / cur.n
        se = math.sqrt(vb + vc)
        if se == 0:
            return 0.0
        df = (vb + vc) ** 2 / (vb**2 / (base.n - 1) + vc**2 / (cur.n - 1))
        return t_quantile(p, df) * se
    for side in (base, cur):
        if side.n >= 2 and side.std is not None:
            se = side.std * math.sqrt(1.0 / max(base.n, 1) + 1.0 / max(cur.n, 1))
            return t_quantile(p, side.n - 1) * se if se else 0.0
    return 0.0


def judge(spec: MetricSpec, threshold: Threshold, base: MeanCI, cur: MeanCI) -> dict[str, Any]:
    """Verdict and numbers for one metric of one cell (values already in the metric's unit)."""
    row: dict[str, Any] = {
        "metric": spec.name,
        "unit": spec.unit,
        "baseline": base.mean,
        "baseline_ci95": base.ci95,
        "baseline_n": base.n,
        "current": cur.mean,
        "current_ci95": cur.ci95,
        "current_n": cur.n,
        "change": None,
        "change_pct": None,
        "noise": None,
        "limit": None,
        "threshold": str(threshold),
    }
    if base.mean is None or cur.mean is None:
        row["verdict"] = "missing"
        return row
    change = cur.mean - base.mean
    worse = -change if spec.higher_is_better else change
    noise = noise_halfwidth(base, cur)
    limit = threshold.limit(base.mean)
    verdict: Verdict = "ok"
    if worse - noise > limit:
        verdict = "regression"
    elif -worse - noise > limit:
        verdict = "improvement"
    row.update(
        change=change,
        change_pct=100.0 * change / abs(base.mean) if base.mean else None,
        noise=noise,
        limit=limit,
        verdict=verdict,
    )
    return row


@dataclass
class CellComparison:
    """Verdicts of one cell (matched by base id)."""

    cell: str
    status: str  # "both" | "baseline only" | "current only"
    notes: list[str] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        """Worst verdict of the cell: regression > refused > missing > improvement > ok."""
        verdicts = {m["verdict"] for m in self.metrics}
        if self.status != "both":
            return "missing"
        for v in ("regression", "refused", "missing", "improvement"):
            if v in verdicts:
                return v
        return "ok"


@dataclass
class CompareResult:
    """Outcome of :func:`compare_aggregates`; ``exit_code`` is 3 when anything regressed."""

    baseline: str
    current: str
    thresholds: dict[str, Threshold]
    cells: list[CellComparison]

    @property
    def regressions(self) -> int:
        """Number of (cell, metric) regressions."""
        return sum(1 for c in self.cells for m in c.metrics if m["verdict"] == "regression")

    @property
    def refusals(self) -> int:
        """Number of (cell, metric) pairs the gate refused to judge."""
        return sum(1 for c in self.cells for m in c.metrics if m["verdict"] == "refused")

    @property
    def exit_code(self) -> int:
        """3 on regression, else 4 when a metric was refused, else 0 (the CLI's exit code)."""
        if self.regressions:
            return REGRESSION_EXIT_CODE
        return REFUSED_EXIT_CODE if self.refusals else 0

    def counts(self) -> dict[str, int]:
        """How many (cell, metric) verdicts of each kind (cells on one side count once)."""
        out = {"ok": 0, "regression": 0, "improvement": 0, "missing": 0, "refused": 0}
        for c in self.cells:
            if c.status != "both":
                out["missing"] += 1
            for m in c.metrics:
                out[m["verdict"]] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready result (``mqbench compare --format json``)."""
        verdict = "regression" if self.regressions else "refused" if self.refusals else "ok"
        return {
            "verdict": verdict,
            "exit_code": self.exit_code,
            "baseline": self.baseline,
            "current": self.current,
            "thresholds": {k: str(v) for k, v in self.thresholds.items()},
            "counts": self.counts(),
            "cells": [asdict(c) | {"verdict": c.verdict} for c in self.cells],
        }

    def to_json(self) -> str:
        """``to_dict`` as indented JSON text."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        """A plain-text table, one line per (cell, metric), and a verdict line."""
        header = ("cell", "metric", "baseline", "current", "change", "noise ±", "limit", "verdict")
        lines: list[tuple[str, ...]] = [header]
        for c in self.cells:
            if c.status != "both":
                lines.append((c.cell, "-", "", "", "", "", "", f"missing ({c.status})"))
                continue
            for m in c.metrics:
                lines.append(
                    (
                        c.cell,
                        m["metric"],
                        _fmt_mean(m["baseline"], m["baseline_ci95"], m["unit"]),
                        _fmt_mean(m["current"], m["current_ci95"], m["unit"]),
                        _fmt_change(m["change"], m["change_pct"]),
                        _fmt(m["noise"]),
                        _fmt(m["limit"]),
                        m["verdict"].upper()
                        if m["verdict"] in ("regression", "refused")
                        else m["verdict"],
                    )
                )
        widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
        text = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in lines
        ]
        for c in self.cells:
            text.extend(f"note: {c.cell}: {note}" for note in c.notes)
        counts = self.counts()
        summary = ", ".join(f"{v} {k}" for k, v in counts.items())
        verdict = "REGRESSION" if self.regressions else "REFUSED" if self.refusals else "OK"
        text.append(
            f"{verdict}: {summary} (thresholds: "
            f"{', '.join(str(t) for t in self.thresholds.values())})"
        )
        return "\n".join(text) + "\n"


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    mag = abs(v)
    if mag >= 1000:
        return f"{v:,.0f}"
    if mag >= 10:
        return f"{v:.1f}"
    if mag >= 0.1:
        return f"{v:.3f}"
    return f"{v:.3g}"


def _fmt_mean(mean: float | None, ci: float | None, unit: str) -> str:
    if mean is None:
        return "-"
    text = _fmt(mean) if ci is None else f"{_fmt(mean)}±{_fmt(ci)}"
    return f"{text} {unit}"


def _fmt_change(change: float | None, pct: float | None) -> str:
    if change is None:
        return "-"
    sign = "+" if change > 0 else ""
    text = f"{sign}{_fmt(change)}"
    return f"{text} ({sign}{pct:.1f}%)" if pct is not None else text


def compare_aggregates(
    baseline: Sequence[RepeatAggregate],
    current: Sequence[RepeatAggregate],
    thresholds: dict[str, Threshold],
    *,
    baseline_name: str = "baseline",
    current_name: str = "current",
    allow_generator_bound: bool = False,
) -> CompareResult:
    """Judge every metric of ``thresholds`` for every cell (see the module docstring).

    Latency from the intended send time is ``refused`` (not judged) where either side's
    latency was generator-bound (``latency_verdict``): a change there may be the
    generator's, not the broker's. ``allow_generator_bound`` judges it anyway (noted).
    """
    base = {a.base_id: a for a in baseline}
    cur = {a.base_id: a for a in current}
    order = [a.base_id for a in baseline] + [b for b in cur if b not in base]
    cells: list[CellComparison] = []
    for bid in order:
        b, c = base.get(bid), cur.get(bid)
        if b is None or c is None:
            status = "baseline only" if c is None else "current only"
            cells.append(CellComparison(bid, status))
            continue
        comp = CellComparison(bid, "both")
        bound_sides = []
        for side, agg in (("baseline", b), ("current", c)):
            if agg.any_saturated:
                comp.notes.append(f"{side}: generator saturated in some repeat (numbers invalid)")
            if agg.any_latency_bound:
                bound_sides.append(side)
                comp.notes.append(
                    f"{side}: latency generator-bound in some repeat "
                    + (
                        "(judged anyway: --allow-generator-bound)"
                        if allow_generator_bound
                        else "(latency not judged; --allow-generator-bound to judge it)"
                    )
                )
            other = [k for k in agg.invalid_kinds if k != "generator_saturated"]
            if other:
                comp.notes.append(f"{side}: invalid in some repeat ({', '.join(other)})")
        if b.params != c.params:
            diff = sorted(
                k for k in set(b.params) | set(c.params) if b.params.get(k) != c.params.get(k)
            )
            comp.notes.append(f"parameters differ: {', '.join(diff)}")
        for name, threshold in thresholds.items():
            spec = COMPARE_METRICS[name]
            row = judge(
                spec,
                threshold,
                _scaled(b.metrics[spec.source], spec.scale),
                _scaled(c.metrics[spec.source], spec.scale),
            )
            if spec.from_intended and bound_sides and not allow_generator_bound:
                row["verdict"] = "refused"
            comp.metrics.append(row)
        cells.append(comp)
    return CompareResult(baseline_name, current_name, thresholds, cells)


def compare_runs(
    baseline: Path,
    current: Path,
    thresholds: dict[str, Threshold] | str | None = None,
    *,
    analyse_missing: bool = True,
    allow_generator_bound: bool = False,
    allow_invalid: bool = False,
) -> CompareResult:
    """Compare two result folders (cells without summaries are analysed with numpy).

    ``thresholds`` is parsed with :func:`parse_thresholds` when given as text (None: the
    defaults ``throughput=-5%,p95=+10%,loss=+0.1``). A cell that is invalid on either side
    (``valid: false`` in some repeat) makes it raise :class:`InvalidCellsError` unless
    ``allow_invalid``: a gate must not pass or fail on numbers that measure no broker.
    """
    from mqbench.analysis.run_summaries import load_run

    parsed = thresholds if isinstance(thresholds, dict) else parse_thresholds(thresholds)
    runs = [load_run(Path(p), analyse_missing) for p in (baseline, current)]
    base_aggs = aggregate_repeats(runs[0].summaries)
    cur_aggs = aggregate_repeats(runs[1].summaries)
    bad = invalid_cells(base_aggs, cur_aggs)
    if bad and not allow_invalid:
        cell, side, kinds = bad[0]
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        raise InvalidCellsError(
            f"refusing to compare: cell {cell!r} is invalid in the {side} run "
            f"({', '.join(kinds)}){more}; pass --allow-invalid to compare anyway",
            bad,
        )
    return compare_aggregates(
        base_aggs,
        cur_aggs,
        parsed,
        baseline_name=str(baseline),
        current_name=str(current),
        allow_generator_bound=allow_generator_bound,
    )
