"""Transport conformance: the behaviour every client shares, in one parametrized suite.

Per target whose broker runs natively on this machine, its default client, against the
broker mqbench starts for that target (one broker per target for the whole module), must:
connect; subscribe before anyone publishes; carry N messages each way at QoS 0 and a low
rate with nothing lost, in order and intact (also with write coalescing off); carry a 1 MiB
payload; reconnect under the same identity and work again; close cleanly, idempotently and
report it as expected; report a connection cut in the network as an unexpected disconnect
and refuse sends; drop a peer that stops answering by its keepalive (once per lean client);
and fail with a clear TransportError within a bounded time when the broker is unreachable
(refused, or a listener that never answers).

The same suite runs against brokers in containers (``docker:<target>``: the docker runtime,
one broker per protocol whose images build here; ``pytest -m docker``), except for the
cases where only the client acts (keepalive, an unreachable broker), which do not depend on
where the broker runs.

Per lean client, without a broker: a closed port is "connection refused" at once and a
silent listener a timeout naming the handshake stage, on both event loops.

Behaviour of one protocol only (interoperability with its reference library, its
authentication errors, its own flow control) is in ``test_<protocol>_transport.py`` and
``test_mqtt_interop.py``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from core_helpers import CoreRun, drive_core
from docker_runs import image_recipes, local_targets
from docker_support import ensure_images, require_engine
from loops import LOOPS
from loops import run as run_on

from mqbench.brokers.base import RunningBroker, StartRequest
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.brokers.registry import get_target
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.faults.tcp import ProxyRegistry
from mqbench.faults.toxics import validate_toxic
from mqbench.records.format import SEND_OK
from mqbench.transports.base import Client, ClientOptions, LendsSockets, Transport
from mqbench.transports.events import ClientEvent, Connected, Disconnected, ProtocolError
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


def _one_per_protocol(targets: list[str]) -> list[str]:
    chosen: dict[str, str] = {}
    for target in targets:
        chosen.setdefault(get_target(target).transport, target)
    return list(chosen.values())


DOCKER_TARGETS = [
    pytest.param(f"docker:{target}", marks=[pytest.mark.docker])
    for target in _one_per_protocol(local_targets())
]
"""One broker per protocol in a container (docker runtime), for every protocol whose
broker images build here: the local images hold the same software the native run of the
suite tests, so what is new is the client's path through Docker's published port, and
that is one path per protocol (every target runs end to end in Docker in
``test_docker_run.py``)."""
SLOW_BOOT = {
    "rabbitmq-mqtt": 120.0,
    "rabbitmq-amqp": 120.0,
    "activemq": 60.0,
    "hivemq": 60.0,
    "artemis": 60.0,
}
N = 200
MIB = 1024 * 1024

STREAM_CLIENTS = {"mqtt": "mqtt broker", "nats": "nats", "redis": "redis", "amqp": "amqp broker"}
"""The lean clients on ``StreamConnection``, with how their messages name the peer."""
KEEPALIVE_TARGET = {"mqtt": "mosquitto", "nats": "nats", "redis": "redis", "amqp": "rabbitmq-amqp"}
"""The one target per lean client on which its keepalive is checked (it is the client's)."""
Events = list[ClientEvent]
T = TypeVar("T")


class Conformance:
    """One target's broker and its default client."""

    def __init__(self, target: str, broker: RunningBroker, runtime: str = "native") -> None:
        self.target = target
        self.broker = broker
        self.runtime = runtime
        self.client_name = resolve_client(get_target(target).transport, None)
        self.transport: Transport = get_transport(self.client_name)
        self._ids = 0

    def client(
        self,
        client_id: str | None = None,
        endpoint: Endpoint | None = None,
        events: Events | None = None,
        keepalive_s: int = 60,
        connect_timeout_s: float = 2.0,
        **extra: Any,
    ) -> Client:
        self._ids += 1
        options = ClientOptions(
            client_id=client_id or f"conf-{os.getpid()}-{self._ids}",
            connect_timeout_s=connect_timeout_s,
            keepalive_s=keepalive_s,
            on_event=None if events is None else events.append,
            extra=extra,
        )
        return self.transport.create_client(endpoint or self.broker.endpoint, options)


@pytest.fixture(scope="module", params=[*TARGETS, *DOCKER_TARGETS])
def conf(request: pytest.FixtureRequest) -> Iterator[Conformance]:
    runtime_name, _, target = str(request.param).rpartition(":")
    runtime: NativeRuntime | DockerRuntime
    if runtime_name == "docker":
        require_engine()
        ensure_images(*(image_recipes(target) or []))
        runtime = DockerRuntime()
    else:
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
            yield Conformance(target, broker, runtime_name or "native")
        finally:
            broker.stop()


def client_only(conf: Conformance) -> None:
    """Skip a case in which only the client acts: it does not depend on where the broker runs."""
    if conf.runtime == "docker":
        pytest.skip("only the client acts here; the native run of the suite covers it")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 60))


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


