"""The figures of a report, as data (:class:`~mqbench.report.plotdata.FigureData`).

Sized for papers: one column (3.5 in) or both (7 in). Every value is the mean over a
cell's repeats; its error bar is the 95 % confidence interval of that mean (none with one
repeat, and the figure says so). Figures:

- ``latency-payload``: p50 (circles) and p99 (triangles) per target, a panel per payload
  sharing one log y axis in ms, side by side per value of one further varying axis
  (Fig. 5 of the mq-bench paper);
- ``scaling-pairs`` (``fanout-subscribers``, ``fanin-publishers``): throughput, broker CPU
  mean and RSS max against the topology's size, a line per target, a row of panels per
  resource profile (Figs 6 and 7);
- ``resources-<axis>`` (when no topology size varies): broker CPU, broker RSS and generator
  CPU along the first varying of rate, payload, QoS or target;
- ``latency-qos``: p50 and p99 per target, side by side per QoS (Fig. 8);
- ``latency-load`` and ``delivered-offered`` (when the offered load varies): p50/p99 against
  the offered load, and delivered against offered deliveries per second with the ideal line;
- ``latency-cdf``: the CDF and its tail (1 - CDF on a log axis) side by side, a line per
  cell, computed from the delivery records;
- ``timeseries-<cell>``: throughput and p50/p99 second by second, fault windows shaded
  (:mod:`mqbench.report.timeseries`).

A figure exists only for an axis that varies in the scenarios' matrices
(:class:`~mqbench.report.axes.ReportAxes`); other varying axes split it into one figure per
combination, named in the title. Marked values (:mod:`mqbench.report.marks`) are drawn
distinctly and named in the legend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from mqbench.analysis.kernel import merge_hists
from mqbench.analysis.plan import CellPlan
from mqbench.analysis.repeats import RepeatAggregate
from mqbench.report.axes import AXES, ReportAxes, axis_text, axis_value, heading, value_label
from mqbench.report.cdf import distribution, latency_hist_from_records
from mqbench.report.labels import LATENCY_MS, RESOURCE_METRICS, label
from mqbench.report.marks import marks_of, with_marks
from mqbench.report.plotdata import (
    COLUMN_WIDTH,
    PAGE_WIDTH,
    FigureData,
    Panel,
    PanelKind,
    Point,
    Scale,
    Series,
    Stat,
)
from mqbench.report.tables import MIN_REPEATS, size_axes, spread_axis
from mqbench.report.timeseries import timeseries

CDF_MAX_LINES: Final = 10
SCALING_NAMES: Final = {
    "pairs": "scaling-pairs",
    "subscribers": "fanout-subscribers",
    "publishers": "fanin-publishers",
}
LOG_RATIO: Final = 10.0
"""A size axis whose largest value exceeds this multiple of its smallest is drawn on a log
axis (so 100, 500, 1000, 5000 pairs do not crowd at the left)."""


def _numbered(name: str, n: int, total: int) -> str:
    return name if total == 1 else f"{name}-{n + 1}"


def _titled(title: str, facet: str) -> str:
    return f"{title} ({facet})" if facet else title


def ci_note(aggs: Sequence[RepeatAggregate]) -> str:
    """What the error bars of a figure over ``aggs`` are, or why there are none."""
    counts = sorted({a.n for a in aggs})
    if not counts or counts[-1] < 2:
        return "One repeat per cell: no confidence intervals (set repeat: 3 or more)."
    n = f"n = {counts[0]}" if len(counts) == 1 else f"n = {counts[0]}-{counts[-1]}"
    text = f"Error bars: 95 % confidence interval of the mean over repeats ({n})."
    if counts[0] < MIN_REPEATS:
        text += f" Under {MIN_REPEATS} repeats the intervals are very wide."
    return text


def _target(agg: RepeatAggregate) -> str:
    return axis_text("target", axis_value(agg, "target"))


def _point(agg: RepeatAggregate, metric: str, x: float | str, scale: float = 1.0) -> Point | None:
    """The mean of ``metric`` at ``x`` with its confidence interval (scaled)."""
    m = agg.metrics[metric]
    if m.mean is None:
        return None
    latency = metric.startswith("latency_")
    marks = marks_of(agg, latency=latency)
    if m.ci95 is None:
        return Point(x, m.mean * scale, marks=marks)
    return Point(x, m.mean * scale, m.low * scale, m.high * scale, marks)  # type: ignore[operator]


LATENCY_STATS: Final[tuple[tuple[Stat, str], ...]] = (
    ("p50", "latency_p50_us"),
    ("p99", "latency_p99_us"),
)


def latency_points(
    name: str,
    suffix: str,
    aggs: Sequence[RepeatAggregate],
    axes: ReportAxes,
    panel_axis: str | None,
    series_axis: str | None,
) -> list[FigureData]:
    """p50 (circles) and p99 (triangles) per target with their confidence intervals over
    repeats: a panel per value of ``panel_axis`` (sharing one y range), side by side per
    value of ``series_axis`` (or of another varying axis with few values); ``suffix`` ends
    the title (e.g. "under faults")."""
    taken = ["target", *(a for a in (panel_axis, series_axis) if a)]
    if series_axis is None:
        series_axis = spread_axis(aggs, axes, taken)
        taken += [series_axis] if series_axis else []
    varying = axes.varying(aggs)
    by = [heading(a) for a in taken if a in varying or a == series_axis]
    listed = " and ".join(by) if len(by) < 3 else ", ".join(by[:-1]) + " and " + by[-1]
    title = f"Latency p50 and p99 by {listed}{suffix}"
    facets = axes.facets(aggs, taken)
    out: list[FigureData] = []
    for n, (facet, members) in enumerate(facets):
        targets = [axis_text("target", t) for t in axes.values(members, "target")]
        panel_values = axes.values(members, panel_axis) if panel_axis else [None]
        series_values = axes.values(members, series_axis) if series_axis else [None]
        panels = []
        for col, pv in enumerate(panel_values):
            series = []
            for sv in series_values:
                chosen = [
                    m
                    for m in members
                    if (not panel_axis or axis_value(m, panel_axis) == pv)
                    and (not series_axis or axis_value(m, series_axis) == sv)
                ]
                text = value_label(series_axis, sv) if series_axis else "latency"
                for stat, metric in LATENCY_STATS:
                    points = [p for m in chosen if (p := _point(m, metric, _target(m), 1e-3))]
                    series.append(Series(text, tuple(points), stat=stat))
            panels.append(
                Panel(
                    "points",
                    value_label(panel_axis, pv) if panel_axis else "",
                    "target",
                    LATENCY_MS,
                    tuple(series),
                    col=col,
                    yscale="log",
                    yticks="ms",
                    categories=tuple(targets),
                )
            )
        slots = len(targets) * max(1, len(series_values)) * len(panels)
        out.append(
            FigureData(
                _numbered(name, n, len(facets)),
                _titled(title, facet),
                tuple(panels),
                cols=len(panels),
                width=COLUMN_WIDTH if slots <= 6 and len(panels) <= 2 else PAGE_WIDTH,
                legend_series=series_axis is not None,
                sharey=True,
                note=ci_note(members),
            )
        )
    return out


def latency_by_payload(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[FigureData]:
    """Fig. 5: latency per target, a panel per payload (``latency-payload``)."""
    return latency_points("latency-payload", "", aggs, axes, "payload", None)


def latency_by_qos(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[FigureData]:
    """Fig. 8: latency per target, side by side per QoS (``latency-qos``); "under faults"
    when the cells ran with faults."""
    suffix = " under faults" if any(axes.values(aggs, "faults")) else ""
    return latency_points("latency-qos", suffix, aggs, axes, None, "qos")


LOAD_AXES: Final = ("rate", "pairs", "subscribers", "publishers")
"""Axes that change the offered load; the load charts span them."""


def _offered(agg: RepeatAggregate, metric: str = "offered_rate") -> float | None:
    return agg.metrics[metric].mean if metric in agg.metrics else None


def _load_lines(
    members: Sequence[RepeatAggregate],
    axes: ReportAxes,
    x_metric: str,
    y_metrics: Sequence[tuple[Stat, str, float]],
) -> tuple[Series, ...]:
    """A line per target (and per stat) of ``y_metrics`` against the mean of ``x_metric``."""
    series = []
    for target in axes.values(members, "target"):
        mine = [m for m in members if axis_value(m, "target") == target]
        for stat, metric, scale in y_metrics:
            points = [
                p
                for m in mine
                if (x := _offered(m, x_metric)) is not None and (p := _point(m, metric, x, scale))
            ]
            points.sort(key=lambda p: float(p.x))
            series.append(Series(axis_text("target", target), tuple(points), stat=stat))
    return tuple(series)


def load_charts(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[FigureData]:
    """``latency-load``: p50 and p99 against the offered load, and ``delivered-offered``:
    delivered against offered deliveries per second with the ideal line, a line per target;
    one of each per combination of the axes that do not change the load."""
    loads = {_offered(a) for a in aggs} - {None}
    if len(loads) < 2:
        return []
    facets = axes.facets(aggs, ("target", *LOAD_AXES))
    out: list[FigureData] = []
    for facet, members in facets:
        xs = [x for m in members if (x := _offered(m)) is not None]
        latency = Panel(
            "lines",
            "",
            "offered load (msg/s)",
            LATENCY_MS,
            _load_lines(members, axes, "offered_rate", [(s, m, 1e-3) for s, m in LATENCY_STATS]),
            xscale=_x_scale(xs),
            yscale="log",
            yticks="ms",
        )
        delivered = Panel(
            "lines",
            "",
            "offered (deliveries/s)",
            "delivered (msg/s)",
            _load_lines(members, axes, "expected_rate", [("", "throughput_msg_s", 1.0)]),
            xscale=_x_scale(xs),
            yscale=_x_scale(xs),
            ideal=True,
        )
        for name, title, panel in (
            ("latency-load", "Latency p50 and p99 vs offered load", latency),
            ("delivered-offered", "Delivered vs offered load", delivered),
        ):
            out.append(FigureData(name, _titled(title, facet), (panel,), note=ci_note(members)))
    return _renumbered(out)


def _renumbered(figs: Sequence[FigureData]) -> list[FigureData]:
    """Number figures that share a name (``latency-load-1``, ``latency-load-2``)."""
    totals = {f.name: sum(g.name == f.name for g in figs) for f in figs}
    seen: dict[str, int] = {}
    out = []
    for f in figs:
        n = seen.get(f.name, 0)
        seen[f.name] = n + 1
        out.append(replace(f, name=_numbered(f.name, n, totals[f.name])))
    return out


def _x_scale(values: Sequence[float]) -> Scale:
    positive = [v for v in values if v > 0]
    return "log" if positive and max(positive) > LOG_RATIO * min(positive) else "linear"


def scaling(aggs: Sequence[RepeatAggregate], axes: ReportAxes, size_axis: str) -> list[FigureData]:
    """Figs 6/7: throughput, broker CPU mean and RSS max against the topology's size, a line
    per target; a row of panels per resource profile."""
    facets = axes.facets(aggs, ("target", size_axis, "resources"))
    size_label = AXES[size_axis].label
    title = f"Throughput and broker resources vs {size_label}"
    out: list[FigureData] = []
    for n, (facet, members) in enumerate(facets):
        profiles = axes.values(members, "resources")
        xs = [float(v) for v in axes.values(members, size_axis) if v is not None]
        xscale = _x_scale(xs)
        panels = []
        for row, profile in enumerate(profiles):
            in_row = [m for m in members if axis_value(m, "resources") == profile]
            for col, metric in enumerate(RESOURCE_METRICS):
                series = []
                for target in axes.values(in_row, "target"):
                    points = []
                    for m in in_row:
                        x = axis_value(m, size_axis)
                        if axis_value(m, "target") != target or x is None:
                            continue
                        if (point := _point(m, metric, float(x))) is not None:
                            points.append(point)
                    points.sort(key=lambda p: float(p.x))
                    series.append(Series(axis_text("target", target), tuple(points)))
                panels.append(
                    Panel(
                        "lines",
                        value_label("resources", profile) if profile is not None else "",
                        size_label,
                        label(metric),
                        tuple(series),
                        row=row,
                        col=col,
                        xscale=xscale,
                        xticks="values",
                        ymin=0.0,
                    )
                )
        out.append(
            FigureData(
                _numbered(SCALING_NAMES[size_axis], n, len(facets)),
                _titled(title, facet),
                tuple(panels),
                rows=len(profiles),
                cols=len(RESOURCE_METRICS),
                width=PAGE_WIDTH,
                panel_height=2.0,
                note=ci_note(members),
            )
        )
    return out


def latency_cdfs(
    cells: Sequence[tuple[RepeatAggregate, list[CellPlan]]],
    axes: ReportAxes,
    max_lines: int = CDF_MAX_LINES,
) -> list[FigureData]:
    """The latency distribution from the records: the CDF (log x) and its tail (1 - CDF,
    log y) side by side, a line per cell (repeats pooled). A figure compares the targets
    (and one further axis, e.g. pairs, when the lines stay at most ``max_lines``) for one
    combination of the other varying axes, and holds at most ``max_lines`` lines. Cells
    without record files are left out."""
    drawable = [(a, plans) for a, plans in cells if any(p.delivery_files for p in plans)]
    everyone = [a for a, _ in drawable]
    plans_of = {id(a): plans for a, plans in drawable}
    kept = ["target"]
    spread = spread_axis(everyone, axes, kept)
    lines = len(axes.values(everyone, "target"))
    if spread and lines * len(axes.values(everyone, spread)) <= max_lines:
        kept.append(spread)
    chunks = [
        (facet, members[i : i + max_lines])
        for facet, members in axes.facets(everyone, kept)
        for i in range(0, len(members), max_lines)
    ]
    out: list[FigureData] = []
    for facet, part in chunks:
        body: list[Series] = []
        tail: list[Series] = []
        for agg in part:
            plans = plans_of[id(agg)]
            dist = distribution(merge_hists([latency_hist_from_records(p) for p in plans]))
            if dist.count == 0:
                continue
            marks = marks_of(agg, latency=True)
            name = with_marks(axes.describe(agg, part), marks)
            xs = [float(x) for x in dist.ms]
            for out_series, ys in ((body, dist.cdf), (tail, dist.tail)):
                points = tuple(Point(x, float(y)) for x, y in zip(xs, ys, strict=True))
                out_series.append(Series(name, points, marks))
        if not body:
            continue
        xlabel = "latency from intended send time (ms)"
        panels = (
            Panel(
                "steps",
                "CDF",
                xlabel,
                "fraction of deliveries ≤ latency",
                tuple(body),
                xscale="log",
                xticks="ms",
                ymin=0.0,
                ymax=1.01,
            ),
            Panel(
                "steps",
                "tail: 1 - CDF (log)",
                xlabel,
                "fraction of deliveries ≥ latency",
                tuple(tail),
                col=1,
                xscale="log",
                yscale="log",
                xticks="ms",
                yticks="fraction",
                step="pre",
            ),
        )
        out.append(
            FigureData(
                "latency-cdf",
                _titled("Latency distribution from the records", facet),
                panels,
                cols=2,
                width=PAGE_WIDTH,
                panel_height=2.4,
            )
        )
    return [replace(f, name=_numbered(f.name, n, len(out))) for n, f in enumerate(out)]


RESOURCE_FIGURE_METRICS: Final = (
    "broker_cpu_cores_mean",
    "broker_rss_mb_max",
    "generator_cpu_cores_mean",
)
RESOURCE_AXES: Final = ("rate", "payload", "qos", "target")
"""The axis a resource figure spreads along when no topology size varies (first varying)."""


def resources(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[FigureData]:
    """``resources-<axis>``: broker CPU mean, broker RSS max and generator CPU mean along
    the first varying axis of :data:`RESOURCE_AXES`: a line per target over a numeric axis,
    a point per target when only the target varies."""
    varying = axes.varying(aggs)
    axis = next((a for a in RESOURCE_AXES if a in varying), None)
    if axis is None:
        return []
    out: list[FigureData] = []
    facets = axes.facets(aggs, ("target", axis))
    for n, (facet, members) in enumerate(facets):
        panels = []
        for col, metric in enumerate(RESOURCE_FIGURE_METRICS):
            if axis == "target":
                points = [p for m in members if (p := _point(m, metric, _target(m)))]
                series: tuple[Series, ...] = (Series("", tuple(points)),)
                categories = tuple(axis_text("target", t) for t in axes.values(members, "target"))
                kind: PanelKind = "points"
            else:
                series = _axis_lines(members, axes, axis, metric)
                categories, kind = (), "lines"
            panels.append(
                Panel(
                    kind,
                    "",
                    AXES[axis].label,
                    label(metric),
                    series,
                    col=col,
                    xticks="values" if kind == "lines" else "number",
                    ymin=0.0,
                    categories=categories,
                )
            )
        out.append(
            FigureData(
                _numbered(f"resources-{axis}", n, len(facets)),
                _titled(f"Broker and generator resources by {heading(axis)}", facet),
                tuple(panels),
                cols=len(panels),
                width=PAGE_WIDTH,
                panel_height=2.0,
                legend_series=axis != "target",
                note=ci_note(members),
            )
        )
    return out


def _axis_lines(
    members: Sequence[RepeatAggregate], axes: ReportAxes, axis: str, metric: str
) -> tuple[Series, ...]:
    """A line per target of ``metric`` along a numeric ``axis``."""
    series = []
    for target in axes.values(members, "target"):
        points = []
        for m in members:
            x = axis_value(m, axis)
            if axis_value(m, "target") != target or not isinstance(x, int | float):
                continue
            if (point := _point(m, metric, float(x))) is not None:
                points.append(point)
        points.sort(key=lambda p: float(p.x))
        series.append(Series(axis_text("target", target), tuple(points)))
    return tuple(series)


def build_figures(
    aggs: Sequence[RepeatAggregate],
    cells: Sequence[tuple[RepeatAggregate, list[CellPlan]]],
    axes: ReportAxes | None = None,
) -> list[FigureData]:
    """The figures that fit the varying axes (same rules as the tables), the load charts
    when the offered load varies, resources along any varying axis, plus the CDFs."""
    axes = axes or ReportAxes.inferred()
    varying = axes.varying(aggs)
    figs: list[FigureData] = []
    if "payload" in varying or "target" in varying:
        figs += latency_by_payload(aggs, axes)
    sizes = size_axes(varying)
    for size in sizes:
        figs += scaling(aggs, axes, size)
    if not sizes:
        figs += resources(aggs, axes)
    if "qos" in varying:
        figs += latency_by_qos(aggs, axes)
    figs += load_charts(aggs, axes)
    figs += latency_cdfs(cells, axes)
    return figs + timeseries(cells)
