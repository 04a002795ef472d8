"""One cell of a run, as a list of named steps: folder, broker, faults, plan, load, outcome.

``CellRun.run`` reads like the cell's life (as OpenMessaging Benchmark's
``WorkloadGenerator.run`` does): open the cell folder, start the broker, start the faults,
plan the load, drive it, record the outcome; one failure path (``_fail``) and one teardown.
Everything the cell writes into the manifest goes through one ``CellRecorder``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from mqbench.brokers.base import HasFaultProxy, HasResourceSource, RunningBroker, StartRequest
from mqbench.brokers.registry import get_target
from mqbench.brokers.resources.sampler import ResourceSampler
from mqbench.brokers.runtime.liveness import BrokerExit, WatchesExit
from mqbench.brokers.runtime.registry import get_runtime
from mqbench.errors import BrokerError, LoadTaskLost, MqbenchError, ResultsWriteError
from mqbench.faults.driver import FaultDriver, ProxySite
from mqbench.process import interrupts
from mqbench.records.cell_entry import (
    BrokerExitEntry,
    CellEntry,
    CellStatus,
    GeneratorVerdict,
    Route,
    Schedule,
    Totals,
    Window,
)
from mqbench.records.clocks import GeneratorClocks
from mqbench.records.events import EventKind, EventLog
from mqbench.records.manifest import Manifest
from mqbench.records.timing import ReceiveStamp, TimingEntry
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Faults, Scenario
from mqbench.transports.base import ProtocolSettings, ZenohSettings
from mqbench.transports.registry import get_transport, resolve_client
from mqbench.workload.capacity import pending_bound
from mqbench.workload.cell_timing import RunTiming
from mqbench.workload.coordinator import Coordinator, LoadOutcome, Progress
from mqbench.workload.distributed import check_cross_task, cross_task_routes, pair_count
from mqbench.workload.hot_path import choose as choose_hot_path
from mqbench.workload.interruption import RunInterrupted, signal_text, stop_signal
from mqbench.workload.plan import (
    WorkerPlan,
    build_worker_plans,
    cell_shards,
    process_count,
    usable_cpus,
)
from mqbench.workload.realtime import RealtimeDecision
from mqbench.workload.reporter import RunReporter
from mqbench.workload.security import RunSecurity, broker_start_options
from mqbench.workload.selfcheck import generator_verdict
from mqbench.workload.spark_engine import SparkStage
from mqbench.workload.topology import Topology, build_topology, fault_targets
from mqbench.workload.wakeup_probe import CellProbe, cell_interval_us, cell_probe_settings


class CellRecorder:
    """The one writer of a cell's manifest entry: one method per thing the cell learns."""

    def __init__(self, manifest: Manifest, cell_id: str) -> None:
        self.manifest = manifest
        self.cell_id = cell_id

    def opened(self, entry: CellEntry) -> None:
        """The cell begins (status ``running``, its parameters and routes)."""
        self.manifest.add_cell(entry)

    def broker_started(self, broker: RunningBroker) -> None:
        """What the runtime says about the broker it started (its ``BrokerInfo``, in the
        entry's stored form)."""
        info = broker.info.to_dict()
        self._update(lambda c: replace(c, broker=info))

    def timing(self, timing: TimingEntry) -> None:
        """How the cell's workers are scheduled (``workload.cell_timing``)."""
        self._update(lambda c: replace(c, timing=timing))

    def broker_exited(self, entry: BrokerExitEntry) -> None:
        """The broker exited on its own (from the liveness watcher's thread; never raises)."""
        with contextlib.suppress(MqbenchError):
            self._update(lambda c: replace(c, broker_exit=entry))

    def started(self, schedule: Schedule, window: Window) -> None:
        """The start signal went out: the schedule and the planned window, before any send."""
        self._update(lambda c: replace(c, schedule=schedule, window=window))

    def clocks(self, clocks: GeneratorClocks) -> None:
        """The clock offsets of distributed load tasks (kept even when the disk fails)."""
        with contextlib.suppress(ResultsWriteError):
            self._update(lambda c: replace(c, clocks=clocks))

    def outcome(
        self,
        schedule: Schedule,
        window: Window,
        verdict: GeneratorVerdict,
        totals: Totals,
        timing: TimingEntry | None,
    ) -> None:
        """What the load did: the window, the generator's self-check, the totals and the
        receive stamps the deliveries carried (``timing``; None: keep the stored one)."""
        finished_ns = time.time_ns()
        self._update(
            lambda c: replace(
                c,
                schedule=schedule,
                window=window,
                generator=verdict,
                totals=totals,
                timing=timing if timing is not None else c.timing,
                finished_ns=finished_ns,
            )
        )

    def ended(self, status: CellStatus, error: str | None = None) -> CellEntry:
        """The cell's final status (and why it did not complete)."""
        if error is None:
            return self._update(lambda c: replace(c, status=status))
        return self._update(lambda c: replace(c, status=status, error=error))

    def entry(self) -> CellEntry:
        """The entry as stored now."""
        return self.manifest.cell(self.cell_id)

    def _update(self, change: Callable[[CellEntry], CellEntry]) -> CellEntry:
        return self.manifest.update_cell(self.cell_id, change)


