"""The calibration relays' framing, driven through fake transports (no sockets).

Each relay is fed the bytes the lean client sends and its output is decoded with the lean
client's own parsers, so "speaks enough of the protocol" is checked from the client's side.
"""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from mqbench.calibration import amqp_relay, mqtt_relay, nats_relay, redis_relay
from mqbench.calibration.relays import Hub, RelayConnection
from mqbench.records.format import HEADER
from mqbench.wire import amqp as amqp_wire
from mqbench.wire import nats as nats_wire
from mqbench.wire import resp as resp_wire
from mqbench.wire.mqtt import packets as mqtt_wire
from mqbench.wire.mqtt.parser import StreamParser


class FakeTransport:
    """Collects what a relay connection writes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return None

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def take(self) -> bytes:
        out = bytes(self.data)
        self.data.clear()
        return out


def connect(factory: Any) -> tuple[Any, FakeTransport]:
    conn = factory()
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


def payload(seq: int, size: int = 64) -> bytes:
    return HEADER.pack(3, seq, 1_700_000_000_000_000_000 + seq, 0) + bytes(size - HEADER.size)


def feed_bytewise(conn: RelayConnection, data: bytes) -> None:
    for i in range(len(data)):
        conn.data_received(data[i : i + 1])


# ------------------------------------------------------------------------------- MQTT


def mqtt_packets(data: bytes) -> list[Any]:
    published: list[Any] = []

    def on_publish(topic: bytes, body: memoryview, qos: int, pid: int, flags: int) -> None:
        published.append(("publish", bytes(topic), bytes(body), qos))

    packets: list[Any] = StreamParser(on_publish=on_publish).feed(data)
    return packets + published


def mqtt_session(factory: Any, client_id: str) -> tuple[Any, FakeTransport]:
    conn, transport = connect(factory)
    conn.data_received(mqtt_wire.Connect(client_id).encode())
    (connack,) = mqtt_packets(transport.take())
    assert connack == mqtt_wire.Connack(0)
    return conn, transport


def test_the_mqtt_relay_forwards_a_qos0_publish_to_the_subscriber_only() -> None:
    _hub, factory = mqtt_relay.relay_factory()
    sub, sub_out = mqtt_session(factory, "s")
    pub, pub_out = mqtt_session(factory, "p")
    sub.data_received(mqtt_wire.Subscribe(7, (("mqbench/t/0", 0),)).encode())
    assert mqtt_packets(sub_out.take()) == [mqtt_wire.Suback(7, (0,))]
    body = payload(1)
    feed_bytewise(pub, mqtt_wire.encode_publish("mqbench/t/0", body))
    pub.data_received(mqtt_wire.encode_publish("mqbench/other", body))
    assert mqtt_packets(sub_out.take()) == [("publish", b"mqbench/t/0", body, 0)]
    assert pub_out.take() == b""


def test_the_mqtt_relay_matches_wildcard_filters_and_answers_pings() -> None:
    _hub, factory = mqtt_relay.relay_factory()
    sub, sub_out = mqtt_session(factory, "s")
    pub, _ = mqtt_session(factory, "p")
    sub.data_received(mqtt_wire.Subscribe(1, (("mqbench/+/0", 0),)).encode())
    sub_out.take()
    pub.data_received(mqtt_wire.encode_publish("mqbench/x/0", b"a" * 24))
    pub.data_received(mqtt_wire.encode_publish("mqbench/x/1", b"b" * 24))
    sub.data_received(mqtt_wire.PINGREQ_BYTES)
    packets = mqtt_packets(sub_out.take())
    assert ("publish", b"mqbench/x/0", b"a" * 24, 0) in packets
    assert all(p[1] != b"mqbench/x/1" for p in packets if isinstance(p, tuple))
    assert mqtt_wire.PingResp() in packets


def test_the_mqtt_relay_refuses_qos1_publishes_and_mqtt5_by_closing() -> None:
    _hub, factory = mqtt_relay.relay_factory()
    pub, pub_out = mqtt_session(factory, "p")
    pub.data_received(mqtt_wire.encode_publish("t", b"x" * 24, qos=1, packet_id=1))
    assert pub_out.closed
    v5, v5_out = connect(factory)
    v5.data_received(mqtt_wire.Connect("c", protocol_level=5, properties={}).encode())
    assert mqtt_packets(v5_out.take()) == [mqtt_wire.Connack(1)]
    assert v5_out.closed


def test_a_relay_records_how_long_it_held_each_forwarding_read() -> None:
    hub, factory = mqtt_relay.relay_factory()
    assert hub.hop_stats() is None
    sub, _ = mqtt_session(factory, "s")
    pub, _ = mqtt_session(factory, "p")
    sub.data_received(mqtt_wire.Subscribe(1, (("t", 0),)).encode())
    for seq in range(5):
        pub.data_received(mqtt_wire.encode_publish("t", payload(seq)))
    pub.data_received(mqtt_wire.encode_publish("nobody", payload(9)))
    stats = hub.hop_stats()
    assert stats is not None
    assert stats.reads == 5
    assert 0 <= stats.p50_us <= stats.p99_us <= stats.max_us


def test_hop_percentiles_are_nearest_rank() -> None:
    hub = Hub()
    hub.hops = [k * 1000 for k in range(1, 101)]
    stats = hub.hop_stats()
    assert stats is not None
    assert (stats.reads, stats.p50_us, stats.p99_us, stats.max_us) == (100, 50.0, 99.0, 100.0)


# ------------------------------------------------------------------------------- NATS


class NatsSide:
    """A lean-client parser collecting what the relay sent to one connection."""

    def __init__(self) -> None:
        self.infos: list[dict[str, Any]] = []
        self.pongs = 0
        self.errors: list[str] = []
        self.messages: list[tuple[int, bytes]] = []
        self.parser = nats_wire.NatsParser(
            on_info=self.infos.append,
            on_pong=self._pong,
            on_err=self.errors.append,
        )

    def _pong(self) -> None:
        self.pongs += 1

    def handle(self, sid: int) -> None:
        self.parser.set_handler(sid, lambda body, t: self.messages.append((sid, bytes(body))))


def test_the_nats_relay_greets_with_info_and_forwards_pub_as_msg_per_subscription() -> None:
    _hub, factory = nats_relay.relay_factory()
    sub, sub_out = connect(factory)
    pub, pub_out = connect(factory)
    side = NatsSide()
    side.handle(5)
    side.handle(6)
    sub.data_received(nats_wire.build_connect("s") + b"SUB a.b 5\r\nSUB a.* 6\r\nPING\r\n")
    side.parser.feed(sub_out.take())
    assert side.infos[0]["max_payload"] == nats_relay.MAX_PAYLOAD
    assert side.pongs == 1
    body = payload(2)
    feed_bytewise(pub, nats_wire.build_pub(b"a.b", body))
    pub.data_received(nats_wire.build_pub(b"x.y", body))
    side.parser.feed(sub_out.take())
    assert sorted(side.messages) == [(5, body), (6, body)]
    assert pub_out.take().startswith(b"INFO ")


def test_the_nats_relay_stops_after_unsub_and_rejects_unknown_operations() -> None:
    _hub, factory = nats_relay.relay_factory()
    sub, sub_out = connect(factory)
    pub, _ = connect(factory)
    sub.data_received(b"SUB a 1\r\nUNSUB 1\r\n")
    pub.data_received(nats_wire.build_pub(b"a", b"x" * 24))
    side = NatsSide()
    side.handle(1)
    side.parser.feed(sub_out.take())
    assert side.messages == []
    sub.data_received(b"HPUB a 10 34\r\n")
    side.parser.feed(sub_out.take())
    assert side.errors == ["Unknown Protocol Operation"]
    assert sub_out.closed


@pytest.mark.parametrize(
    ("pattern", "subject", "matches"),
    [
        (b"a.*", b"a.b", True),
        (b"a.*", b"a.b.c", False),
        (b"a.>", b"a.b.c", True),
        (b"a.>", b"a", False),
        (b"a.b", b"a.b", True),
    ],
)
def test_nats_subject_matching(pattern: bytes, subject: bytes, matches: bool) -> None:
    assert nats_relay.subject_matches(pattern, subject) is matches


# ------------------------------------------------------------------------------- Redis


def test_the_redis_relay_answers_the_handshake_and_forwards_publish_as_message_push() -> None:
    _hub, factory = redis_relay.relay_factory()
    sub, sub_out = connect(factory)
    pub, pub_out = connect(factory)
    handshake = resp_wire.encode_command("CLIENT", "SETNAME", "s") + resp_wire.encode_command(
        "PING"
    )
    sub.data_received(handshake)
    assert resp_wire.decode_all(sub_out.take()) == [b"OK", b"PONG"]
    sub.data_received(resp_wire.encode_command("SUBSCRIBE", "ch"))
    assert resp_wire.decode_all(sub_out.take()) == [[b"subscribe", b"ch", 1]]
    body = payload(4)
    feed_bytewise(pub, resp_wire.build_publish(b"ch", body))
    pub.data_received(resp_wire.build_publish(b"none", body))
    assert resp_wire.decode_all(pub_out.take()) == [1, 0]
    got: list[bytes] = []
    parser = resp_wire.RespParser()
    parser.set_handler(b"ch", lambda data, t: got.append(bytes(data)))
    parser.feed(sub_out.take())
    assert got == [body]


def test_the_redis_relay_pongs_in_subscribed_mode_and_rejects_other_commands() -> None:
    _hub, factory = redis_relay.relay_factory()
    sub, sub_out = connect(factory)
    sub.data_received(resp_wire.encode_command("SUBSCRIBE", "ch"))
    sub_out.take()
    sub.data_received(resp_wire.encode_command("PING"))
    sub.data_received(resp_wire.encode_command("GET", "k"))
    pong, error = resp_wire.decode_all(sub_out.take())
    assert pong == [b"pong", b""]
    assert isinstance(error, resp_wire.RespError)
    assert "unknown command 'GET'" in error.text


# ------------------------------------------------------------------------------- AMQP


class AmqpSide:
    """The lean client's frame parser collecting what the relay sent to one connection."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, Any]] = []
        self.deliveries: list[tuple[int, bytes, int, bytes]] = []
        self.confirms: list[tuple[int, int]] = []
        self.parser = amqp_wire.FrameParser(
            lambda ch, ctag, tag, body: self.deliveries.append((ch, ctag, tag, bytes(body))),
            lambda ch, tag, multiple, nack: self.confirms.append((ch, tag)),
            lambda ch, f: self.frames.append((ch, f)),
        )

    def feed(self, data: bytes) -> list[Any]:
        before = len(self.frames)
        self.parser.feed(data)
        return [f for _, f in self.frames[before:]]


