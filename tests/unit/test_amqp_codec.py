"""AMQP 0-9-1 framing: hand-built frames against pamqp, the parser at random splits, confirms."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest
from pamqp import commands, frame, header
from pamqp.body import ContentBody
from pamqp.heartbeat import Heartbeat
from stream_fakes import FakeTransport, attach

from mqbench.endpoint import Endpoint
from mqbench.transports.amqp import AmqpClient
from mqbench.transports.base import ClientOptions
from mqbench.wire.amqp import (
    HEARTBEAT_FRAME,
    AmqpCodecError,
    FrameParser,
    basic_ack,
    content_header,
    publish_frames,
    publish_method,
    publish_prefix,
)

Delivery = tuple[int, bytes, int, bytes]


def deliver_frames(channel: int, ctag: str, tag: int, body: bytes, frame_max: int) -> bytes:
    """What a broker sends for one delivery, marshalled by pamqp."""
    out = frame.marshal(
        commands.Basic.Deliver(ctag, tag, False, "mqbench", "bench/1"), channel
    ) + frame.marshal(header.ContentHeader(0, len(body), commands.Basic.Properties()), channel)
    step = frame_max - 8
    for start in range(0, len(body), step):
        out += frame.marshal(ContentBody(body[start : start + step]), channel)
    return out


class Recorder:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.confirms: list[tuple[int, int, bool, bool]] = []
        self.frames: list[tuple[int, object]] = []

    def parser(self, frame_max: int = 0) -> FrameParser:
        return FrameParser(
            lambda ch, ctag, tag, body: self.deliveries.append((ch, ctag, tag, bytes(body))),
            lambda ch, tag, multiple, nack: self.confirms.append((ch, tag, multiple, nack)),
            lambda ch, fr: self.frames.append((ch, fr)),
            frame_max,
        )


def split_randomly(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 40))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def test_publish_frames_decode_with_pamqp_as_publish_header_and_bodies_within_frame_max() -> None:
    body = os.urandom(10_000)
    raw = publish_frames(2, b"mqbench", b"bench/7", body, 4096)
    offset, decoded = 0, []
    while offset < len(raw):
        used, channel, value = frame.unmarshal(raw[offset:])
        assert channel == 2
        assert used <= 4096
        decoded.append(value)
        offset += used
    publish, content, *bodies = decoded
    assert isinstance(publish, commands.Basic.Publish)
    assert (publish.exchange, publish.routing_key, publish.mandatory) == (
        "mqbench",
        "bench/7",
        False,
    )
    assert isinstance(content, header.ContentHeader)
    assert content.body_size == len(body)
    assert len(bodies) == 3
    assert b"".join(bytes(b.value) for b in bodies) == body


def test_publish_prefix_plus_body_and_end_octet_equals_the_general_encoder() -> None:
    body = b"x" * 64
    prefix = publish_prefix(1, b"mqbench", b"t", len(body), 131072)
    assert prefix is not None
    assert prefix + body + b"\xce" == publish_frames(1, b"mqbench", b"t", body, 131072)
    assert publish_prefix(1, b"mqbench", b"t", 131072, 131072) is None


def test_empty_body_publish_has_a_header_and_no_body_frame() -> None:
    raw = publish_frames(1, b"x", b"k", b"", 4096)
    assert raw == publish_method(1, b"x", b"k") + content_header(1, 0)


def test_client_basic_ack_and_heartbeat_are_byte_identical_to_pamqp() -> None:
    assert basic_ack(1, 123456789, True) == frame.marshal(commands.Basic.Ack(123456789, True), 1)
    assert basic_ack(3, 5, False) == frame.marshal(commands.Basic.Ack(5, False), 3)
    assert frame.marshal(Heartbeat(), 0) == HEARTBEAT_FRAME


@pytest.mark.parametrize("seed", range(20))
def test_deliveries_split_at_random_points_arrive_whole_and_in_order(seed: int) -> None:
    rng = random.Random(seed)
    frame_max = 4096
    expected: list[Delivery] = []
    stream = b""
    for tag in range(1, 60):
        size = rng.choice([0, 1, 24, 64, 4088, 4089, 9000, rng.randint(0, 20000)])
        body = rng.randbytes(size)
        ctag = rng.choice(["c1", "c2", "consumer-3"])
        stream += deliver_frames(1, ctag, tag, body, frame_max)
        expected.append((1, ctag.encode(), tag, body))
        if tag % 7 == 0:
            stream += frame.marshal(commands.Basic.Ack(tag, True), 2) + HEARTBEAT_FRAME
    rec = Recorder()
    parser = rec.parser(frame_max)
    for chunk in split_randomly(stream, rng):
        parser.feed(chunk)
    assert rec.deliveries == expected
    assert rec.confirms == [(2, tag, True, False) for tag in range(7, 60, 7)]
    assert [type(f) for _, f in rec.frames] == [Heartbeat] * len(rec.confirms)
    assert parser.buffered == 0


def test_nack_and_single_ack_confirms_are_reported_with_their_flags() -> None:
    rec = Recorder()
    rec.parser().feed(
        frame.marshal(commands.Basic.Nack(9, False, False), 2)
        + frame.marshal(commands.Basic.Ack(10, False), 2)
    )
    assert rec.confirms == [(2, 9, False, True), (2, 10, False, False)]


def test_other_methods_are_decoded_by_pamqp_in_stream_order() -> None:
    rec = Recorder()
    rec.parser().feed(
        frame.marshal(commands.Queue.DeclareOk("q1", 0, 0), 1)
        + frame.marshal(commands.Basic.ConsumeOk("c1"), 1)
        + frame.marshal(commands.Connection.Close(320, "CONNECTION_FORCED - bye", 0, 0), 0)
    )
    kinds = [(ch, type(f).__name__) for ch, f in rec.frames]
    assert kinds == [(1, "DeclareOk"), (1, "ConsumeOk"), (0, "Close")]


def test_returned_message_content_is_consumed_and_counted_not_delivered() -> None:
    rec = Recorder()
    parser = rec.parser()
    returned = frame.marshal(commands.Basic.Return(312, "NO_ROUTE", "mqbench", "k"), 1)
    returned += frame.marshal(header.ContentHeader(0, 3, commands.Basic.Properties()), 1)
    returned += frame.marshal(ContentBody(b"abc"), 1)
    parser.feed(returned + deliver_frames(1, "c1", 1, b"ok", 4096))
    assert parser.dropped == 1
    assert rec.deliveries == [(1, b"c1", 1, b"ok")]


def test_a_wrong_frame_end_octet_is_a_codec_error() -> None:
    raw = bytearray(frame.marshal(commands.Basic.Ack(1, False), 2))
    raw[-1] = 0x00
    with pytest.raises(AmqpCodecError, match="frame end"):
        Recorder().parser().feed(bytes(raw))


def test_a_body_frame_without_a_content_header_is_a_codec_error() -> None:
    with pytest.raises(AmqpCodecError, match="without a content header"):
        Recorder().parser().feed(frame.marshal(ContentBody(b"zz"), 1))


def test_a_frame_announcing_more_than_frame_max_is_rejected_before_buffering_it() -> None:
    big = frame.marshal(ContentBody(b"z" * 10000), 1)
    with pytest.raises(AmqpCodecError, match="exceeds frame_max"):
        Recorder().parser(4096).feed(big[:100])


# --- publisher-confirm bookkeeping of the client (no network) --------------------------------


def confirm_client(**extra: Any) -> tuple[AmqpClient, list[int], FakeTransport]:
    """A connected client on a fake transport (inside a running loop), writes uncoalesced."""
    options = ClientOptions("unit", extra={"coalesce_writes": False, **extra})
    client = AmqpClient(Endpoint("127.0.0.1", 1), options)
    transport = attach(client._stream)
    acked: list[int] = []
    client.set_ack_handler(lambda tag, t: acked.append(tag))
    return client, acked, transport


def test_multiple_acks_call_the_handler_once_per_tag_in_publish_order() -> None:
    async def scenario() -> None:
        client, acked, transport = confirm_client()
        send = client.sender("t", 1)
        assert all(send(b"p", 100 + i) for i in range(10))
        assert len(transport.writes) == 10
        client._on_confirm(2, 4, True, False)
        assert acked == [100, 101, 102, 103]
        client._on_confirm(2, 4, True, False)  # a repeated ack changes nothing
        client._on_confirm(2, 10, True, False)
        assert acked == [100 + i for i in range(10)]
        assert client.inflight == 0

    asyncio.run(scenario())


def test_single_acks_out_of_order_then_multiple_ack_each_tag_only_once() -> None:
    async def scenario() -> None:
        client, acked, _ = confirm_client()
        send = client.sender("t", 1)
        for i in range(6):
            send(b"p", i)
        client._on_confirm(2, 3, False, False)
        client._on_confirm(2, 1, False, False)
        assert acked == [2, 0]
        client._on_confirm(2, 5, True, False)
        assert acked == [2, 0, 1, 3, 4]
        client._on_confirm(2, 6, False, False)
        assert acked == [2, 0, 1, 3, 4, 5]
        assert client.inflight == 0

    asyncio.run(scenario())


def test_nacked_publishes_are_counted_and_never_reach_the_ack_handler() -> None:
    async def scenario() -> None:
        client, acked, _ = confirm_client()
        send = client.sender("t", 1)
        for i in range(4):
            send(b"p", i)
        client._on_confirm(2, 2, True, True)
        client._on_confirm(2, 4, True, False)
        assert acked == [2, 3]
        assert client.nacked == 2

    asyncio.run(scenario())


def test_qos1_sender_refuses_when_max_inflight_publishes_are_unconfirmed() -> None:
    async def scenario() -> None:
        client, _, _ = confirm_client(max_inflight=3)
        send = client.sender("t", 1)
        assert [send(b"p", i) for i in range(4)] == [True, True, True, False]
        client._on_confirm(2, 1, False, False)
        assert send(b"p", 9)

    asyncio.run(scenario())


def test_senders_return_false_while_not_connected() -> None:
    client = AmqpClient(Endpoint("127.0.0.1", 1), ClientOptions("unit"))
    assert client.sender("t", 0)(b"p", 1) is False
    assert client.sender("t", 1)(b"p", 1) is False
