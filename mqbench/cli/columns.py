"""Plain-text tables that fit a width without ever cutting a value.

Rich's tables squeeze a column that does not fit until its numbers read ``1…`` and its
cell ids ``tbmq-st…``; the ids are what ``--only`` needs and the numbers are the result,
so the tables people read are laid out here instead. :func:`layout` keeps every value
whole and, when the table is wider than the terminal, in this order:

1. puts the first column (the cell id) on a line of its own above the rest of its row
   (``stacked``), so the numbers get the whole width;
2. leaves out the columns marked optional (``drop`` > 0, highest first) and names them
   under the table, so the reader knows ``--wide`` shows them;
3. if it still does not fit, prints the lines longer than the width: the terminal wraps
   them, nothing is cut.

Headers may have two lines (``"p50\\n(ms)"``); a value is a string or a Rich ``Text``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from rich.cells import cell_len
from rich.text import Text

GAP: Final = 2
"""Spaces between columns."""
INDENT: Final = 2
"""Indent of the numbers under a stacked cell id."""


@dataclass(frozen=True)
class Column:
    """One column: its header, its alignment and how readily it is left out."""

    header: str
    align: Literal["left", "right"] = "right"
    drop: int = 0
    """0: always shown; otherwise left out when the table does not fit, highest first."""


@dataclass
class Layout:
    """What :func:`layout` decided and the lines to print."""

    lines: list[Text]
    width: int
    """The widest line (cells)."""
    stacked: bool = False
    dropped: list[str] = field(default_factory=list)
    """Headers (one line) of the columns left out."""


def _text(value: str | Text) -> Text:
    return value if isinstance(value, Text) else Text(value)


def _header_lines(column: Column) -> list[str]:
    return column.header.split("\n")


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[Text]]) -> list[int]:
    widths = []
    for i, column in enumerate(columns):
        head = max(cell_len(h) for h in _header_lines(column))
        widths.append(max([head, *(r[i].cell_len for r in rows)]))
    return widths


def _join(parts: Sequence[Text], widths: Sequence[int], columns: Sequence[Column]) -> Text:
    line = Text()
    for i, (part, width, column) in enumerate(zip(parts, widths, columns, strict=True)):
        pad = " " * (width - part.cell_len)
        if i:
            line.append(" " * GAP)
        if column.align == "right":
            line.append(pad)
            line.append_text(part)
        else:
            line.append_text(part)
            if i < len(parts) - 1:
                line.append(pad)
    line.rstrip()
    return line


def _span(widths: Sequence[int]) -> int:
    return sum(widths) + GAP * max(0, len(widths) - 1)


def _header(columns: Sequence[Column], widths: Sequence[int], indent: int = 0) -> list[Text]:
    depth = max(len(_header_lines(c)) for c in columns)
    lines = []
    for k in range(depth):
        parts = []
        for c in columns:
            head = _header_lines(c)
            # a one-line header sits on the last header line, next to the units of the others
            offset = depth - len(head)
            parts.append(Text(head[k - offset] if k >= offset else "", style="bold"))
        line = _join(parts, widths, columns)
        lines.append(Text(" " * indent) + line if indent else line)
    return lines


def _flat(columns: Sequence[Column], rows: Sequence[Sequence[Text]]) -> list[Text]:
    widths = _widths(columns, rows)
    lines = _header(columns, widths)
    lines.append(Text("─" * _span(widths), style="dim"))
    lines.extend(_join(r, widths, columns) for r in rows)
    return lines


def _stacked(columns: Sequence[Column], rows: Sequence[Sequence[Text]]) -> list[Text]:
    rest = list(columns[1:])
    widths = _widths(rest, [r[1:] for r in rows])
    lines = [Text(columns[0].header, style="bold")]
    lines.extend(_header(rest, widths, INDENT))
    lines.append(Text("─" * (INDENT + _span(widths)), style="dim"))
    for r in rows:
        if r[0].plain:  # an empty first value continues the group above (same id)
            lines.append(r[0].copy())
        lines.append(Text(" " * INDENT) + _join(r[1:], widths, rest))
    return lines


def _widest(lines: Sequence[Text]) -> int:
    return max((line.cell_len for line in lines), default=0)


def _keep(
    columns: Sequence[Column], rows: Sequence[Sequence[Text]], keep: Sequence[int]
) -> tuple[list[Column], list[list[Text]]]:
    return [columns[i] for i in keep], [[r[i] for i in keep] for r in rows]


def layout(columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], width: int) -> Layout:
    """Lay out ``rows`` under ``columns`` in at most ``width`` cells where possible (see the
    module docstring for the order of what gives way)."""
    cells = [[_text(v) for v in row] for row in rows]
    for row in cells:
        if len(row) != len(columns):
            raise ValueError(f"a row has {len(row)} values for {len(columns)} columns")
    keep = list(range(len(columns)))
    dropped: list[str] = []
    order = sorted(
        (i for i, c in enumerate(columns) if c.drop > 0), key=lambda i: (-columns[i].drop, -i)
    )
    while True:
        cols, kept = _keep(columns, cells, keep)
        lines = _flat(cols, kept)
        if _widest(lines) <= width:
            return Layout(lines, _widest(lines), False, dropped)
        lines = _stacked(cols, kept) if len(cols) > 1 else lines
        if _widest(lines) <= width or not order:
            return Layout(lines, _widest(lines), len(cols) > 1, dropped)
        gone = order.pop(0)
        keep.remove(gone)
        dropped.append(columns[gone].header.replace("\n", " "))


def wrap(text: Text, width: int, indent: int = 0) -> list[Text]:
    """``text`` broken at spaces into lines of at most ``width`` cells, the lines after the
    first indented by ``indent``; a word longer than a line stays whole (never cut)."""
    plain = text.plain
    cuts: list[int] = []
    start = 0
    room = width
    for word in re.finditer(r"\S+", plain):
        if cell_len(plain[start : word.end()]) > room and word.start() > start:
            cuts.append(word.start())
            start = word.start()
            room = width - indent
    out = []
    for i, line in enumerate(text.divide(cuts)):
        line.rstrip()
        out.append(Text(" " * indent) + line if i and indent else line)
    return out