@dataclass(frozen=True)
class RunContext:
    """What every cell of a run shares: the scenario, the folder, the manifest, the CA."""

    scenario: Scenario
    result_dir: Path
    manifest: Manifest
    reporter: RunReporter
    run_tag: str
    """A short random tag in client ids and topics, unique to this run."""
    security: RunSecurity
    timing: RunTiming
    """The run's real-time scheduling decisions, made per cell from its broker."""


def protocol_params(scenario: Scenario, protocol: str) -> ProtocolSettings | None:
    """The scenario's protocol-specific client settings for a cell of ``protocol`` (None:
    the protocol has none): handed to every client and recorded in the cell's manifest
    params with the protocol's prefix (zenoh: ``shared_memory``, in params
    ``zenoh_shared_memory``)."""
    if protocol == "zenoh":
        return ZenohSettings(shared_memory=scenario.zenoh.shared_memory)
    return None


class CellRun:
    """One cell from its folder to its manifest entry; ``run()`` lists the steps."""

    def __init__(self, ctx: RunContext, cell: Cell) -> None:
        self.ctx = ctx
        self.scenario = ctx.scenario
        self.cell = cell
        self.reporter = ctx.reporter
        self.record = CellRecorder(ctx.manifest, cell.id)
        self.cell_dir = ctx.result_dir / "cells" / cell.id
        self.transport = get_target(cell.target).transport
        self.client = resolve_client(self.transport, cell.client)
        self.hot_path = choose_hot_path(ctx.scenario, cell, get_transport(self.client).capabilities)
        self.workers, self.layout = cell_shards(
            ctx.scenario.generator, cell, usable_cpus(), self.hot_path.engine
        )
        self.topology: Topology = build_topology(cell, ctx.run_tag, ctx.scenario.seed)
        self.events: EventLog | None = None
        self.sampler: ResourceSampler | None = None
        self.broker: RunningBroker | None = None
        self.faults: FaultDriver | None = None
        self.stage: SparkStage | None = None
        self.timing: TimingEntry | None = None
        self.probe: CellProbe | None = None

    def run(self) -> None:
        """Run the cell; raise when the run cannot go on (interrupt, lost task, full disk)."""
        self.open_folder()
        try:
            broker = self.start_broker()
            decision = self.decide_timing(broker)
            proxy_port = self.start_faults(broker)
            plans = self.plan_load(broker, proxy_port, decision)
            self.start_wakeup_probe(decision)
            outcome = self.drive(plans)
            self.record_outcome(outcome)
        except RunInterrupted:
            raise
        except (MqbenchError, KeyboardInterrupt) as exc:
            if self._fail(exc):
                raise
        finally:
            self._teardown()

    # -- the steps ---------------------------------------------------------------------

    def open_folder(self) -> None:
        """Create the cell folder, its manifest entry (``running``), event log and sampler."""
        try:
            self.cell_dir.mkdir(parents=True)
        except OSError as exc:
            raise ResultsWriteError(
                f"cannot create {self.cell_dir}: {exc.strerror or exc}",
                path=str(self.cell_dir),
                errno=exc.errno,
            ) from None
        self.record.opened(self._first_entry())
        self.reporter.cell_started(self.cell)
        self.events = EventLog(self.cell_dir / "events.jsonl")
        self.sampler = ResourceSampler(self.cell_dir / "resources.csv")

    def start_broker(self) -> RunningBroker:
        """Start the broker, watch it die, and sample its CPU and memory."""
        scenario, cell, events, sampler = self.scenario, self.cell, self._events, self._sampler
        self.reporter.phase(cell, f"starting {cell.target} ({scenario.runtime})")
        options = broker_start_options(scenario, cell)  # secret options read now
        self.broker = broker = get_runtime(scenario.runtime).start(
            StartRequest(
                target=cell.target,
                workdir=self.cell_dir / "broker",
                host=scenario.broker.host,
                port=scenario.broker.port,
                options=options.request_options(),
                startup_timeout_s=scenario.broker.startup_timeout,
                security=self.ctx.security.broker_for(options),
            )
        )
        events.write(EventKind.BROKER_STARTED, **broker.info.to_dict())
        self.record.broker_started(broker)
        if isinstance(broker, WatchesExit):
            broker.watch_exit(self._on_broker_exit)
        if broker.pids:
            sampler.add_role("broker", broker.pids)
        if isinstance(broker, HasResourceSource) and (source := broker.resource_source()):
            sampler.add_source(source)
        sampler.start()
        return broker

    def decide_timing(self, broker: RunningBroker) -> RealtimeDecision:
        """Real-time scheduling of the workers, decided from the broker's CPUs."""
        run_timing = self.ctx.timing
        decision = run_timing.decide_cell(self.cell, broker)
        self.timing = decision.entry(
            run_timing.floor(decision), self.scenario.generator.receive_stamp
        )
        self.record.timing(self.timing)
        return decision

    def start_faults(self, broker: RunningBroker) -> int:
        """Start the fault proxy in front of the broker; its port (0: no faults)."""
        faults = self.scenario.faults
        if faults is None:
            return 0
        self.faults = FaultDriver(
            faults,
            seed=self.scenario.seed,
            cell_index=self.cell.index,
            events=self._events.write,
            affected=fault_targets(self.topology, faults.target),
        )
        self.reporter.phase(self.cell, f"starting fault proxy ({faults.proxy})")
        return self.faults.start(
            broker.endpoint.host,
            broker.endpoint.port,
            listen_host=self.scenario.broker.host,
            site=_container_proxy(faults, broker),
        )

    def plan_load(
        self, broker: RunningBroker, proxy_port: int, timing: RealtimeDecision
    ) -> list[WorkerPlan]:
        """One plan per worker (process or Spark task), and the Spark stage when distributed."""
        scenario, cell, generator = self.scenario, self.cell, self.scenario.generator
        self.reporter.phase(cell, f"connecting {cell.connections} clients")
        faults = scenario.faults
        plans = build_worker_plans(
            cell,
            self.topology,
            cell_dir=str(self.cell_dir.resolve()),
            transport=self.client,
            host=broker.endpoint.host,
            port=broker.endpoint.port,
            workers=self.workers,
            connect_timeout_s=generator.connect_timeout,
            spin_ns=int(generator.spin_ms * 1e6),
            late_threshold_ns=int(generator.max_send_lag_ms * 1e6),
            proxy_port=proxy_port,
            proxied=None if faults is None else fault_targets(self.topology, faults.target),
            reconnect_max_s=generator.reconnect_max,
            timer=generator.timer,
            layout=self.layout,
            max_pending_bytes=pending_bound(scenario, cell),
            receive_stamp=generator.receive_stamp,
            protocol_settings=protocol_params(scenario, self.transport),
            security=self.ctx.security.client,
            realtime=timing.settings,
            hot_path=self.hot_path.engine,
            coalesce_ns=int(generator.coalesce_us * 1e3),
        )
        if generator.distributed:
            self.stage = _spark_stage(scenario, cell, self.topology.routes, plans)
            self._sampler.add_source(self.stage)  # every task samples itself
        return plans

    def start_wakeup_probe(self, timing: RealtimeDecision) -> None:
        """Keep a wake-up probe one real-time priority above real-time workers, on their
        CPUs, through the load (``workload.wakeup_probe``); why not, in the cell's timing."""
        if self.stage is not None:
            return  # distributed: the workers are Spark tasks on other hosts
        if not self.scenario.generator.wakeup_probe:
            self._no_probe("generator.wakeup_probe is off")
            return
        settings = cell_probe_settings(timing.settings)
        if settings is None:
            self._no_probe("the workers run at normal priority (timing.reason says why)")
            return
        cell = self.cell
        planned_s = cell.warmup_s + cell.duration_s + cell.drain_s
        probe = CellProbe(
            settings,
            self.scenario.generator.connect_timeout + planned_s,
            cell_interval_us(cell.duration_s),
        )
        failed = probe.start()
        if failed is not None:
            self._no_probe(failed.reason or "the probe did not start")
            return
        self.probe = probe

    def drive(self, plans: list[WorkerPlan]) -> LoadOutcome:
        """Run the workers to the end of the schedule and the drain (``Coordinator``)."""
        cell, stage, sampler = self.cell, self.stage, self._sampler
        coordinator = Coordinator(
            plans,
            events=self._events,
            offered_rate=cell.offered_rate,
            connections=cell.connections,
            warmup_s=cell.warmup_s,
            duration_s=cell.duration_s,
            drain_s=cell.drain_s,
            connect_timeout_s=self.scenario.generator.connect_timeout,
            connect_rate=cell.connect_rate,
            expected_per_sent=cell.expected_delivery_rate / cell.offered_rate,
            on_progress=self._on_progress,
            on_workers=None if stage is not None else lambda p: sampler.add_role("generator", p),
            on_start=self._on_start,
            launcher=stage,
        )
        try:
            return coordinator.run()
        finally:
            if stage is not None:
                self._record_clocks(stage)

    def record_outcome(self, outcome: LoadOutcome) -> None:
        """The window, the generator's verdict and the totals; the cell's final status."""
        cell = self.cell
        window = Window.planned(
            outcome.start_ns, outcome.connected_ns, cell.warmup_s, cell.duration_s
        )
        if outcome.interrupted:
            window = replace(window, end_ns=min(window.end_ns, outcome.stopped_ns))
        timing = self.timing
        verdict = generator_verdict(
            outcome.workers,
            late_threshold_ms=self.scenario.generator.max_send_lag_ms,
            rt_throttle_share=timing.throttle_share if timing is not None else None,
            expected_policy=timing.policy if timing is not None else None,
        )
        total = outcome.total
        if timing is not None and outcome.workers:
            timing = replace(timing, receive_stamp=cast(ReceiveStamp, total.receive_stamp))
        if timing is not None and self.probe is not None:
            probed = self.probe.stop(window.start_ns, window.end_ns)
            self.probe = None
            timing = replace(timing, wakeup_during=probed.floor, wakeup_during_reason=probed.reason)
        schedule = _schedule(cell, outcome.start_ns)
        totals = Totals(total.sent, total.received)
        self.record.outcome(schedule, window, verdict, totals, timing)
        status: CellStatus = "interrupted" if outcome.interrupted else "completed"
        self.reporter.cell_finished(cell, status, self.record.ended(status))
        if outcome.interrupted:
            raise RunInterrupted(f"interrupted during cell {cell.id}", stop_signal())

    # -- the failure path and the teardown ---------------------------------------------

    def _fail(self, exc: MqbenchError | KeyboardInterrupt) -> bool:
        """Record why the cell ended early; True when the whole run must stop."""
        cell, events = self.cell, self.events
        if isinstance(exc, KeyboardInterrupt):
            signum = stop_signal(exc)
            if events is not None:
                events.write(EventKind.INTERRUPTED, signal=signal.Signals(signum).name)
            self.record.ended("interrupted", f"interrupted by {signal_text(signum)}")
            return True
        if events is not None:
            events.write(EventKind.ERROR, message=str(exc))
        if isinstance(exc, LoadTaskLost):
            # Records so far stay; the cell ends like an interruption, with the reason.
            self.reporter.cell_finished(
                cell, "interrupted", self.record.ended("interrupted", str(exc))
            )
            return True
        with contextlib.suppress(ResultsWriteError):
            self.record.ended("failed", str(exc))
        self.reporter.cell_finished(cell, "failed", self.record.entry())
        return isinstance(exc, ResultsWriteError)  # results cannot be written: stop the run

    def _teardown(self) -> None:
        """Stop what the cell started, in order: the faults, the sampler, the broker, the
        event log; each part even when an earlier one fails to stop (that error is raised
        after). After a second signal, kill the broker, not wait."""
        events, sampler, broker = self.events, self.sampler, self.broker
        if events is None or sampler is None:
            return  # the folder was never opened
        with contextlib.ExitStack() as stopping:  # callbacks run last-registered first
            stopping.callback(events.close)
            if broker is not None:
                stopping.callback(_stop_broker, broker, events)
            stopping.callback(sampler.stop)
            if self.probe is not None:
                stopping.callback(self.probe.close)
            if self.faults is not None:
                stopping.callback(self.faults.stop, self.cell_dir / "proxy_events.json")

    # -- callbacks and helpers ---------------------------------------------------------

    def _first_entry(self) -> CellEntry:
        cell, topology, scenario = self.cell, self.topology, self.scenario
        faults = scenario.faults
        by_design = fault_targets(topology, faults.target) if faults is not None else {}
        send_failures_expected = bool(by_design.get("publishers")) or (
            cell.churn is not None and cell.churn.who == "publishers"
        )
        settings = protocol_params(scenario, self.transport)
        params = {
            **cell.params(),
            "protocol": self.transport,
            "transport": self.client,
            "runtime": scenario.runtime,
            "workers": process_count(
                self.layout, self.workers, len(topology.publishers), len(topology.subscribers)
            ),
            "layout": self.layout,
            "faults": faults.type if faults else None,
            **(settings.params() if settings is not None else {}),
        }
        return CellEntry(
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
            hot_path=self.hot_path,
        )

    def _on_broker_exit(self, exit: BrokerExit) -> None:
        details = exit.to_dict()
        self._events.write(EventKind.BROKER_EXITED, **details)
        self._sampler.forget(exit.pid)
        self.record.broker_exited(BrokerExitEntry.from_dict(self.cell.id, details))
        self.reporter.broker_exited(self.cell, exit)

    def _on_start(self, start_ns: int) -> None:
        # The schedule and the planned window are known now: store them before a single
        # message goes out, so an interrupted or killed run can always be analysed.
        cell = self.cell
        window = Window.planned(start_ns, start_ns, cell.warmup_s, cell.duration_s)
        self.record.started(_schedule(cell, start_ns), window)
        if self.faults is not None:
            self.faults.begin(start_ns, cell.warmup_s, cell.duration_s)

    def _no_probe(self, why: str) -> None:
        if self.timing is not None:
            self.timing = replace(self.timing, wakeup_during_reason=why)
            self.record.timing(self.timing)

    def _on_progress(self, progress: Progress) -> None:
        self.reporter.progress(self.cell, progress)

    def _record_clocks(self, stage: SparkStage) -> None:
        """The tasks' clock offsets into the manifest; a warning when they drifted apart."""
        self.record.clocks(stage.clocks())
        drift = stage.after_drift_error()
        if drift is not None:
            self._events.write(EventKind.WARNING, message=f"after the run: {drift}")

    @property
    def _events(self) -> EventLog:
        assert self.events is not None, "open_folder() comes first"
        return self.events

    @property
    def _sampler(self) -> ResourceSampler:
        assert self.sampler is not None, "open_folder() comes first"
        return self.sampler


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


def _stop_broker(broker: RunningBroker, events: EventLog) -> None:
    """Stop the broker and say so; a second signal while it stops kills it instead."""
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


def _schedule(cell: Cell, start_ns: int) -> Schedule:
    return Schedule(
        start_ns=start_ns,
        rate=cell.rate,
        publishers=cell.publishers,
        messages_per_publisher=cell.messages_per_publisher,
    )
