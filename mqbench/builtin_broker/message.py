"""The broker's message and its compact serialized form (what the persistence backends store).

Serialized layout (big endian), chosen over TBMQ's JSON because encoding it costs a few
microseconds in Python::

    b"P"  u8 qos  u8 flags(retain=1)  i64 created_ms  i64 expires_ms(0: never)
          u16 topic_len  topic  u32 props_len  props(MQTT 5 property block or empty)
          payload
    b"R"  (a QoS 2 message past PUBREC: only PUBREL is left to send)
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Final

from mqbench.wire.mqtt.errors import MqttCodecError
from mqbench.wire.mqtt.properties import (
    FORWARDED_PUBLISH_PROPERTIES,
    PROP_MESSAGE_EXPIRY,
    Properties,
    encode_properties,
    filter_properties,
    parse_properties,
)

PUBREL_MARKER: Final = b"R"
_HEAD = struct.Struct(">cBBqqH")
_U32 = struct.Struct(">I")


@dataclass(slots=True)
class Message:
    """One application message as the broker routes and stores it."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None
    """MQTT 5 properties to forward: only :data:`FORWARDED_PUBLISH_PROPERTIES` (no topic
    alias, subscription identifier or will delay interval)."""
    created_ms: int = 0
    expires_ms: int = 0
    """Wall-clock expiry in ms (MQTT 5 message expiry interval); 0: never."""

    @classmethod
    def create(
        cls,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties | None = None,
    ) -> Message:
        """A message received now (or a will published now): keeps only the properties a
        PUBLISH may forward and derives the expiry from a message expiry interval."""
        now = time.time_ns() // 1_000_000
        expires = 0
        properties = filter_properties(properties, FORWARDED_PUBLISH_PROPERTIES)
        if properties:
            interval = properties.get(PROP_MESSAGE_EXPIRY)
            if isinstance(interval, int):
                expires = now + interval * 1000
        return cls(topic, payload, qos, retain, properties or None, now, expires)

    def expired(self, now_ms: int) -> bool:
        """True when the message expiry interval has passed."""
        return bool(self.expires_ms) and now_ms >= self.expires_ms

    def forward_properties(self, now_ms: int) -> Properties:
        """Properties for an outgoing MQTT 5 PUBLISH (expiry interval counted down)."""
        props: Properties = dict(self.properties) if self.properties else {}
        if self.expires_ms:
            props[PROP_MESSAGE_EXPIRY] = max(0, (self.expires_ms - now_ms + 999) // 1000)
        return props

    def ttl_s(self, default_s: int) -> int:
        """Seconds a backend should keep the message: the default, shortened by its expiry."""
        if not self.expires_ms:
            return default_s
        left = max(1, (self.expires_ms - time.time_ns() // 1_000_000 + 999) // 1000)
        return min(default_s, left) if default_s > 0 else left

    def serialize(self) -> bytes:
        """The stored form (see the module docstring)."""
        raw_topic = self.topic.encode("utf-8")
        props = encode_properties(self.properties) if self.properties else b""
        return b"".join(
            (
                _HEAD.pack(
                    b"P",
                    self.qos,
                    1 if self.retain else 0,
                    self.created_ms,
                    self.expires_ms,
                    len(raw_topic),
                ),
                raw_topic,
                _U32.pack(len(props)),
                props,
                self.payload,
            )
        )


def deserialize(data: bytes) -> Message | None:
    """Parse a stored message; None for the PUBREL marker. Raises ValueError when corrupt."""
    if data[:1] == PUBREL_MARKER:
        return None
    try:
        kind, qos, flags, created, expires, topic_len = _HEAD.unpack_from(data, 0)
        if kind != b"P":
            raise ValueError(f"unknown stored message kind {kind!r}")
        pos = _HEAD.size
        topic = data[pos : pos + topic_len].decode("utf-8")
        pos += topic_len
        (props_len,) = _U32.unpack_from(data, pos)
        pos += 4
        props: Properties | None = None
        if props_len:
            props = parse_properties(memoryview(data)[pos : pos + props_len])
        pos += props_len
        return Message(topic, bytes(data[pos:]), qos, bool(flags & 1), props, created, expires)
    except (struct.error, UnicodeDecodeError, MqttCodecError) as exc:
        raise ValueError(f"corrupt stored message: {exc}") from exc
