"""Rules of distributed load (``generator.engine: spark``) that need no Spark at all.

Client shards become the tasks of one barrier stage (``workload.spark_engine``). Each task
runs on its own clock: a latency is exact only when a publisher and all of its subscribers
run in the same task. This module counts the routes a sharding puts across tasks, refuses
them unless the scenario states a clock-error bound, checks measured clock offsets against
that bound, and refuses an output URI without the Spark engine (docs/distributed.md).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from mqbench.errors import ClockError, ScenarioError
from mqbench.records.cell_entry import Route
from mqbench.records.clocks import ClockOffset
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Scenario
from mqbench.workload.plan import WorkerPlan, build_worker_plans, worker_count
from mqbench.workload.topology import build_topology


def cross_task_routes(routes: Sequence[Route], plans: Sequence[WorkerPlan]) -> int:
    """Publisher-subscriber pairs of ``routes`` whose two ends run in different tasks."""
    pub_task: dict[int, int] = {}
    sub_task: dict[int, int] = {}
    for plan in plans:
        for pub in plan.publishers:
            pub_task[pub.index] = plan.worker
        for sub in plan.subscribers:
            sub_task[sub.index] = plan.worker
    crossing = 0
    for route in routes:
        (pa, pb), (sa, sb) = route.pubs, route.subs
        if route.kind == "pairs":
            crossing += sum(pub_task[pa + i] != sub_task[sa + i] for i in range(pb - pa))
            continue
        pubs_per_task: dict[int, int] = {}
        subs_per_task: dict[int, int] = {}
        for p in range(pa, pb):
            pubs_per_task[pub_task[p]] = pubs_per_task.get(pub_task[p], 0) + 1
        for s in range(sa, sb):
            subs_per_task[sub_task[s]] = subs_per_task.get(sub_task[s], 0) + 1
        same = sum(n * subs_per_task.get(t, 0) for t, n in pubs_per_task.items())
        crossing += (pb - pa) * (sb - sa) - same
    return crossing


def check_cross_task(scenario: Scenario, cell: Cell, crossing: int, routes: int) -> None:
    """Refuse routes across tasks unless ``generator.max_clock_error_ms`` states a bound."""
    if crossing and scenario.generator.max_clock_error_ms is None:
        raise ScenarioError(
            f"cell {cell.id}: {cell.topology} over {scenario.generator.executors} Spark tasks "
            f"puts {crossing} of {routes} publisher-subscriber routes across tasks (two "
            "clocks); use fewer generator.executors or set generator.max_clock_error_ms"
        )


def check_remote_output(scenario: Scenario, out_root: RemoteRoot) -> None:
    """A run folder on a URI is published by the Spark driver's Hadoop FileSystem: only
    ``generator.engine: spark`` has that JVM while it runs."""
    if not scenario.generator.distributed:
        raise ScenarioError(
            f"--out {out_root}: a URI needs generator.engine spark (the Spark driver's "
            "Hadoop FileSystem publishes the run folder); a local run writes to a local path"
        )


def staging_parent() -> Path:
    """Where a run with an output URI builds its run folder before publishing it."""
    return Path(tempfile.gettempdir())


def clock_spread_ns(offsets: Sequence[ClockOffset]) -> int:
    """The worst clock difference between any two tasks, error bounds included."""
    if not offsets:
        return 0
    high = max(o.offset_ns + o.error_ns for o in offsets)
    low = min(o.offset_ns - o.error_ns for o in offsets)
    return high - low


def check_clock_bound(offsets: Sequence[ClockOffset], bound_ns: int) -> None:
    """Raise ``ClockError`` when two tasks' clocks may differ by more than ``bound_ns``."""
    spread = clock_spread_ns(offsets)
    if spread > bound_ns:
        raise ClockError(
            f"task clocks may differ by {spread / 1e6:.3f} ms (offsets ± their probe error), "
            f"more than generator.max_clock_error_ms {bound_ns / 1e6:g}: routes across tasks "
            "would mix clocks"
        )


def check_distributed(scenario: Scenario, cells: Sequence[Cell]) -> None:
    """What ``run`` refuses for ``generator.engine: spark`` before anything starts."""
    generator = scenario.generator
    if not generator.distributed:
        return
    if generator.layout == "split":
        raise ScenarioError(
            "generator.layout split puts publishers and subscribers in different Spark tasks "
            "(two clocks per latency); use auto or shared with engine spark"
        )
    for cell in cells:
        workers = worker_count(generator.executors, cell.connections, 1)
        topology = build_topology(cell, "check", scenario.seed)
        plans = build_worker_plans(
            cell,
            topology,
            cell_dir="",
            transport="",
            host=scenario.broker.host,
            port=0,
            workers=workers,
            connect_timeout_s=generator.connect_timeout,
            spin_ns=0,
            late_threshold_ns=0,
        )
        crossing = cross_task_routes(topology.routes, plans)
        check_cross_task(scenario, cell, crossing, pair_count(topology.routes))


def pair_count(routes: Sequence[Route]) -> int:
    """Publisher-subscriber pairs the routes connect."""
    total = 0
    for route in routes:
        pubs, subs = route.pubs[1] - route.pubs[0], route.subs[1] - route.subs[0]
        total += pubs if route.kind == "pairs" else pubs * subs
    return total
