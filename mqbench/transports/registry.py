"""Transport registry: client name -> implementation, imported lazily.

Each protocol has one lean default client (named after the protocol) and may have
alternative clients built on stock libraries, so users can also measure what a stock
Python client sees (``client:`` in a scenario). Adding a client = one module + one line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from mqbench.errors import ScenarioError, TransportError
from mqbench.transports.base import Transport, TransportCapabilities


@dataclass(frozen=True)
class ClientEntry:
    """Where a client lives and which protocol it speaks."""

    name: str
    protocol: str
    target: str
    """``module:attribute``; the attribute is a zero-argument Transport factory."""
    default: bool = False
    description: str = ""


_ENTRIES: tuple[ClientEntry, ...] = (
    ClientEntry("mqtt", "mqtt", "mqbench.transports.mqtt:MqttTransport", True, "lean asyncio"),
    ClientEntry("nats", "nats", "mqbench.transports.nats:NatsTransport", True, "lean asyncio"),
    ClientEntry("redis", "redis", "mqbench.transports.redis:RedisTransport", True, "lean RESP"),
    ClientEntry("amqp", "amqp", "mqbench.transports.amqp:AmqpTransport", True, "lean + pamqp"),
    ClientEntry("zenoh", "zenoh", "mqbench.transports.zenoh:ZenohTransport", True, "eclipse-zenoh"),
    ClientEntry("paho", "mqtt", "mqbench.transports.alt.paho:PahoTransport", False, "paho-mqtt"),
    ClientEntry(
        "aiomqtt", "mqtt", "mqbench.transports.alt.aiomqtt:AiomqttTransport", False, "aiomqtt"
    ),
    ClientEntry(
        "nats-py", "nats", "mqbench.transports.alt.nats_py:NatsPyTransport", False, "nats-py"
    ),
    ClientEntry(
        "redis-py", "redis", "mqbench.transports.alt.redis_py:RedisPyTransport", False, "redis-py"
    ),
    ClientEntry(
        "aio-pika", "amqp", "mqbench.transports.alt.aio_pika:AioPikaTransport", False, "aio-pika"
    ),
)
_BY_NAME = {entry.name: entry for entry in _ENTRIES}


def transport_names() -> list[str]:
    """All registered client names."""
    return sorted(_BY_NAME)


def client_entry(name: str) -> ClientEntry:
    """The registry entry of ``name``."""
    try:
        return _BY_NAME[name]
    except KeyError:
        known = ", ".join(transport_names())
        raise ScenarioError(f"unknown client {name!r} (known: {known})") from None


def clients_for(protocol: str) -> list[ClientEntry]:
    """Every client that speaks ``protocol``, the default first."""
    return sorted(
        (e for e in _ENTRIES if e.protocol == protocol), key=lambda e: (not e.default, e.name)
    )


def resolve_client(protocol: str, client: str | None) -> str:
    """The client to use for ``protocol``: ``client`` when given (checked), else the default."""
    if client is None:
        return clients_for(protocol)[0].name if clients_for(protocol) else protocol
    if ":" in client:
        return client  # a plugin client, "module:Factory"; its protocol is its own business
    entry = client_entry(client)
    if entry.protocol != protocol:
        raise ScenarioError(
            f"client {client!r} speaks {entry.protocol}, but the target speaks {protocol}"
        )
    return client


def get_transport(name: str) -> Transport:
    """Instantiate the client registered as ``name`` (or a plugin given as ``module:Factory``)."""
    target = name if ":" in name else client_entry(name).target
    module_name, attr = target.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise TransportError(
            f"client {name!r} is not available in this installation ({exc.name} is missing)"
        ) from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise TransportError(f"client {name!r}: {module_name} has no {attr!r}")
    transport: Transport = factory()
    if not isinstance(getattr(transport, "capabilities", None), TransportCapabilities):
        raise TransportError(
            f"client {name!r}: {target} declares no capabilities "
            "(a transports.base.TransportCapabilities; docs/extending.md)"
        )
    return transport
