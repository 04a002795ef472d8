"""The parent side of a cell: spawn workers, start them together, watch, drain, stop."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol, cast

from mqbench.errors import MqbenchError, ResultsWriteError, TransportError
from mqbench.process import interrupts
from mqbench.records.events import EventKind, EventLog
from mqbench.records.intended import measured_window
from mqbench.records.worker_stats import WorkerStats
from mqbench.workload.messages import (
    ControlMessage,
    Done,
    Failed,
    Published,
    Ready,
    RecordWriteFailed,
    Start,
    Stop,
    WorkerEvent,
)
from mqbench.workload.messages import Progress as WorkerProgress
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.rates import RateMeter
from mqbench.workload.worker import worker_main

START_DELAY_S = 0.5
"""Publishing starts this long after the start signal, so every worker gets it in time."""
READY_GRACE_S = 30.0
DONE_TIMEOUT_S = 30.0
HURRY_DONE_S = 2.0
"""After a second signal, workers get this long to flush before they are killed."""


@dataclass
class Progress:
    """A live snapshot of a running cell, summed over workers."""

    phase: str
    """``connecting``, ``publishing``, ``draining`` or ``stopping``."""
    elapsed_s: float
    """Seconds since publishing started (0 before)."""
    total_s: float
    """Warm-up plus measured duration."""
    offered_rate: float
    """Messages per second the schedule offers (all publishers)."""
    send_rate: float
    """Messages per second handed to clients over the last ~2 s (``workload.rates``)."""
    receive_rate: float
    """Deliveries per second over the last ~2 s."""
    sent: int
    received: int
    connected: int
    connections: int
    send_failed: int = 0
    warmup_s: float = 0.0
    """The first part of ``total_s``, excluded from the results."""
    expected_rate: float = 0.0
    """Deliveries per second when nothing is lost (fan-out multiplies the offered rate)."""


@dataclass
class LoadOutcome:
    """What the coordinator learned; goes into the manifest."""

    connected_ns: int
    start_ns: int
    published_ns: int | None
    stopped_ns: int
    interrupted: bool
    workers: list[WorkerStats] = field(default_factory=list)

    @property
    def total(self) -> WorkerStats:
        """The stats of all workers combined."""
        return WorkerStats.total(self.workers)


ProgressFn = Callable[[Progress], None]


class WorkerHandle:
    """The parent's side of one worker: its plan, its control connection, what it reported.

    Local workers are processes (``LocalHandle``); a distributed engine gives the same
    protocol over a network connection (``workload.spark_engine``).
    """

    def __init__(self, plan: WorkerPlan, conn: Connection) -> None:
        self.plan = plan
        self.conn = conn
        self.ready = False
        self.stats = WorkerStats()
        self.published = False
        self.done = False
        self.failure: RecordWriteFailed | None = None

    def send(self, message: ControlMessage) -> None:
        """One control message to the worker (ignored when it is gone)."""
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(message)

    @property
    def pid(self) -> int | None:
        """A process id on this machine to sample, or None."""
        return None

    def alive(self) -> bool:
        """Whether the worker still runs."""
        return not self.done

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the worker to end."""

    def kill(self) -> None:
        """End the worker without waiting for it to flush."""

    def lost(self) -> MqbenchError:
        """The error for a worker whose connection ended before it finished publishing."""
        return TransportError(f"worker {self.plan.worker} exited unexpectedly")

    def receive(self, message: object) -> bool:
        """Handle a message only this kind of worker sends; False: not such a message."""
        return False


