"""A cell's scheduling decision from its scenario, its broker and the calibration.

``run`` probes the machine once (:class:`RunTiming`), checks before any load that
``generator.realtime: on`` can be honoured for every cell (:meth:`RunTiming.check`, from
the CPUs the broker *will* get), and decides each cell once its broker runs, from the CPUs
the broker's processes are actually allowed on (:meth:`RunTiming.decide_cell`). The
calibration reaches ``run`` as :class:`TimingHints` (the CLI reads it; ``workload`` never
imports ``calibration``).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mqbench.brokers.base import RunningBroker
from mqbench.brokers.registry import get_target
from mqbench.brokers.resources.profiles import get_profile
from mqbench.brokers.runtime.registry import runtime_capabilities
from mqbench.errors import ScenarioError
from mqbench.records.timing import WakeupFloor
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Scenario
from mqbench.transports.registry import resolve_client
from mqbench.workload.hot_path import engine_for
from mqbench.workload.plan import cell_shards
from mqbench.workload.realtime import (
    BrokerPlacement,
    MachineFacts,
    RealtimeDecision,
    decide,
    estimate_generator_cores,
    machine_facts,
    policy_name,
    process_cpus,
)

# A runtime whose profiles are cgroups (``RuntimeCapabilities.cgroup_profiles``, native)
# pins a broker under a resources profile to ``Profile.cpuset``. A docker broker gets a CPU
# quota without a cpuset, so it may run on every CPU; the decision after start reads the
# CPUs from the kernel either way.


@dataclass(frozen=True)
class TimingHints:
    """What the calibration tells ``run`` about timing (empty without a calibration)."""

    wakeup: Mapping[str, WakeupFloor] = field(default_factory=dict)
    """The machine's wake-up floor by policy name (``other``, ``fifo+dma``, ...)."""
    ceilings: Mapping[str, float] = field(default_factory=dict)
    """Calibrated msg/s per worker, by client."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class RunTiming:
    """The run's machine facts and calibration hints; decides each cell."""

    scenario: Scenario
    hints: TimingHints = field(default_factory=TimingHints)
    machine: MachineFacts | None = None

    def facts(self) -> MachineFacts:
        """This machine's facts, probed once."""
        if self.machine is None:
            self.machine = machine_facts()
        return self.machine

    def workers(self, cell: Cell) -> int:
        """The cell's worker processes on this machine."""
        engine = engine_for(self.scenario, cell)
        return cell_shards(self.scenario.generator, cell, len(self.facts().cpus), engine)[0]

    def generator_cores(self, cell: Cell) -> float:
        """Estimated cores the cell's workers need."""
        client = resolve_client(get_target(cell.target).transport, cell.client)
        return estimate_generator_cores(
            cell.offered_rate,
            cell.expected_delivery_rate,
            self.workers(cell),
            self.hints.ceilings.get(client),
        )

    def predicted_placement(self, cell: Cell) -> BrokerPlacement:
        """Where the broker will run: a native profile's cpuset is its first CPUs."""
        scenario = self.scenario
        cpus = self.facts().cpus
        capabilities = runtime_capabilities(scenario.runtime)
        if not capabilities.starts_broker:
            pid = scenario.broker.pid
            local = _loopback(scenario.broker.host)
            return BrokerPlacement(local, process_cpus([pid]) if pid else ())
        if capabilities.cgroup_profiles and cell.resources:
            pinned = get_profile(cell.resources).cpuset(cpus)
            if pinned is not None:
                return BrokerPlacement(True, pinned)
        return BrokerPlacement(True, cpus)

    def placement(self, broker: RunningBroker) -> BrokerPlacement:
        """Where the running broker may run, read from the kernel."""
        starts_broker = runtime_capabilities(self.scenario.runtime).starts_broker
        if not starts_broker and not _loopback(broker.endpoint.host):
            return BrokerPlacement(False)
        return BrokerPlacement(True, process_cpus(broker.pids))

    def decide(self, cell: Cell, placement: BrokerPlacement) -> RealtimeDecision:
        """The decision for ``cell`` with its broker at ``placement``."""
        generator = self.scenario.generator
        if generator.distributed:
            mode = generator.realtime
            reason = "distributed load: the workers are Spark tasks"
            return RealtimeDecision(mode, None, f"auto: off, {reason}" if mode != "off" else "")
        return decide(
            generator.realtime,
            self.facts(),
            placement,
            self.generator_cores(cell),
            connections_per_worker=math.ceil(cell.connections / self.workers(cell)),
            messages_per_s=cell.offered_rate + cell.expected_delivery_rate,
        )

    def check(self, cells: Sequence[Cell]) -> None:
        """``ScenarioError`` (one line) when ``realtime: on`` cannot be honoured."""
        if self.scenario.generator.realtime != "on":
            return
        if self.scenario.generator.distributed:
            raise ScenarioError(
                "generator.realtime on: distributed load runs its workers as Spark tasks"
            )
        for cell in cells:
            decision = self.decide(cell, self.predicted_placement(cell))
            if decision.refused is not None:
                raise ScenarioError(f"{cell.id}: {decision.refused}")

    def decide_cell(self, cell: Cell, broker: RunningBroker) -> RealtimeDecision:
        """The decision once the broker runs (``ScenarioError`` when ``on`` is refused)."""
        decision = self.decide(cell, self.placement(broker))
        if decision.refused is not None:
            raise ScenarioError(f"{cell.id}: {decision.refused}")
        return decision

    def floor(self, decision: RealtimeDecision) -> WakeupFloor | None:
        """The calibrated wake-up floor under the decision's policy (None: not measured)."""
        return self.hints.wakeup.get(policy_name(decision.settings))
