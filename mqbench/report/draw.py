"""Draw :class:`~mqbench.report.plotdata.FigureData` with matplotlib and save it.

matplotlib's object API on the Agg canvas (no pyplot state, no display), constrained
layout, fonts sized for print (:data:`PRINT_RC`: 8 pt text, 7 pt ticks and legend at 3.5 or
7 in wide) and PDFs with TrueType (Type 42) fonts, never Type 3. One legend per figure,
outside and below the panels, so it never covers a title or data; a note under it says
what the error bars are. Log axes in milliseconds read 0.1, 0.2, 0.5, 1, 2 (never 10^-1);
the tail's log axis reads 1, 0.1, 0.01. Marks: hollow (†, ‡) or crossed (§) points, dashed
(†), dotted (‡) or dash-dotted (§) distribution lines, each with a legend entry; the
mark's symbol is written next to marked points, as in the tables.
"""

from __future__ import annotations

import contextlib
import math
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from mqbench.errors import UsageError
from mqbench.report.marks import LEGEND, Mark
from mqbench.report.plotdata import FigureData, Panel, Point

LINESTYLES: Final[dict[Mark, Literal["--", ":", "-."]]] = {
    Mark.SATURATED: "--",
    Mark.LATENCY_BOUND: ":",
    Mark.INVALID: "-.",
    Mark.BACKLOG: "--",
    Mark.UNMATCHED: "--",
}
MARKERS: Final[dict[Mark, tuple[str, bool]]] = {
    Mark.SATURATED: ("o", False),
    Mark.LATENCY_BOUND: ("D", False),
    Mark.INVALID: ("X", True),
    Mark.BACKLOG: ("s", False),
    Mark.UNMATCHED: ("s", False),
}
"""Marker and whether it is filled, for a point with the mark."""
PRIORITY: Final = (
    Mark.INVALID,
    Mark.SATURATED,
    Mark.LATENCY_BOUND,
    Mark.BACKLOG,
    Mark.UNMATCHED,
)
"""Which mark's style wins when a value has several (every symbol is still written)."""
STAT_MARKERS: Final = {"": "o", "p50": "o", "p99": "^"}
LEGEND_COLUMNS: Final = 4
TITLE_CHARS_PER_INCH: Final = 15.0
"""Characters of a 9 pt title line per inch of figure width (longer titles wrap)."""
DPI: Final = 300
PRINT_RC: Final[dict[str, Any]] = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "figure.titlesize": 9,
    "lines.linewidth": 1.2,
    "lines.markersize": 4,
    "errorbar.capsize": 2,
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
}
"""Print sizes: legible at 3.5 in (one column) and 7 in (two); TrueType fonts in PDFs."""
MIN_FONT_PT: Final = 7.0
"""The smallest text a figure has (ticks, legend, notes, mark symbols)."""


@contextlib.contextmanager
def print_style() -> Iterator[None]:
    """matplotlib settings of :data:`PRINT_RC` while drawing or saving."""
    from matplotlib import rc_context

    with rc_context(PRINT_RC):  # type: ignore[arg-type]
        yield


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
        if which == "x" and panel.kind == "points":
            continue  # categories, labelled by _draw_points
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
            fontsize=MIN_FONT_PT,
        )


def _errorbar(ax: Any, x: float, p: Point, color: Any) -> None:
    """The confidence interval of one mean at ``x`` (nothing when there is none)."""
    if p.low is None or p.high is None:
        return
    yerr = [[p.y - p.low], [p.high - p.y]]
    ax.errorbar([x], [p.y], yerr=yerr, fmt="none", ecolor=color, linewidth=0.8)


def _point_style(marks: Sequence[Mark], stat: str, color: Any) -> dict[str, Any]:
    """Marker of a point: its stat's shape, hollow when marked († ‡ ¶ ‖), an X for §."""
    style = _style(marks)
    marker = "X" if style is Mark.INVALID else STAT_MARKERS.get(stat, "o")
    hollow = style in (Mark.SATURATED, Mark.LATENCY_BOUND, Mark.BACKLOG, Mark.UNMATCHED)
    return {
        "marker": marker,
        "linestyle": "",
        "color": color,
        "markerfacecolor": "white" if hollow else color,
        "markersize": 5 if style else 4,
    }


