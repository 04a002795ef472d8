"""A lean asyncio client for core NATS (at-most-once; no JetStream).

``NatsClient`` is an ``asyncio.Protocol`` (works on uvloop and on the default loop). The
hot paths are:

* publish: ``sender(topic, 0)`` returns a closure that appends ``PUB <subject> <n>\\r\\n``
  (cached per payload length), the payload and CRLF to one output ``bytearray`` and
  schedules a single write for the end of the current loop iteration, so a burst of sends
  costs one syscall instead of one per message. Nothing awaits.
* receive: ``data_received`` takes ``time.time_ns()`` once per read and hands the chunk to
  ``mqbench.wire.nats.NatsParser``, which calls the subscription's handler per ``MSG``.

Subscriptions and ``flush`` are confirmed with a ``PING``/``PONG`` round trip: the server
answers a ``PING`` only after it processed everything sent before it. Server PINGs are
answered; the client also sends a keepalive PING every ``ClientOptions.keepalive_s`` and
drops a connection that left two of them unanswered (reported as ``disconnected``).

``ClientOptions.extra`` keys understood: ``user``, ``password``, ``token`` (credentials),
``echo`` (bool, default True: receive own publishes), ``write_buffer_high`` (bytes before
the transport reports back-pressure; default 64 MiB, sends never block regardless),
``coalesce_writes`` (bool, default True; False writes every publish immediately).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from typing import Any, cast

from mqbench import __version__
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    MessageHandler,
    Sender,
    max_pending_bytes,
)
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

_time_ns = time.time_ns

DEFAULT_MAX_PAYLOAD = 1 << 20
"""Assumed ``max_payload`` when the server's INFO does not state one."""

WRITE_BUFFER_HIGH = 64 << 20
"""Default high-water mark of the transport's write buffer (bytes)."""

COALESCE_LIMIT = 256 << 10
"""Coalesced publishes are written out at once when this many bytes are pending."""

CLOSE_GRACE_S = 2.0
"""How long ``close`` waits for queued bytes to leave before aborting the socket."""


def nats_subject(topic: str) -> str:
    """Scenario topics are MQTT syntax ("/" levels, "+", "#"): translate those to NATS
    subjects ("." tokens, "*", ">"); a topic without "/" is taken as a NATS subject as is."""
    return to_nats_subject(topic) if "/" in topic else topic


