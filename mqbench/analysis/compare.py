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
absolute one (in the metric's unit). Without repeats ``h = 0``, and the limit of a
latency metric is at least its timing floor, the machine's and the tool's timing noise
that both runs measured (``mqbench.analysis.timing_floor``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from mqbench.analysis.compare_settings import (
    SettingDifference,
    Settings,
    cell_settings,
    differences,
    run_settings,
)
from mqbench.analysis.repeats import MeanCI, RepeatAggregate, aggregate_repeats, t_quantile
from mqbench.analysis.timing_floor import (
    LAG_METRIC,
    Floor,
    SideTiming,
    timing_floor,
    wakeup_floors,
)
from mqbench.errors import AnalysisError, UsageError
from mqbench.records.run_manifest import RunManifest
from mqbench.records.timing import WakeupFloor
from mqbench.scenario import gate
from mqbench.scenario.gate import (
    COMPARE_METRICS,
    DEFAULT_THRESHOLDS,
    MetricSpec,
    Threshold,
)

REGRESSION_EXIT_CODE: Final = 3
REFUSED_EXIT_CODE: Final = 4
"""The gate could not judge honestly: no cell matched, other scenarios, an invalid cell, a
missing cell with ``--fail-on-missing``, or latency the generator shaped."""
INVALID_EXIT_CODE: Final = REFUSED_EXIT_CODE


InvalidCell = tuple[str, str, tuple[str, ...]]
"""``(base id, "baseline" | "current", invalid kinds)``."""


def invalid_cells(
    baseline: Sequence[RepeatAggregate], current: Sequence[RepeatAggregate]
) -> list[InvalidCell]:
    """Cells (base id, side, kinds) that are invalid in some repeat, baseline first."""
    out = []
    for side, aggs in (("baseline", baseline), ("current", current)):
        for agg in aggs:
            if not agg.all_valid:
                out.append((agg.base_id, side, agg.invalid_kinds or ("generator_saturated",)))
    return out


ProblemKind = Literal["no_match", "scenario_differs", "invalid_cells", "missing"]


@dataclass(frozen=True)
class Problem:
    """Why the gate as a whole refuses to pass (exit code 4), whatever the verdicts say."""

    kind: ProblemKind
    message: str


Verdict = Literal["ok", "regression", "improvement", "missing", "refused"]


def parse_thresholds(text: str | None) -> dict[str, Threshold]:
    """Parse ``throughput=-5%,p95=+10%,loss=+0.1`` (``mqbench.scenario.gate``); a UsageError
    naming ``--threshold`` and the reason otherwise. None gives the defaults."""
    try:
        return gate.parse_thresholds(text)
    except gate.ThresholdError as exc:
        raise UsageError(f"--threshold {exc}") from None


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


def judge(
    spec: MetricSpec,
    threshold: Threshold,
    base: MeanCI,
    cur: MeanCI,
    floor: Floor | None = None,
) -> dict[str, Any]:
    """Verdict and numbers for one metric of one cell (values already in the metric's unit).

    ``floor``: the metric's timing floor (``mqbench.analysis.timing_floor``). It applies
    only when neither side has repeats (the noise cannot be estimated): the limit is then
    the larger of the threshold's and the floor (``limit_by`` says which).
    """
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
        "floor": None,
        "floor_source": None,
        "limit": None,
        "limit_by": None,
        "threshold": str(threshold),
    }
    if base.mean is None or cur.mean is None:
        row["verdict"] = "missing"
        return row
    change = cur.mean - base.mean
    worse = -change if spec.higher_is_better else change
    noise = noise_halfwidth(base, cur)
    limit = threshold.limit(base.mean)
    limit_by = "threshold"
    if floor is not None and not noise_estimated(base, cur):
        row.update(floor=floor.ms, floor_source=floor.source)
        if floor.ms > limit:
            limit, limit_by = floor.ms, "floor"
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
        limit_by=limit_by,
        verdict=verdict,
    )
    return row


def noise_estimated(base: MeanCI, cur: MeanCI) -> bool:
    """True when some side has >= 2 repeats, so :func:`noise_halfwidth` measures the
    run-to-run noise (the timing floor is then not applied)."""
    return any(side.n >= 2 and side.std is not None for side in (base, cur))


