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
import functools
import math
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mqbench.endpoint import Endpoint
from mqbench.errors import MqbenchError, TransportError, TransportErrorKind
from mqbench.process import lifeline
from mqbench.records.events import Event, EventKind
from mqbench.records.format import HEADER, LAT_MAX, SEND_ACK, SEND_FAILED, SEND_OK
from mqbench.records.worker_stats import WorkerStats
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import Client, ClientOptions, MessageHandler, Sender
from mqbench.transports.events import ClientEvent, Disconnected, Subscribed
from mqbench.transports.registry import get_transport
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
from mqbench.workload.publish_loop import InterleavedSchedule, PublishLoop
from mqbench.workload.realtime import apply_realtime, current_policy
from mqbench.workload.timer import timer_factory
from mqbench.workload.topology import PubSpec, SubSpec

STATS_INTERVAL_S = 0.5
RECORD_CHECKPOINT_S = 1.0
"""Records are written out (with their count sidecar) at least this often."""
CLIENT_STATS_SLICE = 256
LOOP_LAG_PROBE_S = 0.05
RECONNECT_FIRST_S = 0.02
"""Reconnect backoff: 20 ms doubling to ``plan.reconnect_max_s`` (generator.reconnect_max),
until the worker stops. The cap bounds how long after a repaired fault a client stays away,
which otherwise shows up as extra QoS 0 loss charged to the broker."""


def _never(payload: bytes, tag: int) -> bool:
    return False


