"""Load that cannot fit is refused before anything starts (docs/scenarios.md, "Limits").

:func:`check_fits` is the one check shared by ``mqbench scenario validate``,
``mqbench run --dry-run`` and ``mqbench run``. Per cell, in this order:

1. open files of the generator: every connection is a file, so a worker process holds at
   most its open-files limit minus ``WORKER_FD_RESERVE`` connections;
2. worker processes against cores: more than ``MAX_WORKERS_PER_CORE`` per core only
   time-share the CPU and make every send late;
3. open files of the broker process (native: the limit it inherits from mqbench; external:
   read from ``/proc/<broker.pid>/limits``): connections plus ``BROKER_FD_RESERVE``;
4. generator memory: every publisher connection may queue at most
   ``generator.buffer_memory / publishers`` bytes for its socket before sends are refused
   (so memory stays bounded at run time); that share must hold two messages, one second
   of the offered bytes must fit in ``generator.buffer_memory``, and
   ``generator.buffer_memory`` must fit in half of the machine's memory.

:func:`check_disk_space` (``run`` only) compares the estimated result volume with the
free space of the output folder.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

from mqbench.brokers.runtime.registry import runtime_capabilities
from mqbench.errors import CapacityError, ResultsError
from mqbench.records.format import RECORD_SIZE
from mqbench.scenario.matrix import AXIS_FIELDS, Cell
from mqbench.scenario.model import Scenario
from mqbench.workload.hot_path import engine_for
from mqbench.workload.plan import FILES_PER_CONNECTION, cell_shards

WORKER_FD_RESERVE: Final = 1000
"""Files a worker keeps for itself: record files, pipes, the event loop, libraries."""
BROKER_FD_RESERVE: Final = 64
"""Files a broker needs besides its connections: listeners, logs, persistence."""
MAX_WORKERS_PER_CORE: Final = 4
MEMORY_SHARE: Final = 0.5
"""``generator.buffer_memory`` may use at most this share of the machine's memory."""
CELL_OVERHEAD_BYTES: Final = 1 << 20
"""Per cell besides records: events.jsonl, resources.csv, broker config and log."""
RESERVE_BYTES: Final = 2 << 20
"""Kept free in the result folder (``results.SpaceReserve``) so the manifest can still be
written when the disk fills up mid-run."""


@dataclass(frozen=True)
class Limits:
    """The machine facts the checks use (injectable for tests)."""

    cpus: int
    generator_open_files: int
    broker_open_files: int | None
    """None: unknown (docker, external without a PID); the check is skipped."""
    broker_limit_source: str
    memory_bytes: int


def open_files_limit() -> int:
    """This process's hard open-files limit (children may raise their soft limit to it)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 1024
    limit = hard if hard != resource.RLIM_INFINITY else soft
    return int(limit) if limit != resource.RLIM_INFINITY else 1 << 20


def process_open_files_limit(pid: int) -> int | None:
    """Soft "Max open files" of a running process (``/proc/<pid>/limits``), None if unknown."""
    try:
        text = Path(f"/proc/{pid}/limits").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Max open files"):
            value = line.split()[3]
            return None if value == "unlimited" else int(value)
    return None


def machine_limits(scenario: Scenario) -> Limits:
    """The limits of this machine for ``scenario``'s runtime."""
    own = open_files_limit()
    broker: int | None = None
    source = ""
    capabilities = runtime_capabilities(scenario.runtime)
    if capabilities.inherits_open_files:
        broker, source = own, "the RLIMIT_NOFILE it inherits from mqbench"
    elif not capabilities.starts_broker and scenario.broker.pid:
        broker = process_open_files_limit(scenario.broker.pid)
        source = f"of pid {scenario.broker.pid}"
    return Limits(
        cpus=os.cpu_count() or 1,
        generator_open_files=own,
        broker_open_files=broker,
        broker_limit_source=source,
        memory_bytes=int(psutil.virtual_memory().total),
    )


