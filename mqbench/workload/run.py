"""Run a whole scenario: result folder, manifest, and per cell broker -> load -> records."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

from mqbench.brokers.base import HasFaultProxy, HasResourceSource, RunningBroker, StartRequest
from mqbench.brokers.registry import get_target
from mqbench.brokers.resources.sampler import ResourceSampler
from mqbench.brokers.runtime.liveness import BrokerExit, WatchesExit
from mqbench.brokers.runtime.registry import get_runtime
from mqbench.errors import (
    BrokerError,
    LoadTaskLost,
    MqbenchError,
    ResultsWriteError,
    ScenarioError,
)
from mqbench.faults.driver import FaultDriver, ProxySite
from mqbench.process import interrupts
from mqbench.records.cell_entry import (
    BrokerExitEntry,
    CellEntry,
    CellStatus,
    Route,
    Schedule,
    Totals,
    Window,
)
from mqbench.records.events import EventKind, EventLog
from mqbench.records.hadoop_fs import HadoopFs, RemoteRoot, RunPublisher
from mqbench.records.manifest import Manifest
from mqbench.records.results import SpaceReserve, create_result_dir
from mqbench.records.run_manifest import run_failure
from mqbench.records.timing import ReceiveStamp, TimingEntry
from mqbench.scenario.matrix import Cell, broker_options, expand
from mqbench.scenario.model import Faults, Scenario
from mqbench.scenario.security import redact, redact_argv
from mqbench.transports.registry import resolve_client
from mqbench.workload.capacity import RESERVE_BYTES, pending_bound
from mqbench.workload.cell_timing import RunTiming, TimingHints
from mqbench.workload.coordinator import Coordinator, LoadOutcome, Progress
from mqbench.workload.distributed import (
    check_cross_task,
    cross_task_routes,
    pair_count,
    staging_parent,
)
from mqbench.workload.plan import (
    WorkerPlan,
    build_worker_plans,
    cell_shards,
    process_count,
)
from mqbench.workload.preflight import preflight
from mqbench.workload.search import Evaluate, SearchTracker
from mqbench.workload.security import RunSecurity, open_run_security
from mqbench.workload.selfcheck import generator_verdict
from mqbench.workload.spark_engine import SparkStage, spark_context, spark_running, stop_spark
from mqbench.workload.topology import build_topology, fault_targets


class RunReporter(Protocol):
    """What the CLI shows while a run goes on (implemented with Rich in ``cli``)."""

    def run_started(self, result_dir: Path | RemoteRoot, cells: list[Cell]) -> None:
        """The result folder exists (on the output URI when there is one) and cells are
        about to run."""

    def cell_started(self, cell: Cell) -> None:
        """A cell begins (broker start)."""

    def phase(self, cell: Cell, text: str) -> None:
        """A short status line: starting broker, connecting, ..."""

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Live counters, a few times a second."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        """A cell ended: completed, failed or interrupted (``detail``: its manifest entry)."""

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """The broker exited on its own during the cell (called from a watcher thread)."""


class SilentReporter:
    """A ``RunReporter`` that shows nothing (benchmarks, tests, calibration)."""

    def run_started(self, result_dir: Path | RemoteRoot, cells: list[Cell]) -> None:
        """Nothing to show."""

    def cell_started(self, cell: Cell) -> None:
        """Nothing to show."""

    def phase(self, cell: Cell, text: str) -> None:
        """Nothing to show."""

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Nothing to show."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        """Nothing to show (the outcome is in the result)."""

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """Nothing to show (the manifest records it)."""


@dataclass
class RunResult:
    """Where the results are and how the run ended."""

    result_dir: Path
    """The run folder on this machine (the local staging copy when ``published``)."""
    status: str
    cells: list[CellEntry] = field(default_factory=list)
    published: RemoteRoot | None = None
    """The run folder on the output URI (``--out URI``), or None for a local ``--out``."""
    staging: Path | None = None
    """The private local folder ``result_dir`` lives in when published; the caller removes
    it (``discard_staging``) once it has analysed and published the outputs."""

    @property
    def location(self) -> str:
        """Where the results are, as the user gave the output (URI or path)."""
        return str(self.published) if self.published is not None else str(self.result_dir)

    @property
    def failed_cells(self) -> list[CellEntry]:
        """Cells that did not complete."""
        return [c for c in self.cells if c.status == "failed"]

    @property
    def broker_exits(self) -> list[CellEntry]:
        """Cells whose broker exited on its own (their results are invalid)."""
        return [c for c in self.cells if c.broker_exit is not None]

    def failure(self) -> MqbenchError | None:
        """Why the run as a whole failed (cells that failed, brokers that died), or None:
        the manifest's ``failed`` status and mqbench's exit code 1 come from the same
        :func:`run_failure`."""
        reason = run_failure(self.cells)
        return None if reason is None else MqbenchError(reason)


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


def run_scenario(
    scenario: Scenario,
    *,
    scenario_file: str,
    scenario_data: dict[str, Any],
    out_root: Path | RemoteRoot,
    argv: list[str],
    reporter: RunReporter,
    only: Callable[[Cell], bool] | None = None,
    calibration: Mapping[str, Any] | None = None,
    evaluate: Evaluate | None = None,
    timing: TimingHints | None = None,
) -> RunResult:
    """Run every cell of ``scenario``; raise ``RunInterrupted`` on Ctrl-C (after saving).

    Nothing is created or started before :func:`workload.preflight.preflight` passes.
    ``calibration`` is the manifest's record of the calibration the CLI checked the cells
    against. ``evaluate`` summarises a finished
    step of a saturation search (``workload.search``); a scenario with a ``search`` needs
    one. ``timing``: the calibration's wake-up floors and ceilings (``workload.cell_timing``).
    """
    cells = [c for c in expand(scenario) if only is None or only(c)]
    if not cells:
        raise ScenarioError(f"{scenario_file}: no cell matches the selection")
    preflight(scenario, cells, out_root, source=scenario_file)
    run_timing = RunTiming(scenario, timing or TimingHints())
    run_timing.check(cells)
    search: SearchTracker | None = None
    if scenario.search is not None:
        if evaluate is None:
            raise ScenarioError(f"{scenario_file}: a saturation search needs an evaluation")
        search = SearchTracker(scenario.search, evaluate)
    spark_was_running = scenario.generator.engine == "spark" and spark_running()
    output: _Output | None = None
    security = open_run_security(scenario)
    try:
        local_root = out_root
        if isinstance(out_root, RemoteRoot):
            output = _Output(out_root, scenario)  # starts Spark: the refusal comes first
            local_root = output.local
        assert isinstance(local_root, Path)
        with interrupts.StopSignals():
            result = _run_cells(
                scenario,
                cells,
                scenario_file,
                scenario_data,
                local_root,
                argv,
                reporter,
                calibration,
                search,
                security,
                run_timing,
                output,
            )
    except BaseException:
        if output is not None:
            discard_staging(output.local)
        raise
    finally:
        security.close()
        if scenario.generator.engine == "spark" and not spark_was_running:
            stop_spark()
    if output is not None:
        result.published, result.staging = output.folder, output.local
    return result


class _Output:
    """A run folder built in a private local folder and published to a URI."""

    def __init__(self, root: RemoteRoot, scenario: Scenario) -> None:
        generator = scenario.generator
        sc = spark_context(generator.master or "", generator.spark_conf, scenario.broker.host)
        self.fs = HadoopFs(sc, root)
        self.root = root
        self.local = Path(tempfile.mkdtemp(prefix="mqbench-run-", dir=staging_parent()))
        self.folder: RemoteRoot | None = None
        self._publisher: RunPublisher | None = None

    def reserve(self, result_dir: Path) -> RemoteRoot:
        """Create the run folder on the URI (refused when it exists): the reservation."""
        folder = self.root.child(*result_dir.relative_to(self.local).parts)
        self.fs.reserve(folder)
        self.folder = folder
        self._publisher = RunPublisher(self.fs, folder, frozenset({SpaceReserve.NAME}))
        return folder

    def publish(self, result_dir: Path) -> None:
        """Copy what changed to the URI, the manifest last."""
        if self._publisher is not None:
            self._publisher.publish(result_dir)


def discard_staging(staging: Path) -> None:
    """Remove a published run's private local folder."""
    shutil.rmtree(staging, ignore_errors=True)


