"""What each worker process does in a cell: picklable plans built from a ``Cell``."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from mqbench.errors import ScenarioError
from mqbench.records.hot_path import HotPathEngine
from mqbench.records.timing import ReceiveStamp
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Generator
from mqbench.transports.base import ClientSecurity, ProtocolSettings
from mqbench.workload.realtime import RealtimeSettings
from mqbench.workload.topology import PubSpec, SubSpec, Topology

MAX_CONNECTIONS_PER_WORKER = 19000
"""Open files are capped at 20000 per process here; keep headroom for records and pipes."""
AUTO_CONNECTIONS_PER_WORKER = 2000
"""``workers: auto`` adds a process per this many connections (one wake-up per message each)."""
FILES_PER_CONNECTION: dict[HotPathEngine, int] = {"python": 1, "compiled": 2}
"""Open files a worker holds per connection: the compiled core owns a duplicate of each
lent socket while the client keeps its own (``LendsSockets.lend_socket``)."""
SPLIT_ABOVE_MSG_S = 2000.0
"""``layout: auto`` runs publishers and subscribers in separate processes above this rate."""


@dataclass(frozen=True)
class ChurnPlan:
    """When this worker's clients disconnect and come back (times after publishing starts)."""

    who: str
    every_s: float
    downtime_s: float
    fraction: float
    first_after_s: float


@dataclass(frozen=True)
class WorkerPlan:
    """Everything one worker process needs; built in the parent, pickled to the child."""

    worker: int
    cell_dir: str
    transport: str
    host: str
    port: int
    publishers: list[PubSpec]
    """A contiguous range of the cell's publishers (may be empty)."""
    subscribers: list[SubSpec]
    publishers_total: int
    rate: float
    payload_bytes: int
    qos: int
    messages_per_publisher: int
    connect_timeout_s: float
    spin_ns: int
    late_threshold_ns: int
    timer: str = "auto"
    """Publish-loop timer: ``timerfd``, ``loop`` or ``auto`` (``mqbench.workload.timer``)."""
    role: str = "both"
    """``both`` (shared layout), ``publishers`` or ``subscribers`` (split layout)."""
    persistent: bool = False
    connect_rate: float = 0.0
    """Connections per second started by this worker (0: no ramp)."""
    churn: ChurnPlan | None = None
    connect_concurrency: int = 64
    max_pending_bytes: int | None = None
    """Bytes each connection may queue for its socket (``ClientOptions.max_pending_bytes``)."""
    receive_stamp: ReceiveStamp = "user"
    """How receives are stamped (``generator.receive_stamp``)."""
    protocol_settings: ProtocolSettings | None = None
    """The scenario's settings of the protocol's clients (``ClientOptions.protocol``;
    ``workload.cell_run.protocol_params``)."""
    proxy_port: int = 0
    """Port of the fault proxy on ``host`` (0: no faults)."""
    proxied_subs: frozenset[int] = frozenset()
    proxied_pubs: frozenset[int] = frozenset()
    reconnect_max_s: float = 0.1
    """Upper bound of the reconnect backoff (starts at 20 ms, doubles)."""
    security: ClientSecurity | None = None
    """Credentials and TLS of every client (pickled to the worker, never written)."""
    realtime: RealtimeSettings | None = None
    """Scheduling the worker applies to itself (None: normal, ``workload.realtime``)."""
    hot_path: HotPathEngine = "python"
    """What runs the publish and receive loop (``workload.hot_path``): the compiled core
    or the Python engine."""
    coalesce_ns: int = 0
    """Compiled core: sends due within this window after the first leave with it
    (``generator.coalesce_us``)."""

    @property
    def pub_range(self) -> tuple[int, int]:
        """Half-open range of cell-local publisher indices this worker runs."""
        if not self.publishers:
            return (0, 0)
        return (self.publishers[0].index, self.publishers[-1].index + 1)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, e.g. under ``taskset``), which bounds
    ``workers: auto``: more workers than CPUs only take turns."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(
    requested: int | str, connections: int, cpus: int, files_per_connection: int = 1
) -> int:
    """Worker processes for a cell: ``auto`` or a number that fits the per-process fd cap
    (``files_per_connection``: see ``FILES_PER_CONNECTION``)."""
    per_worker = MAX_CONNECTIONS_PER_WORKER // files_per_connection
    needed = math.ceil(connections / per_worker)
    if requested == "auto":
        count = min(max(1, cpus), max(1, math.ceil(connections / AUTO_CONNECTIONS_PER_WORKER)))
        return max(count, needed)
    if int(requested) < needed:
        why = "open files are capped at 20000"
        if files_per_connection > 1:
            why += f", and the compiled core holds {files_per_connection} per connection"
        raise ScenarioError(
            f"{connections} connections need at least {needed} worker processes "
            f"(<= {per_worker} per process: {why}); generator.workers is {requested}"
        )
    return int(requested)


LAYOUTS = ("shared", "split")


def cell_shards(
    generator: Generator, cell: Cell, cpus: int, hot_path: HotPathEngine = "python"
) -> tuple[int, str]:
    """How many shards a cell runs in, and their layout.

    Local engine: worker processes and ``generator.layout``. Spark engine: one shard per
    Spark task (``generator.executors``), always ``shared``, so that a publisher and its
    subscribers share one clock (docs/distributed.md).
    """
    if generator.distributed:
        return worker_count(generator.executors, cell.connections, 1), "shared"
    files = FILES_PER_CONNECTION[hot_path]
    workers = worker_count(generator.workers, cell.connections, cpus, files)
    kernel_stamped_core = hot_path == "compiled" and generator.receive_stamp == "kernel"
    return workers, resolve_layout(generator.layout, cell, kernel_stamped_core)


