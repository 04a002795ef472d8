"""A worker's publishing on the compiled core (``generator.hot_path``, docs/performance.md).

The worker's Python clients connect and subscribe as always (``ClientPool``); at the start
signal each client lends its established socket (``transports.base.LendsSockets``) and the
record files lend their descriptors (``RecordWriter.lend``) to one ``mqbench_core.Core``,
which runs on a thread of its own (the GIL released) until the worker stops: the
open-loop schedule, the receive loop and the records, byte for byte the Python engine's.
This module is the one place that imports ``mqbench_core``; it reads the core's counters
back into the same ``WorkerStats`` fields the Python engine fills.

A connection the core loses goes back to its client (``lost_lent_session``), which reports
the disconnection as on the Python engine, so the pool reconnects it with the same backoff
and ``client_reconnected`` event; the new session is lent to the core again
(``Core.readopt``), with the deliveries its client recorded between subscribing and lending.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from mqbench.errors import MqbenchError, TransportError
from mqbench.records.events import EventSink
from mqbench.records.format import encode_latency, pack_record
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import Client, ClientOptions, LendsSockets, max_pending_bytes
from mqbench.workload.client_pool import ClientKey, ClientPool
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.publish_loop import ScheduleStats

PUBLISHED_POLL_S = 0.02
"""How often the worker looks whether the core handed out its whole schedule, and for
connections the core lost."""
STOP_JOIN_S = 10.0
"""How long stopping waits for the core's thread (it returns within 50 ms)."""


@dataclass(frozen=True)
class CoreCounts:
    """What the core counted that the Python engine counts in its clients."""

    kernel_stamped_reads: int = 0
    user_stamped_reads: int = 0
    sends_refused: int = 0
    pending_write_bytes: int = 0


