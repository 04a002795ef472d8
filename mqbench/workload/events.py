"""events.jsonl: one JSON object per line, flushed as written."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any


class EventLog:
    """Append-only event log of a cell (connections, phases, warnings, errors)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, kind: str, **details: Any) -> None:
        """Append one event stamped with ``time.time_ns()``."""
        line = json.dumps({"t_ns": time.time_ns(), "kind": kind, **details}, default=str)
        with self._lock:
            if self._file.closed:
                return
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        """Close the file; later writes are ignored."""
        with self._lock:
            self._file.close()
