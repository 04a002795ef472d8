"""Core NATS through the stock ``nats-py`` client, for comparison (at-most-once).

Publishes go through an ``Outbox`` (the sender never awaits) whose writer calls
``NATS.publish`` per message; nats-py buffers them and writes in its own flusher task.
Subscriptions use a message callback; the receive time is taken when nats-py calls it
(after its parser and its per-subscription queue and task). ``subscribe`` and ``flush``
are confirmed with nats-py's ``flush`` (a PING/PONG round trip). Reconnection is off, so a
lost connection is reported once as ``disconnected`` and the client stays down.

``ClientOptions.username``/``password``/``tls`` (nats-py's ``tls`` context; the server's
plain INFO first, then TLS); ``ClientOptions.extra``: ``token``, ``echo`` (default True).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import nats
from nats import errors as nats_errors

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.alt._outbox import Outbox
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    ClientStats,
    MessageHandler,
    Sender,
    TransportCapabilities,
    require_qos,
)
from mqbench.transports.events import ClientEvent, Connected, Disconnected
from mqbench.transports.stream import describe_oserror, probe_tcp, tls_context

CAPABILITIES = TransportCapabilities(
    max_qos=0, persistent_sessions=False, wildcard_filters=False, tls=None, auth=None
)
"""What the nats-py client can do."""


class NatsPyClient:
    """One nats-py connection (implements ``base.Client``)."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._where = f"{endpoint.host}:{endpoint.port}"
        self._nc: Any = None
        self._outbox: Outbox | None = None
        self._subs: dict[str, Any] = {}
        self._connected = False
        self._closing = False
        self._started = False
        self._last_error: str | None = None
        self._ack_handler: AckHandler | None = None

    @property
    def connected(self) -> bool:
        """True while nats-py reports the connection as up."""
        return self._connected

    async def connect(self) -> None:
        """Connect with nats-py (no reconnects) within the connect timeout."""
        if self._started:
            raise TransportError(
                f"nats-py client for {self._where} was already connected once",
                TransportErrorKind.NOT_REUSABLE,
            )
        self._started = True
        timeout = self._options.connect_timeout_s
        extra = self._options.extra
        kwargs: dict[str, Any] = {
            "name": self._options.client_id,
            "connect_timeout": timeout,
            "allow_reconnect": False,
            "max_reconnect_attempts": 0,
            "ping_interval": max(self._options.keepalive_s, 1),
            "no_echo": not bool(extra.get("echo", True)),
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
        }
        refused = await probe_tcp(self._endpoint.host, self._endpoint.port, timeout)
        if refused is not None:
            raise TransportError(
                f"cannot connect to nats at {self._where}: {refused}",
                TransportErrorKind.CONNECT_FAILED,
            )
        if extra.get("token") is not None:
            kwargs["token"] = extra["token"]
        if self._options.username is not None:
            kwargs["user"] = self._options.username
        if self._options.password is not None:
            kwargs["password"] = self._options.password
        tls = self._options.tls
        if tls is not None:
            kwargs["tls"] = tls_context(tls)
            kwargs["tls_hostname"] = tls.server_hostname or self._endpoint.host
        try:
            async with asyncio.timeout(timeout + 1.0):
                self._nc = await nats.connect(
                    f"nats://{self._endpoint.host}:{self._endpoint.port}", **kwargs
                )
        except TimeoutError:
            raise TransportError(
                f"cannot connect to nats at {self._where}: no handshake within {timeout:g} s",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except Exception as exc:
            user = self._options.username
            # A server's -ERR during the handshake (nats.errors.Error, not a socket error)
            # is a refusal of this login.
            login_refused = isinstance(exc, nats_errors.Error) and not isinstance(
                exc, nats_errors.NoServersError
            )
            who = f" (user {user!r})" if user is not None and login_refused else ""
            raise TransportError(
                f"cannot connect to nats at {self._where}: {self._describe(exc)}{who}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        self._outbox = Outbox(self._write_batch, self._on_write_error)
        self._outbox.start()
        self._connected = True
        self._emit(Connected(self._options.client_id, self._where))

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Subscribe with a callback and confirm with a PING/PONG round trip."""
        require_qos(qos, "nats-py", CAPABILITIES)
        if not self._connected:
            raise TransportError(
                f"cannot subscribe to {topic!r}: nats client is not connected",
                TransportErrorKind.DISCONNECTED,
            )
        time_ns = time.time_ns

        async def on_msg(msg: Any) -> None:
            on_message(msg.data, time_ns())

        try:
            self._subs[topic] = await self._nc.subscribe(topic, cb=on_msg)
            await self._nc.flush(timeout=self._options.connect_timeout_s)
        except Exception as exc:
            raise TransportError(f"cannot subscribe to {topic!r}: {self._describe(exc)}") from None

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` that queues a publish (never awaits)."""
        require_qos(qos, "nats-py", CAPABILITIES)
        client = self

        def send(payload: bytes, tag: int) -> bool:
            outbox = client._outbox
            if not client._connected or outbox is None:
                return False
            return outbox.put(topic, payload)

        return send

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Accepted for the contract; never called (core NATS has no acknowledgements)."""
        self._ack_handler = handler

    def stats(self) -> ClientStats:
        """No counters: the stock library refuses nothing and reports nothing to count."""
        return ClientStats()

    def pending_write_bytes(self) -> int:
        """Payload bytes in the outbox plus nats-py's pending buffer."""
        queued = self._outbox.pending_bytes if self._outbox is not None else 0
        pending = getattr(self._nc, "pending_data_size", 0) if self._nc is not None else 0
        return queued + int(pending)

    async def flush(self, timeout_s: float) -> None:
        """Hand queued publishes to nats-py, then PING/PONG; quiet on timeout or loss."""
        if not self._connected or self._outbox is None:
            return
        started = time.monotonic()
        if not await self._outbox.drain(timeout_s):
            return
        remaining = timeout_s - (time.monotonic() - started)
        if remaining > 0:
            with contextlib.suppress(Exception):
                await self._nc.flush(timeout=remaining)

    async def close(self) -> None:
        """Hand over queued publishes, close the connection; never raises."""
        if self._closing or self._nc is None:
            return
        self._closing = True
        was_connected = self._connected
        with contextlib.suppress(Exception):
            if self._outbox is not None:
                await self._outbox.drain(2.0)
                await self._outbox.stop()
        self._connected = False
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await self._nc.close()
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
        publish = self._nc.publish
        for topic, payload in batch:
            await publish(topic, payload)

    def _on_write_error(self, exc: Exception) -> None:
        self._lost(self._describe(exc))

    async def _on_error(self, exc: Exception) -> None:
        self._last_error = self._describe(exc)

    async def _on_disconnected(self) -> None:
        self._lost(self._last_error or "connection closed by server")

    def _lost(self, reason: str) -> None:
        if not self._connected or self._closing:
            return
        self._connected = False
        self._emit(
            Disconnected(
                reason, expected=False, client_id=self._options.client_id, endpoint=self._where
            )
        )

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, OSError):
            return describe_oserror(exc)
        if isinstance(exc, nats_errors.NoServersError):
            return self._last_error or "no servers available (connection refused?)"
        if isinstance(exc, nats_errors.AuthorizationError):
            return "-ERR 'Authorization Violation'"
        return str(exc) or type(exc).__name__

    def _emit(self, event: ClientEvent) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(event)


class NatsPyTransport:
    """Core NATS through nats-py (at-most-once)."""

    name = "nats-py"
    protocol = "nats"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> NatsPyClient:
        """Return a new, unconnected ``NatsPyClient``."""
        return NatsPyClient(endpoint, options)
