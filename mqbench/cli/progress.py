"""Live run display: offered vs achieved send rate, receive rate, connections, time left."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from mqbench.brokers.liveness import BrokerExit
from mqbench.scenario.matrix import Cell
from mqbench.workload.coordinator import Progress

NON_TTY_INTERVAL_S = 5.0


def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    if value >= 1e3:
        return f"{value / 1e3:.1f}K"
    return f"{value:.0f}"


def progress_line(cell: Cell, p: Progress) -> Text:
    """One status line for a running cell."""
    remaining = max(0.0, p.total_s - p.elapsed_s)
    text = Text()
    text.append(f"{cell.id} ", style="bold")
    text.append(f"{p.phase:<10} ", style="cyan")
    text.append(f"{p.elapsed_s:5.0f}/{p.total_s:.0f}s (-{remaining:.0f}s)  ")
    text.append(f"send {_rate(p.send_rate)}/{_rate(p.offered_rate)} msg/s  ")
    text.append(f"recv {_rate(p.receive_rate)} msg/s  ")
    text.append(f"conn {p.connected}/{p.connections}  ")
    text.append(f"sent {p.sent} recv {p.received}")
    if p.send_failed:
        text.append(f"  failed {p.send_failed}", style="red")
    return text


class RichReporter:
    """Implements ``workload.run.RunReporter`` on a Rich console."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = None
        self._last_print = 0.0
        self._cell_started = time.monotonic()

    def run_started(self, result_dir: Path, cells: list[Cell]) -> None:
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
            f"[bold]{cell.id}[/]: {cell.pairs} pairs x {cell.rate:g} msg/s = "
            f"{cell.offered_rate:g} msg/s offered, {cell.payload_bytes} B, QoS {cell.qos}, "
            f"{cell.warmup_s:g}s warm-up + {cell.duration_s:g}s, client {client}"
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
        line = progress_line(cell, progress)
        if self._live is not None:
            self._live.update(line)
            return
        now = time.monotonic()
        if now - self._last_print >= NON_TTY_INTERVAL_S:
            self._last_print = now
            self.console.print(line)

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

    def cell_finished(self, cell: Cell, status: str, detail: dict[str, Any]) -> None:
        """Close the live line and say how the cell ended."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        totals = detail.get("totals", {})
        style = {"completed": "green", "failed": "red"}.get(status, "yellow")
        line = Text(f"  {status}", style=style)
        if totals:
            line.append(f"  sent {totals.get('sent')} received {totals.get('received')}")
        if detail.get("error"):
            line.append(f"  {detail['error']}")
        broker_exit = detail.get("broker_exit") or {}
        if broker_exit:
            line.append(
                f"\n  invalid: the broker {broker_exit.get('reason', 'exited')} during the cell",
                style="bold red",
            )
        generator = detail.get("generator") or {}
        for reason in generator.get("reasons", []):
            line.append(f"\n  generator saturated: {reason}", style="bold yellow")
        for warning in generator.get("warnings", []):
            line.append(f"\n  warning: {warning}", style="yellow")
        self.console.print(line)
