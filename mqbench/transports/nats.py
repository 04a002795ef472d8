"""A lean asyncio client for core NATS (at-most-once; no JetStream).

``NatsClient`` keeps the protocol state; its socket is a ``StreamConnection`` (works on
uvloop and on the default loop). The hot paths are:

* publish: ``sender(topic, 0)`` returns a closure that hands ``PUB <subject> <n>\\r\\n``
  (cached per payload length), the payload and CRLF to the ``StreamConnection``, which
  writes a burst of sends with one syscall at the end of the loop iteration. Nothing
  awaits.
* receive: each read is stamped once (``StreamConnection.receive_ns``) and handed to
  ``mqbench.wire.nats.NatsParser``, which calls the subscription's handler per ``MSG``.

Subscriptions and ``flush`` are confirmed with a ``PING``/``PONG`` round trip: the server
answers a ``PING`` only after it processed everything sent before it. Server PINGs are
answered; the client also sends a keepalive PING every ``ClientOptions.keepalive_s`` and
drops a connection that left two of them unanswered (reported as ``disconnected``).

``ClientOptions.username``/``password`` go into ``CONNECT`` (``user``/``pass``). With
``ClientOptions.tls`` the client reads the server's plain ``INFO``, then upgrades the
connection to TLS before ``CONNECT`` (the NATS default; a server configured for
``handshake_first`` is not supported). ``ClientOptions.extra`` keys understood: ``token``,
``echo`` (bool, default True: receive own publishes), and the socket options of
``mqbench.transports.stream`` (``coalesce_writes``, ``write_buffer_high_bytes``,
``close_timeout_s``).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable
from typing import Any

from mqbench import __version__
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    ClientStats,
    MessageHandler,
    Sender,
    TransportCapabilities,
    require_qos,
)
from mqbench.transports.events import Connected, ServerError
from mqbench.transports.stream import StreamConnection
from mqbench.wire.nats import (
    CRLF,
    PING,
    PONG,
    NatsParser,
    NatsProtocolError,
    build_connect,
    build_sub,
    build_unsub,
    encode_subject,
    pub_header,
)
from mqbench.wire.topics import to_nats_subject

DEFAULT_MAX_PAYLOAD = 1 << 20
"""Assumed ``max_payload`` when the server's INFO does not state one."""

_UNSUPPORTED = TransportErrorKind.UNSUPPORTED

CAPABILITIES = TransportCapabilities(
    max_qos=0,
    persistent_sessions=False,
    wildcard_filters=True,
    tls=None,
    auth=None,
    compiled="nats",
)
"""What the nats client can do."""


def nats_subject(topic: str) -> str:
    """Scenario topics are MQTT syntax ("/" levels, "+", "#"): translate those to NATS
    subjects ("." tokens, "*", ">"); a topic without "/" is taken as a NATS subject as is."""
    return to_nats_subject(topic) if "/" in topic else topic


