"""The lean MQTT client against a real mosquitto, with paho-mqtt as the interoperability oracle.

The last section scripts a tiny broker on loopback (built from the same codec) for answers
mosquitto cannot be made to give on demand: refused CONNACKs, refused SUBACKs, garbage.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import paho.mqtt.client as paho
import pytest
from loops import LOOPS, run, wait_until
from paho.mqtt.enums import CallbackAPIVersion
from paho_clients import stop_paho

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.format import pack_header, unpack_header
from mqbench.transports.base import Client, ClientOptions
from mqbench.transports.events import ClientEvent, Connected, Disconnected, ProtocolError
from mqbench.transports.mqtt import MqttClient, MqttTransport
from mqbench.transports.registry import get_transport
from mqbench.wire.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Suback,
    Subscribe,
)
from mqbench.wire.mqtt.parser import StreamParser
from mqbench.workload.reporting import count_clients

pytestmark = pytest.mark.integration

Events = list[ClientEvent]


def make_client(
    endpoint: Endpoint,
    name: str = "ours",
    events: Events | None = None,
    timeout_s: float = 5.0,
    keepalive_s: int = 60,
    **extra: Any,
) -> MqttClient:
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
    return MqttTransport().create_client(endpoint, options)


def payloads(count: int, size: int = 64) -> list[bytes]:
    """Distinct payloads: the wire header, then random bytes."""
    return [pack_header(3, i, time.time_ns()) + os.urandom(size - 24) for i in range(count)]


class Paho:
    """A paho-mqtt client on its own network thread, collecting what it receives."""

    def __init__(self, broker: RunningBroker, client_id: str) -> None:
        self.received: list[tuple[str, bytes, int]] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self._connected = threading.Event()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
        self.client.on_connect = lambda c, u, f, rc, p: self._connected.set()
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self._subscribed.set()
        self.client.on_message = self._on_message
        self.client.max_queued_messages_set(0)
        self.client.connect(broker.endpoint.host, broker.endpoint.port, keepalive=30)
        self.client.loop_start()
        if not self._connected.wait(10):
            self.stop()
            raise AssertionError("paho could not connect to the broker")

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self._lock:
            self.received.append((msg.topic, bytes(msg.payload), msg.qos))

    def subscribe(self, topic: str, qos: int) -> None:
        self._subscribed.clear()
        self.client.subscribe(topic, qos)
        assert self._subscribed.wait(10), "paho got no SUBACK"

    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def stop(self) -> None:
        stop_paho(self.client)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_stopped_paho_test_client_holds_no_socket_without_waiting_for_the_collector(
    mosquitto: RunningBroker,
) -> None:
    before = open_descriptors()
    oracle = Paho(mosquitto, "paho-fds")
    assert open_descriptors() >= before + 3  # its connection and its wake-up socket pair
    oracle.stop()
    assert open_descriptors() == before


def test_the_paho_transports_client_holds_no_socket_once_closed(mosquitto: RunningBroker) -> None:
    async def scenario() -> None:
        before = open_descriptors()
        client = get_transport("paho").create_client(
            mosquitto.endpoint, ClientOptions(client_id="paho-transport-fds")
        )
        await client.connect()
        assert open_descriptors() >= before + 3  # its connection and its wake-up socket pair
        await client.close()
        assert open_descriptors() == before

    run("asyncio", scenario())


@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_our_client_reach_paho_intact_and_in_order(
    mosquitto: RunningBroker, loop_kind: str, qos: int
) -> None:
    sent = payloads(1000)
    oracle = Paho(mosquitto, "paho-sub")
    try:
        oracle.subscribe("bench/ours", 1)

        async def scenario() -> None:
            client = make_client(mosquitto.endpoint)
            await client.connect()
            send = client.sender("bench/ours", qos)
            assert all(send(p, i) for i, p in enumerate(sent))
            await client.flush(10)
            await wait_until(lambda: oracle.count() >= len(sent))
            await client.close()

        run(loop_kind, scenario())
    finally:
        oracle.stop()
    assert [payload for _, payload, _ in oracle.received] == sent
    # Delivered at min(publish QoS, subscription QoS): the oracle subscribes at QoS 1.
    assert {(topic, q) for topic, _, q in oracle.received} == {("bench/ours", min(qos, 1))}


@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("loop_kind", LOOPS)
def test_messages_published_by_paho_reach_our_client_intact_with_read_timestamps(
    mosquitto: RunningBroker, loop_kind: str, qos: int
) -> None:
    sent = payloads(1000)
    publisher = Paho(mosquitto, "paho-pub")
    try:

        async def scenario() -> tuple[list[bytes], list[int], int, int]:
            received: list[bytes] = []
            stamps: list[int] = []

            def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
                received.append(bytes(payload))
                stamps.append(t_recv_ns)

            client = make_client(mosquitto.endpoint)
            await client.connect()
            await client.subscribe("bench/theirs", qos, on_message)
            before = time.time_ns()
            infos = [publisher.client.publish("bench/theirs", p, qos=qos) for p in sent]
            await wait_until(lambda: len(received) >= len(sent))
            after = time.time_ns()
            assert all(info.rc == paho.MQTT_ERR_SUCCESS for info in infos)
            await client.close()
            return received, stamps, before, after

        received, stamps, before, after = run(loop_kind, scenario())
    finally:
        publisher.stop()
    assert received == sent
    assert [unpack_header(p)[1] for p in received] == list(range(len(sent)))
    assert all(before <= t <= after for t in stamps)
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_qos1_ack_handler_is_called_once_per_tag_and_flush_waits_for_all_acks(
    mosquitto: RunningBroker, loop_kind: str
) -> None:
    async def scenario() -> tuple[list[tuple[int, int]], int, int, int]:
        acks: list[tuple[int, int]] = []
        client = make_client(mosquitto.endpoint)
        await client.connect()
        client.set_ack_handler(lambda tag, t: acks.append((tag, t)))
        send = client.sender("bench/acks", 1)
        started = time.time_ns()
        for tag in range(1000):
            assert send(b"x" * 64, 10_000 + tag)
        await client.flush(10)
        inflight = client.inflight
        await client.close()
        return acks, inflight, started, time.time_ns()

    acks, inflight, started, finished = run(loop_kind, scenario())
    assert sorted(tag for tag, _ in acks) == list(range(10_000, 11_000))
    assert inflight == 0
    assert all(started <= t <= finished for _, t in acks)


def test_qos1_packet_ids_wrap_after_65535_and_every_ack_still_arrives(
    mosquitto: RunningBroker,
) -> None:
    total = 70_000

    async def scenario() -> tuple[list[int], int]:
        acked: list[int] = []
        client = make_client(mosquitto.endpoint)
        await client.connect()
        client.set_ack_handler(lambda tag, t: acked.append(tag))
        send = client.sender("bench/wrap", 1)
        tag = 0
        while tag < total:
            # bounded bursts keep well under 65535 ids in flight, so none is refused
            for _ in range(5000):
                assert send(b"w" * 24, tag)
                tag += 1
            await client.flush(10)
        inflight = client.inflight
        await client.close()
        return acked, inflight

    acked, inflight = run("uvloop", scenario())
    assert sorted(acked) == list(range(total))
    assert inflight == 0


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_one_mebibyte_payload_round_trips_to_our_client_and_to_paho(
    mosquitto: RunningBroker, loop_kind: str
) -> None:
    big = pack_header(1, 0, time.time_ns()) + os.urandom(1024 * 1024 - 24)
    oracle = Paho(mosquitto, "paho-big")
    try:
        oracle.subscribe("bench/big", 1)

        async def scenario() -> list[bytes]:
            got: list[bytes] = []
            sub = make_client(mosquitto.endpoint, "sub")
            pub = make_client(mosquitto.endpoint, "pub")
            await sub.connect()
            await pub.connect()
            await sub.subscribe("bench/big", 1, lambda p, t: got.append(bytes(p)))
            acks: list[int] = []
            pub.set_ack_handler(lambda tag, t: acks.append(tag))
            assert pub.sender("bench/big", 1)(big, 42)
            await pub.flush(10)
            assert acks == [42]
            await wait_until(lambda: bool(got) and oracle.count() == 1)
            await pub.close()
            await sub.close()
            return got

        got = run(loop_kind, scenario())
    finally:
        oracle.stop()
    assert got == [big]
    assert oracle.received[0][1] == big


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_clean_close_sends_disconnect_so_the_broker_does_not_publish_the_will(
    mosquitto: RunningBroker, loop_kind: str
) -> None:
    oracle = Paho(mosquitto, "paho-will")
    events: Events = []
    try:
        oracle.subscribe("wills/#", 0)

        async def scenario() -> tuple[bool, bool]:
            will = {"topic": "wills/clean", "payload": b"gone"}
            client = make_client(mosquitto.endpoint, "clean", events, will=will)
            await client.connect()
            await client.close()
            await client.close()  # idempotent
            # a second client dies without DISCONNECT: its will must arrive
            dying = make_client(
                mosquitto.endpoint, "dying", will={"topic": "wills/dying", "payload": b"x"}
            )
            await dying.connect()
            dying._stream.abort()  # the socket dies without DISCONNECT
            await wait_until(lambda: oracle.count() >= 1)
            await asyncio.sleep(0.3)  # a wrongly published clean will would show up by now
            return client.connected, client.sender("wills/x", 0)(b"late", 0)

        connected, sent_after_close = run(loop_kind, scenario())
    finally:
        oracle.stop()
    assert [topic for topic, _, _ in oracle.received] == ["wills/dying"]
    assert not connected
    assert sent_after_close is False
    assert [type(e) for e in events] == [Connected, Disconnected]
    assert events[1].expected is True


def test_idle_client_keeps_its_session_alive_with_pingreq(mosquitto: RunningBroker) -> None:
    # mosquitto drops a client that sends nothing for 1.5 x keepalive
    async def scenario() -> tuple[bool, list[bytes]]:
        got: list[bytes] = []
        sub = make_client(mosquitto.endpoint, "idle-sub", keepalive_s=1)
        pub = make_client(mosquitto.endpoint, "idle-pub", keepalive_s=1)
        await sub.connect()
        await pub.connect()
        await sub.subscribe("bench/idle", 0, lambda p, t: got.append(bytes(p)))
        await asyncio.sleep(3.5)
        alive = sub.connected and pub.connected
        pub.sender("bench/idle", 0)(b"still here", 0)
        await wait_until(lambda: bool(got), 5)
        await pub.close()
        await sub.close()
        return alive, got

    alive, got = run("uvloop", scenario())
    assert alive
    assert got == [b"still here"]


# ----------------------------------------------------------------------------- scripted broker

Script = Callable[[Packet, Callable[[bytes], None]], Awaitable[None] | None]


async def scripted_broker(script: Script) -> tuple[asyncio.Server, Endpoint, list[Packet]]:
    """A loopback server that decodes client packets and lets ``script`` answer them."""
    seen: list[Packet] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = StreamParser()
        try:
            while data := await reader.read(65536):
                for packet in parser.feed(data):
                    seen.append(packet)
                    result = script(packet, writer.write)
                    if result is not None:
                        await result
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, Endpoint("127.0.0.1", port), seen


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (1, "unacceptable protocol version"),
        (2, "client identifier rejected"),
        (3, "server unavailable"),
        (4, "bad user name or password"),
        (5, "not authorized"),
    ],
)
def test_refused_connack_is_reported_with_its_meaning(code: int, text: str) -> None:
    def script(packet: Packet, write: Callable[[bytes], None]) -> None:
        if isinstance(packet, Connect):
            write(Connack(code).encode())

    async def scenario() -> tuple[str, Connect]:
        server, endpoint, seen = await scripted_broker(script)
        async with server:
            client = make_client(endpoint, "refused", username="u", password="p")
            with pytest.raises(TransportError) as info:
                await client.connect()
            assert not client.connected
            connect = seen[0]
            assert isinstance(connect, Connect)
            return str(info.value), connect

    message, connect = run("uvloop", scenario())
    assert message.endswith(
        f"refused the connection of 'refused' (user 'u'): {text} (CONNACK return code {code})"
    )
    assert (connect.client_id, connect.username, connect.password) == ("refused", "u", b"p")


def test_subscription_refused_with_0x80_raises_and_messages_are_not_routed() -> None:
    def script(packet: Packet, write: Callable[[bytes], None]) -> None:
        if isinstance(packet, Connect):
            write(Connack(0).encode())
        elif isinstance(packet, Subscribe):
            write(Suback(packet.packet_id, (0x80,)).encode())

    async def scenario() -> str:
        server, endpoint, _ = await scripted_broker(script)
        async with server:
            client = make_client(endpoint)
            await client.connect()
            with pytest.raises(TransportError) as info:
                await client.subscribe("secret/#", 1, lambda p, t: None)
            connected = client.connected
            await client.close()
            assert connected
            return str(info.value)

    message = run("uvloop", scenario())
    assert message.endswith("refused the subscription to 'secret/#'")


def test_garbage_from_the_broker_drops_the_connection_with_a_protocol_error() -> None:
    def script(packet: Packet, write: Callable[[bytes], None]) -> None:
        if isinstance(packet, Connect):
            write(Connack(0).encode())
        elif isinstance(packet, PingReq):
            write(b"\xf0\x00")  # reserved packet type

    events: Events = []

    async def scenario() -> bool:
        server, endpoint, _ = await scripted_broker(script)
        async with server:
            client = make_client(endpoint, "victim", events, keepalive_s=1)
            await client.connect()
            await wait_until(lambda: not client.connected, 5)
            await client.close()
            return client.connected

    assert run("uvloop", scenario()) is False
    kinds = [type(e) for e in events]
    assert kinds == [Connected, ProtocolError, Disconnected]
    assert "reserved packet type 15" in events[1].reason
    assert events[2].expected is False


def test_keepalive_sends_pingreq_only_when_idle_and_pingresp_keeps_the_session() -> None:
    def script(packet: Packet, write: Callable[[bytes], None]) -> None:
        if isinstance(packet, Connect):
            write(Connack(0).encode())
        elif isinstance(packet, PingReq):
            write(PingResp().encode())

    async def scenario() -> tuple[int, int, bool, Packet]:
        server, endpoint, seen = await scripted_broker(script)
        async with server:
            client = make_client(endpoint, keepalive_s=1)
            await client.connect()
            send = client.sender("busy", 0)
            # a publish every 50 ms for 1.2 s leaves no idle half-keepalive tick
            for k in range(24):
                send(b"x", k)
                await asyncio.sleep(0.05)
            busy_pings = sum(isinstance(p, PingReq) for p in seen)
            await asyncio.sleep(1.6)  # idle: at least one tick without activity
            idle_pings = sum(isinstance(p, PingReq) for p in seen) - busy_pings
            connected = client.connected
            await client.close()
            await wait_until(lambda: isinstance(seen[-1], Disconnect), 2)
            return busy_pings, idle_pings, connected, seen[-1]

    busy_pings, idle_pings, connected, last = run("uvloop", scenario())
    assert busy_pings == 0
    assert idle_pings >= 1
    assert connected
    assert last == Disconnect()


def test_client_reconnects_after_close_with_a_fresh_clean_session(
    mosquitto: RunningBroker,
) -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        old: list[bytes] = []
        new: list[bytes] = []
        client = make_client(mosquitto.endpoint, "again")
        await client.connect()
        await client.subscribe("bench/again", 0, lambda p, t: old.append(bytes(p)))
        client.sender("bench/unacked", 1)(b"never acked before close?", 1)
        await client.close()
        await client.connect()
        await client.subscribe("bench/again", 0, lambda p, t: new.append(bytes(p)))
        client.sender("bench/again", 0)(b"second life", 0)
        await wait_until(lambda: bool(new))
        inflight = client.inflight
        await client.close()
        return old, new, inflight

    old, new, inflight = run("uvloop", scenario())
    assert old == []
    assert new == [b"second life"]
    assert inflight == 0


@pytest.mark.parametrize("client_name", ["mqtt", "paho", "aiomqtt"])
def test_a_resumed_sessions_queued_message_before_the_subscription_is_counted_unmatched(
    mosquitto: RunningBroker, client_name: str
) -> None:
    """A persistent session resumed by a new client object: mosquitto delivers the message
    it queued right after CONNACK, before the client subscribes again, so no handler of the
    client matches it; it is dropped and counted, and that count reaches the worker's."""

    def persistent() -> Client:
        options = ClientOptions(client_id="resumed", clean_session=False, connect_timeout_s=5)
        return get_transport(client_name).create_client(mosquitto.endpoint, options)

    async def scenario() -> tuple[int, int, list[bytes]]:
        got: list[bytes] = []
        first, publisher, second = (
            persistent(),
            make_client(mosquitto.endpoint, "pub"),
            persistent(),
        )
        try:
            await first.connect()
            await first.subscribe("bench/resumed", 1, lambda p, t: None)
            await first.close()
            await publisher.connect()
            publisher.sender("bench/resumed", 1)(b"queued while away", 1)
            await publisher.flush(5)
            await second.connect()
            await wait_until(lambda: second.stats().unrouted == 1)
            await second.subscribe("bench/resumed", 1, lambda p, t: got.append(bytes(p)))
            publisher.sender("bench/resumed", 1)(b"after the subscription", 2)
            await wait_until(lambda: bool(got))
            return second.stats().unrouted, count_clients([second]).unmatched, got
        finally:
            for client in (first, publisher, second):
                await client.close()

    unrouted, worker_count, got = run("asyncio", scenario())
    assert (unrouted, worker_count) == (1, 1)
    assert got == [b"after the subscription"]
