"""The figures of a report, as data (:class:`~mqbench.report.plotdata.FigureData`).

In the style of the mq-bench paper (Figs 5-8) plus latency distributions from the records:

- ``latency-payload``: p50 bars with min-p95 whiskers per target, a panel per payload, a
  bar per value of one further varying axis (e.g. pairs), log axis in ms (Fig. 5);
- ``scaling-pairs`` (``fanout-subscribers``, ``fanin-publishers``): throughput, broker CPU
  mean and RSS max against the topology's size, a line per target, a row of panels per
  resource profile (Figs 6 and 7);
- ``latency-qos``: p50 bars with min-p95 whiskers per target, a bar per QoS (Fig. 8);
- ``latency-cdf``: the CDF and its tail (1 - CDF on a log axis) side by side, a line per
  cell, computed from the delivery records.

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
from mqbench.report.plotdata import FigureData, Panel, Point, Scale, Series
from mqbench.report.tables import size_axes, spread_axis

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


def _latency_point(agg: RepeatAggregate, x: str) -> Point | None:
    m = agg.metrics
    p50 = m["latency_p50_us"].mean
    if p50 is None:
        return None
    low = m["latency_min_us"].mean
    high = m["latency_p95_us"].mean
    return Point(
        x,
        p50 / 1000,
        low / 1000 if low is not None else None,
        high / 1000 if high is not None else None,
        marks_of(agg, latency=True),
    )


def latency_bars(
    name: str,
    suffix: str,
    aggs: Sequence[RepeatAggregate],
    axes: ReportAxes,
    panel_axis: str | None,
    series_axis: str | None,
) -> list[FigureData]:
    """p50 bars with min-p95 whiskers per target: a panel per value of ``panel_axis``, a bar
    per value of ``series_axis`` (or of another varying axis with few values); ``suffix``
    ends the title (e.g. "under faults")."""
    taken = ["target", *(a for a in (panel_axis, series_axis) if a)]
    if series_axis is None:
        series_axis = spread_axis(aggs, axes, taken)
        taken += [series_axis] if series_axis else []
    varying = axes.varying(aggs)
    by = [heading(a) for a in taken if a in varying or a == series_axis]
    listed = " and ".join(by) if len(by) < 3 else ", ".join(by[:-1]) + " and " + by[-1]
    title = f"Latency p50 (bars) with min-p95 whiskers by {listed}{suffix}"
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
                points = []
                for m in members:
                    if panel_axis and axis_value(m, panel_axis) != pv:
                        continue
                    if series_axis and axis_value(m, series_axis) != sv:
                        continue
                    point = _latency_point(m, axis_text("target", axis_value(m, "target")))
                    if point is not None:
                        points.append(point)
                text = value_label(series_axis, sv) if series_axis else "p50"
                series.append(Series(text, tuple(points)))
            panels.append(
                Panel(
                    "bars",
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
        width = max(5.5, (1.0 + 0.55 * len(targets) * max(1, len(series_values))) * len(panels))
        out.append(
            FigureData(
                _numbered(name, n, len(facets)),
                _titled(title, facet),
                tuple(panels),
                cols=len(panels),
                width=min(width, 16.0),
                panel_height=3.2,
                legend_series=series_axis is not None,
            )
        )
    return out


def latency_by_payload(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[FigureData]:
    """Fig. 5: latency per target, a panel per payload (``latency-payload``)."""
    return latency_bars("latency-payload", "", aggs, axes, "payload", None)


def latency_by_qos(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[FigureData]:
    """Fig. 8: latency per target, a bar per QoS (``latency-qos``); "under faults" when
    the cells ran with faults."""
    suffix = " under faults" if any(axes.values(aggs, "faults")) else ""
    return latency_bars("latency-qos", suffix, aggs, axes, None, "qos")


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
                        x, y = axis_value(m, size_axis), m.metrics[metric].mean
                        if axis_value(m, "target") != target or x is None or y is None:
                            continue
                        points.append(Point(float(x), y, marks=marks_of(m)))
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
                width=11.0,
                panel_height=2.8,
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
                width=11.0,
                panel_height=3.6,
            )
        )
    return [replace(f, name=_numbered(f.name, n, len(out))) for n, f in enumerate(out)]


def build_figures(
    aggs: Sequence[RepeatAggregate],
    cells: Sequence[tuple[RepeatAggregate, list[CellPlan]]],
    axes: ReportAxes | None = None,
) -> list[FigureData]:
    """The figures that fit the varying axes (same rules as the tables) plus the CDFs."""
    axes = axes or ReportAxes.inferred()
    varying = axes.varying(aggs)
    figs: list[FigureData] = []
    if "payload" in varying or "target" in varying:
        figs += latency_by_payload(aggs, axes)
    for size in size_axes(varying):
        figs += scaling(aggs, axes, size)
    if "qos" in varying:
        figs += latency_by_qos(aggs, axes)
    figs += latency_cdfs(cells, axes)
    return figs
