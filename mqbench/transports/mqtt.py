"""Lean MQTT 3.1.1 client transport (QoS 0, 1 and 2) on a plain ``asyncio.Protocol``.

Built for the hot path of a benchmark: a sender is a closure that frames a PUBLISH with one
concatenation and hands it to ``transport.write`` without awaiting; a read is parsed in one
loop (:class:`~mqbench.wire.mqtt.parser.StreamParser`) that calls the subscriber's
handler per message with one receive timestamp per read; PUBACKs for inbound QoS 1 messages
are written once per read. Works with uvloop and with the default asyncio loop.

Options understood in ``ClientOptions.extra``:

``username`` / ``password``
    Credentials for CONNECT (password as ``str`` or ``bytes``).
``will``
    ``{"topic": str, "payload": bytes | str, "qos": int, "retain": bool}``.
``request_timeout_s``
    How long ``subscribe`` waits for SUBACK (default: ``connect_timeout_s``).
``write_buffer_high_bytes``
    High-water mark of the transport write buffer (default 256 MiB). Sends never block;
    crossing it only emits a ``write_paused`` event.
``close_timeout_s``
    How long ``close`` waits for the write buffer to drain before aborting (default 5).
``max_inflight_qos2``
    QoS 2 publishes in flight at once (default 20); more wait in the client, in order.
    MQTT 3.1.1 has no receive maximum, yet mosquitto answers PUBREC to a QoS 2 PUBLISH beyond
    its ``max_inflight_messages`` (20) and drops it, so an unbounded burst loses messages
    while every flow "completes". Time spent waiting counts in the latency (which is measured
    from the intended send time).

Persistent sessions (``clean_session`` false): QoS 1/2 publishes not yet acknowledged when
the connection drops are sent again with the DUP flag after the next CONNACK (and PUBREL
again for those past PUBREC), as MQTT 3.1.1 section 4.4 requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, cast

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    MessageHandler,
    Sender,
    max_pending_bytes,
)
from mqbench.transports.drain import drain_write_buffer
from mqbench.wire.mqtt.errors import MqttCodecError, MqttProtocolError
from mqbench.wire.mqtt.packets import (
    DISCONNECT_BYTES,
    PINGREQ_BYTES,
    Connack,
    Connect,
    Packet,
    PingResp,
    PubComp,
    PubRec,
    Suback,
    Subscribe,
    Unsuback,
    Will,
    publish_prefix,
)
from mqbench.wire.mqtt.parser import StreamParser
from mqbench.wire.mqtt.primitives import MAX_PACKET_ID, PUBACK, PUBCOMP, PUBREC, PUBREL
from mqbench.wire.mqtt.reason_codes import CONNACK_MESSAGES, SUBACK_FAILURE
from mqbench.wire.topics import topic_matches

DEFAULT_WRITE_BUFFER_HIGH: Final = 256 * 1024 * 1024
_ROUTE_CACHE_MAX: Final = 4096
_pack_u16 = struct.Struct(">H").pack


_COALESCE_MAX: Final = 64 * 1024
"""Frames this large are written at once instead of being copied into the batch."""


class MqttTransport:
    """The ``mqtt`` transport: MQTT 3.1.1 clients, QoS 0 and 1."""

    name: str = "mqtt"
    protocol: str = "mqtt"
    max_qos: int = 2

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> MqttClient:
        """Return a new, unconnected client."""
        return MqttClient(endpoint, options)


class MqttClient(asyncio.Protocol):
    """One MQTT connection implementing :class:`mqbench.transports.base.Client`."""

    __slots__ = (
        "_ack_handler",
        "_ack_waiter",
        "_acks_out",
        "_activity",
        "_closing",
        "_connack",
        "_connected",
        "_drain_waiter",
        "_endpoint",
        "_frames",
        "_inflight",
        "_keepalive_handle",
        "_lost",
        "_lost_reason",
        "_max_pending",
        "_next_pid",
        "_now",
        "_options",
        "_out",
        "_out_loop",
        "_out_scheduled",
        "_parser",
        "_ping_outstanding",
        "_qos2_backlog",
        "_qos2_comp",
        "_qos2_in",
        "_qos2_out",
        "_qos2_window",
        "_requests",
        "_routes",
        "_subs",
        "_transport",
        "_write",
        "_write_high",
        "_write_paused",
        "qos2_acked_as_qos1",
        "sends_refused",
        "unrouted",
    )

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._transport: asyncio.Transport | None = None
        # The sender's hot path reads only this: the bound ``transport.write`` while the
        # session is up (after CONNACK), else None.
        self._write: Callable[[bytes], None] | None = None
        self._connected = False
        self._closing = False
        self._parser = StreamParser(self._on_publish, self._on_ack, self._handle)
        self._now = 0
        self._acks_out: list[bytes] = []
        self._out = bytearray()
        """Publishes written in this loop iteration, sent as one write at its end."""
        self._out_scheduled = False
        self._out_loop: asyncio.AbstractEventLoop | None = None
        self._write_paused = False
        self._max_pending = max_pending_bytes(options)
        self.sends_refused = 0
        """Sends refused because the output buffer (or the unacknowledged QoS >= 1 frames
        kept for resending) exceeded ``max_pending_bytes`` (``Sender``)."""
        self._activity = False
        self._inflight: dict[int, int] = {}
        self._requests: dict[int, asyncio.Future[Packet]] = {}
        self._next_pid = 1
        self._ack_handler: AckHandler | None = None
        self._subs: list[tuple[str, MessageHandler]] = []
        self._routes: dict[bytes, MessageHandler] = {}
        self._qos2_in: set[int] = set()
        self._qos2_out: set[int] = set()
        """QoS 2 publishes waiting for PUBREC."""
        self._qos2_comp: set[int] = set()
        """QoS 2 publishes past PUBREC, waiting for PUBCOMP."""
        self._qos2_backlog: deque[tuple[bytes, bytes, int]] = deque()
        """QoS 2 publishes waiting for a free in-flight slot: (prefix, payload, tag)."""
        self._qos2_window = max(1, int(options.extra.get("max_inflight_qos2", 20)))
        self._frames: dict[int, bytes] = {}
        """PUBLISH frames sent and not yet acknowledged (PUBACK / PUBREC), for resending."""
        self._connack: asyncio.Future[Connack] | None = None
        self._lost: asyncio.Future[None] | None = None
        self._lost_reason: str | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._ack_waiter: asyncio.Future[None] | None = None
        self._keepalive_handle: asyncio.TimerHandle | None = None
        self._ping_outstanding = False
        # Pausing at the output bound is what lets a full buffer refuse sends (``sender``).
        self._write_high = min(
            int(options.extra.get("write_buffer_high_bytes", DEFAULT_WRITE_BUFFER_HIGH)),
            max_pending_bytes(options),
        )
        self.unrouted = 0
        """Messages that matched no subscription of this client (dropped)."""
        self.qos2_acked_as_qos1 = 0
        """QoS 2 publishes the broker answered with PUBACK (it downgraded them to QoS 1)."""

    # ------------------------------------------------------------------ Client API

    @property
    def connected(self) -> bool:
        """True between a successful CONNACK and the loss or close of the connection."""
        return self._connected

    @property
    def inflight(self) -> int:
        """QoS 1/2 publishes not yet acknowledged (including QoS 2 ones not yet sent)."""
        return len(self._inflight) + len(self._qos2_backlog)

    def _where(self) -> str:
        return f"mqtt broker at {self._endpoint.host}:{self._endpoint.port}"

    async def connect(self) -> None:
        """Open TCP, send CONNECT and wait for a successful CONNACK within the timeout."""
        if self._transport is not None:
            raise TransportError(f"client {self._options.client_id!r} is already connected")
        loop = asyncio.get_running_loop()
        timeout = self._options.connect_timeout_s
        self._connack = loop.create_future()
        self._closing = False
        self._lost_reason = None
        self._ping_outstanding = False
        self._activity = False
        self._parser = StreamParser(self._on_publish, self._on_ack, self._handle)
        if self._options.clean_session:
            # A clean session forgets subscriptions and unacknowledged publishes.
            self._inflight.clear()
            self._frames.clear()
            self._qos2_in.clear()
            self._qos2_out.clear()
            self._qos2_comp.clear()
            self._qos2_backlog.clear()
            self._subs.clear()
            self._routes.clear()
        stage = "no TCP connection"
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(lambda: self, self._endpoint.host, self._endpoint.port)
                stage = "no CONNACK"
                assert self._transport is not None
                self._transport.write(self._connect_packet().encode())
                connack = await self._connack
        except TimeoutError:
            self._abort()
            raise TransportError(
                f"cannot connect to {self._where()}: {stage} within {timeout:g} s"
            ) from None
        except ConnectionRefusedError:
            raise TransportError(f"cannot connect to {self._where()}: connection refused") from None
        except MqttProtocolError as exc:
            self._abort()
            raise TransportError(f"cannot connect to {self._where()}: {exc}") from None
        except TransportError as exc:
            self._abort()
            raise TransportError(f"cannot connect to {self._where()}: {exc}") from None
        except OSError as exc:
            self._abort()
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise TransportError(f"cannot connect to {self._where()}: {reason.lower()}") from None
        if connack.return_code != 0:
            self._abort()
            text = CONNACK_MESSAGES.get(connack.return_code, "unknown reason")
            raise TransportError(
                f"{self._where()} refused the connection of {self._options.client_id!r}: "
                f"{text} (CONNACK return code {connack.return_code})"
            )
        transport = self._transport
        if transport is None or transport.is_closing():
            raise TransportError(f"cannot connect to {self._where()}: connection closed")
        self._connected = True
        self._out_loop = loop
        self._out = bytearray()
        self._write = self._coalesce
        self._resend_unacknowledged(transport)
        keepalive = self._options.keepalive_s
        if keepalive > 0:
            self._keepalive_handle = loop.call_later(keepalive / 2, self._keepalive_tick)
        self._emit(
            "connected",
            {
                "client_id": self._options.client_id,
                "session_present": connack.session_present,
            },
        )

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Subscribe ``on_message`` to ``topic`` and wait for a successful SUBACK."""
        if qos not in (0, 1, 2):
            raise TransportError(f"mqtt transport supports QoS 0, 1 and 2, not {qos}")
        if not self._connected or self._transport is None:
            raise TransportError(f"cannot subscribe to {topic!r}: not connected")
        # Register first: messages may arrive in the same read as the SUBACK.
        entry = (topic, on_message)
        self._subs.append(entry)
        self._routes.clear()
        pid = self._allocate_packet_id()
        if not pid:
            self._subs.remove(entry)
            raise TransportError(f"cannot subscribe to {topic!r}: no free packet identifier")
        future: asyncio.Future[Packet] = asyncio.get_running_loop().create_future()
        self._requests[pid] = future
        timeout = float(
            self._options.extra.get("request_timeout_s", self._options.connect_timeout_s)
        )
        ok = False
        try:
            self._transport.write(Subscribe(pid, ((topic, qos),)).encode())
            self._activity = True
            async with asyncio.timeout(timeout):
                suback = await future
            if not isinstance(suback, Suback):
                raise TransportError(f"subscribe to {topic!r}: unexpected answer {suback!r}")
            code = suback.return_codes[0]
            if code == SUBACK_FAILURE:
                raise TransportError(f"{self._where()} refused the subscription to {topic!r}")
            ok = True
            self._emit("subscribed", {"topic": topic, "requested_qos": qos, "granted_qos": code})
        except TimeoutError:
            raise TransportError(
                f"subscribe to {topic!r}: no SUBACK from {self._where()} within {timeout:g} s"
            ) from None
        finally:
            self._requests.pop(pid, None)
            if not ok:
                with contextlib.suppress(ValueError):
                    self._subs.remove(entry)
                self._routes.clear()

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` bound to ``topic`` and ``qos``.

        The frame is written without awaiting. QoS 1 and 2: a packet id is allocated per
        message and ``tag`` is passed to the ack handler when the flow completes (PUBACK for
        QoS 1; PUBCOMP, after PUBREC/PUBREL, for QoS 2). Returns False when not connected or
        (QoS >= 1) when all 65535 packet ids are in flight.
        """
        if qos not in (0, 1, 2):
            raise TransportError(f"mqtt transport supports QoS 0, 1 and 2, not {qos}")
        raw_topic = topic.encode("utf-8")
        if not raw_topic or "+" in topic or "#" in topic:
            raise TransportError(f"invalid topic to publish to: {topic!r}")
        client = self
        size = -1
        prefix = b""

        if qos == 0:

            def send_qos0(payload: bytes, tag: int) -> bool:
                nonlocal size, prefix
                write = client._write
                if write is None:
                    return False
                if client._write_paused and client.pending_write_bytes() >= client._max_pending:
                    client.sends_refused += 1
                    return False
                n = len(payload)
                if n != size:
                    prefix = publish_prefix(raw_topic, n, 0)
                    size = n
                write(prefix + payload)
                client._activity = True
                return True

            return send_qos0

        inflight = self._inflight
        requests = self._requests
        frames = self._frames
        pack = _pack_u16

        def send_qos1(payload: bytes, tag: int) -> bool:
            nonlocal size, prefix
            write = client._write
            if write is None:
                return False
            if (
                client._write_paused and client.pending_write_bytes() >= client._max_pending
            ) or len(inflight) * len(payload) >= client._max_pending:
                client.sends_refused += 1
                return False
            pid = client._next_pid
            if pid in inflight or pid in requests:
                pid = client._allocate_packet_id()
                if not pid:
                    return False
            client._next_pid = pid + 1 if pid < MAX_PACKET_ID else 1
            n = len(payload)
            if n != size:
                prefix = publish_prefix(raw_topic, n, 1)
                size = n
            frame = prefix + pack(pid) + payload
            inflight[pid] = tag
            frames[pid] = frame
            write(frame)
            client._activity = True
            return True

        if qos == 1:
            return send_qos1

        backlog = self._qos2_backlog

        def send_qos2(payload: bytes, tag: int) -> bool:
            nonlocal size, prefix
            if client._write is None:
                return False
            queued = client._qos2_active() + len(backlog)
            if (
                client._write_paused and client.pending_write_bytes() >= client._max_pending
            ) or queued * len(payload) >= client._max_pending:
                client.sends_refused += 1
                return False
            n = len(payload)
            if n != size:
                prefix = publish_prefix(raw_topic, n, 2)
                size = n
            if backlog or client._qos2_active() >= client._qos2_window:
                backlog.append((prefix, payload, tag))
                return True
            return client._send_qos2(prefix, payload, tag)

        return send_qos2

    def _qos2_active(self) -> int:
        return len(self._qos2_out) + len(self._qos2_comp)

    def _send_qos2(self, prefix: bytes, payload: bytes, tag: int) -> bool:
        write = self._write
        if write is None:
            return False
        pid = self._allocate_packet_id()
        if not pid:
            return False
        frame = prefix + _pack_u16(pid) + payload
        self._inflight[pid] = tag
        self._frames[pid] = frame
        self._qos2_out.add(pid)
        write(frame)
        self._activity = True
        return True

    def _release_qos2_backlog(self) -> None:
        backlog = self._qos2_backlog
        while backlog and self._qos2_active() < self._qos2_window and self._write is not None:
            prefix, payload, tag = backlog.popleft()
            if not self._send_qos2(prefix, payload, tag):
                backlog.appendleft((prefix, payload, tag))
                return

    def _resend_unacknowledged(self, transport: asyncio.Transport) -> None:
        """After CONNACK of a persistent session: DUP-resend PUBLISHes, resend PUBRELs."""
        if self._inflight:
            for pid in list(self._inflight):
                if pid in self._qos2_comp:
                    transport.write(bytes((0x62, 2, pid >> 8, pid & 0xFF)))
                else:
                    frame = self._frames.get(pid)
                    if frame is not None:
                        transport.write(bytes((frame[0] | 0x08,)) + frame[1:])
            self._emit(
                "resent",
                {"client_id": self._options.client_id, "messages": len(self._inflight)},
            )
        self._release_qos2_backlog()

    def _coalesce(self, frame: bytes) -> None:
        """Queue a PUBLISH for one write at the end of this loop iteration.

        One ``send`` syscall per PUBLISH cost most of a generator core at 50K msg/s (see
        docs/performance.md); a burst of sends now costs one. Large frames go out at once.
        """
        out = self._out
        if len(frame) >= _COALESCE_MAX:
            self._flush_out()
            transport = self._transport
            if transport is not None:
                transport.write(frame)
            return
        out += frame
        if not self._out_scheduled:
            self._out_scheduled = True
            loop = self._out_loop
            assert loop is not None
            loop.call_soon(self._flush_out)

    def _flush_out(self) -> None:
        self._out_scheduled = False
        out = self._out
        if not out:
            return
        self._out = bytearray()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(out)

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Call ``handler(tag, t_ack_ns)`` for every PUBACK of a QoS 1 publish."""
        self._ack_handler = handler

    def pending_write_bytes(self) -> int:
        """Bytes queued in the client and in the transport's write buffer."""
        transport = self._transport
        if transport is None:
            return 0
        return len(self._out) + transport.get_write_buffer_size()

    async def flush(self, timeout_s: float) -> None:
        """Wait for the write buffer to drain and all QoS 1 acks, at most ``timeout_s``."""
        transport = self._transport
        if transport is None:
            return
        self._flush_out()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                if transport.get_write_buffer_size() > 0 and not transport.is_closing():
                    waiter: asyncio.Future[None] = loop.create_future()
                    self._drain_waiter = waiter
                    try:
                        await drain_write_buffer(transport, waiter, self._write_high)
                    finally:
                        self._drain_waiter = None
                if self._inflight and self._transport is not None:
                    ack_waiter: asyncio.Future[None] = loop.create_future()
                    self._ack_waiter = ack_waiter
                    try:
                        await ack_waiter
                    finally:
                        self._ack_waiter = None

    async def close(self) -> None:
        """Send DISCONNECT, close the socket and wait for it to go; never raises."""
        transport = self._transport
        if transport is None:
            return
        self._closing = True
        self._cancel_keepalive()
        try:
            self._flush_out()
            if self._connected and not transport.is_closing():
                transport.write(DISCONNECT_BYTES)
            self._connected = False
            self._write = None
            transport.close()
            lost = self._lost
            if lost is not None and not lost.done():
                timeout = float(self._options.extra.get("close_timeout_s", 5.0))
                try:
                    async with asyncio.timeout(timeout):
                        await asyncio.shield(lost)
                except TimeoutError:
                    transport.abort()
        except Exception:  # close() must never raise: the connection is going away anyway
            with contextlib.suppress(Exception):
                transport.abort()

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport, set TCP_NODELAY and generous write-buffer limits."""
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        self._lost = asyncio.get_running_loop().create_future()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=self._write_high)

    def data_received(self, data: bytes) -> None:
        """Parse a read: deliver PUBLISHes, handle acks, answer QoS 1 with PUBACKs."""
        self._now = time.time_ns()
        try:
            self._parser.feed(data)
        except MqttCodecError as exc:
            self._protocol_failure(f"malformed packet from broker: {exc}")
            return
        except MqttProtocolError as exc:
            self._protocol_failure(str(exc))
            return
        finally:
            if self._acks_out:
                transport = self._transport
                if transport is not None and not transport.is_closing():
                    transport.write(b"".join(self._acks_out))
                    self._activity = True
                self._acks_out.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        """Mark the client disconnected, fail waiters and report a ``disconnected`` event."""
        was_connected = self._connected
        self._connected = False
        self._write = None
        self._transport = None
        self._out = bytearray()
        self._cancel_keepalive()
        reason = self._lost_reason or (str(exc) if exc else None) or "connection closed"
        failure = TransportError(f"{self._where()}: {reason}")
        if self._connack is not None and not self._connack.done():
            self._connack.set_exception(
                TransportError(f"connection closed by the broker before CONNACK ({reason})")
            )
        for future in self._requests.values():
            if not future.done():
                future.set_exception(failure)
        for waiter in (self._drain_waiter, self._ack_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        if was_connected or self._closing:
            self._emit(
                "disconnected",
                {
                    "client_id": self._options.client_id,
                    "reason": reason if not self._closing else "closed by client",
                    "expected": self._closing,
                    "unacked": len(self._inflight),
                },
            )

    def pause_writing(self) -> None:
        """The write buffer passed its high-water mark: sends are bounded from now on."""
        self._write_paused = True
        if self._drain_waiter is None:
            self._emit("write_paused", {"buffered": self.pending_write_bytes()})

    def resume_writing(self) -> None:
        """The write buffer drained below its low-water mark."""
        self._write_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ internals

    def _on_publish(
        self, topic: bytes, payload: memoryview, qos: int, packet_id: int, flags: int
    ) -> None:
        if qos:
            if qos == 1:
                self._acks_out.append(bytes((0x40, 2, packet_id >> 8, packet_id & 0xFF)))
            else:
                self._acks_out.append(PubRec(packet_id).encode())
                if packet_id in self._qos2_in:
                    return  # a retransmission of a message already delivered
                self._qos2_in.add(packet_id)
        handler = self._routes.get(topic)
        if handler is None:
            handler = self._route(topic)
            if handler is None:
                self.unrouted += 1
                return
        handler(payload, self._now)

    def _on_ack(self, kind: int, packet_id: int) -> None:
        if kind == PUBREC:
            # QoS 2 step 2: release the message; the flow completes with PUBCOMP.
            if packet_id in self._qos2_out:
                self._qos2_out.discard(packet_id)
                self._qos2_comp.add(packet_id)
                self._frames.pop(packet_id, None)
                self._acks_out.append(bytes((0x62, 2, packet_id >> 8, packet_id & 0xFF)))
            return
        if kind in (PUBACK, PUBCOMP):
            tag = self._inflight.pop(packet_id, None)
            if tag is not None:
                if kind == PUBACK:
                    self._frames.pop(packet_id, None)
                    if self._qos2_out and packet_id in self._qos2_out:
                        # A broker without QoS 2 (RabbitMQ's MQTT plugin) answers PUBACK.
                        self._qos2_out.discard(packet_id)
                        self.qos2_acked_as_qos1 += 1
                        if self._qos2_backlog:
                            self._release_qos2_backlog()
                else:
                    self._qos2_comp.discard(packet_id)
                    if self._qos2_backlog:
                        self._release_qos2_backlog()
                handler = self._ack_handler
                if handler is not None:
                    handler(tag, self._now)
                if not self._inflight:
                    waiter = self._ack_waiter
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
        elif kind == PUBREL:
            self._qos2_in.discard(packet_id)
            self._acks_out.append(PubComp(packet_id).encode())

    def _route(self, topic: bytes) -> MessageHandler | None:
        try:
            text = topic.decode("utf-8")
        except UnicodeDecodeError:
            return None
        for topic_filter, handler in self._subs:
            if topic_matches(topic_filter, text):
                if len(self._routes) >= _ROUTE_CACHE_MAX:
                    self._routes.clear()
                self._routes[topic] = handler
                return handler
        return None

    def _handle(self, packet: Packet) -> None:
        if isinstance(packet, Connack):
            if self._connack is None or self._connack.done():
                raise MqttProtocolError("unexpected second CONNACK")
            self._connack.set_result(packet)
        elif isinstance(packet, Suback | Unsuback):
            future = self._requests.get(packet.packet_id)
            if future is not None and not future.done():
                future.set_result(packet)
        elif isinstance(packet, PingResp):
            self._ping_outstanding = False
        else:
            raise MqttProtocolError(f"unexpected {type(packet).__name__} from broker")

    def _protocol_failure(self, reason: str) -> None:
        self._lost_reason = reason
        self._emit("protocol_error", {"client_id": self._options.client_id, "reason": reason})
        self._abort()

    def _abort(self) -> None:
        transport = self._transport
        if transport is not None:
            transport.abort()

    def _allocate_packet_id(self) -> int:
        """Next free packet id (1..65535, wrapping, skipping ids in use), 0 if none is free."""
        pid = self._next_pid
        inflight = self._inflight
        requests = self._requests
        for _ in range(MAX_PACKET_ID):
            if pid not in inflight and pid not in requests:
                self._next_pid = pid + 1 if pid < MAX_PACKET_ID else 1
                return pid
            pid = pid + 1 if pid < MAX_PACKET_ID else 1
        return 0

    def _keepalive_tick(self) -> None:
        self._keepalive_handle = None
        transport = self._transport
        if not self._connected or transport is None:
            return
        # Ticks every keepalive/2, so with a ping after one idle tick the gap between two
        # control packets stays below the keepalive the broker enforces.
        if self._activity:
            self._activity = False
        elif self._ping_outstanding:
            self._protocol_failure("no PINGRESP from the broker within the keepalive interval")
            return
        else:
            transport.write(PINGREQ_BYTES)
            self._ping_outstanding = True
        self._keepalive_handle = asyncio.get_running_loop().call_later(
            self._options.keepalive_s / 2, self._keepalive_tick
        )

    def _cancel_keepalive(self) -> None:
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None

    def _connect_packet(self) -> Connect:
        extra = self._options.extra
        password = extra.get("password")
        if isinstance(password, str):
            password = password.encode("utf-8")
        will_spec = extra.get("will")
        will: Will | None = None
        if will_spec is not None:
            payload = will_spec.get("payload", b"")
            if isinstance(payload, str):
                payload = payload.encode("utf-8")
            will = Will(
                str(will_spec["topic"]),
                bytes(payload),
                int(will_spec.get("qos", 0)),
                bool(will_spec.get("retain", False)),
            )
        username = extra.get("username")
        return Connect(
            client_id=self._options.client_id,
            clean_session=self._options.clean_session,
            keepalive=self._options.keepalive_s,
            username=str(username) if username is not None else None,
            password=password,
            will=will,
        )

    def _emit(self, kind: str, details: dict[str, Any]) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(kind, details)