class LocalHandle(WorkerHandle):
    """A worker process on this machine, spawned with ``ctx`` and talked to over a pipe."""

    def __init__(self, plan: WorkerPlan, ctx: Any) -> None:
        conn, child = ctx.Pipe(duplex=True)
        super().__init__(plan, conn)
        self.process = ctx.Process(
            target=worker_main, args=(plan, child), name=f"mqbench-worker-{plan.worker}"
        )
        self.process.start()
        child.close()

    @property
    def pid(self) -> int | None:
        """The worker process."""
        return cast(int | None, self.process.pid)

    def alive(self) -> bool:
        """Whether the process runs."""
        return bool(self.process.is_alive())

    def join(self, timeout: float) -> None:
        """Join the process."""
        self.process.join(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the process."""
        self.process.kill()

    def lost(self) -> MqbenchError:
        """The process ended without finishing."""
        code = self.process.exitcode
        return TransportError(f"worker {self.plan.worker} exited unexpectedly (exit code {code})")


class Launcher(Protocol):
    """Starts the workers of a cell; ``LocalLauncher`` unless an engine gives another."""

    def launch(self, plans: list[WorkerPlan], register: Callable[[WorkerHandle], None]) -> None:
        """Start one worker per plan, registering each handle as soon as it exists (so a
        Ctrl-C while starting stops the workers already started)."""

    def finish(self) -> None:
        """Called once after every worker is done or given up on (releases the engine)."""


class LocalLauncher:
    """Worker processes on this machine (``multiprocessing`` spawn)."""

    def launch(self, plans: list[WorkerPlan], register: Callable[[WorkerHandle], None]) -> None:
        """Spawn one process per plan, one at a time, each registered before a signal lands."""
        ctx = mp.get_context("spawn")
        for plan in plans:
            with interrupts.deferred():
                register(LocalHandle(plan, ctx))

    def finish(self) -> None:
        """Nothing to release."""


def drained(total: WorkerStats, expected_per_sent: float) -> bool:
    """Whether every delivery due for what was sent has arrived, so the drain can end.

    A broker's second delivery of a message the subscriber already had
    (``duplicate_deliveries``: QoS 1 after a reset, QoS 2 after a takeover) is not an
    arrival: counted as one, each ended the drain one message early, and a message still
    on its way (a subscriber reconnecting as the window closed) was then counted lost
    (docs/findings.md, experiment 3).
    """
    return total.received - total.duplicate_deliveries >= total.sent * expected_per_sent


class Coordinator:
    """Runs the workers of one cell to completion (or interruption)."""

    def __init__(
        self,
        plans: list[WorkerPlan],
        *,
        events: EventLog,
        offered_rate: float,
        connections: int,
        warmup_s: float,
        duration_s: float,
        drain_s: float,
        connect_timeout_s: float,
        connect_rate: float = 0.0,
        expected_per_sent: float = 1.0,
        on_progress: ProgressFn | None = None,
        on_workers: Callable[[list[int]], None] | None = None,
        on_start: Callable[[int], None] | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        self.plans = plans
        self.events = events
        self.offered_rate = offered_rate
        self.connections = connections
        self.warmup_s = warmup_s
        self.duration_s = duration_s
        self.run_s = warmup_s + duration_s
        self.drain_s = drain_s
        self.connect_timeout_s = connect_timeout_s
        self.connect_rate = connect_rate
        self.expected_per_sent = expected_per_sent
        self.on_progress = on_progress
        self.on_workers = on_workers
        self.on_start = on_start
        self.launcher: Launcher = launcher if launcher is not None else LocalLauncher()
        self._handles: list[WorkerHandle] = []
        self._rates = RateMeter()
        self._last_connection_log = 0.0
        self._window: tuple[int, int] | None = None
        self._window_marked: set[EventKind] = set()

    def run(self) -> LoadOutcome:
        """Run the cell; on KeyboardInterrupt stop workers, flush, and return interrupted."""
        self._handles = []
        connected_ns = start_ns = 0
        published_ns: int | None = None
        interrupted = False
        try:
            self.launcher.launch(self.plans, self._handles.append)
            if self.on_workers is not None:
                self.on_workers([pid for h in self._handles if (pid := h.pid)])
            connected_ns = self._wait_ready()
            with interrupts.deferred():  # workers that got the start are recorded as started
                start_ns = time.time_ns() + int(START_DELAY_S * 1e9)
                for handle in self._handles:
                    handle.send(Start(start_ns))
                self.events.write(EventKind.PUBLISHING_STARTED, start_ns=start_ns)
                self._window = measured_window(
                    start_ns, connected_ns, self.warmup_s, self.duration_s
                )
                if self.on_start is not None:
                    self.on_start(start_ns)
            published_ns = self._watch(start_ns)
        except KeyboardInterrupt:
            interrupted = True
            self.events.write(EventKind.INTERRUPTED)
        finally:
            for handle in self._handles:
                handle.send(Stop())
            stopped_ns = time.time_ns()
            self._mark_window(stopped_ns, stopping=True)
            try:
                self._wait_done()
            finally:
                self.launcher.finish()
        self.events.write(EventKind.WORKERS_STOPPED)
        failed = next((h.failure for h in self._handles if h.failure is not None), None)
        if failed is not None:
            raise ResultsWriteError(failed.message, path=failed.path, errno=failed.errno)
        return LoadOutcome(
            connected_ns=connected_ns,
            start_ns=start_ns,
            published_ns=published_ns,
            stopped_ns=stopped_ns,
            interrupted=interrupted,
            workers=[h.stats for h in self._handles],
        )

    # -- phases ----------------------------------------------------------------------

    def _wait_ready(self) -> int:
        ramp_s = self.connections / self.connect_rate if self.connect_rate > 0 else 0.0
        limit = ramp_s + self.connect_timeout_s * 2 + READY_GRACE_S
        deadline = time.monotonic() + limit
        while not all(h.ready for h in self._handles):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportError(f"clients did not all connect within {limit:.0f} s")
            self._poll(min(0.25, remaining), phase="connecting", start_ns=None)
            self._log_connections()
        total = self._total()
        connected_ns = total.connected_ns
        failed = total.connect_failed
        self.events.write(
            EventKind.CLIENTS_CONNECTED,
            connected_ns=connected_ns,
            count=self.connections - failed,
            expected=self.connections,
            failed=failed,
        )
        return connected_ns

    def _watch(self, start_ns: int) -> int | None:
        end_ns = start_ns + int(self.run_s * 1e9)
        # Publishing: until every worker has handed out its schedule.
        while not all(h.published for h in self._handles):
            self._poll(0.25, phase="publishing", start_ns=start_ns)
            if time.time_ns() > end_ns + int(60e9):
                self.events.write(
                    EventKind.WARNING, message="publishers ran 60 s past their schedule"
                )
                break
        published_ns = time.time_ns()
        self.events.write(EventKind.PUBLISHING_STOPPED, t_ns=published_ns)
        # Drain: until everything sent has arrived or the drain time is up.
        drain_deadline = time.monotonic() + self.drain_s
        while time.monotonic() < drain_deadline:
            if drained(self._total(), self.expected_per_sent):
                break
            self._poll(0.1, phase="draining", start_ns=start_ns)
        self.events.write(EventKind.DRAIN_FINISHED)
        return published_ns

    def _wait_done(self) -> None:
        deadline = time.monotonic() + DONE_TIMEOUT_S
        hurried = False
        while any(not h.done for h in self._handles) and time.monotonic() < deadline:
            if interrupts.hurrying() and not hurried:
                hurried = True  # a second signal: skip acks, then kill what is left
                for handle in self._handles:
                    handle.send(Stop(fast=True))
                deadline = min(deadline, time.monotonic() + HURRY_DONE_S)
            try:
                self._poll(0.1, phase="stopping", start_ns=None, raise_errors=False)
            except KeyboardInterrupt:
                break  # a second Ctrl-C without StopSignals: stop waiting, terminate below
        for handle in self._handles:
            handle.join(max(0.0, deadline - time.monotonic()))
            if handle.alive():
                self.events.write(EventKind.WARNING, message=f"worker {handle.plan.worker} killed")
                handle.kill()
                handle.join(5)
            handle.conn.close()

    def _log_connections(self) -> None:
        """A connection-timeline point about once a second while clients connect."""
        now = time.monotonic()
        if now - self._last_connection_log < 1.0:
            return
        self._last_connection_log = now
        total = self._total()
        self.events.write(
            EventKind.CONNECTIONS, connected=total.connected, failed=total.connect_failed
        )

    def _total(self) -> WorkerStats:
        return WorkerStats.total(h.stats for h in self._handles)

    # -- messages --------------------------------------------------------------------

    def _poll(
        self, timeout: float, *, phase: str, start_ns: int | None, raise_errors: bool = True
    ) -> None:
        conns: list[Connection] = [h.conn for h in self._handles if not h.done]
        by_conn = {id(h.conn): h for h in self._handles}
        for conn in wait(conns, timeout=timeout):
            handle = by_conn[id(conn)]
            try:
                message = handle.conn.recv()
            except (EOFError, OSError):
                handle.done = True
                if raise_errors and not handle.published:
                    handle.join(1.0)  # let a dying process report its exit code
                    raise handle.lost() from None
                continue
            if not handle.receive(message):
                self._dispatch(handle, message, raise_errors)
        self._mark_window(time.time_ns())
        self._report(phase, start_ns)

    def _dispatch(self, handle: WorkerHandle, message: object, raise_errors: bool) -> None:
        """Apply one worker message to its handle (stats, phase, events, failures)."""
        worker = handle.plan.worker
        match message:
            case Ready(stats):
                handle.ready = True
                handle.stats = stats
            case WorkerProgress(stats):
                handle.stats = stats
            case Published(stats):
                handle.stats = stats
                handle.published = True
            case Done(stats):
                handle.stats = stats
                handle.done = True
            case WorkerEvent(event):
                self.events.write(event.kind, t_ns=event.t_ns, worker=worker, **event.details)
            case RecordWriteFailed(text, path, errno):
                handle.done = True
                handle.failure = message
                self.events.write(
                    EventKind.ERROR, worker=worker, message=text, failure="record_write"
                )
                if raise_errors:
                    raise ResultsWriteError(text, path=path, errno=errno)
            case Failed(text):
                handle.done = True
                self.events.write(EventKind.ERROR, worker=worker, message=text)
                if raise_errors:
                    raise TransportError(text)
            case _:  # a newer or broken peer: noted, never fatal
                self.events.write(
                    EventKind.WARNING,
                    worker=worker,
                    message=f"unknown message {type(message).__name__}",
                )

    def _mark_window(self, now_ns: int, stopping: bool = False) -> None:
        """Write ``window_start`` / ``window_end`` once their time has passed.

        Stopping early (an interruption) ends a begun window at ``now_ns``.
        """
        if self._window is None:
            return
        start, end = self._window
        if EventKind.WINDOW_START not in self._window_marked and now_ns >= start:
            self._window_marked.add(EventKind.WINDOW_START)
            self.events.write(EventKind.WINDOW_START, t_ns=start)
        began = EventKind.WINDOW_START in self._window_marked
        ended = EventKind.WINDOW_END in self._window_marked
        if began and not ended and (now_ns >= end or stopping):
            self._window_marked.add(EventKind.WINDOW_END)
            self.events.write(EventKind.WINDOW_END, t_ns=min(end, now_ns))

    def _report(self, phase: str, start_ns: int | None) -> None:
        if self.on_progress is None:
            return
        total = self._total()
        sent, received = total.sent, total.received
        if start_ns:
            self._rates.start(start_ns)
        for handle in self._handles:
            self._rates.add(handle.plan.worker, handle.stats)
        send_rate, receive_rate = self._rates.rates()
        elapsed = (time.time_ns() - start_ns) / 1e9 if start_ns else 0.0
        self.on_progress(
            Progress(
                phase=phase,
                elapsed_s=max(0.0, elapsed),
                total_s=self.run_s,
                offered_rate=self.offered_rate,
                send_rate=send_rate,
                receive_rate=receive_rate,
                sent=sent,
                received=received,
                connected=total.connected,
                connections=self.connections,
                send_failed=total.send_failed,
                warmup_s=self.warmup_s,
                expected_rate=self.offered_rate * self.expected_per_sent,
            )
        )
