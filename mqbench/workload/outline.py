"""What a run would do, cell by cell, without doing it (``mqbench run --dry-run``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mqbench.brokers.registry import get_target
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.records.hot_path import HotPathEntry
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Scenario
from mqbench.transports.base import TransportCapabilities
from mqbench.transports.registry import get_transport, resolve_client
from mqbench.workload.capacity import RESERVE_BYTES, free_bytes, record_bytes, result_bytes
from mqbench.workload.distributed import staging_parent
from mqbench.workload.hot_path import choose as choose_hot_path
from mqbench.workload.plan import cell_shards, process_count, usable_cpus


@dataclass(frozen=True)
class CellOutline:
    """One cell as it would run."""

    cell: Cell
    workers: int
    """Worker processes."""
    layout: str
    """``shared`` or ``split`` (``generator.layout``)."""
    seconds: float
    """Warm-up + measured duration + drain."""
    record_bytes: int
    hot_path: HotPathEntry
    """Which engine would run the publish and receive loop, and why."""


@dataclass(frozen=True)
class RunOutline:
    """Every cell of a run, how long it takes at least and whether its results fit."""

    cells: list[CellOutline]
    load_s: float
    """Load time of all cells (broker start-up and analysis not included)."""
    result_bytes: int
    """Estimated result folder size, the space reserve included."""
    disk: Path
    """The existing folder whose file system would hold the results."""
    free_bytes: int

    @property
    def fits(self) -> bool:
        """The results fit on the disk (``run`` refuses otherwise)."""
        return self.result_bytes <= self.free_bytes


def outline(scenario: Scenario, cells: Sequence[Cell], out_root: Path | RemoteRoot) -> RunOutline:
    """The outline of running ``cells`` of ``scenario`` into ``out_root`` (a URI: the run
    is staged in the temporary folder first, whose disk counts)."""
    if isinstance(out_root, RemoteRoot):
        out_root = staging_parent()
    cpus = usable_cpus()
    rows = []
    for cell in cells:
        hot_path = choose_hot_path(scenario, cell, capabilities_of(cell))
        workers, layout = cell_shards(scenario.generator, cell, cpus, hot_path.engine)
        rows.append(
            CellOutline(
                cell=cell,
                workers=process_count(layout, workers, cell.publishers, cell.subscribers),
                layout=layout,
                seconds=cell.warmup_s + cell.duration_s + cell.drain_s,
                record_bytes=record_bytes(cell),
                hot_path=hot_path,
            )
        )
    where, free = free_bytes(out_root)
    return RunOutline(
        cells=rows,
        load_s=sum(r.seconds for r in rows),
        result_bytes=result_bytes(cells) + RESERVE_BYTES,
        disk=where,
        free_bytes=free,
    )


def capabilities_of(cell: Cell) -> TransportCapabilities:
    """What the client of ``cell`` can do."""
    client = resolve_client(get_target(cell.target).transport, cell.client)
    return get_transport(client).capabilities
