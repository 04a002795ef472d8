"""The NATS protocol codec: frame builders and the incremental server-frame parser."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbench.errors import TransportError
from mqbench.wire.nats import (
    NatsParser,
    NatsProtocolError,
    build_connect,
    build_pub,
    build_sub,
    build_unsub,
    encode_subject,
    pub_header,
)

Event = tuple[Any, ...]


class Recorder:
    """Collects everything a parser dispatches, in order."""

    def __init__(self, handled_sids: tuple[int, ...] = ()) -> None:
        self.events: list[Event] = []
        self.parser = NatsParser(
            on_info=lambda info: self.events.append(("info", info)),
            on_ping=lambda: self.events.append(("ping",)),
            on_pong=lambda: self.events.append(("pong",)),
            on_ok=lambda: self.events.append(("ok",)),
            on_err=lambda text: self.events.append(("err", text)),
            on_unhandled=lambda subject, sid, reply, payload: self.events.append(
                ("msg", subject, sid, reply, bytes(payload))
            ),
        )
        for sid in handled_sids:
            self.parser.set_handler(sid, self._handler(sid))

    def _handler(self, sid: int) -> Any:
        def handle(payload: bytes, t_recv_ns: int) -> None:
            self.events.append(("fast", sid, bytes(payload), t_recv_ns))

        return handle

    def feed_chunks(self, chunks: list[bytes], t_recv_ns: int = 0) -> list[Event]:
        for chunk in chunks:
            self.parser.feed(chunk, t_recv_ns)
        return self.events


INFO = {"server_id": "S1", "version": "2.10.0", "max_payload": 1048576, "proto": 1}

STREAM = b"".join(
    [
        b"INFO " + json.dumps(INFO).encode() + b"\r\n",
        b"+OK\r\n",
        b"PING\r\n",
        b"MSG foo.bar 1 5\r\nhello\r\n",
        b"MSG foo.bar 1 _INBOX.abc 3\r\nhey\r\n",
        b"MSG a 2 6\r\nx\r\ny\r\n\r\n",
        b"MSG empty 1 0\r\n\r\n",
        b"PONG\r\n",
        b"-ERR 'Unknown Protocol Operation'\r\n",
        b"MSG big 3 300\r\n" + bytes(range(256)) + b"\r\n" * 22 + b"\r\n",
        b"MSG foo.bar 1 5\r\nhello\r\n",
    ]
)

EXPECTED: list[Event] = [
    ("info", INFO),
    ("ok",),
    ("ping",),
    ("msg", "foo.bar", 1, None, b"hello"),
    ("msg", "foo.bar", 1, "_INBOX.abc", b"hey"),
    ("msg", "a", 2, None, b"x\r\ny\r\n"),
    ("msg", "empty", 1, None, b""),
    ("pong",),
    ("err", "Unknown Protocol Operation"),
    ("msg", "big", 3, None, bytes(range(256)) + b"\r\n" * 22),
    ("msg", "foo.bar", 1, None, b"hello"),
]


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    chunks, start = [], 0
    for p in [*points, len(data)]:
        chunks.append(data[start:p])
        start = p
    return chunks


def test_stream_fed_whole_yields_every_frame_in_order() -> None:
    assert Recorder().feed_chunks([STREAM]) == EXPECTED


def test_stream_fed_byte_by_byte_yields_the_same_frames() -> None:
    chunks = [STREAM[i : i + 1] for i in range(len(STREAM))]
    assert Recorder().feed_chunks(chunks) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_stream_split_anywhere_yields_the_same_frames(cuts: list[int]) -> None:
    assert Recorder().feed_chunks(split_at(STREAM, cuts)) == EXPECTED


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=200), min_size=1, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=30),
)
def test_messages_reach_the_handler_of_their_sid_intact_for_any_split(
    payloads: list[bytes], cuts: list[int]
) -> None:
    frames = [
        b"MSG s.%d %d %d\r\n%s\r\n" % (i % 3, 1 + i % 2, len(p), p) for i, p in enumerate(payloads)
    ]
    stream = b"PING\r\n".join(frames)
    rec = Recorder(handled_sids=(1, 2))
    events = rec.feed_chunks(split_at(stream, cuts), t_recv_ns=42)
    fast = [e for e in events if e[0] == "fast"]
    assert fast == [("fast", 1 + i % 2, p, 42) for i, p in enumerate(payloads)]
    assert events.count(("ping",)) == len(payloads) - 1


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=40),
    size=st.integers(min_value=0, max_value=100),
    cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=30),
)
def test_a_stream_of_same_size_messages_is_delivered_intact_for_any_split(
    count: int, size: int, cuts: list[int]
) -> None:
    payloads = [bytes([i % 256]) * size for i in range(count)]
    stream = b"".join(b"MSG s 1 %d\r\n%s\r\n" % (size, p) for p in payloads)
    rec = Recorder(handled_sids=(1,))
    events = rec.feed_chunks(split_at(stream, cuts))
    assert events == [("fast", 1, p, 0) for p in payloads]


def test_a_handler_that_removes_itself_gets_no_further_messages_of_the_same_chunk() -> None:
    rec = Recorder()
    seen: list[bytes] = []

    def once(payload: bytes, t_recv_ns: int) -> None:
        seen.append(payload)
        rec.parser.remove_handler(1)

    rec.parser.set_handler(1, once)
    rec.parser.feed(b"MSG a 1 1\r\nx\r\nMSG a 1 1\r\ny\r\nMSG a 1 1\r\nz\r\n")
    assert seen == [b"x"]
    assert rec.events == [("msg", "a", 1, None, b"y"), ("msg", "a", 1, None, b"z")]


def test_a_payload_without_its_crlf_is_rejected_on_the_fast_path_too() -> None:
    rec = Recorder(handled_sids=(1,))
    rec.parser.feed(b"MSG a 1 2\r\nok\r\n")
    with pytest.raises(NatsProtocolError, match="not followed by CRLF"):
        rec.parser.feed(b"MSG a 1 2\r\nokXY")


def test_handler_receives_the_receive_time_of_the_chunk_that_completed_the_message() -> None:
    rec = Recorder(handled_sids=(7,))
    rec.parser.feed(b"MSG t 7 4\r\nab", 100)
    rec.parser.feed(b"cd\r\nMSG t 7 1\r\nz\r\n", 200)
    assert rec.events == [("fast", 7, b"abcd", 200), ("fast", 7, b"z", 200)]


def test_messages_for_a_removed_sid_go_to_the_unhandled_callback() -> None:
    rec = Recorder(handled_sids=(1,))
    rec.parser.feed(b"MSG a 1 1\r\nx\r\n")
    rec.parser.remove_handler(1)
    rec.parser.feed(b"MSG a 1 1\r\ny\r\n")
    assert rec.events == [("fast", 1, b"x", 0), ("msg", "a", 1, None, b"y")]


def test_incomplete_frame_is_kept_until_the_rest_arrives() -> None:
    rec = Recorder()
    rec.parser.feed(b"MSG a 1 10\r\n01234")
    assert rec.events == []
    assert rec.parser.buffered == len(b"MSG a 1 10\r\n01234")
    rec.parser.feed(b"56789\r\n")
    assert rec.events == [("msg", "a", 1, None, b"0123456789")]
    assert rec.parser.buffered == 0


def test_err_text_is_passed_without_quotes() -> None:
    rec = Recorder()
    rec.parser.feed(b"-ERR 'Authorization Violation'\r\n")
    assert rec.events == [("err", "Authorization Violation")]


def test_control_operations_are_case_insensitive() -> None:
    rec = Recorder()
    rec.parser.feed(b"ping\r\nPong\r\n+ok\r\n-err 'x'\r\n")
    assert rec.events == [("ping",), ("pong",), ("ok",), ("err", "x")]


@pytest.mark.parametrize(
    "frame",
    [
        b"MSG foo 1\r\n",
        b"MSG foo 1 2 3 4\r\n",
        b"MSG foo x 3\r\nabc\r\n",
        b"MSG foo 1 -3\r\nabc\r\n",
        b"MSG foo 1 3\r\nabcXY",
        b"FOO bar\r\n",
        b"INFO {not json}\r\n",
        b"INFO [1, 2]\r\n",
        b"HMSG foo 1 10 12\r\nNATS/1.0\r\n\r\nhi\r\n",
        b"\r\n",
    ],
)
def test_malformed_input_raises_a_protocol_error(frame: bytes) -> None:
    with pytest.raises(NatsProtocolError):
        Recorder().parser.feed(frame)


def test_protocol_error_is_a_transport_error() -> None:
    assert issubclass(NatsProtocolError, TransportError)


def test_control_line_without_end_is_rejected_once_it_is_too_long() -> None:
    parser = Recorder().parser
    with pytest.raises(NatsProtocolError, match="longer than"):
        parser.feed(b"INFO " + b"x" * (2 << 20))


def test_connect_frame_sets_the_options_the_client_relies_on() -> None:
    frame = build_connect("bench-1", user="u", password="p")
    assert frame.startswith(b"CONNECT ") and frame.endswith(b"\r\n")
    options = json.loads(frame[len(b"CONNECT ") : -2])
    assert options["verbose"] is False
    assert options["pedantic"] is False
    assert options["echo"] is True
    assert options["headers"] is False
    assert options["no_responders"] is False
    assert options["name"] == "bench-1"
    assert (options["user"], options["pass"]) == ("u", "p")
    assert "auth_token" not in options


def test_client_frames_have_the_documented_shape() -> None:
    assert build_sub(b"a.b", 7) == b"SUB a.b 7\r\n"
    assert build_sub(b"a.b", 7, b"workers") == b"SUB a.b workers 7\r\n"
    assert build_unsub(7) == b"UNSUB 7\r\n"
    assert build_unsub(7, 10) == b"UNSUB 7 10\r\n"
    assert pub_header(b"a.b", 5) == b"PUB a.b 5\r\n"
    assert build_pub(b"a.b", b"hello", b"r") == b"PUB a.b r 5\r\nhello\r\n"


def test_built_pub_frames_parse_back_as_the_same_message() -> None:
    payload = b"\x00\r\n\xff" * 10
    wire = build_pub(b"x.y", payload).replace(b"PUB x.y", b"MSG x.y 4", 1)
    rec = Recorder()
    rec.parser.feed(wire)
    assert rec.events == [("msg", "x.y", 4, None, payload)]


@pytest.mark.parametrize("subject", ["", "a b", "a..b", ".a", "a.", "a\tb"])
def test_invalid_subjects_are_rejected(subject: str) -> None:
    with pytest.raises(ValueError):
        encode_subject(subject, wildcards=True)


def test_wildcards_are_allowed_only_for_subscriptions() -> None:
    assert encode_subject("a.*.>", wildcards=True) == b"a.*.>"
    with pytest.raises(ValueError):
        encode_subject("a.*", wildcards=False)
    with pytest.raises(ValueError):
        encode_subject("a.>.b", wildcards=True)
