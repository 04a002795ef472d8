"""Everything ``run`` refuses before it creates a result folder or starts a broker.

``scenario validate``, ``run --dry-run`` and ``run`` call the same :func:`preflight`, so a
scenario that validates is one ``run`` accepts: the load fits the machine
(``workload.capacity``), every client can give what the scenario asks (the transport's
``capabilities``: QoS, persistent sessions, wildcard filters), the topologies can be built
(group filters, fault targets, worker shards), the runtime can run every target with the
given broker options and resource profiles, the ``security`` section can be honoured (the
password can be read, every client and broker can do TLS/auth), the fault toxic is valid
and a configured Toxiproxy answers, and, with an output folder, the results fit on its disk.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path

from mqbench.brokers.registry import get_definition, get_target
from mqbench.brokers.resources.native_profiles import check_native_profile
from mqbench.brokers.resources.profiles import profile_names
from mqbench.brokers.runtime.registry import get_runtime, runtime_capabilities
from mqbench.errors import BrokerError, MqbenchError, ScenarioError
from mqbench.faults.driver import check_faults
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.records.results import check_output_root
from mqbench.scenario.matrix import Cell, broker_options, expand
from mqbench.scenario.model import Scenario
from mqbench.transports.registry import get_transport, resolve_client
from mqbench.wire.topics import is_filter
from mqbench.workload.capacity import check_disk_space, check_fits
from mqbench.workload.distributed import check_distributed, check_remote_output, staging_parent
from mqbench.workload.hot_path import choose as choose_hot_path
from mqbench.workload.hot_path import engine_for
from mqbench.workload.plan import FILES_PER_CONNECTION, worker_count
from mqbench.workload.security import broker_start_options, check_security
from mqbench.workload.topology import build_topology, fault_targets


def preflight(
    scenario: Scenario,
    cells: Sequence[Cell] | None = None,
    out_root: Path | RemoteRoot | None = None,
    *,
    source: str | None = None,
) -> list[Cell]:
    """Raise the first reason ``scenario`` cannot run (a typed ``MqbenchError``, one line).

    ``cells`` are the cells to run (default: all of them); ``out_root`` is where results go
    (None: the output folder and disk space are not checked; a URI: the run is staged in
    the temporary folder, whose disk is checked). ``source`` (the scenario file) begins
    every refusal. Returns the cells checked.
    """
    try:
        return _preflight(scenario, cells, out_root)
    except MqbenchError as exc:
        raise named(exc, source) from None


def named(exc: MqbenchError, source: str | None) -> MqbenchError:
    """``exc`` (same type and fields) with its one line starting with ``source:``."""
    message = str(exc)
    if source is None or message.startswith(f"{source}: "):
        return exc
    renamed = copy.copy(exc)
    renamed.args = (f"{source}: {message}",)
    return renamed


def _preflight(
    scenario: Scenario, cells: Sequence[Cell] | None, out_root: Path | RemoteRoot | None
) -> list[Cell]:
    chosen = list(expand(scenario) if cells is None else cells)
    if isinstance(out_root, RemoteRoot):
        check_remote_output(scenario, out_root)
        out_root = staging_parent()
        name = None  # the staging folder is private and fresh
    else:
        name = scenario.name
    if out_root is not None:
        check_output_root(out_root, name)
    check_payloads(scenario, chosen)  # before the load: a payload no broker takes is no load
    check_fits(scenario, chosen)  # first: it is cheap, the topologies below are not
    check_clients(scenario)
    check_resources(scenario)
    check_cells(scenario, chosen)
    check_hot_paths(scenario, chosen)
    check_distributed(scenario, chosen)
    if out_root is not None:
        check_disk_space(chosen, out_root)
    check_targets(scenario, chosen)
    check_security(scenario)
    if scenario.faults is not None:
        check_faults(scenario.faults)
    return chosen


def runtime_notes(scenario: Scenario) -> list[str]:
    """One line per limit the scenario's runtime cannot give as asked (not a refusal: the
    run goes on with what the host allows, e.g. Docker's ``nofile`` capped at the host's
    hard limit; the manifest records what was given)."""
    runtime = get_runtime(scenario.runtime)
    notes = getattr(runtime, "notes", None)
    return list(notes()) if callable(notes) else []


def check_payloads(scenario: Scenario, cells: Sequence[Cell]) -> None:
    """Every cell's payload fits its protocol (the client's ``max_payload``) and, for brokers
    mqbench configures, the broker's own limit (the definition's ``payload_limit``)."""
    seen: set[tuple[str, str | None, tuple[tuple[str, str], ...]]] = set()
    for cell in sorted(cells, key=lambda c: -c.payload_bytes):
        options = broker_options(scenario, cell)
        key = (cell.target, cell.client, tuple(sorted((k, repr(v)) for k, v in options.items())))
        if key in seen:
            continue  # the largest payload of this combination was checked
        seen.add(key)
        definition = get_definition(cell.target)
        client = resolve_client(definition.transport, cell.client)
        limits = [get_transport(client).capabilities.max_payload]
        starts_broker = runtime_capabilities(scenario.runtime).starts_broker
        if definition.payload_limit is not None and starts_broker:
            try:
                limits.append(definition.payload_limit(options))
            except BrokerError as exc:
                raise BrokerError(f"target {cell.target!r}: {exc}") from None
        for limit in limits:
            refusal = limit.refusal(cell.payload_bytes) if limit is not None else None
            if refusal is not None:
                raise ScenarioError(f"target {cell.target!r}: workload.payload: {refusal}")


def check_clients(scenario: Scenario) -> None:
    """Every client of every target can give the QoS and sessions the scenario asks for."""
    for target_name in scenario.targets:
        target = get_target(target_name)
        for client in scenario.client:
            name = resolve_client(target.transport, client)
            capabilities = get_transport(name).capabilities
            for qos in scenario.workload.qos:
                if qos > capabilities.max_qos:
                    raise ScenarioError(
                        f"target {target_name!r}: QoS {qos} is not supported by the "
                        f"{name} client (max QoS {capabilities.max_qos})"
                    )
            if scenario.workload.is_persistent and not capabilities.persistent_sessions:
                raise ScenarioError(
                    f"target {target_name!r}: the {name} client ({target.transport}) has no "
                    "persistent sessions (set workload.persistent: false)"
                )


def check_hot_paths(scenario: Scenario, cells: Sequence[Cell]) -> None:
    """``generator.hot_path: compiled`` only when the compiled core serves every cell."""
    if scenario.generator.hot_path != "compiled":
        return
    for cell in cells:
        client = resolve_client(get_target(cell.target).transport, cell.client)
        choose_hot_path(scenario, cell, get_transport(client).capabilities)


def check_resources(scenario: Scenario) -> None:
    """Resource profiles exist and, for native brokers, fit this machine's cgroups."""
    known_profiles = profile_names()
    for profile in scenario.resources:
        if profile is not None and profile not in known_profiles:
            raise ScenarioError(
                f"unknown resources profile {profile!r} (known: {', '.join(known_profiles)})"
            )
        if profile is not None and runtime_capabilities(scenario.runtime).cgroup_profiles:
            # More CPUs than the machine has, or no cgroup write access: refused here,
            # before a result folder exists or a broker starts.
            check_native_profile(profile)


