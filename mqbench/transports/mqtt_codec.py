"""A small pure-Python MQTT 3.1.1 codec, shared by the client transport and the built-in broker.

Encoding: every control packet is a frozen dataclass with an ``encode()`` method; the hot
PUBLISH path uses :func:`publish_prefix` (fixed header, remaining length and topic computed
once per topic, payload length and QoS) so a sender does one concatenation per message.

Decoding: :class:`StreamParser` takes the byte chunks of ``data_received`` and returns the
complete packets in them. Two optional fast paths skip object creation on the hot path:
``on_publish(topic, payload, qos, packet_id, flags)`` for PUBLISH and
``on_ack(packet_type, packet_id)`` for PUBACK/PUBREC/PUBREL/PUBCOMP.

Malformed input raises :class:`MqttCodecError`. By default the wire layout of every packet is
that of MQTT 3.1.1 (protocol level 4; level 3 "MQIsdp" CONNECTs decode too).

MQTT 5 (protocol level 5) adds properties after the variable headers, reason codes to the
acks, DISCONNECT and UNSUBACK, subscription options and the AUTH packet. Every packet class
has an optional ``properties`` field (and the acks a ``reason_code``): a packet whose
``properties`` is not None encodes in the MQTT 5 layout (``Connect`` when its
``protocol_level`` is 5); with the defaults the bytes are exactly those of 3.1.1. Decoding
takes the protocol level (``decode_packet(..., protocol_level=5)``,
``StreamParser.protocol_level``): a server parses CONNECT (whose layout announces its own
level) and then sets the parser's level. At level 5 the PUBLISH fast path is off (the
properties must be parsed), so MQTT 5 PUBLISHes arrive as :class:`Publish` objects; acks
with a reason code arrive as objects too. In a level-5 SUBSCRIBE the second item of each
topic tuple is the whole subscription-options byte (QoS in bits 0-1, No Local 0x04, Retain
As Published 0x08, Retain Handling in bits 4-5).
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
AUTH: Final = 15

PROTOCOL_LEVEL_311: Final = 4
PROTOCOL_LEVEL_5: Final = 5
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

    def u32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise MqttCodecError("packet truncated")
        value = int.from_bytes(self.data[self.pos : self.pos + 4], "big")
        self.pos += 4
        return value

    def varint(self) -> int:
        value, end = decode_remaining_length(self.data, self.pos)
        if end < 0:
            raise MqttCodecError("packet truncated: variable byte integer")
        self.pos = end
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
# MQTT 5 properties

PropertyValue = int | str | bytes | tuple[tuple[str, str], ...] | tuple[int, ...]
"""A property value: int, str or bytes; user properties are a tuple of (name, value) pairs
and subscription identifiers (which may repeat in a PUBLISH) a tuple of ints."""

Properties = dict[int, PropertyValue]
"""MQTT 5 properties by identifier (see the ``PROP_*`` constants)."""

PROP_PAYLOAD_FORMAT: Final = 0x01
PROP_MESSAGE_EXPIRY: Final = 0x02
PROP_CONTENT_TYPE: Final = 0x03
PROP_RESPONSE_TOPIC: Final = 0x08
PROP_CORRELATION_DATA: Final = 0x09
PROP_SUBSCRIPTION_ID: Final = 0x0B
PROP_SESSION_EXPIRY: Final = 0x11
PROP_ASSIGNED_CLIENT_ID: Final = 0x12
PROP_SERVER_KEEP_ALIVE: Final = 0x13
PROP_AUTH_METHOD: Final = 0x15
PROP_AUTH_DATA: Final = 0x16
PROP_REQUEST_PROBLEM_INFO: Final = 0x17
PROP_WILL_DELAY: Final = 0x18
PROP_REQUEST_RESPONSE_INFO: Final = 0x19
PROP_RESPONSE_INFO: Final = 0x1A
PROP_SERVER_REFERENCE: Final = 0x1C
PROP_REASON_STRING: Final = 0x1F
PROP_RECEIVE_MAXIMUM: Final = 0x21
PROP_TOPIC_ALIAS_MAXIMUM: Final = 0x22
PROP_TOPIC_ALIAS: Final = 0x23
PROP_MAXIMUM_QOS: Final = 0x24
PROP_RETAIN_AVAILABLE: Final = 0x25
PROP_USER_PROPERTY: Final = 0x26
PROP_MAXIMUM_PACKET_SIZE: Final = 0x27
PROP_WILDCARD_SUB_AVAILABLE: Final = 0x28
PROP_SUB_ID_AVAILABLE: Final = 0x29
PROP_SHARED_SUB_AVAILABLE: Final = 0x2A

# Wire type of each property: b byte, h u16, i u32, v variable byte int, s UTF-8 string,
# d binary data, p string pair.
_PROPERTY_TYPES: Final[dict[int, str]] = {
    PROP_PAYLOAD_FORMAT: "b",
    PROP_MESSAGE_EXPIRY: "i",
    PROP_CONTENT_TYPE: "s",
    PROP_RESPONSE_TOPIC: "s",
    PROP_CORRELATION_DATA: "d",
    PROP_SUBSCRIPTION_ID: "v",
    PROP_SESSION_EXPIRY: "i",
    PROP_ASSIGNED_CLIENT_ID: "s",
    PROP_SERVER_KEEP_ALIVE: "h",
    PROP_AUTH_METHOD: "s",
    PROP_AUTH_DATA: "d",
    PROP_REQUEST_PROBLEM_INFO: "b",
    PROP_WILL_DELAY: "i",
    PROP_REQUEST_RESPONSE_INFO: "b",
    PROP_RESPONSE_INFO: "s",
    PROP_SERVER_REFERENCE: "s",
    PROP_REASON_STRING: "s",
    PROP_RECEIVE_MAXIMUM: "h",
    PROP_TOPIC_ALIAS_MAXIMUM: "h",
    PROP_TOPIC_ALIAS: "h",
    PROP_MAXIMUM_QOS: "b",
    PROP_RETAIN_AVAILABLE: "b",
    PROP_USER_PROPERTY: "p",
    PROP_MAXIMUM_PACKET_SIZE: "i",
    PROP_WILDCARD_SUB_AVAILABLE: "b",
    PROP_SUB_ID_AVAILABLE: "b",
    PROP_SHARED_SUB_AVAILABLE: "b",
}


def encode_properties(props: Properties | None) -> bytes:
    """Encode MQTT 5 properties with their variable-byte-integer length prefix."""
    if not props:
        return b"\x00"
    out = bytearray()
    for pid, value in props.items():
        kind = _PROPERTY_TYPES.get(pid)
        if kind is None:
            raise ValueError(f"unknown MQTT 5 property {pid:#x}")
        if kind == "p":
            if not isinstance(value, tuple):
                raise ValueError("user properties must be a tuple of (name, value) pairs")
            for pair in value:
                if not isinstance(pair, tuple) or len(pair) != 2:
                    raise ValueError("user properties must be a tuple of (name, value) pairs")
                out.append(pid)
                out += _utf8(str(pair[0])) + _utf8(str(pair[1]))
            continue
        if kind == "v":
            for item in value if isinstance(value, tuple) else (value,):
                if not isinstance(item, int):
                    raise ValueError(f"property {pid:#x} needs integers")
                out.append(pid)
                out += encode_remaining_length(item)
            continue
        out.append(pid)
        if kind in "bhi":
            if not isinstance(value, int):
                raise ValueError(f"property {pid:#x} needs an integer")
            out += value.to_bytes({"b": 1, "h": 2, "i": 4}[kind], "big")
        elif kind == "s":
            out += _utf8(str(value))
        else:
            if not isinstance(value, bytes):
                raise ValueError(f"property {pid:#x} needs bytes")
            out += _binary(value)
    return encode_remaining_length(len(out)) + bytes(out)


# Properties allowed per packet type (-1: will properties); enforced when decoding.
_ALLOWED_PROPERTIES: Final[dict[int, frozenset[int]]] = {
    CONNECT: frozenset(
        {
            PROP_SESSION_EXPIRY,
            PROP_AUTH_METHOD,
            PROP_AUTH_DATA,
            PROP_REQUEST_PROBLEM_INFO,
            PROP_REQUEST_RESPONSE_INFO,
            PROP_RECEIVE_MAXIMUM,
            PROP_TOPIC_ALIAS_MAXIMUM,
            PROP_USER_PROPERTY,
            PROP_MAXIMUM_PACKET_SIZE,
        }
    ),
    -1: frozenset(
        {
            PROP_PAYLOAD_FORMAT,
            PROP_MESSAGE_EXPIRY,
            PROP_CONTENT_TYPE,
            PROP_RESPONSE_TOPIC,
            PROP_CORRELATION_DATA,
            PROP_WILL_DELAY,
            PROP_USER_PROPERTY,
        }
    ),
    PUBLISH: frozenset(
        {
            PROP_PAYLOAD_FORMAT,
            PROP_MESSAGE_EXPIRY,
            PROP_CONTENT_TYPE,
            PROP_RESPONSE_TOPIC,
            PROP_CORRELATION_DATA,
            PROP_SUBSCRIPTION_ID,
            PROP_TOPIC_ALIAS,
            PROP_USER_PROPERTY,
        }
    ),
    SUBSCRIBE: frozenset({PROP_SUBSCRIPTION_ID, PROP_USER_PROPERTY}),
    UNSUBSCRIBE: frozenset({PROP_USER_PROPERTY}),
    DISCONNECT: frozenset(
        {PROP_SESSION_EXPIRY, PROP_SERVER_REFERENCE, PROP_REASON_STRING, PROP_USER_PROPERTY}
    ),
    AUTH: frozenset({PROP_AUTH_METHOD, PROP_AUTH_DATA, PROP_REASON_STRING, PROP_USER_PROPERTY}),
}
_ACK_PROPERTIES: Final = frozenset({PROP_REASON_STRING, PROP_USER_PROPERTY})


def decode_properties(r: _Reader, packet_type: int) -> Properties:
    """Read a property block (length + properties) for ``packet_type``; validates it."""
    length = r.varint()
    if length > r.remaining():
        raise MqttCodecError("packet truncated: properties longer than the packet")
    end = r.pos + length
    allowed = _ALLOWED_PROPERTIES.get(packet_type)
    props: Properties = {}
    while r.pos < end:
        pid = r.varint()
        kind = _PROPERTY_TYPES.get(pid)
        if kind is None:
            raise MqttCodecError(f"unknown MQTT 5 property {pid:#x}")
        if allowed is not None and pid not in allowed:
            raise MqttCodecError(f"property {pid:#x} not allowed in packet type {packet_type}")
        value: PropertyValue
        if kind == "p":
            pairs = props.get(pid, ())
            assert isinstance(pairs, tuple)
            props[pid] = (*pairs, (r.text(), r.text()))
            continue
        if kind == "v":
            number = r.varint()
            if number == 0:
                raise MqttCodecError("subscription identifier 0")
            if pid in props and packet_type != PUBLISH:
                raise MqttCodecError(f"duplicate property {pid:#x}")
            old_ids = props.get(pid, ())
            assert isinstance(old_ids, tuple)
            props[pid] = (*old_ids, number)
            continue
        if pid in props:
            raise MqttCodecError(f"duplicate property {pid:#x}")
        if kind == "b":
            value = r.u8()
        elif kind == "h":
            value = r.u16()
        elif kind == "i":
            value = r.u32()
        elif kind == "s":
            value = r.text()
        else:
            value = r.binary()
        props[pid] = value
    if r.pos != end:
        raise MqttCodecError("malformed properties: a property crosses the block's end")
    return props


# ---------------------------------------------------------------------------------------
# Packets


@dataclass(frozen=True, slots=True)
class Will:
    """The last-will message of a CONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None
    """MQTT 5 will properties (will delay interval, message expiry, ...)."""


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
    properties: Properties | None = None
    """MQTT 5 CONNECT properties (encoded when ``protocol_level`` is 5)."""

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``protocol_level`` is 5)."""
        v5 = self.protocol_level >= PROTOCOL_LEVEL_5
        flags = 0x02 if self.clean_session else 0
        payload = [_utf8(self.client_id)]
        if self.will is not None:
            if self.will.qos not in (0, 1, 2):
                raise ValueError(f"will qos must be 0, 1 or 2, got {self.will.qos}")
            flags |= 0x04 | (self.will.qos << 3) | (0x20 if self.will.retain else 0)
            if v5:
                payload.append(encode_properties(self.will.properties))
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
        if v5:
            header += encode_properties(self.properties)
        return _frame(CONNECT << 4, header + b"".join(payload))


@dataclass(frozen=True, slots=True)
class Connack:
    """CONNACK (server -> client); in MQTT 5 ``return_code`` is the reason code."""

    return_code: int = 0
    session_present: bool = False
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        if self.properties is not None:
            body = bytes((1 if self.session_present else 0, self.return_code))
            return _frame(CONNACK << 4, body + encode_properties(self.properties))
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
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        if self.properties is not None:
            return encode_publish5(
                self.topic,
                self.payload,
                self.qos,
                self.packet_id,
                encode_properties(self.properties),
                retain=self.retain,
                dup=self.dup,
            )
        return encode_publish(
            self.topic, self.payload, self.qos, self.packet_id, retain=self.retain, dup=self.dup
        )


@dataclass(frozen=True, slots=True)
class PubAck:
    """PUBACK: QoS 1 acknowledgement."""

    packet_id: int
    reason_code: int = 0
    """MQTT 5 reason code (0 success; >= 0x80 failure)."""
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the MQTT 5 long form only when it carries more)."""
        return _ack(PUBACK << 4, self.packet_id, self.reason_code, self.properties)


