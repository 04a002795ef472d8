"""The run manifest: everything needed to repeat and to analyse a run (docs/results.md)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from mqbench import __version__
from mqbench.records.cell_entry import CellEntry
from mqbench.records.format import SCHEMA_VERSION
from mqbench.records.results import MANIFEST, write_json_atomic


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
    """In-memory manifest, saved atomically whenever something changes.

    Top-level entries live in :attr:`data`; cells are :class:`CellEntry` records, added
    with :meth:`add_cell` and changed with :meth:`update_cell` (thread-safe: a broker-exit
    watcher thread updates a cell while the run does).
    """

    def __init__(
        self, result_dir: Path, scenario: dict[str, Any], scenario_file: str, argv: list[str]
    ) -> None:
        self.path = result_dir / MANIFEST
        self._lock = threading.RLock()
        self._cells: list[CellEntry] = []
        self.data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "status": "running",
            "error": None,
            "tool": {"name": "mqbench", "version": __version__, "git_commit": git_commit()},
            "command_line": argv,
            "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "finished_utc": None,
            "host": host_facts(),
            "scenario_file": scenario_file,
            "scenario": scenario,
        }

    @property
    def cells(self) -> list[CellEntry]:
        """Every cell entry so far, in run order."""
        with self._lock:
            return list(self._cells)

    def add_cell(self, cell: CellEntry) -> None:
        """Append a cell entry and save."""
        with self._lock:
            self._cells.append(cell)
        self.save()

    def cell(self, cell_id: str) -> CellEntry:
        """The stored entry of ``cell_id``."""
        with self._lock:
            return self._cells[self._position(cell_id)]

    def update_cell(self, cell_id: str, change: Callable[[CellEntry], CellEntry]) -> CellEntry:
        """Replace the entry of ``cell_id`` by ``change(entry)`` (atomically) and save.

        Example: ``manifest.update_cell(cid, lambda c: replace(c, status="completed"))``.
        """
        with self._lock:
            k = self._position(cell_id)
            self._cells[k] = new = change(self._cells[k])
        self.save()
        return new

    def _position(self, cell_id: str) -> int:
        for k, cell in enumerate(self._cells):
            if cell.id == cell_id:
                return k
        raise KeyError(cell_id)

    def finish(self, status: str, error: str | None = None) -> None:
        """Record the final status of the run and save."""
        with self._lock:
            self.data["status"] = status
            self.data["error"] = error
            self.data["finished_utc"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.save()

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (docs/results.md, "manifest.json")."""
        with self._lock:
            return {**self.data, "cells": [c.to_dict() for c in self._cells]}

    def save(self) -> None:
        """Write the manifest atomically."""
        with self._lock:
            write_json_atomic(self.path, self.to_dict())


def command_line() -> list[str]:
    """The command line as the user typed it (program name shortened)."""
    return ["mqbench", *sys.argv[1:]]
