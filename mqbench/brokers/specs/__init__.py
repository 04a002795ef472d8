"""Native broker specs, one module per broker; ``native_specs()`` lists them by name."""

from __future__ import annotations

from mqbench.brokers.specs.base import NativeSpec


def native_specs() -> dict[str, NativeSpec]:
    """Every native spec mqbench ships, by spec name."""
    from mqbench.brokers.specs.mosquitto import MosquittoSpec
    from mqbench.brokers.specs.nats import NatsSpec

    specs: list[NativeSpec] = [MosquittoSpec(), NatsSpec()]
    return {spec.name: spec for spec in specs}