@dataclass(frozen=True, slots=True)
class PubRec:
    """PUBREC: QoS 2, step 1."""

    packet_id: int
    reason_code: int = 0
    """MQTT 5 reason code (0 success; >= 0x80 failure)."""
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the MQTT 5 long form only when it carries more)."""
        return _ack(PUBREC << 4, self.packet_id, self.reason_code, self.properties)


@dataclass(frozen=True, slots=True)
class PubRel:
    """PUBREL: QoS 2, step 2."""

    packet_id: int
    reason_code: int = 0
    """MQTT 5 reason code (0 success; >= 0x80 failure)."""
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the MQTT 5 long form only when it carries more)."""
        return _ack((PUBREL << 4) | 2, self.packet_id, self.reason_code, self.properties)


@dataclass(frozen=True, slots=True)
class PubComp:
    """PUBCOMP: QoS 2, step 3."""

    packet_id: int
    reason_code: int = 0
    """MQTT 5 reason code (0 success; >= 0x80 failure)."""
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the MQTT 5 long form only when it carries more)."""
        return _ack(PUBCOMP << 4, self.packet_id, self.reason_code, self.properties)


@dataclass(frozen=True, slots=True)
class Subscribe:
    """SUBSCRIBE: ``topics`` is a tuple of ``(filter, requested qos)``."""

    packet_id: int
    topics: tuple[tuple[str, int], ...]
    properties: Properties | None = None
    """MQTT 5: subscription identifier, user properties; then each topic's second item is
    the subscription-options byte."""

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        if not self.topics:
            raise ValueError("SUBSCRIBE needs at least one topic filter")
        body = [_U16.pack(self.packet_id)]
        if self.properties is not None:
            body.append(encode_properties(self.properties))
        for topic, qos in self.topics:
            if self.properties is None:
                if qos not in (0, 1, 2):
                    raise ValueError(f"requested qos must be 0, 1 or 2, got {qos}")
            elif (qos & 3) == 3 or qos & 0xC0 or (qos >> 4) & 3 == 3:
                raise ValueError(f"invalid MQTT 5 subscription options {qos:#x}")
            body.append(_utf8(topic) + bytes((qos,)))
        return _frame((SUBSCRIBE << 4) | 2, b"".join(body))


@dataclass(frozen=True, slots=True)
class Suback:
    """SUBACK: one return code per filter (granted QoS, or 0x80 for failure)."""

    packet_id: int
    return_codes: tuple[int, ...]
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        props = b"" if self.properties is None else encode_properties(self.properties)
        return _frame(SUBACK << 4, _U16.pack(self.packet_id) + props + bytes(self.return_codes))


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """UNSUBSCRIBE: topic filters to remove."""

    packet_id: int
    topics: tuple[str, ...]
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        if not self.topics:
            raise ValueError("UNSUBSCRIBE needs at least one topic filter")
        props = b"" if self.properties is None else encode_properties(self.properties)
        body = _U16.pack(self.packet_id) + props + b"".join(_utf8(t) for t in self.topics)
        return _frame((UNSUBSCRIBE << 4) | 2, body)


@dataclass(frozen=True, slots=True)
class Unsuback:
    """UNSUBACK (MQTT 5: one reason code per filter)."""

    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        if self.properties is None:
            return _ack(UNSUBACK << 4, self.packet_id)
        body = _U16.pack(self.packet_id) + encode_properties(self.properties)
        return _frame(UNSUBACK << 4, body + bytes(self.reason_codes))


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
    """DISCONNECT (MQTT 5: reason code and properties, both optional on the wire)."""

    reason_code: int = 0
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the short form when there is nothing to say)."""
        if self.reason_code == 0 and not self.properties:
            return DISCONNECT_BYTES
        body = bytes((self.reason_code,))
        if self.properties:
            body += encode_properties(self.properties)
        return _frame(DISCONNECT << 4, body)


