"""The incremental MQTT stream parser shared by the client, the built-in broker and relays.

:class:`StreamParser` takes the byte chunks of ``data_received`` and returns (or calls back
with) the complete packets in them. Two optional fast paths skip object creation on the
hot path: ``on_publish(topic, payload, qos, packet_id, flags)`` for PUBLISH and
``on_ack(packet_type, packet_id)`` for PUBACK/PUBREC/PUBREL/PUBCOMP. At protocol level 5 the
PUBLISH fast path is off (the properties must be parsed), so MQTT 5 PUBLISHes arrive as
:class:`~mqbench.wire.mqtt.packets.Publish` objects; acks with a reason code arrive as
objects too. A server parses CONNECT (whose layout announces its own level) and then sets
the parser's ``protocol_level``.
"""

from __future__ import annotations

from collections.abc import Callable

from mqbench.wire.mqtt.decode import decode_body
from mqbench.wire.mqtt.errors import MqttCodecError
from mqbench.wire.mqtt.packets import Packet
from mqbench.wire.mqtt.primitives import (
    MAX_REMAINING_LENGTH,
    PROTOCOL_LEVEL_5,
    PROTOCOL_LEVEL_311,
    PUBREL,
    decode_remaining_length,
)
from mqbench.wire.mqtt.reason_codes import RC_PACKET_TOO_LARGE

PublishCallback = Callable[[bytes, memoryview, int, int, int], None]
"""``(topic, payload, qos, packet_id, flags)``: fast path for PUBLISH.

``topic`` is the raw UTF-8 topic (not validated), ``payload`` a view into the chunk passed
to :meth:`StreamParser.feed` (copy it to keep it after the callback returns), ``packet_id``
0 for QoS 0, ``flags`` the low nibble of the fixed header (DUP 8, QoS 6, RETAIN 1).
"""

AckCallback = Callable[[int, int], None]
"""``(packet_type, packet_id)``: fast path for PUBACK, PUBREC, PUBREL and PUBCOMP."""

PacketCallback = Callable[[Packet], None]
"""Receives every packet not taken by a fast path, in stream order with the fast paths."""


class StreamParser:
    """Incremental parser: feed it the chunks a stream delivers, get whole packets back.

    A packet split over chunks is kept until complete; a large packet is accumulated in a
    bytearray and parsed once complete (linear, not quadratic, in its size).

    Give ``on_packet`` when the order between fast-path packets and the others matters (a
    server must see CONNECT before the PUBLISH that follows it in the same read): then every
    packet goes to a callback in stream order and :meth:`feed` returns an empty list.
    Without it, the fast-path callbacks of a chunk run before its other packets are returned.
    An exception raised by a callback propagates out of :meth:`feed` (the rest of the chunk
    is dropped).
    """

    __slots__ = (
        "_buf",
        "_max_packet_size",
        "_need",
        "_on_ack",
        "_on_packet",
        "_on_publish",
        "protocol_level",
    )

    def __init__(
        self,
        on_publish: PublishCallback | None = None,
        on_ack: AckCallback | None = None,
        on_packet: PacketCallback | None = None,
        *,
        max_packet_size: int = MAX_REMAINING_LENGTH + 5,
        protocol_level: int = PROTOCOL_LEVEL_311,
    ) -> None:
        self._on_publish = on_publish
        self._on_ack = on_ack
        self._on_packet = on_packet
        self._max_packet_size = max_packet_size
        self.protocol_level = protocol_level
        self._buf = bytearray()
        self._need = 0

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete packet held back for the next chunk."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Packet]:
        """Parse ``data``; return the packets not delivered through a fast-path callback.

        Raises :class:`MqttCodecError` on malformed input; the parser must not be used after.
        """
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return []
            data = bytes(self._buf)
            self._buf = bytearray()
            self._need = 0
        out: list[Packet] = []
        level = self.protocol_level
        # MQTT 5 PUBLISHes carry properties: they take the object path.
        on_publish = self._on_publish if level < PROTOCOL_LEVEL_5 else None
        on_ack = self._on_ack
        emit = self._on_packet or out.append
        mv = memoryview(data)
        n = len(data)
        i = 0
        while i + 2 <= n:
            b0 = data[i]
            length = data[i + 1]
            if length < 0x80:
                p = i + 2
            else:
                length, p = decode_remaining_length(data, i + 1)
                if p < 0:
                    break
                if length + p - i > self._max_packet_size:
                    raise MqttCodecError(
                        f"packet of {length + p - i} bytes exceeds the limit "
                        f"of {self._max_packet_size}",
                        RC_PACKET_TOO_LARGE,
                    )
            end = p + length
            if end > n:
                self._need = end - i
                break
            if b0 == 0x30 and on_publish is not None:
                # QoS 0, no DUP/RETAIN: the benchmark's hot case, checked first.
                if length < 2:
                    raise MqttCodecError("PUBLISH truncated: no topic length")
                q = p + 2 + ((data[p] << 8) | data[p + 1])
                if q > end:
                    raise MqttCodecError("PUBLISH truncated: topic longer than the packet")
                on_publish(data[p + 2 : q], mv[q:end], 0, 0, 0)
            elif (b0 & 0xF0) == 0x30 and on_publish is not None:
                qos = (b0 >> 1) & 3
                if length < 2:
                    raise MqttCodecError("PUBLISH truncated: no topic length")
                q = p + 2 + ((data[p] << 8) | data[p + 1])
                if qos:
                    if qos == 3:
                        raise MqttCodecError("PUBLISH with QoS 3")
                    if q + 2 > end:
                        raise MqttCodecError("PUBLISH truncated: topic or packet id")
                    packet_id = (data[q] << 8) | data[q + 1]
                    if not packet_id:
                        raise MqttCodecError("packet identifier 0 is not allowed")
                    on_publish(data[p + 2 : q], mv[q + 2 : end], qos, packet_id, b0 & 0x0F)
                else:
                    if q > end:
                        raise MqttCodecError("PUBLISH truncated: topic longer than the packet")
                    if b0 & 0x08:
                        raise MqttCodecError("QoS 0 PUBLISH with DUP set")
                    on_publish(data[p + 2 : q], mv[q:end], 0, 0, b0 & 0x0F)
            elif 0x40 <= b0 < 0x80 and on_ack is not None:
                kind = b0 >> 4
                if length != 2 or (b0 & 0x0F) != (2 if kind == PUBREL else 0):
                    emit(decode_body(b0, mv[p:end], level))  # MQTT 5 form or an error
                else:
                    packet_id = (data[p] << 8) | data[p + 1]
                    if not packet_id:
                        raise MqttCodecError("packet identifier 0 is not allowed")
                    on_ack(kind, packet_id)
            else:
                emit(decode_body(b0, mv[p:end], level))
                # A CONNECT announces the level of everything after it on this stream.
                if b0 == 0x10 and self._on_packet is not None:
                    level = self.protocol_level
                    on_publish = self._on_publish if level < PROTOCOL_LEVEL_5 else None
            i = end
        if i < n:
            self._buf = bytearray(mv[i:])
        return out

    def check_eof(self) -> None:
        """Raise :class:`MqttCodecError` if the stream ended inside a packet."""
        if self._buf:
            raise MqttCodecError(f"stream ended inside a packet ({len(self._buf)} bytes)")
