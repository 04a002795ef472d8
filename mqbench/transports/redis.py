"""A lean asyncio client for Redis Pub/Sub over RESP2 (at-most-once).

``RedisClient`` is an ``asyncio.Protocol`` (works on uvloop and on the default loop). A
RESP2 connection that has subscribed may only send (un)subscribe commands and ``PING``, so a
client is either a *publisher* (it created a sender) or a *subscriber* (it subscribed); the
workload engine uses separate clients for the two roles, and mixing them on one client
raises ``TransportError``.

Hot paths:

* publish: ``sender(topic, 0)`` returns a closure that appends the cached
  ``*3 $7 PUBLISH $<n> <channel> $<size>`` prefix, the payload and CRLF to one output
  ``bytearray`` and schedules a single write for the end of the loop iteration (one syscall
  per burst). Redis answers every ``PUBLISH`` with the number of subscribers that received
  it; those replies are parsed in runs (``mqbench.wire.resp``) and counted, never awaited:
  ``publish_stats`` reports them, and the first ``PUBLISH`` that reached no subscriber is
  reported once as a ``publish_unreceived`` event.
* receive: ``data_received`` takes ``time.time_ns()`` once per read and hands the chunk to
  ``mqbench.wire.resp.RespParser``, whose fixed-frame fast path calls the subscription's handler
  per ``message`` push.

``connect`` pipelines ``[AUTH]``, ``CLIENT SETNAME`` and ``PING`` and waits for their replies;
``subscribe`` waits for the ``subscribe`` confirmation; ``flush`` sends ``PING`` and waits
for its reply, which Redis sends only after it processed everything before it. The client
sends a keepalive ``PING`` every ``ClientOptions.keepalive_s`` and drops a connection that
left two of them unanswered.

``ClientOptions.extra`` keys understood: ``password`` and ``username`` (``AUTH``; ACL user
when ``username`` is given), ``write_buffer_high`` (bytes before the transport reports
back-pressure; default 64 MiB, sends never block regardless), ``coalesce_writes`` (bool,
default True; False writes every publish immediately), ``client_name`` (default: the
client id; sent with ``CLIENT SETNAME``, spaces replaced by ``-``; empty string: skip).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, cast

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    MessageHandler,
    Sender,
    max_pending_bytes,
)
from mqbench.wire.resp import (
    CRLF,
    Reply,
    RespError,
    RespParser,
    RespProtocolError,
    encode_command,
    publish_prefix,
)
from mqbench.wire.topics import is_filter

_time_ns = time.time_ns

PING = encode_command("PING")

WRITE_BUFFER_HIGH = 64 << 20
"""Default high-water mark of the transport's write buffer (bytes)."""

COALESCE_LIMIT = 256 << 10
"""Coalesced publishes are written out at once when this many bytes are pending."""

CLOSE_GRACE_S = 2.0
"""How long ``close`` waits for queued bytes to leave before aborting the socket."""

MAX_PAYLOAD = 512 << 20
"""Redis's default ``proto-max-bulk-len``: larger bulk strings are refused by the server."""


@dataclass(frozen=True)
class PublishStats:
    """What the ``PUBLISH`` replies of one client said so far."""

    published: int
    """Publishes handed to the connection."""
    replies: int
    """Integer replies received (one per processed publish)."""
    receivers: int
    """Sum of the replies: deliveries Redis made to subscribers."""
    unreceived: int
    """Publishes that reached no subscriber (reply ``0``)."""
    errors: int
    """Publishes answered with an error."""


class _Pending:
    """A control command awaiting its reply; publishes sent before it are answered first."""

    __slots__ = ("future", "published_before")

    def __init__(self, future: asyncio.Future[Reply] | None, published_before: int) -> None:
        self.future = future
        self.published_before = published_before


