"""Figures in the style of the mq-bench paper (Figs 5-8) plus latency CDFs from records.

Built with matplotlib's object API on the Agg canvas (no pyplot state, no display), saved
as PNG (150 dpi) and PDF. Cells where the generator saturated are drawn hatched (bars) or
with hollow markers (lines) and the legend says so. The CDFs are computed from the delivery
records themselves (latency from the intended send time, via the schedule), never from
summary quantiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from mqbench.analysis.kernel import Hist, histogram, merge_hists, read_chunk
from mqbench.analysis.plan import CellPlan
from mqbench.analysis.repeats import RepeatAggregate
from mqbench.errors import UsageError
from mqbench.records.format import LAT_UNIT_NS, RECORD_SIZE
from mqbench.records.schedule import intended_ns_array
from mqbench.report.tables import axis_text, axis_value, axis_values, facets

HATCH: Final = "///"
SATURATED_LABEL: Final = "generator saturated"
CDF_CHUNK: Final = 1 << 22
CDF_MAX_LINES: Final = 10


@dataclass
class NamedFigure:
    """A figure and the file stem it is saved under."""

    name: str
    figure: Any  # matplotlib.figure.Figure


def new_figure(width: float, height: float) -> Any:
    """A Figure on an Agg canvas (thread-safe, no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _saturated_handle(kind: str) -> Any:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if kind == "bar":
        return Patch(facecolor="white", edgecolor="black", hatch=HATCH, label=SATURATED_LABEL)
    return Line2D(
        [],
        [],
        marker="o",
        linestyle="",
        markerfacecolor="none",
        color="black",
        label=SATURATED_LABEL,
    )


def _bars(
    ax: Any, groups: list[str], series: list[tuple[str, list[RepeatAggregate | None]]]
) -> bool:
    """Grouped bars of p50 (ms) with min..p95 whiskers; returns whether any is saturated."""
    width = 0.8 / max(1, len(series))
    colors = _colors(len(series))
    saturated = False
    for i, (label, aggs) in enumerate(series):
        xs, heights, lo, hi, hatches = [], [], [], [], []
        for g, agg in enumerate(aggs):
            if agg is None or agg.metrics["latency_p50_us"].mean is None:
                continue
            p50 = float(agg.metrics["latency_p50_us"].mean or 0) / 1000
            mn = float(agg.metrics["latency_min_us"].mean or 0) / 1000
            p95 = float(agg.metrics["latency_p95_us"].mean or 0) / 1000
            xs.append(g + (i - (len(series) - 1) / 2) * width)
            heights.append(max(p50, 1e-4))
            lo.append(max(0.0, p50 - max(mn, 1e-4)))
            hi.append(max(0.0, p95 - p50))
            hatches.append(HATCH if agg.any_saturated else None)
            saturated |= agg.any_saturated
        if not xs:
            continue
        bars = ax.bar(
            xs, heights, width, label=label, color=colors[i], edgecolor="black", linewidth=0.5
        )
        for bar, hatch in zip(bars, hatches, strict=True):
            if hatch:
                bar.set_hatch(hatch)
        ax.errorbar(
            xs, heights, yerr=[lo, hi], fmt="none", ecolor="black", capsize=2, linewidth=0.8
        )
    ax.set_xticks(range(len(groups)), groups, rotation=30 if len(groups) > 4 else 0)
    ax.set_yscale("log")
    ax.grid(axis="y", which="both", alpha=0.3)
    return saturated


def latency_by_payload(aggs: Sequence[RepeatAggregate]) -> list[NamedFigure]:
    """Fig. 5: p50 bars with min-p95 whiskers per target, one panel per payload, log axis."""
    out: list[NamedFigure] = []
    for n, (label, members) in enumerate(facets(aggs, ("target", "payload"))):
        payloads = axis_values(members, "payload")
        targets = axis_values(members, "target", ordered=False)
        fig = new_figure(max(4.0, 3.2 * len(payloads)), 3.4)
        axes = fig.subplots(1, len(payloads), squeeze=False)[0]
        saturated = False
        for ax, payload in zip(axes, payloads, strict=True):
            row: list[RepeatAggregate | None] = []
            for t in targets:
                hits = [
                    m
                    for m in members
                    if axis_value(m, "target") == t and axis_value(m, "payload") == payload
                ]
                row.append(hits[0] if hits else None)
            saturated |= _bars(ax, [axis_text("target", t) for t in targets], [("p50", row)])
            ax.set_title(f"Payload {axis_text('payload', payload)}")
            ax.set_xlabel("Target")
            ax.set_ylabel("Latency (ms)")
        if saturated:
            axes[0].legend(handles=[_saturated_handle("bar")], fontsize="small")
        fig.suptitle(
            "p50 (bars), min-p95 (whiskers)" + (f", {label}" if label else ""), fontsize="small"
        )
        out.append(NamedFigure(f"latency-payload{'-' + str(n + 1) if label else ''}", fig))
    return out


def _lines(
    ax: Any, aggs: Sequence[RepeatAggregate], x_axis: str, metric: str, scale: float = 1.0
) -> bool:
    targets = axis_values(aggs, "target", ordered=False)
    colors = _colors(len(targets))
    saturated = False
    for color, t in zip(colors, targets, strict=True):
        pts = []
        for m in aggs:
            if axis_value(m, "target") != t:
                continue
            v = m.metrics[metric].mean
            x = axis_value(m, x_axis)
            if v is not None and x is not None:
                pts.append((float(x), v * scale, m.any_saturated))
        if not pts:
            continue
        pts.sort()
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        ax.plot(xs, ys, color=color, label=axis_text("target", t), linewidth=1.2)
        ok = [p for p in pts if not p[2]]
        bad = [p for p in pts if p[2]]
        if ok:
            ax.plot([p[0] for p in ok], [p[1] for p in ok], "o", color=color, markersize=4)
        if bad:
            saturated = True
            ax.plot(
                [p[0] for p in bad],
                [p[1] for p in bad],
                "o",
                markerfacecolor="none",
                markeredgecolor=color,
                markersize=6,
            )
    ax.grid(alpha=0.3)
    return saturated


def scaling_by_pairs(aggs: Sequence[RepeatAggregate]) -> list[NamedFigure]:
    """Fig. 6: throughput, broker CPU and memory vs pairs; a row per resource profile."""
    out: list[NamedFigure] = []
    for n, (label, members) in enumerate(facets(aggs, ("target", "pairs", "resources"))):
        profiles = axis_values(members, "resources")
        fig = new_figure(10.0, 3.0 * len(profiles))
        grid = fig.subplots(len(profiles), 3, squeeze=False)
        from matplotlib.ticker import MaxNLocator

        saturated = False
        for r, profile in enumerate(profiles):
            rows = [m for m in members if axis_value(m, "resources") == profile]
            for c, (metric, ylabel) in enumerate(
                (
                    ("throughput_msg_s", "Throughput (msg/s)"),
                    ("broker_cpu_cores_mean", "CPU (cores)"),
                    ("broker_rss_mb_mean", "Memory (MB)"),
                )
            ):
                ax = grid[r][c]
                saturated |= _lines(ax, rows, "pairs", metric)
                ax.set_xlabel("Client pairs")
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_ylabel(ylabel)
                if profile is not None:
                    ax.set_title(f"{profile}", fontsize="small")
        handles, labels = grid[0][0].get_legend_handles_labels()
        if saturated:
            handles.append(_saturated_handle("line"))
            labels.append(SATURATED_LABEL)
        fig.legend(
            handles,
            labels,
            loc="outside upper center",
            ncol=min(6, len(labels) or 1),
            fontsize="small",
        )
        if label:
            fig.suptitle(label, fontsize="small")
        out.append(NamedFigure(f"scaling-pairs{'-' + str(n + 1) if label else ''}", fig))
    return out


def fanout_by_subscribers(aggs: Sequence[RepeatAggregate]) -> list[NamedFigure]:
    """Fig. 7: aggregate delivered throughput vs subscribers, a line per target."""
    out: list[NamedFigure] = []
    for n, (label, members) in enumerate(facets(aggs, ("target", "subscribers"))):
        fig = new_figure(5.0, 3.4)
        ax = fig.subplots()
        from matplotlib.ticker import MaxNLocator

        saturated = _lines(ax, members, "subscribers", "throughput_msg_s")
        ax.set_xlabel("Subscribers")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("Throughput (msg/s)")
        handles, _ = ax.get_legend_handles_labels()
        if saturated:
            handles.append(_saturated_handle("line"))
        ax.legend(handles=handles, fontsize="small")
        ax.set_title("Fanout throughput" + (f" ({label})" if label else ""), fontsize="small")
        out.append(NamedFigure(f"fanout-subscribers{'-' + str(n + 1) if label else ''}", fig))
    return out


def latency_by_qos(aggs: Sequence[RepeatAggregate]) -> list[NamedFigure]:
    """Fig. 8: p50 bars with min-p95 whiskers by target and QoS (log axis)."""
    out: list[NamedFigure] = []
    for n, (label, members) in enumerate(facets(aggs, ("target", "qos"))):
        targets = axis_values(members, "target", ordered=False)
        levels = axis_values(members, "qos")
        fig = new_figure(max(4.5, 1.2 * len(targets) + 2), 3.4)
        ax = fig.subplots()
        series: list[tuple[str, list[RepeatAggregate | None]]] = []
        for q in levels:
            row: list[RepeatAggregate | None] = []
            for t in targets:
                hits = [
                    m for m in members if axis_value(m, "target") == t and axis_value(m, "qos") == q
                ]
                row.append(hits[0] if hits else None)
            series.append((axis_text("qos", q), row))
        saturated = _bars(ax, [axis_text("target", t) for t in targets], series)
        ax.set_xlabel("Target")
        ax.set_ylabel("Latency (ms)")
        handles, _ = ax.get_legend_handles_labels()
        if saturated:
            handles.append(_saturated_handle("bar"))
        ax.legend(handles=handles, fontsize="small")
        faults = [v for v in axis_values(members, "faults") if v]
        title = "Median latency with min-p95 whiskers by QoS"
        if faults:
            title += " under faults"
        ax.set_title(title + (f" ({label})" if label else ""), fontsize="small")
        out.append(NamedFigure(f"latency-qos{'-' + str(n + 1) if label else ''}", fig))
    return out


def latency_hist_from_records(plan: CellPlan, chunk_records: int = CDF_CHUNK) -> Hist:
    """Histogram (100 ns units) of latency from the intended send time of every delivery
    whose intended time lies in the window, read from the record files chunk by chunk."""
    hists: list[Hist] = []
    for path in plan.delivery_files:
        total = Path(path).stat().st_size // RECORD_SIZE
        for offset in range(0, total, chunk_records):
            rec = read_chunk(path, offset, min(chunk_records, total - offset))
            pub, seq = rec["pub"], rec["seq"]
            intended = intended_ns_array(plan.start_ns, plan.rate, plan.publishers, pub, seq)
            keep = (pub < plan.publishers) & (intended >= plan.win_start)
            keep &= intended < plan.win_end
            t_recv = rec["t_sent"][keep] + rec["lat"][keep].astype(np.int64) * LAT_UNIT_NS
            hists.append(histogram((t_recv - intended[keep]) // LAT_UNIT_NS))
    return merge_hists(hists)


def cdf_points(hist: Hist, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """(latency ms, cumulative fraction) of a histogram, thinned to about ``max_points``
    (the tail above the 99th percentile is kept at full resolution)."""
    values, counts = hist
    if values.size == 0:
        return np.zeros(0), np.zeros(0)
    frac = np.cumsum(counts) / counts.sum()
    x = values.astype(np.float64) * LAT_UNIT_NS / 1e6
    if values.size <= max_points:
        return x, frac
    grid = np.searchsorted(frac, np.linspace(0.0, 0.99, max_points // 2), side="left")
    tail = np.flatnonzero(frac >= 0.99)
    if tail.size > max_points // 2:
        tail = tail[np.linspace(0, tail.size - 1, max_points // 2).astype(np.int64)]
    idx = np.unique(np.concatenate([grid, tail, [values.size - 1]]))
    return x[idx], frac[idx]


def latency_cdfs(
    cells: Sequence[tuple[RepeatAggregate, list[CellPlan]]], max_lines: int = CDF_MAX_LINES
) -> list[NamedFigure]:
    """Latency CDFs from the records: one line per cell (its repeats pooled), log x axis;
    at most ``max_lines`` lines per figure; saturated cells dashed."""
    out: list[NamedFigure] = []
    drawable = [(a, plans) for a, plans in cells if any(p.delivery_files for p in plans)]
    for n in range(0, len(drawable), max_lines):
        part = drawable[n : n + max_lines]
        fig = new_figure(6.0, 3.8)
        ax = fig.subplots()
        colors = _colors(len(part))
        saturated = False
        for color, (agg, plans) in zip(colors, part, strict=True):
            hist = merge_hists([latency_hist_from_records(p) for p in plans])
            x, y = cdf_points(hist)
            if x.size == 0:
                continue
            x = np.maximum(x, 1e-4)
            style = "--" if agg.any_saturated else "-"
            saturated |= agg.any_saturated
            label = agg.base_id + (" (saturated)" if agg.any_saturated else "")
            ax.step(x, y, where="post", linestyle=style, color=color, label=label, linewidth=1.2)
        ax.set_xscale("log")
        ax.set_ylim(0, 1.01)
        ax.set_xlabel("Latency from intended send time (ms)")
        ax.set_ylabel("Fraction of deliveries")
        ax.grid(which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="x-small", loc="lower right")
        ax.set_title(
            "Latency CDF (from records"
            + (", dashed: " + SATURATED_LABEL if saturated else "")
            + ")",
            fontsize="small",
        )
        suffix = f"-{n // max_lines + 1}" if len(drawable) > max_lines else ""
        out.append(NamedFigure(f"latency-cdf{suffix}", fig))
    return out


def build_figures(
    aggs: Sequence[RepeatAggregate], cells: Sequence[tuple[RepeatAggregate, list[CellPlan]]]
) -> list[NamedFigure]:
    """The figures that fit the varying axes (same rules as the tables) plus the CDFs."""
    from mqbench.report.tables import varying_axes

    varying = varying_axes(aggs)
    figs: list[NamedFigure] = []
    if "payload" in varying or "target" in varying:
        figs += latency_by_payload(aggs)
    if "pairs" in varying:
        figs += scaling_by_pairs(aggs)
    if "subscribers" in varying:
        figs += fanout_by_subscribers(aggs)
    if "qos" in varying:
        figs += latency_by_qos(aggs)
    figs += latency_cdfs(cells)
    return figs


def save_figure(fig: NamedFigure, folder: Path) -> list[Path]:
    """Write ``<name>.png`` (150 dpi) and ``<name>.pdf`` into ``folder``; return the paths."""
    paths = []
    path = folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for ext in ("png", "pdf"):
            path = folder / f"{fig.name}.{ext}"
            meta = {"CreationDate": None} if ext == "pdf" else None
            fig.figure.savefig(path, dpi=150, metadata=meta)
            paths.append(path)
    except OSError as exc:
        raise UsageError(
            f"--figures {folder}: cannot write {path}: {exc.strerror or exc}"
        ) from None
    return paths
