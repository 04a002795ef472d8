"""MQTT protocol errors; each carries the MQTT 5 reason code that describes it."""

from __future__ import annotations

from mqbench.errors import TransportError, TransportErrorKind
from mqbench.wire.mqtt.reason_codes import RC_MALFORMED, RC_PROTOCOL_ERROR


class MqttProtocolError(TransportError):
    """The peer broke the MQTT protocol (unexpected packet, bad state, malformed data).

    ``reason_code`` is the MQTT 5 reason code a server sends in its DISCONNECT (or CONNACK)
    for this error: code picks it from this field, never from the message.
    """

    default_reason_code = RC_PROTOCOL_ERROR

    def __init__(self, message: str, reason_code: int | None = None) -> None:
        """``reason_code`` defaults to the class's (protocol error; malformed packet)."""
        super().__init__(message, TransportErrorKind.PROTOCOL)
        self.reason_code = self.default_reason_code if reason_code is None else reason_code


class MqttCodecError(MqttProtocolError):
    """Bytes that are not a well-formed MQTT packet (reason code: malformed packet)."""

    default_reason_code = RC_MALFORMED
