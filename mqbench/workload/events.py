"""events.jsonl: one JSON object per line, each line written whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class EventLog:
    """Append-only event log of a cell (connections, phases, warnings, errors).

    Every event is one ``write`` of a whole line. When the write fails or is cut short (a
    full disk), the file is cut back to its last whole line, later events are dropped and
    :attr:`error` keeps the ``OSError``: the log never ends in a torn line, and an event
    log that cannot be written never stops the run by itself.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        self.error: OSError | None = None
        """The write error that stopped the log (None while it works)."""

    def write(self, kind: str, **details: Any) -> None:
        """Append one event stamped with ``time.time_ns()``."""
        line = json.dumps({"t_ns": time.time_ns(), "kind": kind, **details}, default=str) + "\n"
        data = line.encode("utf-8")
        with self._lock:
            if self._fd is None:
                return
            try:
                written = os.write(self._fd, data)
                if written != len(data):
                    raise OSError(28, os.strerror(28), str(self.path))
            except OSError as exc:
                self.error = exc
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
                return
            self._size += written

    def close(self) -> None:
        """Close the file; later writes are ignored."""
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None
