"""The stock-library clients (redis-py, nats-py) behind the transport contract."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable

import pytest

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.format import pack_header
from mqbench.transports.base import Client, ClientOptions
from mqbench.transports.events import ClientEvent, Connected, Disconnected
from mqbench.transports.registry import get_transport

pytestmark = pytest.mark.integration

NativeBrokerFactory = Callable[..., RunningBroker]
CLIENTS = {"redis-py": "redis", "nats-py": "nats"}
"""Alternative client -> the target it talks to."""


@pytest.fixture(scope="module")
def brokers(module_broker: NativeBrokerFactory) -> dict[str, RunningBroker]:
    """One redis-server and one nats-server for the module, started on first use."""
    started: dict[str, RunningBroker] = {}

    class Lazy(dict[str, RunningBroker]):
        def __missing__(self, target: str) -> RunningBroker:
            started[target] = module_broker(target)
            return started[target]

    return Lazy()


def make(
    name: str,
    endpoint: Endpoint,
    events: list[ClientEvent] | None = None,
    timeout_s: float = 5.0,
) -> Client:
    on_event = None if events is None else events.append
    options = ClientOptions(client_id=f"alt-{name}", connect_timeout_s=timeout_s, on_event=on_event)
    return get_transport(name).create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    return [pack_header(5, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_a_thousand_messages_each_way_between_the_stock_and_the_lean_client_arrive_intact(
    name: str, brokers: dict[str, RunningBroker]
) -> None:
    endpoint = brokers[CLIENTS[name]].endpoint
    lean = CLIENTS[name]
    topic_a, topic_b = f"alt.{name}.a", f"alt.{name}.b"
    sent_a, sent_b = payloads(1000), payloads(1000)

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        got_a: list[bytes] = []
        got_b: list[bytes] = []
        stock_sub, stock_pub = make(name, endpoint), make(name, endpoint)
        lean_sub, lean_pub = make(lean, endpoint), make(lean, endpoint)
        for client in (stock_sub, stock_pub, lean_sub, lean_pub):
            await client.connect()
        await stock_sub.subscribe(topic_a, 0, lambda p, t: got_a.append(bytes(p)))
        await lean_sub.subscribe(topic_b, 0, lambda p, t: got_b.append(bytes(p)))
        send_a = lean_pub.sender(topic_a, 0)
        send_b = stock_pub.sender(topic_b, 0)
        for i in range(1000):
            assert send_a(sent_a[i], i)
            assert send_b(sent_b[i], i)
        await lean_pub.flush(10)
        await stock_pub.flush(10)
        for _ in range(200):  # bounded: at most ~10 s
            if len(got_a) == len(got_b) == 1000:
                break
            await asyncio.sleep(0.05)
        for client in (stock_sub, stock_pub, lean_sub, lean_pub):
            await client.close()
        return got_a, got_b

    got_a, got_b = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert got_a == sent_a
    assert got_b == sent_b


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_a_one_mib_payload_round_trips_through_the_stock_client(
    name: str, brokers: dict[str, RunningBroker]
) -> None:
    endpoint = brokers[CLIENTS[name]].endpoint
    big = os.urandom((1 << 20) - 64)  # below NATS's default max_payload of 1 MiB

    async def scenario() -> list[bytes]:
        got: list[bytes] = []
        sub, pub = make(name, endpoint), make(name, endpoint)
        await sub.connect()
        await pub.connect()
        await sub.subscribe(f"alt.big.{name}", 0, lambda p, t: got.append(bytes(p)))
        assert pub.sender(f"alt.big.{name}", 0)(big, 0)
        await pub.flush(10)
        for _ in range(200):  # bounded: at most ~10 s
            if got:
                break
            await asyncio.sleep(0.05)
        await pub.close()
        await sub.close()
        return got

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == [big]


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_a_closed_port_is_a_transport_error_within_the_timeout(name: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = make(name, Endpoint("127.0.0.1", port), timeout_s=3.0)
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        asyncio.run(client.connect())
    assert time.monotonic() - started < 3.0
    where = f"127.0.0.1:{port}"
    assert str(info.value) == f"cannot connect to {CLIENTS[name]} at {where}: connection refused"
    assert not client.connected


@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_close_is_clean_idempotent_and_reported(
    name: str, brokers: dict[str, RunningBroker]
) -> None:
    endpoint = brokers[CLIENTS[name]].endpoint
    events: list[ClientEvent] = []

    async def scenario() -> tuple[bool, bool]:
        client = make(name, endpoint, events)
        await client.connect()
        send = client.sender("alt.close", 0)
        assert send(b"x" * 24, 0)
        await client.close()
        await client.close()
        await client.flush(1)
        return client.connected, send(b"after", 1)

    connected, sent_after = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert not connected
    assert not sent_after
    assert [type(e) for e in events] == [Connected, Disconnected]
    assert events[1].expected is True
