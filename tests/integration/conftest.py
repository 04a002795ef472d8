"""Fixtures that start real brokers on 127.0.0.1 for integration tests.

``native_broker(target)`` starts a target with the native runtime in a fresh directory
under ``tmp_path`` and stops it at teardown, even when the test fails. ``mosquitto`` and
``nats`` are shortcuts. A missing broker executable skips the test with the install hint;
any other start failure fails the test.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbench.brokers.base import BrokerSecurity, RunningBroker, StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.endpoint import Endpoint

NativeBrokerFactory = Callable[..., RunningBroker]


@pytest.fixture(autouse=True, scope="module")
def garbage_collected_within_the_module() -> Iterator[None]:
    """Finalise each integration module's garbage before the next module starts.

    ResourceWarnings are errors everywhere (pyproject.toml). An unclosed socket or event
    loop an integration test drops is otherwise finalised by whatever collection comes
    next, perhaps in another module's test. The CI of 242de39 failed that way: a collection
    inside ``ast.parse`` in a unit test turned three integration leftovers into errors (and
    CPython 3.11's compiler into a SystemError). Collected here, a leak fails the last test
    of the module that made it.
    """
    yield
    gc.collect()


@pytest.fixture
def native_broker(tmp_path: Path) -> Iterator[NativeBrokerFactory]:
    """Factory: ``native_broker(target, **options) -> RunningBroker``, stopped at teardown."""
    runtime = NativeRuntime()
    started: list[RunningBroker] = []

    def start(
        target: str, *, port: int | None = None, startup_timeout_s: float = 30.0, **options: Any
    ) -> RunningBroker:
        spec = runtime.spec_for(target)
        if spec.find_binary() is None:
            pytest.skip(spec.missing_reason())
        workdir = tmp_path / f"broker-{target}-{len(started)}"
        broker = runtime.start(
            StartRequest(
                target=target,
                workdir=workdir,
                port=port,
                options=options,
                startup_timeout_s=startup_timeout_s,
            )
        )
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in reversed(started):
            broker.stop()


@pytest.fixture
def mosquitto(native_broker: NativeBrokerFactory) -> RunningBroker:
    """A native mosquitto on a free loopback port (stopped at teardown)."""
    return native_broker("mosquitto")


@pytest.fixture
def nats(native_broker: NativeBrokerFactory) -> RunningBroker:
    """A native nats-server on a free loopback port (stopped at teardown)."""
    return native_broker("nats")


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeBrokerFactory]:
    """Like ``native_broker`` but shared by a test module: started once, stopped at its end.

    Use it for brokers that tests only connect to (not stop or reconfigure), to keep the
    integration suite fast.
    """
    runtime = NativeRuntime()
    started: list[RunningBroker] = []
    base = tmp_path_factory.mktemp("module-brokers")

    def start(
        target: str,
        *,
        startup_timeout_s: float = 30.0,
        security: BrokerSecurity | None = None,
        **options: Any,
    ) -> RunningBroker:
        spec = runtime.spec_for(target)
        if spec.find_binary() is None:
            pytest.skip(spec.missing_reason())
        broker = runtime.start(
            StartRequest(
                target=target,
                workdir=base / f"broker-{target}-{len(started)}",
                options=options,
                startup_timeout_s=startup_timeout_s,
                security=security,
            )
        )
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in reversed(started):
            broker.stop()


# --- RabbitMQ and ActiveMQ: one broker per test module ---------------------------
# RabbitMQ boots in ~5-20 s, so a module shares one node; its tests must not depend on each
# other's state (every client uses its own routing keys / topics and exclusive queues).


@pytest.fixture(scope="module")
def rabbitmq(module_broker: NativeBrokerFactory) -> RunningBroker:
    """A native RabbitMQ node (target ``rabbitmq-mqtt``) shared by the test module.

    ``endpoint`` is its MQTT listener; the ``rabbitmq_amqp`` fixture is its AMQP listener.
    """
    return module_broker("rabbitmq-mqtt", startup_timeout_s=120.0)


@pytest.fixture(scope="module")
def rabbitmq_amqp(rabbitmq: RunningBroker) -> Endpoint:
    """The AMQP 0-9-1 listener of the module's RabbitMQ node."""
    return Endpoint(rabbitmq.endpoint.host, int(rabbitmq.info.settings["amqp_port"]))


@pytest.fixture(scope="module")
def activemq(module_broker: NativeBrokerFactory) -> RunningBroker:
    """A native ActiveMQ Classic with one MQTT connector, shared by the test module."""
    return module_broker("activemq", startup_timeout_s=60.0)


# --- HiveMQ CE and Artemis (Maven Central jars): one JVM per test module ------------------


@pytest.fixture(scope="module")
def hivemq(module_broker: NativeBrokerFactory) -> RunningBroker:
    """A native embedded HiveMQ CE with one loopback listener, shared by the test module."""
    return module_broker("hivemq", startup_timeout_s=60.0)


@pytest.fixture(scope="module")
def artemis(module_broker: NativeBrokerFactory) -> RunningBroker:
    """A native embedded ActiveMQ Artemis with one MQTT acceptor, shared by the test module."""
    return module_broker("artemis", startup_timeout_s=60.0)
