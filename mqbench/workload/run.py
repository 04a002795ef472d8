"""Run a whole scenario: result folder, manifest, and per cell broker -> load -> records."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mqbench.brokers.base import HasResourceSource, RunningBroker, StartRequest
from mqbench.brokers.native_profiles import check_native_profile
from mqbench.brokers.profiles import profile_names
from mqbench.brokers.runtimes import get_runtime
from mqbench.brokers.sampler import ResourceSampler
from mqbench.brokers.targets import get_target
from mqbench.errors import BrokerError, MqbenchError, ScenarioError
from mqbench.faults.driver import FaultDriver
from mqbench.records.manifest import Manifest
from mqbench.records.results import check_output_root, create_result_dir
from mqbench.scenario.matrix import Cell, expand
from mqbench.scenario.model import Faults, Scenario
from mqbench.transports.registry import get_transport, resolve_client
from mqbench.transports.topics import is_filter
from mqbench.workload.coordinator import Coordinator, LoadOutcome, Progress
from mqbench.workload.events import EventLog
from mqbench.workload.plan import build_plans, process_count, resolve_layout, worker_count
from mqbench.workload.search import SearchTracker
from mqbench.workload.selfcheck import generator_verdict
from mqbench.workload.topology import build_topology, fault_targets


class RunReporter(Protocol):
    """What the CLI shows while a run goes on (implemented with Rich in ``cli``)."""

    def run_started(self, result_dir: Path, cells: list[Cell]) -> None:
        """The result folder exists and cells are about to run."""

    def cell_started(self, cell: Cell) -> None:
        """A cell begins (broker start)."""

    def phase(self, cell: Cell, text: str) -> None:
        """A short status line: starting broker, connecting, ..."""

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Live counters, a few times a second."""

    def cell_finished(self, cell: Cell, status: str, detail: dict[str, Any]) -> None:
        """A cell ended: completed, failed or interrupted."""


@dataclass
class RunResult:
    """Where the results are and how the run ended."""

    result_dir: Path
    status: str
    cells: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed_cells(self) -> list[dict[str, Any]]:
        """Cells that did not complete."""
        return [c for c in self.cells if c["status"] == "failed"]


class RunInterrupted(MqbenchError):
    """The user pressed Ctrl-C; records so far are flushed and the manifest says so."""

    exit_code = 130


def preflight(scenario: Scenario, cells: list[Cell], out_root: Path) -> None:
    """Reject what cannot run before anything is created or started."""
    check_output_root(out_root)
    check_combinations(scenario, cells)
    runtime = get_runtime(scenario.runtime)
    for target_name in scenario.targets:
        availability = runtime.availability(target_name)
        if not availability.available:
            raise BrokerError(f"target {target_name!r}: {availability.reason}")
    if scenario.faults is not None:
        check_faults(scenario.faults)


def check_faults(faults: Faults) -> None:
    """The toxic is known and valid, and a configured Toxiproxy answers (bounded wait)."""
    from mqbench.faults.client import ToxiproxyClient
    from mqbench.faults.toxics import DOWNSTREAM, validate_toxic

    validate_toxic(faults.type, dict(faults.attributes), stream=DOWNSTREAM)
    if faults.proxy != "builtin":
        ToxiproxyClient(faults.proxy).check()


def check_combinations(scenario: Scenario, cells: list[Cell]) -> None:
    """Reject impossible combinations (QoS, clients, topologies, shards) with the reason."""
    for target_name in scenario.targets:
        target = get_target(target_name)
        for client in scenario.client:
            name = resolve_client(target.transport, client)
            transport = get_transport(name)
            for qos in scenario.workload.qos:
                if qos > transport.max_qos:
                    raise ScenarioError(
                        f"target {target_name!r}: QoS {qos} is not supported by the "
                        f"{name} client (max QoS {transport.max_qos})"
                    )
            if scenario.workload.is_persistent and target.transport != "mqtt":
                raise ScenarioError(
                    f"target {target_name!r}: persistent sessions are an MQTT feature; "
                    f"{target.transport} has no equivalent here (set workload.persistent: false)"
                )
    known_profiles = profile_names()
    for profile in scenario.resources:
        if profile is not None and profile not in known_profiles:
            raise ScenarioError(
                f"unknown resources profile {profile!r} (known: {', '.join(known_profiles)})"
            )
        if profile is not None and scenario.runtime == "native":
            # More CPUs than the machine has, or no cgroup write access: refused here,
            # before a result folder exists or a broker starts.
            check_native_profile(profile)
    cpus = os.cpu_count() or 1
    for cell in cells:
        worker_count(scenario.generator.workers, cell.connections, cpus)
        topology = build_topology(cell, "check", scenario.seed)
        if scenario.faults is not None:
            fault_targets(topology, scenario.faults.target)
        protocol = get_target(cell.target).transport
        if protocol == "redis" and any(is_filter(s.topic_filter) for s in topology.subscribers):
            raise ScenarioError(
                f"target {cell.target!r}: topology {cell.topology!r} subscribes with wildcard "
                "filters, which the redis client does not support (exact channels only)"
            )


