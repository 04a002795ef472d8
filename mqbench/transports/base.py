"""The transport contract every protocol client implements.

The hot path is two callables: a *sender* bound to one topic (``Client.sender``) that frames
and writes a payload without awaiting, and the ``MessageHandler`` a subscriber passes to
``Client.subscribe``, called once per delivered message with the receive time of the read
that carried it. Nothing on the hot path awaits per message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mqbench.endpoint import Endpoint

MessageHandler = Callable[[memoryview | bytes, int], None]
"""``(payload, t_recv_ns)``: called per delivered message; payload starts with the header.

The payload may be a view into the client's read buffer: it is valid only during the call.
"""

AckHandler = Callable[[int, int], None]
"""``(tag, t_ack_ns)``: called when a QoS >= 1 publish with ``tag`` is acknowledged."""

EventHandler = Callable[[str, dict[str, Any]], None]
"""``(kind, details)``: connection events. Standard kinds: ``connected``, ``subscribed``,
``disconnected`` (details: ``expected``, ``reason``), ``protocol_error``, ``write_paused``."""

Sender = Callable[[bytes, int], bool]
"""``(payload, tag) -> handed_over``: False when the client is not connected, when its output
buffer is full (the socket is back-pressured and more than ``max_pending_bytes`` wait: the
broker does not keep up; counted in the client's ``sends_refused``), or, for QoS >= 1, when
no packet id is free (back-pressure from unacknowledged messages). A refused message is
never queued, so the generator's memory stays bounded.

A sender may raise ``TransportError`` for a payload the protocol or broker cannot carry
(e.g. above NATS's ``max_payload``); the scenario should have been rejected before that.
"""


DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024
"""Per connection: bytes queued for the socket (coalesced and in the transport's buffer)
above which a sender refuses new messages while the socket is back-pressured. The engine
sets ``ClientOptions.extra["max_pending_bytes"]`` from ``generator.buffer_memory``."""


def max_pending_bytes(options: ClientOptions) -> int:
    """The output-buffer bound of a client (``extra["max_pending_bytes"]`` or the default)."""
    value = options.extra.get("max_pending_bytes")
    return int(value) if value else DEFAULT_MAX_PENDING_BYTES


@dataclass(frozen=True)
class ClientOptions:
    """Per-client settings; a transport ignores what its protocol has no notion of."""

    client_id: str
    clean_session: bool = True
    keepalive_s: int = 60
    connect_timeout_s: float = 10.0
    on_event: EventHandler | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Client(Protocol):
    """One connection to a broker."""

    @property
    def connected(self) -> bool:
        """True while the connection is up and usable."""
        ...

    async def connect(self) -> None:
        """Open the connection and complete the protocol handshake within the timeout.

        Raises ``mqbench.errors.TransportError`` with a clear message on failure.
        """
        ...

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Subscribe and return once the broker confirmed the subscription."""
        ...

    def sender(self, topic: str, qos: int) -> Sender:
        """Return a fast, non-blocking publish function bound to ``topic`` and ``qos``."""
        ...

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Receive acknowledgements of QoS >= 1 publishes (tag passed to the sender)."""
        ...

    def pending_write_bytes(self) -> int:
        """Bytes queued in the client's write buffer (for back-pressure reporting)."""
        ...

    async def flush(self, timeout_s: float) -> None:
        """Wait until queued writes (and, for QoS >= 1, acks) are done or the timeout passes.

        Returns quietly on timeout or when the connection is lost; never raises.
        """
        ...

    async def close(self) -> None:
        """Disconnect cleanly (protocol goodbye when connected); never raises."""
        ...


class Transport(Protocol):
    """A protocol implementation: creates clients for an endpoint."""

    name: str
    protocol: str
    max_qos: int

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> Client:
        """Return a new, unconnected client."""
        ...