def test_close_is_clean_idempotent_reported_and_leaves_the_broker_serving_others(
    conf: Conformance,
) -> None:
    events: Events = []

    async def scenario() -> None:
        leaving, staying, pub = conf.client(events=events), conf.client(), conf.client()
        for c in (leaving, staying, pub):
            await c.connect()
        topic = f"conf-{os.getpid()}-close"
        got: list[bytes] = []
        await staying.subscribe(topic, 0, lambda p, t: got.append(bytes(p)))
        late = leaving.sender(topic, 0)
        started = time.monotonic()
        await leaving.close()
        assert time.monotonic() - started < 5
        assert not leaving.connected
        await leaving.close()  # idempotent, never raises
        await leaving.flush(1)  # never raises either
        assert late(payload(0), 0) is False
        assert leaving.pending_write_bytes() == 0
        assert pub.sender(topic, 0)(payload(1), 1)
        await pub.flush(5)
        await wait_for_count(got, 1)
        assert got == [payload(1)]
        assert staying.connected
        await staying.close()
        await pub.close()

    run(scenario())
    kinds = [type(e) for e in events]
    assert kinds[0] == Connected
    assert kinds[-1] == Disconnected
    assert events[-1].expected is True
    assert events[-1].reason == "closed by client"


def test_writes_without_coalescing_deliver_the_same_messages(conf: Conformance) -> None:
    if conf.client_name not in STREAM_CLIENTS:
        pytest.skip(f"the {conf.client_name} client has no write coalescing to turn off")

    async def scenario() -> list[bytes]:
        sub, pub = conf.client(), conf.client(coalesce_writes=False)
        await sub.connect()
        await pub.connect()
        got: list[bytes] = []
        topic = f"conf-{os.getpid()}-direct"
        await sub.subscribe(topic, 0, lambda p, t: got.append(bytes(p)))
        send = pub.sender(topic, 0)
        for i in range(N):
            assert send(payload(i), i)
        await pub.flush(5)
        await wait_for_count(got, N)
        await pub.close()
        await sub.close()
        return got

    assert run(scenario()) == [payload(i) for i in range(N)]


def test_the_compiled_core_carries_lent_sessions_with_none_lost_in_order(
    conf: Conformance, tmp_path: Path
) -> None:
    if conf.transport.capabilities.compiled is None:
        pytest.skip(f"the {conf.client_name} client has no compiled path")
    pytest.importorskip("mqbench_core", reason="the compiled core is not installed")
    events: Events = []

    async def scenario() -> CoreRun:
        sub, pub = conf.client(events=events), conf.client(events=events)
        await sub.connect()
        await pub.connect()
        topic = f"conf-{os.getpid()}-core"
        await sub.subscribe(topic, 0, lambda p, t: None)
        lenders = cast(list[LendsSockets], [sub, pub])
        done = await drive_core(
            tmp_path,
            conf.transport.capabilities.compiled or "",
            [(lenders[1], topic)],
            [lenders[0]],
            rate=500.0,
            messages=N,
        )
        await pub.close()
        await sub.close()
        return done

    done = run(scenario())
    assert list(done.sends["sub"]) == [SEND_OK] * N
    assert list(done.deliveries["seq"]) == list(range(N))
    assert set(done.deliveries["pub"]) == {0} and set(done.deliveries["sub"]) == {0}
    assert list(done.deliveries["t_sent"]) == list(done.sends["t_sent"])
    assert (done.deliveries["lat"] >= 0).all()
    assert done.stats["kernel_reads"] > 0 and done.lost == []
    closes = [e for e in events if isinstance(e, Disconnected)]
    assert len(closes) == 2 and all(e.expected for e in closes)


async def through_proxy(conf: Conformance, registry: ProxyRegistry) -> Endpoint:
    """A fault proxy in this loop in front of the target's broker; its address."""
    upstream = f"{conf.broker.endpoint.host}:{conf.broker.endpoint.port}"
    proxy = await registry.create(f"conf-{os.getpid()}", "127.0.0.1:0", upstream)
    host, port = proxy.listen.rsplit(":", 1)
    return Endpoint(host, int(port))


