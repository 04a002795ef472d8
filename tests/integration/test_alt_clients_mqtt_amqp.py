"""Stock-library clients (paho, aiomqtt, aio-pika) and the lean clients, through RabbitMQ and
ActiveMQ Classic.

Oracles: raw paho-mqtt (its own network thread, outside mqbench's transports) for MQTT,
raw aio-pika for AMQP. The alternative transports are checked against the lean clients,
which are checked against the oracles. One RabbitMQ node and one ActiveMQ serve the module.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aio_pika
import paho.mqtt.client as paho
import pytest
from loops import run as run_on
from loops import wait_until as poll_until
from paho.mqtt.enums import CallbackAPIVersion
from paho_clients import stop_paho

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.format import pack_header
from mqbench.transports.base import Client, ClientOptions
from mqbench.transports.registry import get_transport

pytestmark = pytest.mark.integration

MQTT_BROKERS = ["rabbitmq", "activemq"]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return run_on("uvloop", coro)


def client(name: str, endpoint: Endpoint, client_id: str, **extra: Any) -> Client:
    username = extra.pop("username", None) or extra.pop("user", None)
    password = extra.pop("password", None)
    options = ClientOptions(
        client_id=client_id,
        connect_timeout_s=5.0,
        extra=extra,
        username=username,
        password=password,
    )
    return get_transport(name).create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    return [pack_header(9, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


async def wait_until(condition: Callable[[], bool]) -> None:
    await poll_until(condition, timeout_s=20.0)


@pytest.fixture
def mqtt_broker(request: pytest.FixtureRequest) -> RunningBroker:
    """The module's rabbitmq or activemq, by parameter name."""
    broker: RunningBroker = request.getfixturevalue(request.param)
    return broker


class PahoOracle:
    """Raw paho-mqtt on its own network thread, collecting what it receives."""

    def __init__(self, endpoint: Endpoint, client_id: str) -> None:
        self.received: list[bytes] = []
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._subscribed = threading.Event()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
        self.client.on_connect = lambda c, u, f, rc, p: self._connected.set()
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self._subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect(endpoint.host, endpoint.port, keepalive=30)
        self.client.loop_start()
        if not self._connected.wait(10):
            self.stop()
            raise AssertionError("paho could not connect")

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self._lock:
            self.received.append(bytes(msg.payload))

    def subscribe(self, topic: str, qos: int) -> None:
        self.client.subscribe(topic, qos)
        assert self._subscribed.wait(10), "paho got no SUBACK"

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def stop(self) -> None:
        stop_paho(self.client)


# ------------------------------------------------------------------ MQTT: lean client vs paho


@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("mqtt_broker", MQTT_BROKERS, indirect=True)
def test_lean_mqtt_client_and_paho_exchange_1000_messages_each_way_intact(
    mqtt_broker: RunningBroker, qos: int
) -> None:
    to_paho, to_ours = payloads(1000), payloads(1000)
    tag = f"{mqtt_broker.info.name}-{qos}"
    oracle = PahoOracle(mqtt_broker.endpoint, f"oracle-{tag}")
    try:
        oracle.subscribe(f"alt/to-paho/{tag}", 1)

        async def scenario() -> list[bytes]:
            received: list[bytes] = []
            ours = client("mqtt", mqtt_broker.endpoint, f"ours-{tag}")
            await ours.connect()
            await ours.subscribe(f"alt/to-ours/{tag}", qos, lambda p, t: received.append(bytes(p)))
            send = ours.sender(f"alt/to-paho/{tag}", qos)
            assert all(send(p, i) for i, p in enumerate(to_paho))
            for p in to_ours:
                assert oracle.client.publish(f"alt/to-ours/{tag}", p, qos).rc == 0
            await ours.flush(20)
            await wait_until(lambda: oracle.count() >= 1000 and len(received) >= 1000)
            await ours.close()
            return received

        received = run(scenario())
    finally:
        oracle.stop()
    assert oracle.received == to_paho
    assert received == to_ours


# ------------------------------------------------------------------ alternative MQTT clients


@pytest.mark.parametrize("name", ["paho", "aiomqtt"])
@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("mqtt_broker", MQTT_BROKERS, indirect=True)
def test_alt_mqtt_client_exchanges_1000_messages_each_way_with_the_lean_client(
    mqtt_broker: RunningBroker, qos: int, name: str
) -> None:
    to_alt, to_lean = payloads(1000), payloads(1000)
    tag = f"{mqtt_broker.info.name}-{name}-{qos}"

    async def scenario() -> tuple[list[bytes], list[bytes], list[int]]:
        got_alt: list[bytes] = []
        got_lean: list[bytes] = []
        acks: list[int] = []
        alt = client(name, mqtt_broker.endpoint, f"alt-{tag}")
        lean = client("mqtt", mqtt_broker.endpoint, f"lean-{tag}")
        await alt.connect()
        await lean.connect()
        await alt.subscribe(f"alt/a/{tag}", qos, lambda p, t: got_alt.append(bytes(p)))
        await lean.subscribe(f"alt/l/{tag}", qos, lambda p, t: got_lean.append(bytes(p)))
        alt.set_ack_handler(lambda tag, t: acks.append(tag))
        to_a, from_a = lean.sender(f"alt/a/{tag}", qos), alt.sender(f"alt/l/{tag}", qos)
        for i in range(1000):
            assert to_a(to_alt[i], i)
            assert from_a(to_lean[i], i)
        await alt.flush(30)
        await lean.flush(30)
        await wait_until(lambda: len(got_alt) >= 1000 and len(got_lean) >= 1000)
        assert alt.connected
        await alt.close()
        await lean.close()
        assert not alt.connected
        return got_alt, got_lean, acks

    got_alt, got_lean, acks = run(scenario())
    assert got_alt == to_alt
    # paho and aiomqtt keep the order of QoS 0 publishes; QoS 1 may reorder on retry only.
    assert got_lean == to_lean
    assert sorted(acks) == (list(range(1000)) if qos else [])


