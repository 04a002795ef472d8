"""The results table of analysed cells, its marks and their footnotes, and the fault table.

The compact table (the default) has the numbers people compare first: cell, sent,
received, loss, throughput, p50/p99, the broker's CPU and RSS, and one short mark column.
The reason for a mark is a numbered footnote under the table (``‡1`` in the row, ``‡1
<cell>: <reason>`` below), never a sentence in the row. ``--wide`` shows every column.
The marks are the report's (``mqbench.report.marks``: † ‡ § ¶ ‖), so a mark means the same
in the terminal and in a paper table; the CLI adds ``±`` (a clock-error bound across load
tasks), ``≈`` (approximate percentiles) and ``!`` (a cell that was interrupted, in a
summary from before interruptions were an invalid reason of their own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from rich.text import Text

from mqbench.analysis.summary import CellSummary
from mqbench.analysis.verdict import InvalidKind
from mqbench.cli.columns import Column, Layout, layout, wrap
from mqbench.records.fault_metrics import FaultMetrics
from mqbench.report.labels import label
from mqbench.report.marks import Mark

if TYPE_CHECKING:
    from mqbench.analysis.compare import CompareResult

CLOCK_ERROR: Final = "±"
APPROXIMATE: Final = "≈"
INTERRUPTED: Final = "!"

MARK_STYLE: Final[dict[str, str]] = {
    Mark.SATURATED.value: "bold red",
    Mark.INVALID.value: "bold red",
    Mark.LATENCY_BOUND.value: "bold yellow",
    Mark.BACKLOG.value: "yellow",
    Mark.UNMATCHED.value: "yellow",
    CLOCK_ERROR: "yellow",
    APPROXIMATE: "dim",
    INTERRUPTED: "bold yellow",
}

HEADER_WIDTH: Final = 9
"""Header lines of the wide table are about this wide (numbers are 4-8 characters)."""
FOOTNOTE_INDENT: Final = 4
"""Indent of a footnote's continuation lines."""

TITLE: Final = (
    "latency from the intended send time; loss over the scheduled messages; "
    "CPU (mean) and RSS (max) of the broker"
)


def ms(value_us: float | None) -> str:
    """Microseconds as milliseconds with three significant figures (``-`` for none)."""
    if value_us is None:
        return "-"
    value = value_us / 1000.0
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def num(value: float | None, fmt: str = "{:,.0f}") -> str:
    """``value`` formatted, ``-`` for none."""
    return "-" if value is None else fmt.format(value)


def mb(value: float | None) -> str:
    """Megabytes: one decimal below 1,000, whole above."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 1000 else f"{value:.1f}"


def pct(value: float | None) -> str:
    """A percentage: ``0`` when exactly none, else three decimals."""
    if value is None:
        return "-"
    return "0" if value == 0 else f"{value:.3f}"


@dataclass(frozen=True)
class Footnote:
    """One reason under the table: its number, mark symbol, cell and text."""

    number: int
    mark: str
    cell_id: str
    text: str

    def render(self) -> Text:
        """``‡1 cell: reason``."""
        line = Text(f"{self.mark}{self.number}", style=MARK_STYLE.get(self.mark, ""))
        line.append(f" {self.cell_id}: ", style="bold")
        line.append(self.text)
        return line


def backlog_text(s: CellSummary) -> str:
    """Why a cell's loss includes a backlog (``backlog_at_drain_end``)."""
    drain = s.cell_params.drain_s
    if drain is not None and s.last_delivery_s is not None:
        return (
            f"deliveries were still arriving when the {drain:g} s drain ended (last "
            f"{s.last_delivery_s:.2f} s after the window): the broker was behind, so the "
            f"{s.lost:,} lost include messages it may still have held; lengthen "
            "workload.drain to tell a backlog from drops"
        )
    return (
        "deliveries were still arriving when the drain ended: the loss includes messages "
        "the broker may still have held"
    )