def _run_cells(
    scenario: Scenario,
    cells: list[Cell],
    scenario_file: str,
    scenario_data: dict[str, Any],
    out_root: Path,
    argv: list[str],
    reporter: RunReporter,
    calibration: Mapping[str, Any] | None,
    search: SearchTracker | None,
    security: RunSecurity,
    run_timing: RunTiming,
    output: _Output | None = None,
) -> RunResult:
    # The folder, its space reserve and its first manifest appear together; a signal in
    # between is raised inside the ``try`` below, which finishes the manifest.
    with interrupts.deferred(raise_at_end=False):
        result_dir = create_result_dir(out_root, scenario.name)
        shown: Path | RemoteRoot = result_dir
        if output is not None:
            shown = output.reserve(result_dir)
        reserve = SpaceReserve(result_dir, RESERVE_BYTES)
        manifest = Manifest(
            result_dir,
            redact(scenario.model_dump(mode="json")),
            scenario_file,
            redact_argv(argv),
            scenario_input=redact(scenario_data),
            security=security.describe(),
            calibration=calibration,
        )
        manifest.save()

    def publish() -> None:
        if output is not None:
            output.publish(result_dir)

    run_tag = secrets.token_hex(3)
    try:
        interrupts.raise_pending()
        reporter.run_started(shown, cells)
        for cell in cells:
            if search is not None and search.should_skip(cell):
                manifest.add_cell(
                    CellEntry(
                        id=cell.id,
                        index=cell.index,
                        repeat=cell.repeat,
                        status="skipped",
                        params=cell.params(),
                        skip_reason=search.skip_reason(cell),
                    )
                )
                continue
            _run_cell(scenario, cell, result_dir, manifest, reporter, run_tag, security, run_timing)
            if search is not None:
                search.observe(cell, manifest.cell(cell.id), result_dir / "cells" / cell.id)
                manifest.update(functools.partial(replace, search=search.report()))
            publish()
    except (KeyboardInterrupt, RunInterrupted) as exc:
        signum = _stop_signal(exc)
        manifest.finish("interrupted", f"interrupted by {_signal_text(signum)}")
        reserve.release()
        publish()
        raise RunInterrupted(
            f"interrupted by {_signal_text(signum)}; records so far are flushed in {shown}",
            signum,
        ) from None
    except LoadTaskLost as exc:
        manifest.finish("interrupted", str(exc))
        reserve.release()
        publish()
        raise LoadTaskLost(f"{exc}; results in {shown}", exc.task) from None
    except ResultsWriteError as exc:
        reserve.release()  # room for the last manifest
        with contextlib.suppress(ResultsWriteError):
            manifest.finish("failed", str(exc))
            publish()
        raise
    except BaseException as exc:
        with contextlib.suppress(ResultsWriteError):
            manifest.finish("failed", f"{type(exc).__name__}: {exc}")
            publish()
        raise
    finally:
        reserve.release()
    entries = manifest.cells
    failure = run_failure(entries)
    manifest.finish("failed" if failure else "completed", failure)
    publish()
    return RunResult(result_dir, manifest.run.status, entries)


