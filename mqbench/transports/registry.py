"""Transport registry: name -> implementation, imported lazily so a run loads only what it uses."""

from __future__ import annotations

import importlib

from mqbench.errors import ScenarioError
from mqbench.transports.base import Transport

# name -> "module:attribute" (attribute is a Transport instance or a zero-argument factory)
_REGISTRY: dict[str, str] = {
    "mqtt": "mqbench.transports.mqtt:MqttTransport",
    "nats": "mqbench.transports.nats:NatsTransport",
}


def transport_names() -> list[str]:
    """All registered transport names."""
    return sorted(_REGISTRY)


def get_transport(name: str) -> Transport:
    """Instantiate the transport registered as ``name``."""
    try:
        target = _REGISTRY[name]
    except KeyError:
        known = ", ".join(transport_names())
        raise ScenarioError(f"unknown transport {name!r} (known: {known})") from None
    module_name, attr = target.split(":")
    factory = getattr(importlib.import_module(module_name), attr)
    transport: Transport = factory()
    return transport
