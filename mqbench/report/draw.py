"""Draw :class:`~mqbench.report.plotdata.FigureData` with matplotlib and save it.

matplotlib's object API on the Agg canvas (no pyplot state, no display), constrained
layout. One legend per figure, outside and below the panels, so it never covers a title or
data. Log axes in milliseconds read 0.1, 0.2, 0.5, 1, 2 (never 10^-1); the tail's log axis
reads 1, 0.1, 0.01. Marks: hatched bars, hollow (†) or crossed (§) points, dashed (†),
dotted (‡) or dash-dotted (§) distribution lines, each with a legend entry; the mark's
symbol is written next to marked bars and points, as in the tables.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from mqbench.errors import UsageError
from mqbench.report.marks import LEGEND, Mark
from mqbench.report.plotdata import FigureData, Panel

HATCHES: Final[dict[Mark, str]] = {
    Mark.SATURATED: "///",
    Mark.LATENCY_BOUND: "...",
    Mark.INVALID: "xx",
    Mark.BACKLOG: "\\\\",
}
LINESTYLES: Final[dict[Mark, Literal["--", ":", "-."]]] = {
    Mark.SATURATED: "--",
    Mark.LATENCY_BOUND: ":",
    Mark.INVALID: "-.",
    Mark.BACKLOG: "--",
}
MARKERS: Final[dict[Mark, tuple[str, bool]]] = {
    Mark.SATURATED: ("o", False),
    Mark.LATENCY_BOUND: ("D", False),
    Mark.INVALID: ("X", True),
    Mark.BACKLOG: ("s", False),
}
"""Marker and whether it is filled, for a point with the mark."""
PRIORITY: Final = (Mark.INVALID, Mark.SATURATED, Mark.LATENCY_BOUND, Mark.BACKLOG)
"""Which mark's style wins when a value has several (every symbol is still written)."""
LEGEND_COLUMNS: Final = 4
TITLE_CHARS_PER_INCH: Final = 8.5
"""Characters of a title line per inch of figure width (longer titles wrap)."""
DPI: Final = 150


@dataclass
class NamedFigure:
    """A figure's data and the matplotlib figure drawn from it (saved as ``<name>.*``)."""

    data: FigureData
    figure: Any  # matplotlib.figure.Figure

    @property
    def name(self) -> str:
        """The file stem."""
        return self.data.name


def new_figure(width: float, height: float) -> Any:
    """A Figure on an Agg canvas (thread-safe, no pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plain_number(value: float) -> str:
    """A tick label without exponent: ``0.2``, ``1``, ``50``, ``2,000``, ``0.0001``."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else ""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return str(np.format_float_positional(float(f"{value:.3g}"), trim="-"))


SUBS: Final = (
    (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0),
    (1.0, 2.0, 3.0, 5.0),
    (1.0, 2.0, 5.0),
    (1.0, 3.0),
    (1.0,),
)
"""Candidate labelled ticks within a decade of a log axis, densest first."""


def log_subs(low: float, high: float, length: float, room: float) -> tuple[float, ...]:
    """The densest :data:`SUBS` whose labels keep ``room`` inches apart on an axis of
    ``length`` inches showing ``low`` .. ``high`` (so 0.1, 0.2, 0.5, 1, 2 rather than
    0.6, 0.7, 0.8, 0.9 piled up under 1)."""
    decades = max(math.log10(high / low), 0.3) if low > 0 and high > low else 1.0
    per_decade = length / decades
    for subs in SUBS:
        ratios = [*subs[1:], 10.0]
        gap = min(math.log10(b / a) for a, b in zip(subs, ratios, strict=True))
        if gap * per_decade >= room:
            return subs
    return SUBS[-1]


def thin_ticks(values: Sequence[float], log: bool, min_gap: float = 0.07) -> list[float]:
    """The values to label on a matrix axis, dropping any closer than ``min_gap`` of the
    axis span to the previous one kept (their labels would overlap)."""
    pos = sorted(set(values))
    if len(pos) < 2:
        return pos
    f = (lambda v: math.log10(v)) if log else (lambda v: v)
    span = f(pos[-1]) - f(pos[0])
    kept = [pos[0]]
    for v in pos[1:]:
        if f(v) - f(kept[-1]) >= min_gap * span:
            kept.append(v)
    if kept[-1] != pos[-1]:
        kept[-1] = pos[-1]  # the largest value is always labelled
    return kept


def _style(marks: Sequence[Mark]) -> Mark | None:
    return next((m for m in PRIORITY if m in marks), None)


