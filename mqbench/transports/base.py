"""The transport contract every protocol client implements.

The hot path is two callables: a *sender* bound to one topic (``Client.sender``) that frames
and writes a payload without awaiting, and the ``MessageHandler`` a subscriber passes to
``Client.subscribe``, called once per delivered message with the receive time of the read
that carried it. Nothing on the hot path awaits per message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.records.timing import ReceiveStamp
from mqbench.transports.events import EventHandler
from mqbench.wire.limits import PayloadLimit

MessageHandler = Callable[[memoryview | bytes, int], None]
"""``(payload, t_recv_ns)``: called per delivered message; payload starts with the header.

The payload may be a view into the client's read buffer: it is valid only during the call.
"""

AckHandler = Callable[[int, int], None]
"""``(tag, t_ack_ns)``: called when a QoS >= 1 publish with ``tag`` is acknowledged."""

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
sets ``ClientOptions.max_pending_bytes`` from ``generator.buffer_memory``."""


def max_pending_bytes(options: ClientOptions) -> int:
    """The output-buffer bound of a client (``options.max_pending_bytes`` or the default)."""
    return options.max_pending_bytes or DEFAULT_MAX_PENDING_BYTES


@dataclass(frozen=True)
class TransportCapabilities:
    """What a transport's clients can do; checked before a run starts (preflight)."""

    max_qos: int
    """Highest QoS a sender or subscription accepts (0: at most once only)."""
    persistent_sessions: bool
    """``ClientOptions.clean_session`` False keeps subscriptions and unacknowledged
    messages across a reconnect (MQTT sessions)."""
    wildcard_filters: bool
    """``subscribe`` takes MQTT wildcard filters (``+``, ``#``), translated to the
    protocol's own syntax where it has one."""
    tls: str | None = "this client does not speak TLS"
    """None when ``ClientOptions.tls`` works; else why not (one phrase)."""
    auth: str | None = "this client sends no user name and password"
    """None when ``ClientOptions.username``/``password`` log in; else why not."""
    max_payload: PayloadLimit | None = None
    """The largest payload the protocol carries whatever the broker's settings (None: the
    broker decides; its definition's ``payload_limit`` says how much)."""
    compiled: str | None = None
    """The session framing the compiled core speaks for this client's established
    connections (``mqtt``, ``nats``, ``redis``; docs/performance.md), lent to it through
    ``LendsSockets``; None: its cells run on the Python engine."""


def require_qos(qos: int, client: str, capabilities: TransportCapabilities) -> None:
    """Raise ``TransportError`` (UNSUPPORTED) unless ``client`` can send/subscribe at ``qos``."""
    top = capabilities.max_qos
    if 0 <= qos <= top:
        return
    what = "is at-most-once" if top == 0 else f"supports QoS 0 to {top}"
    raise TransportError(
        f"the {client} client {what}: QoS {qos} is not supported", TransportErrorKind.UNSUPPORTED
    )


@dataclass(frozen=True, slots=True)
class ClientStats:
    """Counters of one client (``Client.stats()``), summed by the engine per worker."""

    sends_refused: int = 0
    """Sends refused because the output buffer was full (see ``Sender``)."""
    qos2_acked_as_qos1: int = 0
    """QoS 2 publishes the broker completed with PUBACK (it downgraded them to QoS 1)."""
    qos2_id_reused: int = 0
    """Inbound QoS 2: a different message on a packet id still awaiting PUBREL, dropped as
    MQTT 3.1.1 section 4.3.3 requires (lost by the broker's fault)."""
    qos2_redelivered: int = 0
    """Inbound QoS 2: a message the broker sent again (DUP) after releasing it with PUBREL,
    delivered twice (the broker broke exactly-once)."""
    unrouted: int = 0
    """Messages received that matched no subscription of the client (dropped)."""
    nacked: int = 0
    """QoS 1 publishes the broker rejected (AMQP ``Basic.Nack``)."""
    kernel_stamped_reads: int = 0
    """Reads stamped with the kernel's receive time (``StreamConnection.receive_ns``)."""
    user_stamped_reads: int = 0
    """Reads of the established session stamped with the clock after the wake-up (the
    stock clients and zenoh stamp in their callbacks and report neither)."""