def unmatched_text(s: CellSummary) -> str:
    """Why a cell's loss may hold deliveries its clients dropped (``unmatched_deliveries``)."""
    n = s.unmatched_deliveries
    if s.lost > 0:
        share = (
            f"up to {min(n, s.lost):,} of the {s.lost:,} lost deliveries may have arrived "
            "and been dropped"
        )
    else:
        share = "nothing is missing, so they were deliveries beyond the expected ones"
    return (
        f"{n:,} deliveries matched no subscription (not in the records): the clients that "
        f"received them dropped them; {share} (a broker delivering on a topic nobody "
        "subscribed to, or a resumed session's messages before its subscription was "
        "registered again)"
    )


def mark_reasons(s: CellSummary) -> list[tuple[str, str]]:
    """Every mark of a cell with its reason, in the report's order, then the CLI's own."""
    out: list[tuple[str, str]] = []
    saturated = [r for r in s.invalid_reasons if r.kind is InvalidKind.GENERATOR_SATURATED]
    for r in saturated:
        out.append((Mark.SATURATED.value, f"generator saturated: {r.message}"))
    if s.generator_saturated and not saturated:
        out.append(
            (Mark.SATURATED.value, f"generator saturated: {s.generator_reason or 'see summary'}")
        )
    if s.latency_generator_bound:
        out.append((Mark.LATENCY_BOUND.value, f"latency generator-bound: {s.latency_reason or ''}"))
    for r in s.invalid_reasons:
        if r.kind is not InvalidKind.GENERATOR_SATURATED:
            out.append((Mark.INVALID.value, f"invalid ({r.kind.value}): {r.message}"))
    if s.backlog_at_drain_end:
        out.append((Mark.BACKLOG.value, backlog_text(s)))
    if s.unmatched_deliveries:
        out.append((Mark.UNMATCHED.value, unmatched_text(s)))
    if s.latency_error_ms is not None:
        out.append(
            (
                CLOCK_ERROR,
                f"every latency is ±{s.latency_error_ms:.3f} ms (routes cross the clocks of "
                "two load tasks)",
            )
        )
    if s.approx_rel_error is not None:
        out.append(
            (APPROXIMATE, f"approximate percentiles (relative error < {s.approx_rel_error:.2%})")
        )
    said = any(r.kind is InvalidKind.INTERRUPTED for r in s.invalid_reasons)
    if s.status == "interrupted" and not said:  # summaries older than the interrupted kind
        out.append((INTERRUPTED, "interrupted: the measured window was cut short"))
    return out


@dataclass
class Marks:
    """The mark cell of each row and the footnotes they point to, numbered in row order."""

    cells: list[Text] = field(default_factory=list)
    footnotes: list[Footnote] = field(default_factory=list)

    @classmethod
    def of(cls, summaries: Sequence[CellSummary]) -> Marks:
        """Number the reasons of every cell."""
        out = cls()
        for s in summaries:
            cell = Text()
            for symbol, reason in mark_reasons(s):
                note = Footnote(len(out.footnotes) + 1, symbol, s.cell_id, reason)
                out.footnotes.append(note)
                if cell:
                    cell.append(" ")
                cell.append(f"{symbol}{note.number}", style=MARK_STYLE.get(symbol, ""))
            out.cells.append(cell if cell else Text("ok", style="green"))
        return out