def test_a_connection_cut_in_the_network_is_an_unexpected_disconnect_and_sends_fail(
    conf: Conformance,
) -> None:
    events: Events = []

    async def scenario() -> tuple[bool, bool]:
        registry = ProxyRegistry()
        try:
            client = conf.client(endpoint=await through_proxy(conf, registry), events=events)
            await client.connect()
            send = client.sender(f"conf-{os.getpid()}-cut", 0)
            assert send(payload(0), 0)
            # The proxy stops listening and drops its links: the broker is gone for us.
            await registry.get(f"conf-{os.getpid()}").set_enabled(False)
            deadline = time.monotonic() + 15
            while client.connected and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            result = client.connected, send(payload(1), 1)
            await client.close()
            return result
        finally:
            await registry.close()

    connected, sent = run(scenario())
    assert not connected
    assert not sent
    lost = [e for e in events if isinstance(e, Disconnected)]
    assert lost and lost[0].expected is False
    assert lost[0].reason


def test_a_peer_that_stops_answering_is_dropped_by_the_keepalive(conf: Conformance) -> None:
    client_only(conf)
    if KEEPALIVE_TARGET.get(conf.client_name) != conf.target:
        pytest.skip(f"the {conf.client_name} client's keepalive is checked on another target")
    events: Events = []

    async def scenario() -> tuple[bool, float]:
        registry = ProxyRegistry()
        try:
            endpoint = await through_proxy(conf, registry)
            client = conf.client(endpoint=endpoint, events=events, keepalive_s=1)
            await client.connect()
            # Nothing from the broker reaches the client any more; the socket stays open.
            freeze = validate_toxic("timeout", {"timeout": 0}, stream="downstream")
            registry.get(f"conf-{os.getpid()}").add_toxic(freeze)
            started = time.monotonic()
            while client.connected and time.monotonic() - started < 10:
                await asyncio.sleep(0.02)
            result = client.connected, time.monotonic() - started
            await client.close()
            return result
        finally:
            await registry.close()

    connected, elapsed = run(scenario())
    assert not connected
    assert elapsed < 5.0  # two or four missed 1 s keepalive ticks, never the broker's timeout
    kinds = [type(e) for e in events]
    assert kinds == [Connected, ProtocolError, Disconnected]
    assert events[2].expected is False
    assert events[2].reason == events[1].reason


def test_an_unreachable_broker_is_a_clear_error_within_the_connect_timeout(
    conf: Conformance,
) -> None:
    client_only(conf)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts TCP, never speaks the protocol
    try:
        for endpoint in (Endpoint("127.0.0.1", closed_port), Endpoint(*silent.getsockname())):

            async def attempt(ep: Endpoint = endpoint) -> None:
                client = conf.client(endpoint=ep, connect_timeout_s=0.5)
                started = time.monotonic()
                with pytest.raises(TransportError) as info:
                    await client.connect()
                assert time.monotonic() - started < 0.5 + 3.0
                message = str(info.value)
                assert str(ep.port) in message, message
                assert "\n" not in message
                assert info.value.kind is TransportErrorKind.CONNECT_FAILED
                assert not client.connected
                await client.close()

            run(attempt())
    finally:
        silent.close()


# ----------------------------------------------------------------------------- no broker


def lean_client(name: str, port: int, timeout_s: float) -> Client:
    options = ClientOptions(client_id="lean", connect_timeout_s=timeout_s)
    return get_transport(name).create_client(Endpoint("127.0.0.1", port), options)


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("name", [*STREAM_CLIENTS, "zenoh"])
def test_a_closed_port_fails_at_once_with_connection_refused(name: str, loop_kind: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = lean_client(name, port, 3.0)
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        run_on(loop_kind, client.connect())
    assert time.monotonic() - started < 3.0
    where = STREAM_CLIENTS.get(name, name)
    assert str(info.value) == f"cannot connect to {where} at 127.0.0.1:{port}: connection refused"
    assert info.value.kind is TransportErrorKind.CONNECT_FAILED
    assert not client.connected


STAGES = {
    "mqtt": "no CONNACK",
    "nats": "no handshake",
    "redis": "no handshake",
    "amqp": r"no Connection.Start \(is this an AMQP 0-9-1 port\?\)",
}


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("name", list(STREAM_CLIENTS))
def test_a_listener_that_never_answers_times_out_naming_the_handshake_stage(
    name: str, loop_kind: str
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = lean_client(name, listener.getsockname()[1], 0.5)
        started = time.monotonic()
        with pytest.raises(TransportError, match=rf"{STAGES[name]} within 0\.5 s$") as info:
            run_on(loop_kind, client.connect())
        assert 0.4 < time.monotonic() - started < 2.0
        assert info.value.kind is TransportErrorKind.CONNECT_FAILED
