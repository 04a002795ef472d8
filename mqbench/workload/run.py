"""Run a whole scenario: result folder, manifest, and per cell broker -> load -> records."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mqbench import interrupts
from mqbench.brokers.base import HasResourceSource, RunningBroker, StartRequest
from mqbench.brokers.liveness import BrokerExit, WatchesExit
from mqbench.brokers.native_profiles import check_native_profile
from mqbench.brokers.profiles import profile_names
from mqbench.brokers.runtimes import get_runtime
from mqbench.brokers.sampler import ResourceSampler
from mqbench.brokers.targets import get_target
from mqbench.errors import BrokerError, MqbenchError, ResultsWriteError, ScenarioError
from mqbench.faults.driver import FaultDriver
from mqbench.records.manifest import Manifest
from mqbench.records.results import SpaceReserve, check_output_root, create_result_dir
from mqbench.scenario.matrix import Cell, expand
from mqbench.scenario.model import Faults, Scenario
from mqbench.transports.registry import get_transport, resolve_client
from mqbench.wire.topics import is_filter
from mqbench.workload.capacity import (
    RESERVE_BYTES,
    check_disk_space,
    check_fits,
    pending_bound,
)
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

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """The broker exited on its own during the cell (called from a watcher thread)."""


class SilentReporter:
    """A ``RunReporter`` that shows nothing (benchmarks, tests, calibration)."""

    def run_started(self, result_dir: Path, cells: list[Cell]) -> None:
        """Nothing to show."""

    def cell_started(self, cell: Cell) -> None:
        """Nothing to show."""

    def phase(self, cell: Cell, text: str) -> None:
        """Nothing to show."""

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Nothing to show."""

    def cell_finished(self, cell: Cell, status: str, detail: dict[str, Any]) -> None:
        """Nothing to show (the outcome is in the result)."""

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """Nothing to show (the manifest records it)."""


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

    @property
    def broker_exits(self) -> list[dict[str, Any]]:
        """Cells whose broker exited on its own (their results are invalid)."""
        return [c for c in self.cells if c.get("broker_exit")]


class RunInterrupted(MqbenchError):
    """SIGINT or SIGTERM stopped the run; records so far are flushed, the manifest says so.

    The exit code follows the shell convention: 130 for SIGINT, 143 for SIGTERM.
    """

    exit_code = 130

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = interrupts.exit_code_for(signum)


def _stop_signal(exc: BaseException | None = None) -> int:
    """The signal that stopped the run: the exception's, else the controller's, else SIGINT."""
    signum = getattr(exc, "signum", None)
    if signum is None:
        stop = interrupts.active()
        signum = stop.signum if stop is not None else None
    return int(signum) if signum is not None else int(signal.SIGINT)


def _signal_text(signum: int) -> str:
    if signum == signal.SIGINT:
        return "SIGINT (Ctrl-C)"
    return signal.Signals(signum).name


def check_load(scenario: Scenario, cells: list[Cell]) -> None:
    """What ``scenario validate``, ``run --dry-run`` and ``run`` all check up front:
    possible combinations and load that fits the machine (``capacity.check_fits``)."""
    check_fits(scenario, cells)  # first: it is cheap, the topologies below are not
    check_combinations(scenario, cells)


