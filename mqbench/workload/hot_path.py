"""Which engine runs a cell's publish and receive loop (``generator.hot_path``).

The compiled core (``mqbench_core``, built by ``scripts/install.sh`` from ``core/``) serves
a cell when its client declares a compiled session framing
(``TransportCapabilities.compiled``) and the cell needs nothing the core does not do:
QoS 0, plain TCP, no faults or churn (a lost connection is reconnected and lent to the
core again, but closing clients on purpose and the fault proxy are the Python engine's),
the local engine and the timerfd timer. Everything else runs on the Python engine. The
choice is a pure function of the scenario, the cell, the client's capabilities and whether
the core is installed and built from this checkout's ``core/`` (:func:`core_install`), made
once in the parent and recorded per cell (``records.hot_path.HotPathEntry``); ``run --dry-run``
prints it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from mqbench.brokers.registry import get_target
from mqbench.errors import ScenarioError
from mqbench.records.hot_path import HotPathEngine, HotPathEntry
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Scenario
from mqbench.transports.base import TransportCapabilities
from mqbench.transports.registry import get_transport, resolve_client
from mqbench.workload.core_sources import checkout_core, staleness

CORE_MODULE = "mqbench_core"


@dataclass(frozen=True)
class CoreInstall:
    """Whether the compiled core can be used here: its version, or why not."""

    version: str | None
    missing: str | None = None
    stale: bool = False
    """Installed, but built from other ``core/`` sources than this checkout's (not used)."""


@functools.cache
def core_install() -> CoreInstall:
    """The compiled core of this environment (imported and checked once, lazily)."""
    try:
        import mqbench_core
    except ImportError as exc:
        return CoreInstall(None, f"the compiled core is not installed ({exc.name or exc})")
    return judge_install(mqbench_core, checkout_core(Path(__file__).resolve().parent.parent))


def judge_install(module: object, checkout: Path | None) -> CoreInstall:
    """The imported core ``module`` as usable or stale against the source checkout's
    ``core/`` (``checkout``; None: an installed wheel, nothing to compare with)."""
    why = staleness(getattr(module, "__sources__", None), checkout)
    if why is not None:
        return CoreInstall(None, why, stale=True)
    return CoreInstall(str(getattr(module, "__version__", "?")))


def stale_core_note(scenario: Scenario, install: CoreInstall | None = None) -> str | None:
    """The one line a run prints when a stale core leaves ``auto`` cells to the Python
    engine (``compiled`` is refused by the preflight instead; ``python`` never uses it)."""
    install = install or core_install()
    if not install.stale or scenario.generator.hot_path != "auto":
        return None
    return f"{install.missing}: every cell runs on the Python engine"


def unserved_because(
    scenario: Scenario, cell: Cell, capabilities: TransportCapabilities
) -> str | None:
    """Why the compiled core cannot run ``cell`` (None: it can)."""
    generator = scenario.generator
    reasons = [
        (capabilities.compiled is None, f"client {cell.client or 'default'} has no compiled path"),
        (cell.qos != 0, f"QoS {cell.qos} (the core sends QoS 0 only)"),
        (scenario.security.tls, "TLS (the core reads plain TCP)"),
        (scenario.faults is not None, "faults (the fault proxy runs with the Python engine)"),
        (cell.churn is not None, "churn (the core does not close clients on purpose)"),
        (generator.distributed, "distributed load (Spark tasks run the Python engine)"),
        (generator.timer == "loop", "timer: loop (the core uses timerfd)"),
    ]
    for applies, why in reasons:
        if applies:
            return why
    return None


def choose(
    scenario: Scenario,
    cell: Cell,
    capabilities: TransportCapabilities,
    install: CoreInstall | None = None,
) -> HotPathEntry:
    """The engine for ``cell`` (``ScenarioError`` when ``compiled`` is asked for and
    cannot be had)."""
    requested = scenario.generator.hot_path
    if requested == "python":
        return HotPathEntry("python", "generator.hot_path is python")
    install = install or core_install()
    why = unserved_because(scenario, cell, capabilities)
    if why is None and install.version is None:
        why = install.missing or "the compiled core is not installed"
    if why is not None:
        if requested == "compiled":
            raise ScenarioError(f"{cell.id}: generator.hot_path compiled: {why}")
        return HotPathEntry("python", f"auto: python, {why}")
    served = f"{requested}: the compiled core serves this cell"
    return HotPathEntry("compiled", served, install.version)


def engine_for(scenario: Scenario, cell: Cell, install: CoreInstall | None = None) -> HotPathEngine:
    """The engine ``cell`` will run on, for sizing its workers before it runs.

    ``python`` when ``compiled`` is asked for and cannot serve the cell: the preflight's
    ``check_hot_paths`` refuses that case with its own reason.
    """
    client = resolve_client(get_target(cell.target).transport, cell.client)
    try:
        return choose(scenario, cell, get_transport(client).capabilities, install).engine
    except ScenarioError:
        return "python"
