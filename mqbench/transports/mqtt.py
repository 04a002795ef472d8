"""Lean MQTT 3.1.1 client transport (QoS 0, 1 and 2) on a plain ``asyncio.Protocol``.

Built for the hot path of a benchmark: a sender is a closure that frames a PUBLISH with one
concatenation and hands it to the ``StreamConnection`` (one write per loop iteration)
without awaiting; a read is parsed in one
loop (:class:`~mqbench.wire.mqtt.parser.StreamParser`) that calls the subscriber's
handler per message with one receive timestamp per read; PUBACKs for inbound QoS 1 messages
are written once per read. Works with uvloop and with the default asyncio loop.

``ClientOptions.username``/``password`` go into CONNECT; ``ClientOptions.tls`` makes it
MQTT over TLS. Options understood in ``ClientOptions.extra``:

``will``
    ``{"topic": str, "payload": bytes | str, "qos": int, "retain": bool}``.
``request_timeout_s``
    How long ``subscribe`` waits for SUBACK (default: ``connect_timeout_s``).
``max_inflight_qos2``
    QoS 2 publishes in flight at once (default 20); more wait in the client, in order.
    MQTT 3.1.1 has no receive maximum, yet mosquitto answers PUBREC to a QoS 2 PUBLISH beyond
    its ``max_inflight_messages`` (20) and drops it, so an unbounded burst loses messages
    while every flow "completes". Time spent waiting counts in the latency (which is measured
    from the intended send time).

and the socket options of ``mqbench.transports.stream`` (``write_buffer_high_bytes``,
``close_timeout_s``, ``coalesce_writes``).

Persistent sessions (``clean_session`` false): QoS 1/2 publishes not yet acknowledged when
the connection drops are sent again with the DUP flag after the next CONNACK (and PUBREL
again for those past PUBREC), as MQTT 3.1.1 section 4.4 requires.

Inbound QoS 2 (MQTT 3.1.1 section 4.3.3, method B): a message is delivered once when its
PUBLISH first arrives; until its PUBREL, a PUBLISH with the same packet id is acknowledged
(PUBREC) and not delivered again. A CONNACK without a session (session present 0) forgets
those ids, as the broker did (section 3.2.2.2). Two broker faults are counted
(``ClientStats``): a different message on an id still awaiting PUBREL (dropped, as the
spec requires: ``qos2_id_reused``) and a message the broker sends again, DUP set, after it
released it with PUBREL (a new publication by the spec, so delivered twice:
``qos2_redelivered``).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections import deque
from typing import Final

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
from mqbench.transports.events import Connected, Resent, Subscribed
from mqbench.transports.stream import StreamConnection
from mqbench.wire import limits
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

_ROUTE_CACHE_MAX: Final = 4096
_RELEASED_MAX: Final = 1024
"""Inbound QoS 2 messages remembered after their PUBREL (to recognise the broker sending
one again): the last 1024, far more than a reconnect leaves in flight."""
_DUP: Final = 0x08
_pack_u16 = struct.Struct(">H").pack
_UNSUPPORTED = TransportErrorKind.UNSUPPORTED

CAPABILITIES = TransportCapabilities(
    max_qos=2,
    persistent_sessions=True,
    wildcard_filters=True,
    tls=None,
    auth=None,
    max_payload=limits.MQTT,
    compiled="mqtt",
)
"""What the mqtt client can do."""


class MqttTransport:
    """The ``mqtt`` transport: MQTT 3.1.1 clients, QoS 0, 1 and 2."""

    name: str = "mqtt"
    protocol: str = "mqtt"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> MqttClient:
        """Return a new, unconnected client."""
        return MqttClient(endpoint, options)


class MqttClient:
    """One MQTT connection implementing :class:`mqbench.transports.base.Client`.

    The client reconnects with the same object (``connect`` again after a loss); with a
    persistent session it keeps its unacknowledged publishes and subscriptions across.
    """

    __slots__ = (
        "_ack_handler",
        "_acks_out",
        "_activity",
        "_connack",
        "_endpoint",
        "_frames",
        "_inflight",
        "_next_pid",
        "_now",
        "_options",
        "_parser",
        "_ping_outstanding",
        "_qos2_backlog",
        "_qos2_comp",
        "_qos2_in",
        "_qos2_out",
        "_qos2_released",
        "_qos2_window",
        "_requests",
        "_routes",
        "_sent_at_tick",
        "_stream",
        "_subs",
        "qos2_acked_as_qos1",
        "qos2_id_reused",
        "qos2_redelivered",
        "unrouted",
    )

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._stream = StreamConnection(
            f"mqtt broker at {endpoint.host}:{endpoint.port}", options, self._on_data, self._on_lost
        )
        self._parser = StreamParser(self._on_publish, self._on_ack, self._handle)
        self._now = 0
        self._acks_out: list[bytes] = []
        self._activity = False
        """A control packet or ack was written since the last keepalive tick."""
        self._sent_at_tick = 0
        self._inflight: dict[int, int] = {}
        self._requests: dict[int, asyncio.Future[Packet]] = {}
        self._next_pid = 1
        self._ack_handler: AckHandler | None = None
        self._subs: list[tuple[str, MessageHandler]] = []
        self._routes: dict[bytes, MessageHandler] = {}
        self._qos2_in: dict[int, int] = {}
        """Inbound QoS 2 messages delivered and awaiting PUBREL: packet id -> payload CRC."""
        self._qos2_released: dict[int, int] = {}
        """The last ``_RELEASED_MAX`` inbound QoS 2 messages released by PUBREL (id -> CRC)."""
        self._qos2_out: set[int] = set()
        """QoS 2 publishes waiting for PUBREC."""
        self._qos2_comp: set[int] = set()
        """QoS 2 publishes past PUBREC, waiting for PUBCOMP."""
        self._qos2_backlog: deque[tuple[bytes, bytes, int]] = deque()
        """QoS 2 publishes waiting for a free in-flight slot: (prefix, payload, tag)."""
        self._qos2_window = max(1, int(options.extra.get("max_inflight_qos2", 20)))
        self._frames: dict[int, tuple[bytes, bytes]] = {}
        """PUBLISH frames (head, payload) sent and not yet acknowledged (PUBACK / PUBREC),
        for resending."""
        self._connack: asyncio.Future[Connack] | None = None
        self._ping_outstanding = False
        self.unrouted = 0
        """Messages that matched no subscription of this client (dropped)."""
        self.qos2_acked_as_qos1 = 0
        """QoS 2 publishes the broker answered with PUBACK (it downgraded them to QoS 1)."""
        self.qos2_id_reused = 0
        """Inbound QoS 2 PUBLISHes of a different message on a packet id still awaiting
        PUBREL: dropped (MQTT 3.1.1 section 4.3.3), so lost by the broker's fault."""
        self.qos2_redelivered = 0
        """Inbound QoS 2 messages the broker sent again (DUP) after releasing them with
        PUBREL: delivered twice (the spec makes them new publications)."""

    # ------------------------------------------------------------------ Client API

    @property
    def connected(self) -> bool:
        """True between a successful CONNACK and the loss or close of the connection."""
        return self._stream.connected

    def stats(self) -> ClientStats:
        """Sends refused because the output buffer (or the unacknowledged QoS >= 1 frames
        kept for resending) exceeded ``max_pending_bytes`` (``Sender``); QoS 2 publishes
        completed as QoS 1; messages that matched no subscription."""
        return ClientStats(
            sends_refused=self._stream.sends_refused,
            qos2_acked_as_qos1=self.qos2_acked_as_qos1,
            qos2_id_reused=self.qos2_id_reused,
            qos2_redelivered=self.qos2_redelivered,
            unrouted=self.unrouted,
            kernel_stamped_reads=self._stream.kernel_stamped_reads,
            user_stamped_reads=self._stream.user_stamped_reads,
        )

    @property
    def inflight(self) -> int:
        """QoS 1/2 publishes not yet acknowledged (including QoS 2 ones not yet sent)."""
        return len(self._inflight) + len(self._qos2_backlog)

    async def connect(self) -> None:
        """Open TCP, send CONNECT and wait for a successful CONNACK within the timeout."""
        stream = self._stream
        connack = await stream.connect(self._endpoint, self._handshake, tls=self._options.tls)
        if connack.return_code != 0:
            stream.abort()
            text = CONNACK_MESSAGES.get(connack.return_code, "unknown reason")
            user = self._options.username
            who = f" (user {user!r})" if user is not None else ""
            raise TransportError(
                f"{stream.where} refused the connection of {self._options.client_id!r}{who}: "
                f"{text} (CONNACK return code {connack.return_code})",
                TransportErrorKind.CONNECT_FAILED,
            )
        if not stream.writable:
            raise TransportError(
                f"cannot connect to {stream.where}: connection closed",
                TransportErrorKind.CONNECT_FAILED,
            )
        # Ticks every keepalive/2, so with a ping after one idle tick the gap between two
        # control packets stays below the keepalive the broker enforces.
        stream.established(self._options.keepalive_s / 2, self._keepalive_tick)
        self._resend_unacknowledged()
        stream.emit(
            Connected(
                self._options.client_id,
                stream.where,
                session_present=bool(connack.session_present),
            )
        )

    async def _handshake(self) -> Connack:
        """Send CONNECT (state of a clean session forgotten first) and await the CONNACK."""
        connack: asyncio.Future[Connack] = asyncio.get_running_loop().create_future()
        self._connack = connack
        self._ping_outstanding = False
        self._activity = False
        self._parser = StreamParser(self._on_publish, self._on_ack, self._handle)
        if self._options.clean_session:
            # A clean session forgets subscriptions and unacknowledged publishes.
            self._inflight.clear()
            self._frames.clear()
            self._qos2_in.clear()
            self._qos2_released.clear()
            self._qos2_out.clear()
            self._qos2_comp.clear()
            self._qos2_backlog.clear()
            self._subs.clear()
            self._routes.clear()
        self._stream.stage = "no CONNACK"
        self._stream.write(self._connect_packet().encode())
        return await connack

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Subscribe ``on_message`` to ``topic`` and wait for a successful SUBACK."""
        require_qos(qos, "mqtt", CAPABILITIES)
        stream = self._stream
        stream.require_connected(f"subscribe to {topic!r}")
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
            stream.write(Subscribe(pid, ((topic, qos),)).encode())
            self._activity = True
            async with asyncio.timeout(timeout):
                suback = await future
            if not isinstance(suback, Suback):
                raise TransportError(f"subscribe to {topic!r}: unexpected answer {suback!r}")
            code = suback.return_codes[0]
            if code == SUBACK_FAILURE:
                raise TransportError(
                    f"{stream.where} refused the subscription to {topic!r}",
                    TransportErrorKind.REJECTED,
                )
            ok = True
            stream.emit(Subscribed(topic, qos, granted_qos=code))
        except TimeoutError:
            raise TransportError(
                f"subscribe to {topic!r}: no SUBACK from {stream.where} within {timeout:g} s"
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
        QoS 1; PUBCOMP, after PUBREC/PUBREL, for QoS 2). Returns False when not connected,
        when the output is full or (QoS >= 1) when all 65535 packet ids are in flight.
        """
        require_qos(qos, "mqtt", CAPABILITIES)
        raw_topic = topic.encode("utf-8")
        if not raw_topic or "+" in topic or "#" in topic:
            raise TransportError(f"invalid topic to publish to: {topic!r}", _UNSUPPORTED)
        client = self
        stream = self._stream
        send_frame = stream.send
        size = -1
        prefix = b""

        if qos == 0:
            return stream.frame_sender(lambda n: publish_prefix(raw_topic, n, 0))

        inflight = self._inflight
        requests = self._requests
        frames = self._frames
        pack = _pack_u16

        def send_qos1(payload: bytes, tag: int) -> bool:
            nonlocal size, prefix
            # Unacknowledged frames are kept for resending: they count against the bound.
            if len(inflight) * len(payload) >= stream.max_pending:
                if stream.connected:
                    stream.sends_refused += 1
                return False
            pid = client._next_pid
            if pid in inflight or pid in requests:
                pid = client._allocate_packet_id()
                if not pid:
                    return False
            n = len(payload)
            if n != size:
                prefix = publish_prefix(raw_topic, n, 1)
                size = n
            head = prefix + pack(pid)
            if not send_frame(head, payload):
                return False
            client._next_pid = pid + 1 if pid < MAX_PACKET_ID else 1
            inflight[pid] = tag
            frames[pid] = (head, payload)
            return True

        if qos == 1:
            return send_qos1

        backlog = self._qos2_backlog

        def send_qos2(payload: bytes, tag: int) -> bool:
            nonlocal size, prefix
            if not stream.connected:
                return False
            queued = client._qos2_active() + len(backlog)
            if stream.backpressured or queued * len(payload) >= stream.max_pending:
                stream.sends_refused += 1
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
        pid = self._allocate_packet_id()
        if not pid:
            return False
        head = prefix + _pack_u16(pid)
        if not self._stream.send(head, payload):
            return False
        self._inflight[pid] = tag
        self._frames[pid] = (head, payload)
        self._qos2_out.add(pid)
        return True

    def _release_qos2_backlog(self) -> None:
        backlog = self._qos2_backlog
        while backlog and self._qos2_active() < self._qos2_window and self._stream.connected:
            prefix, payload, tag = backlog.popleft()
            if not self._send_qos2(prefix, payload, tag):
                backlog.appendleft((prefix, payload, tag))
                return

    def _resend_unacknowledged(self) -> None:
        """After CONNACK of a persistent session: DUP-resend PUBLISHes, resend PUBRELs."""
        if self._inflight:
            write = self._stream.write
            for pid in list(self._inflight):
                if pid in self._qos2_comp:
                    write(bytes((0x62, 2, pid >> 8, pid & 0xFF)))
                else:
                    frame = self._frames.get(pid)
                    if frame is not None:
                        head, payload = frame
                        write(bytes((head[0] | 0x08,)) + head[1:] + payload)
            self._stream.emit(Resent(self._options.client_id, len(self._inflight)))
        self._release_qos2_backlog()

    def publish_frame(self, topic: str, payload_bytes: int) -> tuple[bytes, bytes]:
        """A QoS 0 PUBLISH's fixed header and topic before a payload (``LendsSockets``)."""
        return publish_prefix(topic.encode("utf-8"), payload_bytes, 0), b""

    def lend_socket(self) -> int:
        """The established session's socket, for the compiled core (``LendsSockets``)."""
        if self._parser.buffered:
            raise TransportError(
                f"cannot lend the session of {self._stream.where}: part of a packet is read",
                _UNSUPPORTED,
            )
        return self._stream.lend()

    def lost_lent_session(self, reason: str) -> None:
        """The core lost the lent session: report it and allow a reconnect (``LendsSockets``)."""
        self._stream.lost_while_lent(reason)

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Call ``handler(tag, t_ack_ns)`` for every completed QoS 1/2 publish."""
        self._ack_handler = handler

    def pending_write_bytes(self) -> int:
        """Bytes queued in the client and in the transport's write buffer."""
        return self._stream.pending_bytes()

    async def flush(self, timeout_s: float) -> None:
        """Wait for the write buffer to drain and all QoS 1/2 acks, at most ``timeout_s``."""
        await self._stream.flush(timeout_s, unsettled=lambda: bool(self._inflight))

    async def close(self) -> None:
        """Send DISCONNECT, close the socket and wait for it to go; never raises."""
        await self._stream.close(DISCONNECT_BYTES)

    # ------------------------------------------------------------------ stream callbacks

    def _on_data(self, data: bytes) -> None:
        """Parse a read: deliver PUBLISHes, handle acks, answer QoS 1 with PUBACKs."""
        self._now = self._stream.receive_ns()
        try:
            self._parser.feed(data)
        except MqttCodecError as exc:
            self._stream.fail(f"malformed packet from broker: {exc}")
        except MqttProtocolError as exc:
            self._stream.fail(str(exc))
        finally:
            if self._acks_out:
                self._stream.write(b"".join(self._acks_out))
                self._activity = True
                self._acks_out.clear()

    def _on_lost(self, failure: TransportError) -> int | None:
        """Fail the SUBACK waits; the disconnect event counts unacknowledged publishes."""
        for future in self._requests.values():
            if not future.done():
                future.set_exception(failure)
        return len(self._inflight)

    # ------------------------------------------------------------------ parser callbacks

    def _on_publish(
        self, topic: bytes, payload: memoryview, qos: int, packet_id: int, flags: int
    ) -> None:
        if qos:
            if qos == 1:
                self._acks_out.append(bytes((0x40, 2, packet_id >> 8, packet_id & 0xFF)))
            else:
                self._acks_out.append(PubRec(packet_id).encode())
                if not self._first_qos2_delivery(packet_id, payload, flags):
                    return
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
                    self._stream.settled()
        elif kind == PUBREL:
            crc = self._qos2_in.pop(packet_id, None)
            if crc is not None:
                released = self._qos2_released
                released.pop(packet_id, None)
                released[packet_id] = crc
                if len(released) > _RELEASED_MAX:
                    del released[next(iter(released))]
            self._acks_out.append(PubComp(packet_id).encode())

    def _first_qos2_delivery(self, packet_id: int, payload: memoryview, flags: int) -> bool:
        """Whether an inbound QoS 2 PUBLISH is delivered: not while its id awaits PUBREL
        (a retransmission, or a broker's reuse of the id: counted). A resend (DUP) of a
        message already released is delivered again and counted."""
        crc = zlib.crc32(payload)
        held = self._qos2_in.get(packet_id)
        if held is not None:
            if held != crc:
                self.qos2_id_reused += 1
            return False
        if flags & _DUP and self._qos2_released.get(packet_id) == crc:
            self.qos2_redelivered += 1
        self._qos2_in[packet_id] = crc
        return True

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
            if packet.return_code == 0 and not packet.session_present:
                # The broker kept no session: the ids it had not released are free again
                # (here, before the PUBLISHes that may follow in the same read).
                self._qos2_in.clear()
                self._qos2_released.clear()
            self._connack.set_result(packet)
        elif isinstance(packet, Suback | Unsuback):
            future = self._requests.get(packet.packet_id)
            if future is not None and not future.done():
                future.set_result(packet)
        elif isinstance(packet, PingResp):
            self._ping_outstanding = False
        else:
            raise MqttProtocolError(f"unexpected {type(packet).__name__} from broker")

    # ------------------------------------------------------------------ helpers

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
        sent = self._stream.sent  # publishes count as activity too
        if self._activity or sent != self._sent_at_tick:
            self._activity = False
            self._sent_at_tick = sent
        elif self._ping_outstanding:
            self._stream.fail("no PINGRESP from the broker within the keepalive interval")
        else:
            self._stream.write(PINGREQ_BYTES)
            self._ping_outstanding = True

    def _connect_packet(self) -> Connect:
        extra = self._options.extra
        password = self._options.password
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
        return Connect(
            client_id=self._options.client_id,
            clean_session=self._options.clean_session,
            keepalive=self._options.keepalive_s,
            username=self._options.username,
            password=password.encode("utf-8") if password is not None else None,
            will=will,
        )