def run_scenario(
    scenario: Scenario,
    *,
    scenario_file: str,
    scenario_data: dict[str, Any],
    out_root: Path,
    argv: list[str],
    reporter: RunReporter,
    only: Callable[[Cell], bool] | None = None,
    manifest_extra: dict[str, Any] | None = None,
) -> RunResult:
    """Run every cell of ``scenario``; raise ``RunInterrupted`` on Ctrl-C (after saving).

    ``manifest_extra`` adds top-level manifest entries decided before the run (e.g. the
    ``calibration`` the CLI checked the cells against).
    """
    cells = [c for c in expand(scenario) if only is None or only(c)]
    if not cells:
        raise ScenarioError(f"{scenario_file}: no cell matches the selection")
    preflight(scenario, cells, out_root)
    result_dir = create_result_dir(out_root, scenario.name)
    manifest = Manifest(result_dir, scenario.model_dump(mode="json"), scenario_file, argv)
    manifest.data["scenario_input"] = scenario_data
    manifest.data.update(manifest_extra or {})
    manifest.save()
    reporter.run_started(result_dir, cells)
    run_tag = secrets.token_hex(3)
    search = SearchTracker(scenario.search) if scenario.search is not None else None
    try:
        for cell in cells:
            if search is not None and search.should_skip(cell):
                manifest.add_cell(
                    {
                        "id": cell.id,
                        "index": cell.index,
                        "repeat": cell.repeat,
                        "status": "skipped",
                        "error": None,
                        "params": cell.params(),
                        "skip_reason": search.skip_reason(cell),
                    }
                )
                continue
            _run_cell(scenario, cell, result_dir, manifest, reporter, run_tag)
            if search is not None:
                search.observe(cell, manifest.cell(cell.id), result_dir / "cells" / cell.id)
                manifest.data["search"] = search.report()
                manifest.save()
    except KeyboardInterrupt:
        manifest.finish("interrupted", "interrupted by the user (Ctrl-C)")
        raise RunInterrupted(f"interrupted; records so far are flushed in {result_dir}") from None
    except RunInterrupted:
        manifest.finish("interrupted", "interrupted by the user (Ctrl-C)")
        raise
    except BaseException as exc:
        manifest.finish("failed", f"{type(exc).__name__}: {exc}")
        raise
    statuses = [c["status"] for c in manifest.data["cells"] if c["status"] != "skipped"]
    status = "completed" if any(s == "completed" for s in statuses) else "failed"
    errors = [c["error"] for c in manifest.data["cells"] if c.get("error")]
    manifest.finish(status, errors[0] if status == "failed" and errors else None)
    return RunResult(result_dir, status, list(manifest.data["cells"]))