def _colors(labels: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {text: cmap(i % 10) for i, text in enumerate(dict.fromkeys(labels))}


def _data_range(values: Sequence[float]) -> tuple[float, float]:
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if not positive:
        return 1.0, 10.0
    return min(positive), max(positive)


def _set_ticks(ax: Any, panel: Panel, size: tuple[float, float]) -> None:
    """Tick positions and labels of both axes; ``size``: the panel's (width, height) in
    inches, which decides how densely a log axis is labelled."""
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        LogLocator,
        NullFormatter,
        NullLocator,
    )

    number = FuncFormatter(lambda v, _pos: plain_number(v))
    for which, scale, style in (
        ("x", panel.xscale, panel.xticks),
        ("y", panel.yscale, panel.yticks),
    ):
        axis = ax.xaxis if which == "x" else ax.yaxis
        if which == "x" and panel.kind == "bars":
            continue  # categories, labelled by _draw_bars
        if style == "values":
            xs = [float(p.x) for s in panel.series for p in s.points]
            axis.set_major_locator(FixedLocator(thin_ticks(xs, scale == "log")))
            axis.set_minor_locator(NullLocator())
            axis.set_major_formatter(number)
            continue
        if scale == "log":
            low, high = ax.get_xlim() if which == "x" else ax.get_ylim()  # as autoscaled
            length, room = (0.7 * size[0], 0.38) if which == "x" else (0.6 * size[1], 0.22)
            subs = (1.0,) if style == "fraction" else log_subs(low, high, length, room)
            axis.set_major_locator(LogLocator(base=10, subs=subs))
            axis.set_minor_locator(LogLocator(base=10, subs=tuple(np.arange(1, 10.0))))
            axis.set_minor_formatter(NullFormatter())
        axis.set_major_formatter(number)


def _mark_text(ax: Any, x: float, y: float, marks: Sequence[Mark]) -> None:
    if marks:
        ax.annotate(
            "".join(m.value for m in marks),
            (x, y),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize="small",
        )


def _draw_lines(ax: Any, panel: Panel, colors: dict[str, Any]) -> None:
    ax.margins(x=0.08, y=0.15)  # room for the mark symbols above the points
    drawn = [s for s in panel.series if s.points]
    for i, s in enumerate(drawn):
        color = colors[s.label]
        xs = [float(p.x) for p in s.points]
        # earlier lines wider, so a line hidden under a later one with equal values shows
        width = 1.3 + 1.6 * (len(drawn) - 1 - i) / max(1, len(drawn) - 1)
        ax.plot(xs, s.ys, color=color, linewidth=width, label=s.label)
        for p in s.points:
            style = _style(p.marks)
            marker, filled = MARKERS[style] if style else ("o", True)
            ax.plot(
                [float(p.x)],
                [p.y],
                marker=marker,
                linestyle="",
                color=color,
                markerfacecolor=color if filled else "white",
                markersize=7 if style else 5,
            )
            _mark_text(ax, float(p.x), p.y, p.marks)


def _draw_bars(ax: Any, panel: Panel, colors: dict[str, Any], panel_width: float) -> None:
    series = [s for s in panel.series if s.points]
    width = 0.8 / max(1, len(series))
    index = {c: i for i, c in enumerate(panel.categories)}
    for i, s in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        for p in s.points:
            x = index[str(p.x)] + offset
            hatch = "".join(HATCHES[m] for m in p.marks) or None
            ax.bar(
                [x],
                [p.y],
                width,
                color=colors[s.label],
                edgecolor="black",
                linewidth=0.5,
                hatch=hatch,
            )
            low = p.y if p.low is None else min(p.low, p.y)
            high = p.y if p.high is None else max(p.high, p.y)
            ax.errorbar(
                [x],
                [p.y],
                yerr=[[p.y - low], [high - p.y]],
                fmt="none",
                ecolor="black",
                capsize=2,
                linewidth=0.8,
            )
            _mark_text(ax, x, high, p.marks)
    labels = list(panel.categories)
    # a label is about 0.09 in per character; slanted labels when they would touch
    crowded = len(labels) > 1 and 0.09 * sum(len(c) + 2 for c in labels) > 0.75 * panel_width
    ax.set_xticks(
        range(len(labels)),
        labels,
        rotation=30 if crowded else 0,
        ha="right" if crowded else "center",
        rotation_mode="anchor",
    )
    ax.set_xlim(-0.6, len(labels) - 0.4)
    values = [v for s in series for p in s.points for v in (p.y, p.low, p.high) if v]
    low, high = _data_range(values)
    ax.set_ylim(low / 1.6, high * 1.6)