def amqp_session(factory: Any) -> tuple[Any, FakeTransport, AmqpSide]:
    conn, out = connect(factory)
    side = AmqpSide()
    conn.data_received(amqp_wire.PROTOCOL_HEADER)
    (start,) = side.feed(out.take())
    assert isinstance(start, commands.Connection.Start)
    assert "PLAIN" in str(start.mechanisms)
    conn.data_received(
        amqp_wire.method_frame(0, commands.Connection.StartOk(response="\0guest\0guest"))
    )
    (tune,) = side.feed(out.take())
    assert isinstance(tune, commands.Connection.Tune)
    conn.data_received(
        amqp_wire.method_frame(0, commands.Connection.TuneOk(2047, 131072, 60))
        + amqp_wire.method_frame(0, commands.Connection.Open("/"))
        + amqp_wire.method_frame(1, commands.Channel.Open())
        + amqp_wire.method_frame(1, commands.Exchange.Declare(exchange="mqbench"))
        + amqp_wire.method_frame(2, commands.Channel.Open())
        + amqp_wire.method_frame(2, commands.Confirm.Select())
    )
    replies = side.feed(out.take())
    assert [type(r) for r in replies] == [
        commands.Connection.OpenOk,
        commands.Channel.OpenOk,
        commands.Exchange.DeclareOk,
        commands.Channel.OpenOk,
        commands.Confirm.SelectOk,
    ]
    return conn, out, side