def header(text: str, width: int = HEADER_WIDTH) -> str:
    """A label broken at spaces into header lines of about ``width`` characters
    (``broker\nCPU mean\n(cores)``), so a wide label does not make a wide column."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return "\n".join(lines)


def _loss(s: CellSummary) -> Text:
    return Text(pct(s.loss_pct), style="red" if s.loss_pct else "")


COMPACT: Final = (
    Column("cell", "left"),
    Column("sent"),
    Column("recv"),
    Column("loss\n(%)"),
    Column("throughput\n(msg/s)"),
    Column("p50\n(ms)"),
    Column("p99\n(ms)"),
    Column("CPU\n(cores)", drop=1),
    Column("RSS\n(MB)", drop=2),
    Column("mark", "left"),
)
"""The compact table: RSS, then CPU, are left out when even stacking does not fit."""


def _compact_row(s: CellSummary, mark: Text) -> list[str | Text]:
    lat = s.latency
    return [
        Text(s.cell_id, style="bold"),
        f"{s.sent:,}",
        f"{s.received:,}",
        _loss(s),
        num(s.throughput_msg_s),
        ms(lat.p50_us if lat else None),
        ms(lat.p99_us if lat else None),
        num(s.broker_cpu_cores_mean, "{:.2f}"),
        mb(s.broker_rss_mb_max),
        mark,
    ]


WIDE_METRICS: Final = (
    "loss_pct",
    "duplicates",
    "throughput_msg_s",
    "latency_p50_us",
    "latency_p95_us",
    "latency_p99_us",
    "latency_max_us",
    "latency_from_send_p99_us",
    "send_lag_p99_us",
    "broker_cpu_cores_mean",
    "broker_rss_mb_max",
    "generator_cpu_cores_mean",
)


def wide_columns() -> tuple[Column, ...]:
    """Every column, with the report's labels."""
    return (
        Column("cell", "left"),
        Column("sent"),
        Column("unsent"),
        Column("recv"),
        *(Column(header(label(m))) for m in WIDE_METRICS),
        Column("mark", "left"),
    )


def _wide_row(s: CellSummary, mark: Text) -> list[str | Text]:
    lat, from_send, lag = s.latency, s.latency_from_send, s.send_lag
    unsent: str | Text = "-" if s.unsent is None else f"{s.unsent:,}"
    if s.unsent:
        unsent = Text(f"{s.unsent:,}", style="red")
    return [
        Text(s.cell_id, style="bold"),
        f"{s.sent:,}",
        unsent,
        f"{s.received:,}",
        _loss(s),
        f"{s.duplicates:,}",
        num(s.throughput_msg_s),
        ms(lat.p50_us if lat else None),
        ms(lat.p95_us if lat else None),
        ms(lat.p99_us if lat else None),
        ms(lat.max_us if lat else None),
        ms(from_send.p99_us if from_send else None),
        ms(lag.p99_us if lag else None),
        num(s.broker_cpu_cores_mean, "{:.2f}"),
        mb(s.broker_rss_mb_max),
        num(s.generator_cpu_cores_mean, "{:.2f}"),
        mark,
    ]


@dataclass
class ResultsView:
    """The results table laid out for a width, with its footnotes."""

    table: Layout
    footnotes: list[Footnote]

    def lines(self, width: int | None = None) -> list[Text]:
        """Title, table, what was left out, and the footnotes, the prose wrapped at spaces
        to ``width`` (None: one line each)."""

        def prose(text: Text, indent: int = 0) -> list[Text]:
            return [text] if width is None else wrap(text, width, indent)

        out = [*prose(Text(TITLE, style="dim")), *self.table.lines]
        if self.table.dropped:
            dropped = ", ".join(self.table.dropped)
            note = f"not shown at this width: {dropped} (--wide shows every column)"
            out.extend(prose(Text(note, style="dim")))
        for footnote in self.footnotes:
            out.extend(prose(footnote.render(), FOOTNOTE_INDENT))
        return out


def results_view(summaries: Sequence[CellSummary], width: int, wide: bool = False) -> ResultsView:
    """The results table of ``summaries`` for a terminal ``width`` cells wide."""
    marks = Marks.of(summaries)
    if wide:
        columns = wide_columns()
        rows = [_wide_row(s, m) for s, m in zip(summaries, marks.cells, strict=True)]
    else:
        columns = COMPACT
        rows = [_compact_row(s, m) for s, m in zip(summaries, marks.cells, strict=True)]
    return ResultsView(layout(columns, rows, width), marks.footnotes)


