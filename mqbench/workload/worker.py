"""One worker process: its clients, its record files, one event loop (uvloop when present).

The parent talks to it over a ``multiprocessing`` pipe:

    worker -> parent  ("ready", info) | ("stats", stats) | ("published", stats)
                      | ("done", stats) | ("error", message)
    parent -> worker  ("start", start_ns) | ("stop", None)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mqbench.errors import MqbenchError
from mqbench.records.format import HEADER, SEND_ACK, SEND_FAILED, SEND_OK
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import Client, ClientOptions, Endpoint, MessageHandler
from mqbench.transports.registry import get_transport
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.schedule import InterleavedSchedule, PublishLoop

STATS_INTERVAL_S = 0.5
LOOP_LAG_PROBE_S = 0.05


class Worker:
    """Runs one ``WorkerPlan`` inside an event loop."""

    def __init__(self, plan: WorkerPlan, conn: Connection) -> None:
        self.plan = plan
        self.conn = conn
        cell_dir = Path(plan.cell_dir)
        self.deliveries = RecordWriter(cell_dir / f"deliveries-{plan.worker}.bin")
        self.sends = RecordWriter(cell_dir / f"sends-{plan.worker}.bin")
        self.subscribers: list[Client] = []
        self.publishers: list[Client] = []
        self.sent_ok = 0
        self.send_failed = 0
        self.acked = 0
        self.disconnects = 0
        self.max_loop_lag_ns = 0
        self._start: asyncio.Future[int] | None = None
        self._stop: asyncio.Event | None = None
        self._loop_task: PublishLoop | None = None
        self._closing = False
        self._publish_cpu: list[float] = []
        """process_time and monotonic time at the start and end of publishing."""

    # -- control channel -------------------------------------------------------------

    def _send(self, kind: str, data: Any) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send((kind, data))

    def _on_control(self) -> None:
        try:
            kind, data = self.conn.recv()
        except (EOFError, OSError):
            kind, data = "stop", None  # parent is gone: stop and flush
        if kind == "start" and self._start is not None and not self._start.done():
            self._start.set_result(int(data))
        elif kind == "stop":
            assert self._stop is not None
            self._stop.set()
            if self._start is not None and not self._start.done():
                self._start.cancel()
            if self._loop_task is not None:
                self._loop_task.stop()

    def stats(self) -> dict[str, Any]:
        """Counters reported to the parent (cumulative)."""
        loop_stats = self._loop_task.stats if self._loop_task else None
        pending = sum(c.pending_write_bytes() for c in self.publishers if c.connected)
        return {
            "worker": self.plan.worker,
            "pid": os.getpid(),
            "sent": self.sent_ok,
            "send_failed": self.send_failed,
            "acked": self.acked,
            "received": self.deliveries.count,
            "due": loop_stats.due if loop_stats else 0,
            "late": loop_stats.late if loop_stats else 0,
            "max_send_lag_ns": loop_stats.max_lag_ns if loop_stats else 0,
            "max_loop_lag_ns": self.max_loop_lag_ns,
            "connected": sum(c.connected for c in self.subscribers + self.publishers),
            "disconnects": self.disconnects,
            "pending_write_bytes": pending,
            "cpu_s": time.process_time(),
            "publish_cpu_fraction": self._publish_cpu_fraction(),
            "t_ns": time.time_ns(),
        }

    def _publish_cpu_fraction(self) -> float | None:
        marks = self._publish_cpu
        if len(marks) < 2:
            return None
        cpu = (marks[2] if len(marks) > 2 else time.process_time()) - marks[0]
        wall = (marks[3] if len(marks) > 2 else time.monotonic()) - marks[1]
        return cpu / wall if wall > 0 else None

    # -- clients ---------------------------------------------------------------------

    def _options(self, client_id: str) -> ClientOptions:
        def on_event(kind: str, details: dict[str, Any]) -> None:
            if kind == "disconnected" and not self._closing:
                self.disconnects += 1

        return ClientOptions(
            client_id=client_id,
            connect_timeout_s=self.plan.connect_timeout_s,
            on_event=on_event,
        )

    def _delivery_handler(self, sub: int) -> MessageHandler:
        unpack = HEADER.unpack_from
        append = self.deliveries.append_delivery

        def on_message(payload: memoryview | bytes, t_recv: int) -> None:
            pub, seq, t_sent, _ = unpack(payload)
            append(t_sent, t_recv, pub, sub, seq)

        return on_message

    async def _connect_all(self) -> None:
        plan = self.plan
        transport = get_transport(plan.transport)
        endpoint = Endpoint(plan.host, plan.port)
        gate = asyncio.Semaphore(plan.connect_concurrency)

        async def open_subscriber(sub: int) -> Client:
            client = transport.create_client(
                endpoint, self._options(f"{plan.client_id_prefix}-s{sub}")
            )
            async with gate:
                await client.connect()
                await client.subscribe(
                    plan.topic_of_subscriber(sub), plan.qos, self._delivery_handler(sub)
                )
            return client

        async def open_publisher(pub: int) -> Client:
            client = transport.create_client(
                endpoint, self._options(f"{plan.client_id_prefix}-p{pub}")
            )
            async with gate:
                await client.connect()
            return client

        # Subscribers first: every subscription is confirmed before anyone publishes.
        self.subscribers = list(
            await asyncio.gather(*(open_subscriber(s) for s in range(*plan.subs)))
        )
        self.publishers = list(
            await asyncio.gather(*(open_publisher(p) for p in range(*plan.pubs)))
        )

    # -- publishing ------------------------------------------------------------------

    def _make_send(self) -> Any:
        plan = self.plan
        first = plan.pubs[0]
        pad = bytes(plan.payload_bytes - HEADER.size)
        pack = HEADER.pack
        time_ns = time.time_ns
        record = self.sends.append
        senders = [
            client.sender(plan.topic_of_publisher(first + i), plan.qos)
            for i, client in enumerate(self.publishers)
        ]
        pending: list[dict[int, int]] = [{} for _ in self.publishers]
        if plan.qos > 0:
            for i, client in enumerate(self.publishers):
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

    def _ack_handler(self, pub: int, pending: dict[int, int]) -> Any:
        record = self.sends.append

        def on_ack(seq: int, t_ack: int) -> None:
            t_sent = pending.pop(seq, None)
            if t_sent is not None:
                record(t_sent, min((t_ack - t_sent) // 100, 2**31 - 1), pub, SEND_ACK, seq)
                self.acked += 1

        return on_ack

    async def _report_stats(self) -> None:
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            self._send("stats", self.stats())

    async def _probe_loop_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(LOOP_LAG_PROBE_S)
            lag = int((loop.time() - before - LOOP_LAG_PROBE_S) * 1e9)
            self.max_loop_lag_ns = max(self.max_loop_lag_ns, lag)

    # -- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, wait for the start signal, publish on schedule, drain, close, flush."""
        loop = asyncio.get_running_loop()
        self._start = loop.create_future()
        self._stop = asyncio.Event()
        loop.add_reader(self.conn.fileno(), self._on_control)
        background: list[asyncio.Task[None]] = []
        try:
            await self._connect_all()
            self._send("ready", {"connected_ns": time.time_ns(), "stats": self.stats()})
            try:
                start_ns = await self._start
            except asyncio.CancelledError:
                return
            background = [
                asyncio.create_task(self._report_stats()),
                asyncio.create_task(self._probe_loop_lag()),
            ]
            schedule = (
                InterleavedSchedule(
                    start_ns,
                    self.plan.rate,
                    self.plan.publishers_total,
                    self.plan.pubs[0],
                    self.plan.pubs[1],
                    self.plan.messages_per_publisher,
                )
                if self.plan.pubs[0] < self.plan.pubs[1]
                else None
            )
            if schedule is not None:
                self._loop_task = PublishLoop(
                    schedule,
                    self._make_send(),
                    time.time_ns,
                    spin_ns=self.plan.spin_ns,
                    late_threshold_ns=self.plan.late_threshold_ns,
                )
                await self._sleep_until(start_ns)
                self._publish_cpu = [time.process_time(), time.monotonic()]
                await self._loop_task.run()
                self._publish_cpu += [time.process_time(), time.monotonic()]
            self._send("published", self.stats())
            await self._stop.wait()
        finally:
            for task in background:
                task.cancel()
            loop.remove_reader(self.conn.fileno())
            await self._close_all()
            self.deliveries.close()
            self.sends.close()

    async def _sleep_until(self, t_ns: int) -> None:
        delay = (t_ns - time.time_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)

    async def _close_all(self) -> None:
        self._closing = True
        for client in self.publishers:
            with contextlib.suppress(Exception):
                await client.flush(1.0)
        await asyncio.gather(
            *(c.close() for c in self.publishers + self.subscribers), return_exceptions=True
        )


def worker_main(plan: WorkerPlan, conn: Connection) -> None:
    """Process entry point: SIGINT is the parent's to handle; it sends ``stop``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = Worker(plan, conn)
    try:
        try:
            import uvloop

            runner: Any = uvloop.run
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            runner = asyncio.run
        runner(worker.run())
        worker._send("done", worker.stats())
    except MqbenchError as exc:
        worker._send("error", str(exc))
    except Exception as exc:  # report, never hang the parent
        worker._send("error", f"worker {plan.worker} crashed: {type(exc).__name__}: {exc}")
    finally:
        conn.close()
