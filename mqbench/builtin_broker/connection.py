"""One client connection: parsing, CONNECT, SUBSCRIBE, acks, keep-alive, batched writes.

The hot path is :meth:`Connection._on_publish` (the codec's fast path for MQTT 3.1.1
PUBLISH) which hands the raw topic and payload to :meth:`Broker.publish` without creating
packet objects. Outgoing frames are appended to ``self.out`` and written with one
``transport.write`` per connection per event-loop iteration (:meth:`Broker.flush_writes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import uuid
from collections import deque
from typing import Any, Final, Protocol, cast

from mqbench.builtin_broker.config import BrokerConfig, ClientType
from mqbench.builtin_broker.message import Message
from mqbench.builtin_broker.session import Outgoing, PendingAck, Session, Subscription
from mqbench.builtin_broker.shared import is_shared, parse_shared
from mqbench.wire.mqtt.errors import MqttCodecError, MqttProtocolError
from mqbench.wire.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    encode_publish5,
    publish_prefix,
)
from mqbench.wire.mqtt.parser import StreamParser
from mqbench.wire.mqtt.primitives import PROTOCOL_LEVEL_5, PUBACK, PUBCOMP, PUBREC, PUBREL
from mqbench.wire.mqtt.properties import (
    PROP_ASSIGNED_CLIENT_ID,
    PROP_AUTH_METHOD,
    PROP_MAXIMUM_PACKET_SIZE,
    PROP_REASON_STRING,
    PROP_RECEIVE_MAXIMUM,
    PROP_RETAIN_AVAILABLE,
    PROP_SERVER_KEEP_ALIVE,
    PROP_SESSION_EXPIRY,
    PROP_SHARED_SUB_AVAILABLE,
    PROP_SUB_ID_AVAILABLE,
    PROP_SUBSCRIPTION_ID,
    PROP_TOPIC_ALIAS,
    PROP_TOPIC_ALIAS_MAXIMUM,
    PROP_WILDCARD_SUB_AVAILABLE,
    PROP_WILL_DELAY,
    SERVER_DISCONNECT_PROPERTIES,
    Properties,
    encode_properties,
    filter_properties,
)
from mqbench.wire.mqtt.reason_codes import (
    CONNACK_BAD_PROTOCOL,
    CONNACK_ID_REJECTED,
    CONNACK_NOT_AUTHORIZED,
    RC_BAD_AUTH_METHOD,
    RC_BAD_VERSION,
    RC_DISCONNECT_WITH_WILL,
    RC_IMPLEMENTATION,
    RC_KEEPALIVE_TIMEOUT,
    RC_NO_SUBSCRIPTION,
    RC_NOT_AUTHORIZED,
    RC_PROTOCOL_ERROR,
    RC_RECEIVE_MAX_EXCEEDED,
    RC_TOPIC_ALIAS_INVALID,
    RC_TOPIC_FILTER_INVALID,
    SUBACK_FAILURE,
)
from mqbench.wire.topics import valid_filter

log = logging.getLogger("mqbench.builtin_broker")

CONNECT_TIMEOUT_S: Final = 10.0
TOPIC_ALIAS_MAXIMUM: Final = 1024
"""Topic aliases an MQTT 5 client may set per connection (announced in CONNACK). The
broker never sends aliases itself, whatever the client's own topic alias maximum."""
PINGRESP_FRAME: Final = b"\xd0\x00"
_NEVER: Final = 0xFFFFFFFF