FAULT_COLUMNS: Final = (
    Column("cell", "left"),
    Column("faults"),
    Column("downtime\n(%)"),
    Column("sub away\n(%)"),
    Column("p50 out\n(ms)"),
    Column("p99 out\n(ms)"),
    Column("p50 in\n(ms)"),
    Column("p99 in\n(ms)"),
    Column("first\ndelivery\nmax (ms)"),
    Column("drain\nmax (ms)"),
    Column("reconnects"),
    Column("dup"),
)


def _fault_row(cell_id: str, m: FaultMetrics) -> list[str | Text]:
    out, inside = m.latency_outside, m.latency_in_faults
    firsts = [r.first_delivery_ms for r in m.recoveries if r.first_delivery_ms is not None]
    drains = [r.drain_ms for r in m.recoveries if r.drain_ms is not None]
    fraction, away = m.downtime_fraction, m.subscriber_outage_fraction
    return [
        Text(cell_id, style="bold"),
        str(m.faults),
        "-" if fraction is None else f"{100 * fraction:.1f}",
        "-" if away is None else f"{100 * away:.1f}",
        ms(None if out is None else out.p50_us),
        ms(None if out is None else out.p99_us),
        ms(None if inside is None else inside.p50_us),
        ms(None if inside is None else inside.p99_us),
        f"{max(firsts):.0f}" if firsts else "-",
        f"{max(drains):.0f}" if drains else "-",
        str(m.reconnects),
        str(m.duplicates),
    ]


def fault_view(metrics: Mapping[str, FaultMetrics], width: int) -> list[Text]:
    """One row per cell with faults: downtime, latency in/out of faults, recovery times."""
    rows = [_fault_row(cell_id, m) for cell_id, m in metrics.items()]
    table = layout(FAULT_COLUMNS, rows, width)
    return [Text("faults (latency from the intended send time)", style="dim"), *table.lines]


COMPARE_COLUMNS: Final = (
    Column("cell", "left"),
    Column("metric", "left"),
    Column("baseline"),
    Column("current"),
    Column("change"),
    Column("noise ±", drop=3),
    Column("floor", drop=2),
    Column("limit", drop=1),
    Column("verdict", "left"),
)
VERDICT_STYLE: Final = {
    "REGRESSION": "bold red",
    "REFUSED": "bold yellow",
    "improvement": "green",
    "ok": "green",
}


def compare_view(result: CompareResult, width: int) -> list[Text]:
    """``compare``'s text result laid out for a terminal: the cell id once per cell, a
    row per metric, notes and refusals wrapped at spaces, the verdict line last (whole)."""
    from mqbench.analysis.compare_output import notes, rows, thresholds_line, verdict_line

    cells: list[list[str | Text]] = []
    previous = None
    for row in rows(result):
        cell, *rest = row
        verdict = rest[-1]
        style = VERDICT_STYLE.get(verdict, "yellow" if verdict.startswith("missing") else "")
        first: str | Text = Text(cell, style="bold") if cell != previous else ""
        cells.append([first, *rest[:-1], Text(verdict, style=style)])
        previous = cell
    table = layout(COMPARE_COLUMNS, cells, width)
    out = list(table.lines)
    if table.dropped:
        out.extend(wrap(Text(f"not shown at this width: {', '.join(table.dropped)}", "dim"), width))
    for note in notes(result):
        out.extend(wrap(Text.assemble(("note: ", "yellow"), note), width, FOOTNOTE_INDENT))
    for problem in result.problems:
        line = Text.assemble(("refused: ", "bold yellow"), problem.message)
        out.extend(wrap(line, width, FOOTNOTE_INDENT))
    style = {"ok": "bold green", "regression": "bold red"}.get(result.verdict, "bold yellow")
    floor = result.floor_note()
    if floor:
        out.extend(wrap(Text(floor, style="dim"), width, FOOTNOTE_INDENT))
    out.extend(wrap(Text(thresholds_line(result), style="dim"), width, FOOTNOTE_INDENT))
    out.append(Text(verdict_line(result), style=style))  # one line, for people and grep
    return out
