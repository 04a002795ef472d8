"""The lean Redis client against a real redis-server; redis-py is the interoperability oracle."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from loops import LOOPS, run

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.format import pack_header, unpack_header
from mqbench.transports.base import ClientOptions
from mqbench.transports.redis import RedisClient, RedisTransport
from mqbench.transports.registry import get_transport

pytestmark = pytest.mark.integration

PASSWORD = "s3cret pass"

NativeBrokerFactory = Callable[..., RunningBroker]


@pytest.fixture(scope="module")
def redis_broker(module_broker: NativeBrokerFactory) -> RunningBroker:
    """One redis-server for the module (tests use distinct channels)."""
    return module_broker("redis")


@pytest.fixture(scope="module")
def redis_with_password(module_broker: NativeBrokerFactory) -> RunningBroker:
    """A redis-server that requires ``PASSWORD``."""
    return module_broker("redis", password=PASSWORD)


def make_client(
    endpoint: Endpoint,
    name: str = "t",
    events: list[tuple[str, dict[str, Any]]] | None = None,
    timeout_s: float = 5.0,
    **extra: Any,
) -> RedisClient:
    on_event = None if events is None else (lambda kind, d: events.append((kind, d)))
    options = ClientOptions(
        client_id=name, connect_timeout_s=timeout_s, on_event=on_event, extra=extra
    )
    return RedisTransport().create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    """Distinct payloads: the wire header then random bytes (including CR and LF)."""
    return [pack_header(7, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


def oracle(broker: RunningBroker, **kwargs: Any) -> aioredis.Redis:
    return aioredis.Redis(host=broker.endpoint.host, port=broker.endpoint.port, **kwargs)


def test_registry_returns_the_redis_transport_with_qos_0_only() -> None:
    transport = get_transport("redis")
    assert (transport.name, transport.protocol, transport.max_qos) == ("redis", "redis", 0)


def test_native_redis_records_its_benchmark_settings(redis_broker: RunningBroker) -> None:
    info = redis_broker.info
    assert info["settings"]["client_output_buffer_limit_pubsub"] == "256mb 64mb 60"
    assert info["settings"]["save"] == "" and info["settings"]["appendonly"] is False
    assert "client-output-buffer-limit pubsub 256mb 64mb 60" in info["config"]
    assert info["version"].startswith("7.")

    async def config_get() -> dict[str, str]:
        client = oracle(redis_broker, decode_responses=True)
        try:
            found: dict[str, str] = {}
            for key in ("client-output-buffer-limit", "save", "appendonly", "protected-mode"):
                found.update(await client.config_get(key))
            return found
        finally:
            await client.aclose()

    live = run("asyncio", config_get())
    assert "pubsub 268435456 67108864 60" in live["client-output-buffer-limit"]
    assert (live["save"], live["appendonly"], live["protected-mode"]) == ("", "no", "yes")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_our_client_reach_redis_py_intact(
    redis_broker: RunningBroker, loop_kind: str
) -> None:
    sent = payloads(1000)
    channel = f"ours-{loop_kind}"

    async def scenario() -> tuple[list[bytes], Any]:
        sub = oracle(redis_broker)
        pubsub = sub.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(channel)
        await pubsub.get_message(timeout=5)  # the subscribe confirmation
        client = make_client(redis_broker.endpoint)
        await client.connect()
        send = client.sender(channel, 0)
        assert all(send(p, i) for i, p in enumerate(sent))
        await client.flush(5)
        received: list[bytes] = []
        for _ in range(len(sent) * 2):  # bounded
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
            if msg is None:
                break
            received.append(msg["data"])
            if len(received) == len(sent):
                break
        stats = client.publish_stats
        await client.close()
        await pubsub.aclose()
        await sub.aclose()
        return received, stats

    received, stats = run(loop_kind, scenario())
    assert received == sent
    assert (stats.published, stats.replies, stats.receivers, stats.unreceived) == (
        1000,
        1000,
        1000,
        0,
    )


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_redis_py_reach_our_client_intact_and_stamped(
    redis_broker: RunningBroker, loop_kind: str
) -> None:
    sent = payloads(1000)
    channel = f"theirs-{loop_kind}"

    async def scenario() -> tuple[list[bytes], list[int], int, int]:
        received: list[bytes] = []
        stamps: list[int] = []
        done = asyncio.Event()

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            received.append(bytes(payload))
            stamps.append(t_recv_ns)
            if len(received) == len(sent):
                done.set()

        client = make_client(redis_broker.endpoint)
        await client.connect()
        await client.subscribe(channel, 0, on_message)
        pub = oracle(redis_broker)
        before = time.time_ns()
        for p in sent:
            assert await pub.publish(channel, p) == 1
        await asyncio.wait_for(done.wait(), 10)
        after = time.time_ns()
        await pub.aclose()
        await client.close()
        return received, stamps, before, after

    received, stamps, before, after = run(loop_kind, scenario())
    assert received == sent
    assert [unpack_header(p)[1] for p in received] == list(range(len(sent)))
    assert all(before <= t <= after for t in stamps)
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_one_mib_payload_round_trips_between_our_clients(
    redis_broker: RunningBroker, loop_kind: str
) -> None:
    big = os.urandom(1 << 20)
    channel = f"big-{loop_kind}"

    async def scenario() -> list[bytes]:
        got: list[bytes] = []
        arrived = asyncio.Event()

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            got.append(bytes(payload))
            if len(got) == 2:
                arrived.set()

        sub = make_client(redis_broker.endpoint, "sub")
        pub = make_client(redis_broker.endpoint, "pub")
        await sub.connect()
        await pub.connect()
        await sub.subscribe(channel, 0, on_message)
        send = pub.sender(channel, 0)
        assert send(big, 0)
        assert send(big[:100], 1)
        await asyncio.wait_for(arrived.wait(), 10)
        await pub.close()
        await sub.close()
        return got

    assert run(loop_kind, scenario()) == [big, big[:100]]


def test_uncoalesced_writes_deliver_the_same_messages(redis_broker: RunningBroker) -> None:
    sent = payloads(200)

    async def scenario() -> list[bytes]:
        received: list[bytes] = []
        sub = make_client(redis_broker.endpoint, "sub")
        pub = make_client(redis_broker.endpoint, "pub", coalesce_writes=False)
        await sub.connect()
        await pub.connect()
        await sub.subscribe("direct", 0, lambda p, t: received.append(bytes(p)))
        send = pub.sender("direct", 0)
        for i, p in enumerate(sent):
            send(p, i)
        await pub.flush(5)
        await sub.flush(5)
        await pub.close()
        await sub.close()
        return received

    assert run("uvloop", scenario()) == sent


def test_publishes_nobody_receives_are_counted_and_reported_once(
    redis_broker: RunningBroker,
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    async def scenario() -> Any:
        client = make_client(redis_broker.endpoint, events=events)
        await client.connect()
        send = client.sender("nobody-listens", 0)
        for i in range(50):
            send(b"x" * 24, i)
        await client.flush(5)
        stats = client.publish_stats
        await client.close()
        return stats

    stats = run("uvloop", scenario())
    assert (stats.published, stats.replies, stats.receivers, stats.unreceived) == (50, 50, 0, 50)
    kinds = [kind for kind, _ in events]
    assert kinds == ["connected", "publish_unreceived", "disconnected"]


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_connecting_to_a_closed_port_fails_fast_with_connection_refused(loop_kind: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = make_client(Endpoint("127.0.0.1", port), timeout_s=3.0)
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        run(loop_kind, client.connect())
    assert time.monotonic() - started < 3.0
    assert str(info.value) == f"cannot connect to redis at 127.0.0.1:{port}: connection refused"
    assert not client.connected


def test_a_server_that_never_answers_times_out_within_the_connect_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        client = make_client(Endpoint("127.0.0.1", port), timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"no handshake within 0\.5 s"):
            run("uvloop", client.connect())
        assert 0.4 < time.monotonic() - started < 2.0


def test_missing_and_wrong_passwords_are_named_and_the_right_one_connects(
    redis_with_password: RunningBroker,
) -> None:
    endpoint = redis_with_password.endpoint
    where = f"{endpoint.host}:{endpoint.port}"
    with pytest.raises(TransportError) as missing:
        run("uvloop", make_client(endpoint).connect())
    assert str(missing.value).startswith(
        f"cannot connect to redis at {where}: authentication required (-NOAUTH"
    )
    with pytest.raises(TransportError) as wrong:
        run("uvloop", make_client(endpoint, password="nope").connect())
    assert str(wrong.value).startswith(
        f"cannot connect to redis at {where}: wrong username or password (-WRONGPASS"
    )

    async def with_right_password() -> bool:
        client = make_client(endpoint, password=PASSWORD)
        await client.connect()
        ok = client.connected
        await client.close()
        return ok

    assert run("uvloop", with_right_password())
    assert PASSWORD not in redis_with_password.info["config"]
    assert redis_with_password.info["settings"]["requirepass"] is True


def test_qos_above_zero_and_mixing_roles_are_refused(redis_broker: RunningBroker) -> None:
    async def scenario() -> list[str]:
        pub = make_client(redis_broker.endpoint)
        sub = make_client(redis_broker.endpoint)
        await pub.connect()
        await sub.connect()
        errors: list[str] = []
        try:
            for attempt in (
                lambda: pub.sender("a", 1),
                lambda: pub.sender("a", 0) and sub.subscribe("a", 1, lambda p, t: None),
            ):
                with pytest.raises(TransportError) as info:
                    result = attempt()
                    if asyncio.iscoroutine(result):
                        await result
                errors.append(str(info.value))
            await sub.subscribe("a", 0, lambda p, t: None)
            with pytest.raises(TransportError) as publish_on_sub:
                sub.sender("a", 0)
            errors.append(str(publish_on_sub.value))
            with pytest.raises(TransportError) as subscribe_on_pub:
                await pub.subscribe("b", 0, lambda p, t: None)
            errors.append(str(subscribe_on_pub.value))
        finally:
            await pub.close()
            await sub.close()
        return errors

    errors = run("uvloop", scenario())
    assert errors[0] == "Redis Pub/Sub is at-most-once; QoS 1 not supported"
    assert errors[1] == errors[0]
    assert errors[2].startswith("a subscribed redis connection cannot publish")
    assert errors[3].startswith("a redis connection that publishes cannot also subscribe")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_close_is_clean_idempotent_and_reported(
    redis_broker: RunningBroker, loop_kind: str
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    async def scenario() -> tuple[bool, bool, int]:
        client = make_client(redis_broker.endpoint, events=events)
        await client.connect()
        send = client.sender("x", 0)
        assert send(b"before close", 0)
        await client.close()
        await client.close()
        await client.flush(1)
        return client.connected, send(b"after close", 1), client.pending_write_bytes()

    connected, sent_after_close, pending = run(loop_kind, scenario())
    assert not connected
    assert not sent_after_close
    assert pending == 0
    # whether the reply to the last PUBLISH (0 receivers) arrives before the close is a race
    kinds = [kind for kind, _ in events if kind != "publish_unreceived"]
    assert kinds == ["connected", "disconnected"]
    assert events[-1][1]["expected"] is True
    assert events[-1][1]["reason"] == "closed by client"


def test_a_subscriber_the_server_disconnects_is_reported_as_unrequested(
    redis_broker: RunningBroker,
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    async def scenario() -> bool:
        client = make_client(redis_broker.endpoint, "victim", events=events)
        await client.connect()
        await client.subscribe("kill-me", 0, lambda p, t: None)
        admin = oracle(redis_broker)
        await admin.execute_command("CLIENT", "KILL", "SKIPME", "yes", "TYPE", "pubsub")
        await admin.aclose()
        for _ in range(100):  # bounded: at most ~5 s
            if not client.connected:
                break
            await asyncio.sleep(0.05)
        connected = client.connected
        await client.close()
        return connected

    assert not run("uvloop", scenario())
    assert [kind for kind, _ in events] == ["connected", "disconnected"]
    assert events[1][1]["expected"] is False
    assert "client-output-buffer-limit pubsub" in events[1][1]["reason"]


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_server_that_stops_answering_is_dropped_after_two_unanswered_keepalive_pings(
    loop_kind: str,
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer the handshake like redis, then go silent (a stale peer)."""
        data = b""
        for _ in range(20):
            data += await reader.read(4096)
            if data.count(b"PING") >= 1:
                break
        writer.write(b"+OK\r\n+PONG\r\n")
        await writer.drain()
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(reader.read(), 10)
        writer.close()

    async def scenario() -> tuple[bool, float]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        options = ClientOptions(
            client_id="k", keepalive_s=1, on_event=lambda kind, d: events.append((kind, d))
        )
        client = RedisClient(Endpoint("127.0.0.1", port), options)
        await client.connect()
        started = time.monotonic()
        for _ in range(120):  # bounded: at most ~6 s
            if not client.connected:
                break
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - started
        connected = client.connected
        await client.close()
        server.close()
        await server.wait_closed()
        return connected, elapsed

    connected, elapsed = run(loop_kind, scenario())
    assert not connected
    assert 2.5 < elapsed < 4.5
    assert [kind for kind, _ in events] == ["connected", "protocol_error", "disconnected"]
    assert events[1][1]["reason"].startswith("stale connection: no reply to 2 keepalive PINGs")