@dataclass(frozen=True, slots=True)
class Auth:
    """AUTH (MQTT 5 only): enhanced authentication exchange."""

    reason_code: int = 0
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes."""
        if self.reason_code == 0 and not self.properties:
            return bytes((AUTH << 4, 0))
        return _frame(AUTH << 4, bytes((self.reason_code,)) + encode_properties(self.properties))


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
    | Auth
)
"""Any decoded control packet."""

PINGREQ_BYTES: Final = bytes((PINGREQ << 4, 0))
PINGRESP_BYTES: Final = bytes((PINGRESP << 4, 0))
DISCONNECT_BYTES: Final = bytes((DISCONNECT << 4, 0))


def _ack(
    first_byte: int, packet_id: int, reason_code: int = 0, properties: Properties | None = None
) -> bytes:
    if not 0 < packet_id <= MAX_PACKET_ID:
        raise ValueError(f"packet id must be 1..65535, got {packet_id}")
    if reason_code or properties:
        body = _U16.pack(packet_id) + bytes((reason_code,))
        if properties:
            body += encode_properties(properties)
        return _frame(first_byte, body)
    return bytes((first_byte, 2, packet_id >> 8, packet_id & 0xFF))


def encode_publish5(
    topic: str | bytes,
    payload: bytes,
    qos: int,
    packet_id: int,
    properties: bytes,
    *,
    retain: bool = False,
    dup: bool = False,
) -> bytes:
    """Return one MQTT 5 PUBLISH; ``properties`` is an encoded block (``encode_properties``)."""
    if qos not in (0, 1, 2):
        raise ValueError(f"qos must be 0, 1 or 2, got {qos}")
    raw = topic.encode("utf-8") if isinstance(topic, str) else topic
    if qos and not 0 < packet_id <= MAX_PACKET_ID:
        raise ValueError(f"packet id must be 1..65535, got {packet_id}")
    if not qos and packet_id:
        raise ValueError("a QoS 0 PUBLISH has no packet id")
    first = (PUBLISH << 4) | (8 if dup else 0) | (qos << 1) | (1 if retain else 0)
    body = _utf8(raw.decode("utf-8")) + (_U16.pack(packet_id) if qos else b"")
    return _frame(first, body + properties + payload)


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
    v5 = level >= PROTOCOL_LEVEL_5
    flags = r.u8()
    if flags & 0x01:
        raise MqttCodecError("CONNECT reserved flag is set")
    keepalive = r.u16()
    properties = decode_properties(r, CONNECT) if v5 else None
    client_id = r.text()
    will: Will | None = None
    will_qos = (flags >> 3) & 3
    if flags & 0x04:
        if will_qos == 3:
            raise MqttCodecError("CONNECT will QoS 3")
        will_props = decode_properties(r, -1) if v5 else None
        will_topic = r.text()
        will_payload = r.binary()
        will = Will(will_topic, will_payload, will_qos, bool(flags & 0x20), will_props)
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
        properties=properties,
    )


def _decode_body(first_byte: int, body: memoryview, level: int = PROTOCOL_LEVEL_311) -> Packet:
    """Decode one packet given its first byte and its body (everything after the length).

    ``level`` is the connection's protocol level: 5 selects the MQTT 5 layouts.
    """
    kind = first_byte >> 4
    flags = first_byte & 0x0F
    r = _Reader(body)
    v5 = level >= PROTOCOL_LEVEL_5
    if kind == PUBLISH:
        qos = (flags >> 1) & 3
        if qos == 3:
            raise MqttCodecError("PUBLISH with QoS 3")
        if qos == 0 and flags & 0x08:
            raise MqttCodecError("QoS 0 PUBLISH with DUP set")
        topic = r.text()
        packet_id = r.packet_id() if qos else 0
        props = decode_properties(r, PUBLISH) if v5 else None
        return Publish(topic, r.rest(), qos, packet_id, bool(flags & 1), bool(flags & 8), props)
    if v5 and kind != CONNECT:
        return _decode_body5(kind, flags, r)
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


def _decode_body5(kind: int, flags: int, r: _Reader) -> Packet:
    """The MQTT 5 layouts of every packet but CONNECT and PUBLISH."""
    required = 0 if kind == AUTH else _REQUIRED_FLAGS.get(kind)
    if required is None:
        raise MqttCodecError(f"reserved packet type {kind}")
    if flags != required:
        raise MqttCodecError(f"packet type {kind} with invalid fixed-header flags {flags:#x}")
    packet: Packet
    if kind == CONNACK:
        ack_flags = r.u8()
        if ack_flags & 0xFE:
            raise MqttCodecError("CONNACK reserved flags set")
        code = r.u8()
        packet = Connack(code, bool(ack_flags & 1), decode_properties(r, CONNACK))
    elif kind in (PUBACK, PUBREC, PUBREL, PUBCOMP):
        packet_id = r.packet_id()
        code = r.u8() if r.remaining() else 0
        props = decode_properties(r, PUBACK) if r.remaining() else None
        if props is not None and set(props) - _ACK_PROPERTIES:
            raise MqttCodecError("ack with a property other than reason string/user property")
        ack_class = _PUB_ACK_CLASSES[kind]
        packet = ack_class(packet_id, code, props)
    elif kind == SUBSCRIBE:
        packet_id = r.packet_id()
        props = decode_properties(r, SUBSCRIBE)
        topics: list[tuple[str, int]] = []
        while r.remaining():
            topic = r.text()
            options = r.u8()
            if options & 0xC0 or (options & 3) == 3 or (options >> 4) & 3 == 3:
                raise MqttCodecError(f"SUBSCRIBE invalid subscription options {options:#x}")
            topics.append((topic, options))
        if not topics:
            raise MqttCodecError("SUBSCRIBE without topic filters")
        packet = Subscribe(packet_id, tuple(topics), props)
    elif kind == SUBACK:
        packet_id = r.packet_id()
        props = decode_properties(r, SUBACK)
        codes = tuple(r.rest())
        if not codes:
            raise MqttCodecError("SUBACK without reason codes")
        packet = Suback(packet_id, codes, props)
    elif kind == UNSUBSCRIBE:
        packet_id = r.packet_id()
        props = decode_properties(r, UNSUBSCRIBE)
        filters: list[str] = []
        while r.remaining():
            filters.append(r.text())
        if not filters:
            raise MqttCodecError("UNSUBSCRIBE without topic filters")
        packet = Unsubscribe(packet_id, tuple(filters), props)
    elif kind == UNSUBACK:
        packet_id = r.packet_id()
        props = decode_properties(r, UNSUBACK)
        packet = Unsuback(packet_id, tuple(r.rest()), props)
    elif kind == PINGREQ:
        packet = PingReq()
    elif kind == PINGRESP:
        packet = PingResp()
    elif kind in (DISCONNECT, AUTH):
        code = r.u8() if r.remaining() else 0
        props = decode_properties(r, kind) if r.remaining() else None
        packet = Disconnect(code, props) if kind == DISCONNECT else Auth(code, props)
    else:  # pragma: no cover - CONNECT and PUBLISH are decoded by the caller
        raise MqttCodecError(f"unexpected packet type {kind}")
    r.end(type(packet).__name__.upper())
    return packet


_PUB_ACK_CLASSES: Final[dict[int, type[PubAck | PubRec | PubRel | PubComp]]] = {
    PUBACK: PubAck,
    PUBREC: PubRec,
    PUBREL: PubRel,
    PUBCOMP: PubComp,
}

_ACK_CLASSES: Final[dict[int, type[PubAck | PubRec | PubRel | PubComp | Unsuback]]] = {
    PUBACK: PubAck,
    PUBREC: PubRec,
    PUBREL: PubRel,
    PUBCOMP: PubComp,
    UNSUBACK: Unsuback,
}


def decode_packet(
    data: bytes | bytearray | memoryview, protocol_level: int = PROTOCOL_LEVEL_311
) -> Packet:
    """Decode exactly one complete packet; raise :class:`MqttCodecError` otherwise.

    ``protocol_level`` 5 decodes the MQTT 5 layouts (CONNECT announces its own level).
    """
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
    return _decode_body(mv[0], mv[start:], protocol_level)


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
                    emit(_decode_body(b0, mv[p:end], level))  # MQTT 5 form or an error
                else:
                    packet_id = (data[p] << 8) | data[p + 1]
                    if not packet_id:
                        raise MqttCodecError("packet identifier 0 is not allowed")
                    on_ack(kind, packet_id)
            else:
                emit(_decode_body(b0, mv[p:end], level))
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


def parse_properties(data: bytes | memoryview, packet_type: int = PUBLISH) -> Properties:
    """Decode one complete property block (length prefix included), e.g. a stored one."""
    r = _Reader(memoryview(data))
    props = decode_properties(r, packet_type)
    r.end("property block")
    return props
