"""The broker registry: every broker definition, and the lookups the runtimes and CLI use.

``BROKERS`` lists one ``BrokerDefinition`` per module of ``mqbench/brokers/definitions/``;
its order is the order ``mqbench targets`` shows. Adding a broker is one module there and
one entry here (docs/extending.md). Every lookup reads ``BROKERS`` when it is called, so a
test can add a broker by replacing it.
"""

from __future__ import annotations

from mqbench.brokers.definition import BrokerDefinition, Target, TargetDefinition
from mqbench.brokers.definitions import (
    activemq,
    artemis,
    emqx,
    hivemq,
    mosquitto,
    nats,
    rabbitmq,
    redis,
    tbmq,
    tbmq_style,
    zenoh,
)
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.java.maven import JavaDistribution
from mqbench.brokers.runtime.native_spec import NativeSpec
from mqbench.brokers.runtime.options import BrokerOptionsModel
from mqbench.errors import BrokerError, ScenarioError

__all__ = [
    "BROKERS",
    "Target",
    "TargetDefinition",
    "compose_entries",
    "compose_entry",
    "definitions",
    "docker_option_owners",
    "get_definition",
    "get_target",
    "maven_distributions",
    "native_specs",
    "option_models",
    "target_names",
    "targets",
]

BROKERS: tuple[BrokerDefinition, ...] = (
    mosquitto.DEFINITION,
    emqx.DEFINITION,
    hivemq.DEFINITION,
    rabbitmq.DEFINITION,
    artemis.DEFINITION,
    activemq.DEFINITION,
    nats.DEFINITION,
    redis.DEFINITION,
    zenoh.DEFINITION,
    tbmq.DEFINITION,
    tbmq_style.DEFINITION,
)
"""Every broker mqbench knows, in the order targets are listed."""


def definitions() -> dict[str, TargetDefinition]:
    """Every target's definition, by target name, in registry order."""
    return {t.name: t for broker in BROKERS for t in broker.targets}


def target_names() -> list[str]:
    """Names of all targets, in registry order."""
    return list(definitions())


def targets() -> dict[str, Target]:
    """Every target row, by name, in registry order."""
    return {name: d.target for name, d in definitions().items()}


def get_definition(name: str) -> TargetDefinition:
    """The definition of target ``name``; ``ScenarioError`` listing known targets otherwise."""
    found = definitions()
    try:
        return found[name]
    except KeyError:
        known = ", ".join(found)
        raise ScenarioError(f"unknown target {name!r} (known: {known})") from None


def get_target(name: str) -> Target:
    """The target row of ``name``; ``ScenarioError`` listing known targets otherwise."""
    return get_definition(name).target


def native_specs() -> dict[str, NativeSpec]:
    """A fresh native spec for every target that has one, by spec (= target) name."""
    specs = (d.native() for d in definitions().values() if d.native is not None)
    return {spec.name: spec for spec in specs}


def option_models(target: str | None = None) -> list[tuple[str, type[BrokerOptionsModel]]]:
    """``(target, options model)`` of every target with a native spec, or of ``target``
    only; ``BrokerError`` for a target whose config mqbench does not write (Docker only)."""
    if target is None:
        return [(name, spec.options_model) for name, spec in native_specs().items()]
    definition = get_definition(target)
    if definition.native is None:
        raise BrokerError(
            f"target {target!r} takes no broker options: mqbench writes no config for it "
            "(it runs in Docker only; its runtime options are in docs/docker.md)"
        )
    return [(target, definition.native().options_model)]


def compose_entries() -> dict[str, ComposeEntry]:
    """The compose entry of every target that runs in Docker, by target name."""
    return {name: d.compose for name, d in definitions().items() if d.compose is not None}


def compose_entry(target: str) -> ComposeEntry:
    """The compose entry of ``target``; ``BrokerError`` when the docker runtime has none."""
    entry = get_definition(target).compose
    if entry is None:
        raise BrokerError(f"no compose file for target {target!r}")
    return entry


def maven_distributions() -> dict[str, JavaDistribution]:
    """The Java brokers fetched from Maven Central, by target name (``brokers fetch``)."""
    return {name: d.maven for name, d in definitions().items() if d.maven is not None}


def docker_option_owners() -> dict[str, str]:
    """Docker runtime options that belong to one target's hooks: option -> target name."""
    owners: dict[str, str] = {}
    for name, d in definitions().items():
        if d.docker_hooks is not None:
            for option in d.docker_hooks.options:
                owners.setdefault(option, name)
    return owners
