"""The lean AMQP client against a real RabbitMQ, with aio-pika as the interoperability oracle.

One RabbitMQ node serves the whole module (fixture ``rabbitmq``); every test uses its own
routing keys, so tests stay independent.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from typing import Any

import aio_pika
import pytest
from loops import LOOPS, run, wait_until

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.format import pack_header, unpack_header
from mqbench.transports.amqp import AmqpClient, AmqpTransport
from mqbench.transports.base import ClientOptions
from mqbench.transports.events import ClientEvent, Connected, Disconnected, Subscribed

pytestmark = pytest.mark.integration

Events = list[ClientEvent]


def make_client(
    endpoint: Endpoint,
    name: str = "ours",
    events: Events | None = None,
    timeout_s: float = 5.0,
    keepalive_s: int = 60,
    **extra: Any,
) -> AmqpClient:
    on_event = None if events is None else events.append
    username = extra.pop("username", None) or extra.pop("user", None)
    password = extra.pop("password", None)
    options = ClientOptions(
        client_id=name,
        keepalive_s=keepalive_s,
        connect_timeout_s=timeout_s,
        on_event=on_event,
        extra=extra,
        username=username,
        password=password,
    )
    return AmqpTransport().create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    """Distinct payloads: the wire header, then random bytes (including 0xCE)."""
    return [pack_header(5, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


def pika_url(endpoint: Endpoint) -> str:
    return f"amqp://guest:guest@{endpoint.host}:{endpoint.port}/"


async def pika_subscriber(
    endpoint: Endpoint, key: str, received: list[bytes]
) -> aio_pika.abc.AbstractConnection:
    """An aio-pika consumer on its own queue bound to ``mqbench`` with ``key``."""
    connection = await aio_pika.connect(pika_url(endpoint))
    channel = await connection.channel()
    exchange = await channel.declare_exchange("mqbench", aio_pika.ExchangeType.DIRECT)
    queue = await channel.declare_queue(exclusive=True, auto_delete=True)
    await queue.bind(exchange, routing_key=key)

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        received.append(message.body)

    await queue.consume(on_message, no_ack=True)
    return connection


@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_our_client_reach_aio_pika_intact_and_in_order(
    rabbitmq_amqp: Endpoint, loop_kind: str, qos: int
) -> None:
    sent = payloads(1000)
    key = f"ours-to-pika-{loop_kind}-{qos}"

    async def scenario() -> list[bytes]:
        received: list[bytes] = []
        oracle = await pika_subscriber(rabbitmq_amqp, key, received)
        client = make_client(rabbitmq_amqp)
        await client.connect()
        send = client.sender(key, qos)
        assert all(send(p, i) for i, p in enumerate(sent))
        await client.flush(10)
        await wait_until(lambda: len(received) >= len(sent))
        await client.close()
        await oracle.close()
        return received

    assert run(loop_kind, scenario()) == sent


@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_aio_pika_reach_our_client_intact_with_read_timestamps(
    rabbitmq_amqp: Endpoint, loop_kind: str, qos: int
) -> None:
    sent = payloads(1000)
    key = f"pika-to-ours-{loop_kind}-{qos}"

    async def scenario() -> tuple[list[bytes], list[int], int, int]:
        received: list[bytes] = []
        stamps: list[int] = []

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            received.append(bytes(payload))
            stamps.append(t_recv_ns)

        client = make_client(rabbitmq_amqp, prefetch=50)
        await client.connect()
        await client.subscribe(key, qos, on_message)
        connection = await aio_pika.connect(pika_url(rabbitmq_amqp))
        channel = await connection.channel()
        exchange = await channel.get_exchange("mqbench")
        before = time.time_ns()
        for p in sent:
            await exchange.publish(aio_pika.Message(p), routing_key=key)
        # With prefetch 50, QoS 1 only completes if our batched acks reach the broker.
        await wait_until(lambda: len(received) >= len(sent))
        after = time.time_ns()
        await connection.close()
        await client.close()
        return received, stamps, before, after

    received, stamps, before, after = run(loop_kind, scenario())
    assert received == sent
    assert [unpack_header(p)[1] for p in received] == list(range(len(sent)))
    assert all(before <= t <= after for t in stamps)
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_qos1_ack_handler_is_called_once_per_tag_and_flush_waits_for_all_confirms(
    rabbitmq_amqp: Endpoint, loop_kind: str
) -> None:
    async def scenario() -> tuple[list[int], int, int]:
        acks: list[int] = []
        client = make_client(rabbitmq_amqp)
        await client.connect()
        client.set_ack_handler(lambda tag, t: acks.append(tag))
        send = client.sender(f"confirms-{loop_kind}", 1)
        for i in range(3000):
            assert send(b"x" * 64, 10_000 + i)
        await client.flush(10)
        inflight = client.inflight
        await client.close()
        return acks, inflight, client.nacked

    acks, inflight, nacked = run(loop_kind, scenario())
    assert sorted(acks) == [10_000 + i for i in range(3000)]
    assert (inflight, nacked) == (0, 0)


def test_one_mib_payloads_cross_in_both_directions_split_into_frames(
    rabbitmq_amqp: Endpoint,
) -> None:
    big = [os.urandom(1 << 20), os.urandom((1 << 20) - 7)]

    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        ours: list[bytes] = []
        theirs: list[bytes] = []
        oracle = await pika_subscriber(rabbitmq_amqp, "big-ours", theirs)
        client = make_client(rabbitmq_amqp)
        await client.connect()
        await client.subscribe("big-pika", 1, lambda p, t: ours.append(bytes(p)))
        send = client.sender("big-ours", 1)
        for i, p in enumerate(big):
            assert send(p, i)
        channel = await oracle.channel()
        exchange = await channel.get_exchange("mqbench")
        for p in big:
            await exchange.publish(aio_pika.Message(p), routing_key="big-pika")
        await client.flush(20)
        await wait_until(lambda: len(ours) == len(theirs) == len(big), 20)
        frame_max = client.frame_max
        await client.close()
        await oracle.close()
        return ours, theirs, frame_max

    ours, theirs, frame_max = run("uvloop", scenario())
    assert ours == big
    assert theirs == big
    assert 0 < frame_max < len(big[0])


def test_messages_for_two_subscriptions_of_one_client_reach_the_right_handler(
    rabbitmq_amqp: Endpoint,
) -> None:
    async def scenario() -> tuple[list[bytes], list[bytes]]:
        a: list[bytes] = []
        b: list[bytes] = []
        client = make_client(rabbitmq_amqp)
        await client.connect()
        await client.subscribe("two-a", 0, lambda p, t: a.append(bytes(p)))
        await client.subscribe("two-b", 1, lambda p, t: b.append(bytes(p)))
        send_a, send_b = client.sender("two-a", 0), client.sender("two-b", 1)
        for i in range(100):
            send_a(b"a%d" % i, i)
            send_b(b"b%d" % i, i)
        await wait_until(lambda: len(a) == len(b) == 100)
        await client.close()
        return a, b

    a, b = run("asyncio", scenario())
    assert a == [b"a%d" % i for i in range(100)]
    assert b == [b"b%d" % i for i in range(100)]


def test_events_report_connect_subscribe_and_an_expected_disconnect(
    rabbitmq_amqp: Endpoint,
) -> None:
    events: Events = []

    async def scenario() -> tuple[bool, bool]:
        client = make_client(rabbitmq_amqp, events=events)
        await client.connect()
        await client.subscribe("events", 0, lambda p, t: None)
        await client.close()
        await client.close()  # a second close is a no-op
        return client.connected, client.sender("events", 0)(b"x", 0)

    connected, handed_over = run("asyncio", scenario())
    assert [type(e) for e in events] == [Connected, Subscribed, Disconnected]
    assert events[0].server.startswith("RabbitMQ ")
    assert events[2].expected is True
    assert (connected, handed_over) == (False, False)


def test_heartbeats_keep_an_idle_connection_open_past_two_intervals(
    rabbitmq_amqp: Endpoint,
) -> None:
    async def scenario() -> tuple[int, bool, list[bytes]]:
        got: list[bytes] = []
        client = make_client(rabbitmq_amqp, keepalive_s=1)
        await client.connect()
        await client.subscribe("idle", 0, lambda p, t: got.append(bytes(p)))
        # RabbitMQ closes a connection after two missed 1 s heartbeats.
        await asyncio.sleep(3.5)
        still = client.connected
        client.sender("idle", 0)(b"alive", 0)
        await wait_until(lambda: bool(got), 5)
        heartbeat = client._heartbeat_s
        await client.close()
        return heartbeat, still, got

    heartbeat, still, got = run("uvloop", scenario())
    assert heartbeat == 1
    assert still
    assert got == [b"alive"]


def test_wrong_credentials_fail_with_a_clear_one_line_error(rabbitmq_amqp: Endpoint) -> None:
    client = make_client(rabbitmq_amqp, user="guest", password="wrong")
    with pytest.raises(TransportError) as excinfo:
        run("asyncio", client.connect())
    message = str(excinfo.value)
    assert "refused the login of user 'guest'" in message
    assert "ACCESS_REFUSED" in message
    assert "\n" not in message


def test_an_unknown_vhost_fails_with_the_brokers_reason(rabbitmq_amqp: Endpoint) -> None:
    client = make_client(rabbitmq_amqp, vhost="no-such-vhost")
    with pytest.raises(TransportError, match="NOT_ALLOWED - vhost no-such-vhost not found"):
        run("asyncio", client.connect())


def test_connecting_to_the_mqtt_port_fails_with_a_transport_error(rabbitmq: RunningBroker) -> None:
    client = make_client(rabbitmq.endpoint, timeout_s=3)
    with pytest.raises(TransportError, match="cannot connect to amqp broker"):
        run("asyncio", client.connect())


def test_wildcard_topics_are_rejected_because_routing_is_by_exact_key(
    rabbitmq_amqp: Endpoint,
) -> None:
    async def scenario() -> None:
        client = make_client(rabbitmq_amqp)
        await client.connect()
        try:
            with pytest.raises(TransportError, match="direct exchange"):
                await client.subscribe("bench/#", 0, lambda p, t: None)
            with pytest.raises(TransportError, match="direct exchange"):
                client.sender("bench/+", 0)
        finally:
            await client.close()

    run("asyncio", scenario())


def test_an_exchange_of_another_type_fails_connect_with_the_brokers_precondition_text(
    rabbitmq_amqp: Endpoint,
) -> None:
    async def scenario() -> None:
        raw = await aio_pika.connect(pika_url(rabbitmq_amqp))
        channel = await raw.channel()
        await channel.declare_exchange("mqbench-fanout", aio_pika.ExchangeType.FANOUT)
        try:
            client = make_client(rabbitmq_amqp, exchange="mqbench-fanout")
            with pytest.raises(TransportError) as excinfo:
                await client.connect()
            message = str(excinfo.value)
            assert "channel 1 closed: 406 PRECONDITION_FAILED" in message
            assert "inequivalent arg 'type'" in message
            assert "login" not in message
            assert not client.connected
        finally:
            await channel.exchange_delete("mqbench-fanout")
            await raw.close()

    run("asyncio", scenario())


def rabbitmqctl(broker: RunningBroker, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``rabbitmqctl`` against the module's node (its cookie, epmd port and node name)."""
    workdir = os.path.dirname(broker.info.log_path)
    settings = broker.info.settings
    env = {
        **os.environ,
        "HOME": workdir,
        "ERL_EPMD_PORT": str(settings["epmd_port"]),
        "RABBITMQ_CONF_ENV_FILE": os.path.join(workdir, "rabbitmq-env.conf"),
    }
    ctl = os.path.join(os.path.dirname(broker.info.binary), "rabbitmqctl")
    return subprocess.run(
        [ctl, "-n", settings["nodename"], *args], env=env, capture_output=True, timeout=60
    )


def test_a_connection_closed_by_the_broker_is_an_unexpected_disconnect_with_its_reason(
    rabbitmq: RunningBroker, rabbitmq_amqp: Endpoint
) -> None:
    events: Events = []

    async def scenario() -> tuple[bool, bool]:
        client = make_client(rabbitmq_amqp, name="to-be-closed", events=events)
        await client.connect()
        proc = await asyncio.to_thread(
            rabbitmqctl, rabbitmq, "close_all_connections", "closed by the test"
        )
        assert proc.returncode == 0, proc.stderr.decode()
        await wait_until(lambda: not client.connected, 10)
        handed_over = client.sender("closed", 0)(b"x", 0)
        await client.close()
        return client.connected, handed_over

    assert run("asyncio", scenario()) == (False, False)
    details = events[-1]
    assert isinstance(details, Disconnected)
    assert details.expected is False
    assert "320 CONNECTION_FORCED" in details.reason
    assert "closed by the test" in details.reason