def _run_cell(
    scenario: Scenario,
    cell: Cell,
    result_dir: Path,
    manifest: Manifest,
    reporter: RunReporter,
    run_tag: str,
    security: RunSecurity,
    run_timing: RunTiming,
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
    distributed = scenario.generator.engine == "spark"
    workers, layout = cell_shards(scenario.generator, cell, os.cpu_count() or 1)
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
        CellEntry(
            id=cell.id,
            index=cell.index,
            repeat=cell.repeat,
            status="running",
            params=params,
            offered_rate=cell.offered_rate,
            publishers=cell.publishers,
            subscribers=cell.subscribers,
            expected_delivery_rate=cell.expected_delivery_rate,
            routes=tuple(topology.routes),
            send_failures_expected=send_failures_expected,
        )
    )
    reporter.cell_started(cell)
    events = EventLog(cell_dir / "events.jsonl")
    sampler = ResourceSampler(cell_dir / "resources.csv")
    broker: RunningBroker | None = None
    faults: FaultDriver | None = None

    def on_broker_exit(exit: BrokerExit) -> None:
        details = exit.to_dict()
        events.write(EventKind.BROKER_EXITED, **details)
        sampler.forget(exit.pid)
        entry = BrokerExitEntry.from_dict(cell.id, details)
        with contextlib.suppress(MqbenchError):
            manifest.update_cell(cell.id, lambda c: replace(c, broker_exit=entry))
        reporter.broker_exited(cell, exit)

    try:
        reporter.phase(cell, f"starting {cell.target} ({scenario.runtime})")
        broker = get_runtime(scenario.runtime).start(
            StartRequest(
                target=cell.target,
                workdir=cell_dir / "broker",
                host=scenario.broker.host,
                port=scenario.broker.port,
                options=broker_options(scenario, cell),
                startup_timeout_s=scenario.broker.startup_timeout,
                security=security.broker,
            )
        )
        events.write(EventKind.BROKER_STARTED, **broker.info)
        info = broker.info
        manifest.update_cell(cell.id, lambda c: replace(c, broker=info))
        if isinstance(broker, WatchesExit):
            broker.watch_exit(on_broker_exit)
        if broker.pids:
            sampler.add_role("broker", broker.pids)
        if isinstance(broker, HasResourceSource) and (source := broker.resource_source()):
            sampler.add_source(source)
        sampler.start()
        decision = run_timing.decide_cell(cell, broker)
        timing = decision.entry(run_timing.floor(decision), scenario.generator.receive_stamp)
        manifest.update_cell(cell.id, lambda c: replace(c, timing=timing))
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
            proxy_port = faults.start(
                broker.endpoint.host,
                broker.endpoint.port,
                listen_host=scenario.broker.host,
                site=_container_proxy(scenario.faults, broker),
            )
        reporter.phase(cell, f"connecting {cell.connections} clients")
        plans = build_worker_plans(
            cell,
            topology,
            cell_dir=str(cell_dir.resolve()),
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
            client_extra={
                "max_pending_bytes": pending_bound(scenario, cell),
                "receive_stamp": scenario.generator.receive_stamp,
            },
            security=security.client,
            realtime=decision.settings,
        )
        driver = faults
        stage: SparkStage | None = None
        if distributed:
            stage = _spark_stage(scenario, cell, topology.routes, plans)
            sampler.add_source(stage)  # every task samples itself and ships the samples

        def on_start(start_ns: int) -> None:
            # The schedule and the planned window are known now: store them before a single
            # message goes out, so an interrupted or killed run can always be analysed.
            schedule = _schedule(cell, start_ns)
            window = Window.planned(start_ns, start_ns, cell.warmup_s, cell.duration_s)
            manifest.update_cell(cell.id, lambda c: replace(c, schedule=schedule, window=window))
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
            on_workers=None
            if stage is not None
            else lambda pids: sampler.add_role("generator", pids),
            on_start=on_start,
            launcher=stage,
        )
        try:
            outcome = coordinator.run()
        finally:
            if stage is not None:
                _record_clocks(cell, manifest, events, stage)
        _record_outcome(scenario, cell, manifest, outcome, timing)
        status: CellStatus = "interrupted" if outcome.interrupted else "completed"
        entry = manifest.update_cell(cell.id, lambda c: replace(c, status=status))
        reporter.cell_finished(cell, status, entry)
        if outcome.interrupted:
            raise RunInterrupted(f"interrupted during cell {cell.id}", _stop_signal())
    except MqbenchError as exc:
        if isinstance(exc, RunInterrupted):
            raise
        events.write(EventKind.ERROR, message=str(exc))
        failure = str(exc)
        if isinstance(exc, LoadTaskLost):
            # Records so far stay; the cell ends like an interruption, with the reason.
            manifest.update_cell(cell.id, lambda c: replace(c, status="interrupted", error=failure))
            reporter.cell_finished(cell, "interrupted", manifest.cell(cell.id))
            raise
        with contextlib.suppress(ResultsWriteError):
            manifest.update_cell(cell.id, lambda c: replace(c, status="failed", error=failure))
        reporter.cell_finished(cell, "failed", manifest.cell(cell.id))
        if isinstance(exc, ResultsWriteError):
            raise  # results cannot be written: stop the whole run
    except KeyboardInterrupt as exc:
        signum = _stop_signal(exc)
        events.write(EventKind.INTERRUPTED, signal=signal.Signals(signum).name)
        error = f"interrupted by {_signal_text(signum)}"
        manifest.update_cell(cell.id, lambda c: replace(c, status="interrupted", error=error))
        raise
    finally:
        _teardown(cell_dir, events, sampler, faults, broker)


