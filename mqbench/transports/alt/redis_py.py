"""Redis Pub/Sub through the stock ``redis.asyncio`` client (redis-py), for comparison.

Publishes go through an ``Outbox`` (the sender never awaits) whose writer sends each batch
as one non-transactional pipeline of ``PUBLISH`` commands. A subscription uses redis-py's
``PubSub`` object (its own connection) and a reader task that calls ``get_message`` and the
handler per message; the receive time is taken per message after redis-py parsed it
(redis-py exposes no per-read hook), so it includes redis-py's parsing of earlier messages
of the same read. Delivery is at most once (``max_qos`` 0).

``ClientOptions.username``/``password``/``tls`` (redis-py's ``ssl_*`` arguments).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.alt._outbox import Outbox
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    ClientStats,
    ClientTls,
    MessageHandler,
    Sender,
    TransportCapabilities,
    require_qos,
)
from mqbench.transports.events import ClientEvent, Connected, Disconnected
from mqbench.transports.stream import describe_oserror, probe_tcp
from mqbench.wire import limits

READ_TIMEOUT_S = 1.0
"""How long one ``get_message`` call waits before the reader loop checks for close."""

CAPABILITIES = TransportCapabilities(
    max_qos=0,
    persistent_sessions=False,
    wildcard_filters=False,
    tls=None,
    auth=None,
    max_payload=limits.REDIS,
)
"""What the redis-py client can do."""


class RedisPyClient:
    """One redis-py client (a command connection plus a Pub/Sub connection when subscribed)."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._where = f"{endpoint.host}:{endpoint.port}"
        self._redis: Any = None
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._outbox: Outbox | None = None
        self._handlers: dict[bytes, MessageHandler] = {}
        self._connected = False
        self._closing = False
        self._ack_handler: AckHandler | None = None

    @property
    def connected(self) -> bool:
        """True between a successful ``connect`` and ``close`` or a connection failure."""
        return self._connected

    async def connect(self) -> None:
        """Create the client and ``PING`` the server within the connect timeout."""
        if self._redis is not None:
            raise TransportError(
                f"redis-py client for {self._where} was already connected once",
                TransportErrorKind.NOT_REUSABLE,
            )
        timeout = self._options.connect_timeout_s
        refused = await probe_tcp(self._endpoint.host, self._endpoint.port, timeout)
        if refused is not None:
            raise TransportError(
                f"cannot connect to redis at {self._where}: {refused}",
                TransportErrorKind.CONNECT_FAILED,
            )
        self._redis = aioredis.Redis(
            host=self._endpoint.host,
            port=self._endpoint.port,
            password=self._options.password,
            username=self._options.username,
            **_tls_arguments(self._options.tls),
            socket_connect_timeout=timeout,
            socket_timeout=None,
            client_name="-".join(self._options.client_id.split()) or None,
        )
        try:
            async with asyncio.timeout(timeout):
                await self._redis.ping()
        except TimeoutError:
            await self._dispose()
            raise TransportError(
                f"cannot connect to redis at {self._where}: no handshake within {timeout:g} s",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except redis_errors.RedisError as exc:
            await self._dispose()
            raise TransportError(
                f"cannot connect to redis at {self._where}: {_describe(exc)}"
                f"{_user(self._options.username, exc)}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        self._outbox = Outbox(self._write_batch, self._on_write_error)
        self._outbox.start()
        self._connected = True
        self._emit(Connected(self._options.client_id, self._where))

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """``SUBSCRIBE`` on the Pub/Sub connection; return once the confirmation arrived."""
        require_qos(qos, "redis-py", CAPABILITIES)
        if not self._connected:
            raise TransportError(
                f"cannot subscribe to {topic!r}: redis client is not connected",
                TransportErrorKind.DISCONNECTED,
            )
        channel = topic.encode("utf-8")
        first = self._pubsub is None
        if first:
            self._pubsub = self._redis.pubsub()
        self._handlers[channel] = on_message
        timeout = self._options.connect_timeout_s
        try:
            async with asyncio.timeout(timeout):
                await self._pubsub.subscribe(channel)
                if first:
                    while True:
                        msg = await self._pubsub.get_message(timeout=timeout)
                        if msg is not None and msg["type"] == "subscribe":
                            break
        except (TimeoutError, redis_errors.RedisError) as exc:
            self._handlers.pop(channel, None)
            why = "no confirmation in time" if isinstance(exc, TimeoutError) else _describe(exc)
            raise TransportError(f"cannot subscribe to {topic!r}: {why}") from None
        if first:
            self._reader = asyncio.get_running_loop().create_task(self._read())

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` that queues a ``PUBLISH`` (never awaits)."""
        require_qos(qos, "redis-py", CAPABILITIES)
        client = self

        def send(payload: bytes, tag: int) -> bool:
            outbox = client._outbox
            if not client._connected or outbox is None:
                return False
            return outbox.put(topic, payload)

        return send

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Accepted for the contract; never called (no acknowledgements)."""
        self._ack_handler = handler

    def stats(self) -> ClientStats:
        """No counters: the stock library refuses nothing and reports nothing to count."""
        return ClientStats()

    def pending_write_bytes(self) -> int:
        """Payload bytes queued in the outbox."""
        return self._outbox.pending_bytes if self._outbox is not None else 0

    async def flush(self, timeout_s: float) -> None:
        """Wait until queued publishes were executed (replied) or ``timeout_s`` passes."""
        if self._connected and self._outbox is not None:
            await self._outbox.drain(timeout_s)

    async def close(self) -> None:
        """Stop the reader, close both connections; never raises."""
        if self._closing or self._redis is None:
            return
        self._closing = True
        was_connected = self._connected
        self._connected = False
        with contextlib.suppress(Exception):
            if self._outbox is not None:
                await self._outbox.drain(2.0)
                await self._outbox.stop()
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        await self._dispose()
        if was_connected:
            self._emit(
                Disconnected(
                    "closed by client",
                    expected=True,
                    client_id=self._options.client_id,
                    endpoint=self._where,
                )
            )

    # ------------------------------------------------------------------ internals

    async def _write_batch(self, batch: list[tuple[str, bytes]]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for topic, payload in batch:
                pipe.publish(topic, payload)
            await pipe.execute()

    async def _read(self) -> None:
        pubsub = self._pubsub
        handlers = self._handlers
        time_ns = time.time_ns
        try:
            while True:
                msg = await pubsub.get_message(timeout=READ_TIMEOUT_S)
                if msg is None or msg["type"] != "message":
                    continue
                handler = handlers.get(msg["channel"])
                if handler is not None:
                    handler(msg["data"], time_ns())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._lost(_describe(exc) if isinstance(exc, redis_errors.RedisError) else repr(exc))

    def _on_write_error(self, exc: Exception) -> None:
        self._lost(_describe(exc) if isinstance(exc, redis_errors.RedisError) else repr(exc))

    def _lost(self, reason: str) -> None:
        if not self._connected:
            return
        self._connected = False
        self._emit(
            Disconnected(
                reason, expected=False, client_id=self._options.client_id, endpoint=self._where
            )
        )

    async def _dispose(self) -> None:
        with contextlib.suppress(Exception):
            if self._pubsub is not None:
                await self._pubsub.aclose()
        with contextlib.suppress(Exception):
            if self._redis is not None:
                await self._redis.aclose()

    def _emit(self, event: ClientEvent) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(event)


def _user(username: str | None, exc: BaseException) -> str:
    """`` (user 'name')`` after a refused login, else nothing."""
    if username is None or not isinstance(exc, redis_errors.AuthenticationError):
        return ""
    return f" (user {username!r})"


def _describe(exc: BaseException) -> str:
    """One phrase for a redis-py error, naming socket errors and auth failures by type."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        return describe_oserror(exc)
    if isinstance(exc, redis_errors.AuthenticationError):
        return f"authentication failed ({text})"
    return text


class RedisPyTransport:
    """Redis Pub/Sub through redis-py's asyncio client (at-most-once)."""

    name = "redis-py"
    protocol = "redis"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> RedisPyClient:
        """Return a new, unconnected ``RedisPyClient``."""
        return RedisPyClient(endpoint, options)


def _tls_arguments(tls: ClientTls | None) -> dict[str, Any]:
    """redis-py's TLS keyword arguments for ``tls`` (none for plain TCP)."""
    if tls is None:
        return {}
    return {
        "ssl": True,
        "ssl_ca_certs": tls.ca_file,
        "ssl_certfile": tls.cert_file,
        "ssl_keyfile": tls.key_file,
        "ssl_check_hostname": True,
    }