def test_the_amqp_relay_turns_publish_into_deliver_and_confirms_on_confirm_channels() -> None:
    _hub, factory = amqp_relay.relay_factory()
    sub, sub_out, sub_side = amqp_session(factory)
    pub, pub_out, pub_side = amqp_session(factory)
    sub.data_received(
        amqp_wire.method_frame(1, commands.Queue.Declare(queue="q1", exclusive=True))
        + amqp_wire.method_frame(
            1, commands.Queue.Bind(queue="q1", exchange="mqbench", routing_key="mqbench/t/0")
        )
        + amqp_wire.method_frame(1, commands.Basic.Consume(queue="q1", consumer_tag="c1"))
    )
    replies = sub_side.feed(sub_out.take())
    assert [type(r) for r in replies] == [
        commands.Queue.DeclareOk,
        commands.Queue.BindOk,
        commands.Basic.ConsumeOk,
    ]
    body = payload(5)
    prefix = amqp_wire.publish_prefix(1, b"mqbench", b"mqbench/t/0", len(body), 131072)
    assert prefix is not None
    feed_bytewise(pub, prefix + body + amqp_wire.FRAME_END)
    confirmed = amqp_wire.publish_frames(2, b"mqbench", b"mqbench/t/0", body, 4096)
    pub.data_received(confirmed)
    sub_side.feed(sub_out.take())
    assert sub_side.deliveries == [(1, b"c1", 1, body), (1, b"c1", 2, body)]
    pub_side.feed(pub_out.take())
    assert pub_side.confirms == [(2, 1)]