def _container_proxy(faults: Faults, broker: RunningBroker) -> ProxySite | None:
    """``faults.proxy: container``: the runtime's Toxiproxy container next to the broker."""
    if faults.proxy != "container":
        return None
    if not isinstance(broker, HasFaultProxy):
        raise BrokerError("faults.proxy 'container' needs a broker in Docker (runtime: docker)")
    proxy = broker.start_fault_proxy()
    return ProxySite(proxy.url, proxy.upstream, proxy.listen, proxy.port)


def _spark_stage(
    scenario: Scenario, cell: Cell, routes: list[Route], plans: list[WorkerPlan]
) -> SparkStage:
    """The launcher of a distributed cell (routes across tasks refused without a bound)."""
    generator = scenario.generator
    crossing = cross_task_routes(routes, plans)
    check_cross_task(scenario, cell, crossing, pair_count(routes))
    bound = generator.max_clock_error_ms
    assert generator.master is not None  # the model requires it with engine spark
    return SparkStage(
        master=generator.master,
        conf=dict(generator.spark_conf),
        bind_host=scenario.broker.host,
        max_clock_error_ns=None if bound is None else int(bound * 1e6),
        crossing_routes=crossing,
    )


def _record_clocks(cell: Cell, manifest: Manifest, events: EventLog, stage: SparkStage) -> None:
    """The tasks' clock offsets into the manifest; a warning when they drifted apart."""
    clocks = stage.clocks()
    with contextlib.suppress(ResultsWriteError):
        manifest.update_cell(cell.id, lambda c: replace(c, clocks=clocks))
    drift = stage.after_drift_error()
    if drift is not None:
        events.write(EventKind.WARNING, message=f"after the run: {drift}")


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
        events.write(EventKind.BROKER_STOPPED)
    events.close()


