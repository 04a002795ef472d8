"""What a figure shows, as plain data: panels, series, points, labels, ticks and marks.

The figure builders (:mod:`mqbench.report.figures`) produce :class:`FigureData`; the
renderer (:mod:`mqbench.report.draw`) turns it into a matplotlib figure. Tests check the
data (points per line, axis labels, which panels exist) instead of comparing images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from mqbench.report.marks import Mark, ordered

PanelKind = Literal["lines", "points", "steps"]
"""``lines``: a line per series through its points; ``points``: points over categories
(targets), side by side per series; ``steps``: a step curve per series (distributions)."""
Stat = Literal["", "p50", "p99"]
"""Which latency percentile a series shows: decides its marker (and dashes a p99 line)."""
COLUMN_WIDTH: Final = 3.5
"""Inches: one column of a two-column paper."""
PAGE_WIDTH: Final = 7.0
"""Inches: both columns (``figure*``)."""
Scale = Literal["linear", "log"]
TickStyle = Literal["number", "ms", "fraction"]
"""How tick labels read: plain numbers, milliseconds (0.1, 0.2, 0.5, 1, 2 on log axes) or
fractions (1, 0.1, 0.01 on the tail's log axis)."""


@dataclass(frozen=True)
class Point:
    """One value: ``x`` a number (lines, steps) or a category (bars)."""

    x: float | str
    y: float
    low: float | None = None
    """Lower end of the 95 % confidence interval over repeats (None: no interval)."""
    high: float | None = None
    """Upper end of the 95 % confidence interval over repeats."""
    marks: tuple[Mark, ...] = ()


@dataclass(frozen=True)
class Series:
    """A line, a curve or a set of bars with one legend entry."""

    label: str
    points: tuple[Point, ...]
    marks: tuple[Mark, ...] = ()
    """Marks of the whole series (a CDF of one cell); point marks are on the points."""
    stat: Stat = ""
    """The percentile it shows; series of one label share a colour."""

    @property
    def xs(self) -> list[float | str]:
        """The x values in drawing order."""
        return [p.x for p in self.points]

    @property
    def ys(self) -> list[float]:
        """The y values in drawing order."""
        return [p.y for p in self.points]


@dataclass(frozen=True)
class Panel:
    """One set of axes."""

    kind: PanelKind
    title: str
    xlabel: str
    ylabel: str
    series: tuple[Series, ...]
    row: int = 0
    col: int = 0
    xscale: Scale = "linear"
    yscale: Scale = "linear"
    xticks: Literal["values"] | TickStyle = "number"
    """``values``: ticks exactly at the x values of the points (a matrix axis)."""
    yticks: TickStyle = "number"
    categories: tuple[str, ...] = ()
    """Points: the groups along x, in order."""
    ymin: float | None = None
    ymax: float | None = None
    step: Literal["post", "pre"] = "post"
    """Steps: ``post`` holds each y until the next x (a CDF), ``pre`` holds it back to the
    previous x (the tail, a fraction at or above each x)."""
    ideal: bool = False
    """Draw the line y = x (delivered equal to offered)."""
    shaded: tuple[tuple[float, float], ...] = ()
    """x ranges to shade (fault windows on a time axis)."""
    marked_x: tuple[float, ...] = ()
    """x values to mark with a dotted vertical line (step changes in a history)."""

    @property
    def marks(self) -> tuple[Mark, ...]:
        """Every mark drawn in this panel."""
        found = [m for s in self.series for m in s.marks]
        found += [m for s in self.series for p in s.points for m in p.marks]
        return ordered(found)


@dataclass(frozen=True)
class FigureData:
    """A whole figure: a grid of panels, a title and one legend below the panels."""

    name: str
    """File stem (``scaling-pairs``, ``latency-cdf-2``)."""
    title: str
    panels: tuple[Panel, ...]
    rows: int = 1
    cols: int = 1
    width: float = COLUMN_WIDTH
    """Inches: :data:`COLUMN_WIDTH` or :data:`PAGE_WIDTH`; the height follows from the rows."""
    panel_height: float = 2.2
    legend_series: bool = True
    """Whether the series labels go into the legend (False: one unlabelled series)."""
    sharey: bool = False
    """Panels share one y range (they are compared)."""
    note: str = ""
    """A line under the legend (what the error bars are, or that there are none)."""

    @property
    def marks(self) -> tuple[Mark, ...]:
        """Every mark drawn anywhere in the figure (each gets a legend entry)."""
        return ordered(m for p in self.panels for m in p.marks)

    def panel(self, row: int, col: int) -> Panel:
        """The panel at ``row``, ``col`` (KeyError when there is none)."""
        for p in self.panels:
            if (p.row, p.col) == (row, col):
                return p
        raise KeyError((row, col))
