"""MQTT return and reason codes: CONNACK return codes (3.1.1) and MQTT 5 reason codes.

MQTT 3.1.1 answers a CONNECT with a return code (``CONNACK_*``) and a SUBSCRIBE with the
granted QoS or ``SUBACK_FAILURE``; MQTT 5 replaces both with one table of reason codes
(``RC_*``, section 2.4), also sent in DISCONNECT, the publish acks and UNSUBACK.
"""

from __future__ import annotations

from typing import Final

# MQTT 3.1.1 CONNACK return codes (section 3.2.2.3).
CONNACK_ACCEPTED: Final = 0
CONNACK_BAD_PROTOCOL: Final = 1
CONNACK_ID_REJECTED: Final = 2
CONNACK_SERVER_UNAVAILABLE: Final = 3
CONNACK_BAD_CREDENTIALS: Final = 4
CONNACK_NOT_AUTHORIZED: Final = 5

CONNACK_MESSAGES: Final[dict[int, str]] = {
    CONNACK_ACCEPTED: "connection accepted",
    CONNACK_BAD_PROTOCOL: "unacceptable protocol version",
    CONNACK_ID_REJECTED: "client identifier rejected",
    CONNACK_SERVER_UNAVAILABLE: "server unavailable",
    CONNACK_BAD_CREDENTIALS: "bad user name or password",
    CONNACK_NOT_AUTHORIZED: "not authorized",
}
"""CONNACK return codes of MQTT 3.1.1 (section 3.2.2.3)."""

SUBACK_FAILURE: Final = 0x80
"""MQTT 3.1.1 SUBACK return code of a refused subscription."""

# MQTT 5 reason codes (section 2.4).
RC_SUCCESS: Final = 0x00
RC_DISCONNECT_WITH_WILL: Final = 0x04
RC_NO_SUBSCRIPTION: Final = 0x11
RC_UNSPECIFIED: Final = 0x80
RC_MALFORMED: Final = 0x81
RC_PROTOCOL_ERROR: Final = 0x82
RC_IMPLEMENTATION: Final = 0x83
RC_BAD_VERSION: Final = 0x84
RC_BAD_CLIENT_ID: Final = 0x85
RC_NOT_AUTHORIZED: Final = 0x87
RC_SERVER_SHUTTING_DOWN: Final = 0x8B
RC_BAD_AUTH_METHOD: Final = 0x8C
RC_KEEPALIVE_TIMEOUT: Final = 0x8D
RC_TAKEN_OVER: Final = 0x8E
RC_TOPIC_FILTER_INVALID: Final = 0x8F
RC_TOPIC_NAME_INVALID: Final = 0x90
RC_RECEIVE_MAX_EXCEEDED: Final = 0x93
RC_TOPIC_ALIAS_INVALID: Final = 0x94
RC_PACKET_TOO_LARGE: Final = 0x95
RC_SHARED_NOT_SUPPORTED: Final = 0x9E
