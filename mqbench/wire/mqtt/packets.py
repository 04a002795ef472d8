"""MQTT control packets as frozen dataclasses, and the hot-path PUBLISH encoders.

Every control packet is a frozen dataclass with an ``encode()`` method; a packet whose
``properties`` is not None encodes in the MQTT 5 layout (``Connect`` when its
``protocol_level`` is 5); with the defaults the bytes are exactly those of 3.1.1. The hot
PUBLISH path uses :func:`publish_prefix` (fixed header, remaining length and topic computed
once per topic, payload length and QoS) so a sender does one concatenation per message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mqbench.wire.mqtt.primitives import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    MAX_PACKET_ID,
    PINGREQ,
    PINGRESP,
    PROTOCOL_LEVEL_5,
    PROTOCOL_LEVEL_311,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    SUBSCRIBE,
    U16,
    UNSUBACK,
    UNSUBSCRIBE,
    binary_field,
    encode_remaining_length,
    frame,
    utf8_field,
)
from mqbench.wire.mqtt.properties import Properties, encode_properties


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
        payload = [utf8_field(self.client_id)]
        if self.will is not None:
            if self.will.qos not in (0, 1, 2):
                raise ValueError(f"will qos must be 0, 1 or 2, got {self.will.qos}")
            flags |= 0x04 | (self.will.qos << 3) | (0x20 if self.will.retain else 0)
            if v5:
                payload.append(encode_properties(self.will.properties))
            payload.append(utf8_field(self.will.topic))
            payload.append(binary_field(self.will.payload))
        if self.username is not None:
            flags |= 0x80
            payload.append(utf8_field(self.username))
        if self.password is not None:
            flags |= 0x40
            payload.append(binary_field(self.password))
        header = (
            utf8_field(self.protocol_name)
            + bytes((self.protocol_level, flags))
            + U16.pack(self.keepalive)
        )
        if v5:
            header += encode_properties(self.properties)
        return frame(CONNECT << 4, header + b"".join(payload))


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
            return frame(CONNACK << 4, body + encode_properties(self.properties))
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
        return encode_ack(PUBACK << 4, self.packet_id, self.reason_code, self.properties)


@dataclass(frozen=True, slots=True)
class PubRec:
    """PUBREC: QoS 2, step 1."""

    packet_id: int
    reason_code: int = 0
    """MQTT 5 reason code (0 success; >= 0x80 failure)."""
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the MQTT 5 long form only when it carries more)."""
        return encode_ack(PUBREC << 4, self.packet_id, self.reason_code, self.properties)


@dataclass(frozen=True, slots=True)
class PubRel:
    """PUBREL: QoS 2, step 2."""

    packet_id: int
    reason_code: int = 0
    """MQTT 5 reason code (0 success; >= 0x80 failure)."""
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the MQTT 5 long form only when it carries more)."""
        return encode_ack((PUBREL << 4) | 2, self.packet_id, self.reason_code, self.properties)


@dataclass(frozen=True, slots=True)
class PubComp:
    """PUBCOMP: QoS 2, step 3."""

    packet_id: int
    reason_code: int = 0
    """MQTT 5 reason code (0 success; >= 0x80 failure)."""
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (the MQTT 5 long form only when it carries more)."""
        return encode_ack(PUBCOMP << 4, self.packet_id, self.reason_code, self.properties)


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
        body = [U16.pack(self.packet_id)]
        if self.properties is not None:
            body.append(encode_properties(self.properties))
        for topic, qos in self.topics:
            if self.properties is None:
                if qos not in (0, 1, 2):
                    raise ValueError(f"requested qos must be 0, 1 or 2, got {qos}")
            elif (qos & 3) == 3 or qos & 0xC0 or (qos >> 4) & 3 == 3:
                raise ValueError(f"invalid MQTT 5 subscription options {qos:#x}")
            body.append(utf8_field(topic) + bytes((qos,)))
        return frame((SUBSCRIBE << 4) | 2, b"".join(body))


@dataclass(frozen=True, slots=True)
class Suback:
    """SUBACK: one return code per filter (granted QoS, or 0x80 for failure)."""

    packet_id: int
    return_codes: tuple[int, ...]
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        props = b"" if self.properties is None else encode_properties(self.properties)
        return frame(SUBACK << 4, U16.pack(self.packet_id) + props + bytes(self.return_codes))


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
        body = U16.pack(self.packet_id) + props + b"".join(utf8_field(t) for t in self.topics)
        return frame((UNSUBSCRIBE << 4) | 2, body)


@dataclass(frozen=True, slots=True)
class Unsuback:
    """UNSUBACK (MQTT 5: one reason code per filter)."""

    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes (MQTT 5 layout when ``properties`` is not None)."""
        if self.properties is None:
            return encode_ack(UNSUBACK << 4, self.packet_id)
        body = U16.pack(self.packet_id) + encode_properties(self.properties)
        return frame(UNSUBACK << 4, body + bytes(self.reason_codes))


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
        return frame(DISCONNECT << 4, body)


@dataclass(frozen=True, slots=True)
class Auth:
    """AUTH (MQTT 5 only): enhanced authentication exchange."""

    reason_code: int = 0
    properties: Properties | None = None

    def encode(self) -> bytes:
        """Return the packet bytes."""
        if self.reason_code == 0 and not self.properties:
            return bytes((AUTH << 4, 0))
        return frame(AUTH << 4, bytes((self.reason_code,)) + encode_properties(self.properties))


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


def encode_ack(
    first_byte: int, packet_id: int, reason_code: int = 0, properties: Properties | None = None
) -> bytes:
    """An ack with a packet id: the 4-byte 3.1.1 form unless a reason code or properties
    need the MQTT 5 long form."""
    if not 0 < packet_id <= MAX_PACKET_ID:
        raise ValueError(f"packet id must be 1..65535, got {packet_id}")
    if reason_code or properties:
        body = U16.pack(packet_id) + bytes((reason_code,))
        if properties:
            body += encode_properties(properties)
        return frame(first_byte, body)
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
    body = utf8_field(raw.decode("utf-8")) + (U16.pack(packet_id) if qos else b"")
    return frame(first, body + properties + payload)


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
    return bytes((first,)) + encode_remaining_length(remaining) + U16.pack(len(raw)) + raw


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
    return prefix + U16.pack(packet_id) + payload