class BrokerPort(Protocol):
    """What a connection needs from the broker that accepted it (``server.Broker``).

    The connection depends on this port, never on the server class, so the dependency runs
    one way: the server creates connections and implements the port.
    """

    @property
    def config(self) -> BrokerConfig:
        """The broker's settings (limits announced to and enforced on clients)."""
        ...

    def classify(
        self, client_id: str, username: str | None, password: bytes | None
    ) -> ClientType | None:
        """The client type of a CONNECT, or None when the client is not authorized."""
        ...

    def connection_opened(self, conn: Connection) -> None:
        """A socket was accepted."""
        ...

    def connection_closed(self, conn: Connection) -> None:
        """The socket of ``conn`` is gone: will message, session expiry or removal."""
        ...

    def protocol_error(self, conn: Connection) -> None:
        """``conn`` is closed because its client broke the protocol (counted)."""
        ...

    def mark_dirty(self, conn: Connection) -> None:
        """``conn`` has frames queued: write them at the end of this loop iteration."""
        ...

    def flush_conn(self, conn: Connection) -> None:
        """Write ``conn``'s queued frames now (before closing it)."""
        ...

    def attach(
        self,
        conn: Connection,
        client_id: str,
        client_type: ClientType,
        clean_start: bool,
        expiry_s: int | None,
        window: int,
        will: tuple[Message, int] | None,
    ) -> tuple[Session, bool]:
        """Find or create ``client_id``'s session for ``conn``; returns (session, present)."""
        ...

    def activate(self, conn: Connection, session: Session, resume: bool) -> None:
        """The CONNACK is queued: let the session start sending."""
        ...

    def publish(
        self,
        source: Connection | None,
        topic_raw: bytes,
        topic: str | None,
        payload: bytes | memoryview,
        qos: int,
        packet_id: int,
        retain: bool,
        properties: Properties | None,
    ) -> None:
        """Route one PUBLISH from ``source`` to every subscriber."""
        ...

    def subscribe(self, session: Session, topic_filter: str, sub: Subscription) -> bool:
        """Add or replace a subscription; True when it is new."""
        ...

    def unsubscribe(self, session: Session, topic_filter: str) -> bool:
        """Remove a subscription; True when it existed."""
        ...

    def send_retained(self, session: Session, topic_filter: str, sub: Subscription) -> None:
        """Deliver the retained messages matching a new subscription."""
        ...