class NatsClient(asyncio.Protocol):
    """One connection to a NATS server speaking the core protocol (implements ``base.Client``)."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._where = f"{endpoint.host}:{endpoint.port}"
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected = False
        self._closing = False
        self._close_requested = False
        self._handshake_done = False
        self._parser = NatsParser(
            on_info=self._on_info,
            on_ping=self._on_ping,
            on_pong=self._on_pong,
            on_err=self._on_err,
        )
        self._info: dict[str, Any] = {}
        self._info_fut: asyncio.Future[dict[str, Any]] | None = None
        self._lost_fut: asyncio.Future[None] | None = None
        # one entry per PING in flight, in order; None marks a keepalive PING
        self._pongs: deque[asyncio.Future[None] | None] = deque()
        self._keepalive: asyncio.TimerHandle | None = None
        self._keepalive_unanswered = 0
        self._err_count = 0
        self._last_err: str | None = None
        self._loss_reason: str | None = None
        self._next_sid = 1
        self._subs: dict[str, int] = {}
        self._out = bytearray()
        self._flush_scheduled = False
        self._coalesce = bool(options.extra.get("coalesce_writes", True))
        self._max_payload = DEFAULT_MAX_PAYLOAD
        self._ack_handler: AckHandler | None = None
        self._write_paused = False
        self._max_pending = max_pending_bytes(options)
        self.sends_refused = 0
        """Sends refused because the output buffer was full (``Sender``)."""

    # ------------------------------------------------------------------ base.Client

    @property
    def connected(self) -> bool:
        """True while the connection is up and the handshake has completed."""
        return self._connected

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
        if self._transport is not None:
            raise TransportError(f"nats client for {self._where} was already connected once")
        timeout = self._options.connect_timeout_s
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._info_fut = loop.create_future()
        self._lost_fut = loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(lambda: self, self._endpoint.host, self._endpoint.port)
                info = await self._info_fut
                if info.get("tls_required"):
                    raise TransportError(
                        "the server requires TLS, which mqbench's nats client does not speak"
                    )
                extra = self._options.extra
                self._write_now(
                    build_connect(
                        self._options.client_id,
                        version=__version__,
                        echo=bool(extra.get("echo", True)),
                        user=extra.get("user"),
                        password=extra.get("password"),
                        auth_token=extra.get("token"),
                    )
                )
                await self._ping()
        except TimeoutError:
            self._abort()
            raise TransportError(
                f"cannot connect to nats at {self._where}: no handshake within {timeout:g} s"
            ) from None
        except TransportError as exc:
            self._abort()
            raise TransportError(f"cannot connect to nats at {self._where}: {exc}") from None
        except OSError as exc:
            self._abort()
            raise TransportError(
                f"cannot connect to nats at {self._where}: {_describe_oserror(exc)}"
            ) from None
        except asyncio.CancelledError:
            self._abort()
            raise
        self._handshake_done = True
        self._connected = True
        self._arm_keepalive()
        self._emit("connected", {"endpoint": self._where, "server_id": info.get("server_id")})

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Send SUB and return once a PING/PONG round trip confirmed it."""
        if qos > 0:
            raise TransportError(f"NATS core is at-most-once; QoS {qos} not supported")
        if not self._connected:
            raise TransportError(f"cannot subscribe to {topic!r}: nats client is not connected")
        try:
            subject = encode_subject(nats_subject(topic), wildcards=True)
        except ValueError as exc:
            raise TransportError(f"cannot subscribe: invalid NATS subject: {exc}") from None
        sid = self._next_sid
        self._next_sid += 1
        self._parser.set_handler(sid, on_message)
        errors_before = self._err_count
        self._write_now(build_sub(subject, sid))
        try:
            async with asyncio.timeout(self._options.connect_timeout_s):
                await self._ping()
        except TimeoutError:
            self._parser.remove_handler(sid)
            raise TransportError(
                f"nats at {self._where} did not confirm the subscription to {topic!r} "
                f"within {self._options.connect_timeout_s:g} s"
            ) from None
        except TransportError as exc:
            self._parser.remove_handler(sid)
            raise TransportError(f"cannot subscribe to {topic!r}: {exc}") from None
        if self._err_count != errors_before:
            self._parser.remove_handler(sid)
            if self._connected:
                self._write_now(build_unsub(sid))
            raise TransportError(
                f"nats at {self._where} rejected the subscription to {topic!r}: "
                f"-ERR '{self._last_err}'"
            )
        self._subs[topic] = sid

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` publishing to ``topic`` without awaiting.

        The sender returns False when the client is not connected and raises
        ``TransportError`` for a payload larger than the server's ``max_payload``.
        """
        if qos > 0:
            raise TransportError(f"NATS core is at-most-once; QoS {qos} not supported")
        try:
            subject = encode_subject(nats_subject(topic), wildcards=False)
        except ValueError as exc:
            raise TransportError(f"cannot publish: invalid NATS subject: {exc}") from None
        headers: dict[int, bytes] = {}
        client = self

        def header_for(size: int) -> bytes:
            if size > client._max_payload:
                raise TransportError(
                    f"payload of {size} bytes exceeds the nats server's max_payload of "
                    f"{client._max_payload} bytes (publish to {topic!r})"
                )
            header = pub_header(subject, size)
            if len(headers) < 1024:
                headers[size] = header
            return header

        if not self._coalesce:

            def send_direct(payload: bytes, tag: int) -> bool:
                if not client._connected:
                    return False
                if client._write_paused and client.pending_write_bytes() >= client._max_pending:
                    client.sends_refused += 1
                    return False
                header = headers.get(len(payload)) or header_for(len(payload))
                client._write_now(header + payload + CRLF)
                return True

            return send_direct

        out = self._out
        last_size = -1
        last_header = b""

        def send(payload: bytes, tag: int) -> bool:
            nonlocal out, last_size, last_header
            if not client._connected:
                return False
            if client._write_paused and client.pending_write_bytes() >= client._max_pending:
                client.sends_refused += 1
                return False
            if len(payload) == last_size:
                out += last_header
            else:
                last_header = headers.get(len(payload)) or header_for(len(payload))
                last_size = len(payload)
                out += last_header
            out += payload
            out += CRLF
            if not client._flush_scheduled:
                client._schedule_flush()
            elif len(out) > COALESCE_LIMIT:
                client._flush_out()
            return True

        return send

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Accepted for the contract; core NATS has no acknowledgements, so it is never called."""
        self._ack_handler = handler

    def pending_write_bytes(self) -> int:
        """Bytes coalesced but not yet handed to the socket plus the transport's buffer."""
        transport = self._transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        return len(self._out) + buffered

    async def flush(self, timeout_s: float) -> None:
        """Wait until the server has processed everything sent so far, or ``timeout_s`` passes.

        Returns silently on timeout or when the connection is (or gets) lost; connection
        loss is reported through ``on_event``.
        """
        if not self._connected:
            return
        self._flush_out()
        try:
            async with asyncio.timeout(timeout_s):
                await self._ping()
                while self._transport is not None and self._transport.get_write_buffer_size() > 0:
                    await asyncio.sleep(0.001)
        except (TimeoutError, TransportError):
            return

    async def close(self) -> None:
        """Write what is queued, close the socket and wait briefly for it to go; never raises."""
        try:
            transport = self._transport
            if transport is None or self._closing:
                return
            self._closing = True
            if self._keepalive is not None:
                self._keepalive.cancel()
                self._keepalive = None
            if self._connected:
                self._flush_out()
            self._connected = False
            if self._loss_reason is None:
                self._loss_reason = "closed by client"
                self._close_requested = True
            transport.close()
            lost = self._lost_fut
            if lost is not None and not lost.done():
                try:
                    async with asyncio.timeout(CLOSE_GRACE_S):
                        await asyncio.shield(lost)
                except TimeoutError:
                    transport.abort()
        except Exception:
            self._abort()

    async def unsubscribe(self, topic: str) -> None:
        """Stop a subscription made with ``subscribe`` (no-op if unknown or disconnected)."""
        sid = self._subs.pop(topic, None)
        if sid is None:
            return
        self._parser.remove_handler(sid)
        if self._connected:
            self._write_now(build_unsub(sid))

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Configure the socket: TCP_NODELAY and generous write buffer limits."""
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        high = int(self._options.extra.get("write_buffer_high", WRITE_BUFFER_HIGH))
        # Pausing at the output bound is what lets a full buffer refuse sends (``sender``).
        transport.set_write_buffer_limits(high=min(high, self._max_pending))

    def data_received(self, data: bytes) -> None:
        """Parse a chunk; every message in it is stamped with one receive time."""
        try:
            self._parser.feed(data, _time_ns())
        except NatsProtocolError as exc:
            self._fail(f"protocol error: {exc}")
        except Exception as exc:
            self._fail(f"message handler raised {type(exc).__name__}: {exc}")

    def eof_received(self) -> bool | None:
        """The server closed its side: let the transport close."""
        return None

    def pause_writing(self) -> None:
        """Record back-pressure; sends keep queueing (they never block)."""
        self._write_paused = True

    def resume_writing(self) -> None:
        """Back-pressure is over."""
        self._write_paused = False

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail pending round trips and report the disconnection."""
        self._connected = False
        reason = self._loss_reason
        if reason is None:
            reason = _describe_oserror(exc) if exc is not None else "connection closed by server"
            if self._last_err is not None:
                reason += f" (last error: -ERR '{self._last_err}')"
            self._loss_reason = reason
        failure = TransportError(reason)
        if self._info_fut is not None and not self._info_fut.done():
            self._info_fut.set_exception(failure)
        while self._pongs:
            fut = self._pongs.popleft()
            if fut is not None and not fut.done():
                fut.set_exception(failure)
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        if self._lost_fut is not None and not self._lost_fut.done():
            self._lost_fut.set_result(None)
        self._out.clear()
        if self._handshake_done:
            self._emit(
                "disconnected",
                {
                    "endpoint": self._where,
                    "reason": reason,
                    "requested": self._close_requested,
                    "last_error": self._last_err,
                },
            )

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
        self._write_now(PONG)

    def _on_pong(self) -> None:
        self._keepalive_unanswered = 0
        if self._pongs:
            fut = self._pongs.popleft()
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _on_err(self, message: str) -> None:
        self._err_count += 1
        self._last_err = message
        if not self._handshake_done:
            failure = TransportError(f"-ERR '{message}'")
            while self._pongs:
                fut = self._pongs.popleft()
                if fut is not None and not fut.done():
                    fut.set_exception(failure)
            return
        self._emit("error", {"endpoint": self._where, "message": message})

    # ------------------------------------------------------------------ helpers

    def _ping(self) -> asyncio.Future[None]:
        """Send PING (after everything queued) and return the future its PONG resolves."""
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._pongs.append(fut)
        self._write_now(PING)
        return fut

    def _arm_keepalive(self) -> None:
        """Schedule the next keepalive PING (``ClientOptions.keepalive_s``; 0 disables)."""
        interval = self._options.keepalive_s
        if interval > 0 and self._loop is not None:
            self._keepalive = self._loop.call_later(interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        """Send a keepalive PING; drop the connection after two unanswered ones."""
        self._keepalive = None
        if not self._connected:
            return
        if self._keepalive_unanswered >= 2:
            self._fail(
                f"stale connection: no PONG to 2 keepalive PINGs "
                f"({self._options.keepalive_s} s apart)"
            )
            return
        self._keepalive_unanswered += 1
        self._pongs.append(None)
        self._write_now(PING)
        self._arm_keepalive()

    def _write_now(self, data: bytes) -> None:
        """Write ``data`` after any coalesced publishes, keeping protocol order."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._out:
            self._flush_out()
        transport.write(data)

    def _schedule_flush(self) -> None:
        """Write coalesced publishes at the end of this loop iteration."""
        assert self._loop is not None
        self._flush_scheduled = True
        self._loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        """Hand coalesced publishes to the transport (one write)."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(bytes(out))
        out.clear()

    def _fail(self, reason: str) -> None:
        """Drop the connection because of ``reason`` (reported as the disconnect reason)."""
        if self._loss_reason is None:
            self._loss_reason = reason
        self._abort()

    def _abort(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.abort()
        self._connected = False

    def _emit(self, kind: str, details: dict[str, Any]) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(kind, details)


def _describe_oserror(exc: BaseException) -> str:
    """One short phrase for a socket error ("connection refused", ...)."""
    if isinstance(exc, ConnectionRefusedError) or "[Errno 111]" in str(exc):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset by peer"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host ({exc.strerror})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    text = str(exc)
    if text:
        return text
    return type(exc).__name__


class NatsTransport:
    """Core NATS over a lean asyncio protocol client (at-most-once)."""

    name = "nats"
    protocol = "nats"
    max_qos = 0

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> NatsClient:
        """Return a new, unconnected ``NatsClient``."""
        return NatsClient(endpoint, options)
