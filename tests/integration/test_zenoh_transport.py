"""The zenoh client against a router run by the native runtime, with a plain zenoh session
as the interoperability oracle."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zenoh
from loops import LOOPS, run

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.format import pack_header, unpack_header
from mqbench.transports.base import ClientOptions
from mqbench.transports.events import ClientEvent
from mqbench.transports.zenoh import ZenohClient, ZenohTransport

pytestmark = pytest.mark.integration

NativeBrokerFactory = Callable[..., RunningBroker]


@pytest.fixture(scope="module")
def router(module_broker: NativeBrokerFactory) -> RunningBroker:
    """One zenoh router for the module (tests use distinct keys)."""
    return module_broker("zenoh")


@pytest.fixture
def oracle(router: RunningBroker) -> Iterator[Any]:
    """A plain eclipse-zenoh client session to the router."""
    config = zenoh.Config()
    config.insert_json5("mode", '"client"')
    config.insert_json5(
        "connect/endpoints",
        json.dumps([f"tcp/{router.endpoint.host}:{router.endpoint.port}"]),
    )
    config.insert_json5("scouting/multicast/enabled", "false")
    session: Any = zenoh.open(config)
    try:
        yield session
    finally:
        session.close()


def make_client(
    endpoint: Endpoint,
    events: list[ClientEvent] | None = None,
    timeout_s: float = 5.0,
    **extra: Any,
) -> ZenohClient:
    on_event = None if events is None else events.append
    options = ClientOptions(
        client_id="z", connect_timeout_s=timeout_s, on_event=on_event, extra=extra
    )
    return ZenohTransport().create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    return [pack_header(3, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


def test_the_router_runs_without_scouting_and_records_its_settings(router: RunningBroker) -> None:
    settings = router.info.settings
    assert settings["mode"] == "router"
    assert settings["scouting/multicast/enabled"] is False
    assert settings["scouting/gossip/enabled"] is False
    assert settings["listen/endpoints"] == [f"tcp/127.0.0.1:{router.endpoint.port}"]
    assert router.info.version == zenoh_version()
    for _ in range(40):  # bounded: the line may follow the listener by a few ms
        if "zenoh-router ready" in router.log_tail(5):
            break
        time.sleep(0.05)
    assert "zenoh-router ready zid=" in router.log_tail(5)


def zenoh_version() -> str:
    from importlib import metadata

    return metadata.version("eclipse-zenoh")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_put_by_our_client_reach_a_zenoh_session_intact(
    router: RunningBroker, oracle: Any, loop_kind: str
) -> None:
    sent = payloads(1000)
    key = f"mqbench/test/ours/{loop_kind}"
    received: list[bytes] = []
    done = threading.Event()

    def on_sample(sample: Any) -> None:
        received.append(sample.payload.to_bytes())
        if len(received) == len(sent):
            done.set()

    subscriber = oracle.declare_subscriber(key, on_sample)
    time.sleep(0.2)  # the oracle's declaration has no confirmation

    async def scenario() -> None:
        client = make_client(router.endpoint)
        await client.connect()
        send = client.sender(key, 0)
        assert all(send(p, i) for i, p in enumerate(sent))
        await client.flush(5)
        await client.close()

    run(loop_kind, scenario())
    assert done.wait(10)
    subscriber.undeclare()
    assert received == sent


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_put_by_a_zenoh_session_reach_our_client_intact_and_stamped(
    router: RunningBroker, oracle: Any, loop_kind: str
) -> None:
    sent = payloads(1000)
    key = f"mqbench/test/theirs/{loop_kind}"

    async def scenario() -> tuple[list[bytes], list[int], int, int, bool]:
        received: list[bytes] = []
        stamps: list[int] = []
        threads: set[int] = set()
        done = asyncio.Event()

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            threads.add(threading.get_ident())
            received.append(bytes(payload))
            stamps.append(t_recv_ns)
            if len(received) == len(sent):
                done.set()

        client = make_client(router.endpoint)
        await client.connect()
        await client.subscribe(key, 0, on_message)
        publisher = oracle.declare_publisher(key)
        before = time.time_ns()
        for p in sent:
            publisher.put(p)
        await asyncio.wait_for(done.wait(), 10)
        after = time.time_ns()
        publisher.undeclare()
        await client.close()
        return received, stamps, before, after, threads == {threading.get_ident()}

    received, stamps, before, after, on_loop_thread = run(loop_kind, scenario())
    assert received == sent
    assert [unpack_header(p)[1] for p in received] == list(range(len(sent)))
    assert all(before <= t <= after for t in stamps)
    assert stamps == sorted(stamps)
    assert on_loop_thread


@pytest.mark.parametrize(
    "extra",
    [{}, {"reliability": "best_effort", "congestion_control": "drop", "express": True}],
)
def test_a_one_mib_payload_round_trips_between_our_clients(
    router: RunningBroker, extra: dict[str, Any]
) -> None:
    big = os.urandom(1 << 20)
    key = f"mqbench/test/big/{len(extra)}"

    async def scenario() -> list[bytes]:
        got: list[bytes] = []
        arrived = asyncio.Event()

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            got.append(bytes(payload))
            if len(got) == 2:
                arrived.set()

        sub = make_client(router.endpoint)
        pub = make_client(router.endpoint, **extra)
        await sub.connect()
        await pub.connect()
        await sub.subscribe(key, 0, on_message)
        send = pub.sender(key, 0)
        assert send(big, 0)
        assert send(big[:64], 1)
        await asyncio.wait_for(arrived.wait(), 10)
        await pub.close()
        await sub.close()
        return got

    assert run("uvloop", scenario()) == [big, big[:64]]


def bytes_from_router(router: RunningBroker) -> int:
    """Bytes the router has sent to the open client connections (the kernel's count of each
    client socket's ``bytes_received``, from ``ss``)."""
    port = router.endpoint.port
    done = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( dport = :{port} )"],
        capture_output=True, text=True, check=True, timeout=10,
    )  # fmt: skip
    return sum(int(n) for n in re.findall(r"bytes_received:(\d+)", done.stdout))