@dataclass
class CellComparison:
    """Verdicts of one cell (matched by base id)."""

    cell: str
    status: str  # "both" | "baseline only" | "current only"
    notes: list[str] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    differences: list[SettingDifference] = field(default_factory=list)
    """Parameters and settings whose value differs between the two runs."""

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
    """Outcome of :func:`compare_aggregates` / :func:`compare_runs` (see ``exit_code``)."""

    baseline: str
    current: str
    thresholds: dict[str, Threshold]
    cells: list[CellComparison]
    problems: list[Problem] = field(default_factory=list)
    """Why the comparison as a whole is refused (no cell matched, other scenario, ...)."""
    invalid: list[InvalidCell] = field(default_factory=list)
    scenarios: tuple[str, str] | None = None
    """The scenario names of baseline and current, when known."""
    threshold_source: str = "default"
    """Where the thresholds came from: ``--threshold``, ``gate`` (the scenario's), ``default``."""

    @property
    def regressions(self) -> int:
        """Number of (cell, metric) regressions."""
        return sum(1 for c in self.cells for m in c.metrics if m["verdict"] == "regression")

    @property
    def refusals(self) -> int:
        """Number of (cell, metric) pairs the gate refused to judge."""
        return sum(1 for c in self.cells for m in c.metrics if m["verdict"] == "refused")

    @property
    def matched(self) -> int:
        """Cells present in both runs."""
        return sum(1 for c in self.cells if c.status == "both")

    @property
    def verdict(self) -> Literal["ok", "regression", "refused"]:
        """``refused`` on a problem, else ``regression``, else ``refused`` on a refused
        metric, else ``ok``."""
        if self.problems:
            return "refused"
        if self.regressions:
            return "regression"
        return "refused" if self.refusals else "ok"

    @property
    def exit_code(self) -> int:
        """The CLI's exit code: 4 when refused as a whole, 3 on a regression, 4 when a
        metric was refused, else 0."""
        if self.problems:
            return REFUSED_EXIT_CODE
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

    def floor_note(self) -> str | None:
        """One line when a timing floor entered some latency limit (no repeats), else None."""
        floors = [m["floor"] for c in self.cells for m in c.metrics if m.get("floor")]
        if not floors:
            return None
        from mqbench.analysis.compare_output import fmt

        low, high = fmt(min(floors)), fmt(max(floors))
        span = f"{low} ms" if low == high else f"{low}-{high} ms"
        return (
            f"no repeats: latency changes within the timing floor ({span}, column floor: the "
            "send lag and wake-up both runs measured) are not judged; use repeats for a "
            "finer gate"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready result (``mqbench compare --format json``)."""
        cells = []
        for c in self.cells:
            data = asdict(c) | {"verdict": c.verdict}
            data["differences"] = [d.to_dict() for d in c.differences]
            cells.append(data)
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "baseline": self.baseline,
            "current": self.current,
            "scenarios": list(self.scenarios) if self.scenarios else None,
            "thresholds": {k: str(v) for k, v in self.thresholds.items()},
            "threshold_source": self.threshold_source,
            "timing_floor": self.floor_note(),
            "problems": [asdict(p) for p in self.problems],
            "invalid": [
                {"cell": cell, "side": side, "kinds": list(kinds)}
                for cell, side, kinds in self.invalid
            ],
            "counts": self.counts(),
            "cells": cells,
        }

    def to_json(self) -> str:
        """``to_dict`` as indented JSON text."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        """A plain-text table, one line per (cell, metric), notes, and a verdict line."""
        from mqbench.analysis.compare_output import to_text

        return to_text(self)

    def to_markdown(self) -> str:
        """A Markdown summary for a CI job page (``--format markdown``)."""
        from mqbench.analysis.compare_output import to_markdown

        return to_markdown(self)

    def to_junit(self) -> str:
        """JUnit XML, one test case per (cell, metric) (``--format junit``)."""
        from mqbench.analysis.compare_output import to_junit

        return to_junit(self)


@dataclass(frozen=True)
class Options:
    """What the gate is told to tolerate (the ``compare`` flags and ``gate:``)."""

    allow_generator_bound: bool = False
    allow_invalid: bool = False
    allow_mixed: bool = False
    """Compare runs of differently named scenarios."""
    fail_on_missing: bool = False
    """A cell or metric with no value on one side fails the gate (exit 4)."""


def _side_timing(agg: RepeatAggregate, wakeup: WakeupFloor | None) -> SideTiming:
    lag = {q: agg.metrics[name].mean for q, name in LAG_METRIC.items() if name in agg.metrics}
    return SideTiming(lag, wakeup)


def _judge_cell(
    b: RepeatAggregate,
    c: RepeatAggregate,
    thresholds: dict[str, Threshold],
    allow_generator_bound: bool,
    wakeups: tuple[WakeupFloor | None, WakeupFloor | None] = (None, None),
) -> CellComparison:
    comp = CellComparison(b.base_id, "both")
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
    timing = (_side_timing(b, wakeups[0]), _side_timing(c, wakeups[1]))
    for name, threshold in thresholds.items():
        spec = COMPARE_METRICS[name]
        base, cur = (
            _scaled(b.metrics[spec.source], spec.scale),
            _scaled(c.metrics[spec.source], spec.scale),
        )
        floor = None
        if spec.timing_percentile is not None and base.mean is not None:
            floor = timing_floor(spec.timing_percentile, *timing, base.mean)
        row = judge(spec, threshold, base, cur, floor)
        if spec.from_intended and bound_sides and not allow_generator_bound:
            row["verdict"] = "refused"
        note = _capped_note(row, floor)
        if note:
            comp.notes.append(note)
        comp.metrics.append(row)
    return comp


def _capped_note(row: dict[str, Any], floor: Floor | None) -> str | None:
    """A note when a latency verdict was reached although the runs' timing noise was more
    than the floor's cap: on such a machine even identical runs can differ that much."""
    if floor is None or floor.measured_ms is None or row["floor"] is None:
        return None
    if row["verdict"] not in ("regression", "improvement"):
        return None
    source = floor.source.split(",")[0]
    return (
        f"{row['metric']}: the timing noise both runs measured ({source}: "
        f"{floor.measured_ms:.3g} ms) is more than half the baseline, so this "
        f"{row['verdict']} may be the machine's; confirm it with repeats"
    )


def compare_aggregates(
    baseline: Sequence[RepeatAggregate],
    current: Sequence[RepeatAggregate],
    thresholds: dict[str, Threshold],
    *,
    baseline_name: str = "baseline",
    current_name: str = "current",
    allow_generator_bound: bool = False,
    settings: tuple[Settings, Settings] | None = None,
    fail_on_missing: bool = False,
    wakeups: tuple[Mapping[str, WakeupFloor], Mapping[str, WakeupFloor]] | None = None,
) -> CompareResult:
    """Judge every metric of ``thresholds`` for every cell (see the module docstring).

    Latency from the intended send time is ``refused`` (not judged) where either side's
    latency was generator-bound (``latency_verdict``): a change there may be the
    generator's, not the broker's. ``allow_generator_bound`` judges it anyway (noted).
    ``settings`` (baseline, current) by base id: every one that differs becomes a
    ``parameters differ`` note; without them the cells' parameters are compared. No cell
    in both runs, and with ``fail_on_missing`` any missing cell or metric, is a problem.
    ``wakeups`` (baseline, current): the machine's wake-up floor of each cell by base id,
    which the timing floor of latency metrics takes besides the send lag.
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
        floors = (None, None) if wakeups is None else (wakeups[0].get(bid), wakeups[1].get(bid))
        comp = _judge_cell(b, c, thresholds, allow_generator_bound, floors)
        known = settings is not None and bid in settings[0] and bid in settings[1]
        if settings is not None and known:
            comp.differences = differences(settings[0][bid], settings[1][bid])
        else:
            comp.differences = differences(cell_settings(b.params), cell_settings(c.params))
        if comp.differences:
            comp.notes.append("parameters differ: " + "; ".join(map(str, comp.differences)))
        cells.append(comp)
    result = CompareResult(baseline_name, current_name, thresholds, cells)
    result.problems.extend(_cell_problems(result, sorted(base), sorted(cur), fail_on_missing))
    return result


def _cell_problems(
    result: CompareResult, base_ids: list[str], cur_ids: list[str], fail_on_missing: bool
) -> list[Problem]:
    if not result.matched:
        return [
            Problem(
                "no_match",
                "no cell is in both runs, so nothing was compared (baseline: "
                f"{_ids(base_ids)}; current: {_ids(cur_ids)}); cells match by id without "
                "the -r<n> repeat suffix",
            )
        ]
    if not fail_on_missing:
        return []
    alone = [c.cell for c in result.cells if c.status != "both"]
    gaps = [
        f"{c.cell} {m['metric']}"
        for c in result.cells
        for m in c.metrics
        if m["verdict"] == "missing"
    ]
    if not alone and not gaps:
        return []
    what = [f"{len(alone)} cell(s) in one run only ({_ids(alone)})"] if alone else []
    what += [f"{len(gaps)} metric(s) without a value ({_ids(gaps)})"] if gaps else []
    return [Problem("missing", f"--fail-on-missing: {'; '.join(what)}")]


def _ids(ids: Sequence[str], most: int = 3) -> str:
    if not ids:
        return "none"
    more = f", +{len(ids) - most} more" if len(ids) > most else ""
    return ", ".join(ids[:most]) + more


def compare_runs(
    baseline: Path,
    current: Path,
    thresholds: dict[str, Threshold] | str | None = None,
    *,
    analyse_missing: bool = True,
    options: Options = Options(),
) -> CompareResult:
    """Compare two result folders (cells without summaries are analysed with numpy).

    ``thresholds`` as text is parsed with :func:`parse_thresholds`; None takes the current
    run's scenario ``gate:`` (else the baseline's), else ``throughput=-5%,p95=+10%,loss=+0.1``.
    The result is refused as a whole (``problems``, exit code 4) when the scenario names
    differ (unless ``options.allow_mixed``), when a cell is invalid on either side (unless
    ``options.allow_invalid``: a gate must not pass or fail on numbers that measure no
    broker), when no cell matched, and with ``fail_on_missing`` (the option or the gate's)
    when a cell or metric is missing. Every cell is judged either way, so the JSON says all.
    """
    from mqbench.analysis.run_summaries import load_run

    runs = [load_run(Path(p), analyse_missing) for p in (baseline, current)]
    parsed, source, scenario_gate = _thresholds(thresholds, runs[1].manifest, runs[0].manifest)
    base_aggs = aggregate_repeats(runs[0].summaries)
    cur_aggs = aggregate_repeats(runs[1].summaries)
    result = compare_aggregates(
        base_aggs,
        cur_aggs,
        parsed,
        baseline_name=str(baseline),
        current_name=str(current),
        allow_generator_bound=options.allow_generator_bound,
        settings=(run_settings(runs[0]), run_settings(runs[1])),
        wakeups=(wakeup_floors(runs[0].cells), wakeup_floors(runs[1].cells)),
        fail_on_missing=options.fail_on_missing
        or (scenario_gate is not None and scenario_gate.fail_on_missing),
    )
    result.threshold_source = source
    result.scenarios = (runs[0].scenario, runs[1].scenario)
    result.invalid = invalid_cells(base_aggs, cur_aggs)
    early: list[Problem] = []
    if runs[0].scenario != runs[1].scenario and not options.allow_mixed:
        early.append(
            Problem(
                "scenario_differs",
                f"the runs are of different scenarios ({runs[0].scenario!r} vs "
                f"{runs[1].scenario!r}); pass --allow-mixed to compare them anyway",
            )
        )
    if result.invalid and not options.allow_invalid:
        cell, side, kinds = result.invalid[0]
        more = f" (+{len(result.invalid) - 1} more)" if len(result.invalid) > 1 else ""
        early.append(
            Problem(
                "invalid_cells",
                f"cell {cell!r} is invalid in the {side} run ({', '.join(kinds)}){more}; "
                "pass --allow-invalid to compare anyway",
            )
        )
    result.problems[:0] = early
    return result


def _thresholds(
    given: dict[str, Threshold] | str | None,
    current: RunManifest,
    baseline: RunManifest,
) -> tuple[dict[str, Threshold], str, gate.Gate | None]:
    """The thresholds to judge by, where they came from, and the scenario's gate (if any)."""
    scenario_gate = scenario_gate_of(current) or scenario_gate_of(baseline)
    if isinstance(given, dict):
        return given, "--threshold", scenario_gate
    if given is not None:
        return parse_thresholds(given), "--threshold", scenario_gate
    if scenario_gate is not None:
        return scenario_gate.parsed(), "gate", scenario_gate
    return parse_thresholds(DEFAULT_THRESHOLDS), "default", None


def scenario_gate_of(manifest: RunManifest) -> gate.Gate | None:
    """The ``gate:`` of the scenario a run was made from (None when it has none; an
    unreadable one is an AnalysisError naming the key)."""
    data = manifest.scenario.get("gate")
    if data is None:
        return None
    try:
        return gate.Gate.model_validate(data)
    except (ValueError, TypeError) as exc:
        raise AnalysisError(f"manifest.json: scenario.gate is not readable ({exc})") from None
