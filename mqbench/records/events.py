"""A cell's ``events.jsonl``: the kinds of event, the one writer and the one reader.

Every line is one JSON object with at least ``t_ns`` (wall clock, ns) and ``kind``, one of
:class:`EventKind`; the other keys are the event's details (docs/results.md, "events.jsonl").
The engine, the worker processes (through the coordinator) and the fault driver write
through :class:`EventLog`; the analysis reads through :func:`read_events`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

EVENTS_FILE = "events.jsonl"


class EventKind(StrEnum):
    """Every kind of event a cell's log holds."""

    BROKER_STARTED = "broker_started"
    """The runtime started the broker (details: the broker's manifest facts)."""
    BROKER_EXITED = "broker_exited"
    """The broker exited on its own (pid, exit_code, signal, reason)."""
    BROKER_STOPPED = "broker_stopped"
    FAULT_PROXY_STARTED = "fault_proxy_started"
    """url, builtin, listen, upstream."""
    CONNECTIONS = "connections"
    """About once a second while clients connect: connected, failed."""
    CLIENTS_CONNECTED = "clients_connected"
    """Every worker is ready: connected_ns (the last connect), count, expected, failed."""
    PUBLISHING_STARTED = "publishing_started"
    """The start signal went out: start_ns (the schedule's start)."""
    FAULT_SCHEDULE = "fault_schedule"
    """The planned fault windows (seconds after origin_ns), type, target."""
    WINDOW_START = "window_start"
    """The measured window began (``t_ns`` is its start; written once it has passed)."""
    FAULT_INJECTED = "fault_injected"
    """fault, type, attributes, stream, target and the affected subscribers/publishers."""
    FAULT_RECOVERED = "fault_recovered"
    CHURN_DISCONNECTED = "churn_disconnected"
    CHURN_RECONNECTED = "churn_reconnected"
    CLIENT_RECONNECTED = "client_reconnected"
    """role, client, outage_ms, attempts."""
    WINDOW_END = "window_end"
    """The measured window ended (``t_ns`` is its end, or the stop of an interrupted cell)."""
    PUBLISHING_STOPPED = "publishing_stopped"
    DRAIN_FINISHED = "drain_finished"
    WORKERS_STOPPED = "workers_stopped"
    INTERRUPTED = "interrupted"
    """SIGINT or SIGTERM stopped the cell (signal)."""
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Event:
    """One line of ``events.jsonl``."""

    kind: EventKind
    t_ns: int
    details: Mapping[str, Any] = field(default_factory=dict)


class EventSink(Protocol):
    """Where a part that does not own the log writes its events (e.g. the fault driver)."""

    def __call__(self, kind: EventKind, /, **details: Any) -> None:
        """Write one event of ``kind``, stamped now."""


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

    def write(self, kind: EventKind, /, *, t_ns: int | None = None, **details: Any) -> None:
        """Append one event stamped ``t_ns`` (default: ``time.time_ns()``)."""
        stamp = time.time_ns() if t_ns is None else int(t_ns)
        record = {"t_ns": stamp, "kind": EventKind(kind).value, **details}
        data = (json.dumps(record, default=str) + "\n").encode("utf-8")
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


_KINDS = {kind.value: kind for kind in EventKind}


def read_events(folder: Path) -> list[Event]:
    """The events of a cell folder's ``events.jsonl`` in file order ([] without the file).

    Lines that are not an event object with an integer ``t_ns`` and a known ``kind`` are
    skipped: a torn last line of a killed run, or a kind from a newer mqbench.
    """
    path = folder / EVENTS_FILE
    if not path.exists():
        return []
    out: list[Event] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                data = json.loads(line)
                t_ns = int(data.pop("t_ns"))
                kind = _KINDS[data.pop("kind")]
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            out.append(Event(kind, t_ns, data))
    return out