def _draw_steps(ax: Any, panel: Panel, colors: dict[str, Any]) -> None:
    for s in panel.series:
        if not s.points:
            continue
        style = _style(s.marks)
        ax.step(
            [float(x) for x in s.xs],
            s.ys,
            where=panel.step,
            color=colors[s.label],
            linestyle=LINESTYLES[style] if style else "-",
            linewidth=1.3,
            label=s.label,
        )


def legend_columns(labels: Sequence[str], width: float) -> int:
    """Legend columns that fit ``width`` inches: an entry is about 0.075 in per character
    of its label plus 0.6 in for the handle and the gap."""
    widest = max((0.075 * len(t) + 0.6 for t in labels), default=1.0)
    return max(1, min(LEGEND_COLUMNS, len(labels), int(0.95 * width / widest)))


def _mark_handle(kind: str, mark: Mark) -> Any:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    text = LEGEND[mark]
    if kind == "bars":
        return Patch(facecolor="white", edgecolor="black", hatch=HATCHES[mark], label=text)
    if kind == "steps":
        return Line2D([], [], color="black", linestyle=LINESTYLES[mark], label=text)
    marker, filled = MARKERS[mark]
    return Line2D(
        [],
        [],
        marker=marker,
        linestyle="",
        color="black",
        markerfacecolor="black" if filled else "white",
        label=text,
    )


def _series_handle(kind: str, text: str, color: Any) -> Any:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if kind == "bars":
        return Patch(facecolor=color, edgecolor="black", label=text)
    if kind == "lines":
        return Line2D([], [], color=color, marker="o", label=text)
    return Line2D([], [], color=color, label=text)


def draw(data: FigureData) -> Any:
    """The matplotlib figure of ``data``: panels in a grid, the title on top, one legend
    (series, then one entry per mark drawn) below the panels."""
    labels = [s.label for p in data.panels for s in p.series if s.points]
    colors = _colors(labels)
    kind = data.panels[0].kind if data.panels else "lines"
    entries = (list(colors) if data.legend_series else []) + [LEGEND[m] for m in data.marks]
    ncol = legend_columns(entries, data.width)
    title = textwrap.fill(data.title, int(data.width * TITLE_CHARS_PER_INCH))
    height = data.panel_height * data.rows + 0.35 * (title.count("\n") + 1) + 0.4
    height += 0.25 * -(-len(entries) // ncol)  # the legend's rows
    fig = new_figure(data.width, height)
    grid = fig.subplots(data.rows, data.cols, squeeze=False)
    filled = {(p.row, p.col) for p in data.panels}
    for r in range(data.rows):
        for c in range(data.cols):
            if (r, c) not in filled:
                grid[r][c].set_visible(False)
    for panel in data.panels:
        ax = grid[panel.row][panel.col]
        ax.set_xscale(panel.xscale)
        ax.set_yscale(panel.yscale)
        if panel.kind == "lines":
            _draw_lines(ax, panel, colors)
        elif panel.kind == "bars":
            _draw_bars(ax, panel, colors, data.width / data.cols)
        else:
            _draw_steps(ax, panel, colors)
        _set_ticks(ax, panel, (data.width / data.cols, data.panel_height))
        if panel.ymin is not None or panel.ymax is not None:
            ax.set_ylim(bottom=panel.ymin, top=panel.ymax)
        if panel.title:
            ax.set_title(panel.title, fontsize="medium")
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(which="major", alpha=0.3)
    handles = []
    if data.legend_series:
        handles += [_series_handle(kind, text, color) for text, color in colors.items()]
    handles += [_mark_handle(kind, m) for m in data.marks]
    if handles:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=ncol,
            fontsize="small",
            frameon=False,
        )
    fig.suptitle(title)
    return fig


def render_figures(figures: Sequence[FigureData]) -> list[NamedFigure]:
    """Draw every figure."""
    return [NamedFigure(d, draw(d)) for d in figures]


def save_figure(fig: NamedFigure, folder: Path) -> list[Path]:
    """Write ``<name>.png`` (150 dpi) and ``<name>.pdf`` into ``folder``; return the paths."""
    paths = []
    path = folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for ext in ("png", "pdf"):
            path = folder / f"{fig.name}.{ext}"
            meta = {"CreationDate": None} if ext == "pdf" else None
            fig.figure.savefig(path, dpi=DPI, metadata=meta)
            paths.append(path)
    except OSError as exc:
        raise UsageError(
            f"--figures {folder}: cannot write {path}: {exc.strerror or exc}"
        ) from None
    return paths
