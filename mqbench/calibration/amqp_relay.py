"""A broker-less AMQP 0-9-1 relay for calibration, on the lean client's framing and pamqp.

It runs the connection handshake (Start/PLAIN, Tune, Open), opens channels and answers
``Exchange.Declare``, ``Queue.Declare``, ``Queue.Bind``, ``Basic.Qos``, ``Basic.Consume`` and
``Confirm.Select`` the way the lean client uses them, then turns each ``Basic.Publish`` into
a ``Basic.Deliver`` to the consumer of every queue bound with that routing key on that
exchange (exact match: direct exchanges). A publish on a channel in confirm mode is
confirmed at once with ``Basic.Ack``. A queue without a consumer drops the message: the
relay stores nothing. Heartbeat frames are echoed, so a client's heartbeat check is
satisfied even on a connection that only publishes.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from pamqp import commands, frame
from pamqp.base import Frame

from mqbench import __version__
from mqbench.calibration.relays import Hub, RelayConnection
from mqbench.wire.amqp import (
    DEFAULT_FRAME_MAX,
    FRAME_BODY,
    FRAME_END,
    FRAME_END_BYTE,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    content_header,
    method_frame,
    shortstr,
)

_BASIC_PUBLISH: Final = b"\x00\x3c\x00\x28"
_BASIC_DELIVER: Final = b"\x00\x3c\x00\x3c"
_BASIC_ACK: Final = b"\x00\x3c\x00\x50"
_frame_head = struct.Struct(">BHI")
_u64 = struct.Struct(">Q")

CHANNEL_MAX: Final = 2047


class AmqpRelayError(Exception):
    """A client sent something the relay does not take (the connection is closed)."""


@dataclass
class Consumer:
    """The consumer of one queue: where its deliveries go."""

    conn: AmqpRelayConnection
    channel: int
    tag: bytes


@dataclass
class _Publish:
    """A ``Basic.Publish`` whose content is being received."""

    exchange: bytes
    routing_key: bytes
    size: int = -1
    received: int = 0
    chunks: list[bytes] = field(default_factory=list)


class AmqpHub(Hub):
    """Queues (bindings and consumers) shared by all connections of the relay."""

    def __init__(self) -> None:
        super().__init__()
        self.bindings: dict[tuple[bytes, bytes], list[bytes]] = {}
        """(exchange, routing key) -> queues bound with it."""
        self.consumers: dict[bytes, Consumer] = {}
        """queue -> its consumer (one per queue: the lean client's layout)."""
        self.owners: dict[bytes, AmqpRelayConnection] = {}
        """queue -> the connection that declared it (queues are exclusive)."""

    def route(self, exchange: bytes, routing_key: bytes, body: bytes) -> None:
        """Queue a delivery of ``body`` to the consumer of every bound queue."""
        for queue in self.bindings.get((exchange, routing_key), ()):
            consumer = self.consumers.get(queue)
            if consumer is not None:
                consumer.conn.deliver(consumer, exchange, routing_key, body)
                self.routed += 1

    def drop(self, conn: AmqpRelayConnection) -> None:
        """Delete the queues ``conn`` declared (exclusive, auto-delete) and its consumers."""
        gone = {q for q, owner in self.owners.items() if owner is conn}
        gone |= {q for q, c in self.consumers.items() if c.conn is conn}
        for queue in gone:
            self.owners.pop(queue, None)
            self.consumers.pop(queue, None)
        for key, queues in list(self.bindings.items()):
            kept = [q for q in queues if q not in gone]
            if kept:
                self.bindings[key] = kept
            else:
                del self.bindings[key]


def deliver_frames(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    exchange: bytes,
    routing_key: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """``Basic.Deliver`` + content header + body frame(s) of at most ``frame_max`` bytes."""
    args = (
        _BASIC_DELIVER
        + shortstr(consumer_tag)
        + _u64.pack(delivery_tag)
        + b"\x00"
        + shortstr(exchange)
        + shortstr(routing_key)
    )
    parts = [_frame_head.pack(FRAME_METHOD, channel, len(args)), args, FRAME_END]
    parts.append(content_header(channel, len(body)))
    step = frame_max - FRAME_OVERHEAD
    for start in range(0, len(body), step):
        chunk = body[start : start + step]
        parts += [_frame_head.pack(FRAME_BODY, channel, len(chunk)), chunk, FRAME_END]
    return b"".join(parts)


def basic_ack_frame(channel: int, delivery_tag: int) -> bytes:
    """A broker's ``Basic.Ack`` (publisher confirm) for one publish."""
    payload = _BASIC_ACK + _u64.pack(delivery_tag) + b"\x00"
    return _frame_head.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END


class AmqpRelayConnection(RelayConnection):
    """One client connection to the AMQP relay."""

    def __init__(self, hub: AmqpHub) -> None:
        super().__init__(hub)
        self.amqp = hub
        self._buf = b""
        self._header_seen = False
        self._publishing: dict[int, _Publish] = {}
        self._confirm_seq: dict[int, int] = {}
        """Channels in confirm mode -> publishes confirmed so far."""
        self._delivery_tags: dict[int, int] = {}
        self.frame_max = DEFAULT_FRAME_MAX

    def data_received(self, data: bytes) -> None:
        """Handle every complete frame, then write everything queued by this read."""
        t_read = time.time_ns()
        buf = self._buf + data if self._buf else data
        try:
            pos = self._parse(buf)
        except AmqpRelayError as exc:
            self.queue(method_frame(0, commands.Connection.Close(540, str(exc)[:200], 0, 0)))
            self.close_after_flush()
            self.hub.flush()
            return
        self._buf = buf[pos:]
        self.hub.flush(t_read)

    def _parse(self, data: bytes) -> int:
        n = len(data)
        pos = 0
        if not self._header_seen:
            if n < len(PROTOCOL_HEADER):
                return 0
            if data[: len(PROTOCOL_HEADER)] != PROTOCOL_HEADER:
                self.queue(PROTOCOL_HEADER)
                self.close_after_flush()
                return n
            self._header_seen = True
            pos = len(PROTOCOL_HEADER)
            self._send(0, self._start())
        while pos + 7 <= n:
            kind, channel, size = _frame_head.unpack_from(data, pos)
            p = pos + 7
            end = p + size
            if end >= n:
                return pos
            if data[end] != FRAME_END_BYTE:
                raise AmqpRelayError("frame end octet is not 0xce")
            if kind == FRAME_METHOD and data[p : p + 4] == _BASIC_PUBLISH:
                q = p + 6
                exchange = data[q + 1 : q + 1 + data[q]]
                q += 1 + data[q]
                routing_key = data[q + 1 : q + 1 + data[q]]
                self._publishing[channel] = _Publish(exchange, routing_key)
            elif kind == FRAME_HEADER:
                publish = self._publishing.get(channel)
                if publish is None or publish.size != -1:
                    raise AmqpRelayError(f"unexpected content header on channel {channel}")
                (publish.size,) = _u64.unpack_from(data, p + 4)
                if publish.size == 0:
                    self._published(channel)
            elif kind == FRAME_BODY:
                publish = self._publishing.get(channel)
                if publish is None or publish.size == -1:
                    raise AmqpRelayError(f"body frame without a content header on {channel}")
                publish.chunks.append(data[p:end])
                publish.received += size
                if publish.received > publish.size:
                    raise AmqpRelayError("body frames longer than the content header says")
                if publish.received == publish.size:
                    self._published(channel)
            elif kind == FRAME_HEARTBEAT:
                self.queue(HEARTBEAT_FRAME)
            elif kind == FRAME_METHOD:
                try:
                    _consumed, _channel, method = frame.unmarshal(data[pos : end + 1])
                except Exception as exc:  # pamqp raises several exception types
                    raise AmqpRelayError(f"cannot decode frame: {exc}") from None
                if not isinstance(method, Frame):
                    raise AmqpRelayError(f"unexpected frame {type(method).__name__}")
                self._method(channel, method)
            else:
                raise AmqpRelayError(f"unknown frame type {kind}")
            pos = end + 1
        return pos

    def _published(self, channel: int) -> None:
        publish = self._publishing.pop(channel)
        body = publish.chunks[0] if len(publish.chunks) == 1 else b"".join(publish.chunks)
        self.amqp.route(publish.exchange, publish.routing_key, body)
        confirmed = self._confirm_seq.get(channel)
        if confirmed is not None:
            self._confirm_seq[channel] = confirmed + 1
            self.queue(basic_ack_frame(channel, confirmed + 1))

    def deliver(self, consumer: Consumer, exchange: bytes, routing_key: bytes, body: bytes) -> None:
        """Queue one ``Basic.Deliver`` with ``body`` for ``consumer`` on this connection."""
        tag = self._delivery_tags.get(consumer.channel, 0) + 1
        self._delivery_tags[consumer.channel] = tag
        self.queue(
            deliver_frames(
                consumer.channel, consumer.tag, tag, exchange, routing_key, body, self.frame_max
            )
        )

    def _start(self) -> Frame:
        return commands.Connection.Start(
            version_major=0,
            version_minor=9,
            server_properties={
                "product": "mqbench calibration relay",
                "version": __version__,
                "capabilities": {"publisher_confirms": True, "basic.nack": True},
            },
            mechanisms="PLAIN",
            locales="en_US",
        )

    def _send(self, channel: int, method: Frame) -> None:
        self.queue(method_frame(channel, method))

    def _method(self, channel: int, method: Frame) -> None:
        hub = self.amqp
        if isinstance(method, commands.Connection.StartOk):
            self._send(0, commands.Connection.Tune(CHANNEL_MAX, DEFAULT_FRAME_MAX, 0))
        elif isinstance(method, commands.Connection.TuneOk):
            if method.frame_max:
                self.frame_max = min(DEFAULT_FRAME_MAX, method.frame_max)
        elif isinstance(method, commands.Connection.Open):
            self._send(0, commands.Connection.OpenOk())
        elif isinstance(method, commands.Connection.Close):
            self._send(0, commands.Connection.CloseOk())
            self.close_after_flush()
        elif isinstance(method, commands.Channel.Open):
            self._send(channel, commands.Channel.OpenOk())
        elif isinstance(method, commands.Channel.Close):
            self._send(channel, commands.Channel.CloseOk())
        elif isinstance(method, commands.Exchange.Declare):
            self._send(channel, commands.Exchange.DeclareOk())
        elif isinstance(method, commands.Confirm.Select):
            self._confirm_seq[channel] = 0
            self._send(channel, commands.Confirm.SelectOk())
        elif isinstance(method, commands.Queue.Declare):
            name = method.queue or f"relay.{id(self):x}.{len(hub.owners)}"
            hub.owners[name.encode()] = self
            self._send(channel, commands.Queue.DeclareOk(name, 0, 0))
        elif isinstance(method, commands.Queue.Bind):
            key = (method.exchange.encode(), method.routing_key.encode())
            queues = hub.bindings.setdefault(key, [])
            if method.queue.encode() not in queues:
                queues.append(method.queue.encode())
            self._send(channel, commands.Queue.BindOk())
        elif isinstance(method, commands.Basic.Qos):
            self._send(channel, commands.Basic.QosOk())
        elif isinstance(method, commands.Basic.Consume):
            tag = method.consumer_tag or f"relay-ctag-{len(hub.consumers)}"
            hub.consumers[method.queue.encode()] = Consumer(self, channel, tag.encode())
            self._send(channel, commands.Basic.ConsumeOk(tag))
        elif isinstance(method, commands.Basic.Ack):
            return  # a QoS 1 consumer's ack: nothing is kept, so nothing to release
        else:
            raise AmqpRelayError(f"the calibration relay does not take {method.name}")

    def forget(self) -> None:
        """Delete this connection's queues and consumers."""
        self.amqp.drop(self)


def relay_factory() -> tuple[AmqpHub, Callable[[], AmqpRelayConnection]]:
    """The relay's hub and a protocol factory for ``loop.create_server`` sharing it."""
    hub = AmqpHub()
    return hub, lambda: AmqpRelayConnection(hub)
