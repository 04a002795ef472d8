"""Decoding one MQTT control packet (3.1.1 and MQTT 5 layouts) into a packet dataclass.

By default the wire layout of every packet is that of MQTT 3.1.1 (protocol level 4; level 3
"MQIsdp" CONNECTs decode too). ``protocol_level`` 5 selects the MQTT 5 layouts (properties
after the variable headers, reason codes in acks, DISCONNECT and UNSUBACK, the AUTH packet);
CONNECT announces its own level. In a level-5 SUBSCRIBE the second item of each topic tuple
is the whole subscription-options byte (QoS in bits 0-1, No Local 0x04, Retain As Published
0x08, Retain Handling in bits 4-5). Malformed input raises :class:`MqttCodecError`.
"""

from __future__ import annotations

from typing import Final

from mqbench.wire.mqtt.errors import MqttCodecError
from mqbench.wire.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
)
from mqbench.wire.mqtt.primitives import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
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
    UNSUBACK,
    UNSUBSCRIBE,
    Reader,
    decode_remaining_length,
)
from mqbench.wire.mqtt.properties import ACK_PROPERTIES, WILL, decode_properties
from mqbench.wire.mqtt.reason_codes import SUBACK_FAILURE

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


def _decode_connect(r: Reader) -> Connect:
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
        will_props = decode_properties(r, WILL) if v5 else None
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


def decode_body(first_byte: int, body: memoryview, level: int = PROTOCOL_LEVEL_311) -> Packet:
    """Decode one packet given its first byte and its body (everything after the length).

    ``level`` is the connection's protocol level: 5 selects the MQTT 5 layouts.
    """
    kind = first_byte >> 4
    flags = first_byte & 0x0F
    r = Reader(body)
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


def _decode_body5(kind: int, flags: int, r: Reader) -> Packet:
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
        if props is not None and set(props) - ACK_PROPERTIES:
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
    return decode_body(mv[0], mv[start:], protocol_level)
