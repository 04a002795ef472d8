"""Native broker specs, one module per broker; ``native_specs()`` lists them by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mqbench.brokers.native_spec import NativeSpec

if TYPE_CHECKING:
    from mqbench.brokers.maven import JavaDistribution


def native_specs() -> dict[str, NativeSpec]:
    """Every native spec mqbench ships, by spec name."""
    from mqbench.brokers.specs.activemq import ActiveMqSpec
    from mqbench.brokers.specs.artemis import ArtemisSpec
    from mqbench.brokers.specs.hivemq import HiveMqSpec
    from mqbench.brokers.specs.mosquitto import MosquittoSpec
    from mqbench.brokers.specs.nats import NatsSpec
    from mqbench.brokers.specs.rabbitmq import RabbitMqSpec
    from mqbench.brokers.specs.redis import RedisSpec
    from mqbench.brokers.specs.tbmq_style import TbmqStyleSpec
    from mqbench.brokers.specs.zenoh import ZenohSpec

    specs: list[NativeSpec] = [MosquittoSpec(), NatsSpec()]
    specs += [RabbitMqSpec("mqtt"), RabbitMqSpec("amqp"), ActiveMqSpec()]
    specs += [HiveMqSpec(), ArtemisSpec()]
    specs += [RedisSpec(), ZenohSpec()]
    specs.append(TbmqStyleSpec())
    return {spec.name: spec for spec in specs}


def maven_distributions() -> dict[str, JavaDistribution]:
    """The Java brokers fetched from Maven Central, by spec name (``mqbench brokers fetch``)."""
    from mqbench.brokers.jvm import MavenJvmSpec

    return {
        name: spec.distribution
        for name, spec in native_specs().items()
        if isinstance(spec, MavenJvmSpec)
    }
