"""The run manifest: everything needed to repeat and to analyse a run (docs/results.md)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from mqbench import __version__
from mqbench.records.calibration_entry import CalibrationEntry
from mqbench.records.cell_entry import CellEntry
from mqbench.records.results import MANIFEST, write_json_atomic
from mqbench.records.run_manifest import RunManifest, RunnerProcess, RunStatus, utc_now


def git_commit() -> str | None:
    """The mqbench source tree's commit (``+dirty`` when modified), or None outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty=+dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def host_facts() -> dict[str, Any]:
    """The machine the generator ran on."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "open_files_limit": _nofile_limit(),
    }


def _nofile_limit() -> int | None:
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError):
        return None


class Manifest:
    """The run's manifest in memory (a :class:`RunManifest`), saved atomically whenever
    something changes.

    Thread-safe: a broker-exit watcher thread updates a cell while the run does. Cells are
    added with :meth:`add_cell` and changed with :meth:`update_cell`; header entries with
    :meth:`update`; the run ends once, through :meth:`finish` (the state machine of
    ``run_manifest.py``).
    """

    def __init__(
        self,
        result_dir: Path,
        scenario: dict[str, Any],
        scenario_file: str,
        argv: list[str],
        *,
        scenario_input: Mapping[str, Any] | None = None,
        security: Mapping[str, Any] | None = None,
        calibration: CalibrationEntry | None = None,
    ) -> None:
        """Start a ``running`` manifest: the resolved scenario, where it came from and as
        it was written (``scenario_input``), the security facts and the calibration check,
        each already in its stored form or record (secrets redacted by the caller)."""
        self.path = result_dir / MANIFEST
        self._lock = threading.RLock()
        self._run = RunManifest(
            status="running",
            tool={"name": "mqbench", "version": __version__, "git_commit": git_commit()},
            command_line=tuple(argv),
            created_utc=utc_now(),
            host=host_facts(),
            scenario_file=scenario_file,
            scenario=scenario,
            runner=RunnerProcess.current(),
            scenario_input=scenario_input,
            security=security,
            calibration=calibration,
        )

    @property
    def run(self) -> RunManifest:
        """The manifest as it stands (a frozen value)."""
        with self._lock:
            return self._run

    @property
    def cells(self) -> list[CellEntry]:
        """Every cell entry so far, in run order."""
        with self._lock:
            return list(self._run.cells)

    def update(self, change: Callable[[RunManifest], RunManifest]) -> RunManifest:
        """Replace the manifest by ``change(manifest)`` (atomically) and save.

        Example: ``manifest.update(lambda m: replace(m, search=report))``.
        """
        with self._lock:
            self._run = new = change(self._run)
        self.save()
        return new

    def add_cell(self, cell: CellEntry) -> None:
        """Append a cell entry and save."""
        self.update(lambda m: replace(m, cells=(*m.cells, cell)))

    def cell(self, cell_id: str) -> CellEntry:
        """The stored entry of ``cell_id``."""
        with self._lock:
            return self._run.cell(cell_id)

    def update_cell(self, cell_id: str, change: Callable[[CellEntry], CellEntry]) -> CellEntry:
        """Replace the entry of ``cell_id`` by ``change(entry)`` (atomically) and save.

        Example: ``manifest.update_cell(cid, lambda c: replace(c, status="completed"))``.
        """
        with self._lock:
            cells = list(self._run.cells)
            k = next((k for k, c in enumerate(cells) if c.id == cell_id), None)
            if k is None:
                raise KeyError(cell_id)
            cells[k] = new = change(cells[k])
            self._run = replace(self._run, cells=tuple(cells))
        self.save()
        return new

    def finish(self, status: RunStatus, error: str | None = None) -> None:
        """Record the final status of the run and save (RunStateError when it already
        ended: a run ends once)."""
        self.update(lambda m: m.finished(status, error))

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (docs/results.md, "manifest.json")."""
        with self._lock:
            return self._run.to_dict()

    def save(self) -> None:
        """Write the manifest atomically."""
        with self._lock:
            write_json_atomic(self.path, self.to_dict())


def command_line() -> list[str]:
    """The command line as the user typed it (program name shortened)."""
    return ["mqbench", *sys.argv[1:]]