def human_bytes(n: float, setting: bool = False) -> str:
    """``1.5 GB``-style (powers of 1000, like the CLI's MB/s). A ``setting`` that is an exact
    binary size (``generator.buffer_memory: 1GiB``) keeps its unit (``1 GiB``)."""
    for unit, binary in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if setting and n >= binary and float(n).is_integer() and int(n) % binary == 0:
            return f"{int(n) // binary} {unit}"
    for unit, decimal in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= decimal:
            return f"{n / decimal:.1f} {unit}"
    return f"{n:.0f} B"


def pending_bound(scenario: Scenario, cell: Cell) -> int:
    """Bytes each publisher connection may queue for its socket (``max_pending_bytes``)."""
    return int(scenario.generator.buffer_memory // max(1, cell.publishers))


def check_fits(scenario: Scenario, cells: Sequence[Cell], limits: Limits | None = None) -> None:
    """Raise CapacityError naming the first cell whose load cannot fit (see module doc)."""
    limits = limits or machine_limits(scenario)
    budget = scenario.generator.buffer_memory
    if budget > limits.memory_bytes * MEMORY_SHARE:
        raise CapacityError(
            f"generator.buffer_memory {human_bytes(budget, True)} is more than half of this "
            f"machine's {human_bytes(limits.memory_bytes)} of memory"
        )
    for cell in cells:
        _check_cell(scenario, cell, limits)


def _check_cell(scenario: Scenario, cell: Cell, limits: Limits) -> None:
    conns = cell.connections
    engine = engine_for(scenario, cell)
    files = FILES_PER_CONNECTION[engine]
    workers, _ = cell_shards(scenario.generator, cell, limits.cpus, engine)
    per_worker = math.ceil(conns / workers)
    usable = (limits.generator_open_files - WORKER_FD_RESERVE) // files
    if per_worker > usable:
        each = " (two files each on the compiled core)" if files > 1 else ""
        raise CapacityError(
            f"cell {cell.id}: {per_worker:,} connections per worker process{each} exceed the "
            f"generator's open-files limit of {limits.generator_open_files:,} "
            f"(minus {WORKER_FD_RESERVE} kept for records and pipes); "
            f"set generator.workers to at least {math.ceil(conns / max(1, usable))}"
        )
    max_workers = MAX_WORKERS_PER_CORE * limits.cpus
    if workers > max_workers and not scenario.generator.distributed:
        raise CapacityError(
            f"cell {cell.id}: {conns:,} connections need {workers} worker processes "
            f"(at most {limits.generator_open_files - WORKER_FD_RESERVE:,} connections each: "
            f"open-files limit {limits.generator_open_files:,}), more than "
            f"{MAX_WORKERS_PER_CORE} per core on this {limits.cpus}-core machine"
        )
    broker_files = limits.broker_open_files
    if broker_files is not None and conns + BROKER_FD_RESERVE > broker_files:
        raise CapacityError(
            f"cell {cell.id}: {conns:,} connections exceed the broker process's open-files "
            f"limit of {broker_files:,} ({limits.broker_limit_source}; one file per "
            f"connection plus {BROKER_FD_RESERVE} for the broker itself); "
            + _raise_files_hint(scenario, cell, broker_files)
        )
    budget = scenario.generator.buffer_memory
    share = budget / max(1, cell.publishers)
    if share < 2 * cell.payload_bytes:
        raise CapacityError(
            f"cell {cell.id}: {cell.publishers:,} publishers share generator.buffer_memory "
            f"{human_bytes(budget, True)}: {human_bytes(share)} each, less than two "
            f"{cell.payload_bytes:,}-byte messages; raise generator.buffer_memory or lower "
            "the payload or the number of publishers"
        )
    offered = cell.offered_bytes_per_s
    if offered > budget:
        raise CapacityError(
            f"cell {cell.id}: offers {human_bytes(offered)}/s ({cell.offered_rate:,.0f} msg/s "
            f"x {cell.payload_bytes:,} B), more than the generator may buffer for one second "
            f"(generator.buffer_memory {human_bytes(budget, True)}); a broker pause would refuse "
            "most sends; lower the rate or payload, or raise generator.buffer_memory"
        )


def largest_fitting_size(cell: Cell, limit: int) -> tuple[str, int] | None:
    """The cell's size axis (``pairs``, ``subscribers``, ...) and the largest value of it
    whose connections fit a broker open-files ``limit`` (None: no size axis, none fits)."""
    axis = cell.shape.size_axis
    if axis is None:
        return None
    name = AXIS_FIELDS[axis]
    lo, hi = 0, int(getattr(cell, name))
    while lo < hi:  # largest k with conns(k) + reserve <= limit; conns grows with k
        k = (lo + hi + 1) // 2
        sized: Cell = dataclasses.replace(cell, **{name: k})  # type: ignore[arg-type]
        if sized.connections + BROKER_FD_RESERVE <= limit:
            lo = k
        else:
            hi = k - 1
    return (axis, lo) if lo > 0 else None


def _raise_files_hint(scenario: Scenario, cell: Cell, limit: int) -> str:
    """How to make a cell fit the broker's open-files limit: a smaller size axis (always
    possible), or a higher limit (needs CAP_SYS_RESOURCE above the hard limit)."""
    needed = cell.connections + BROKER_FD_RESERVE
    raise_it = f"raise the broker's open-files limit to at least {needed:,}"
    if runtime_capabilities(scenario.runtime).inherits_open_files:
        raise_it = (
            f"raise the open-files limit to at least {needed:,} in the shell that starts "
            f"mqbench (`ulimit -n {needed}`; above the hard limit this needs root with "
            "CAP_SYS_RESOURCE, or LimitNOFILE= for a systemd service)"
        )
    fit = largest_fitting_size(cell, limit)
    if fit is None:
        return raise_it
    axis, largest = fit
    values = getattr(scenario.workload, axis, None)
    if not isinstance(values, list):
        return f"{raise_it}, or use at most {largest:,} {axis}"
    fitting = sorted({int(v) for v in values if v <= largest} | {largest})
    listed = ",".join(map(str, fitting))
    return f"{raise_it}, or run at most {largest:,} {axis}: --set workload.{axis}=[{listed}]"


def record_bytes(cell: Cell) -> int:
    """Estimated record volume of a cell: 24 B x (sends + deliveries + acks)."""
    seconds = cell.warmup_s + cell.duration_s
    sends = cell.messages_per_publisher * cell.publishers
    deliveries = math.ceil(cell.expected_delivery_rate * seconds)
    acks = sends if cell.qos > 0 else 0
    return RECORD_SIZE * (sends + deliveries + acks)


def result_bytes(cells: Sequence[Cell]) -> int:
    """Estimated size of a run's result folder: records plus a little per cell."""
    return sum(record_bytes(c) + CELL_OVERHEAD_BYTES for c in cells)


def free_bytes(out_root: Path) -> tuple[Path, int]:
    """Free space of the file system that will hold ``out_root`` (its nearest existing
    ancestor) and that ancestor."""
    probe = out_root.resolve()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def check_disk_space(cells: Sequence[Cell], out_root: Path) -> None:
    """Refuse (ResultsError, with the numbers) when the results would not fit on disk."""
    need = result_bytes(cells) + RESERVE_BYTES
    where, free = free_bytes(out_root)
    if need > free:
        largest = max(cells, key=record_bytes)
        raise ResultsError(
            f"results need about {human_bytes(need)} ({len(cells)} cell(s); records are "
            f"24 B x (sends + deliveries + acks), {largest.id} alone "
            f"{human_bytes(record_bytes(largest))}) but {where} has {human_bytes(free)} free"
        )
