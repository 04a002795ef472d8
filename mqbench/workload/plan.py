"""What each worker process does in a cell: picklable plans built from a ``Cell``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mqbench.scenario.matrix import Cell

MAX_CONNECTIONS_PER_WORKER = 19000
"""Open files are capped at 20000 per process here; keep headroom for records and pipes."""
AUTO_CONNECTIONS_PER_WORKER = 2000
"""``workers: auto`` adds a process per this many connections (one wake-up per message each)."""


@dataclass(frozen=True)
class WorkerPlan:
    """Everything one worker process needs; built in the parent, pickled to the child."""

    worker: int
    cell_dir: str
    transport: str
    host: str
    port: int
    topic_prefix: str
    client_id_prefix: str
    pubs: tuple[int, int]
    """Half-open range of cell-local publisher indices this worker runs."""
    subs: tuple[int, int]
    """Half-open range of cell-local subscriber indices this worker runs."""
    publishers_total: int
    rate: float
    payload_bytes: int
    qos: int
    messages_per_publisher: int
    connect_timeout_s: float
    spin_ns: int
    late_threshold_ns: int
    connect_concurrency: int = 64

    def topic_of_publisher(self, pub: int) -> str:
        """Pairs topology: every publisher has its own topic."""
        return f"{self.topic_prefix}/{pub}"

    def topic_of_subscriber(self, sub: int) -> str:
        """Pairs topology: subscriber ``i`` listens to publisher ``i``'s topic."""
        return f"{self.topic_prefix}/{sub}"


def worker_count(requested: int | str, connections: int, cpus: int) -> int:
    """Worker processes for a cell: ``auto`` or a number, never above the per-process fd cap."""
    needed = math.ceil(connections / MAX_CONNECTIONS_PER_WORKER)
    if requested == "auto":
        count = min(max(1, cpus), max(1, math.ceil(connections / AUTO_CONNECTIONS_PER_WORKER)))
        return max(count, needed)
    return max(int(requested), needed)


def split_range(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``[0, total)`` into ``parts`` contiguous ranges whose sizes differ by at most 1."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        ranges.append((start, start + size))
        start += size
    return ranges


def routes(cell: Cell) -> list[dict[str, Any]]:
    """Who receives what (docs/results.md): pairs maps publisher i to subscriber i."""
    return [{"kind": "pairs", "pubs": [0, cell.publishers], "subs": [0, cell.subscribers]}]


def build_plans(
    cell: Cell,
    *,
    cell_dir: str,
    transport: str,
    host: str,
    port: int,
    run_tag: str,
    workers: int,
    connect_timeout_s: float,
    spin_ns: int,
    late_threshold_ns: int,
) -> list[WorkerPlan]:
    """Split a pairs cell over ``workers``: each keeps publisher i with its subscriber i."""
    plans = []
    for w, (lo, hi) in enumerate(split_range(cell.pairs, workers)):
        plans.append(
            WorkerPlan(
                worker=w,
                cell_dir=cell_dir,
                transport=transport,
                host=host,
                port=port,
                topic_prefix=f"mqbench/{run_tag}/{cell.index}",
                client_id_prefix=f"mqb-{run_tag}-{cell.index}",
                pubs=(lo, hi),
                subs=(lo, hi),
                publishers_total=cell.publishers,
                rate=cell.rate,
                payload_bytes=cell.payload_bytes,
                qos=cell.qos,
                messages_per_publisher=cell.messages_per_publisher,
                connect_timeout_s=connect_timeout_s,
                spin_ns=spin_ns,
                late_threshold_ns=late_threshold_ns,
            )
        )
    return plans