def preflight(scenario: Scenario, cells: list[Cell], out_root: Path) -> None:
    """Reject what cannot run before anything is created or started."""
    check_output_root(out_root)
    check_load(scenario, cells)
    check_disk_space(cells, out_root)
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
            capabilities = transport.capabilities
            for qos in scenario.workload.qos:
                if qos > capabilities.max_qos:
                    raise ScenarioError(
                        f"target {target_name!r}: QoS {qos} is not supported by the "
                        f"{name} client (max QoS {capabilities.max_qos})"
                    )
            if scenario.workload.is_persistent and not capabilities.persistent_sessions:
                raise ScenarioError(
                    f"target {target_name!r}: persistent sessions are an MQTT feature; the "
                    f"{name} client has no equivalent (set workload.persistent: false)"
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
        name = resolve_client(get_target(cell.target).transport, cell.client)
        wildcards = get_transport(name).capabilities.wildcard_filters
        if not wildcards and any(is_filter(s.topic_filter) for s in topology.subscribers):
            raise ScenarioError(
                f"target {cell.target!r}: topology {cell.topology!r} subscribes with wildcard "
                f"filters, which the {name} client does not support (exact topics only)"
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
    with interrupts.StopSignals():
        return _run_cells(
            scenario, cells, scenario_file, scenario_data, out_root, argv, reporter, manifest_extra
        )


def _run_cells(
    scenario: Scenario,
    cells: list[Cell],
    scenario_file: str,
    scenario_data: dict[str, Any],
    out_root: Path,
    argv: list[str],
    reporter: RunReporter,
    manifest_extra: dict[str, Any] | None,
) -> RunResult:
    # The folder, its space reserve and its first manifest appear together; a signal in
    # between is raised inside the ``try`` below, which finishes the manifest.
    with interrupts.deferred(raise_at_end=False):
        result_dir = create_result_dir(out_root, scenario.name)
        reserve = SpaceReserve(result_dir, RESERVE_BYTES)
        manifest = Manifest(result_dir, scenario.model_dump(mode="json"), scenario_file, argv)
        manifest.data["scenario_input"] = scenario_data
        manifest.data.update(manifest_extra or {})
        manifest.save()
    run_tag = secrets.token_hex(3)
    search = SearchTracker(scenario.search) if scenario.search is not None else None
    try:
        interrupts.raise_pending()
        reporter.run_started(result_dir, cells)
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
    except (KeyboardInterrupt, RunInterrupted) as exc:
        signum = _stop_signal(exc)
        manifest.finish("interrupted", f"interrupted by {_signal_text(signum)}")
        reserve.release()
        raise RunInterrupted(
            f"interrupted by {_signal_text(signum)}; records so far are flushed in {result_dir}",
            signum,
        ) from None
    except ResultsWriteError as exc:
        reserve.release()  # room for the last manifest
        with contextlib.suppress(ResultsWriteError):
            manifest.finish("failed", str(exc))
        raise
    except BaseException as exc:
        with contextlib.suppress(ResultsWriteError):
            manifest.finish("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        reserve.release()
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
    try:
        cell_dir.mkdir(parents=True)
    except OSError as exc:
        raise ResultsWriteError(
            f"cannot create {cell_dir}: {exc.strerror or exc}", path=str(cell_dir), errno=exc.errno
        ) from None
    workers = worker_count(scenario.generator.workers, cell.connections, os.cpu_count() or 1)
    layout = resolve_layout(scenario.generator.layout, cell)
    topology = build_topology(cell, run_tag, scenario.seed)
    proxied_by_design: dict[str, list[int]] = {}
    if scenario.faults is not None:
        proxied_by_design = fault_targets(topology, scenario.faults.target)
    send_failures_expected = bool(proxied_by_design.get("publishers")) or (
        cell.churn is not None and cell.churn.who == "publishers"
    )
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
            "send_failures_expected": send_failures_expected,
        }
    )
    reporter.cell_started(cell)
    events = EventLog(cell_dir / "events.jsonl")
    sampler = ResourceSampler(cell_dir / "resources.csv")
    broker: RunningBroker | None = None
    faults: FaultDriver | None = None

    def on_broker_exit(exit: BrokerExit) -> None:
        details = exit.to_dict()
        events.write("broker_exited", **details)
        sampler.forget(exit.pid)
        with contextlib.suppress(MqbenchError):
            manifest.update_cell(cell.id, broker_exit=details)
        reporter.broker_exited(cell, exit)

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
        if isinstance(broker, WatchesExit):
            broker.watch_exit(on_broker_exit)
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
            client_extra={"max_pending_bytes": pending_bound(scenario, cell)},
        )
        driver = faults

        def on_start(start_ns: int) -> None:
            # The schedule and the planned window are known now: store them before a single
            # message goes out, so an interrupted or killed run can always be analysed.
            manifest.update_cell(
                cell.id,
                schedule=_schedule(cell, start_ns),
                window=_planned_window(cell, start_ns, start_ns),
            )
            if driver is not None:
                driver.begin(start_ns, cell.warmup_s, cell.duration_s)

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
            on_start=on_start,
        )
        outcome = coordinator.run()
        _record_outcome(scenario, cell, manifest, outcome)
        status = "interrupted" if outcome.interrupted else "completed"
        manifest.update_cell(cell.id, status=status)
        reporter.cell_finished(cell, status, manifest.cell(cell.id))
        if outcome.interrupted:
            raise RunInterrupted(f"interrupted during cell {cell.id}", _stop_signal())
    except MqbenchError as exc:
        if isinstance(exc, RunInterrupted):
            raise
        events.write("error", message=str(exc))
        with contextlib.suppress(ResultsWriteError):
            manifest.update_cell(cell.id, status="failed", error=str(exc))
        reporter.cell_finished(cell, "failed", manifest.cell(cell.id))
        if isinstance(exc, ResultsWriteError):
            raise  # results cannot be written: stop the whole run
    except KeyboardInterrupt as exc:
        signum = _stop_signal(exc)
        events.write("interrupted", signal=signal.Signals(signum).name)
        manifest.update_cell(
            cell.id, status="interrupted", error=f"interrupted by {_signal_text(signum)}"
        )
        raise
    finally:
        _teardown(cell_dir, events, sampler, faults, broker)


