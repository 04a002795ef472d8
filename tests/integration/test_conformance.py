"""Transport conformance over every target whose broker runs natively on this machine.

Each target's default client, against the broker mqbench starts for that target, must:
connect; subscribe before anyone publishes; carry N messages each way at QoS 0 and a low
rate with nothing lost, in order and intact; carry a 1 MiB payload; reconnect under the
same identity and work again; close cleanly; and fail with a clear TransportError within
a bounded time when the broker is unreachable (refused, or a listener that never answers).
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbench.brokers.base import RunningBroker, StartRequest
from mqbench.brokers.native import NativeRuntime
from mqbench.brokers.targets import get_target
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.transports.base import Client, ClientOptions, Transport
from mqbench.transports.registry import get_transport, resolve_client

pytestmark = pytest.mark.integration

TARGETS = [
    "mosquitto",
    "nats",
    "redis",
    "zenoh",
    "rabbitmq-mqtt",
    "rabbitmq-amqp",
    "activemq",
    "tbmq-style",
    # The Java brokers from Maven Central: one JVM per broker for the whole module.
    pytest.param("hivemq", marks=pytest.mark.slow),
    pytest.param("artemis", marks=pytest.mark.slow),
]
SLOW_BOOT = {
    "rabbitmq-mqtt": 120.0,
    "rabbitmq-amqp": 120.0,
    "activemq": 60.0,
    "hivemq": 60.0,
    "artemis": 60.0,
}
N = 200
MIB = 1024 * 1024


class Conformance:
    """One target's broker and its default client."""

    def __init__(self, target: str, broker: RunningBroker) -> None:
        self.target = target
        self.broker = broker
        self.client_name = resolve_client(get_target(target).transport, None)
        self.transport: Transport = get_transport(self.client_name)
        self._ids = 0

    def client(self, client_id: str | None = None, endpoint: Endpoint | None = None) -> Client:
        self._ids += 1
        options = ClientOptions(
            client_id=client_id or f"conf-{os.getpid()}-{self._ids}", connect_timeout_s=2.0
        )
        return self.transport.create_client(endpoint or self.broker.endpoint, options)


@pytest.fixture(scope="module", params=TARGETS)
def conf(request: pytest.FixtureRequest) -> Iterator[Conformance]:
    target = request.param
    runtime = NativeRuntime()
    spec = runtime.spec_for(target)
    if spec.find_binary() is None:
        pytest.skip(f"{target}: {spec.missing_reason()}")
    with tempfile.TemporaryDirectory(prefix=f"mqbench-conf-{target}-") as tmp:
        broker = runtime.start(
            StartRequest(
                target=target,
                workdir=Path(tmp),
                options={},
                startup_timeout_s=SLOW_BOOT.get(target, 30.0),
            )
        )
        try:
            yield Conformance(target, broker)
        finally:
            broker.stop()


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


async def wait_for_count(box: list[bytes], count: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(box) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def payload(i: int, size: int = 64) -> bytes:
    head = f"{i:08d}".encode()
    return head + bytes((i + k) % 251 for k in range(size - len(head)))


def test_messages_flow_each_way_with_none_lost_in_order_and_intact(conf: Conformance) -> None:
    async def scenario() -> None:
        # Separate publishing and subscribing connections: a subscribed Redis (RESP2)
        # connection cannot publish, and the engine never mixes the roles either.
        a_sub, a_pub, b_sub, b_pub = (conf.client() for _ in range(4))
        for c in (a_sub, a_pub, b_sub, b_pub):
            await c.connect()
        got_a: list[bytes] = []
        got_b: list[bytes] = []
        topic = f"conf-{os.getpid()}-each-way"
        # Subscribed (confirmed by the broker) before anyone publishes.
        await a_sub.subscribe(topic + "-to-a", 0, lambda p, t: got_a.append(bytes(p)))
        await b_sub.subscribe(topic + "-to-b", 0, lambda p, t: got_b.append(bytes(p)))
        to_b, to_a = a_pub.sender(topic + "-to-b", 0), b_pub.sender(topic + "-to-a", 0)
        for i in range(N):
            assert to_b(payload(i), i)
            assert to_a(payload(N + i), i)
            await asyncio.sleep(0.002)  # ~500 msg/s each way: a low, steady rate
        await a_pub.flush(5)
        await b_pub.flush(5)
        await wait_for_count(got_a, N)
        await wait_for_count(got_b, N)
        for c in (a_sub, a_pub, b_sub, b_pub):
            await c.close()
        assert got_b == [payload(i) for i in range(N)]
        assert got_a == [payload(N + i) for i in range(N)]

    run(scenario())


def test_a_one_mebibyte_payload_arrives_intact(conf: Conformance) -> None:
    async def scenario() -> None:
        sub, pub = conf.client(), conf.client()
        await sub.connect()
        await pub.connect()
        got: list[bytes] = []
        topic = f"conf-{os.getpid()}-big"
        await sub.subscribe(topic, 0, lambda p, t: got.append(bytes(p)))
        big = payload(7, MIB)
        assert pub.sender(topic, 0)(big, 0)
        await pub.flush(10)
        await wait_for_count(got, 1, timeout_s=20)
        await pub.close()
        await sub.close()
        assert len(got) == 1 and got[0] == big

    run(scenario())


def test_a_client_reconnects_under_the_same_identity_and_works_again(
    conf: Conformance,
) -> None:
    async def scenario() -> None:
        identity = f"conf-{os.getpid()}-same-id"
        topic = f"conf-{os.getpid()}-reconnect"
        pub = conf.client()
        await pub.connect()
        for round_ in range(2):
            sub = conf.client(identity)
            await sub.connect()
            got: list[bytes] = []
            await sub.subscribe(topic, 0, lambda p, t, box=got: box.append(bytes(p)))
            send = pub.sender(topic, 0)
            for i in range(20):
                assert send(payload(i), i)
            await pub.flush(5)
            await wait_for_count(got, 20)
            assert got == [payload(i) for i in range(20)], f"round {round_}"
            await sub.close()
            assert not sub.connected
        await pub.close()

    run(scenario())


def test_close_is_clean_and_leaves_the_broker_serving_others(conf: Conformance) -> None:
    async def scenario() -> None:
        leaving, staying, pub = conf.client(), conf.client(), conf.client()
        for c in (leaving, staying, pub):
            await c.connect()
        topic = f"conf-{os.getpid()}-close"
        got: list[bytes] = []
        await staying.subscribe(topic, 0, lambda p, t: got.append(bytes(p)))
        started = time.monotonic()
        await leaving.close()
        assert time.monotonic() - started < 5
        assert not leaving.connected
        await leaving.close()  # idempotent, never raises
        assert pub.sender(topic, 0)(payload(1), 1)
        await pub.flush(5)
        await wait_for_count(got, 1)
        assert got == [payload(1)]
        assert staying.connected
        await staying.close()
        await pub.close()

    run(scenario())


def test_an_unreachable_broker_is_a_clear_error_within_the_connect_timeout(
    conf: Conformance,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts TCP, never speaks the protocol
    try:
        for endpoint in (Endpoint("127.0.0.1", closed_port), Endpoint(*silent.getsockname())):

            async def attempt(ep: Endpoint = endpoint) -> None:
                client = conf.client(endpoint=ep)
                started = time.monotonic()
                with pytest.raises(TransportError) as info:
                    await client.connect()
                assert time.monotonic() - started < 2.0 + 3.0
                message = str(info.value)
                assert str(ep.port) in message, message
                assert "\n" not in message
                assert not client.connected
                await client.close()

            run(attempt())
    finally:
        silent.close()