def check_cells(scenario: Scenario, cells: Sequence[Cell]) -> None:
    """Every cell has its own folder; its topology can be built, sharded and served."""
    ids: set[str] = set()
    for cell in cells:
        if cell.id in ids:  # the folder would be written twice
            raise ScenarioError(f"two cells have the id {cell.id!r}; give the variants labels")
        ids.add(cell.id)
    cpus = os.cpu_count() or 1
    for cell in cells:
        if not scenario.generator.distributed:  # local processes: bounded by this machine
            files = FILES_PER_CONNECTION[engine_for(scenario, cell)]
            worker_count(scenario.generator.workers, cell.connections, cpus, files)
        topology = build_topology(cell, "check", scenario.seed)
        if scenario.faults is not None:
            fault_targets(topology, scenario.faults.target)
        protocol = get_target(cell.target).transport
        client = resolve_client(protocol, cell.client)
        wildcards = any(is_filter(s.topic_filter) for s in topology.subscribers)
        if wildcards and not get_transport(client).capabilities.wildcard_filters:
            raise ScenarioError(
                f"target {cell.target!r}: topology {cell.topology!r} subscribes with wildcard "
                f"filters, which the {client} client does not support (exact topics only)"
            )


def check_targets(scenario: Scenario, cells: Sequence[Cell]) -> None:
    """The runtime can run every target here, with every cell's broker options."""
    runtime = get_runtime(scenario.runtime)
    for target_name in scenario.targets:
        availability = runtime.availability(target_name)
        if not availability.available:
            raise BrokerError(f"target {target_name!r}: {availability.reason}")
    seen: set[tuple[str, tuple[tuple[str, object], ...]]] = set()
    for cell in cells:
        options = broker_options(scenario, cell)
        key = (cell.target, tuple(sorted((k, repr(v)) for k, v in options.items())))
        if key in seen:
            continue
        seen.add(key)
        resolved = broker_start_options(scenario, cell)  # secrets can be read, or a refusal
        try:
            runtime.check_options(cell.target, resolved.request_options())
        except BrokerError as exc:
            raise BrokerError(f"target {cell.target!r}: {exc}") from None
