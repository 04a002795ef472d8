"""MQTT wire primitives: packet types, protocol levels, variable-length integers, fields.

Everything here is shared by the property, packet and parser modules of ``mqbench.wire.mqtt``:
the control packet type numbers (high nibble of the first byte), the remaining-length
variable byte integer, UTF-8 and binary fields, and ``Reader``, a bounds-checked cursor
over one packet body that raises ``MqttCodecError`` on truncation.
"""

from __future__ import annotations

import struct
from typing import Final

from mqbench.wire.mqtt.errors import MqttCodecError

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

U16: Final = struct.Struct(">H")
"""Big-endian unsigned 16-bit integer (lengths, packet ids)."""


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


def utf8_field(text: str) -> bytes:
    """A UTF-8 string field: two length bytes and the encoded text."""
    raw = text.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise ValueError(f"string of {len(raw)} bytes exceeds 65535")
    return U16.pack(len(raw)) + raw


def binary_field(data: bytes) -> bytes:
    """A binary data field: two length bytes and the data."""
    if len(data) > 0xFFFF:
        raise ValueError(f"binary field of {len(data)} bytes exceeds 65535")
    return U16.pack(len(data)) + data


def frame(first_byte: int, body: bytes) -> bytes:
    """A whole packet: the first byte, the remaining length and ``body``."""
    return bytes((first_byte,)) + encode_remaining_length(len(body)) + body


class Reader:
    """Cursor over one packet body; every read checks bounds."""

    __slots__ = ("data", "pos")

    def __init__(self, data: memoryview) -> None:
        """A cursor at the start of ``data``."""
        self.data = data
        self.pos = 0

    def remaining(self) -> int:
        """Bytes left after the cursor."""
        return len(self.data) - self.pos

    def u8(self) -> int:
        """One byte."""
        if self.pos >= len(self.data):
            raise MqttCodecError("packet truncated")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u16(self) -> int:
        """A big-endian two-byte integer."""
        if self.pos + 2 > len(self.data):
            raise MqttCodecError("packet truncated")
        value: int = (self.data[self.pos] << 8) | self.data[self.pos + 1]
        self.pos += 2
        return value

    def binary(self) -> bytes:
        """A length-prefixed binary field."""
        size = self.u16()
        if self.pos + size > len(self.data):
            raise MqttCodecError("packet truncated: field longer than the packet")
        value = bytes(self.data[self.pos : self.pos + size])
        self.pos += size
        return value

    def text(self) -> str:
        """A length-prefixed UTF-8 string (well-formed, without U+0000)."""
        raw = self.binary()
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MqttCodecError("malformed UTF-8 string") from None
        if "\x00" in value:
            raise MqttCodecError("UTF-8 string contains U+0000")
        return value

    def rest(self) -> bytes:
        """Everything after the cursor."""
        value = bytes(self.data[self.pos :])
        self.pos = len(self.data)
        return value

    def u32(self) -> int:
        """A big-endian four-byte integer."""
        if self.pos + 4 > len(self.data):
            raise MqttCodecError("packet truncated")
        value = int.from_bytes(self.data[self.pos : self.pos + 4], "big")
        self.pos += 4
        return value

    def varint(self) -> int:
        """A variable byte integer."""
        value, end = decode_remaining_length(self.data, self.pos)
        if end < 0:
            raise MqttCodecError("packet truncated: variable byte integer")
        self.pos = end
        return value

    def packet_id(self) -> int:
        """A packet identifier (never 0)."""
        value = self.u16()
        if value == 0:
            raise MqttCodecError("packet identifier 0 is not allowed")
        return value

    def end(self, what: str) -> None:
        """Raise unless the whole body was read (``what`` names the packet)."""
        if self.pos != len(self.data):
            raise MqttCodecError(f"{what}: {len(self.data) - self.pos} unexpected trailing bytes")
