"""StreamConnection: coalesced, bounded writes, loss reporting and error wording (no socket)."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import Any

import pytest
from stream_fakes import FakeTransport, attach

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.base import ClientOptions
from mqbench.transports.events import ClientEvent, Disconnected, ProtocolError
from mqbench.transports.stream import COALESCE_MAX, StreamConnection, describe_oserror

Events = list[ClientEvent]


def make_stream(
    events: Events | None = None,
    lost: list[TransportError] | None = None,
    max_pending_bytes: int | None = None,
    **extra: Any,
) -> StreamConnection:
    def on_event(event: ClientEvent) -> None:
        if events is not None:
            events.append(event)

    def on_lost(failure: TransportError) -> int | None:
        if lost is not None:
            lost.append(failure)
        return 3

    options = ClientOptions(
        "c1", on_event=on_event, extra=extra, max_pending_bytes=max_pending_bytes
    )
    return StreamConnection("test at 127.0.0.1:1", options, lambda data: None, on_lost)


def test_sends_of_one_loop_iteration_leave_in_one_write_in_order() -> None:
    async def scenario() -> list[bytes]:
        stream = make_stream()
        transport = attach(stream)
        for k in range(100):
            assert stream.send(b"<", str(k).encode(), b">")
        assert transport.writes == []  # nothing before the iteration ends
        await asyncio.sleep(0)
        return transport.writes

    writes = asyncio.run(scenario())
    assert writes == [b"".join(b"<%d>" % k for k in range(100))]


def test_a_large_frame_is_written_at_once_after_what_was_queued() -> None:
    async def scenario() -> list[bytes]:
        stream = make_stream()
        transport = attach(stream)
        big = b"x" * COALESCE_MAX
        assert stream.send(b"a")
        assert stream.send(b"h", big, b"t")
        assert transport.writes == [b"a", b"h" + big + b"t"]
        await asyncio.sleep(0)
        return transport.writes

    assert len(asyncio.run(scenario())) == 2


def test_control_writes_keep_their_place_after_queued_sends() -> None:
    async def scenario() -> list[bytes]:
        stream = make_stream()
        transport = attach(stream)
        stream.send(b"m1")
        stream.write(b"PING")
        stream.send(b"m2")
        await asyncio.sleep(0)
        return transport.writes

    assert asyncio.run(scenario()) == [b"m1", b"PING", b"m2"]


def test_without_coalescing_every_frame_is_its_own_write() -> None:
    async def scenario() -> list[bytes]:
        stream = make_stream(coalesce_writes=False)
        transport = attach(stream)
        stream.send(b"a", b"b")
        stream.send(b"c")
        return transport.writes

    assert asyncio.run(scenario()) == [b"ab", b"c"]


def test_a_back_pressured_socket_refuses_and_counts_sends_over_the_bound_only() -> None:
    async def scenario() -> tuple[list[bool], int]:
        stream = make_stream(max_pending_bytes=1000)
        transport = attach(stream)
        stream.pause_writing()
        transport.buffered = 900
        below = stream.send(b"x" * 50)  # 900 buffered + 0 queued: under the bound
        transport.buffered = 1000
        over = [stream.send(b"y"), stream.send(b"z")]
        stream.resume_writing()
        after = stream.send(b"w")
        return [below, *over, after], stream.sends_refused

    results, refused = asyncio.run(scenario())
    assert results == [True, False, False, True]
    assert refused == 2


def test_a_send_while_not_connected_is_refused_without_counting() -> None:
    stream = make_stream()
    assert stream.send(b"x") is False
    assert stream.sends_refused == 0


def test_the_high_water_mark_never_exceeds_the_output_bound() -> None:
    async def scenario() -> list[tuple[int | None, int | None]]:
        stream = make_stream(max_pending_bytes=4096, write_buffer_high_bytes=1 << 30)
        return attach(stream).limits

    assert asyncio.run(scenario()) == [(4096, None)]


def test_a_loss_fails_waiters_and_reports_one_unexpected_disconnect_with_the_last_error() -> None:
    events: Events = []
    lost: list[TransportError] = []

    async def scenario() -> None:
        stream = make_stream(events, lost)
        attach(stream)
        stream.last_error = "-ERR 'slow consumer'"
        stream.connection_lost(None)

    asyncio.run(scenario())
    reason = "connection closed by the server (last error: -ERR 'slow consumer')"
    assert [str(e) for e in lost] == [reason]
    assert lost[0].kind is TransportErrorKind.DISCONNECTED
    assert events == [
        Disconnected(
            reason,
            expected=False,
            client_id="c1",
            endpoint="test at 127.0.0.1:1",
            unacked=3,
            last_error="-ERR 'slow consumer'",
        )
    ]


def test_fail_names_the_reason_in_a_protocol_error_and_the_disconnect() -> None:
    events: Events = []

    async def scenario() -> FakeTransport:
        stream = make_stream(events)
        transport = attach(stream)
        stream.fail("stale connection")
        assert not stream.connected
        stream.connection_lost(None)
        return transport

    transport = asyncio.run(scenario())
    assert transport.aborted
    assert [type(e) for e in events] == [ProtocolError, Disconnected]
    assert events[1].reason == "stale connection"


def test_close_writes_queued_frames_and_the_goodbye_and_reports_an_expected_disconnect() -> None:
    events: Events = []

    async def scenario() -> FakeTransport:
        stream = make_stream(events, close_timeout_s=0.05)
        transport = attach(stream)
        stream.send(b"last")
        await stream.close(b"BYE")
        assert transport.closed and not stream.connected
        stream.connection_lost(None)
        await stream.close(b"BYE")  # idempotent
        return transport

    transport = asyncio.run(scenario())
    assert transport.writes == [b"last", b"BYE"]
    assert events[-1].expected is True
    assert events[-1].reason == "closed by client"


def test_a_single_use_client_cannot_connect_again() -> None:
    async def scenario() -> TransportError:
        options = ClientOptions("c1")
        stream = StreamConnection("x", options, lambda d: None, lambda f: {}, reusable=False)
        attach(stream)
        stream.connection_lost(None)
        stream._opened = True  # as after a first connect
        with pytest.raises(TransportError) as info:
            await stream.connect(Endpoint("127.0.0.1", 1), asyncio.sleep)
        return info.value

    assert asyncio.run(scenario()).kind is TransportErrorKind.NOT_REUSABLE


def test_keepalive_ticks_while_connected_and_stops_with_the_connection() -> None:
    async def scenario() -> tuple[int, int]:
        stream = make_stream()
        attach(stream)
        ticks: list[float] = []
        stream.start_keepalive(0.01, lambda: ticks.append(0.0))
        await asyncio.sleep(0.1)
        seen = len(ticks)
        stream.connection_lost(None)
        await asyncio.sleep(0.05)
        return seen, len(ticks)

    seen, total = asyncio.run(scenario())
    assert seen >= 3
    assert total == seen


@pytest.mark.parametrize(
    ("error", "phrase"),
    [
        (OSError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 1)"), "connection refused"),
        (ConnectionResetError(errno.ECONNRESET, "x"), "connection reset by peer"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "cannot resolve host"),
        (OSError("no errno at all"), "no errno at all"),
    ],
)
def test_socket_errors_are_worded_from_their_errno(error: OSError, phrase: str) -> None:
    assert describe_oserror(error).startswith(phrase)


def test_a_drop_stays_unexpected_when_close_comes_before_the_socket_is_gone() -> None:
    # The keepalive drops the connection; the application sees "not connected" and calls
    # close() before the event loop has delivered connection_lost: still an unexpected loss.
    events: Events = []

    async def scenario() -> None:
        stream = make_stream(events, close_timeout_s=0.05)
        attach(stream)
        stream.fail("stale connection: no reply to 2 keepalive PINGs")
        await stream.close(b"BYE")
        stream.connection_lost(None)

    asyncio.run(scenario())
    assert [type(e) for e in events] == [ProtocolError, Disconnected]
    assert events[1].expected is False
    assert events[1].reason == "stale connection: no reply to 2 keepalive PINGs"


class LendableTransport(FakeTransport):
    """A fake transport over a real socket, so the session can be lent (``lend`` dups it)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else default

    def pause_reading(self) -> None:
        self.reading = False


def test_a_session_the_borrower_lost_is_reported_as_an_unexpected_disconnection() -> None:
    # the compiled core lost the lent socket: the client reports the loss as any other, so
    # the pool reconnects it, and the stream can connect again
    events: Events = []
    near, far = socket.socketpair()

    async def scenario() -> tuple[LendableTransport, StreamConnection]:
        stream = make_stream(events)
        transport = LendableTransport(near)
        stream.connection_made(transport)  # type: ignore[arg-type]
        stream.established()
        os.close(stream.lend())
        assert stream.lent and not transport.reading
        stream.lost_while_lent("connection closed by the server")
        stream.connection_lost(None)  # what asyncio does after the abort
        return transport, stream

    try:
        transport, stream = asyncio.run(scenario())
    finally:
        near.close()
        far.close()
    assert transport.aborted
    assert [(type(e), e.reason, e.expected) for e in events if isinstance(e, Disconnected)] == [
        (Disconnected, "connection closed by the server", False)
    ]
    assert not stream.connected and stream.loss_reason == "connection closed by the server"