def _draw_lines(ax: Any, panel: Panel, colors: dict[str, Any]) -> None:
    ax.margins(x=0.08, y=0.15)  # room for the mark symbols above the points
    drawn = [s for s in panel.series if s.points]
    for x0, x1 in panel.shaded:
        ax.axvspan(x0, x1, color="0.85", zorder=0, linewidth=0)
    for x in panel.marked_x:
        ax.axvline(x, color="0.3", linestyle=":", linewidth=1.0, zorder=0)
    if panel.ideal and drawn:
        values = [v for s in drawn for p in s.points for v in (float(p.x), p.y) if v > 0]
        lo, hi = min(values), max(values)
        ax.plot([lo, hi], [lo, hi], color="0.4", linestyle="--", linewidth=0.8)
    for i, s in enumerate(drawn):
        color = colors[s.label]
        xs = [float(p.x) for p in s.points]
        # earlier lines wider, so a line hidden under a later one with equal values shows
        width = 1.0 + 1.0 * (len(drawn) - 1 - i) / max(1, len(drawn) - 1)
        dashes = "--" if s.stat == "p99" else "-"
        ax.plot(xs, s.ys, color=color, linewidth=width, linestyle=dashes, label=s.label)
        for p in s.points:
            _errorbar(ax, float(p.x), p, color)
            ax.plot([float(p.x)], [p.y], **_point_style(p.marks, s.stat, color))
            _mark_text(ax, float(p.x), p.y, p.marks)


def _draw_points(ax: Any, panel: Panel, colors: dict[str, Any], panel_width: float) -> None:
    """Points over categories: the series of one label side by side, p50 and p99 of a label
    at the same place (one above the other)."""
    series = [s for s in panel.series if s.points]
    labels = list(dict.fromkeys(s.label for s in series))
    step = 0.7 / max(1, len(labels))
    index = {c: i for i, c in enumerate(panel.categories)}
    for s in series:
        offset = (labels.index(s.label) - (len(labels) - 1) / 2) * step
        color = colors[s.label]
        for p in s.points:
            x = index[str(p.x)] + offset
            _errorbar(ax, x, p, color)
            ax.plot([x], [p.y], **_point_style(p.marks, s.stat, color))
            _mark_text(ax, x, p.high if p.high is not None else p.y, p.marks)
    names = list(panel.categories)
    # a 7 pt label is about 0.06 in per character; slanted labels when they would touch
    crowded = len(names) > 1 and 0.06 * sum(len(c) + 2 for c in names) > 0.8 * panel_width
    ax.set_xticks(
        range(len(names)),
        names,
        rotation=30 if crowded else 0,
        ha="right" if crowded else "center",
        rotation_mode="anchor",
    )
    ax.set_xlim(-0.6, len(names) - 0.4)
    if panel.yscale == "log":
        values = [v for s in series for p in s.points for v in (p.y, p.low, p.high) if v]
        low, high = _data_range(values)
        ax.set_ylim(low / 1.6, high * 1.6)
    else:
        ax.margins(y=0.15)


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
    """Legend columns that fit ``width`` inches: a 7 pt entry is about 0.045 in per
    character of its label plus 0.4 in for the handle and the gap."""
    widest = max((0.045 * len(t) + 0.4 for t in labels), default=1.0)
    return max(1, min(LEGEND_COLUMNS, len(labels), int(0.95 * width / widest)))


def _mark_handle(kind: str, mark: Mark) -> Any:
    from matplotlib.lines import Line2D

    text = LEGEND[mark]
    if kind == "steps":
        return Line2D([], [], color="black", linestyle=LINESTYLES[mark], label=text)
    style = _point_style((mark,), "", "black")
    return Line2D([], [], label=text, **style)


def _series_handle(kind: str, text: str, color: Any) -> Any:
    from matplotlib.lines import Line2D

    if kind == "points":
        return Line2D([], [], color=color, marker="s", linestyle="", label=text)
    return Line2D([], [], color=color, label=text)


def _stat_handles(data: FigureData) -> list[Any]:
    """p50 / p99 legend entries when the figure shows both."""
    from matplotlib.lines import Line2D

    stats = list(dict.fromkeys(s.stat for p in data.panels for s in p.series if s.stat))
    lines = any(p.kind == "lines" for p in data.panels)
    return [
        Line2D(
            [],
            [],
            color="black",
            marker=STAT_MARKERS[stat],
            linestyle=("--" if stat == "p99" else "-") if lines else "",
            label=stat,
        )
        for stat in stats
    ]


