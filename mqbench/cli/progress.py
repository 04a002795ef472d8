"""Live displays: a running cell (time, sent vs offered, received, connections) and a
running analysis (step, cell n of m, Spark tasks, elapsed)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.live import Live
from rich.text import Text

from mqbench.analysis.progress import AnalysisProgress
from mqbench.brokers.runtime.liveness import BrokerExit
from mqbench.records.cell_entry import CellEntry
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.scenario.matrix import Cell
from mqbench.workload.coordinator import Progress

NON_TTY_INTERVAL_S = 5.0


def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e4:
        return f"{value / 1e3:.1f}K"
    return f"{value:,.0f}"


def stage(p: Progress) -> str:
    """What the cell is doing, as people say it: ``connecting``, ``warm-up``, ``measuring``,
    ``draining`` (publishing done, deliveries still arriving) or ``stopping``."""
    if p.phase != "publishing":
        return p.phase
    return "warm-up" if p.elapsed_s < p.warmup_s else "measuring"


def _clock(p: Progress, where: str) -> str:
    if where == "warm-up":
        return f"{p.elapsed_s:.0f}/{p.warmup_s:g} s"
    if where == "measuring":
        measured = p.total_s - p.warmup_s
        return f"{min(p.elapsed_s, p.total_s) - p.warmup_s:.0f}/{measured:g} s"
    return ""


@dataclass(frozen=True)
class _Part:
    text: str
    rank: int
    """Lower ranks are kept first when the line must be shorter."""
    style: str = ""


def _parts(p: Progress) -> list[_Part]:
    where = stage(p)
    parts = [_Part(f"{where} {_clock(p, where)}".rstrip(), 0, "cyan")]
    expected = p.expected_rate or p.offered_rate
    if where == "connecting" or (where != "stopping" and p.connected < p.connections):
        parts.append(_Part(f"connected {p.connected:,}/{p.connections:,}", 1))
    if where in ("warm-up", "measuring"):
        rates = f"msg/s sent {_rate(p.send_rate)} of {_rate(p.offered_rate)}, "
        rates += f"recv {_rate(p.receive_rate)}"
        if abs(expected - p.offered_rate) > 1e-9:
            rates += f" of {_rate(expected)}"
        parts.append(_Part(rates, 2))
        parts.append(_Part(f"so far {p.sent:,} sent, {p.received:,} recv", 5))
    elif where == "draining":
        parts.append(_Part(f"msg/s recv {_rate(p.receive_rate)}", 2))
        due = round(p.sent * expected / p.offered_rate) if p.offered_rate else p.sent
        parts.append(_Part(f"{p.received:,} of {due:,} delivered", 3))
    if p.send_failed:
        parts.append(_Part(f"{p.send_failed:,} sends failed", 1, "red"))
    return parts


def progress_line(cell: Cell, p: Progress, width: int | None = None) -> Text:
    """One status line for a running cell, at most ``width`` cells when given: the cell id
    and what it is doing always, then the figures in order of use while they fit. Rates
    are per second over the last ~2 s; no send rate once publishing is over."""
    parts = _parts(p)
    room = None if width is None else width - 1 - cell_len(cell.id)
    keep: set[int] = set()
    for i in sorted(range(len(parts)), key=lambda k: parts[k].rank):
        need = 2 + cell_len(parts[i].text)
        if room is not None and parts[i].rank > 0 and need > room:
            break
        keep.add(i)
        room = None if room is None else room - need
    text = Text(cell.id, style="bold")
    for i, part in enumerate(parts):
        if i in keep:
            text.append("  ")
            text.append(part.text, style=part.style)
    return text


def analysis_line(p: AnalysisProgress) -> Text:
    """One status line for a running analysis: the step, which cell of how many, time."""
    text = Text("analysing ", style="bold")
    text.append(f"{p.cells} cell(s): ")
    text.append(p.phase, style="cyan")
    if p.cell_id is not None:
        text.append(f" cell {p.cell} of {p.cells} ({p.cell_id})")
    if p.tasks is not None:
        text.append(f", Spark tasks {p.tasks_done}/{p.tasks}")
    text.append(f", {p.elapsed_s:.0f} s")
    return text


class AnalysisReporter:
    """Shows an analysis's progress: a live line on a terminal, else a line every few
    seconds and at every phase change. Use as a context manager around the analysis."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = None
        self._lock = threading.Lock()
        self._last_print = 0.0
        self._last_phase: str | None = None

    def __enter__(self) -> AnalysisReporter:
        if self.console.is_terminal:
            self._live = Live(Text(""), console=self.console, refresh_per_second=4, transient=True)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def update(self, progress: AnalysisProgress) -> None:
        """Called by the analysis (also from its heartbeat thread)."""
        line = analysis_line(progress)
        with self._lock:
            if self._live is not None:
                self._live.update(line)
                return
            now = time.monotonic()
            if progress.phase != self._last_phase or now - self._last_print >= NON_TTY_INTERVAL_S:
                self._last_phase = progress.phase
                self._last_print = now
                self.console.print(line)