@dataclass(frozen=True)
class ClientTls:
    """How a client speaks TLS: the CA it verifies the broker with, an optional client
    certificate, and the name the broker's certificate must carry."""

    ca_file: str | None = None
    """PEM CA certificate(s); None: the system's trust store."""
    cert_file: str | None = None
    """PEM client certificate (with ``key_file``); None: no client certificate."""
    key_file: str | None = None
    server_hostname: str | None = None
    """Name checked against the certificate; None: the endpoint's host."""


@dataclass(frozen=True)
class ClientSecurity:
    """The credentials and TLS settings every client of a cell uses (scenario ``security``)."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: ClientTls | None = None


@dataclass(frozen=True)
class ZenohSettings:
    """The zenoh client settings a scenario chooses (its ``zenoh`` section)."""

    shared_memory: bool = False
    """Payloads through zenoh's shared memory where both ends are on this host."""

    def params(self) -> dict[str, object]:
        """How a cell's manifest ``params`` record them (prefixed with the protocol)."""
        return {"zenoh_shared_memory": self.shared_memory}


ProtocolSettings: TypeAlias = ZenohSettings
"""The settings of one protocol's clients that a scenario chooses: one frozen type per
protocol that has any (only zenoh today); a transport reads the type it knows."""


@dataclass(frozen=True)
class ClientOptions:
    """Per-client settings; a transport ignores what its protocol has no notion of.

    ``username``/``password`` are the credentials every protocol's login carries (MQTT
    CONNECT, NATS CONNECT user/pass, Redis ``AUTH``, AMQP PLAIN); ``tls`` makes the
    connection TLS. The password is never shown in a ``repr``.
    """

    client_id: str
    clean_session: bool = True
    keepalive_s: int = 60
    connect_timeout_s: float = 10.0
    on_event: EventHandler | None = None
    protocol: ProtocolSettings | None = None
    """The scenario's settings of this protocol's clients (what a run sets; None: none)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Tuning keys of one protocol's client, each named in its transport module's
    docstring, for code that drives a client directly (tests, benchmarks, calibration's
    peers); a run sets none of them: what a scenario chooses is ``protocol``."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: ClientTls | None = None
    max_pending_bytes: int | None = None
    """Bytes that may wait for the socket before sends are refused (None: the default)."""
    receive_stamp: ReceiveStamp = "user"
    """``kernel``: stamp reads with the kernel's receive time where the client can
    (``generator.receive_stamp``, transports.stream)."""


class Client(Protocol):
    """One connection to a broker."""

    @property
    def connected(self) -> bool:
        """True while the connection is up and usable."""
        ...

    async def connect(self) -> None:
        """Open the connection and complete the protocol handshake within the timeout.

        Raises ``mqbench.errors.TransportError`` with a clear message on failure; its
        ``kind`` is NOT_REUSABLE when this client object cannot connect (again), so the
        caller creates a new client.
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

    def stats(self) -> ClientStats:
        """The client's counters so far."""
        ...


class LendsSockets(Protocol):
    """A client whose established session the compiled core can drive
    (``TransportCapabilities.compiled`` names the framing)."""

    def lend_socket(self) -> int:
        """Stop reading, writing and keepalive on the connection and return a duplicate of
        its socket for the core to own (the client keeps its own and closes it as usual).

        Raises ``TransportError`` (UNSUPPORTED) when the session cannot be lent (TLS,
        bytes of a frame already read, not connected).
        """
        ...

    def publish_frame(self, topic: str, payload_bytes: int) -> tuple[bytes, bytes]:
        """The bytes before and after a QoS 0 payload of ``payload_bytes`` published to
        ``topic`` on this connection."""
        ...

    def lost_lent_session(self, reason: str) -> None:
        """The core lost the lent session (``reason``): close this side, so the client
        reports the disconnection (``Disconnected``) and can connect again."""
        ...


class Transport(Protocol):
    """A protocol implementation: creates clients for an endpoint."""

    name: str
    """The registry name of the client (``mqtt``, ``paho``, ...)."""
    protocol: str
    """The protocol it speaks (``mqtt``, ``nats``, ``redis``, ``amqp``, ``zenoh``)."""
    capabilities: TransportCapabilities
    """What its clients can do (the pre-flight refuses a scenario that asks for more)."""

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> Client:
        """Return a new, unconnected client."""
        ...
