"""The messages of the worker channel: one class per kind, dispatched with ``match``.

A worker and its parent (``workload.coordinator``) talk over a ``multiprocessing``
connection: a pipe for a local worker process, an authenticated socket relayed through a
Spark task for distributed load (``workload.spark_engine``). Everything on it is one of
these frozen dataclasses (pickled by the connection):

    worker -> parent  Ready | Progress | Published | Done | WorkerEvent | Failed
                      | RecordWriteFailed
    task -> driver    TaskHello (first), then the worker's messages, ResourcesSampled
                      and RecordsShipped
    parent -> worker  Start | Stop

Each stats-carrying message holds the worker's cumulative ``WorkerStats``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqbench.records.clocks import ClockOffset
from mqbench.records.events import Event
from mqbench.records.transfer import Shipment
from mqbench.records.worker_stats import WorkerStats


@dataclass(frozen=True, slots=True)
class Ready:
    """Every client of the worker connected (or failed to); it waits for ``Start``."""

    stats: WorkerStats


@dataclass(frozen=True, slots=True)
class Progress:
    """The periodic report while the worker runs (every ``reporting.STATS_INTERVAL_S``)."""

    stats: WorkerStats


@dataclass(frozen=True, slots=True)
class Published:
    """The worker handed out its whole schedule; it keeps receiving until ``Stop``."""

    stats: WorkerStats


@dataclass(frozen=True, slots=True)
class Done:
    """The worker closed its clients and flushed its records: its last message."""

    stats: WorkerStats


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """An event for the cell's ``events.jsonl`` (reconnects, churn, errors)."""

    event: Event


@dataclass(frozen=True, slots=True)
class Failed:
    """The worker could not run (connect, crash): its last message; the cell fails."""

    message: str


@dataclass(frozen=True, slots=True)
class RecordWriteFailed:
    """A record file could not be written (e.g. the disk is full): its last message.

    The run stops with ``ResultsWriteError`` (records are the product: a run that cannot
    keep them does not go on).
    """

    message: str
    path: str | None = None
    errno: int | None = None


WorkerMessage = Ready | Progress | Published | Done | WorkerEvent | Failed | RecordWriteFailed
"""What a worker sends its parent."""

FinalMessage = Done | Failed | RecordWriteFailed
"""The worker's last message."""


@dataclass(frozen=True, slots=True)
class Start:
    """Publish on the schedule that starts at ``start_ns`` (wall clock)."""

    start_ns: int


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop publishing, close the clients and flush; ``fast``: without waiting for acks."""

    fast: bool = False


ControlMessage = Start | Stop
"""What a parent sends its worker."""


@dataclass(frozen=True, slots=True)
class TaskHello:
    """A Spark task's first message on the control connection."""

    task: int
    host: str
    pid: int
    before: ClockOffset


@dataclass(frozen=True, slots=True)
class TaskSample:
    """CPU (cores) and RSS of a task's own Python process over the last second."""

    task: int
    host: str
    pid: int
    cpu_cores: float
    rss_bytes: int


@dataclass(frozen=True, slots=True)
class RecordsShipped:
    """Records a task's worker flushed, on their way to the driver's cell folder."""

    item: Shipment


TaskMessage = WorkerMessage | TaskSample | RecordsShipped
"""What a Spark task sends the driver after its ``TaskHello``."""