@pytest.mark.parametrize("name", ["mqtt", "paho", "aiomqtt"])
@pytest.mark.parametrize("mqtt_broker", MQTT_BROKERS, indirect=True)
def test_a_one_mib_payload_crosses_the_mqtt_broker_intact(
    mqtt_broker: RunningBroker, name: str
) -> None:
    big = os.urandom(1 << 20)
    tag = f"{mqtt_broker.info.name}-{name}"
    oracle = PahoOracle(mqtt_broker.endpoint, f"big-oracle-{tag}")
    try:
        oracle.subscribe(f"alt/big/{tag}", 1)

        async def scenario() -> None:
            c = client(name, mqtt_broker.endpoint, f"big-{tag}")
            await c.connect()
            assert c.sender(f"alt/big/{tag}", 1)(big, 1)
            await c.flush(20)
            await wait_until(lambda: oracle.count() >= 1)
            await c.close()

        run(scenario())
    finally:
        oracle.stop()
    assert oracle.received == [big]


@pytest.mark.parametrize("name", ["mqtt", "paho", "aiomqtt"])
def test_wrong_mqtt_credentials_on_rabbitmq_fail_with_a_clear_error(
    rabbitmq: RunningBroker, name: str
) -> None:
    c = client(name, rabbitmq.endpoint, f"bad-{name}", username="guest", password="wrong")
    with pytest.raises(TransportError) as excinfo:
        run(c.connect())
    message = str(excinfo.value)
    assert "refused the connection of" in message
    assert "user name or password" in message.lower() or "not authori" in message.lower()
    assert "\n" not in message


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("name", ["paho", "aiomqtt", "aio-pika"])
def test_alt_clients_report_a_closed_port_as_transport_error_within_the_timeout(
    name: str,
) -> None:
    c = client(name, Endpoint("127.0.0.1", closed_port()), f"closed-{name}")
    started = time.monotonic()
    with pytest.raises(TransportError, match="connection refused"):
        run(c.connect())
    assert time.monotonic() - started < 5


# ------------------------------------------------------------------ AMQP: aio-pika


@pytest.mark.parametrize("qos", [0, 1])
def test_aio_pika_client_and_lean_amqp_client_exchange_1000_messages_each_way(
    rabbitmq_amqp: Endpoint, qos: int
) -> None:
    to_pika, to_lean = payloads(1000), payloads(1000)

    async def scenario() -> tuple[list[bytes], list[bytes], list[int]]:
        got_pika: list[bytes] = []
        got_lean: list[bytes] = []
        acks: list[int] = []
        pika = client("aio-pika", rabbitmq_amqp, f"pika-{qos}")
        lean = client("amqp", rabbitmq_amqp, f"lean-{qos}")
        await pika.connect()
        await lean.connect()
        await pika.subscribe(f"pk.p.{qos}", qos, lambda p, t: got_pika.append(bytes(p)))
        await lean.subscribe(f"pk.l.{qos}", qos, lambda p, t: got_lean.append(bytes(p)))
        pika.set_ack_handler(lambda tag, t: acks.append(tag))
        to_p, from_p = lean.sender(f"pk.p.{qos}", qos), pika.sender(f"pk.l.{qos}", qos)
        for i in range(1000):
            assert to_p(to_pika[i], i)
            assert from_p(to_lean[i], i)
        await pika.flush(30)
        await lean.flush(30)
        await wait_until(lambda: len(got_pika) >= 1000 and len(got_lean) >= 1000)
        await pika.close()
        await lean.close()
        return got_pika, got_lean, acks

    got_pika, got_lean, acks = run(scenario())
    assert got_pika == to_pika
    assert sorted(got_lean) == sorted(to_lean)  # one task per publish: order not promised
    assert sorted(acks) == (list(range(1000)) if qos else [])


def test_aio_pika_client_carries_a_one_mib_payload_checked_by_raw_aio_pika(
    rabbitmq_amqp: Endpoint,
) -> None:
    big = os.urandom(1 << 20)

    async def scenario() -> list[bytes]:
        received: list[bytes] = []
        raw = await aio_pika.connect(
            f"amqp://guest:guest@{rabbitmq_amqp.host}:{rabbitmq_amqp.port}/"
        )
        channel = await raw.channel()
        exchange = await channel.declare_exchange("mqbench", aio_pika.ExchangeType.DIRECT)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        await queue.bind(exchange, routing_key="pk.big")

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received.append(message.body)

        await queue.consume(on_message, no_ack=True)
        pika = client("aio-pika", rabbitmq_amqp, "pika-big")
        await pika.connect()
        assert pika.sender("pk.big", 1)(big, 1)
        await pika.flush(20)
        await wait_until(lambda: bool(received))
        await pika.close()
        await raw.close()
        return received

    assert run(scenario()) == [big]


def test_aio_pika_client_reports_wrong_credentials_clearly(rabbitmq_amqp: Endpoint) -> None:
    c = client("aio-pika", rabbitmq_amqp, "pika-bad", user="guest", password="wrong")
    with pytest.raises(TransportError, match=r"refused the login of user 'guest'.*ACCESS_REFUSED"):
        run(c.connect())
