"""The RESP2 codec: builders and the incremental parser with its two fast paths."""

from __future__ import annotations

from typing import Any

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbench.errors import TransportError
from mqbench.wire.resp import (
    RespError,
    RespParser,
    RespProtocolError,
    build_publish,
    decode_all,
    encode_command,
    encode_reply,
    message_prefix,
    publish_prefix,
)

Event = tuple[Any, ...]


class Recorder:
    """Collects what a parser dispatches; integer runs are expanded to single events."""

    def __init__(self, channels: tuple[bytes, ...] = (), runs: bool = True) -> None:
        self.events: list[Event] = []
        self.parser = RespParser(
            on_reply=lambda reply: self.events.append(("reply", reply)),
            on_integers=self._integers if runs else None,
        )
        for channel in channels:
            self.parser.set_handler(channel, self._handler(channel))

    def _integers(self, value: int, count: int) -> None:
        self.events.extend([("reply", value)] * count)

    def _handler(self, channel: bytes) -> Any:
        def handle(payload: bytes, t_recv_ns: int) -> None:
            self.events.append(("message", channel, bytes(payload), t_recv_ns))

        return handle

    def feed(self, chunks: list[bytes], t_recv_ns: int = 0) -> list[Event]:
        for chunk in chunks:
            self.parser.feed(chunk, t_recv_ns)
        return self.events


def message(channel: bytes, payload: bytes) -> bytes:
    return encode_reply([b"message", channel, payload])


def test_publish_frame_is_the_resp_array_redis_expects() -> None:
    assert build_publish(b"ch", b"hi\r\n") == b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$4\r\nhi\r\n\r\n"
    assert publish_prefix(b"ch", 4) + b"hi\r\n\r\n" == build_publish(b"ch", b"hi\r\n")
    assert encode_command("PUBLISH", b"ch", b"hi\r\n") == build_publish(b"ch", b"hi\r\n")


def test_commands_encode_str_int_and_bytes_arguments() -> None:
    assert encode_command("AUTH", "pässword", 7) == (
        b"*3\r\n$4\r\nAUTH\r\n$9\r\np\xc3\xa4ssword\r\n$1\r\n7\r\n"
    )


def test_message_prefix_matches_what_redis_sends_before_the_payload() -> None:
    frame = message(b"mqbench/a/0/1", b"x" * 64)
    assert frame.startswith(message_prefix(b"mqbench/a/0/1", 64))
    assert frame == message_prefix(b"mqbench/a/0/1", 64) + b"x" * 64 + b"\r\n"


def test_messages_go_to_the_channel_handler_with_the_read_time() -> None:
    rec = Recorder(channels=(b"a", b"b"))
    stream = message(b"a", b"1") + message(b"b", b"22") + message(b"a", b"3")
    assert rec.feed([stream], t_recv_ns=42) == [
        ("message", b"a", b"1", 42),
        ("message", b"b", b"22", 42),
        ("message", b"a", b"3", 42),
    ]


def test_a_message_for_a_channel_without_handler_is_an_ordinary_reply() -> None:
    rec = Recorder(channels=(b"a",))
    assert rec.feed([message(b"other", b"p")]) == [("reply", [b"message", b"other", b"p"])]


def test_subscribe_confirmation_pong_status_and_error_replies_are_decoded() -> None:
    rec = Recorder(channels=(b"a",))
    stream = (
        encode_reply([b"subscribe", b"a", 1])
        + b"+PONG\r\n"
        + b"-NOAUTH Authentication required.\r\n"
        + encode_reply([b"pong", b""])
        + b"$-1\r\n*-1\r\n"
    )
    assert rec.feed([stream]) == [
        ("reply", [b"subscribe", b"a", 1]),
        ("reply", b"PONG"),
        ("reply", RespError("NOAUTH Authentication required.")),
        ("reply", [b"pong", b""]),
        ("reply", None),
        ("reply", None),
    ]
    assert RespError("WRONGPASS invalid username-password pair").code == "WRONGPASS"


def test_runs_of_equal_publish_replies_are_reported_in_one_call() -> None:
    calls: list[tuple[int, int]] = []
    parser = RespParser(on_integers=lambda value, count: calls.append((value, count)))
    parser.feed(b":1\r\n" * 1000 + b":2\r\n" + b":1\r\n" * 3)
    expanded = [v for v, c in calls for _ in range(c)]
    assert expanded == [1] * 1000 + [2] + [1] * 3
    assert len(calls) < 40


