"""A lean asyncio client for Redis Pub/Sub over RESP2 (at-most-once).

``RedisClient`` keeps the protocol state; its socket is a ``StreamConnection`` (works on
uvloop and on the default loop). A RESP2 connection that has subscribed may only send
(un)subscribe commands and ``PING``, so a client is either a *publisher* (it created a
sender) or a *subscriber* (it subscribed); the workload engine uses separate clients for
the two roles, and mixing them on one client raises ``TransportError``.

Hot paths:

* publish: ``sender(topic, 0)`` returns a closure that hands the cached
  ``*3 $7 PUBLISH $<n> <channel> $<size>`` prefix, the payload and CRLF to the
  ``StreamConnection`` (one syscall per burst, at the end of the loop iteration). Redis
  answers every ``PUBLISH`` with the number of subscribers that received it; those replies
  are parsed in runs (``mqbench.wire.resp``) and counted, never awaited: ``publish_stats``
  reports them, and the first ``PUBLISH`` that reached no subscriber is reported once as a
  ``publish_unreceived`` event.
* receive: each read is stamped once (``StreamConnection.receive_ns``) and handed to
  ``mqbench.wire.resp.RespParser``, whose fixed-frame fast path calls the subscription's
  handler per ``message`` push.

``connect`` pipelines ``[AUTH]``, ``CLIENT SETNAME`` and ``PING`` and waits for their replies;
``subscribe`` waits for the ``subscribe`` confirmation; ``flush`` sends ``PING`` and waits
for its reply, which Redis sends only after it processed everything before it. The client
sends a keepalive ``PING`` every ``ClientOptions.keepalive_s`` and drops a connection that
left two of them unanswered.

``ClientOptions.password`` (with ``username``: an ACL user) is sent with ``AUTH``;
``ClientOptions.tls`` makes it RESP over TLS. ``ClientOptions.extra`` keys understood:
``client_name`` (default: the client id; sent with ``CLIENT
SETNAME``, spaces replaced by ``-``; empty string: skip), and the socket options of
``mqbench.transports.stream`` (``coalesce_writes``, ``write_buffer_high_bytes``,
``close_timeout_s``).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

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
from mqbench.transports.events import Connected, PublishUnreceived, ServerError
from mqbench.transports.stream import StreamConnection
from mqbench.wire import limits
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

PING = encode_command("PING")
QUIT = encode_command("QUIT")

MAX_PAYLOAD = limits.REDIS_MAX_BULK_LEN
"""Redis's default ``proto-max-bulk-len``: larger bulk strings are refused by the server."""

SUBSCRIBER_CLOSED = (
    "connection closed by the server (for a subscriber: typically "
    "client-output-buffer-limit pubsub)"
)
"""Why a subscriber's connection went when Redis closed it without a word."""

_UNSUPPORTED = TransportErrorKind.UNSUPPORTED

CAPABILITIES = TransportCapabilities(
    max_qos=0,
    persistent_sessions=False,
    wildcard_filters=False,
    tls=None,
    auth=None,
    max_payload=limits.REDIS,
    compiled="redis",
)
"""What the redis client can do."""


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


