"""The lean Redis client against a real redis-server; redis-py is the interoperability oracle."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from loops import LOOPS, run

from mqbench.brokers.base import BrokerSecurity, RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.records.format import pack_header, unpack_header
from mqbench.scenario.security import Secret
from mqbench.transports.base import ClientOptions
from mqbench.transports.events import ClientEvent, Connected, Disconnected, PublishUnreceived
from mqbench.transports.redis import RedisClient, RedisTransport

pytestmark = pytest.mark.integration

PASSWORD = "s3cret pass"

NativeBrokerFactory = Callable[..., RunningBroker]


@pytest.fixture(scope="module")
def redis_broker(module_broker: NativeBrokerFactory) -> RunningBroker:
    """One redis-server for the module (tests use distinct channels)."""
    return module_broker("redis")


@pytest.fixture(scope="module")
def redis_with_password(
    module_broker: NativeBrokerFactory, tmp_path_factory: pytest.TempPathFactory
) -> RunningBroker:
    """A redis-server that requires ``PASSWORD`` (its ``password`` option, a secret: the
    ``requirepass`` line goes into a private folder, as in a run)."""
    private = BrokerSecurity(private_dir=tmp_path_factory.mktemp("redis-private"))
    return module_broker("redis", security=private, password=Secret(PASSWORD, "test"))


def make_client(
    endpoint: Endpoint,
    name: str = "t",
    events: list[ClientEvent] | None = None,
    timeout_s: float = 5.0,
    **extra: Any,
) -> RedisClient:
    on_event = None if events is None else events.append
    username = extra.pop("username", None) or extra.pop("user", None)
    password = extra.pop("password", None)
    options = ClientOptions(
        client_id=name,
        connect_timeout_s=timeout_s,
        on_event=on_event,
        extra=extra,
        username=username,
        password=password,
    )
    return RedisTransport().create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    """Distinct payloads: the wire header then random bytes (including CR and LF)."""
    return [pack_header(7, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


def oracle(broker: RunningBroker, **kwargs: Any) -> aioredis.Redis:
    return aioredis.Redis(host=broker.endpoint.host, port=broker.endpoint.port, **kwargs)


def test_native_redis_records_its_benchmark_settings(redis_broker: RunningBroker) -> None:
    info = redis_broker.info.to_dict()
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


def test_publishes_nobody_receives_are_counted_and_reported_once(
    redis_broker: RunningBroker,
) -> None:
    events: list[ClientEvent] = []

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
    kinds = [type(e) for e in events]
    assert kinds == [Connected, PublishUnreceived, Disconnected]


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
    assert PASSWORD not in redis_with_password.info.config
    assert redis_with_password.info.settings["requirepass"] is True


def test_one_connection_cannot_both_publish_and_subscribe(redis_broker: RunningBroker) -> None:
    async def scenario() -> list[TransportError]:
        pub = make_client(redis_broker.endpoint)
        sub = make_client(redis_broker.endpoint)
        await pub.connect()
        await sub.connect()
        errors: list[TransportError] = []
        try:
            pub.sender("a", 0)
            await sub.subscribe("a", 0, lambda p, t: None)
            with pytest.raises(TransportError) as publish_on_sub:
                sub.sender("a", 0)
            errors.append(publish_on_sub.value)
            with pytest.raises(TransportError) as subscribe_on_pub:
                await pub.subscribe("b", 0, lambda p, t: None)
            errors.append(subscribe_on_pub.value)
        finally:
            await pub.close()
            await sub.close()
        return errors

    errors = run("uvloop", scenario())
    assert str(errors[0]).startswith("a subscribed redis connection cannot publish")
    assert str(errors[1]).startswith("a redis connection that publishes cannot also subscribe")
    assert all(e.kind is TransportErrorKind.UNSUPPORTED for e in errors)


def test_a_subscriber_the_server_disconnects_is_reported_as_unrequested(
    redis_broker: RunningBroker,
) -> None:
    events: list[ClientEvent] = []

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
    assert [type(e) for e in events] == [Connected, Disconnected]
    assert events[1].expected is False
    assert "client-output-buffer-limit pubsub" in events[1].reason