class CompiledPublishing:
    """The publishers and subscribers of one worker, driven by the compiled core."""

    def __init__(
        self,
        plan: WorkerPlan,
        writers: tuple[RecordWriter, RecordWriter],
        event: EventSink,
        protocol: str,
    ) -> None:
        self.plan = plan
        self.deliveries, self.sends = writers
        self.event = event
        self.protocol = protocol
        self._core: Any = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._stats: dict[str, int] = {}
        self._stopped = False
        self._watcher: asyncio.Task[None] | None = None
        self._held = bytearray()
        """Deliveries of reconnected clients not yet handed to the core (packed records)."""

    # -- the counters the worker reports ----------------------------------------------

    @property
    def sent_ok(self) -> int:
        """Messages handed to a connected client."""
        return self._stats.get("sent_ok", 0)

    @property
    def send_failed(self) -> int:
        """Sends due while the connection could not take them."""
        return self._stats.get("send_failed", 0)

    @property
    def acked(self) -> int:
        """Always 0: the core publishes at QoS 0."""
        return 0

    @property
    def stats(self) -> ScheduleStats | None:
        """The schedule's counters as the Python loop keeps them (None before the start)."""
        s = self._stats
        if not s:
            return None
        return ScheduleStats(
            due=s["due"],
            late=s["late"],
            max_lag_ns=s["max_lag_ns"],
            timer="timerfd",
            wakeups=s["wakeups"],
            yields=s["yields"],
            spin_ns=s["spin_ns"],
            margin_ns=s["margin_ns"],
        )

    def counts(self) -> CoreCounts:
        """The client-level counters the core keeps instead of the clients."""
        s = self._stats
        return CoreCounts(
            kernel_stamped_reads=s.get("kernel_reads", 0),
            user_stamped_reads=s.get("user_reads", 0),
            sends_refused=s.get("send_refused", 0),
            pending_write_bytes=s.get("pending_bytes", 0),
        )

    def refresh(self) -> None:
        """Read the core's counters now; the record writers adopt its record counts."""
        core = self._core
        if core is None:
            return
        self._stats = s = cast(dict[str, int], core.stats())
        self.deliveries.adopt(s["deliveries"], s["deliveries_written"], s["deliveries_errno"])
        self.sends.adopt(s["sends"], s["sends_written"], s["sends_errno"])

    def cpu_fraction(self) -> float | None:
        """Share of a core the worker process was busy while publishing, spin excluded."""
        s = self._stats
        if not s or not s.get("mono_start_ns"):
            return None
        end_cpu = s["cpu_end_ns"] or time.process_time_ns()
        end_mono = s["mono_end_ns"] or time.monotonic_ns()
        wall = end_mono - s["mono_start_ns"]
        cpu = end_cpu - s["cpu_start_ns"] - s["spin_ns"]
        return max(0.0, cpu) / wall if wall > 0 else None

    # -- running ------------------------------------------------------------------------

    async def run(self, start_ns: int, pool: ClientPool) -> None:
        """Lend every session to the core, start it, and return once it handed out the
        whole schedule (it keeps receiving until ``stop``, and sessions the pool
        re-establishes are lent to it again)."""
        self._core = core = self._build(start_ns)
        try:
            self._lend(core, pool.publishers, pool.subscribers)
        except TransportError as exc:
            raise MqbenchError(f"worker {self.plan.worker}: compiled core: {exc}") from None
        pool.divert_deliveries(self._hold_delivery)
        pool.on_reconnected = self._relend
        self._watcher = asyncio.create_task(self._watch_lost(pool))
        self._thread = threading.Thread(target=self._run_core, name="mqbench-core", daemon=True)
        self._thread.start()
        while not core.published and self._thread.is_alive() and not self._stopped:
            await asyncio.sleep(PUBLISHED_POLL_S)
        self.refresh()
        if self._failure is not None:
            raise MqbenchError(f"worker {self.plan.worker}: compiled core: {self._failure}")

    def stop(self) -> None:
        """Ask the core to return (the worker is stopping); deliveries held for it are
        handed over first, so it writes them before it ends."""
        self._stopped = True
        core = self._core
        if core is not None:
            if self._held:
                core.readopt("sub", 0, -1, bytes(self._held))
                self._held.clear()
            core.stop()

    async def finish(self) -> None:
        """Stop the core, wait for its thread and read its last counters."""
        self.stop()
        watcher = self._watcher
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        thread = self._thread
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, STOP_JOIN_S)
        self.refresh()

    # -- connections the core lost --------------------------------------------------------

    async def _watch_lost(self, pool: ClientPool) -> None:
        """Hand each connection the core lost back to its client: the client reports the
        loss, and the pool reconnects it as on the Python engine."""
        core = self._core
        while True:
            await asyncio.sleep(PUBLISHED_POLL_S)
            for role, index, reason in core.take_lost():
                client = pool.client((role, index))
                if client is not None:
                    cast(LendsSockets, client).lost_lent_session(reason)

    def _relend(self, key: ClientKey, client: Client) -> None:
        """Lend a client the pool reconnected back to the core (``ClientPool.on_reconnected``),
        with the deliveries its client recorded since it subscribed again."""
        core = self._core
        if core is None or self._stopped:
            return
        lender = cast(LendsSockets, client)
        try:
            fd = lender.lend_socket()
        except TransportError as exc:  # e.g. part of a frame read: drop it, reconnect again
            lender.lost_lent_session(f"the new session could not be lent: {exc}")
            return
        role, index = key
        core.readopt(role, index, fd, bytes(self._held))
        self._held.clear()

    def _hold_delivery(self, t_sent: int, t_recv: int, pub: int, sub: int, seq: int) -> None:
        """A delivery a reconnected client received before its session was lent again: the
        core writes it (``readopt``), since the deliveries file is lent to the core."""
        self._held += pack_record(t_sent, encode_latency(t_recv - t_sent), pub, sub, seq)

    def _run_core(self) -> None:
        try:
            self._core.run()
        except BaseException as exc:  # reported by run()/finish(), never lost with the thread
            self._failure = exc

    def _build(self, start_ns: int) -> Any:
        import mqbench_core

        plan = self.plan
        first, last = plan.pub_range
        options = ClientOptions("core", max_pending_bytes=plan.max_pending_bytes)
        return mqbench_core.Core(
            self.protocol,
            self.deliveries.lend(),
            self.sends.lend(),
            start_ns,
            plan.rate,
            plan.publishers_total,
            first,
            last,
            plan.messages_per_publisher,
            plan.payload_bytes,
            plan.spin_ns,
            plan.late_threshold_ns,
            plan.receive_stamp == "kernel",
            options.keepalive_s,
            max_pending_bytes(options),
            plan.coalesce_ns,
        )

    def _lend(
        self,
        core: Any,
        publishers: Sequence[Client | None],
        subscribers: Sequence[Client | None],
    ) -> None:
        plan = self.plan
        for spec, client in zip(plan.publishers, publishers, strict=True):
            if client is None:
                core.add_publisher(-1, spec.index, b"", b"")
                continue
            lender = cast(LendsSockets, client)
            head, tail = lender.publish_frame(spec.topic, plan.payload_bytes)
            core.add_publisher(lender.lend_socket(), spec.index, head, tail)
        for sub_spec, client in zip(plan.subscribers, subscribers, strict=True):
            if client is not None:
                core.add_subscriber(cast(LendsSockets, client).lend_socket(), sub_spec.index)
