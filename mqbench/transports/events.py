"""What a client reports about its connection: one class per kind of event.

A client calls ``ClientOptions.on_event`` with one of these; the engine's worker
dispatches them with ``match`` (a lost connection is reconnected, a SUBACK that granted a
lower QoS is counted). Fields a protocol has no notion of stay None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Connected:
    """The handshake completed (or a link the client keeps came back by itself)."""

    client_id: str | None = None
    endpoint: str | None = None
    server: str | None = None
    """What the broker says it is: NATS ``server_id``, AMQP product and version, zenoh id."""
    session_present: bool | None = None
    """MQTT: the broker kept a session for this client id."""
    again: bool = False
    """A link the client keeps came back without a new handshake (zenoh's router link)."""


@dataclass(frozen=True, slots=True)
class Subscribed:
    """The broker confirmed a subscription."""

    topic: str
    requested_qos: int
    granted_qos: int | None = None
    """The QoS the broker granted (MQTT SUBACK); None where the protocol grants none."""
    queue: str | None = None
    """AMQP: the server-named queue bound to the topic."""


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The connection is gone (once per connection)."""

    reason: str
    expected: bool
    """True when the client closed it (``close``); False for a loss the engine repairs."""
    client_id: str | None = None
    endpoint: str | None = None
    unacked: int | None = None
    """QoS >= 1 publishes still unacknowledged when it went (None: not tracked)."""
    last_error: str | None = None
    """The broker's last error reply before the loss (NATS ``-ERR``, a Redis error)."""


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """The client dropped the connection because the broker broke the protocol."""

    reason: str
    endpoint: str | None = None
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class WritePaused:
    """The socket is back-pressured: the output buffer passed its high-water mark."""

    endpoint: str
    buffered: int
    """Bytes waiting to be written."""


@dataclass(frozen=True, slots=True)
class ServerError:
    """The broker answered with an error after the handshake (NATS ``-ERR``, Redis)."""

    endpoint: str
    message: str


@dataclass(frozen=True, slots=True)
class PublishUnreceived:
    """Redis: a PUBLISH reached no subscriber (reported once per connection)."""

    endpoint: str


@dataclass(frozen=True, slots=True)
class Resent:
    """MQTT: unacknowledged publishes were sent again after a reconnect."""

    client_id: str
    messages: int


@dataclass(frozen=True, slots=True)
class Blocked:
    """AMQP: the broker stopped reading from this connection (a resource alarm)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Unblocked:
    """AMQP: the broker reads from this connection again."""


ClientEvent = (
    Connected
    | Subscribed
    | Disconnected
    | ProtocolError
    | WritePaused
    | ServerError
    | PublishUnreceived
    | Resent
    | Blocked
    | Unblocked
)
"""Every event a client reports."""

EventHandler = Callable[[ClientEvent], None]
"""``ClientOptions.on_event``: called on the client's event loop with each event."""