class Worker:
    """Runs one ``WorkerPlan`` inside an event loop."""

    def __init__(self, plan: WorkerPlan, conn: Connection) -> None:
        self.plan = plan
        self.conn = conn
        cell_dir = Path(plan.cell_dir)
        self.deliveries = RecordWriter(cell_dir / f"deliveries-{plan.worker}.bin")
        self.sends = RecordWriter(cell_dir / f"sends-{plan.worker}.bin")
        self.transport = get_transport(plan.transport)
        self.endpoint = Endpoint(plan.host, plan.port)
        self.subscribers: list[Client | None] = [None] * len(plan.subscribers)
        self.publishers: list[Client | None] = [None] * len(plan.publishers)
        self.sent_ok = 0
        self.send_failed = 0
        self.acked = 0
        self.disconnects = 0
        self.reconnects = 0
        self.connect_failed = 0
        self._client_totals: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.qos_downgraded = 0
        self.granted_qos_min: int | None = None
        self.first_connect_error: str | None = None
        self.connected_ns = 0
        self.max_loop_lag_ns = 0
        self._start: asyncio.Future[int] | None = None
        self._stop: asyncio.Event | None = None
        self._loop_task: PublishLoop | None = None
        self._closing = False
        self._held_down: set[tuple[str, int]] = set()
        """Clients closed on purpose (churn); they are not reconnected automatically."""
        self._reconnecting: set[tuple[str, int]] = set()
        self.outage_total_s = 0.0
        self.outage_max_s = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._publish_cpu: list[float] = []
        """process_time and monotonic time at the start and end of publishing."""
        self._fast_stop = False
        self.failure: RecordWriteFailed | None = None
        self.parent_pid = os.getppid()

    # -- control channel -------------------------------------------------------------

    def send(self, message: WorkerMessage) -> None:
        """Send one message to the parent (ignored when the parent is gone)."""
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(message)

    def _event(self, kind: EventKind, **details: Any) -> None:
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
        if self._loop_task is not None:
            self._loop_task.stop()

    def _on_sigterm(self) -> None:
        """SIGTERM (the parent-death signal, or a group-wide signal): stop only if orphaned."""
        if os.getppid() != self.parent_pid:
            self._request_stop()

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

    def _count_clients(self, clients: list[Client | None]) -> tuple[int, int, int, int]:
        connected = pending = puback = refused = 0
        for c in clients:
            if c is None:
                continue
            if c.connected:
                connected += 1
                pending += c.pending_write_bytes()
            stats = c.stats()
            puback += stats.qos2_acked_as_qos1
            refused += stats.sends_refused
        return connected, pending, puback, refused

    async def _refresh_client_totals(self) -> None:
        """Recount per-client figures in slices, yielding between them.

        With thousands of clients one pass takes milliseconds; done at once every stats
        interval it stalled the loop (15-20 ms loop lag with 9000 pairs, >1% of sends late).
        """
        clients = self.publishers + self.subscribers
        totals = [0, 0, 0, 0]
        for i in range(0, len(clients), CLIENT_STATS_SLICE):
            for k, value in enumerate(self._count_clients(clients[i : i + CLIENT_STATS_SLICE])):
                totals[k] += value
            await asyncio.sleep(0)
        self._client_totals = (totals[0], totals[1], totals[2], totals[3])

    def stats(self, fresh: bool = True) -> WorkerStats:
        """Counters reported to the parent (cumulative).

        ``fresh=False`` uses the client totals of the last sliced recount instead of
        walking every client now (the periodic report while publishing).
        """
        loop_stats = self._loop_task.stats if self._loop_task else None
        if fresh:
            self._client_totals = self._count_clients(self.publishers + self.subscribers)
        connected, pending, puback, refused = self._client_totals
        return WorkerStats(
            worker=self.plan.worker,
            pid=os.getpid(),
            sent=self.sent_ok,
            send_failed=self.send_failed,
            send_refused=refused,
            acked=self.acked,
            received=self.deliveries.count,
            role=self.plan.role,
            records_written=self.deliveries.written + self.sends.written,
            due=loop_stats.due if loop_stats else 0,
            late=loop_stats.late if loop_stats else 0,
            max_send_lag_ns=loop_stats.max_lag_ns if loop_stats else 0,
            timer=loop_stats.timer if loop_stats else None,
            timer_wakeups=loop_stats.wakeups if loop_stats else 0,
            spin_s=round(loop_stats.spin_ns / 1e9, 6) if loop_stats else 0.0,
            wake_margin_us=round(loop_stats.margin_ns / 1e3, 1) if loop_stats else None,
            publish_yields=loop_stats.yields if loop_stats else 0,
            max_loop_lag_ns=self.max_loop_lag_ns,
            connected=connected,
            connect_failed=self.connect_failed,
            first_connect_error=self.first_connect_error,
            connected_ns=self.connected_ns,
            disconnects=self.disconnects,
            reconnects=self.reconnects,
            qos_downgraded=self.qos_downgraded,
            publish_qos2_acked_as_qos1=puback,
            granted_qos_min=self.granted_qos_min,
            outage_total_s=round(self.outage_total_s, 6),
            outage_max_s=round(self.outage_max_s, 6),
            pending_write_bytes=pending,
            cpu_s=time.process_time(),
            publish_cpu_fraction=self._publish_cpu_fraction(),
            sched_policy=current_policy(),
            **(self._stamp_counts() if fresh else {}),
            t_ns=time.time_ns(),
        )

    def _stamp_counts(self) -> dict[str, int]:
        """Reads stamped by the kernel and by the clock, over every client."""
        kernel = user = 0
        for client in self.publishers + self.subscribers:
            if client is not None:
                stats = client.stats()
                kernel += stats.kernel_stamped_reads
                user += stats.user_stamped_reads
        return {"kernel_stamped_reads": kernel, "user_stamped_reads": user}

    def _publish_cpu_fraction(self) -> float | None:
        """Share of a core the worker was busy while publishing, busy-waiting excluded.

        Busy-waiting for a due time (the publish loop's spin) is CPU the worker would
        give up if it had work: it is reported as ``spin_s``, not counted as load.
        """
        marks = self._publish_cpu
        if len(marks) < 2:
            return None
        cpu = (marks[2] if len(marks) > 2 else time.process_time()) - marks[0]
        wall = (marks[3] if len(marks) > 2 else time.monotonic()) - marks[1]
        spin = self._loop_task.stats.spin_ns / 1e9 if self._loop_task else 0.0
        return max(0.0, cpu - spin) / wall if wall > 0 else None

    # -- clients ---------------------------------------------------------------------

    def _options(self, client_id: str, persistent: bool, key: tuple[str, int]) -> ClientOptions:
        security = self.plan.security

        def on_event(event: ClientEvent) -> None:
            match event:
                case Subscribed(requested_qos=requested, granted_qos=granted):
                    self._note_granted_qos(requested, granted)
                case Disconnected():
                    self._on_disconnected(key)

        return ClientOptions(
            client_id=client_id,
            clean_session=not persistent,
            connect_timeout_s=self.plan.connect_timeout_s,
            on_event=on_event,
            extra=dict(self.plan.client_extra),
            username=security.username if security is not None else None,
            password=security.password if security is not None else None,
            tls=security.tls if security is not None else None,
        )

    def _on_disconnected(self, key: tuple[str, int]) -> None:
        """A lost client is reconnected (unless the worker closes it or churn holds it)."""
        if self._closing or key in self._held_down:
            return
        self.disconnects += 1
        loop = self._loop
        if loop is not None and key not in self._reconnecting:
            self._reconnecting.add(key)
            loop.call_soon_threadsafe(
                lambda: loop.create_task(self._reconnect(key, time.monotonic()))
            )

    def _note_granted_qos(self, requested: int, granted: int | None) -> None:
        """Count subscriptions the broker granted at a lower QoS than asked (SUBACK)."""
        if granted is None:
            return
        if granted < requested:
            self.qos_downgraded += 1
        low = self.granted_qos_min
        self.granted_qos_min = granted if low is None else min(low, granted)

    def _delivery_handler(self, sub: int) -> MessageHandler:
        unpack = HEADER.unpack_from
        append = self.deliveries.append_delivery

        def on_message(payload: memoryview | bytes, t_recv: int) -> None:
            pub, seq, t_sent, _ = unpack(payload)
            append(t_sent, t_recv, pub, sub, seq)

        return on_message

    async def _open_subscriber(self, spec: SubSpec, client: Client | None = None) -> Client:
        if client is None:
            client = self.transport.create_client(
                self._endpoint_of("sub", spec.index),
                self._options(spec.client_id, spec.persistent, ("sub", spec.index)),
            )
        await client.connect()
        await client.subscribe(spec.topic_filter, self.plan.qos, self._delivery_handler(spec.index))
        return client

    async def _open_publisher(self, spec: PubSpec, client: Client | None = None) -> Client:
        if client is None:
            client = self.transport.create_client(
                self._endpoint_of("pub", spec.index),
                self._options(spec.client_id, self.plan.persistent, ("pub", spec.index)),
            )
        await client.connect()
        return client

    def _endpoint_of(self, role: str, index: int) -> Endpoint:
        """Clients a fault targets connect through the fault proxy, the others directly."""
        plan = self.plan
        proxied = plan.proxied_subs if role == "sub" else plan.proxied_pubs
        if plan.proxy_port and index in proxied:
            return Endpoint(plan.host, plan.proxy_port)
        return self.endpoint

    async def _reconnect(self, key: tuple[str, int], lost_at: float) -> None:
        """Bring a lost client back with bounded exponential backoff (same client id)."""
        role, index = key
        is_sub = role == "sub"
        specs: list[Any] = list(self.plan.subscribers if is_sub else self.plan.publishers)
        clients = self.subscribers if is_sub else self.publishers
        first = specs[0].index if specs else 0
        k = index - first
        delay = RECONNECT_FIRST_S
        attempts = 0
        try:
            while not self._closing and key not in self._held_down:
                await asyncio.sleep(delay)
                if self._closing or key in self._held_down:
                    return
                attempts += 1
                try:
                    clients[k] = await self._reopen(specs[k], clients[k], is_sub)
                except TransportError:
                    delay = min(delay * 2, self.plan.reconnect_max_s)
                    continue
                outage = time.monotonic() - lost_at
                self.reconnects += 1
                self.outage_total_s += outage
                self.outage_max_s = max(self.outage_max_s, outage)
                self._event(
                    EventKind.CLIENT_RECONNECTED,
                    role=role,
                    client=specs[k].client_id,
                    outage_ms=round(outage * 1000, 3),
                    attempts=attempts,
                )
                return
        finally:
            self._reconnecting.discard(key)

    async def _connect_all(self) -> None:
        """Connect subscribers (subscribed before anyone publishes), then publishers.

        Connections start at ``connect_rate`` per second when a ramp is asked for. A
        client that cannot connect is counted, not fatal: a broker that refuses more
        connections shows as a plateau (and as loss or failed sends), as in mq-bench.
        Only when no client at all connects is it an error.
        """
        plan = self.plan
        gate = asyncio.Semaphore(plan.connect_concurrency)
        interval = 1.0 / plan.connect_rate if plan.connect_rate > 0 else 0.0
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        slot = 0

        async def attempt(k: int, opener: Callable[[], Awaitable[Client]]) -> Client | None:
            if interval:
                await asyncio.sleep(max(0.0, t0 + k * interval - loop.time()))
            async with gate:
                try:
                    client = await opener()
                except TransportError as exc:
                    self.connect_failed += 1
                    self.first_connect_error = self.first_connect_error or str(exc)
                    return None
            self.connected_ns = time.time_ns()
            return client

        sub_tasks = []
        for spec in plan.subscribers:
            sub_tasks.append(attempt(slot, functools.partial(self._open_subscriber, spec)))
            slot += 1
        self.subscribers = list(await asyncio.gather(*sub_tasks))
        pub_tasks = []
        for pub_spec in plan.publishers:
            pub_tasks.append(attempt(slot, functools.partial(self._open_publisher, pub_spec)))
            slot += 1
        self.publishers = list(await asyncio.gather(*pub_tasks))
        total = len(plan.subscribers) + len(plan.publishers)
        if total and self.connect_failed == total:
            raise TransportError(f"no client could connect: {self.first_connect_error}")

    # -- publishing ------------------------------------------------------------------

    def _make_send(self) -> Callable[[int, int, int], None]:
        plan = self.plan
        first = plan.pub_range[0]
        pad = bytes(plan.payload_bytes - HEADER.size)
        pack = HEADER.pack
        time_ns = time.time_ns
        record = self.sends.append
        senders: list[Sender] = [
            client.sender(spec.topic, plan.qos) if client is not None else _never
            for spec, client in zip(plan.publishers, self.publishers, strict=True)
        ]
        pending: list[dict[int, int]] = [{} for _ in self.publishers]
        if plan.qos > 0:
            for i, client in enumerate(self.publishers):
                if client is not None:
                    client.set_ack_handler(self._ack_handler(first + i, pending[i]))
        track_acks = plan.qos > 0

        def send(pub: int, seq: int, intended: int) -> None:
            t = time_ns()
            if senders[pub - first](pack(pub, seq, t, 0) + pad, seq):
                record(t, 0, pub, SEND_OK, seq)
                self.sent_ok += 1
                if track_acks:
                    pending[pub - first][seq] = t
            else:
                record(intended, 0, pub, SEND_FAILED, seq)
                self.send_failed += 1

        return send

    def _ack_handler(self, pub: int, pending: dict[int, int]) -> Callable[[int, int], None]:
        record = self.sends.append

        def on_ack(seq: int, t_ack: int) -> None:
            t_sent = pending.pop(seq, None)
            if t_sent is not None:
                record(t_sent, min((t_ack - t_sent) // 100, LAT_MAX), pub, SEND_ACK, seq)
                self.acked += 1

        return on_ack

    async def _report_stats(self) -> None:
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            await self._refresh_client_totals()
            self.send(Progress(self.stats(fresh=False)))

    async def _probe_loop_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(LOOP_LAG_PROBE_S)
            lag = int((loop.time() - before - LOOP_LAG_PROBE_S) * 1e9)
            self.max_loop_lag_ns = max(self.max_loop_lag_ns, lag)

    async def _churn(self, start_ns: int, end_ns: int) -> None:
        """Disconnect a share of clients every ``every`` seconds and bring them back."""
        churn = self.plan.churn
        assert churn is not None
        is_subs = churn.who == "subscribers"
        specs: list[Any] = list(self.plan.subscribers if is_subs else self.plan.publishers)
        clients = self.subscribers if is_subs else self.publishers
        if not specs:
            return
        count = max(1, math.ceil(churn.fraction * len(specs)))
        offset = 0
        t = start_ns + int(churn.first_after_s * 1e9)
        while t + int(churn.downtime_s * 1e9) < end_ns:
            await asyncio.sleep(max(0.0, (t - time.time_ns()) / 1e9))
            chosen = [(offset + k) % len(specs) for k in range(count)]
            offset = (offset + count) % len(specs)
            ids = [specs[k].client_id for k in chosen]
            role = "sub" if is_subs else "pub"
            held = {(role, specs[k].index) for k in chosen}
            self._held_down |= held
            await asyncio.gather(
                *(c.close() for k in chosen if (c := clients[k]) is not None),
                return_exceptions=True,
            )
            self._event(EventKind.CHURN_DISCONNECTED, who=churn.who, clients=ids)
            await asyncio.sleep(churn.downtime_s)
            failed = 0
            for k in chosen:
                try:
                    clients[k] = await self._reopen(specs[k], clients[k], is_subs)
                    self.reconnects += 1
                except TransportError as exc:
                    failed += 1
                    self._event(
                        EventKind.ERROR, message=f"reconnect of {specs[k].client_id}: {exc}"
                    )
            self._held_down -= held
            self._event(EventKind.CHURN_RECONNECTED, who=churn.who, clients=ids, failed=failed)
            t += int(churn.every_s * 1e9)

    async def _reopen(self, spec: Any, client: Client | None, is_sub: bool) -> Client:
        """Reconnect with the same client id, reusing the client object when it can."""
        opener = self._open_subscriber if is_sub else self._open_publisher
        if client is not None:
            try:
                return await opener(spec, client)
            except TransportError as exc:
                if exc.kind is not TransportErrorKind.NOT_REUSABLE:
                    raise
        return await opener(spec)

    # -- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, wait for the start signal, publish on schedule, drain, close, flush."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._start = loop.create_future()
        self._stop = asyncio.Event()
        loop.add_reader(self.conn.fileno(), self._on_control)
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        background: list[asyncio.Task[None]] = [
            asyncio.create_task(self._report_stats()),
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
            background.append(asyncio.create_task(self._probe_loop_lag()))
            first, last = self.plan.pub_range
            end_ns = start_ns + int(self.plan.messages_per_publisher / self.plan.rate * 1e9)
            if self.plan.churn is not None:
                background.append(asyncio.create_task(self._churn(start_ns, end_ns)))
            if first < last:
                schedule = InterleavedSchedule(
                    start_ns,
                    self.plan.rate,
                    self.plan.publishers_total,
                    first,
                    last,
                    self.plan.messages_per_publisher,
                )
                self._loop_task = PublishLoop(
                    schedule,
                    self._make_send(),
                    time.time_ns,
                    timer_factory(self.plan.timer, loop),
                    loop.call_soon,
                    spin_ns=self.plan.spin_ns,
                    late_threshold_ns=self.plan.late_threshold_ns,
                )
                await self._sleep_until(start_ns)
                self._publish_cpu = [time.process_time(), time.monotonic()]
                await self._loop_task.run()
                self._publish_cpu += [time.process_time(), time.monotonic()]
            self.send(Published(self.stats()))
            await self._stop.wait()
        finally:
            for task in background:
                task.cancel()
            loop.remove_reader(self.conn.fileno())
            await self._close_all()
            self._checkpoint()
            self.deliveries.close()
            self.sends.close()
            self._note_write_errors()  # a write error while closing is reported too

    async def _connect_unless_stopped(self) -> bool:
        """Connect every client; False when a stop came first (connecting is abandoned)."""
        assert self._stop is not None
        connect = asyncio.ensure_future(self._connect_all())
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

    async def _sleep_until(self, t_ns: int) -> None:
        delay = (t_ns - time.time_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)

    async def _close_all(self) -> None:
        self._closing = True
        publishers = [c for c in self.publishers if c is not None]
        for client in publishers:
            if self._fast_stop:
                break
            with contextlib.suppress(Exception):
                await client.flush(1.0)
        clients = publishers + [c for c in self.subscribers if c is not None]
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


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