class NatsClient:
    """One connection to a NATS server speaking the core protocol (implements ``base.Client``)."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._stream = StreamConnection(
            f"nats at {endpoint.host}:{endpoint.port}",
            options,
            self._on_data,
            self._on_lost,
            reusable=False,
        )
        self._handshake_done = False
        self._parser = NatsParser(
            on_info=self._on_info,
            on_ping=self._on_ping,
            on_pong=self._on_pong,
            on_err=self._on_err,
            on_unhandled=self._on_unhandled,
        )
        self._info: dict[str, Any] = {}
        self._info_fut: asyncio.Future[dict[str, Any]] | None = None
        # one entry per PING in flight, in order; None marks a keepalive PING
        self._pongs: deque[asyncio.Future[None] | None] = deque()
        self._keepalive_unanswered = 0
        self._err_count = 0
        self._next_sid = 1
        self._subs: dict[str, int] = {}
        self._max_payload = DEFAULT_MAX_PAYLOAD
        self._ack_handler: AckHandler | None = None
        self.unrouted = 0
        """``MSG`` frames for a subscription id without a handler (e.g. in flight when it was
        unsubscribed): dropped."""

    # ------------------------------------------------------------------ base.Client

    @property
    def connected(self) -> bool:
        """True while the connection is up and the handshake has completed."""
        return self._stream.connected

    def stats(self) -> ClientStats:
        """Sends refused because the output buffer was full (``Sender``); messages for a
        subscription id without a handler."""
        return ClientStats(
            sends_refused=self._stream.sends_refused,
            unrouted=self.unrouted,
            kernel_stamped_reads=self._stream.kernel_stamped_reads,
            user_stamped_reads=self._stream.user_stamped_reads,
        )

    @property
    def server_info(self) -> dict[str, Any]:
        """The server's latest ``INFO`` (empty before ``connect``)."""
        return dict(self._info)

    @property
    def max_payload(self) -> int:
        """Largest payload the server accepts, from its ``INFO``."""
        return self._max_payload

    async def connect(self) -> None:
        """Open TCP, read INFO, send CONNECT + PING and wait for PONG within the timeout."""
        stream = self._stream
        self._info_fut = asyncio.get_running_loop().create_future()
        info = await stream.connect(self._endpoint, self._handshake)
        self._handshake_done = True
        stream.established(self._options.keepalive_s, self._keepalive_tick)
        server_id = info.get("server_id")
        stream.emit(
            Connected(
                self._options.client_id,
                stream.where,
                server=None if server_id is None else str(server_id),
            )
        )

    async def _handshake(self) -> dict[str, Any]:
        assert self._info_fut is not None
        info = await self._info_fut
        options = self._options
        tls = options.tls
        if tls is None and info.get("tls_required"):
            raise TransportError(
                "the server requires TLS (set security.tls: true)",
                TransportErrorKind.CONNECT_FAILED,
            )
        if tls is not None:
            if not (info.get("tls_required") or info.get("tls_available")):
                raise TransportError(
                    "the server does not offer TLS (its INFO has no tls_required)",
                    TransportErrorKind.CONNECT_FAILED,
                )
            self._stream.stage = "no TLS handshake"
            await self._stream.start_tls(tls, self._endpoint.host)
        extra = options.extra
        self._stream.write(
            build_connect(
                options.client_id,
                version=__version__,
                echo=bool(extra.get("echo", True)),
                user=options.username,
                password=options.password,
                auth_token=extra.get("token"),
            )
        )
        try:
            await self._ping()
        except TransportError as exc:
            if options.username is None or exc.kind is not TransportErrorKind.REJECTED:
                raise
            raise TransportError(f"{exc} (user {options.username!r})", exc.kind) from None
        return info

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Send SUB and return once a PING/PONG round trip confirmed it."""
        require_qos(qos, "nats", CAPABILITIES)
        stream = self._stream
        stream.require_connected(f"subscribe to {topic!r}")
        try:
            subject = encode_subject(nats_subject(topic), wildcards=True)
        except ValueError as exc:
            raise TransportError(
                f"cannot subscribe: invalid NATS subject: {exc}", _UNSUPPORTED
            ) from None
        sid = self._next_sid
        self._next_sid += 1
        self._parser.set_handler(sid, on_message)
        errors_before = self._err_count
        stream.write(build_sub(subject, sid))
        try:
            async with asyncio.timeout(self._options.connect_timeout_s):
                await self._ping()
        except TimeoutError:
            self._parser.remove_handler(sid)
            raise TransportError(
                f"{stream.where} did not confirm the subscription to {topic!r} "
                f"within {self._options.connect_timeout_s:g} s"
            ) from None
        except TransportError as exc:
            self._parser.remove_handler(sid)
            raise TransportError(f"cannot subscribe to {topic!r}: {exc}", exc.kind) from None
        if self._err_count != errors_before:
            self._parser.remove_handler(sid)
            if stream.connected:
                stream.write(build_unsub(sid))
            raise TransportError(
                f"{stream.where} rejected the subscription to {topic!r}: {stream.last_error}",
                TransportErrorKind.REJECTED,
            )
        self._subs[topic] = sid

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` publishing to ``topic`` without awaiting.

        The sender returns False when the client is not connected or its output is full,
        and raises ``TransportError`` for a payload larger than the server's ``max_payload``.
        """
        require_qos(qos, "nats", CAPABILITIES)
        return self._stream.frame_sender(self._header_for(topic), CRLF)

    def publish_frame(self, topic: str, payload_bytes: int) -> tuple[bytes, bytes]:
        """``PUB <subject> <n>\\r\\n`` and the CRLF around a payload (``LendsSockets``)."""
        return self._header_for(topic)(payload_bytes), CRLF

    def lend_socket(self) -> int:
        """The established session's socket, for the compiled core (``LendsSockets``)."""
        if self._parser.buffered:
            raise TransportError(
                f"cannot lend the session of {self._stream.where}: part of a frame is read",
                _UNSUPPORTED,
            )
        return self._stream.lend()

    def lost_lent_session(self, reason: str) -> None:
        """The core lost the lent session: report it and allow a reconnect (``LendsSockets``)."""
        self._stream.lost_while_lent(reason)

    def _header_for(self, topic: str) -> Callable[[int], bytes]:
        """The ``PUB`` control line for a payload size (cached; ``TransportError`` above
        ``max_payload`` or for an invalid subject)."""
        try:
            subject = encode_subject(nats_subject(topic), wildcards=False)
        except ValueError as exc:
            raise TransportError(
                f"cannot publish: invalid NATS subject: {exc}", _UNSUPPORTED
            ) from None
        client = self

        @functools.lru_cache(maxsize=1024)
        def header_for(size: int) -> bytes:
            if size > client._max_payload:
                raise TransportError(
                    f"payload of {size} bytes exceeds the nats server's max_payload of "
                    f"{client._max_payload} bytes (publish to {topic!r})",
                    _UNSUPPORTED,
                )
            return pub_header(subject, size)

        return header_for

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Accepted for the contract; core NATS has no acknowledgements, so it is never called."""
        self._ack_handler = handler

    def pending_write_bytes(self) -> int:
        """Bytes coalesced but not yet handed to the socket plus the transport's buffer."""
        return self._stream.pending_bytes()

    async def flush(self, timeout_s: float) -> None:
        """Wait until the server has processed everything sent so far, or ``timeout_s`` passes.

        Returns silently on timeout or when the connection is (or gets) lost; connection
        loss is reported through ``on_event``.
        """
        await self._stream.flush(timeout_s, confirm=self._ping)

    async def close(self) -> None:
        """Write what is queued, close the socket and wait briefly for it to go; never raises."""
        await self._stream.close()

    async def unsubscribe(self, topic: str) -> None:
        """Stop a subscription made with ``subscribe`` (no-op if unknown or disconnected)."""
        sid = self._subs.pop(topic, None)
        if sid is None:
            return
        self._parser.remove_handler(sid)
        if self._stream.connected:
            self._stream.write(build_unsub(sid))

    # ------------------------------------------------------------------ stream callbacks

    def _on_unhandled(self, subject: str, sid: int, reply_to: str | None, payload: bytes) -> None:
        self.unrouted += 1

    def _on_data(self, data: bytes) -> None:
        """Parse a chunk; every message in it is stamped with one receive time."""
        try:
            self._parser.feed(data, self._stream.receive_ns())
        except NatsProtocolError as exc:
            self._stream.fail(f"protocol error: {exc}")
        except Exception as exc:
            self._stream.fail(f"message handler raised {type(exc).__name__}: {exc}")

    def _on_lost(self, failure: TransportError) -> int | None:
        """Fail the pending round trips; the disconnect event names the last -ERR."""
        while self._pongs:
            fut = self._pongs.popleft()
            if fut is not None and not fut.done():
                fut.set_exception(failure)
        return None

    # ------------------------------------------------------------------ parser callbacks

    def _on_info(self, info: dict[str, Any]) -> None:
        self._info = info
        max_payload = info.get("max_payload")
        if isinstance(max_payload, int) and max_payload > 0:
            self._max_payload = max_payload
        fut = self._info_fut
        if fut is not None and not fut.done():
            fut.set_result(info)

    def _on_ping(self) -> None:
        self._stream.write(PONG)

    def _on_pong(self) -> None:
        self._keepalive_unanswered = 0
        if self._pongs:
            fut = self._pongs.popleft()
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _on_err(self, message: str) -> None:
        self._err_count += 1
        self._stream.last_error = f"-ERR '{message}'"
        if not self._handshake_done:
            failure = TransportError(f"-ERR '{message}'", TransportErrorKind.REJECTED)
            while self._pongs:
                fut = self._pongs.popleft()
                if fut is not None and not fut.done():
                    fut.set_exception(failure)
            return
        self._stream.emit(ServerError(self._stream.where, message))

    # ------------------------------------------------------------------ helpers

    def _ping(self) -> asyncio.Future[None]:
        """Send PING (after everything queued) and return the future its PONG resolves."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(fut)
        self._stream.write(PING)
        return fut

    def _keepalive_tick(self) -> None:
        """Send a keepalive PING; drop the connection after two unanswered ones."""
        if self._keepalive_unanswered >= 2:
            self._stream.fail(
                f"stale connection: no PONG to 2 keepalive PINGs "
                f"({self._options.keepalive_s} s apart)"
            )
            return
        self._keepalive_unanswered += 1
        self._pongs.append(None)
        self._stream.write(PING)


class NatsTransport:
    """Core NATS over a lean asyncio protocol client (at-most-once)."""

    name = "nats"
    protocol = "nats"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> NatsClient:
        """Return a new, unconnected ``NatsClient``."""
        return NatsClient(endpoint, options)