class RedisClient:
    """One connection to a Redis server for Pub/Sub (implements ``base.Client``)."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._stream = StreamConnection(
            f"redis at {endpoint.host}:{endpoint.port}",
            options,
            self._on_data,
            self._on_lost,
            reusable=False,
        )
        self._handshake_done = False
        self._parser = RespParser(on_reply=self._on_reply, on_integers=self._on_integers)
        self._control: deque[_Pending] = deque()
        self._keepalive_unanswered = 0
        self._role: str | None = None
        self._channels: dict[str, bytes] = {}
        self._ack_handler: AckHandler | None = None
        self._replies = 0
        self._receivers = 0
        self._unreceived = 0
        self._publish_errors = 0
        self.unrouted = 0
        """``message`` pushes for a channel without a handler (e.g. in flight when it was
        unsubscribed): dropped."""

    # ------------------------------------------------------------------ base.Client

    @property
    def connected(self) -> bool:
        """True while the connection is up and the handshake has completed."""
        return self._stream.connected

    def stats(self) -> ClientStats:
        """Sends refused because the output buffer was full (``Sender``); pushes for a
        channel without a handler."""
        return ClientStats(
            sends_refused=self._stream.sends_refused,
            unrouted=self.unrouted,
            kernel_stamped_reads=self._stream.kernel_stamped_reads,
            user_stamped_reads=self._stream.user_stamped_reads,
        )

    @property
    def publish_stats(self) -> PublishStats:
        """Counts of publishes and of what Redis replied to them (see ``PublishStats``)."""
        return PublishStats(
            self._stream.sent,
            self._replies,
            self._receivers,
            self._unreceived,
            self._publish_errors,
        )

    async def connect(self) -> None:
        """Open TCP, send ``[AUTH] CLIENT SETNAME PING`` and wait for the replies in time."""
        stream = self._stream
        await stream.connect(self._endpoint, self._handshake, tls=self._options.tls)
        self._handshake_done = True
        stream.established(self._options.keepalive_s, self._keepalive_tick)
        stream.emit(Connected(self._options.client_id, stream.where))

    async def _handshake(self) -> None:
        extra = self._options.extra
        commands: list[bytes] = []
        password = self._options.password
        username = self._options.username
        if password is not None:
            if username is not None:
                commands.append(encode_command("AUTH", username, password))
            else:
                commands.append(encode_command("AUTH", password))
        name = str(extra.get("client_name", self._options.client_id))
        name = "-".join(name.split())
        if name:
            commands.append(encode_command("CLIENT", "SETNAME", name))
        commands.append(PING)
        futures = [self._command(c) for c in commands]
        for fut in futures:
            reply = await fut
            if isinstance(reply, RespError):
                who = f" (user {username!r})" if username is not None else ""
                raise TransportError(f"{_describe_error(reply)}{who}", TransportErrorKind.REJECTED)

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Send ``SUBSCRIBE`` and return once Redis confirmed it."""
        require_qos(qos, "redis", CAPABILITIES)
        stream = self._stream
        stream.require_connected(f"subscribe to {topic!r}")
        if self._role == "publisher":
            raise TransportError(
                "a redis connection that publishes cannot also subscribe (RESP2 subscribed "
                "mode); use a separate client",
                _UNSUPPORTED,
            )
        if is_filter(topic):
            raise TransportError(
                f"cannot subscribe to {topic!r}: the redis client subscribes to exact channels "
                "only (no PSUBSCRIBE patterns)",
                _UNSUPPORTED,
            )
        channel = _channel(topic)
        self._parser.set_handler(channel, on_message)
        self._role = "subscriber"
        stream.peer_closed_reason = SUBSCRIBER_CLOSED
        try:
            async with asyncio.timeout(self._options.connect_timeout_s):
                reply = await self._command(encode_command(b"SUBSCRIBE", channel))
        except TimeoutError:
            self._parser.remove_handler(channel)
            raise TransportError(
                f"{stream.where} did not confirm the subscription to {topic!r} "
                f"within {self._options.connect_timeout_s:g} s"
            ) from None
        except TransportError as exc:
            self._parser.remove_handler(channel)
            raise TransportError(f"cannot subscribe to {topic!r}: {exc}", exc.kind) from None
        if not (isinstance(reply, list) and reply[:2] == [b"subscribe", channel]):
            self._parser.remove_handler(channel)
            shown = _describe_error(reply) if isinstance(reply, RespError) else repr(reply)
            raise TransportError(
                f"{stream.where} rejected the subscription to {topic!r}: {shown}",
                TransportErrorKind.REJECTED,
            )
        self._channels[topic] = channel

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` publishing to ``topic`` without awaiting.

        The sender returns False when the client is not connected or its output is full,
        and raises ``TransportError`` for a payload above Redis's 512 MiB bulk limit.
        """
        require_qos(qos, "redis", CAPABILITIES)
        return self._stream.frame_sender(self._prefix_for(topic), CRLF)

    def publish_frame(self, topic: str, payload_bytes: int) -> tuple[bytes, bytes]:
        """``PUBLISH``'s array head, channel and bulk length, and the CRLF after a payload
        (``LendsSockets``)."""
        return self._prefix_for(topic)(payload_bytes), CRLF

    def lend_socket(self) -> int:
        """The established session's socket, for the compiled core (``LendsSockets``)."""
        if self._parser.buffered:
            raise TransportError(
                f"cannot lend the session of {self._stream.where}: part of a reply is read",
                _UNSUPPORTED,
            )
        return self._stream.lend()

    def lost_lent_session(self, reason: str) -> None:
        """The core lost the lent session: report it and allow a reconnect (``LendsSockets``)."""
        self._stream.lost_while_lent(reason)

    def _prefix_for(self, topic: str) -> Callable[[int], bytes]:
        """The publishing role for ``topic`` and its ``PUBLISH`` prefix by payload size."""
        if self._role == "subscriber":
            raise TransportError(
                "a subscribed redis connection cannot publish (RESP2 subscribed mode); "
                "use a separate client",
                _UNSUPPORTED,
            )
        self._role = "publisher"
        channel = _channel(topic)

        @functools.lru_cache(maxsize=1024)
        def prefix_for(size: int) -> bytes:
            if size > MAX_PAYLOAD:
                raise TransportError(
                    f"payload of {size} bytes exceeds Redis's bulk string limit of "
                    f"{MAX_PAYLOAD} bytes (publish to {topic!r})",
                    _UNSUPPORTED,
                )
            return publish_prefix(channel, size)

        return prefix_for

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Accepted for the contract; Redis Pub/Sub has no acknowledgements, so never called."""
        self._ack_handler = handler

    def pending_write_bytes(self) -> int:
        """Bytes coalesced but not yet handed to the socket plus the transport's buffer."""
        return self._stream.pending_bytes()

    async def flush(self, timeout_s: float) -> None:
        """Wait until Redis has processed everything sent so far, or ``timeout_s`` passes.

        Returns silently on timeout or when the connection is (or gets) lost.
        """
        await self._stream.flush(timeout_s, confirm=lambda: self._command(PING))

    async def close(self) -> None:
        """Write what is queued and ``QUIT``, close the socket and wait briefly for it to go;
        never raises."""
        await self._stream.close(QUIT)

    async def unsubscribe(self, topic: str) -> None:
        """Stop a subscription made with ``subscribe`` (no-op if unknown or disconnected)."""
        channel = self._channels.pop(topic, None)
        if channel is None:
            return
        self._parser.remove_handler(channel)
        if self._stream.connected:
            self._stream.write(encode_command(b"UNSUBSCRIBE", channel))
            self._control.append(_Pending(None, self._stream.sent))

    # ------------------------------------------------------------------ stream callbacks

    def _on_data(self, data: bytes) -> None:
        """Parse a chunk; every message in it is stamped with one receive time."""
        try:
            self._parser.feed(data, self._stream.receive_ns())
        except RespProtocolError as exc:
            self._stream.fail(f"protocol error: {exc}")
        except Exception as exc:
            self._stream.fail(f"message handler raised {type(exc).__name__}: {exc}")

    def _on_lost(self, failure: TransportError) -> int | None:
        """Fail the pending commands; the disconnect event names the last error reply."""
        while self._control:
            fut = self._control.popleft().future
            if fut is not None and not fut.done():
                fut.set_exception(failure)
        return None

    # ------------------------------------------------------------------ parser callbacks

    def _on_integers(self, value: int, count: int) -> None:
        """Integer replies; only ``PUBLISH`` answers with integers among our commands."""
        self._replies += count
        self._receivers += value * count
        if value == 0:
            if self._unreceived == 0:
                self._stream.emit(PublishUnreceived(self._stream.where))
            self._unreceived += count
        if self._replies > self._stream.sent:
            self._stream.fail("protocol error: more integer replies from redis than publishes sent")

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
        if isinstance(reply, RespError) and self._replies < self._stream.sent:
            self._replies += 1
            self._publish_errors += 1
            self._note_error(reply)
            return
        if isinstance(reply, list) and reply and reply[0] in (b"message", b"pmessage"):
            self.unrouted += 1  # a push for a channel we no longer listen to
            return
        self._stream.fail(f"protocol error: unexpected reply from redis: {reply!r:.80}")

    def _note_error(self, reply: RespError) -> None:
        self._stream.last_error = reply.text
        if self._handshake_done:
            self._stream.emit(ServerError(self._stream.where, reply.text))

    # ------------------------------------------------------------------ helpers

    def _command(self, frame: bytes) -> asyncio.Future[Reply]:
        """Send a control command (after everything queued) and return its reply future."""
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        stream = self._stream
        if not stream.writable:
            fut.set_exception(
                TransportError(
                    stream.loss_reason or "connection is closed", TransportErrorKind.DISCONNECTED
                )
            )
            return fut
        stream.write(frame)
        self._control.append(_Pending(fut, self._stream.sent))
        return fut

    def _keepalive_tick(self) -> None:
        """Send a keepalive PING; drop the connection after two unanswered ones."""
        if self._keepalive_unanswered >= 2:
            self._stream.fail(
                f"stale connection: no reply to 2 keepalive PINGs "
                f"({self._options.keepalive_s} s apart)"
            )
            return
        self._keepalive_unanswered += 1
        self._stream.write(PING)
        self._control.append(_Pending(None, self._stream.sent))


def _channel(topic: str) -> bytes:
    """The channel name for ``topic`` (any non-empty string is a valid Redis channel)."""
    if not topic:
        raise TransportError("redis channel name is empty")
    return topic.encode("utf-8")


def _describe_error(reply: RespError) -> str:
    """One phrase for an error reply, naming authentication failures plainly."""
    code = reply.code
    if code == "NOAUTH":
        return f"authentication required (-{reply.text}); set security.auth"
    if code == "WRONGPASS":
        return f"wrong username or password (-{reply.text})"
    if code == "ERR" and "AUTH" in reply.text and "password" in reply.text:
        return f"authentication failed (-{reply.text})"
    return f"-{reply.text}"


class RedisTransport:
    """Redis Pub/Sub over a lean asyncio RESP2 client (at-most-once)."""

    name = "redis"
    protocol = "redis"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> RedisClient:
        """Return a new, unconnected ``RedisClient``."""
        return RedisClient(endpoint, options)
