"""MQTT 5 properties: identifiers, wire types, encoding, and decoding with validation.

A property block is a variable-byte-integer length followed by (identifier, value) pairs.
``Properties`` maps identifiers (the ``PROP_*`` constants) to values; user properties
(which may repeat) are a tuple of (name, value) pairs and subscription identifiers (which
may repeat in a PUBLISH) a tuple of ints. Decoding checks that each property is allowed in
its packet type (:data:`PACKET_PROPERTIES`, one table per packet type) and not
duplicated; :func:`filter_properties` keeps only the allowed ones when a server forwards
properties from one packet into another (a will into a PUBLISH, a PUBLISH to subscribers).
"""

from __future__ import annotations

from typing import Final

from mqbench.wire.mqtt.errors import MqttCodecError
from mqbench.wire.mqtt.primitives import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    SUBSCRIBE,
    UNSUBACK,
    UNSUBSCRIBE,
    Reader,
    binary_field,
    encode_remaining_length,
    utf8_field,
)

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
                out += utf8_field(str(pair[0])) + utf8_field(str(pair[1]))
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
            out += utf8_field(str(value))
        else:
            if not isinstance(value, bytes):
                raise ValueError(f"property {pid:#x} needs bytes")
            out += binary_field(value)
    return encode_remaining_length(len(out)) + bytes(out)


WILL: Final = -1
"""Pseudo packet type of the will properties in a CONNECT payload (for the tables below)."""

_PUBLISH_MESSAGE_PROPERTIES: Final = frozenset(
    {
        PROP_PAYLOAD_FORMAT,
        PROP_MESSAGE_EXPIRY,
        PROP_CONTENT_TYPE,
        PROP_RESPONSE_TOPIC,
        PROP_CORRELATION_DATA,
        PROP_USER_PROPERTY,
    }
)

PACKET_PROPERTIES: Final[dict[int, frozenset[int]]] = {
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
    CONNACK: frozenset(
        {
            PROP_SESSION_EXPIRY,
            PROP_ASSIGNED_CLIENT_ID,
            PROP_SERVER_KEEP_ALIVE,
            PROP_AUTH_METHOD,
            PROP_AUTH_DATA,
            PROP_RESPONSE_INFO,
            PROP_SERVER_REFERENCE,
            PROP_REASON_STRING,
            PROP_RECEIVE_MAXIMUM,
            PROP_TOPIC_ALIAS_MAXIMUM,
            PROP_MAXIMUM_QOS,
            PROP_RETAIN_AVAILABLE,
            PROP_USER_PROPERTY,
            PROP_MAXIMUM_PACKET_SIZE,
            PROP_WILDCARD_SUB_AVAILABLE,
            PROP_SUB_ID_AVAILABLE,
            PROP_SHARED_SUB_AVAILABLE,
        }
    ),
    PUBLISH: _PUBLISH_MESSAGE_PROPERTIES | {PROP_SUBSCRIPTION_ID, PROP_TOPIC_ALIAS},
    PUBACK: frozenset({PROP_REASON_STRING, PROP_USER_PROPERTY}),
    PUBREC: frozenset({PROP_REASON_STRING, PROP_USER_PROPERTY}),
    PUBREL: frozenset({PROP_REASON_STRING, PROP_USER_PROPERTY}),
    PUBCOMP: frozenset({PROP_REASON_STRING, PROP_USER_PROPERTY}),
    SUBSCRIBE: frozenset({PROP_SUBSCRIPTION_ID, PROP_USER_PROPERTY}),
    SUBACK: frozenset({PROP_REASON_STRING, PROP_USER_PROPERTY}),
    UNSUBSCRIBE: frozenset({PROP_USER_PROPERTY}),
    UNSUBACK: frozenset({PROP_REASON_STRING, PROP_USER_PROPERTY}),
    DISCONNECT: frozenset(
        {PROP_SESSION_EXPIRY, PROP_SERVER_REFERENCE, PROP_REASON_STRING, PROP_USER_PROPERTY}
    ),
    AUTH: frozenset({PROP_AUTH_METHOD, PROP_AUTH_DATA, PROP_REASON_STRING, PROP_USER_PROPERTY}),
    WILL: _PUBLISH_MESSAGE_PROPERTIES | {PROP_WILL_DELAY},
}
"""The properties each packet type may carry (MQTT 5.0, section 2.2.2.2), by packet type
(``WILL`` for the will properties); decoding rejects any other property."""

FORWARDED_PUBLISH_PROPERTIES: Final = _PUBLISH_MESSAGE_PROPERTIES
"""What a server copies from a received PUBLISH (or a will) into the PUBLISHes it sends.

A topic alias belongs to one connection and subscription identifiers to one subscriber's
subscriptions, so neither is forwarded as received; the will delay interval exists only in
a CONNECT. The message expiry interval is forwarded counted down to what is left.
"""

SERVER_DISCONNECT_PROPERTIES: Final = PACKET_PROPERTIES[DISCONNECT] - {PROP_SESSION_EXPIRY}
"""A DISCONNECT sent by a server must not carry a session expiry interval (3.14.2.2.2)."""


def filter_properties(props: Properties | None, allowed: frozenset[int]) -> Properties | None:
    """The subset of ``props`` whose identifiers are in ``allowed`` (None when empty)."""
    if not props:
        return None
    kept = {pid: value for pid, value in props.items() if pid in allowed}
    return kept or None


def decode_properties(r: Reader, packet_type: int) -> Properties:
    """Read a property block (length + properties) for ``packet_type``; validates it."""
    length = r.varint()
    if length > r.remaining():
        raise MqttCodecError("packet truncated: properties longer than the packet")
    end = r.pos + length
    allowed = PACKET_PROPERTIES.get(packet_type)
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


ACK_PROPERTIES: Final = PACKET_PROPERTIES[PUBACK]
"""The only properties an MQTT 5 publish ack (PUBACK, PUBREC, PUBREL, PUBCOMP) may carry."""


def parse_properties(data: bytes | memoryview, packet_type: int = PUBLISH) -> Properties:
    """Decode one complete property block (length prefix included), e.g. a stored one."""
    r = Reader(memoryview(data))
    props = decode_properties(r, packet_type)
    r.end("property block")
    return props
