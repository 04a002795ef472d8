"""A small pure-Python MQTT 3.1.1 codec, shared by the client transport and the built-in broker.

Encoding: every control packet is a frozen dataclass with an ``encode()`` method; the hot
PUBLISH path uses :func:`publish_prefix` (fixed header, remaining length and topic computed
once per topic, payload length and QoS) so a sender does one concatenation per message.

Decoding: :class:`StreamParser` takes the byte chunks of ``data_received`` and returns the
complete packets in them. Two optional fast paths skip object creation on the hot path:
``on_publish(topic, payload, qos, packet_id, flags)`` for PUBLISH and
``on_ack(packet_type, packet_id)`` for PUBACK/PUBREC/PUBREL/PUBCOMP.

Malformed input raises :class:`MqttCodecError`. The wire layout of every packet is that of
MQTT 3.1.1 (protocol level 4; level 3 "MQIsdp" CONNECTs decode too). MQTT 5 adds properties
after the variable headers and reason codes to the acks; the parser keeps the protocol level
so those can be parsed in the same places without changing the packet framing or the fast
path signatures.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from mqbench.errors import TransportError

# Control packet types (high nibble of the first byte).
CONNECT: Final = 1
CONNACK: Final = 2
PUBLISH: Final = 3
PUBACK: Final = 4
PUBREC: Final = 5
PUBREL: Final = 6
PUBCOMP: Final = 7
SUBSCRIBE: Final = 8
SUBACK: Final = 9
UNSUBSCRIBE: Final = 10
UNSUBACK: Final = 11
PINGREQ: Final = 12
PINGRESP: Final = 13
DISCONNECT: Final = 14

PROTOCOL_LEVEL_311: Final = 4
MAX_REMAINING_LENGTH: Final = 268_435_455
MAX_PACKET_ID: Final = 65_535
SUBACK_FAILURE: Final = 0x80

CONNACK_MESSAGES: Final[dict[int, str]] = {
    0: "connection accepted",
    1: "unacceptable protocol version",
    2: "client identifier rejected",
    3: "server unavailable",
    4: "bad user name or password",
    5: "not authorized",
}
"""CONNACK return codes of MQTT 3.1.1 (section 3.2.2.3)."""

# Fixed-header flag nibble each packet type must carry (PUBLISH flags are variable).
_REQUIRED_FLAGS: Final[dict[int, int]] = {
    CONNECT: 0,
    CONNACK: 0,
    PUBACK: 0,
    PUBREC: 0,
    PUBREL: 2,
    PUBCOMP: 0,
    SUBSCRIBE: 2,
    SUBACK: 0,
    UNSUBSCRIBE: 2,
    UNSUBACK: 0,
    PINGREQ: 0,
    PINGRESP: 0,
    DISCONNECT: 0,
}

_U16 = struct.Struct(">H")


class MqttProtocolError(TransportError):
    """The peer broke the MQTT protocol (unexpected packet, bad state, malformed data)."""


class MqttCodecError(MqttProtocolError):
    """Bytes that are not a well-formed MQTT 3.1.1 packet."""


# ---------------------------------------------------------------------------------------
# Primitives


def encode_remaining_length(value: int) -> bytes:
    """Encode the remaining-length variable byte integer (1 to 4 bytes)."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"remaining length must be >= 0, got {value}")
        return bytes((value,))
    if value > MAX_REMAINING_LENGTH:
        raise ValueError(f"remaining length {value} exceeds {MAX_REMAINING_LENGTH}")
    out = bytearray()
    while True:
        digit = value & 0x7F
        value >>= 7
        if value:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