def test_the_amqp_relay_reassembles_bodies_split_over_frames_and_echoes_heartbeats() -> None:
    _hub, factory = amqp_relay.relay_factory()
    sub, sub_out, sub_side = amqp_session(factory)
    pub, pub_out, _pub_side = amqp_session(factory)
    sub.data_received(
        amqp_wire.method_frame(1, commands.Queue.Declare(queue="q"))
        + amqp_wire.method_frame(
            1, commands.Queue.Bind(queue="q", exchange="mqbench", routing_key="k")
        )
        + amqp_wire.method_frame(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    )
    sub_side.feed(sub_out.take())
    body = payload(6, size=10_000)
    pub.data_received(amqp_wire.publish_frames(1, b"mqbench", b"k", body, 4096))
    pub.data_received(amqp_wire.HEARTBEAT_FRAME)
    sub_side.feed(sub_out.take())
    assert sub_side.deliveries == [(1, b"c", 1, body)]
    assert pub_out.take() == amqp_wire.HEARTBEAT_FRAME


def test_the_amqp_relay_closes_the_connection_on_a_method_it_does_not_take() -> None:
    _hub, factory = amqp_relay.relay_factory()
    conn, out, side = amqp_session(factory)
    conn.data_received(amqp_wire.method_frame(1, commands.Basic.Get(queue="q")))
    (close,) = side.feed(out.take())
    assert isinstance(close, commands.Connection.Close)
    assert close.reply_code == 540
    assert "Basic.Get" in close.reply_text
    assert out.closed


def test_a_closed_amqp_consumer_gets_nothing_more() -> None:
    hub, factory = amqp_relay.relay_factory()
    sub, sub_out, _ = amqp_session(factory)
    pub, _, _ = amqp_session(factory)
    sub.data_received(
        amqp_wire.method_frame(1, commands.Queue.Declare(queue="q"))
        + amqp_wire.method_frame(
            1, commands.Queue.Bind(queue="q", exchange="mqbench", routing_key="k")
        )
        + amqp_wire.method_frame(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    )
    sub_out.take()
    sub.connection_lost(None)
    assert hub.consumers == {} and hub.bindings == {}
    pub.data_received(amqp_wire.publish_frames(1, b"mqbench", b"k", b"x" * 24, 4096))
    assert sub_out.take() == b""