class RedisClient(asyncio.Protocol):
    """One connection to a Redis server for Pub/Sub (implements ``base.Client``)."""

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
        self._parser = RespParser(on_reply=self._on_reply, on_integers=self._on_integers)
        self._lost_fut: asyncio.Future[None] | None = None
        self._control: deque[_Pending] = deque()
        self._keepalive: asyncio.TimerHandle | None = None
        self._keepalive_unanswered = 0
        self._loss_reason: str | None = None
        self._last_err: str | None = None
        self._role: str | None = None
        self._channels: dict[str, bytes] = {}
        self._out = bytearray()
        self._flush_scheduled = False
        self._coalesce = bool(options.extra.get("coalesce_writes", True))
        self._ack_handler: AckHandler | None = None
        self._write_paused = False
        self._max_pending = max_pending_bytes(options)
        self.sends_refused = 0
        """Sends refused because the output buffer was full (``Sender``)."""
        self._published = 0
        self._replies = 0
        self._receivers = 0
        self._unreceived = 0
        self._publish_errors = 0

    # ------------------------------------------------------------------ base.Client

    @property
    def connected(self) -> bool:
        """True while the connection is up and the handshake has completed."""
        return self._connected

    @property
    def publish_stats(self) -> PublishStats:
        """Counts of publishes and of what Redis replied to them (see ``PublishStats``)."""
        return PublishStats(
            self._published,
            self._replies,
            self._receivers,
            self._unreceived,
            self._publish_errors,
        )

    async def connect(self) -> None:
        """Open TCP, send ``[AUTH] CLIENT SETNAME PING`` and wait for the replies in time."""
        if self._transport is not None:
            raise TransportError(f"redis client for {self._where} was already connected once")
        timeout = self._options.connect_timeout_s
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._lost_fut = loop.create_future()
        extra = self._options.extra
        commands: list[bytes] = []
        password = extra.get("password")
        if password is not None:
            username = extra.get("username")
            if username is not None:
                commands.append(encode_command("AUTH", str(username), str(password)))
            else:
                commands.append(encode_command("AUTH", str(password)))
        name = str(extra.get("client_name", self._options.client_id))
        name = "-".join(name.split())
        if name:
            commands.append(encode_command("CLIENT", "SETNAME", name))
        commands.append(PING)
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(lambda: self, self._endpoint.host, self._endpoint.port)
                futures = [self._command(c) for c in commands]
                for fut in futures:
                    reply = await fut
                    if isinstance(reply, RespError):
                        raise TransportError(_describe_error(reply))
        except TimeoutError:
            self._abort()
            raise TransportError(
                f"cannot connect to redis at {self._where}: no handshake within {timeout:g} s"
            ) from None
        except TransportError as exc:
            self._abort()
            raise TransportError(f"cannot connect to redis at {self._where}: {exc}") from None
        except OSError as exc:
            self._abort()
            raise TransportError(
                f"cannot connect to redis at {self._where}: {_describe_oserror(exc)}"
            ) from None
        except asyncio.CancelledError:
            self._abort()
            raise
        self._handshake_done = True
        self._connected = True
        self._arm_keepalive()
        self._emit("connected", {"endpoint": self._where})

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Send ``SUBSCRIBE`` and return once Redis confirmed it."""
        if qos > 0:
            raise TransportError(f"Redis Pub/Sub is at-most-once; QoS {qos} not supported")
        if not self._connected:
            raise TransportError(f"cannot subscribe to {topic!r}: redis client is not connected")
        if self._role == "publisher":
            raise TransportError(
                "a redis connection that publishes cannot also subscribe (RESP2 subscribed "
                "mode); use a separate client"
            )
        if is_filter(topic):
            raise TransportError(
                f"cannot subscribe to {topic!r}: the redis client subscribes to exact channels "
                "only (no PSUBSCRIBE patterns)"
            )
        channel = _channel(topic)
        self._parser.set_handler(channel, on_message)
        self._role = "subscriber"
        try:
            async with asyncio.timeout(self._options.connect_timeout_s):
                reply = await self._command(encode_command(b"SUBSCRIBE", channel))
        except TimeoutError:
            self._parser.remove_handler(channel)
            raise TransportError(
                f"redis at {self._where} did not confirm the subscription to {topic!r} "
                f"within {self._options.connect_timeout_s:g} s"
            ) from None
        except TransportError as exc:
            self._parser.remove_handler(channel)
            raise TransportError(f"cannot subscribe to {topic!r}: {exc}") from None
        if not (isinstance(reply, list) and reply[:2] == [b"subscribe", channel]):
            self._parser.remove_handler(channel)
            shown = _describe_error(reply) if isinstance(reply, RespError) else repr(reply)
            raise TransportError(
                f"redis at {self._where} rejected the subscription to {topic!r}: {shown}"
            )
        self._channels[topic] = channel

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` publishing to ``topic`` without awaiting.

        The sender returns False when the client is not connected and raises
        ``TransportError`` for a payload above Redis's 512 MiB bulk limit.
        """
        if qos > 0:
            raise TransportError(f"Redis Pub/Sub is at-most-once; QoS {qos} not supported")
        if self._role == "subscriber":
            raise TransportError(
                "a subscribed redis connection cannot publish (RESP2 subscribed mode); "
                "use a separate client"
            )
        self._role = "publisher"
        channel = _channel(topic)
        prefixes: dict[int, bytes] = {}
        client = self

        def prefix_for(size: int) -> bytes:
            if size > MAX_PAYLOAD:
                raise TransportError(
                    f"payload of {size} bytes exceeds Redis's bulk string limit of "
                    f"{MAX_PAYLOAD} bytes (publish to {topic!r})"
                )
            prefix = publish_prefix(channel, size)
            if len(prefixes) < 1024:
                prefixes[size] = prefix
            return prefix

        if not self._coalesce:

            def send_direct(payload: bytes, tag: int) -> bool:
                if not client._connected:
                    return False
                if client._write_paused and client.pending_write_bytes() >= client._max_pending:
                    client.sends_refused += 1
                    return False
                prefix = prefixes.get(len(payload)) or prefix_for(len(payload))
                client._published += 1
                client._write_now(prefix + payload + CRLF)
                return True

            return send_direct

        out = self._out
        last_size = -1
        last_prefix = b""

        def send(payload: bytes, tag: int) -> bool:
            nonlocal last_size, last_prefix
            if not client._connected:
                return False
            if client._write_paused and client.pending_write_bytes() >= client._max_pending:
                client.sends_refused += 1
                return False
            if len(payload) != last_size:
                last_prefix = prefixes.get(len(payload)) or prefix_for(len(payload))
                last_size = len(payload)
            out.extend(last_prefix)
            out.extend(payload)
            out.extend(CRLF)
            client._published += 1
            if not client._flush_scheduled:
                client._schedule_flush()
            elif len(out) > COALESCE_LIMIT:
                client._flush_out()
            return True

        return send

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Accepted for the contract; Redis Pub/Sub has no acknowledgements, so never called."""
        self._ack_handler = handler

    def pending_write_bytes(self) -> int:
        """Bytes coalesced but not yet handed to the socket plus the transport's buffer."""
        transport = self._transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        return len(self._out) + buffered

    async def flush(self, timeout_s: float) -> None:
        """Wait until Redis has processed everything sent so far, or ``timeout_s`` passes.

        Returns silently on timeout or when the connection is (or gets) lost.
        """
        if not self._connected:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self._command(PING)
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
                transport.write(encode_command("QUIT"))
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
        channel = self._channels.pop(topic, None)
        if channel is None:
            return
        self._parser.remove_handler(channel)
        if self._connected:
            self._write_now(encode_command(b"UNSUBSCRIBE", channel))
            self._control.append(_Pending(None, self._published))

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
        except RespProtocolError as exc:
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
        """Fail pending commands and report the disconnection."""
        self._connected = False
        reason = self._loss_reason
        if reason is None:
            if exc is not None:
                reason = _describe_oserror(exc)
            elif self._role == "subscriber":
                reason = (
                    "connection closed by server (for a subscriber: typically "
                    "client-output-buffer-limit pubsub)"
                )
            else:
                reason = "connection closed by server"
            if self._last_err is not None:
                reason += f" (last error: {self._last_err})"
            self._loss_reason = reason
        failure = TransportError(reason)
        while self._control:
            fut = self._control.popleft().future
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

    def _on_integers(self, value: int, count: int) -> None:
        """Integer replies; only ``PUBLISH`` answers with integers among our commands."""
        self._replies += count
        self._receivers += value * count
        if value == 0:
            if self._unreceived == 0:
                self._emit(
                    "publish_unreceived",
                    {"endpoint": self._where, "message": "a PUBLISH reached no subscriber"},
                )
            self._unreceived += count
        if self._replies > self._published:
            self._fail("protocol error: more integer replies from redis than publishes sent")

    def _on_reply(self, reply: Reply) -> None:
        """A reply that is not a publish count: resolve the oldest control command."""
        control = self._control
        if control and control[0].published_before <= self._replies:
            pending = control.popleft()
            fut = pending.future
            if fut is None:
                self._keepalive_unanswered = 0
                if isinstance(reply, RespError):
                    self._note_error(reply)
            elif not fut.done():
                fut.set_result(reply)
            return
        if isinstance(reply, RespError) and self._replies < self._published:
            self._replies += 1
            self._publish_errors += 1
            self._note_error(reply)
            return
        if isinstance(reply, list) and reply and reply[0] in (b"message", b"pmessage"):
            return  # a push for a channel we no longer listen to
        self._fail(f"protocol error: unexpected reply from redis: {reply!r:.80}")

    def _note_error(self, reply: RespError) -> None:
        self._last_err = reply.text
        if self._handshake_done:
            self._emit("error", {"endpoint": self._where, "message": reply.text})

    # ------------------------------------------------------------------ helpers

    def _command(self, frame: bytes) -> asyncio.Future[Reply]:
        """Send a control command (after everything queued) and return its reply future."""
        assert self._loop is not None
        fut: asyncio.Future[Reply] = self._loop.create_future()
        transport = self._transport
        if transport is None or transport.is_closing():
            fut.set_exception(TransportError(self._loss_reason or "connection is closed"))
            return fut
        self._write_now(frame)
        self._control.append(_Pending(fut, self._published))
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
                f"stale connection: no reply to 2 keepalive PINGs "
                f"({self._options.keepalive_s} s apart)"
            )
            return
        self._keepalive_unanswered += 1
        self._write_now(PING)
        self._control.append(_Pending(None, self._published))
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


def _channel(topic: str) -> bytes:
    """The channel name for ``topic`` (any non-empty string is a valid Redis channel)."""
    if not topic:
        raise TransportError("redis channel name is empty")
    return topic.encode("utf-8")


def _describe_error(reply: RespError) -> str:
    """One phrase for an error reply, naming authentication failures plainly."""
    code = reply.code
    if code == "NOAUTH":
        return f"authentication required (-{reply.text}); set the password option"
    if code == "WRONGPASS":
        return f"wrong username or password (-{reply.text})"
    if code == "ERR" and "AUTH" in reply.text and "password" in reply.text:
        return f"authentication failed (-{reply.text})"
    return f"-{reply.text}"


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


class RedisTransport:
    """Redis Pub/Sub over a lean asyncio RESP2 client (at-most-once)."""

    name = "redis"
    protocol = "redis"
    max_qos = 0

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> RedisClient:
        """Return a new, unconnected ``RedisClient``."""
        return RedisClient(endpoint, options)
