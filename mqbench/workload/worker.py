"""One worker process: its clients, its record files, one event loop (uvloop when present).

The parent talks to it over a ``multiprocessing`` pipe with the typed messages of
``workload.messages``:

    worker -> parent  Ready | Progress | Published | WorkerEvent | Done
                      | Failed | RecordWriteFailed
    parent -> worker  Start | Stop

Records reach the disk at least once a second (``RECORD_CHECKPOINT_S``), with their count
in a sidecar, so a hard kill loses at most about a second. A worker dies with its parent:
the parent-death signal (SIGTERM) and the end of the control pipe both make it stop,
flush and exit; while the parent lives it ignores SIGINT and SIGTERM (the parent
coordinates the stop, e.g. when ``timeout`` signals the whole process group).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mqbench.errors import MqbenchError
from mqbench.process import lifeline
from mqbench.records.events import Event, EventKind
from mqbench.records.worker_stats import WorkerStats
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import Transport
from mqbench.transports.registry import get_transport
from mqbench.workload.client_pool import ClientPool
from mqbench.workload.compiled import CompiledPublishing
from mqbench.workload.messages import (
    ControlMessage,
    Done,
    Failed,
    Progress,
    Published,
    Ready,
    RecordWriteFailed,
    Start,
    Stop,
    WorkerEvent,
    WorkerMessage,
)
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.publishing import Publishing
from mqbench.workload.realtime import apply_realtime
from mqbench.workload.reporting import WorkerReport

RECORD_CHECKPOINT_S = 1.0
"""Records are written out (with their count sidecar) at least this often."""


class Worker:
    """Runs one ``WorkerPlan`` inside an event loop: its lifecycle and its record files.

    The connections are a ``ClientPool``, the schedule a ``Publishing``, the reports to
    the parent a ``WorkerReport``; the worker starts, stops and flushes them.
    """

    def __init__(self, plan: WorkerPlan, conn: Connection) -> None:
        self.plan = plan
        self.conn = conn
        cell_dir = Path(plan.cell_dir)
        # A worker that cannot start (a second file it cannot create, an unknown client)
        # closes the record files it already opened: its caller only sees the error.
        with contextlib.ExitStack() as opened:
            self.deliveries = opened.enter_context(
                RecordWriter(cell_dir / f"deliveries-{plan.worker}.bin")
            )
            self.sends = opened.enter_context(RecordWriter(cell_dir / f"sends-{plan.worker}.bin"))
            self._wire(get_transport(plan.transport))
            opened.pop_all()
        self._start: asyncio.Future[int] | None = None
        self._stop: asyncio.Event | None = None
        self._fast_stop = False
        self.failure: RecordWriteFailed | None = None
        self.parent_pid = os.getppid()

    def _wire(self, transport: Transport) -> None:
        """The connections, the schedule and the reports around the two record files."""
        plan = self.plan
        self.pool = ClientPool(plan, transport, self.deliveries, self._event)
        self.publishing: Publishing | CompiledPublishing
        compiled = transport.capabilities.compiled
        if plan.hot_path == "compiled" and compiled is not None:
            writers = (self.deliveries, self.sends)
            self.publishing = CompiledPublishing(plan, writers, self._event, compiled)
        else:
            self.publishing = Publishing(plan, self.sends)
        self.report = WorkerReport(plan, self.pool, self.publishing, (self.deliveries, self.sends))

    def stats(self) -> WorkerStats:
        """The worker's counters now (cumulative)."""
        return self.report.stats()

    # -- control channel -------------------------------------------------------------

    def send(self, message: WorkerMessage) -> None:
        """Send one message to the parent (ignored when the parent is gone)."""
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(message)

    def _event(self, kind: EventKind, /, **details: Any) -> None:
        self.send(WorkerEvent(Event(kind, time.time_ns(), details)))

    def _on_control(self) -> None:
        message: ControlMessage
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            message = Stop()  # parent is gone: stop and flush
        match message:
            case Start(start_ns):
                if self._start is not None and not self._start.done():
                    self._start.set_result(start_ns)
            case Stop(fast):
                self._request_stop(fast=fast)

    def _request_stop(self, fast: bool = False) -> None:
        """Stop publishing, close clients and flush (``fast``: without waiting for acks)."""
        self._fast_stop |= fast
        assert self._stop is not None
        self._stop.set()
        if self._start is not None and not self._start.done():
            self._start.cancel()
        self.publishing.stop()

    def _on_sigterm(self) -> None:
        """SIGTERM (the parent-death signal, or a group-wide signal): stop only if orphaned."""
        if os.getppid() != self.parent_pid:
            self._request_stop()

    # -- records ---------------------------------------------------------------------

    def _checkpoint(self) -> None:
        t_ns = time.time_ns()
        for writer in (self.deliveries, self.sends):
            writer.checkpoint(t_ns)
        self._note_write_errors()

    def _note_write_errors(self) -> None:
        """A record file that cannot be written stops the worker (and the run)."""
        for writer in (self.deliveries, self.sends):
            err = writer.error
            if err is not None and self.failure is None:
                self.failure = RecordWriteFailed(
                    f"cannot write {writer.path}: {err.strerror or err}",
                    str(writer.path),
                    err.errno,
                )
                if self._stop is not None:
                    self._request_stop(fast=True)

    async def _checkpoint_records(self) -> None:
        while True:
            await asyncio.sleep(RECORD_CHECKPOINT_S)
            self._checkpoint()

    # -- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, wait for the start signal, publish on schedule, drain, close, flush."""
        loop = asyncio.get_running_loop()
        self._start = loop.create_future()
        self._stop = asyncio.Event()
        loop.add_reader(self.conn.fileno(), self._on_control)
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        background: list[asyncio.Task[None]] = [
            asyncio.create_task(self.report.every_interval(self._send_progress)),
            asyncio.create_task(self._checkpoint_records()),
        ]
        if os.getppid() != self.parent_pid:  # orphaned before the handler was in place
            self._request_stop()
        try:
            if not await self._connect_unless_stopped():
                return
            self.send(Ready(self.stats()))
            try:
                start_ns = await self._start
            except asyncio.CancelledError:
                return
            # Real time from the start signal on, not while connecting: a connect storm
            # never runs ahead of the broker's own threads (a failure shows in the stats).
            apply_realtime(self.plan.realtime)
            background += self._start_background(start_ns)
            await self._publish(start_ns)
            self.send(Published(self.stats()))
            await self._stop.wait()
        finally:
            for task in background:
                task.cancel()
            loop.remove_reader(self.conn.fileno())
            await self._close_clients()
            self._checkpoint()
            self.deliveries.close()
            self.sends.close()
            self._note_write_errors()  # a write error while closing is reported too

    async def _publish(self, start_ns: int) -> None:
        """Hand out the schedule on the chosen hot path (``plan.hot_path``)."""
        publishing, pool = self.publishing, self.pool
        if isinstance(publishing, CompiledPublishing):
            await publishing.run(start_ns, pool)
        else:
            await publishing.run(start_ns, pool.publishers)

    async def _close_clients(self) -> None:
        """Close every client; after the compiled core (stopped first) nothing is queued
        in the clients and no ack is awaited: they close at once."""
        publishing = self.publishing
        if isinstance(publishing, CompiledPublishing):
            await publishing.finish()
            await self.pool.close_all(lambda: True)
        else:
            await self.pool.close_all(lambda: self._fast_stop)

    def _send_progress(self, stats: WorkerStats) -> None:
        self.send(Progress(stats))

    def _start_background(self, start_ns: int) -> list[asyncio.Task[None]]:
        """The loop-lag probe, and client churn when the plan asks for it."""
        tasks = [asyncio.create_task(self.report.probe_loop_lag())]
        if self.plan.churn is not None:
            end_ns = start_ns + int(self.plan.messages_per_publisher / self.plan.rate * 1e9)
            tasks.append(asyncio.create_task(self.pool.churn(start_ns, end_ns)))
        return tasks

    async def _connect_unless_stopped(self) -> bool:
        """Connect every client; False when a stop came first (connecting is abandoned)."""
        assert self._stop is not None
        connect = asyncio.ensure_future(self.pool.connect_all())
        stopped = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({connect, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not connect.done():
            connect.cancel()
            with contextlib.suppress(asyncio.CancelledError, MqbenchError):
                await connect
            return False
        connect.result()
        return True


def _orphan_exit(signum: int, frame: object) -> None:
    """SIGTERM outside the event loop: exit only when the parent is gone."""
    parent = mp.parent_process()
    if parent is None or os.getppid() != parent.pid:
        raise SystemExit(128 + signum)


def raise_open_files_limit() -> None:
    """Use the hard open-files limit: thousands of connections need thousands of files."""
    with contextlib.suppress(ImportError, OSError, ValueError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def worker_main(plan: WorkerPlan, conn: Connection) -> None:
    """Process entry point: SIGINT and SIGTERM are the parent's to handle; it sends ``stop``.

    The worker dies with its parent (``mqbench/process/lifeline.py``): SIGTERM on the parent's
    death makes it stop and flush.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _orphan_exit)
    parent = mp.parent_process()
    parent_pid = parent.pid if parent is not None else None
    if parent_pid is not None and not lifeline.die_with_parent(signal.SIGTERM, parent_pid):
        return  # the parent died before the signal was armed
    raise_open_files_limit()
    run_worker(plan, conn)
    signal.signal(signal.SIGTERM, _orphan_exit)  # the loop restored the default


def run_worker(plan: WorkerPlan, conn: Connection) -> WorkerStats | None:
    """Run ``plan`` in this process over ``conn`` until it is done; close ``conn``.

    The last message on ``conn`` is ``Done``, ``Failed`` or ``RecordWriteFailed``; the final
    stats are returned too (None after an error). Used by ``worker_main`` and by the tasks
    of a distributed engine (``workload.spark_engine``).
    """
    try:
        worker = Worker(plan, conn)
    except Exception as exc:  # e.g. a record folder it cannot write: say so, never vanish
        message = str(exc)
        if not isinstance(exc, MqbenchError):
            message = f"worker {plan.worker} could not start: {type(exc).__name__}: {exc}"
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(Failed(message))
        conn.close()
        return None
    try:
        try:
            import uvloop

            runner: Any = uvloop.run
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            runner = asyncio.run
        runner(worker.run())
        if worker.failure is not None:
            worker.send(worker.failure)
            return None
        stats = worker.stats()
        worker.send(Done(stats))
        return stats
    except MqbenchError as exc:
        worker.send(Failed(str(exc)))
    except Exception as exc:  # report, never hang the parent
        worker.send(Failed(f"worker {plan.worker} crashed: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()
    return None
