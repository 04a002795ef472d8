"""The ``aio-pika`` client: AMQP 0-9-1 through the stock aio-pika library (QoS 0 and 1).

Same routing layout as the lean ``amqp`` transport (docs/transports.md, "AMQP"): a direct
exchange ``mqbench``, routing key = topic, one exclusive auto-delete queue per subscription.
QoS 0 publishes on a channel without confirms, QoS 1 on a channel with publisher confirms;
QoS 0 subscriptions consume with ``no_ack``, QoS 1 ones ack each message.

aio-pika's publish is a coroutine, so a sender schedules one task per message (no await
on the caller's path); that task cost is what users measure when they pick this client.
The receive time is taken when aio-pika calls the consumer, once per message.

``ClientOptions.username``/``password``/``tls`` (PLAIN login, AMQPS); ``ClientOptions.extra``:
``vhost``, ``exchange``, ``prefetch``
(as for ``amqp``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage

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
from mqbench.transports.events import ClientEvent, Connected, Disconnected, Subscribed
from mqbench.transports.stream import describe_oserror, probe_tcp, tls_context

CAPABILITIES = TransportCapabilities(
    max_qos=1, persistent_sessions=False, wildcard_filters=False, tls=None, auth=None
)
"""What the aio-pika client can do."""


class AioPikaTransport:
    """Creates :class:`AioPikaClient` instances."""

    name: str = "aio-pika"
    protocol: str = "amqp"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> AioPikaClient:
        """Return a new, unconnected client."""
        return AioPikaClient(endpoint, options)


class AioPikaClient:
    """One aio-pika connection implementing :class:`mqbench.transports.base.Client`."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._where = f"amqp broker at {endpoint.host}:{endpoint.port}"
        self._connection: aio_pika.abc.AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._confirm_channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._confirm_exchange: AbstractExchange | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ack_handler: AckHandler | None = None
        self._closing = False
        self.failed_publishes = 0
        """Publishes that raised (e.g. the connection dropped while they were queued)."""

    @property
    def connected(self) -> bool:
        """True while the connection is open."""
        return self._connection is not None and not self._connection.is_closed

    async def connect(self) -> None:
        """Connect, open a plain and a confirm channel, declare the exchange."""
        extra = self._options.extra
        timeout = self._options.connect_timeout_s
        user = self._options.username or "guest"
        tls = self._options.tls
        exchange_name = str(extra.get("exchange", "mqbench"))
        refused = await probe_tcp(self._endpoint.host, self._endpoint.port, timeout)
        if refused is not None:
            raise TransportError(
                f"cannot connect to {self._where}: {refused}", TransportErrorKind.CONNECT_FAILED
            )
        try:
            async with asyncio.timeout(timeout):
                connection = await aio_pika.connect(
                    host=self._endpoint.host,
                    port=self._endpoint.port,
                    login=user,
                    password=self._options.password or "guest",
                    ssl=tls is not None,
                    ssl_context=tls_context(tls) if tls is not None else None,
                    virtualhost=str(extra.get("vhost", "/")),
                    timeout=timeout,
                    client_properties={"connection_name": self._options.client_id},
                    heartbeat=self._options.keepalive_s,
                )
                self._connection = connection
                self._channel = await connection.channel(publisher_confirms=False)
                self._confirm_channel = await connection.channel(publisher_confirms=True)
                self._exchange = await self._channel.declare_exchange(
                    exchange_name, aio_pika.ExchangeType.DIRECT
                )
                self._confirm_exchange = await self._confirm_channel.get_exchange(
                    exchange_name, ensure=False
                )
        except TimeoutError:
            await self._drop()
            raise TransportError(
                f"cannot connect to {self._where}: no handshake within {timeout:g} s",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except aiormq.exceptions.ProbableAuthenticationError as exc:
            await self._drop()
            raise TransportError(
                f"{self._where} refused the login of user {user!r}: {_reason(exc)}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except OSError as exc:
            await self._drop()
            # aiormq re-raises a socket or TLS error as AMQPConnectionError(*args) from it
            cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
            raise TransportError(
                f"cannot connect to {self._where}: {describe_oserror(cause)}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except aiormq.exceptions.AMQPError as exc:
            await self._drop()
            raise TransportError(
                f"cannot connect to {self._where}: {_reason(exc)}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        self._emit(Connected(self._options.client_id))

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Declare an exclusive queue, bind it with ``topic`` and start consuming."""
        require_qos(qos, "aio-pika", CAPABILITIES)
        channel, exchange = self._channel, self._exchange
        if channel is None or exchange is None or not self.connected:
            raise TransportError(
                f"cannot subscribe to {topic!r}: not connected", TransportErrorKind.DISCONNECTED
            )
        try:
            async with asyncio.timeout(self._options.connect_timeout_s):
                if qos == 1:
                    prefetch = int(self._options.extra.get("prefetch", 1000))
                    await channel.set_qos(prefetch_count=prefetch)
                queue = await channel.declare_queue(exclusive=True, auto_delete=True)
                await queue.bind(exchange, routing_key=topic)
                if qos == 0:

                    async def deliver(message: AbstractIncomingMessage) -> None:
                        on_message(message.body, time.time_ns())

                    await queue.consume(deliver, no_ack=True)
                else:

                    async def deliver_ack(message: AbstractIncomingMessage) -> None:
                        on_message(message.body, time.time_ns())
                        await message.ack()

                    await queue.consume(deliver_ack, no_ack=False)
        except TimeoutError:
            raise TransportError(f"subscribe to {topic!r}: no answer from {self._where}") from None
        except aiormq.exceptions.AMQPError as exc:
            raise TransportError(f"subscribe to {topic!r} failed: {_reason(exc)}") from None
        self._emit(Subscribed(topic, qos))

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool``; each call schedules one publish task."""
        require_qos(qos, "aio-pika", CAPABILITIES)
        client = self
        tasks = self._tasks

        def send(payload: bytes, tag: int) -> bool:
            exchange = client._confirm_exchange if qos else client._exchange
            if exchange is None or not client.connected:
                return False
            task = asyncio.get_running_loop().create_task(
                client._publish(exchange, topic, payload, tag, qos)
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            return True

        return send

    async def _publish(
        self, exchange: AbstractExchange, topic: str, payload: bytes, tag: int, qos: int
    ) -> None:
        try:
            await exchange.publish(aio_pika.Message(payload), routing_key=topic)
        except Exception:  # the connection dropped or the broker nacked: no ack
            self.failed_publishes += 1
            return
        if qos:
            handler = self._ack_handler
            if handler is not None:
                handler(tag, time.time_ns())

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Call ``handler(tag, t_ack_ns)`` when a QoS 1 publish is confirmed."""
        self._ack_handler = handler

    def stats(self) -> ClientStats:
        """No counters: the stock library refuses nothing and reports nothing to count."""
        return ClientStats()

    def pending_write_bytes(self) -> int:
        """Not observable through aio-pika: always 0."""
        return 0

    async def flush(self, timeout_s: float) -> None:
        """Wait for scheduled publishes (and their confirms), at most ``timeout_s``."""
        if not self._tasks:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Close the connection; never raises."""
        if self._connection is None:
            return
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await self._drop()
        self._emit(
            Disconnected("closed by client", expected=True, client_id=self._options.client_id)
        )

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        self._channel = self._confirm_channel = None
        self._exchange = self._confirm_exchange = None
        if connection is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await connection.close()

    def _emit(self, event: ClientEvent) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(event)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(arg) for arg in exc.args if arg) or type(exc).__name__
    return text.splitlines()[0] if text else type(exc).__name__