def _run_cell(
    scenario: Scenario,
    cell: Cell,
    result_dir: Path,
    manifest: Manifest,
    reporter: RunReporter,
    run_tag: str,
) -> None:
    target = get_target(cell.target)
    client = resolve_client(target.transport, cell.client)
    cell_dir = result_dir / "cells" / cell.id
    cell_dir.mkdir(parents=True)
    workers = worker_count(scenario.generator.workers, cell.connections, os.cpu_count() or 1)
    layout = resolve_layout(scenario.generator.layout, cell)
    topology = build_topology(cell, run_tag, scenario.seed)
    params = {
        **cell.params(),
        "protocol": target.transport,
        "transport": client,
        "runtime": scenario.runtime,
        "workers": process_count(
            layout, workers, len(topology.publishers), len(topology.subscribers)
        ),
        "layout": layout,
        "faults": scenario.faults.type if scenario.faults else None,
    }
    manifest.add_cell(
        {
            "id": cell.id,
            "index": cell.index,
            "repeat": cell.repeat,
            "status": "running",
            "error": None,
            "params": params,
            "offered_rate": cell.offered_rate,
            "publishers": cell.publishers,
            "subscribers": cell.subscribers,
            "expected_delivery_rate": cell.expected_delivery_rate,
            "routes": topology.routes,
        }
    )
    reporter.cell_started(cell)
    events = EventLog(cell_dir / "events.jsonl")
    sampler = ResourceSampler(cell_dir / "resources.csv")
    broker: RunningBroker | None = None
    faults: FaultDriver | None = None
    try:
        reporter.phase(cell, f"starting {cell.target} ({scenario.runtime})")
        broker = get_runtime(scenario.runtime).start(
            StartRequest(
                target=cell.target,
                workdir=cell_dir / "broker",
                host=scenario.broker.host,
                port=scenario.broker.port,
                options=_broker_options(scenario, cell),
                startup_timeout_s=scenario.broker.startup_timeout,
            )
        )
        events.write("broker_started", **broker.info)
        manifest.update_cell(cell.id, broker=broker.info)
        if broker.pids:
            sampler.add_role("broker", broker.pids)
        if isinstance(broker, HasResourceSource) and (source := broker.resource_source()):
            sampler.add_source(source)
        sampler.start()
        proxy_port = 0
        proxied: dict[str, list[int]] | None = None
        if scenario.faults is not None:
            proxied = fault_targets(topology, scenario.faults.target)
            faults = FaultDriver(
                scenario.faults,
                seed=scenario.seed,
                cell_index=cell.index,
                events=events.write,
                affected=proxied,
            )
            reporter.phase(cell, f"starting fault proxy ({scenario.faults.proxy})")
            proxy_port = faults.start(broker.endpoint.host, broker.endpoint.port)
        reporter.phase(cell, f"connecting {cell.connections} clients")
        plans = build_plans(
            cell,
            topology,
            cell_dir=str(cell_dir),
            transport=client,
            host=broker.endpoint.host,
            port=broker.endpoint.port,
            workers=workers,
            connect_timeout_s=scenario.generator.connect_timeout,
            spin_ns=int(scenario.generator.spin_ms * 1e6),
            late_threshold_ns=int(scenario.generator.max_send_lag_ms * 1e6),
            proxy_port=proxy_port,
            proxied=proxied,
            reconnect_max_s=scenario.generator.reconnect_max,
            timer=scenario.generator.timer,
            layout=layout,
        )
        driver = faults
        coordinator = Coordinator(
            plans,
            events=events,
            offered_rate=cell.offered_rate,
            connections=cell.connections,
            warmup_s=cell.warmup_s,
            duration_s=cell.duration_s,
            drain_s=cell.drain_s,
            connect_timeout_s=scenario.generator.connect_timeout,
            connect_rate=cell.connect_rate,
            expected_per_sent=cell.expected_delivery_rate / cell.offered_rate,
            on_progress=lambda p: reporter.progress(cell, p),
            on_workers=lambda pids: sampler.add_role("generator", pids),
            on_start=(
                (lambda start_ns: driver.begin(start_ns, cell.warmup_s, cell.duration_s))
                if driver is not None
                else None
            ),
        )
        outcome = coordinator.run()
        _record_outcome(scenario, cell, manifest, outcome)
        status = "interrupted" if outcome.interrupted else "completed"
        manifest.update_cell(cell.id, status=status)
        reporter.cell_finished(cell, status, manifest.cell(cell.id))
        if outcome.interrupted:
            raise RunInterrupted(f"interrupted during cell {cell.id}")
    except MqbenchError as exc:
        if isinstance(exc, RunInterrupted):
            raise
        events.write("error", message=str(exc))
        manifest.update_cell(cell.id, status="failed", error=str(exc))
        reporter.cell_finished(cell, "failed", manifest.cell(cell.id))
    except KeyboardInterrupt:
        manifest.update_cell(cell.id, status="interrupted", error="interrupted by the user")
        raise
    finally:
        if faults is not None:
            faults.stop(save_log_to=cell_dir / "proxy_events.json")
        sampler.stop()
        if broker is not None:
            broker.stop()
            events.write("broker_stopped")
        events.close()


def _broker_options(scenario: Scenario, cell: Cell) -> dict[str, Any]:
    options: dict[str, Any] = {k: v for k, v in cell.broker_options if k != "label"}
    if scenario.broker.pid:
        options["pid"] = scenario.broker.pid
    if cell.resources:
        options["resources"] = cell.resources
    return options


def _record_outcome(
    scenario: Scenario, cell: Cell, manifest: Manifest, outcome: LoadOutcome
) -> None:
    warmup_ns = int(cell.warmup_s * 1e9)
    end_ns = outcome.start_ns + warmup_ns + int(cell.duration_s * 1e9)
    if outcome.interrupted:
        end_ns = min(end_ns, outcome.stopped_ns)
    window = {
        "start_ns": max(outcome.connected_ns, outcome.start_ns + warmup_ns),
        "end_ns": end_ns,
        "connected_ns": outcome.connected_ns,
    }
    verdict = generator_verdict(
        outcome.workers,
        late_threshold_ms=scenario.generator.max_send_lag_ms,
    )
    manifest.update_cell(
        cell.id,
        schedule={
            "kind": "interleaved",
            "start_ns": outcome.start_ns,
            "rate": cell.rate,
            "publishers": cell.publishers,
            "messages_per_publisher": cell.messages_per_publisher,
        },
        window=window,
        generator=verdict,
        totals={"sent": outcome.sent, "received": outcome.received},
        finished_ns=time.time_ns(),
    )
