"""AMQP 0-9-1 framing for the lean client: hand-built hot frames, pamqp for everything else.

A frame is ``type:u8 channel:u16 size:u32 payload[size] 0xCE``. The benchmark's hot frames
are built and parsed here without creating objects:

* outbound ``Basic.Publish`` + content header + body frame(s): :func:`publish_prefix` gives
  the bytes in front of the payload (cached per payload size by the sender), so a publish is
  one concatenation; bodies larger than one frame are split by :func:`publish_frames`;
* inbound ``Basic.Deliver`` + header + body: :class:`FrameParser` hands the body to
  ``on_deliver`` as a view into the read (no copy when the body is in one frame);
* ``Basic.Ack``/``Basic.Nack`` from the broker (publisher confirms) go to ``on_confirm``;
  :func:`basic_ack` builds the client's (batched) consumer ack.

Every other frame (connection and channel handshakes, RPC replies, heartbeats) is decoded
by ``pamqp.frame.unmarshal`` and handed to ``on_frame``; outbound methods are marshalled by
:func:`method_frame` (``pamqp.frame.marshal``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from pamqp import frame, heartbeat
from pamqp.base import Frame

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = b"\xce"
FRAME_END_BYTE: Final = 0xCE
FRAME_OVERHEAD: Final = 8
"""Bytes a frame adds around its payload (7-byte header + end octet)."""
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"
DEFAULT_FRAME_MAX: Final = 131072
MIN_FRAME_MAX: Final = 4096

_BASIC_DELIVER: Final = b"\x00\x3c\x00\x3c"
_BASIC_ACK: Final = b"\x00\x3c\x00\x50"
_BASIC_NACK: Final = b"\x00\x3c\x00\x78"
_BASIC_RETURN: Final = b"\x00\x3c\x00\x32"
_BASIC_GET_OK: Final = b"\x00\x3c\x00\x47"

_frame_head = struct.Struct(">BHI")
_u64 = struct.Struct(">Q")

DeliverCallback = Callable[[int, bytes, int, memoryview], None]
"""``(channel, consumer_tag, delivery_tag, body)``; body is valid only during the call."""
ConfirmCallback = Callable[[int, int, bool, bool], None]
"""``(channel, delivery_tag, multiple, nack)`` for Basic.Ack / Basic.Nack from the broker."""
FrameCallback = Callable[[int, Frame | heartbeat.Heartbeat], None]
"""``(channel, frame)`` for every other frame, decoded by pamqp."""


class AmqpCodecError(Exception):
    """The byte stream is not valid AMQP 0-9-1 framing."""


def shortstr(value: bytes) -> bytes:
    """An AMQP short string (length octet + bytes, at most 255 bytes)."""
    if len(value) > 255:
        raise ValueError(f"short string longer than 255 bytes ({len(value)})")
    return bytes((len(value),)) + value


def method_frame(channel: int, method: Frame) -> bytes:
    """A method frame marshalled by pamqp."""
    return frame.marshal(method, channel)


def _frame(kind: int, channel: int, payload: bytes) -> bytes:
    return _frame_head.pack(kind, channel, len(payload)) + payload + FRAME_END


def publish_method(channel: int, exchange: bytes, routing_key: bytes) -> bytes:
    """The ``Basic.Publish`` method frame (mandatory and immediate off)."""
    args = b"\x00\x00" + shortstr(exchange) + shortstr(routing_key) + b"\x00"
    return _frame(FRAME_METHOD, channel, b"\x00\x3c\x00\x28" + args)


def content_header(channel: int, body_size: int) -> bytes:
    """A Basic content header frame without properties (transient delivery mode)."""
    return _frame(FRAME_HEADER, channel, b"\x00\x3c\x00\x00" + _u64.pack(body_size) + b"\x00\x00")


def publish_prefix(
    channel: int, exchange: bytes, routing_key: bytes, size: int, frame_max: int
) -> bytes | None:
    """Bytes before a ``size``-byte body that fits one body frame (then add the body + 0xCE).

    None when the body needs more than one frame (use :func:`publish_frames`).
    """
    if frame_max and size > frame_max - FRAME_OVERHEAD:
        return None
    return (
        publish_method(channel, exchange, routing_key)
        + content_header(channel, size)
        + _frame_head.pack(FRAME_BODY, channel, size)
    )


def publish_frames(
    channel: int, exchange: bytes, routing_key: bytes, body: bytes, frame_max: int
) -> bytes:
    """A complete publish of any size: method, header and body frames of <= ``frame_max``."""
    parts: list[bytes | memoryview] = [
        publish_method(channel, exchange, routing_key),
        content_header(channel, len(body)),
    ]
    step = (frame_max - FRAME_OVERHEAD) if frame_max else max(len(body), 1)
    view = memoryview(body)
    for start in range(0, len(body), step):
        chunk = view[start : start + step]
        parts += [_frame_head.pack(FRAME_BODY, channel, len(chunk)), chunk, FRAME_END]
    return b"".join(parts)


def basic_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """A client ``Basic.Ack`` frame (21 bytes)."""
    return (
        _frame_head.pack(FRAME_METHOD, channel, 13)
        + _BASIC_ACK
        + _u64.pack(delivery_tag)
        + (b"\x01" if multiple else b"\x00")
        + FRAME_END
    )


class FrameParser:
    """Incremental parser of the frames a broker sends; callbacks in stream order.

    A frame split over reads is kept until complete (accumulated linearly). Content of a
    ``Basic.Deliver`` split over several body frames is joined before ``on_deliver``.
    Content after ``Basic.Return``/``Basic.GetOk`` is consumed and counted in ``dropped``.
    An exception raised by a callback propagates out of :meth:`feed`.
    """

    __slots__ = (
        "_buf",
        "_content",
        "_frame_max",
        "_need",
        "_on_confirm",
        "_on_deliver",
        "_on_frame",
        "dropped",
    )

    def __init__(
        self,
        on_deliver: DeliverCallback,
        on_confirm: ConfirmCallback,
        on_frame: FrameCallback,
        frame_max: int = 0,
    ) -> None:
        self._on_deliver = on_deliver
        self._on_confirm = on_confirm
        self._on_frame = on_frame
        self._frame_max = frame_max
        self._buf = bytearray()
        self._need = 0
        # channel -> [consumer_tag (None: drop), delivery_tag, body_size (-1: no header yet),
        #             chunks]
        self._content: dict[int, list[object]] = {}
        self.dropped = 0
        """Messages whose content was consumed without delivery (returned, Basic.Get)."""

    @property
    def frame_max(self) -> int:
        """Largest frame accepted (0: no limit)."""
        return self._frame_max

    @frame_max.setter
    def frame_max(self, value: int) -> None:
        self._frame_max = value

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back for the next read."""
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        """Parse ``data``; raises :class:`AmqpCodecError` on malformed framing."""
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return
            data = bytes(self._buf)
            self._buf = bytearray()
            self._need = 0
        n = len(data)
        mv = memoryview(data)
        head = _frame_head.unpack_from
        u64 = _u64.unpack_from
        content = self._content
        on_deliver = self._on_deliver
        frame_max = self._frame_max
        i = 0
        while i + 7 <= n:
            kind, channel, size = head(data, i)
            p = i + 7
            end = p + size
            if end >= n:
                if frame_max and size + FRAME_OVERHEAD > frame_max:
                    raise AmqpCodecError(f"frame of {size} bytes exceeds frame_max {frame_max}")
                self._need = end + 1 - i
                break
            if data[end] != FRAME_END_BYTE:
                raise AmqpCodecError(f"frame end octet is {data[end]:#04x}, not 0xce")
            if kind == FRAME_BODY:
                state = content.get(channel)
                if state is None or state[2] == -1:
                    raise AmqpCodecError(f"body frame without a content header on {channel}")
                remaining = state[2]
                assert isinstance(remaining, int)
                if size > remaining:
                    raise AmqpCodecError("body frames longer than the content header says")
                if size == remaining and not state[3]:
                    del content[channel]
                    ctag = state[0]
                    if ctag is None:
                        self.dropped += 1
                    else:
                        assert isinstance(ctag, bytes)
                        tag = state[1]
                        assert isinstance(tag, int)
                        on_deliver(channel, ctag, tag, mv[p:end])
                else:
                    chunks = state[3]
                    assert isinstance(chunks, list)
                    chunks.append(data[p:end])
                    state[2] = remaining - size
                    if remaining == size:
                        self._finish(channel)
            elif kind == FRAME_METHOD:
                key = data[p : p + 4]
                if key == _BASIC_DELIVER:
                    q = p + 5 + data[p + 4]
                    (delivery_tag,) = u64(data, q)
                    if channel in content:
                        raise AmqpCodecError("Basic.Deliver before the previous content ended")
                    content[channel] = [data[p + 5 : q], delivery_tag, -1, []]
                elif key in (_BASIC_ACK, _BASIC_NACK):
                    (delivery_tag,) = u64(data, p + 4)
                    self._on_confirm(
                        channel, delivery_tag, bool(data[p + 12] & 1), key == _BASIC_NACK
                    )
                else:
                    if key in (_BASIC_RETURN, _BASIC_GET_OK):
                        content[channel] = [None, 0, -1, []]
                    self._emit(data[i : end + 1])
            elif kind == FRAME_HEADER:
                state = content.get(channel)
                if state is None or state[2] != -1:
                    raise AmqpCodecError(f"unexpected content header on channel {channel}")
                (body_size,) = u64(data, p + 4)
                state[2] = body_size
                if body_size == 0:
                    self._finish(channel)
            elif kind == FRAME_HEARTBEAT:
                self._on_frame(channel, heartbeat.Heartbeat())
            else:
                raise AmqpCodecError(f"unknown frame type {kind}")
            i = end + 1
        if i < n:
            self._buf = bytearray(mv[i:])
            if not self._need:
                self._need = 7

    def _finish(self, channel: int) -> None:
        state = self._content.pop(channel)
        chunks = state[3]
        assert isinstance(chunks, list)
        ctag = state[0]
        if ctag is None:
            self.dropped += 1
            return
        assert isinstance(ctag, bytes)
        tag = state[1]
        assert isinstance(tag, int)
        self._on_deliver(channel, ctag, tag, memoryview(b"".join(chunks)))

    def _emit(self, raw: bytes) -> None:
        try:
            _consumed, channel, decoded = frame.unmarshal(raw)
        except Exception as exc:  # pamqp raises several exception types
            raise AmqpCodecError(f"cannot decode frame: {exc}") from None
        if not isinstance(decoded, Frame | heartbeat.Heartbeat):
            raise AmqpCodecError(f"unexpected frame {type(decoded).__name__}")
        self._on_frame(channel, decoded)
