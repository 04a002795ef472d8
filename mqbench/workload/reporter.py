"""What a run tells its caller while it goes on (the CLI shows it with Rich)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from mqbench.brokers.runtime.liveness import BrokerExit
from mqbench.records.cell_entry import CellEntry
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.scenario.matrix import Cell
from mqbench.workload.coordinator import Progress


class RunReporter(Protocol):
    """What the CLI shows while a run goes on (implemented with Rich in ``cli``)."""

    def run_started(self, result_dir: Path | RemoteRoot, cells: list[Cell]) -> None:
        """The result folder exists (on the output URI when there is one) and cells are
        about to run."""

    def cell_started(self, cell: Cell) -> None:
        """A cell begins (broker start)."""

    def phase(self, cell: Cell, text: str) -> None:
        """A short status line: starting broker, connecting, ..."""

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Live counters, a few times a second."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        """A cell ended: completed, failed or interrupted (``detail``: its manifest entry)."""

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """The broker exited on its own during the cell (called from a watcher thread)."""


class SilentReporter:
    """A ``RunReporter`` that shows nothing (benchmarks, tests, calibration)."""

    def run_started(self, result_dir: Path | RemoteRoot, cells: list[Cell]) -> None:
        """Nothing to show."""

    def cell_started(self, cell: Cell) -> None:
        """Nothing to show."""

    def phase(self, cell: Cell, text: str) -> None:
        """Nothing to show."""

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Nothing to show."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        """Nothing to show (the outcome is in the result)."""

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """Nothing to show (the manifest records it)."""
