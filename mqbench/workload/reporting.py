"""A worker's report to its parent: its counters as one ``WorkerStats``, twice a second.

The figures come from the worker's parts (``ClientPool``, ``Publishing``, the record
writers); this part sums them, recounts the per-client figures in slices so that
thousands of clients never stall the event loop, and probes the loop's own lag.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from mqbench.records.worker_stats import WorkerStats
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import Client
from mqbench.workload.client_pool import ClientPool
from mqbench.workload.compiled import CompiledPublishing, CoreCounts
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.publishing import Publishing
from mqbench.workload.realtime import current_policy
from mqbench.workload.selfcheck import MAX_LOOP_LAG_MS

STATS_INTERVAL_S = 0.5
CLIENT_STATS_SLICE = 256
LOOP_LAG_PROBE_S = 0.05


@dataclass(frozen=True, slots=True)
class ClientTotals:
    """The per-client figures of some clients summed (``ClientStats``): what the broker
    did to them that the worker reports."""

    connected: int = 0
    pending: int = 0
    """Bytes waiting in the connected clients' buffers."""
    puback: int = 0
    """QoS 2 publishes the broker acknowledged as QoS 1."""
    refused: int = 0
    """Sends refused by a full output buffer."""
    reused: int = 0
    """Inbound QoS 2 messages dropped on a packet id the broker reused before PUBREL."""
    redelivered: int = 0
    """Inbound QoS 2 messages delivered again after their release."""
    unmatched: int = 0
    """Deliveries that matched no subscription of their client (dropped, not recorded)."""

    def plus(self, other: ClientTotals) -> ClientTotals:
        """Both sums added field by field."""
        return ClientTotals(
            *(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self))
        )


def count_stamps(clients: list[Client | None]) -> tuple[int, int]:
    """Reads stamped by the kernel and by the clock, over ``clients``."""
    kernel = user = 0
    for client in clients:
        if client is not None:
            stats = client.stats()
            kernel += stats.kernel_stamped_reads
            user += stats.user_stamped_reads
    return kernel, user


def count_clients(clients: list[Client | None]) -> ClientTotals:
    """The per-client figures of ``clients`` summed (None: never connected)."""
    connected = pending = puback = refused = reused = redelivered = unmatched = 0
    for c in clients:
        if c is None:
            continue
        if c.connected:
            connected += 1
            pending += c.pending_write_bytes()
        stats = c.stats()
        puback += stats.qos2_acked_as_qos1
        refused += stats.sends_refused
        reused += stats.qos2_id_reused
        redelivered += stats.qos2_redelivered
        unmatched += stats.unrouted
    return ClientTotals(connected, pending, puback, refused, reused, redelivered, unmatched)


class WorkerReport:
    """Builds the worker's cumulative ``WorkerStats`` from its parts."""

    def __init__(
        self,
        plan: WorkerPlan,
        pool: ClientPool,
        publishing: Publishing | CompiledPublishing,
        writers: tuple[RecordWriter, RecordWriter],
    ) -> None:
        self.plan = plan
        self.pool = pool
        self.publishing = publishing
        self.deliveries, self.sends = writers
        self.max_loop_lag_ns = 0
        self.loop_stalls = 0
        self.loop_stall_ns = 0
        self.loop_probe_ns = 0
        self._client_totals = ClientTotals()

    async def every_interval(self, send: Callable[[WorkerStats], None]) -> None:
        """Recount the clients and ``send`` the stats every ``STATS_INTERVAL_S`` (forever)."""
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            await self._refresh_client_totals()
            send(self.stats(fresh=False))

    async def probe_loop_lag(self) -> None:
        """Measure how late the event loop wakes a sleeper (forever): the longest stall,
        and how many wake-ups were later than the stall limit, for how long in all."""
        loop = asyncio.get_running_loop()
        limit_ns = int(MAX_LOOP_LAG_MS * 1e6)
        while True:
            before = loop.time()
            await asyncio.sleep(LOOP_LAG_PROBE_S)
            elapsed = int((loop.time() - before) * 1e9)
            lag = elapsed - int(LOOP_LAG_PROBE_S * 1e9)
            self.loop_probe_ns += elapsed
            self.max_loop_lag_ns = max(self.max_loop_lag_ns, lag)
            if lag > limit_ns:
                self.loop_stalls += 1
                self.loop_stall_ns += lag

    async def _refresh_client_totals(self) -> None:
        """Recount per-client figures in slices, yielding between them.

        With thousands of clients one pass takes milliseconds; done at once every stats
        interval it stalled the loop (15-20 ms loop lag with 9000 pairs, >1% of sends late).
        """
        clients = self.pool.all()
        totals = ClientTotals()
        for i in range(0, len(clients), CLIENT_STATS_SLICE):
            totals = totals.plus(count_clients(clients[i : i + CLIENT_STATS_SLICE]))
            await asyncio.sleep(0)
        self._client_totals = totals

    def stats(self, fresh: bool = True) -> WorkerStats:
        """Counters reported to the parent (cumulative).

        ``fresh=False`` uses the client totals of the last sliced recount instead of
        walking every client now (the periodic report while publishing).
        """
        pool, publishing = self.pool, self.publishing
        core = CoreCounts()
        if isinstance(publishing, CompiledPublishing):
            publishing.refresh()
            core = publishing.counts()
        loop_stats = publishing.stats
        if fresh:
            self._client_totals = count_clients(pool.all())
        clients = self._client_totals
        kernel_stamped, user_stamped = count_stamps(pool.all()) if fresh else (0, 0)
        pending = clients.pending + core.pending_write_bytes
        refused = clients.refused + core.sends_refused
        kernel_stamped += core.kernel_stamped_reads
        user_stamped += core.user_stamped_reads
        return WorkerStats(
            worker=self.plan.worker,
            pid=os.getpid(),
            sent=publishing.sent_ok,
            send_failed=publishing.send_failed,
            send_refused=refused,
            acked=publishing.acked,
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
            loop_stalls=self.loop_stalls,
            loop_stall_ns=self.loop_stall_ns,
            loop_probe_ns=self.loop_probe_ns,
            connected=clients.connected,
            connect_failed=pool.connect_failed,
            first_connect_error=pool.first_connect_error,
            connected_ns=pool.connected_ns,
            disconnects=pool.disconnects,
            reconnects=pool.reconnects,
            qos_downgraded=pool.qos_downgraded,
            publish_qos2_acked_as_qos1=clients.puback,
            qos2_id_reused=clients.reused,
            qos2_redelivered=clients.redelivered,
            duplicate_deliveries=pool.duplicate_deliveries,
            unmatched_deliveries=clients.unmatched,
            granted_qos_min=pool.granted_qos_min,
            outage_total_s=round(pool.outage_total_s, 6),
            outage_max_s=round(pool.outage_max_s, 6),
            pending_write_bytes=pending,
            cpu_s=time.process_time(),
            publish_cpu_fraction=publishing.cpu_fraction(),
            sched_policy=current_policy(),
            kernel_stamped_reads=kernel_stamped,
            user_stamped_reads=user_stamped,
            t_ns=time.time_ns(),
        )