@pytest.mark.parametrize("shared_memory", [False, True])
def test_one_mib_payloads_cross_the_routers_socket_unless_shared_memory_is_on(
    router: RunningBroker, shared_memory: bool
) -> None:
    messages, big = 20, os.urandom(1 << 20)
    key = f"mqbench/test/shm/{shared_memory}"

    async def scenario() -> tuple[int, bool]:
        arrived, got = asyncio.Event(), []

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            got.append(len(payload))
            if len(got) == messages:
                arrived.set()

        settings = {} if not shared_memory else {"shared_memory": True}
        sub = make_client(router.endpoint, **settings)
        pub = make_client(router.endpoint, **settings)
        await sub.connect()
        await pub.connect()
        await sub.subscribe(key, 0, on_message)
        send = pub.sender(key, 0)
        before = bytes_from_router(router)
        for i in range(messages):
            assert send(big, i)
            await asyncio.sleep(0.01)
        await asyncio.wait_for(arrived.wait(), 20)
        written = bytes_from_router(router) - before
        await pub.close()
        await sub.close()
        assert got == [len(big)] * messages
        return written, bool(pub.settings["shared_memory"])

    written, setting = run("uvloop", scenario())
    assert setting is shared_memory
    if shared_memory:
        # The payloads went through /dev/shm and only references crossed the router. Not
        # every one: under load up to 2 of the 20 still crossed the socket (2,097,910 bytes
        # seen; which zenoh fallback sends them was not established), so the bound is a
        # quarter of the payload bytes, far below the all of them the socket path carries.
        assert written < messages * len(big) / 4
    else:
        assert written >= messages * len(big)


def test_a_listener_that_is_not_a_zenoh_router_fails_within_the_connect_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        client = make_client(Endpoint("127.0.0.1", port), timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"cannot connect to zenoh at 127\.0\.0\.1:\d+"):
            run("uvloop", client.connect())
        assert time.monotonic() - started < 3.5


def test_bad_options_and_keys_are_refused_with_clear_messages(router: RunningBroker) -> None:
    with pytest.raises(TransportError, match="congestion_control must be one of block, drop"):
        make_client(router.endpoint, congestion_control="maybe")
    with pytest.raises(TransportError, match="reliability must be one of reliable, best_effort"):
        make_client(router.endpoint, reliability="sometimes")
    with pytest.raises(TransportError, match="shared_memory must be true or false, got 'yes'"):
        make_client(router.endpoint, shared_memory="yes")

    async def scenario() -> list[str]:
        client = make_client(router.endpoint)
        await client.connect()
        errors: list[str] = []
        try:
            for topic in ("mqbench/*", "mqbench//a"):
                with pytest.raises(TransportError) as info:
                    client.sender(topic, 0)
                errors.append(str(info.value))
        finally:
            await client.close()
        return errors

    errors = run("uvloop", scenario())
    assert errors[0] == "cannot publish to 'mqbench/*': wildcards are not allowed in a put"
    assert errors[1].startswith("invalid zenoh key expression 'mqbench//a'")


def test_a_wildcard_subscription_receives_puts_on_matching_keys(router: RunningBroker) -> None:
    async def scenario() -> list[bytes]:
        got: list[bytes] = []
        sub = make_client(router.endpoint)
        pub = make_client(router.endpoint)
        await sub.connect()
        await pub.connect()
        await sub.subscribe("mqbench/wild/**", 0, lambda p, t: got.append(bytes(p)))
        pub.sender("mqbench/wild/a/1", 0)(b"one", 0)
        pub.sender("mqbench/other/1", 0)(b"not me", 1)
        pub.sender("mqbench/wild/b", 0)(b"two", 2)
        await pub.flush(5)
        for _ in range(100):  # bounded: at most ~2 s
            if len(got) >= 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        await pub.close()
        await sub.close()
        return got

    assert run("uvloop", scenario()) == [b"one", b"two"]