class Connection(asyncio.Protocol):
    """The broker side of one client connection."""

    def __init__(self, broker: BrokerPort) -> None:
        """Created by the listening server for each accepted socket."""
        self.broker = broker
        self.transport: asyncio.Transport | None = None
        self.out: list[bytes] = []
        self.session: Session | None = None
        self.client_id = ""
        self.level = 4
        self.v5 = False
        self.keepalive = 0
        self.last_rx = time.monotonic()
        self.client_max_packet = 0
        """The client's MQTT 5 maximum packet size (0: no limit)."""
        self.topic_aliases: dict[int, str] = {}
        """Topic aliases this connection's client has set (alias -> topic name)."""
        self.graceful = False
        self.closed = False
        self.acks: deque[PendingAck] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.peer = ""
        self.parser = StreamParser(
            self._on_publish,
            self._on_ack,
            self._on_packet,
            max_packet_size=broker.config.max_packet_size,
        )

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport; start the CONNECT timeout."""
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.broker.connection_opened(self)
        self._timer = asyncio.get_running_loop().call_later(CONNECT_TIMEOUT_S, self._no_connect)

    def data_received(self, data: bytes) -> None:
        """Parse a read; any protocol error closes this connection only."""
        self.last_rx = time.monotonic()
        try:
            self.parser.feed(data)
        except MqttCodecError as exc:
            self.fail(f"malformed packet: {exc}", exc.reason_code)
        except MqttProtocolError as exc:
            self.fail(str(exc), exc.reason_code)
        except Exception as exc:  # a bug must not take the broker down
            log.exception("internal error on connection %s (%s)", self.peer, self.client_id)
            self.fail(f"internal error: {type(exc).__name__}", RC_IMPLEMENTATION)

    def eof_received(self) -> bool:
        """The client half-closed: close our side too."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Hand the session back to the broker (will, expiry)."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.out.clear()
        self.broker.connection_closed(self)
        self.transport = None

    # ------------------------------------------------------------------ writing

    def write(self, frame: bytes) -> None:
        """Queue ``frame``; the broker flushes all queued frames once per loop iteration."""
        if not self.out:
            self.broker.mark_dirty(self)
        self.out.append(frame)

    def send_publish(self, out: Outgoing) -> bool:
        """Queue a QoS 1/2 PUBLISH (``Link``); False when too large for the client."""
        message = out.message
        assert message is not None
        if self.v5:
            props = message.forward_properties(time.time_ns() // 1_000_000)
            if out.sub_ids:
                props[PROP_SUBSCRIPTION_ID] = out.sub_ids
            frame = encode_publish5(
                message.topic,
                message.payload,
                out.qos,
                out.packet_id,
                encode_properties(props),
                retain=out.retain,
                dup=out.dup,
            )
        else:
            pid = out.packet_id
            frame = (
                publish_prefix(
                    message.topic, len(message.payload), out.qos, retain=out.retain, dup=out.dup
                )
                + bytes((pid >> 8, pid & 0xFF))
                + message.payload
            )
        if self.client_max_packet and len(frame) > self.client_max_packet:
            return False
        out.dup = True  # any later send of this delivery is a redelivery
        self.write(frame)
        return True

    def send_pubrel(self, packet_id: int) -> None:
        """Queue a PUBREL (``Link``)."""
        self.write(bytes((0x62, 2, packet_id >> 8, packet_id & 0xFF)))

    def ack_ready(self) -> None:
        """Write the publisher acks whose persistence is done, in PUBLISH order."""
        acks = self.acks
        while acks and acks[0].remaining == 0:
            self.write(acks.popleft().frame)

    def disconnect(self, reason_code: int, text: str = "") -> None:
        """Send an MQTT 5 DISCONNECT (3.1.1: nothing) and close after the queued writes."""
        if self.closed:
            return
        if self.v5 and self.session is not None:
            props = filter_properties(
                {PROP_REASON_STRING: text[:200]} if text else None, SERVER_DISCONNECT_PROPERTIES
            )
            self.write(Disconnect(reason_code, props).encode())
        self.broker.flush_conn(self)
        transport = self.transport
        if transport is not None:
            transport.close()
        self.closed = True

    def fail(self, why: str, reason_code: int) -> None:
        """Close because of a protocol violation (the will is published)."""
        log.info("closing %s (%s): %s", self.peer, self.client_id or "-", why)
        self.broker.protocol_error(self)
        if self.v5 and self.session is not None and not self.closed:
            self.write(Disconnect(reason_code).encode())
            self.broker.flush_conn(self)
        transport = self.transport
        if transport is not None:
            transport.close()
        self.closed = True
        self.parser = StreamParser(on_packet=self._ignore)

    @staticmethod
    def _ignore(_packet: Packet) -> None:
        return None

    # ------------------------------------------------------------------ timers

    def _no_connect(self) -> None:
        self._timer = None
        if self.session is None and self.transport is not None:
            self.fail("no CONNECT within the connect timeout", RC_PROTOCOL_ERROR)

    def _keepalive_check(self) -> None:
        self._timer = None
        if self.closed or not self.keepalive:
            return
        limit = self.keepalive * 1.5
        idle = time.monotonic() - self.last_rx
        if idle >= limit:
            self.fail(f"keep-alive timeout ({idle:.1f} s without a packet)", RC_KEEPALIVE_TIMEOUT)
            return
        self._timer = asyncio.get_running_loop().call_later(limit - idle, self._keepalive_check)

    # ------------------------------------------------------------------ parser callbacks

    def _on_publish(
        self, topic: bytes, payload: memoryview, qos: int, packet_id: int, flags: int
    ) -> None:
        session = self.session
        if session is None or self.closed:
            if self.closed:
                return
            raise MqttProtocolError("PUBLISH before CONNECT")
        if qos == 2 and packet_id in session.qos2_in:
            # A retransmission of a QoS 2 message already routed: only PUBREC again.
            self._ack_frame(bytes((0x50, 2, packet_id >> 8, packet_id & 0xFF)))
            return
        self.broker.publish(self, topic, None, payload, qos, packet_id, bool(flags & 1), None)

    def _ack_frame(self, frame: bytes) -> None:
        if self.acks:
            pending = PendingAck(frame, self.ack_ready)
            pending.remaining = 0
            self.acks.append(pending)
            self.ack_ready()
        else:
            self.write(frame)

    def _on_ack(self, kind: int, packet_id: int) -> None:
        session = self.session
        if session is None:
            if self.closed:
                return
            raise MqttProtocolError("acknowledgement before CONNECT")
        if kind == PUBACK:
            session.on_puback(packet_id)
        elif kind == PUBREC:
            session.on_pubrec(packet_id)
        elif kind == PUBCOMP:
            session.on_pubcomp(packet_id)
        elif kind == PUBREL:
            session.qos2_in.discard(packet_id)
            self.write(bytes((0x70, 2, packet_id >> 8, packet_id & 0xFF)))

    def _on_packet(self, packet: Packet) -> None:
        if self.closed:
            return
        session = self.session
        if session is None:
            if not isinstance(packet, Connect):
                raise MqttProtocolError(f"{type(packet).__name__} before CONNECT")
            self._connect(packet)
            return
        if isinstance(packet, Publish):
            self._publish_object(packet)
        elif isinstance(packet, PingReq):
            self.write(PINGRESP_FRAME)
        elif isinstance(packet, Subscribe):
            self._subscribe(packet)
        elif isinstance(packet, Unsubscribe):
            self._unsubscribe(packet)
        elif isinstance(packet, PubAck):
            session.on_puback(packet.packet_id)
        elif isinstance(packet, PubRec):
            session.on_pubrec(packet.packet_id, packet.reason_code)
        elif isinstance(packet, PubComp):
            session.on_pubcomp(packet.packet_id)
        elif isinstance(packet, PubRel):
            session.qos2_in.discard(packet.packet_id)
            self.write(bytes((0x70, 2, packet.packet_id >> 8, packet.packet_id & 0xFF)))
        elif isinstance(packet, Disconnect):
            self._disconnect(packet)
        elif isinstance(packet, Connect):
            raise MqttProtocolError("second CONNECT")
        elif isinstance(packet, Auth):
            raise MqttProtocolError("AUTH without an authentication method")
        else:
            raise MqttProtocolError(f"unexpected {type(packet).__name__} from a client")

    # ------------------------------------------------------------------ packets

    def _publish_object(self, packet: Publish) -> None:
        """MQTT 5 PUBLISH (properties parsed by the codec)."""
        session = self.session
        assert session is not None
        props = packet.properties
        topic = packet.topic
        if props and PROP_SUBSCRIPTION_ID in props:
            raise MqttProtocolError("PUBLISH from a client with a subscription identifier")
        if props and PROP_TOPIC_ALIAS in props:
            topic = self._resolve_alias(topic, props[PROP_TOPIC_ALIAS])
            props = {k: v for k, v in props.items() if k != PROP_TOPIC_ALIAS}
        elif not topic:
            raise MqttProtocolError("PUBLISH with an empty topic name and no topic alias")
        pid = packet.packet_id
        if packet.qos == 2 and pid in session.qos2_in:
            self._ack_frame(bytes((0x50, 2, pid >> 8, pid & 0xFF)))
            return
        if (
            packet.qos
            and len(self.acks) + len(session.qos2_in) >= self.broker.config.receive_maximum
        ):
            raise MqttProtocolError("receive maximum exceeded", RC_RECEIVE_MAX_EXCEEDED)
        self.broker.publish(
            self,
            topic.encode("utf-8"),
            topic,
            packet.payload,
            packet.qos,
            pid,
            packet.retain,
            props or None,
        )

    def _resolve_alias(self, topic: str, alias: object) -> str:
        """The topic of a PUBLISH with a topic alias; a topic name (re)sets the alias."""
        if not isinstance(alias, int) or not 0 < alias <= TOPIC_ALIAS_MAXIMUM:
            raise MqttProtocolError(
                f"topic alias {alias} outside 1..{TOPIC_ALIAS_MAXIMUM}", RC_TOPIC_ALIAS_INVALID
            )
        if topic:
            self.topic_aliases[alias] = topic
            return topic
        known = self.topic_aliases.get(alias)
        if known is None:
            raise MqttProtocolError(f"topic alias {alias} was never set on this connection")
        return known

    def _connect(self, packet: Connect) -> None:
        broker = self.broker
        config = broker.config
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        level = packet.protocol_level
        known = (packet.protocol_name == "MQTT" and level in (4, 5)) or (
            packet.protocol_name == "MQIsdp" and level == 3
        )
        self.level = level
        if level >= PROTOCOL_LEVEL_5:
            self.v5 = True
            self.parser.protocol_level = PROTOCOL_LEVEL_5
        if not known:
            code = CONNACK_BAD_PROTOCOL if not self.v5 else RC_BAD_VERSION
            self._refuse(code, "unsupported protocol version")
            return
        props = packet.properties or {}
        if PROP_AUTH_METHOD in props:
            self._refuse(RC_BAD_AUTH_METHOD, "enhanced authentication is not supported")
            return
        client_id = packet.client_id
        assigned = False
        if not client_id:
            if not self.v5 and not packet.clean_session:
                self._refuse(CONNACK_ID_REJECTED, "empty client id needs a clean session")
                return
            client_id = "auto-" + uuid.uuid4().hex
            assigned = True
        client_type = broker.classify(client_id, packet.username, packet.password)
        if client_type is None:
            self._refuse(
                CONNACK_NOT_AUTHORIZED if not self.v5 else RC_NOT_AUTHORIZED, "not authorized"
            )
            return
        self.client_id = client_id
        keepalive = packet.keepalive
        server_keepalive: int | None = None
        if config.max_keepalive_s and (keepalive == 0 or keepalive > config.max_keepalive_s):
            keepalive = config.max_keepalive_s
            server_keepalive = keepalive
        self.keepalive = keepalive
        if self.v5:
            raw_expiry = props.get(PROP_SESSION_EXPIRY, 0)
            expiry: int | None = int(raw_expiry) if isinstance(raw_expiry, int) else 0
            if expiry == _NEVER:
                expiry = None
            if config.max_session_expiry_s and (
                expiry is None or expiry > config.max_session_expiry_s
            ):
                expiry = config.max_session_expiry_s
            max_packet = props.get(PROP_MAXIMUM_PACKET_SIZE, 0)
            self.client_max_packet = int(max_packet) if isinstance(max_packet, int) else 0
            receive_max = props.get(PROP_RECEIVE_MAXIMUM, 65535)
            window = min(
                config.max_inflight, int(receive_max) if isinstance(receive_max, int) else 65535
            )
        else:
            expiry = 0 if packet.clean_session else (config.default_session_expiry_s or None)
            window = config.max_inflight
        will: tuple[Message, int] | None = None
        if packet.will is not None:
            w = packet.will
            delay = 0
            if w.properties:
                raw_delay = w.properties.get(PROP_WILL_DELAY, 0)
                delay = int(raw_delay) if isinstance(raw_delay, int) else 0
            will = (Message.create(w.topic, w.payload, w.qos, w.retain, w.properties), delay)
        session, present = broker.attach(
            self, client_id, client_type, packet.clean_session, expiry, window, will
        )
        self.session = session
        if self.v5:
            cprops: dict[int, Any] = {
                PROP_RECEIVE_MAXIMUM: config.receive_maximum,
                PROP_MAXIMUM_PACKET_SIZE: config.max_packet_size,
                PROP_TOPIC_ALIAS_MAXIMUM: TOPIC_ALIAS_MAXIMUM,
                PROP_RETAIN_AVAILABLE: 1,
                PROP_WILDCARD_SUB_AVAILABLE: 1,
                PROP_SUB_ID_AVAILABLE: 1,
                PROP_SHARED_SUB_AVAILABLE: 1,
            }
            if assigned:
                cprops[PROP_ASSIGNED_CLIENT_ID] = client_id
            if server_keepalive is not None:
                cprops[PROP_SERVER_KEEP_ALIVE] = server_keepalive
            requested = props.get(PROP_SESSION_EXPIRY, 0)
            granted = _NEVER if expiry is None else expiry
            if requested != granted:
                cprops[PROP_SESSION_EXPIRY] = granted
            connack = Connack(0, present, cprops).encode()
        else:
            connack = Connack(0, present).encode()
        # CONNACK must precede anything the session sends: put it first.
        self.out.insert(0, connack)
        broker.mark_dirty(self)
        broker.activate(self, session, resume=not packet.clean_session)
        if keepalive:
            self._timer = asyncio.get_running_loop().call_later(
                keepalive * 1.5, self._keepalive_check
            )

    def _refuse(self, code: int, why: str) -> None:
        log.info("refusing %s (%r): %s", self.peer, self.client_id, why)
        frame = Connack(code, False, {} if self.v5 else None).encode()
        self.write(frame)
        self.broker.flush_conn(self)
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def _subscribe(self, packet: Subscribe) -> None:
        session = self.session
        assert session is not None
        sub_id: int | None = None
        if packet.properties:
            ids = packet.properties.get(PROP_SUBSCRIPTION_ID)
            if isinstance(ids, tuple) and ids and isinstance(ids[0], int):
                sub_id = ids[0]
        codes: list[int] = []
        granted: list[tuple[str, Subscription, bool]] = []
        for topic_filter, options in packet.topics:
            shared = is_shared(topic_filter)
            if shared and self.v5 and options & 4:
                raise MqttProtocolError(f"no local set on shared subscription {topic_filter!r}")
            valid = parse_shared(topic_filter) is not None if shared else valid_filter(topic_filter)
            if not valid:
                codes.append(RC_TOPIC_FILTER_INVALID if self.v5 else SUBACK_FAILURE)
                continue
            qos = options & 3
            if self.v5:
                sub = Subscription(
                    qos, bool(options & 4), bool(options & 8), (options >> 4) & 3, sub_id
                )
            else:
                sub = Subscription(qos)
            new = self.broker.subscribe(session, topic_filter, sub)
            codes.append(qos)
            granted.append((topic_filter, sub, new))
        if self.v5:
            self.write(Suback(packet.packet_id, tuple(codes), {}).encode())
        else:
            self.write(Suback(packet.packet_id, tuple(codes)).encode())
        for topic_filter, sub, new in granted:
            if sub.retain_handling == 0 or (sub.retain_handling == 1 and new):
                self.broker.send_retained(session, topic_filter, sub)

    def _unsubscribe(self, packet: Unsubscribe) -> None:
        session = self.session
        assert session is not None
        codes = [
            0 if self.broker.unsubscribe(session, topic_filter) else RC_NO_SUBSCRIPTION
            for topic_filter in packet.topics
        ]
        if self.v5:
            self.write(Unsuback(packet.packet_id, tuple(codes), {}).encode())
        else:
            self.write(Unsuback(packet.packet_id).encode())

    def _disconnect(self, packet: Disconnect) -> None:
        session = self.session
        assert session is not None
        # 0x04: "disconnect with will message"; anything else normal means no will.
        self.graceful = packet.reason_code != RC_DISCONNECT_WITH_WILL
        if packet.properties and PROP_SESSION_EXPIRY in packet.properties:
            value = packet.properties[PROP_SESSION_EXPIRY]
            if isinstance(value, int):
                session.expiry_s = None if value == _NEVER else value
        if self.transport is not None:
            self.broker.flush_conn(self)
            self.transport.close()
        self.closed = True
