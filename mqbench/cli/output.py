"""Where the CLI's output goes and how it looks: the two consoles, the width tables are laid
out for, machine formats (JSON, CSV), and the one way an analysis is printed.

People read the tables (``mqbench.cli.tables``) on stdout; with ``--format json|csv`` the
machine output is the only thing on stdout and everything for people (progress, notes,
where the results are) goes to stderr, so ``mqbench run ... --format json > out.json``
gives a file a program can read.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from rich.console import Console
from rich.text import Text

from mqbench.errors import UsageError

if TYPE_CHECKING:
    from mqbench.analysis.api import RunAnalysis
    from mqbench.analysis.summary import CellSummary
    from mqbench.records.fault_metrics import FaultMetrics

PIPED_WIDTH: Final = 100
"""Width tables are laid out for when stdout is not a terminal and COLUMNS is not set.
Lines are never cut to it: a value wider than this makes a longer line, not a ``…``."""

# On a terminal prose wraps at spaces (Rich); piped, a line stays one line (soft_wrap).
# Tables are laid out by cli/columns.py and always printed as they are (print_lines).
console = Console(highlight=False, soft_wrap=not sys.stdout.isatty())
"""stdout: tables and results for people (and machine output, written raw)."""
err_console = Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())
"""stderr: errors, notes, and everything for people when stdout carries JSON or CSV."""

Format = Literal["table", "json", "csv"]
FORMATS: Final[tuple[Format, ...]] = ("table", "json", "csv")


def parse_format(text: str) -> Format:
    """``--format``: ``table`` (for people), ``json`` or ``csv`` (UsageError otherwise)."""
    for fmt in FORMATS:
        if text == fmt:
            return fmt
    raise UsageError(f"--format {text!r}: choose {', '.join(FORMATS)}")


def people(fmt: Format) -> Console:
    """The console for people's output: stdout for tables, stderr when stdout is data."""
    return console if fmt == "table" else err_console


def table_width(target: Console | None = None) -> int:
    """How many cells wide a table may be: the terminal's width, else ``COLUMNS``, else
    :data:`PIPED_WIDTH` (read at call time, so a resized terminal or a test's env counts)."""
    target = target or console
    if target.is_terminal:
        return max(20, target.width)
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return PIPED_WIDTH


def print_lines(lines: Iterable[Text], target: Console | None = None) -> None:
    """Print laid-out lines as they are (the terminal wraps, nothing is cut)."""
    target = target or console
    for line in lines:
        target.print(line, soft_wrap=True)


def write_raw(text: str) -> None:
    """Write machine output to stdout unchanged (no markup, no wrapping)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list | dict | tuple):
        return json.dumps(value, sort_keys=True)
    return value


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as CSV with a header of every key in first-seen order (lists as JSON text)."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(keys), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return buffer.getvalue()


def to_json(data: Any) -> str:
    """Indented JSON text with a final newline."""
    return json.dumps(data, indent=2) + "\n"


@dataclass(frozen=True)
class View:
    """How results are shown: ``--format`` and ``--wide``."""

    fmt: Format = "table"
    wide: bool = False


def summaries_data(
    summaries: Sequence[CellSummary],
    location: str,
    faults: Mapping[str, FaultMetrics] | None = None,
) -> dict[str, Any]:
    """The JSON form of an analysis: where, every summary (as summary.json), fault metrics
    by cell id (as faults.json)."""
    return {
        "results": location,
        "cells": [s.to_dict() for s in summaries],
        "faults": {cid: m.to_dict() for cid, m in (faults or {}).items()},
    }


def print_analysis(
    analysis: RunAnalysis,
    location: str,
    view: View = View(),
    notes: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> None:
    """The one way an analysis is shown, whichever path produced it (local, URI, run).

    ``table``: the results table with its footnotes, the fault table, then ``notes``.
    ``json``: :func:`summaries_data` plus ``extra`` (``run`` adds the run's status and how
    each cell ended). ``csv``: one row per cell (summary.parquet's columns). Notes go to the
    people's console in every format.
    """
    from mqbench.cli.tables import fault_view, results_view

    if analysis.recovered:
        people(view.fmt).print(Text.assemble(("note: ", "yellow"), analysis.recovered))
    if view.fmt == "json":
        data = summaries_data(analysis.summaries, location, analysis.faults)
        write_raw(to_json({**data, **(extra or {})}))
    elif view.fmt == "csv":
        write_raw(to_csv([s.flat_row() for s in analysis.summaries]))
    else:
        width = table_width(console)
        print_lines(results_view(analysis.summaries, width, view.wide).lines(width))
        if analysis.faults:
            print_lines(fault_view(analysis.faults, width))
    target = people(view.fmt)
    for note in notes:
        target.print(Text.assemble(("note: ", "yellow"), note))