def _teardown(
    cell_dir: Path,
    events: EventLog,
    sampler: ResourceSampler,
    faults: FaultDriver | None,
    broker: RunningBroker | None,
) -> None:
    """Stop what the cell started; after a second signal, kill the broker instead of waiting."""
    if faults is not None:
        faults.stop(save_log_to=cell_dir / "proxy_events.json")
    sampler.stop()
    if broker is not None:
        stop = interrupts.active()
        pids = list(broker.pids)

        def kill_broker() -> None:
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

        remove = stop.on_hurry(kill_broker) if stop is not None else None
        try:
            broker.stop()
        finally:
            if remove is not None:
                remove()
        events.write("broker_stopped")
    events.close()


def _broker_options(scenario: Scenario, cell: Cell) -> dict[str, Any]:
    options: dict[str, Any] = {k: v for k, v in cell.broker_options if k != "label"}
    if scenario.broker.pid:
        options["pid"] = scenario.broker.pid
    if cell.resources:
        options["resources"] = cell.resources
    return options


def _schedule(cell: Cell, start_ns: int) -> dict[str, Any]:
    return {
        "kind": "interleaved",
        "start_ns": start_ns,
        "rate": cell.rate,
        "publishers": cell.publishers,
        "messages_per_publisher": cell.messages_per_publisher,
    }


def _planned_window(cell: Cell, start_ns: int, connected_ns: int) -> dict[str, Any]:
    warmup_ns = int(cell.warmup_s * 1e9)
    return {
        "start_ns": max(connected_ns, start_ns + warmup_ns),
        "end_ns": start_ns + warmup_ns + int(cell.duration_s * 1e9),
        "connected_ns": connected_ns,
    }


def _record_outcome(
    scenario: Scenario, cell: Cell, manifest: Manifest, outcome: LoadOutcome
) -> None:
    window = _planned_window(cell, outcome.start_ns, outcome.connected_ns)
    if outcome.interrupted:
        window["end_ns"] = min(window["end_ns"], outcome.stopped_ns)
    verdict = generator_verdict(
        outcome.workers,
        late_threshold_ms=scenario.generator.max_send_lag_ms,
    )
    manifest.update_cell(
        cell.id,
        schedule=_schedule(cell, outcome.start_ns),
        window=window,
        generator=verdict,
        totals={"sent": outcome.sent, "received": outcome.received},
        finished_ns=time.time_ns(),
    )
