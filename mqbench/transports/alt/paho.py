"""The ``paho`` client: MQTT 3.1.1 through the stock paho-mqtt library (QoS 0 and 1).

paho runs its network loop in its own thread (``loop_start``). Callbacks in that thread
append to a buffer and, when no drain is pending, schedule one drain on the asyncio loop
with ``call_soon_threadsafe``; the drain calls the subscriber's handler (or the ack
handler) for the whole batch. The receive time is taken per message in paho's thread, when
paho hands the message over.

Locking: paho calls ``on_publish``/``on_subscribe`` while holding its own mutexes, which
``publish``/``subscribe`` also take, so this client never holds a lock of its own while
calling into paho. Acks and SUBACKs are resolved on the event loop: a sender or
``subscribe`` records the message id right after paho returned it, on the loop thread,
before any drain scheduled by paho's thread can run there.

Senders call ``paho.Client.publish`` directly (thread-safe; it writes to the socket or
queues for the network thread). Stock paho settings are kept (20 QoS 1 messages in flight,
unlimited queue), because measuring the stock client is the point of this transport;
``extra["max_inflight"]`` changes the in-flight limit.

``ClientOptions.username``/``password``/``tls`` (paho's ``tls_set_context``);
``ClientOptions.extra``: ``max_inflight``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

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
from mqbench.transports.stream import describe_oserror, tls_context
from mqbench.wire import limits

CAPABILITIES = TransportCapabilities(
    max_qos=1,
    persistent_sessions=True,
    wildcard_filters=True,
    tls=None,
    auth=None,
    max_payload=limits.MQTT,
)
"""What the paho client can do."""


def _close_wakeup_pair(client: paho.Client) -> None:
    """Close the loopback socket pair ``loop_start()`` opened to wake paho's thread.

    paho 2.x closes it only in ``Client.__del__``; our client and paho's sit in a reference
    cycle (paho's callbacks are our bound methods), so the pair would wait for the garbage
    collector, which may finalise the sockets before the client and report them unclosed.
    Once the thread has stopped nothing reads the pair, and a later ``loop_start()`` opens a
    new one. paho has no public call for this short of ``reinitialise()``, which would also
    drop the callbacks and settings a reconnect reuses.
    """
    reset = getattr(client, "_reset_sockets", None)
    if reset is not None:
        reset(sockpair_only=True)


def _user(username: str | None) -> str:
    return f" (user {username!r})" if username is not None else ""


class PahoTransport:
    """Creates :class:`PahoClient` instances."""

    name: str = "paho"
    protocol: str = "mqtt"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> PahoClient:
        """Return a new, unconnected client."""
        return PahoClient(endpoint, options)


class PahoClient:
    """One paho-mqtt connection implementing :class:`mqbench.transports.base.Client`."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._where = f"mqtt broker at {endpoint.host}:{endpoint.port}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._inbox: list[tuple[MessageHandler, bytes, int]] = []
        self._acks: deque[tuple[int, int]] = deque()  # (mid, t_ack_ns) from paho's thread
        self._acks_scheduled = False
        self._pending: dict[int, int] = {}  # mid -> tag of QoS 1 publishes (loop thread only)
        self._suback: dict[int, asyncio.Future[list[int]]] = {}  # loop thread only
        self._connack: asyncio.Future[tuple[int, str]] | None = None
        self._ack_handler: AckHandler | None = None
        self._started = False
        self._closing = False
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=options.client_id,
            clean_session=options.clean_session,
        )
        extra = options.extra
        if options.username is not None:
            client.username_pw_set(options.username, options.password)
        if options.tls is not None:
            client.tls_set_context(tls_context(options.tls))
            if options.tls.server_hostname is not None:
                client.tls_insecure_set(False)
        if "max_inflight" in extra:
            client.max_inflight_messages_set(int(extra["max_inflight"]))
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_subscribe = self._on_subscribe
        client.on_publish = self._on_publish
        client.on_message = self._on_unmatched  # paho calls it for no subscription's filter
        self._client = client
        self.unrouted = 0
        """Messages that matched no subscription (written by paho's thread only): dropped."""

    @property
    def connected(self) -> bool:
        """True while paho reports the connection up."""
        return bool(self._client.is_connected())

    async def connect(self) -> None:
        """Connect (blocking parts in a worker thread), start paho's loop, await CONNACK."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._connack = loop.create_future()
        timeout = self._options.connect_timeout_s
        client = self._client
        client.connect_timeout = timeout
        try:
            async with asyncio.timeout(timeout):
                await loop.run_in_executor(
                    None,
                    lambda: client.connect(
                        self._endpoint.host, self._endpoint.port, self._options.keepalive_s
                    ),
                )
                client.loop_start()
                self._started = True
                code, text = await self._connack
        except TimeoutError:
            with contextlib.suppress(Exception):
                client.disconnect()
            await self._stop_loop()
            raise TransportError(
                f"cannot connect to {self._where}: no CONNACK within {timeout:g} s",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except OSError as exc:
            await self._stop_loop()
            raise TransportError(
                f"cannot connect to {self._where}: {describe_oserror(exc)}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        if code != 0:
            await self._stop_loop()
            raise TransportError(
                f"{self._where} refused the connection of {self._options.client_id!r}"
                f"{_user(self._options.username)}: {text} (CONNACK reason code {code})",
                TransportErrorKind.CONNECT_FAILED,
            )
        self._emit(Connected(self._options.client_id))

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Subscribe and return once paho reported a successful SUBACK."""
        require_qos(qos, "paho", CAPABILITIES)
        loop = self._loop
        if loop is None or not self.connected:
            raise TransportError(
                f"cannot subscribe to {topic!r}: not connected", TransportErrorKind.DISCONNECTED
            )
        self._client.message_callback_add(topic, self._make_on_message(on_message))
        future: asyncio.Future[list[int]] = loop.create_future()
        rc, mid = self._client.subscribe(topic, qos)
        if rc == paho.MQTT_ERR_SUCCESS and mid is not None:
            self._suback[mid] = future
        if rc != paho.MQTT_ERR_SUCCESS:
            self._client.message_callback_remove(topic)
            raise TransportError(f"cannot subscribe to {topic!r}: {paho.error_string(rc)}")
        try:
            async with asyncio.timeout(self._options.connect_timeout_s):
                codes = await future
        except TimeoutError:
            self._client.message_callback_remove(topic)
            raise TransportError(f"subscribe to {topic!r}: no SUBACK from {self._where}") from None
        if not codes or codes[0] >= 0x80:
            self._client.message_callback_remove(topic)
            raise TransportError(
                f"{self._where} refused the subscription to {topic!r}", TransportErrorKind.REJECTED
            )
        self._emit(Subscribed(topic, qos, granted_qos=codes[0]))

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` calling ``paho.Client.publish``."""
        require_qos(qos, "paho", CAPABILITIES)
        client = self._client
        publish = client.publish
        pending = self._pending
        ok = paho.MQTT_ERR_SUCCESS

        if qos == 0:

            def send_qos0(payload: bytes, tag: int) -> bool:
                return bool(publish(topic, payload, 0).rc == ok)

            return send_qos0

        def send_qos1(payload: bytes, tag: int) -> bool:
            if not client.is_connected():
                return False
            info = publish(topic, payload, 1)
            if info.rc != ok:
                return False
            pending[info.mid] = tag
            return True

        return send_qos1

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Call ``handler(tag, t_ack_ns)`` for every PUBACK of a QoS 1 publish."""
        self._ack_handler = handler

    def stats(self) -> ClientStats:
        """Messages that matched no subscription; the stock library reports nothing else."""
        return ClientStats(unrouted=self.unrouted)

    def pending_write_bytes(self) -> int:
        """Not observable through paho: always 0."""
        return 0

    async def flush(self, timeout_s: float) -> None:
        """Wait until paho has nothing to write and every QoS 1 publish was acknowledged."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.connected:
            busy = bool(self._pending) or bool(self._acks)
            if not busy and not self._client.want_write():
                return
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        """Send DISCONNECT and stop paho's thread; never raises."""
        if not self._started:
            return
        self._closing = True
        with contextlib.suppress(Exception):
            self._client.disconnect()
        await self._stop_loop()
        self._emit(
            Disconnected("closed by client", expected=True, client_id=self._options.client_id)
        )

    # ------------------------------------------------------------------ paho thread

    def _make_on_message(self, handler: MessageHandler) -> Callable[..., None]:
        def on_message(client: Any, userdata: Any, message: Any) -> None:
            now = time.time_ns()
            with self._lock:
                first = not self._inbox
                self._inbox.append((handler, message.payload, now))
            if first:
                self._call(self._drain_inbox)

        return on_message

    def _on_unmatched(self, client: Any, userdata: Any, message: Any) -> None:
        self.unrouted += 1

    def _on_publish(self, client: Any, userdata: Any, mid: int, rc: Any, props: Any) -> None:
        # Also called for QoS 0 publishes (when written); the drain ignores unknown ids.
        self._acks.append((mid, time.time_ns()))
        if not self._acks_scheduled:
            self._acks_scheduled = True
            self._call(self._drain_acks)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        # paho 2 passes a ReasonCode (MQTT 3.1.1 return codes mapped to MQTT 5 reasons,
        # e.g. 4 -> 134 "Bad user name or password"); its str() is the reason's name.
        code = int(getattr(rc, "value", rc))
        text = str(rc) if hasattr(rc, "value") else paho.connack_string(code)
        future = self._connack
        if future is not None:
            self._call(lambda: None if future.done() else future.set_result((code, text)))

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        values = [int(getattr(code, "value", code)) for code in codes]
        self._call(lambda: self._resolve_suback(mid, values))

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
        reason = str(rc)
        expected = self._closing
        self._call(
            lambda: (
                self._emit(
                    Disconnected(reason, expected=expected, client_id=self._options.client_id)
                )
                if not expected
                else None
            )
        )

    # ------------------------------------------------------------------ asyncio side

    def _call(self, callback: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(callback)

    def _drain_inbox(self) -> None:
        with self._lock:
            batch, self._inbox = self._inbox, []
        for handler, payload, t_recv in batch:
            handler(payload, t_recv)

    def _drain_acks(self) -> None:
        # Clear the flag before popping: an ack appended after the last pop schedules anew.
        self._acks_scheduled = False
        acks = self._acks
        pending = self._pending
        handler = self._ack_handler
        for _ in range(len(acks)):
            mid, t_ack = acks.popleft()
            tag = pending.pop(mid, None)
            if tag is not None and handler is not None:
                handler(tag, t_ack)

    def _resolve_suback(self, mid: int, codes: list[int]) -> None:
        future = self._suback.pop(mid, None)
        if future is not None and not future.done():
            future.set_result(codes)

    async def _stop_loop(self) -> None:
        if self._started:
            self._started = False
            loop = asyncio.get_running_loop()
            try:
                await asyncio.wait_for(loop.run_in_executor(None, self._client.loop_stop), 10)
            except Exception:
                return  # paho's thread may still be waiting on its wake-up pair: leave it
        _close_wakeup_pair(self._client)

    def _emit(self, event: ClientEvent) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(event)