def _legend_handles(data: FigureData, colors: dict[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D

    kind = data.panels[0].kind if data.panels else "lines"
    handles = []
    if data.legend_series:
        handles += [_series_handle(kind, t, c) for t, c in colors.items() if t]
    handles += _stat_handles(data)
    if any(p.ideal for p in data.panels):
        handles.append(
            Line2D([], [], color="0.4", linestyle="--", label="ideal (delivered = offered)")
        )
    return handles + [_mark_handle(kind, m) for m in data.marks]


def _panel(ax: Any, panel: Panel, colors: dict[str, Any], data: FigureData) -> None:
    ax.set_xscale(panel.xscale)
    ax.set_yscale(panel.yscale)
    if panel.kind == "lines":
        _draw_lines(ax, panel, colors)
    elif panel.kind == "points":
        _draw_points(ax, panel, colors, data.width / data.cols)
    else:
        _draw_steps(ax, panel, colors)
    _set_ticks(ax, panel, (data.width / data.cols, data.panel_height))
    if panel.ymin is not None or panel.ymax is not None:
        ax.set_ylim(bottom=panel.ymin, top=panel.ymax)
    if panel.title:
        ax.set_title(panel.title)
    ax.set_xlabel(panel.xlabel)
    if not (data.sharey and panel.col > 0):
        ax.set_ylabel(panel.ylabel)
    ax.grid(which="major", alpha=0.3)


def draw(data: FigureData) -> Any:
    """The matplotlib figure of ``data``: panels in a grid, the title on top, one legend
    (series, stats, then one entry per mark drawn) and the note below the panels."""
    with print_style():
        return _draw(data)


def _draw(data: FigureData) -> Any:
    labels = [s.label for p in data.panels for s in p.series if s.points]
    colors = _colors(labels)
    handles = _legend_handles(data, colors)
    ncol = legend_columns([h.get_label() for h in handles], data.width)
    title = textwrap.fill(data.title, int(data.width * TITLE_CHARS_PER_INCH))
    note = textwrap.fill(data.note, int(data.width * 17)) if data.note else ""
    height = data.panel_height * data.rows + 0.2 * (title.count("\n") + 1) + 0.45
    height += 0.16 * -(-len(handles) // ncol) + (0.13 * (note.count("\n") + 1) if note else 0)
    fig = new_figure(data.width, height)
    grid = fig.subplots(data.rows, data.cols, squeeze=False, sharey=data.sharey)
    filled = {(p.row, p.col) for p in data.panels}
    for r in range(data.rows):
        for c in range(data.cols):
            if (r, c) not in filled:
                grid[r][c].set_visible(False)
    for panel in data.panels:
        _panel(grid[panel.row][panel.col], panel, colors, data)
    if handles:
        legend = fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=ncol,
            frameon=False,
            title=note or None,
            title_fontsize=MIN_FONT_PT,
        )
        legend.get_title().set_color("0.3")
    elif note:
        fig.supxlabel(note, fontsize=MIN_FONT_PT, color="0.3")
    fig.suptitle(title)
    return fig


def render_figures(figures: Sequence[FigureData]) -> list[NamedFigure]:
    """Draw every figure."""
    return [NamedFigure(d, draw(d)) for d in figures]


def save_figure(fig: NamedFigure, folder: Path) -> list[Path]:
    """Write ``<name>.png`` (300 dpi) and ``<name>.pdf`` (vector, TrueType fonts) into
    ``folder``; return the paths."""
    paths = []
    path = folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for ext in ("png", "pdf"):
            path = folder / f"{fig.name}.{ext}"
            meta = {"CreationDate": None} if ext == "pdf" else None
            with print_style():
                fig.figure.savefig(path, dpi=DPI, metadata=meta)
            paths.append(path)
    except OSError as exc:
        raise UsageError(
            f"--figures {folder}: cannot write {path}: {exc.strerror or exc}"
        ) from None
    return paths


def save_figure_as(fig: NamedFigure, path: Path) -> Path:
    """Write the figure to ``path`` (its suffix, ``.png`` or ``.pdf``, decides the format)."""
    if path.suffix not in (".png", ".pdf", ".svg"):
        raise UsageError(f"--figure {path}: name a .png, .pdf or .svg file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with print_style():
            fig.figure.savefig(
                path, dpi=DPI, metadata={"CreationDate": None} if path.suffix == ".pdf" else None
            )
    except OSError as exc:
        raise UsageError(f"--figure {path}: cannot write ({exc.strerror or exc})") from None
    return path