def test_integer_runs_cut_mid_line_are_completed_by_the_next_chunk() -> None:
    calls: list[tuple[int, int]] = []
    parser = RespParser(on_integers=lambda value, count: calls.append((value, count)))
    parser.feed(b":1\r\n:1\r\n:1")
    parser.feed(b"0\r\n:1\r\n")
    expanded = [v for v, c in calls for _ in range(c)]
    assert expanded == [1, 1, 10, 1]


@pytest.mark.parametrize(
    "bad",
    [
        b"?what\r\n",
        b":12x\r\n",
        b"$3\r\nabcde\r\n",
        b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nxyz\r\n",
    ],
)
def test_malformed_input_raises_a_protocol_error(bad: bytes) -> None:
    rec = Recorder(channels=(b"a",))
    with pytest.raises(RespProtocolError):
        rec.feed([bad])
    assert issubclass(RespProtocolError, TransportError)


def test_a_one_mib_payload_arriving_in_small_chunks_is_delivered_once_intact() -> None:
    payload = bytes(range(256)) * 4096
    stream = message(b"big", payload) + message(b"big", payload[:10])
    rec = Recorder(channels=(b"big",))
    rec.feed([stream[i : i + 65536] for i in range(0, len(stream), 65536)])
    assert rec.events == [("message", b"big", payload, 0), ("message", b"big", payload[:10], 0)]


def test_the_fast_path_notices_a_changed_handler() -> None:
    rec = Recorder(channels=(b"a",))
    rec.feed([message(b"a", b"1") * 2])
    rec.parser.remove_handler(b"a")
    rec.feed([message(b"a", b"1")])
    assert rec.events[-1] == ("reply", [b"message", b"a", b"1"])


# --------------------------------------------------------------------------- property tests

channels = st.sampled_from([b"a", b"mqbench/x/0/1", b"chan\r\nnel", b""])
payload_bytes = st.binary(max_size=80) | st.sampled_from([b"\r\n", b"$3\r\n", b":1\r\n"])
simple = st.binary(max_size=20).filter(lambda b: b"\r" not in b and b"\n" not in b)
leaf = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.binary(max_size=40),
    st.none(),
    simple.map(lambda b: RespError("ERR " + b.decode("latin-1"))),
)
replies = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4), max_leaves=10)
frames = st.one_of(
    st.tuples(st.just("message"), channels, payload_bytes),
    st.tuples(st.just("reply"), replies),
    st.tuples(st.just("int"), st.sampled_from([0, 1, 1, 1, 2, 10])),
)


def encode_frame(frame: tuple[Any, ...]) -> bytes:
    if frame[0] == "message":
        return message(frame[1], frame[2])
    if frame[0] == "int":
        return b":%d\r\n" % frame[1]
    return encode_reply(frame[1])


def expected_events(frames_: list[tuple[Any, ...]], handled: tuple[bytes, ...]) -> list[Event]:
    events: list[Event] = []
    for frame in frames_:
        if frame[0] == "message" and frame[1] in handled:
            events.append(("message", frame[1], frame[2], 0))
        elif frame[0] == "message":
            events.append(("reply", [b"message", frame[1], frame[2]]))
        elif frame[0] == "int":
            events.append(("reply", frame[1]))
        else:
            events.append(("reply", frame[1]))
    return events


@settings(max_examples=300, deadline=None)
@given(
    frames_=st.lists(frames, max_size=25),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    runs=st.booleans(),
)
def test_any_split_of_any_stream_gives_the_same_events_as_the_whole_stream(
    frames_: list[tuple[Any, ...]], cuts: list[int], runs: bool
) -> None:
    handled = (b"a", b"mqbench/x/0/1", b"")
    stream = b"".join(encode_frame(f) for f in frames_)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[i:j] for i, j in zip([0, *points], [*points, len(stream)], strict=True)]
    rec = Recorder(channels=handled, runs=runs)
    assert rec.feed(chunks) == expected_events(frames_, handled)
    assert rec.parser.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(replies, max_size=10))
def test_decoding_agrees_with_hiredis(values: list[Any]) -> None:
    stream = b"".join(encode_reply(v) for v in values)
    reader = hiredis.Reader()
    reader.feed(stream)
    theirs: list[Any] = []
    while (item := reader.gets()) is not False:
        theirs.append(item)

    def normalise(value: Any) -> Any:
        if isinstance(value, RespError):
            return ("error", value.text)
        if isinstance(value, Exception):
            return ("error", str(value))
        if isinstance(value, list):
            return [normalise(v) for v in value]
        return value

    assert [normalise(v) for v in decode_all(stream)] == [normalise(v) for v in theirs]