class RichReporter:
    """Implements ``workload.run.RunReporter`` on a Rich console."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = None
        self._last_print = 0.0
        self._cell_started = time.monotonic()

    def run_started(self, result_dir: Path | RemoteRoot, cells: list[Cell]) -> None:
        """Announce where results go and about how much they will take."""
        from mqbench.workload.capacity import human_bytes, result_bytes

        self.console.print(
            f"results: [bold]{result_dir}[/]  ({len(cells)} cell(s), "
            f"about {human_bytes(result_bytes(cells))})"
        )

    def cell_started(self, cell: Cell) -> None:
        """Start the live line of a cell."""
        from mqbench.brokers.registry import get_target
        from mqbench.transports.registry import resolve_client

        client = resolve_client(get_target(cell.target).transport, cell.client)
        self._cell_started = time.monotonic()
        self.console.print(
            f"[bold]{cell.id}[/]: {cell.publishers:,} publisher(s) x {cell.rate:g} msg/s = "
            f"{cell.offered_rate:,.0f} msg/s offered, {cell.subscribers:,} subscriber(s) "
            f"({cell.topology}), {cell.payload_bytes} B, QoS {cell.qos}, "
            f"{cell.warmup_s:g} s warm-up + {cell.duration_s:g} s measured, client {client}"
        )
        if self.console.is_terminal:
            self._live = Live(Text(""), console=self.console, refresh_per_second=4, transient=True)
            self._live.start()

    def phase(self, cell: Cell, text: str) -> None:
        """Show a phase change."""
        if self._live is not None:
            self._live.update(Text(f"{cell.id}: {text}"))
        else:
            self.console.print(f"  {text}")

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Update the live line (or print one every few seconds without a terminal)."""
        if self._live is not None:
            line = progress_line(cell, progress, self.console.width)
            self._live.update(line)
            return
        now = time.monotonic()
        if now - self._last_print >= NON_TTY_INTERVAL_S:
            self._last_print = now
            self.console.print(progress_line(cell, progress))

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """Say at once that the broker died (a watcher thread calls this)."""
        after = time.monotonic() - self._cell_started
        self.console.print(
            Text(
                f"  {cell.id}: the broker (pid {exit.pid}) {exit.describe()} {after:.1f} s "
                "into the cell; sends now fail and count as never sent; the cell's results "
                "will be marked invalid",
                style="bold red",
            )
        )

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        """Close the live line and say how the cell ended."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        style = {"completed": "green", "failed": "red"}.get(status, "yellow")
        line = Text(f"  {status}", style=style)
        if detail.totals is not None:
            line.append(f"  sent {detail.totals.sent} received {detail.totals.received}")
        if detail.error:
            line.append(f"  {detail.error}")
        if detail.broker_exit is not None:
            line.append(
                f"\n  invalid: the broker {detail.broker_exit.reason or 'exited'} during the cell",
                style="bold red",
            )
        generator = detail.generator
        for reason in generator.reasons if generator else ():
            line.append(f"\n  generator saturated: {reason}", style="bold yellow")
        for warning in generator.warnings if generator else ():
            line.append(f"\n  warning: {warning}", style="yellow")
        self.console.print(line)
