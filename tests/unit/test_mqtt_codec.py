"""The MQTT 3.1.1 codec: spec byte vectors, round trips, stream splitting, malformed input."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbench.errors import TransportError, TransportErrorKind
from mqbench.wire.mqtt.decode import decode_packet
from mqbench.wire.mqtt.errors import MqttCodecError, MqttProtocolError
from mqbench.wire.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
    encode_puback,
    encode_publish,
    publish_prefix,
)
from mqbench.wire.mqtt.parser import StreamParser
from mqbench.wire.mqtt.primitives import (
    MAX_REMAINING_LENGTH,
    decode_remaining_length,
    encode_remaining_length,
)
from mqbench.wire.mqtt.reason_codes import (
    RC_MALFORMED,
    RC_PACKET_TOO_LARGE,
    RC_PROTOCOL_ERROR,
    RC_RECEIVE_MAX_EXCEEDED,
)
from mqbench.wire.topics import topic_matches

# Remaining-length table of MQTT 3.1.1 section 2.2.3 (Table 2.4), boundaries of each size.
REMAINING_LENGTH_VECTORS = [
    (0, "00"),
    (127, "7f"),
    (128, "8001"),
    (16_383, "ff7f"),
    (16_384, "808001"),
    (2_097_151, "ffff7f"),
    (2_097_152, "80808001"),
    (268_435_455, "ffffff7f"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), REMAINING_LENGTH_VECTORS)
def test_remaining_length_encodes_as_in_the_spec_table(value: int, hex_bytes: str) -> None:
    assert encode_remaining_length(value) == bytes.fromhex(hex_bytes)


@pytest.mark.parametrize(("value", "hex_bytes"), REMAINING_LENGTH_VECTORS)
def test_remaining_length_decodes_as_in_the_spec_table(value: int, hex_bytes: str) -> None:
    raw = b"\x30" + bytes.fromhex(hex_bytes) + b"tail"
    assert decode_remaining_length(raw, 1) == (value, 1 + len(hex_bytes) // 2)


def test_remaining_length_beyond_the_maximum_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode_remaining_length(MAX_REMAINING_LENGTH + 1)
    with pytest.raises(ValueError):
        encode_remaining_length(-1)


def test_incomplete_remaining_length_reports_need_for_more_bytes() -> None:
    assert decode_remaining_length(b"\x30\xff\xff", 1) == (-1, -1)


def test_remaining_length_of_five_bytes_is_a_codec_error() -> None:
    with pytest.raises(MqttCodecError, match="more than 4 bytes"):
        decode_remaining_length(b"\x30\xff\xff\xff\xff\x01", 1)


def test_codec_error_is_a_protocol_error_and_a_transport_error() -> None:
    assert issubclass(MqttCodecError, MqttProtocolError)
    assert issubclass(MqttProtocolError, TransportError)


def test_connect_matches_the_spec_example_variable_header() -> None:
    # MQTT 3.1.1 section 3.1.2.10, Figure 3.6: name "MQTT", level 4, flags 0xCE
    # (user name, password, will QoS 1, will flag, clean session), keep alive 10.
    packet = Connect(
        client_id="c",
        clean_session=True,
        keepalive=10,
        username="u",
        password=b"p",
        will=Will("w", b"m", qos=1, retain=False),
    )
    variable_header = bytes.fromhex("00044d5154540 4ce000a".replace(" ", ""))
    payload = (
        b"\x00\x01c"  # client id
        + b"\x00\x01w"  # will topic
        + b"\x00\x01m"  # will message
        + b"\x00\x01u"  # user name
        + b"\x00\x01p"  # password
    )
    body = variable_header + payload
    assert packet.encode() == bytes((0x10, len(body))) + body
    assert decode_packet(packet.encode()) == packet


def test_minimal_connect_has_only_clean_session_flag() -> None:
    raw = Connect("id", keepalive=60).encode()
    assert raw == bytes.fromhex("100e00044d51545404 02 003c 0002 6964".replace(" ", ""))


def test_connack_is_four_bytes() -> None:
    assert Connack(0, False).encode() == bytes.fromhex("20020000")
    assert Connack(5, True).encode() == bytes.fromhex("20020105")


def test_publish_qos1_matches_the_spec_example() -> None:
    # Section 3.3.2.3, Figure 3.11: topic "a/b", packet identifier 10.
    raw = encode_publish("a/b", b"hi", qos=1, packet_id=10)
    assert raw == bytes.fromhex("3209 0003 612f62 000a 6869".replace(" ", ""))


def test_publish_qos0_has_no_packet_id_and_keeps_retain() -> None:
    assert encode_publish("a/b", b"hi") == bytes.fromhex("3007 0003612f62 6869".replace(" ", ""))
    assert encode_publish("a/b", b"", retain=True)[0] == 0x31


def test_publish_qos0_with_packet_id_is_rejected() -> None:
    with pytest.raises(ValueError):
        encode_publish("a/b", b"x", qos=0, packet_id=3)


def test_publish_prefix_plus_payload_is_the_full_frame() -> None:
    payload = bytes(range(200))
    assert publish_prefix("t/1", 200) + payload == encode_publish("t/1", payload)
    assert publish_prefix("t/1", 200, 1) + b"\x01\x02" + payload == encode_publish(
        "t/1", payload, qos=1, packet_id=0x0102
    )


def test_acks_match_the_spec_layout() -> None:
    assert PubAck(10).encode() == bytes.fromhex("4002000a")
    assert encode_puback(10) == bytes.fromhex("4002000a")
    assert PubRec(10).encode() == bytes.fromhex("5002000a")
    assert PubRel(10).encode() == bytes.fromhex("6202000a")
    assert PubComp(10).encode() == bytes.fromhex("7002000a")
    assert Unsuback(10).encode() == bytes.fromhex("b002000a")


def test_subscribe_matches_the_spec_example() -> None:
    # Section 3.8.3.1, Figure 3.22: "a/b" QoS 1 and "c/d" QoS 2, packet identifier 10.
    raw = Subscribe(10, (("a/b", 1), ("c/d", 2))).encode()
    assert raw == bytes.fromhex("820e 000a 0003612f62 01 0003632f64 02".replace(" ", ""))


def test_suback_matches_the_spec_example() -> None:
    # Section 3.9.3, Figure 3.26: success QoS 0, 1, 2 and failure.
    raw = Suback(10, (0, 1, 2, 0x80)).encode()
    assert raw == bytes.fromhex("9006 000a 00010280".replace(" ", ""))


def test_unsubscribe_matches_the_spec_example() -> None:
    # Section 3.10.3, Figure 3.30: "a/b" and "c/d".
    raw = Unsubscribe(10, ("a/b", "c/d")).encode()
    assert raw == bytes.fromhex("a20c 000a 0003612f62 0003632f64".replace(" ", ""))


def test_ping_and_disconnect_are_two_bytes() -> None:
    assert PingReq().encode() == b"\xc0\x00"
    assert PingResp().encode() == b"\xd0\x00"
    assert Disconnect().encode() == b"\xe0\x00"


# ----------------------------------------------------------------------------- round trips

texts = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    max_size=20,
)
packet_ids = st.integers(1, 65535)
payloads = st.binary(max_size=300)
qos_levels = st.integers(0, 2)


@st.composite
def publishes(draw: st.DrawFn) -> Publish:
    qos = draw(qos_levels)
    return Publish(
        topic=draw(texts),
        payload=draw(payloads),
        qos=qos,
        packet_id=draw(packet_ids) if qos else 0,
        retain=draw(st.booleans()),
        dup=draw(st.booleans()) if qos else False,
    )


@st.composite
def connects(draw: st.DrawFn) -> Connect:
    username = draw(st.none() | texts)
    return Connect(
        client_id=draw(texts),
        clean_session=draw(st.booleans()),
        keepalive=draw(st.integers(0, 65535)),
        username=username,
        password=draw(st.none() | st.binary(max_size=30)) if username is not None else None,
        will=draw(
            st.none() | st.builds(Will, texts, st.binary(max_size=40), qos_levels, st.booleans())
        ),
    )


packets: st.SearchStrategy[Packet] = st.one_of(
    connects(),
    st.builds(Connack, st.integers(0, 5), st.booleans()),
    publishes(),
    st.builds(PubAck, packet_ids),
    st.builds(PubRec, packet_ids),
    st.builds(PubRel, packet_ids),
    st.builds(PubComp, packet_ids),
    st.builds(
        Subscribe,
        packet_ids,
        st.lists(st.tuples(texts, qos_levels), min_size=1, max_size=4).map(tuple),
    ),
    st.builds(
        Suback,
        packet_ids,
        st.lists(st.sampled_from((0, 1, 2, 0x80)), min_size=1, max_size=4).map(tuple),
    ),
    st.builds(Unsubscribe, packet_ids, st.lists(texts, min_size=1, max_size=4).map(tuple)),
    st.builds(Unsuback, packet_ids),
    st.just(PingReq()),
    st.just(PingResp()),
    st.just(Disconnect()),
)


@given(st.integers(0, MAX_REMAINING_LENGTH))
def test_remaining_length_round_trips(value: int) -> None:
    raw = encode_remaining_length(value)
    assert decode_remaining_length(raw, 0) == (value, len(raw))


@given(packets)
def test_every_packet_round_trips_through_decode_packet(packet: Packet) -> None:
    assert decode_packet(packet.encode()) == packet


def test_large_publish_round_trips_with_a_four_byte_length() -> None:
    payload = random.Random(1).randbytes(2_200_000)
    raw = encode_publish("big", payload, qos=1, packet_id=7)
    assert raw[1:5] == encode_remaining_length(len(raw) - 5)
    assert decode_packet(raw) == Publish("big", payload, 1, 7)


def _feed_all(chunks: list[bytes]) -> list[Packet]:
    parser = StreamParser()
    out: list[Packet] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    parser.check_eof()
    return out


@settings(max_examples=150)
@given(st.lists(packets, max_size=12), st.randoms(use_true_random=False))
def test_stream_parser_yields_the_same_packets_for_any_split(
    items: list[Packet], rnd: random.Random
) -> None:
    stream = b"".join(p.encode() for p in items)
    cuts = sorted(rnd.sample(range(len(stream) + 1), k=min(len(stream) + 1, rnd.randint(0, 8))))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert _feed_all(chunks) == items


def test_stream_parser_fed_byte_by_byte_yields_every_packet() -> None:
    items: list[Packet] = [
        Connack(0, False),
        Publish("a/b", b"x" * 300, 1, 5),
        Publish("c", b"", 0, 0, retain=True),
        Suback(1, (0,)),
        PingResp(),
    ]
    stream = b"".join(p.encode() for p in items)
    assert _feed_all([stream[k : k + 1] for k in range(len(stream))]) == items


def _fast_path_parser(seen: list[Packet], *, with_on_packet: bool) -> StreamParser:
    def on_publish(topic: bytes, payload: memoryview, qos: int, pid: int, flags: int) -> None:
        seen.append(
            Publish(topic.decode(), bytes(payload), qos, pid, bool(flags & 1), bool(flags & 8))
        )

    def on_ack(kind: int, pid: int) -> None:
        ack_types: dict[int, type[PubAck | PubRec | PubRel | PubComp]] = {
            4: PubAck,
            5: PubRec,
            6: PubRel,
            7: PubComp,
        }
        seen.append(ack_types[kind](pid))

    return StreamParser(on_publish, on_ack, seen.append if with_on_packet else None)


def _feed_in_random_steps(parser: StreamParser, stream: bytes, rnd: random.Random) -> list[Packet]:
    returned: list[Packet] = []
    pos = 0
    while pos < len(stream):
        step = rnd.randint(1, 64)
        returned += parser.feed(stream[pos : pos + step])
        pos += step
    return returned


@settings(max_examples=100)
@given(st.lists(packets, max_size=12), st.randoms(use_true_random=False))
def test_fast_paths_with_on_packet_deliver_every_packet_in_stream_order(
    items: list[Packet], rnd: random.Random
) -> None:
    seen: list[Packet] = []
    parser = _fast_path_parser(seen, with_on_packet=True)
    stream = b"".join(p.encode() for p in items)
    assert _feed_in_random_steps(parser, stream, rnd) == []
    assert seen == items


@settings(max_examples=100)
@given(st.lists(packets, max_size=12), st.randoms(use_true_random=False))
def test_fast_paths_without_on_packet_return_the_other_packets_in_order(
    items: list[Packet], rnd: random.Random
) -> None:
    seen: list[Packet] = []
    parser = _fast_path_parser(seen, with_on_packet=False)
    stream = b"".join(p.encode() for p in items)
    returned = _feed_in_random_steps(parser, stream, rnd)
    fast_types = (Publish, PubAck, PubRec, PubRel, PubComp)
    assert seen == [p for p in items if isinstance(p, fast_types)]
    assert returned == [p for p in items if not isinstance(p, fast_types)]


def test_exception_in_a_callback_propagates_out_of_feed() -> None:
    def on_publish(topic: bytes, payload: memoryview, qos: int, pid: int, flags: int) -> None:
        raise MqttProtocolError("not now")

    with pytest.raises(MqttProtocolError, match="not now"):
        StreamParser(on_publish).feed(encode_publish("t", b"x"))


def test_partial_large_packet_is_held_until_complete() -> None:
    raw = encode_publish("t", bytes(100_000))
    parser = StreamParser()
    assert parser.feed(raw[:10]) == []
    assert parser.feed(raw[10:50_000]) == []
    assert parser.buffered == 50_000
    assert parser.feed(raw[50_000:] + PingResp().encode()) == [
        Publish("t", bytes(100_000)),
        PingResp(),
    ]
    assert parser.buffered == 0


# ----------------------------------------------------------------------------- malformed


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x30\xff\xff\xff\xff\x01", "more than 4 bytes"),
        (b"\x00\x00", "reserved packet type 0"),
        (b"\xf0\x00", "reserved packet type 15"),
        (b"\x80\x05\x00\x01\x00\x00\x00", "invalid fixed-header flags"),
        (b"\x36\x03\x00\x00\x00", "QoS 3"),
        (b"\x32\x04\x00\x00\x00\x00", "packet identifier 0"),
        (b"\x30\x03\x00\x05\x61", "truncated"),
        (b"\x30\x01\x00", "truncated"),
        (b"\x40\x03\x00\x01\x00", "trailing"),
        (b"\x90\x03\x00\x01\x03", "SUBACK return code"),
        (b"\x82\x02\x00\x01", "without topic filters"),
        (b"\x20\x02\x02\x00", "CONNACK reserved flags"),
        (Connect("x").encode().replace(b"MQTT", b"MQTX"), "unknown protocol name"),
        (b"\x30\x05\x00\x02\xff\xfe\x00", "UTF-8"),
    ],
)
def test_malformed_input_raises_a_codec_error(raw: bytes, message: str) -> None:
    with pytest.raises(MqttCodecError, match=message):
        StreamParser().feed(raw)
    with pytest.raises(MqttCodecError):
        decode_packet(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x30\x03\x00\x05\x61",  # topic longer than the packet
        b"\x30\x00",  # no topic length
        b"\x32\x03\x00\x01\x61",  # QoS 1 without packet id
        b"\x36\x03\x00\x00\x00",  # QoS 3
        b"\x38\x02\x00\x00",  # QoS 0 with DUP
    ],
)
def test_malformed_publish_raises_on_the_fast_path_too(raw: bytes) -> None:
    parser = StreamParser(lambda *args: None, lambda *args: None)
    with pytest.raises(MqttCodecError):
        parser.feed(raw)


def test_truncated_packet_raises_in_one_shot_decoding_and_at_end_of_stream() -> None:
    raw = encode_publish("a/b", b"payload")
    with pytest.raises(MqttCodecError, match="truncated"):
        decode_packet(raw[:-1])
    parser = StreamParser()
    assert parser.feed(raw[:-1]) == []
    with pytest.raises(MqttCodecError, match="stream ended inside a packet"):
        parser.check_eof()


def test_packet_larger_than_the_limit_is_rejected_before_buffering() -> None:
    parser = StreamParser(max_packet_size=1000)
    with pytest.raises(MqttCodecError, match="exceeds the limit") as raised:
        parser.feed(publish_prefix("t", 5000))
    assert raised.value.reason_code == RC_PACKET_TOO_LARGE


def test_protocol_errors_carry_their_mqtt5_reason_code_and_kind() -> None:
    with pytest.raises(MqttCodecError) as raised:
        decode_packet(bytes((0x62, 2, 0, 0)))
    assert raised.value.reason_code == RC_MALFORMED
    assert raised.value.kind is TransportErrorKind.PROTOCOL
    assert MqttProtocolError("x").reason_code == RC_PROTOCOL_ERROR
    assert MqttProtocolError("x", RC_RECEIVE_MAX_EXCEEDED).reason_code == RC_RECEIVE_MAX_EXCEEDED


def test_password_without_user_name_is_malformed_in_3_1_1() -> None:
    raw = bytearray(Connect("x", password=b"p").encode())
    with pytest.raises(MqttCodecError, match="password without user name"):
        decode_packet(bytes(raw))


# ----------------------------------------------------------------------------- topics


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("a/b", "a/b", True),
        ("a/b", "a/c", False),
        ("a/+", "a/b", True),
        ("a/+", "a/b/c", False),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("#", "a/b", True),
        ("+/+", "/x", True),
        ("#", "$SYS/x", False),
        ("+/x", "$SYS/x", False),
        ("$SYS/#", "$SYS/x", True),
        ("a/+/c", "a/b/c", True),
        ("a/+/c", "a/b/d", False),
    ],
)
def test_topic_filters_match_like_the_spec_says(
    topic_filter: str, topic: str, expected: bool
) -> None:
    assert topic_matches(topic_filter, topic) is expected