def _schedule(cell: Cell, start_ns: int) -> Schedule:
    return Schedule(
        start_ns=start_ns,
        rate=cell.rate,
        publishers=cell.publishers,
        messages_per_publisher=cell.messages_per_publisher,
    )


def _record_outcome(
    scenario: Scenario,
    cell: Cell,
    manifest: Manifest,
    outcome: LoadOutcome,
    timing: TimingEntry | None = None,
) -> None:
    window = Window.planned(outcome.start_ns, outcome.connected_ns, cell.warmup_s, cell.duration_s)
    if outcome.interrupted:
        window = replace(window, end_ns=min(window.end_ns, outcome.stopped_ns))
    verdict = generator_verdict(
        outcome.workers,
        late_threshold_ms=scenario.generator.max_send_lag_ms,
        rt_throttle_share=timing.throttle_share if timing is not None else None,
        expected_policy=timing.policy if timing is not None else None,
    )
    total = outcome.total
    schedule = _schedule(cell, outcome.start_ns)
    if timing is not None and outcome.workers:
        timing = replace(timing, receive_stamp=cast(ReceiveStamp, total.receive_stamp))
    manifest.update_cell(
        cell.id,
        lambda c: replace(
            c,
            schedule=schedule,
            window=window,
            generator=verdict,
            totals=Totals(total.sent, total.received),
            timing=timing if timing is not None else c.timing,
            finished_ns=time.time_ns(),
        ),
    )