def resolve_layout(requested: str, cell: Cell, kernel_stamped_core: bool = False) -> str:
    """The process layout a cell runs with: ``shared`` or ``split``.

    ``auto`` chooses ``split`` (publishers and subscribers in separate processes, so a
    receive is never timestamped after a batch of sends in the same event loop) whenever
    the cell offers more than ``SPLIT_ABOVE_MSG_S`` messages per second or delivers more
    than that; below it one process keeps every timestamp prompt and saves a process.
    On the compiled core with kernel receive stamps (``kernel_stamped_core``) a receive's
    stamp is the kernel's whatever the loop does, so ``auto`` is ``shared``: one thread
    interleaves sends and reads, instead of two processes contending for a core.
    """
    if requested != "auto":
        return requested
    if kernel_stamped_core:
        return "shared"
    busy = max(cell.offered_rate, cell.expected_delivery_rate)
    return "split" if busy > SPLIT_ABOVE_MSG_S else "shared"


def split_workers(workers: int, publishers: int, subscribers: int) -> tuple[int, int]:
    """Publisher and subscriber process counts of the split layout for ``workers``.

    Half the processes each (at least one), more where the open-files cap needs them.
    """
    half = max(1, math.ceil(workers / 2))
    pubs = max(half, math.ceil(publishers / MAX_CONNECTIONS_PER_WORKER))
    subs = max(half, math.ceil(subscribers / MAX_CONNECTIONS_PER_WORKER))
    return pubs, subs


def process_count(layout: str, workers: int, publishers: int, subscribers: int) -> int:
    """Worker processes a cell starts in ``layout``."""
    if layout == "split":
        return sum(split_workers(workers, publishers, subscribers))
    return workers


def split_range(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``[0, total)`` into ``parts`` contiguous ranges (sizes differ by <= 1, may be 0)."""
    parts = max(1, parts)
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        ranges.append((start, start + size))
        start += size
    return ranges


def build_worker_plans(
    cell: Cell,
    topology: Topology,
    *,
    cell_dir: str,
    transport: str,
    host: str,
    port: int,
    workers: int,
    connect_timeout_s: float,
    spin_ns: int,
    late_threshold_ns: int,
    proxy_port: int = 0,
    proxied: dict[str, list[int]] | None = None,
    reconnect_max_s: float = 0.1,
    timer: str = "auto",
    layout: str = "shared",
    max_pending_bytes: int | None = None,
    receive_stamp: ReceiveStamp = "user",
    protocol_settings: ProtocolSettings | None = None,
    security: ClientSecurity | None = None,
    realtime: RealtimeSettings | None = None,
    hot_path: HotPathEngine = "python",
    coalesce_ns: int = 0,
) -> list[WorkerPlan]:
    """Shard a cell over worker processes.

    ``shared``: ``workers`` processes; publishers and subscribers are each split into
    contiguous ranges, so with equal counts (pairs, p2p) publisher i and subscriber i land
    in the same process. ``split``: publishers and subscribers in separate processes
    (``split_workers``), publisher processes first.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}")
    churn = None
    if cell.churn is not None:
        churn = ChurnPlan(
            who=cell.churn.who,
            every_s=cell.churn.every,
            downtime_s=cell.churn.downtime,
            fraction=cell.churn.fraction,
            first_after_s=cell.warmup_s + cell.churn.first_after,
        )
    n_pubs, n_subs = len(topology.publishers), len(topology.subscribers)
    if layout == "split":
        pub_workers, sub_workers = split_workers(workers, n_pubs, n_subs)
        pub_ranges = split_range(n_pubs, pub_workers) + [(n_pubs, n_pubs)] * sub_workers
        sub_ranges = [(0, 0)] * pub_workers + split_range(n_subs, sub_workers)
        roles = ["publishers"] * pub_workers + ["subscribers"] * sub_workers
    else:
        pub_ranges = split_range(n_pubs, workers)
        sub_ranges = split_range(n_subs, workers)
        roles = ["both"] * workers
    plans = []
    processes = len(roles)
    for w in range(processes):
        pa, pb = pub_ranges[w]
        sa, sb = sub_ranges[w]
        plans.append(
            WorkerPlan(
                worker=w,
                cell_dir=cell_dir,
                transport=transport,
                host=host,
                port=port,
                publishers=topology.publishers[pa:pb],
                subscribers=topology.subscribers[sa:sb],
                publishers_total=len(topology.publishers),
                rate=cell.rate,
                payload_bytes=cell.payload_bytes,
                qos=cell.qos,
                messages_per_publisher=cell.messages_per_publisher,
                connect_timeout_s=connect_timeout_s,
                spin_ns=spin_ns,
                late_threshold_ns=late_threshold_ns,
                timer=timer,
                role=roles[w],
                persistent=topology.persistent,
                connect_rate=cell.connect_rate / processes if cell.connect_rate else 0.0,
                churn=churn,
                proxy_port=proxy_port,
                proxied_subs=frozenset((proxied or {}).get("subscribers", [])),
                proxied_pubs=frozenset((proxied or {}).get("publishers", [])),
                reconnect_max_s=reconnect_max_s,
                max_pending_bytes=max_pending_bytes,
                receive_stamp=receive_stamp,
                protocol_settings=protocol_settings,
                security=security,
                realtime=realtime,
                hot_path=hot_path,
                coalesce_ns=coalesce_ns,
            )
        )
    return plans
