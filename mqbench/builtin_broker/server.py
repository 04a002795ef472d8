"""The broker: listener, sessions, routing, retained messages, wills and persistence queues.

Routing: :meth:`Broker.publish` looks the topic up in a route cache (raw topic bytes ->
matching sessions with their effective subscription, computed from the topic trie and
cleared whenever a subscription changes). QoS 0 deliveries to MQTT 3.1.1 clients reuse
one frame per message (``publish_prefix`` cached per topic and size); QoS 1/2 deliveries
go through the session (window, persistence). A QoS 1/2 publisher gets its PUBACK/PUBREC
once every persistence operation its message caused has completed, in PUBLISH order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

from mqbench.builtin_broker.config import BrokerConfig, ClientClassifier, ClientType
from mqbench.builtin_broker.connection import Connection
from mqbench.builtin_broker.message import Message
from mqbench.builtin_broker.persistence import create_app_queue, create_device_store
from mqbench.builtin_broker.persistence.base import AppQueue, Clear, DeviceStore, OpQueue
from mqbench.builtin_broker.session import (
    APP,
    DEVICE,
    MEMORY,
    PendingAck,
    Session,
    Subscription,
)
from mqbench.builtin_broker.shared import SharedGroup, is_shared, parse_shared
from mqbench.errors import BrokerError
from mqbench.wire.mqtt.errors import MqttProtocolError
from mqbench.wire.mqtt.packets import encode_publish5, publish_prefix
from mqbench.wire.mqtt.properties import PROP_SUBSCRIPTION_ID, Properties, encode_properties
from mqbench.wire.mqtt.reason_codes import (
    RC_SERVER_SHUTTING_DOWN,
    RC_TAKEN_OVER,
    RC_TOPIC_NAME_INVALID,
)
from mqbench.wire.topics import TopicTrie, topic_matches, valid_topic

log = logging.getLogger("mqbench.builtin_broker")

_CACHE_MAX: Final = 100_000
Target = tuple[Session, int, bool, bool, tuple[int, ...], SharedGroup | None]
"""(session, granted QoS, no local, retain as published, subscription ids, the shared
subscription group that chose the session for this message or None)."""


class Broker:
    """An asyncio MQTT 3.1.1/5 broker with TBMQ-style persistence (see the package docs)."""

    def __init__(
        self,
        config: BrokerConfig,
        device_store: DeviceStore | None = None,
        app_queue: AppQueue | None = None,
    ) -> None:
        """Build from ``config``; stores default to what the config names."""
        config.validate()
        self.config = config
        self.classifier = ClientClassifier.from_config(config)
        self.device_store = device_store or create_device_store(config)
        self.app_queue = app_queue or create_app_queue(config)
        self.device_ops = OpQueue(self.device_store, self.flush_writes)
        self.app_ops = OpQueue(self.app_queue, self.flush_writes)
        self.sessions: dict[str, Session] = {}
        self.trie: TopicTrie[Session, Subscription] = TopicTrie()
        self.retained: dict[str, Message] = {}
        self.connections: set[Connection] = set()
        self._routes: dict[bytes, list[Target]] = {}
        self.shared: dict[str, SharedGroup] = {}
        """Shared subscription groups by their full ``$share/{name}/{filter}``."""
        self.shared_trie: TopicTrie[str, SharedGroup] = TopicTrie()
        self._shared_routes: dict[bytes, list[SharedGroup]] = {}
        self._prefixes: dict[tuple[bytes, int], bytes] = {}
        self._dirty: list[Connection] = []
        self._flush_scheduled = False
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = config.port
        self.received = 0
        self.delivered_qos0 = 0
        self.protocol_errors = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> int:
        """Start the stores and listen; returns the bound port."""
        self._loop = asyncio.get_running_loop()
        await self.device_store.start()
        try:
            await self.app_queue.start()
        except BaseException:
            await self.device_store.close()
            raise
        self.device_ops.start()
        self.app_ops.start()
        try:
            self._server = await self._loop.create_server(
                lambda: Connection(self),
                self.config.host,
                self.config.port,
                reuse_address=True,
                backlog=4096,
                ssl=self.config.ssl_context(),
            )
        except OSError as exc:
            await self.device_ops.close()
            await self.app_ops.close()
            raise BrokerError(
                f"cannot listen on {self.config.host}:{self.config.port}: "
                f"{exc.strerror or exc} (address already in use?)"
            ) from None
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop listening, close every connection, apply pending persistence, close stores."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.graceful = True  # a broker shutdown is not the clients' fault: no wills
            conn.disconnect(RC_SERVER_SHUTTING_DOWN)
        await asyncio.sleep(0)
        await self.device_ops.close(timeout_s)
        await self.app_ops.close(timeout_s)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout_s)
            self._server = None

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Wait for pending persistence operations (tests)."""
        await self.device_ops.drain(timeout_s)
        await self.app_ops.drain(timeout_s)

    # ------------------------------------------------------------------ connections

    def classify(
        self, client_id: str, username: str | None, password: bytes | None
    ) -> ClientType | None:
        """The client type of a CONNECT, or None when the client is not authorized."""
        return self.classifier.classify(client_id, username, password)

    def connection_opened(self, conn: Connection) -> None:
        """A socket was accepted."""
        self.connections.add(conn)

    def protocol_error(self, conn: Connection) -> None:
        """``conn`` is closed because its client broke the protocol (counted)."""
        self.protocol_errors += 1

    # ------------------------------------------------------------------ writes

    def mark_dirty(self, conn: Connection) -> None:
        """``conn`` has frames queued; flush them at the end of this loop iteration."""
        self._dirty.append(conn)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self.flush_writes)

    def flush_writes(self) -> None:
        """One ``transport.write`` per connection with queued frames."""
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            out = conn.out
            if not out:
                continue
            transport = conn.transport
            if transport is not None and not transport.is_closing():
                transport.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()

    def flush_conn(self, conn: Connection) -> None:
        """Write ``conn``'s queued frames now (before closing it)."""
        out = conn.out
        transport = conn.transport
        if out and transport is not None and not transport.is_closing():
            transport.write(b"".join(out))
        out.clear()

    # ------------------------------------------------------------------ sessions

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
        persistent = expiry_s is None or expiry_s > 0
        existing = self.sessions.get(client_id)
        if existing is not None:
            # The existing session ends unless this connection resumes it.
            ends = clean_start or existing.client_type != client_type
            if existing.conn is not None:
                old = existing.conn
                assert isinstance(old, Connection)
                self._requeue_shared(existing)
                existing.detach()
                old.disconnect(RC_TAKEN_OVER, "session taken over")
                old.session = None
                # The old connection ended without DISCONNECT: its will goes out now unless
                # it has a will delay and this connection resumes the session.
                if (
                    existing.will is not None
                    and not old.graceful
                    and (ends or existing.will[1] == 0)
                ):
                    self._publish_will(existing)
            elif existing.will is not None and ends:
                # A will waiting for its delay: the session ends now, so does the wait.
                self._publish_will(existing)
            self._cancel_timers(existing)
            existing.will = None
        present = False
        store_mode = DEVICE if client_type == ClientType.DEVICE else APP
        if existing is not None and not clean_start and existing.client_type == client_type:
            session = existing
            present = True
            if session.mode == MEMORY and persistent:
                session.mode = store_mode
        else:
            if existing is not None:
                self._remove_session(existing)
            mode = store_mode if persistent else MEMORY
            session = Session(
                client_id,
                client_type,
                mode,
                self.device_ops.submit,
                self.app_ops.submit,
                self.config.message_ttl_s,
            )
            # Not in memory but a store outlives the broker: old messages may be waiting.
            session.restored = not clean_start
            if clean_start and mode != MEMORY:
                self._clear_store(session)
            self.sessions[client_id] = session
        session.expiry_s = expiry_s
        session.will = will
        session.window = window
        return session, present

    def activate(self, conn: Connection, session: Session, resume: bool) -> None:
        """The CONNACK is queued: let the session start sending."""
        session.attach(conn, session.window, resume and session.mode != MEMORY)

    def connection_closed(self, conn: Connection) -> None:
        """A connection is gone: will message, session expiry or removal."""
        self.connections.discard(conn)
        session = conn.session
        conn.session = None
        if session is None or session.conn is not conn:
            return
        self._requeue_shared(session)
        session.detach()
        # Acks owed to this publisher can no longer be written.
        conn.acks.clear()
        if session.will is not None and not conn.graceful:
            delay = session.will[1]
            if delay > 0 and session.expiry_s != 0:
                assert self._loop is not None
                session.will_handle = self._loop.call_later(
                    delay if session.expiry_s is None else min(delay, session.expiry_s),
                    self._publish_will,
                    session,
                )
            else:
                self._publish_will(session)
        elif conn.graceful:
            session.will = None
        if session.expiry_s == 0:
            self._remove_session(session)
        elif session.expiry_s is not None:
            assert self._loop is not None
            session.expiry_handle = self._loop.call_later(session.expiry_s, self._expire, session)

    def _publish_will(self, session: Session) -> None:
        session.will_handle = None
        will, session.will = session.will, None
        if will is None:
            return
        message: Message = will[0]
        self.publish(
            None,
            message.topic.encode("utf-8"),
            message.topic,
            message.payload,
            message.qos,
            0,
            message.retain,
            message.properties,
        )

    def _expire(self, session: Session) -> None:
        session.expiry_handle = None
        if session.conn is None and self.sessions.get(session.client_id) is session:
            if session.will is not None:
                self._publish_will(session)
            self._remove_session(session)

    def _cancel_timers(self, session: Session) -> None:
        for handle in (session.expiry_handle, session.will_handle):
            if handle is not None:
                handle.cancel()
        session.expiry_handle = None
        session.will_handle = None

    def _clear_store(self, session: Session) -> None:
        if session.mode == DEVICE:
            self.device_ops.submit(Clear(session.client_id))
        elif session.mode == APP:
            self.app_ops.submit(Clear(session.client_id))

    def _remove_session(self, session: Session) -> None:
        self._cancel_timers(session)
        for topic_filter in list(session.subscriptions):
            self.unsubscribe(session, topic_filter)
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
        if session.mode != MEMORY:
            self._clear_store(session)

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, session: Session, topic_filter: str, sub: Subscription) -> bool:
        """Add or replace a subscription; True when it is new.

        A ``$share/{name}/{filter}`` (already validated by the connection) joins the group.
        """
        new = topic_filter not in session.subscriptions
        session.subscriptions[topic_filter] = sub
        if is_shared(topic_filter):
            group = self.shared.get(topic_filter)
            if group is None:
                parsed = parse_shared(topic_filter)
                assert parsed is not None, "the connection validates shared filters"
                group = self.shared[topic_filter] = SharedGroup(*parsed)
                self.shared_trie.subscribe(group.filter, topic_filter, group)
            group.join(session, sub)
        else:
            self.trie.subscribe(topic_filter, session, sub)
        self._clear_routes()
        return new

    def unsubscribe(self, session: Session, topic_filter: str) -> bool:
        """Remove a subscription; True when it existed (an empty shared group goes too)."""
        if session.subscriptions.pop(topic_filter, None) is None:
            return False
        group = self.shared.get(topic_filter)
        if group is not None:
            group.leave(session)
            if not group.members:
                del self.shared[topic_filter]
                self.shared_trie.unsubscribe(group.filter, topic_filter)
        else:
            self.trie.unsubscribe(topic_filter, session)
        self._clear_routes()
        return True

    def _clear_routes(self) -> None:
        self._routes.clear()
        self._shared_routes.clear()

    def send_retained(self, session: Session, topic_filter: str, sub: Subscription) -> None:
        """Deliver the retained messages matching a new subscription (RETAIN set).

        A shared subscription gets none (MQTT 5.0, 4.8.2).
        """
        if is_shared(topic_filter):
            return
        now_ms = time.time_ns() // 1_000_000
        sub_ids = (sub.sub_id,) if sub.sub_id else ()
        for topic, message in list(self.retained.items()):
            if message.expired(now_ms):
                del self.retained[topic]
                continue
            if topic_matches(topic_filter, topic):
                qos = min(message.qos, sub.qos)
                self._deliver(session, message, qos, True, sub_ids, None, None)

    # ------------------------------------------------------------------ routing

    def _targets(self, topic_raw: bytes, topic: str) -> list[Target]:
        merged: dict[Session, list[Any]] = {}
        for session, sub in self.trie.match(topic):
            entry = merged.get(session)
            if entry is None:
                merged[session] = [
                    sub.qos,
                    sub.no_local,
                    sub.retain_as_published,
                    [sub.sub_id] if sub.sub_id else [],
                ]
            else:
                entry[0] = max(entry[0], sub.qos)
                entry[1] = entry[1] and sub.no_local
                entry[2] = entry[2] or sub.retain_as_published
                if sub.sub_id:
                    entry[3].append(sub.sub_id)
        targets: list[Target] = [
            (session, e[0], e[1], e[2], tuple(e[3]), None) for session, e in merged.items()
        ]
        if len(self._routes) >= _CACHE_MAX:
            self._routes.clear()
        self._routes[topic_raw] = targets
        return targets

    def _qos0_frame(self, topic_raw: bytes, payload: bytes | memoryview) -> bytes:
        n = len(payload)
        key = (topic_raw, n)
        prefix = self._prefixes.get(key)
        if prefix is None:
            if len(self._prefixes) >= _CACHE_MAX:
                self._prefixes.clear()
            prefix = self._prefixes[key] = publish_prefix(topic_raw, n, 0)
        return prefix + payload

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
        """Route one PUBLISH from ``source`` (None: a will message) to every subscriber."""
        self.received += 1
        targets = self._routes.get(topic_raw)
        groups: list[SharedGroup] | None = None
        if self.shared:
            groups = self._shared_routes.get(topic_raw)
        if targets is None or retain or properties or (self.shared and groups is None):
            if topic is None:
                try:
                    topic = topic_raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise self._bad_topic(source, "topic name is not valid UTF-8") from None
            if not valid_topic(topic):
                raise self._bad_topic(source, f"invalid topic name {topic!r}")
            if targets is None:
                targets = self._targets(topic_raw, topic)
            if self.shared and groups is None:
                groups = self._shared_targets(topic_raw, topic)
        if groups:
            # One member per group for this message, routed like any other subscriber.
            targets = targets + self._pick_members(groups)
        message: Message | None = None
        if retain or properties:
            assert topic is not None
            message = Message.create(topic, bytes(payload), qos, retain, properties)
            if retain:
                if payload:
                    self.retained[topic] = message
                else:
                    self.retained.pop(topic, None)
        ack: PendingAck | None = None
        if qos and source is not None:
            pid = packet_id
            frame = bytes((0x40 if qos == 1 else 0x50, 2, pid >> 8, pid & 0xFF))
            if qos == 2:
                session = source.session
                assert session is not None
                session.qos2_in.add(pid)
            ack = PendingAck(frame, source.ack_ready)
            source.acks.append(ack)
        frame0: bytes | None = None
        sender = source.session if source is not None else None
        for session, sub_qos, no_local, rap, sub_ids, share in targets:
            if no_local and session is sender:
                continue
            eff = qos if qos < sub_qos else sub_qos
            if eff == 0:
                conn = session.conn
                if conn is None:
                    continue
                assert isinstance(conn, Connection)
                if conn.v5 or (rap and retain):
                    if message is None:
                        message = Message.create(
                            topic or topic_raw.decode("utf-8"), bytes(payload), qos, retain, None
                        )
                    self._qos0_object(conn, message, rap and retain, sub_ids)
                else:
                    if frame0 is None:
                        frame0 = self._qos0_frame(topic_raw, payload)
                    if not conn.out:
                        conn.write(frame0)
                    else:
                        conn.out.append(frame0)
                self.delivered_qos0 += 1
                continue
            if message is None:
                message = Message.create(
                    topic or topic_raw.decode("utf-8"), bytes(payload), qos, retain, None
                )
            self._deliver(session, message, eff, rap and retain, sub_ids, ack, share)
        if ack is not None:
            ack.release()

    def _shared_targets(self, topic_raw: bytes, topic: str) -> list[SharedGroup]:
        groups = [group for _key, group in self.shared_trie.match(topic)]
        if len(self._shared_routes) >= _CACHE_MAX:
            self._shared_routes.clear()
        self._shared_routes[topic_raw] = groups
        return groups

    @staticmethod
    def _pick_members(groups: list[SharedGroup]) -> list[Target]:
        """The member of each group that gets the next message (groups without one skip)."""
        picks: list[Target] = []
        for group in groups:
            chosen = group.pick()
            if chosen is not None:
                session, sub = chosen
                sub_ids = (sub.sub_id,) if sub.sub_id else ()
                picks.append((session, sub.qos, False, sub.retain_as_published, sub_ids, group))
        return picks

    def _requeue_shared(self, session: Session) -> None:
        """``session``'s connection is going: its unacknowledged shared-subscription
        deliveries go to another member of their group (memory sessions only)."""
        now_ms = time.time_ns() // 1_000_000
        for out in session.take_shared():
            group = out.share
            message = out.message
            if not isinstance(group, SharedGroup) or message is None or message.expired(now_ms):
                continue
            if self.shared.get(group.key) is not group:
                continue
            chosen = group.pick(exclude=session)
            if chosen is None:
                continue
            member, sub = chosen
            qos = min(message.qos, sub.qos)
            retain = sub.retain_as_published and message.retain
            sub_ids = (sub.sub_id,) if sub.sub_id else ()
            self._deliver(member, message, qos, retain, sub_ids, None, group)

    @staticmethod
    def _bad_topic(source: Connection | None, why: str) -> Exception:
        return MqttProtocolError(why, RC_TOPIC_NAME_INVALID)

    def _qos0_object(
        self, conn: Connection, message: Message, retain: bool, sub_ids: tuple[int, ...]
    ) -> None:
        if conn.v5:
            props = message.forward_properties(time.time_ns() // 1_000_000)
            if sub_ids:
                props[PROP_SUBSCRIPTION_ID] = sub_ids
            frame = encode_publish5(
                message.topic, message.payload, 0, 0, encode_properties(props), retain=retain
            )
        else:
            frame = publish_prefix(message.topic, len(message.payload), 0, retain=retain)
            frame += message.payload
        if conn.client_max_packet and len(frame) > conn.client_max_packet:
            return
        conn.write(frame)

    def _deliver(
        self,
        session: Session,
        message: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        ack: PendingAck | None,
        share: SharedGroup | None,
    ) -> None:
        if qos == 0:
            conn = session.conn
            if conn is not None:
                assert isinstance(conn, Connection)
                self._qos0_object(conn, message, retain, sub_ids)
            return
        session.offer(message, qos, retain, sub_ids, ack, share)

    # ------------------------------------------------------------------ facts

    def describe(self) -> dict[str, Any]:
        """Settings and counters for logs."""
        return {
            "host": self.config.host,
            "port": self.port,
            "persistence": self.device_store.describe(),
            "app_queue": self.app_queue.describe(),
            "sessions": len(self.sessions),
            "connections": len(self.connections),
            "received": self.received,
            "persistence_batches": self.device_ops.batches,
            "persistence_operations": self.device_ops.operations,
            "persistence_errors": self.device_ops.errors + self.app_ops.errors,
        }
