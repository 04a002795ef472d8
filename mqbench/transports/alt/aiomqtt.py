"""The ``aiomqtt`` client: MQTT 3.1.1 through the stock aiomqtt library (QoS 0 and 1).

aiomqtt wraps paho-mqtt in asyncio (paho's socket is driven by the event loop). Its
``publish`` is a coroutine that returns once paho handed the message over (QoS 0) or the
PUBACK arrived (QoS 1), so a sender schedules one task per message; the ack handler is
called when a QoS 1 task completes. A reader task iterates ``client.messages`` and calls
the handler of the first subscription whose filter matches, with ``time.time_ns()`` taken
per message.

``ClientOptions.username``/``password``/``tls`` (aiomqtt's ``tls_context``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

import aiomqtt

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
from mqbench.transports.stream import probe_tcp, tls_context
from mqbench.wire import limits

CAPABILITIES = TransportCapabilities(
    max_qos=1,
    persistent_sessions=True,
    wildcard_filters=True,
    tls=None,
    auth=None,
    max_payload=limits.MQTT,
)
"""What the aiomqtt client can do."""


class AiomqttTransport:
    """Creates :class:`AiomqttClient` instances."""

    name: str = "aiomqtt"
    protocol: str = "mqtt"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> AiomqttClient:
        """Return a new, unconnected client."""
        return AiomqttClient(endpoint, options)


class AiomqttClient:
    """One aiomqtt connection implementing :class:`mqbench.transports.base.Client`."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._where = f"mqtt broker at {endpoint.host}:{endpoint.port}"
        self._client: aiomqtt.Client | None = None
        self._subs: list[tuple[str, MessageHandler]] = []
        self._reader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ack_handler: AckHandler | None = None
        self._connected = False
        self.failed_publishes = 0
        """Publishes that raised (e.g. the connection dropped while they were pending)."""
        self.unrouted = 0
        """Messages that matched no subscription (dropped)."""

    @property
    def connected(self) -> bool:
        """True between a successful connect and close (or a lost connection)."""
        return self._connected

    async def connect(self) -> None:
        """Connect and start the reader task; TransportError with the reason on failure."""
        options = self._options
        timeout = options.connect_timeout_s
        refused = await probe_tcp(self._endpoint.host, self._endpoint.port, timeout)
        if refused is not None:
            raise TransportError(
                f"cannot connect to {self._where}: {refused}", TransportErrorKind.CONNECT_FAILED
            )
        # aiomqtt binds the running loop when the client is created: create it here.
        self._client = aiomqtt.Client(
            self._endpoint.host,
            self._endpoint.port,
            identifier=options.client_id,
            username=options.username,
            password=options.password,
            tls_context=tls_context(options.tls) if options.tls is not None else None,
            clean_session=options.clean_session,
            keepalive=options.keepalive_s,
            timeout=timeout,
        )
        try:
            async with asyncio.timeout(timeout + 1):
                await self._client.__aenter__()
        except TimeoutError:
            raise TransportError(
                f"cannot connect to {self._where}: no CONNACK within {timeout:g} s",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except aiomqtt.MqttCodeError as exc:
            # A CONNACK with a failure code (e.g. bad user name or password).
            reason = re.sub(r"^\[code:\d+\]\s*", "", str(exc))
            raise TransportError(
                f"{self._where} refused the connection of {options.client_id!r}"
                f"{'' if options.username is None else f' (user {options.username!r})'}: "
                f"{reason} (CONNACK code {exc.rc})",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except aiomqtt.MqttError as exc:
            raise TransportError(
                f"cannot connect to {self._where}: {_reason(exc)}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        self._connected = True
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self._emit(Connected(self._options.client_id))

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Subscribe (aiomqtt awaits the SUBACK) and route matching messages to the handler."""
        require_qos(qos, "aiomqtt", CAPABILITIES)
        mqtt = self._client
        if not self._connected or mqtt is None:
            raise TransportError(
                f"cannot subscribe to {topic!r}: not connected", TransportErrorKind.DISCONNECTED
            )
        entry = (topic, on_message)
        self._subs.append(entry)
        try:
            granted = await mqtt.subscribe(topic, qos, timeout=self._options.connect_timeout_s)
        except aiomqtt.MqttError as exc:
            self._subs.remove(entry)
            raise TransportError(f"subscribe to {topic!r} failed: {_reason(exc)}") from None
        first = granted[0] if granted else 0x80
        code = first if isinstance(first, int) else int(first.value)
        if code >= 0x80:
            self._subs.remove(entry)
            raise TransportError(
                f"{self._where} refused the subscription to {topic!r}", TransportErrorKind.REJECTED
            )
        self._emit(Subscribed(topic, qos, granted_qos=code))

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool``; each call schedules one publish task."""
        require_qos(qos, "aiomqtt", CAPABILITIES)
        client = self
        tasks = self._tasks

        def send(payload: bytes, tag: int) -> bool:
            if not client._connected:
                return False
            task = asyncio.get_running_loop().create_task(client._publish(topic, payload, qos, tag))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            return True

        return send

    async def _publish(self, topic: str, payload: bytes, qos: int, tag: int) -> None:
        mqtt = self._client
        if mqtt is None:
            self.failed_publishes += 1
            return
        try:
            await mqtt.publish(topic, payload, qos, timeout=float("inf"))
        except aiomqtt.MqttError:
            self.failed_publishes += 1
            return
        if qos:
            handler = self._ack_handler
            if handler is not None:
                handler(tag, time.time_ns())

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Call ``handler(tag, t_ack_ns)`` when a QoS 1 publish was acknowledged."""
        self._ack_handler = handler

    def stats(self) -> ClientStats:
        """Messages that matched no subscription; the stock library reports nothing else."""
        return ClientStats(unrouted=self.unrouted)

    def pending_write_bytes(self) -> int:
        """Not observable through aiomqtt: always 0."""
        return 0

    async def flush(self, timeout_s: float) -> None:
        """Wait for scheduled publishes (QoS 1: their PUBACKs), at most ``timeout_s``."""
        if not self._tasks:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Disconnect and stop the reader; never raises."""
        if not self._connected:
            return
        self._connected = False
        for task in list(self._tasks):
            task.cancel()
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        mqtt = self._client
        if mqtt is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await mqtt.__aexit__(None, None, None)
        self._emit(
            Disconnected("closed by client", expected=True, client_id=self._options.client_id)
        )

    async def _read(self) -> None:
        mqtt = self._client
        assert mqtt is not None
        try:
            async for message in mqtt.messages:
                now = time.time_ns()
                for topic_filter, handler in self._subs:
                    if message.topic.matches(topic_filter):
                        payload = message.payload
                        handler(payload if isinstance(payload, bytes) else bytes(payload), now)
                        break
                else:
                    self.unrouted += 1
        except aiomqtt.MqttError as exc:
            if self._connected:
                self._connected = False
                self._emit(
                    Disconnected(_reason(exc), expected=False, client_id=self._options.client_id)
                )

    def _emit(self, event: ClientEvent) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(event)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
