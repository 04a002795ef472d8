"""Native broker specs, one module per broker; ``native_specs()`` lists them by name."""

from __future__ import annotations

from mqbench.brokers.specs.base import NativeSpec


def native_specs() -> dict[str, NativeSpec]:
    """Every native spec mqbench ships, by spec name."""
    from mqbench.brokers.specs.activemq import ActiveMqSpec
    from mqbench.brokers.specs.mosquitto import MosquittoSpec
    from mqbench.brokers.specs.nats import NatsSpec
    from mqbench.brokers.specs.rabbitmq import RabbitMqSpec
    from mqbench.brokers.specs.redis import RedisSpec
    from mqbench.brokers.specs.tbmq_style import TbmqStyleSpec
    from mqbench.brokers.specs.zenoh import ZenohSpec

    specs: list[NativeSpec] = [MosquittoSpec(), NatsSpec()]
    specs += [RabbitMqSpec("mqtt"), RabbitMqSpec("amqp"), ActiveMqSpec()]
    specs += [RedisSpec(), ZenohSpec()]
    specs.append(TbmqStyleSpec())
    return {spec.name: spec for spec in specs}