def decode_remaining_length(data: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """Decode the remaining length starting at ``data[offset]``.

    Returns ``(value, end)`` where ``end`` is the offset just after it, or ``(-1, -1)`` when
    ``data`` ends before the length is complete. Raises :class:`MqttCodecError` when the
    length would take more than four bytes.
    """
    value = 0
    shift = 0
    n = len(data)
    for k in range(4):
        if offset + k >= n:
            return -1, -1
        byte = data[offset + k]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset + k + 1
        shift += 7
    raise MqttCodecError("malformed remaining length: more than 4 bytes")


def _utf8(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise ValueError(f"string of {len(raw)} bytes exceeds 65535")
    return _U16.pack(len(raw)) + raw


def _binary(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ValueError(f"binary field of {len(data)} bytes exceeds 65535")
    return _U16.pack(len(data)) + data


def _frame(first_byte: int, body: bytes) -> bytes:
    return bytes((first_byte,)) + encode_remaining_length(len(body)) + body


class _Reader:
    """Cursor over one packet body; every read checks bounds."""

    __slots__ = ("data", "pos")

    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def u8(self) -> int:
        if self.pos >= len(self.data):
            raise MqttCodecError("packet truncated")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u16(self) -> int:
        if self.pos + 2 > len(self.data):
            raise MqttCodecError("packet truncated")
        value: int = (self.data[self.pos] << 8) | self.data[self.pos + 1]
        self.pos += 2
        return value

    def binary(self) -> bytes:
        size = self.u16()
        if self.pos + size > len(self.data):
            raise MqttCodecError("packet truncated: field longer than the packet")
        value = bytes(self.data[self.pos : self.pos + size])
        self.pos += size
        return value

    def text(self) -> str:
        raw = self.binary()
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MqttCodecError("malformed UTF-8 string") from None
        if "\x00" in value:
            raise MqttCodecError("UTF-8 string contains U+0000")
        return value

    def rest(self) -> bytes:
        value = bytes(self.data[self.pos :])
        self.pos = len(self.data)
        return value

    def packet_id(self) -> int:
        value = self.u16()
        if value == 0:
            raise MqttCodecError("packet identifier 0 is not allowed")
        return value

    def end(self, what: str) -> None:
        if self.pos != len(self.data):
            raise MqttCodecError(f"{what}: {len(self.data) - self.pos} unexpected trailing bytes")


# ---------------------------------------------------------------------------------------
# Packets


@dataclass(frozen=True, slots=True)
class Will:
    """The last-will message of a CONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


@dataclass(frozen=True, slots=True)
class Connect:
    """CONNECT (client -> server)."""

    client_id: str
    clean_session: bool = True
    keepalive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    protocol_name: str = "MQTT"
    protocol_level: int = PROTOCOL_LEVEL_311

    def encode(self) -> bytes:
        """Return the packet bytes."""
        flags = 0x02 if self.clean_session else 0
        payload = [_utf8(self.client_id)]
        if self.will is not None:
            if self.will.qos not in (0, 1, 2):
                raise ValueError(f"will qos must be 0, 1 or 2, got {self.will.qos}")
            flags |= 0x04 | (self.will.qos << 3) | (0x20 if self.will.retain else 0)
            payload.append(_utf8(self.will.topic))
            payload.append(_binary(self.will.payload))
        if self.username is not None:
            flags |= 0x80
            payload.append(_utf8(self.username))
        if self.password is not None:
            flags |= 0x40
            payload.append(_binary(self.password))
        header = (
            _utf8(self.protocol_name)
            + bytes((self.protocol_level, flags))
            + _U16.pack(self.keepalive)
        )
        return _frame(CONNECT << 4, header + b"".join(payload))


@dataclass(frozen=True, slots=True)
class Connack:
    """CONNACK (server -> client)."""

    return_code: int = 0
    session_present: bool = False

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return bytes((CONNACK << 4, 2, 1 if self.session_present else 0, self.return_code))


@dataclass(frozen=True, slots=True)
class Publish:
    """PUBLISH (both directions); ``packet_id`` is 0 for QoS 0."""

    topic: str
    payload: bytes
    qos: int = 0
    packet_id: int = 0
    retain: bool = False
    dup: bool = False

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return encode_publish(
            self.topic, self.payload, self.qos, self.packet_id, retain=self.retain, dup=self.dup
        )


@dataclass(frozen=True, slots=True)
class PubAck:
    """PUBACK: QoS 1 acknowledgement."""

    packet_id: int

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return _ack(PUBACK << 4, self.packet_id)


@dataclass(frozen=True, slots=True)
class PubRec:
    """PUBREC: QoS 2, step 1."""

    packet_id: int

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return _ack(PUBREC << 4, self.packet_id)


@dataclass(frozen=True, slots=True)
class PubRel:
    """PUBREL: QoS 2, step 2."""

    packet_id: int

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return _ack((PUBREL << 4) | 2, self.packet_id)


@dataclass(frozen=True, slots=True)
class PubComp:
    """PUBCOMP: QoS 2, step 3."""

    packet_id: int

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return _ack(PUBCOMP << 4, self.packet_id)


@dataclass(frozen=True, slots=True)
class Subscribe:
    """SUBSCRIBE: ``topics`` is a tuple of ``(filter, requested qos)``."""

    packet_id: int
    topics: tuple[tuple[str, int], ...]

    def encode(self) -> bytes:
        """Return the packet bytes."""
        if not self.topics:
            raise ValueError("SUBSCRIBE needs at least one topic filter")
        body = [_U16.pack(self.packet_id)]
        for topic, qos in self.topics:
            if qos not in (0, 1, 2):
                raise ValueError(f"requested qos must be 0, 1 or 2, got {qos}")
            body.append(_utf8(topic) + bytes((qos,)))
        return _frame((SUBSCRIBE << 4) | 2, b"".join(body))


@dataclass(frozen=True, slots=True)
class Suback:
    """SUBACK: one return code per filter (granted QoS, or 0x80 for failure)."""

    packet_id: int
    return_codes: tuple[int, ...]

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return _frame(SUBACK << 4, _U16.pack(self.packet_id) + bytes(self.return_codes))


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """UNSUBSCRIBE: topic filters to remove."""

    packet_id: int
    topics: tuple[str, ...]

    def encode(self) -> bytes:
        """Return the packet bytes."""
        if not self.topics:
            raise ValueError("UNSUBSCRIBE needs at least one topic filter")
        body = _U16.pack(self.packet_id) + b"".join(_utf8(t) for t in self.topics)
        return _frame((UNSUBSCRIBE << 4) | 2, body)


@dataclass(frozen=True, slots=True)
class Unsuback:
    """UNSUBACK."""

    packet_id: int

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return _ack(UNSUBACK << 4, self.packet_id)


@dataclass(frozen=True, slots=True)
class PingReq:
    """PINGREQ."""

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return PINGREQ_BYTES


@dataclass(frozen=True, slots=True)
class PingResp:
    """PINGRESP."""

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return PINGRESP_BYTES


@dataclass(frozen=True, slots=True)
class Disconnect:
    """DISCONNECT."""

    def encode(self) -> bytes:
        """Return the packet bytes."""
        return DISCONNECT_BYTES


Packet = (
    Connect
    | Connack
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | PingReq
    | PingResp
    | Disconnect
)
"""Any decoded control packet."""

PINGREQ_BYTES: Final = bytes((PINGREQ << 4, 0))
PINGRESP_BYTES: Final = bytes((PINGRESP << 4, 0))
DISCONNECT_BYTES: Final = bytes((DISCONNECT << 4, 0))


def _ack(first_byte: int, packet_id: int) -> bytes:
    if not 0 < packet_id <= MAX_PACKET_ID:
        raise ValueError(f"packet id must be 1..65535, got {packet_id}")
    return bytes((first_byte, 2, packet_id >> 8, packet_id & 0xFF))


def encode_puback(packet_id: int) -> bytes:
    """Return a PUBACK for ``packet_id`` (no validation: hot path)."""
    return bytes((0x40, 2, packet_id >> 8, packet_id & 0xFF))


def publish_prefix(
    topic: str | bytes, payload_len: int, qos: int = 0, *, retain: bool = False, dup: bool = False
) -> bytes:
    """Return everything of a PUBLISH that precedes the packet id (QoS > 0) or the payload.

    For QoS 0 a frame is ``prefix + payload``; for QoS 1/2 it is
    ``prefix + packet_id (2 bytes, big endian) + payload``. The remaining length counts the
    packet id, so the prefix is only valid for exactly ``payload_len`` payload bytes.
    """
    if qos not in (0, 1, 2):
        raise ValueError(f"qos must be 0, 1 or 2, got {qos}")
    raw = topic.encode("utf-8") if isinstance(topic, str) else topic
    if len(raw) > 0xFFFF:
        raise ValueError(f"topic of {len(raw)} bytes exceeds 65535")
    remaining = 2 + len(raw) + (2 if qos else 0) + payload_len
    first = (PUBLISH << 4) | (8 if dup else 0) | (qos << 1) | (1 if retain else 0)
    return bytes((first,)) + encode_remaining_length(remaining) + _U16.pack(len(raw)) + raw


def encode_publish(
    topic: str | bytes,
    payload: bytes,
    qos: int = 0,
    packet_id: int = 0,
    *,
    retain: bool = False,
    dup: bool = False,
) -> bytes:
    """Return one complete PUBLISH packet."""
    prefix = publish_prefix(topic, len(payload), qos, retain=retain, dup=dup)
    if qos == 0:
        if packet_id:
            raise ValueError("a QoS 0 PUBLISH has no packet id")
        return prefix + payload
    if not 0 < packet_id <= MAX_PACKET_ID:
        raise ValueError(f"packet id must be 1..65535, got {packet_id}")
    return prefix + _U16.pack(packet_id) + payload


# ---------------------------------------------------------------------------------------
# Decoding


def _decode_connect(r: _Reader) -> Connect:
    protocol_name = r.text()
    level = r.u8()
    # Any level of a known name decodes, so a server can answer CONNACK code 1 itself.
    if protocol_name not in ("MQTT", "MQIsdp"):
        raise MqttCodecError(f"unknown protocol name {protocol_name!r}")
    flags = r.u8()
    if flags & 0x01:
        raise MqttCodecError("CONNECT reserved flag is set")
    keepalive = r.u16()
    client_id = r.text()
    will: Will | None = None
    will_qos = (flags >> 3) & 3
    if flags & 0x04:
        if will_qos == 3:
            raise MqttCodecError("CONNECT will QoS 3")
        will_topic = r.text()
        will_payload = r.binary()
        will = Will(will_topic, will_payload, will_qos, bool(flags & 0x20))
    elif will_qos or flags & 0x20:
        raise MqttCodecError("CONNECT will QoS/retain set without will flag")
    username = r.text() if flags & 0x80 else None
    if flags & 0x40:
        if username is None and level >= 4:
            raise MqttCodecError("CONNECT password without user name")
        password: bytes | None = r.binary()
    else:
        password = None
    r.end("CONNECT")
    return Connect(
        client_id=client_id,
        clean_session=bool(flags & 0x02),
        keepalive=keepalive,
        username=username,
        password=password,
        will=will,
        protocol_name=protocol_name,
        protocol_level=level,
    )


def _decode_body(first_byte: int, body: memoryview) -> Packet:
    """Decode one packet given its first byte and its body (everything after the length)."""
    kind = first_byte >> 4
    flags = first_byte & 0x0F
    r = _Reader(body)
    if kind == PUBLISH:
        qos = (flags >> 1) & 3
        if qos == 3:
            raise MqttCodecError("PUBLISH with QoS 3")
        if qos == 0 and flags & 0x08:
            raise MqttCodecError("QoS 0 PUBLISH with DUP set")
        topic = r.text()
        packet_id = r.packet_id() if qos else 0
        return Publish(topic, r.rest(), qos, packet_id, bool(flags & 1), bool(flags & 8))
    required = _REQUIRED_FLAGS.get(kind)
    if required is None:
        raise MqttCodecError(f"reserved packet type {kind}")
    if flags != required:
        raise MqttCodecError(f"packet type {kind} with invalid fixed-header flags {flags:#x}")
    packet: Packet
    if kind == CONNECT:
        return _decode_connect(r)
    if kind == CONNACK:
        ack_flags = r.u8()
        if ack_flags & 0xFE:
            raise MqttCodecError("CONNACK reserved flags set")
        packet = Connack(r.u8(), bool(ack_flags & 1))
    elif kind in (PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK):
        packet_id = r.packet_id()
        packet = _ACK_CLASSES[kind](packet_id)
    elif kind == SUBSCRIBE:
        packet_id = r.packet_id()
        topics: list[tuple[str, int]] = []
        while r.remaining():
            topic = r.text()
            qos = r.u8()
            if qos > 2:
                raise MqttCodecError(f"SUBSCRIBE requested QoS byte {qos:#x}")
            topics.append((topic, qos))
        if not topics:
            raise MqttCodecError("SUBSCRIBE without topic filters")
        packet = Subscribe(packet_id, tuple(topics))
    elif kind == SUBACK:
        packet_id = r.packet_id()
        codes = tuple(r.rest())
        if not codes:
            raise MqttCodecError("SUBACK without return codes")
        for code in codes:
            if code not in (0, 1, 2, SUBACK_FAILURE):
                raise MqttCodecError(f"SUBACK return code {code:#x}")
        packet = Suback(packet_id, codes)
    elif kind == UNSUBSCRIBE:
        packet_id = r.packet_id()
        filters: list[str] = []
        while r.remaining():
            filters.append(r.text())
        if not filters:
            raise MqttCodecError("UNSUBSCRIBE without topic filters")
        packet = Unsubscribe(packet_id, tuple(filters))
    elif kind == PINGREQ:
        packet = PingReq()
    elif kind == PINGRESP:
        packet = PingResp()
    else:
        packet = Disconnect()
    r.end(type(packet).__name__.upper())
    return packet


_ACK_CLASSES: Final[dict[int, type[PubAck | PubRec | PubRel | PubComp | Unsuback]]] = {
    PUBACK: PubAck,
    PUBREC: PubRec,
    PUBREL: PubRel,
    PUBCOMP: PubComp,
    UNSUBACK: Unsuback,
}


def decode_packet(data: bytes | bytearray | memoryview) -> Packet:
    """Decode exactly one complete packet; raise :class:`MqttCodecError` otherwise."""
    mv = memoryview(data)
    if len(mv) < 2:
        raise MqttCodecError("packet truncated: no fixed header")
    length, start = decode_remaining_length(mv, 1)
    if start < 0:
        raise MqttCodecError("packet truncated: incomplete remaining length")
    if start + length > len(mv):
        raise MqttCodecError(
            f"packet truncated: remaining length {length}, {len(mv) - start} bytes present"
        )
    if start + length < len(mv):
        raise MqttCodecError(f"{len(mv) - start - length} bytes after the packet")
    return _decode_body(mv[0], mv[start:])


def topic_matches(topic_filter: str, topic: str) -> bool:
    """True when ``topic`` matches ``topic_filter`` (``+`` one level, ``#`` the rest).

    Topics starting with ``$`` are not matched by filters starting with a wildcard.
    """
    if topic_filter == topic:
        return True
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    for k, level in enumerate(f_levels):
        if level == "#":
            return True
        if k >= len(t_levels):
            return False
        if level != "+" and level != t_levels[k]:
            return False
    return len(f_levels) == len(t_levels)


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
        on_publish = self._on_publish
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
                        f"of {self._max_packet_size}"
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
                    emit(_decode_body(b0, mv[p:end]))  # raises the precise error
                else:
                    packet_id = (data[p] << 8) | data[p + 1]
                    if not packet_id:
                        raise MqttCodecError("packet identifier 0 is not allowed")
                    on_ack(kind, packet_id)
            else:
                emit(_decode_body(b0, mv[p:end]))
            i = end
        if i < n:
            self._buf = bytearray(mv[i:])
        return out

    def check_eof(self) -> None:
        """Raise :class:`MqttCodecError` if the stream ended inside a packet."""
        if self._buf:
            raise MqttCodecError(f"stream ended inside a packet ({len(self._buf)} bytes)")
