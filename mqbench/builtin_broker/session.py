"""Sessions: subscriptions, the outgoing QoS 1/2 window and the hand-off to persistence.

A session delivers through one of three modes, fixed when it is created:

``memory``
    a non-persistent session (clean session / session expiry 0): undelivered messages live
    in the session only while the client is connected.
``device``
    a persistent DEVICE session: every QoS 1/2 message is first SAVEd in the device store,
    which allocates its packet id; it is sent once saved (when the client is online and
    the window has room); PUBACK/PUBCOMP REMOVE it, PUBREC MARKs it PUBREL. On reconnect
    the session FETCHes what is left and resends it (DUP set for what was sent before).
``app``
    a persistent APPLICATION session: QoS 1/2 messages are APPENDed to the client's
    ordered queue and sent once appended; PUBACK (or PUBREC) ACKs the entry. On reconnect
    the session READs the whole queue and sends it in order.

The session talks to its connection through the small :class:`Link` protocol and to
persistence through the broker's operation queues, so it can be unit-tested with fakes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Protocol

from mqbench.builtin_broker.config import ClientType
from mqbench.builtin_broker.message import PUBREL_MARKER, Message, deserialize
from mqbench.builtin_broker.persistence.base import (
    Ack,
    Append,
    Fetch,
    MarkPubrel,
    Op,
    Read,
    Remove,
    Save,
)

MEMORY: Final = "memory"
DEVICE: Final = "device"
APP: Final = "app"

PUB: Final = 0
REL: Final = 1


class Link(Protocol):
    """What a session needs from its connection."""

    def send_publish(self, out: Outgoing) -> bool:
        """Queue a PUBLISH for ``out``; False when it was dropped (too large for the client)."""
        ...

    def send_pubrel(self, packet_id: int) -> None:
        """Queue a PUBREL."""
        ...


class Subscription:
    """One subscription of a session (MQTT 5 options included)."""

    __slots__ = ("no_local", "qos", "retain_as_published", "retain_handling", "sub_id")

    def __init__(
        self,
        qos: int,
        no_local: bool = False,
        retain_as_published: bool = False,
        retain_handling: int = 0,
        sub_id: int | None = None,
    ) -> None:
        """Options as in an MQTT 5 SUBSCRIBE (3.1.1: only ``qos``)."""
        self.qos = qos
        self.no_local = no_local
        self.retain_as_published = retain_as_published
        self.retain_handling = retain_handling
        self.sub_id = sub_id


class Outgoing:
    """A message on its way to one client (or, in state REL, only its PUBREL)."""

    __slots__ = (
        "dup",
        "entry",
        "message",
        "packet_id",
        "qos",
        "retain",
        "share",
        "state",
        "sub_ids",
    )

    def __init__(
        self,
        message: Message | None,
        qos: int,
        retain: bool = False,
        sub_ids: tuple[int, ...] = (),
        packet_id: int = 0,
        entry: str | None = None,
        state: int = PUB,
        dup: bool = False,
        share: object | None = None,
    ) -> None:
        """``message`` is None only in state REL; ``share``: the shared-subscription group
        that chose this session for the message (None: an ordinary subscription)."""
        self.message = message
        self.qos = qos
        self.retain = retain
        self.sub_ids = sub_ids
        self.packet_id = packet_id
        self.entry = entry
        self.state = state
        self.dup = dup
        self.share = share


class PendingAck:
    """A PUBACK/PUBREC owed to a publisher once persistence of its message is done."""

    __slots__ = ("frame", "on_ready", "remaining")

    def __init__(self, frame: bytes, on_ready: Callable[[], None]) -> None:
        """``on_ready`` runs when the last hold is released."""
        self.frame = frame
        self.remaining = 1  # released by ``arm`` once routing has added its holds
        self.on_ready = on_ready

    def hold(self) -> None:
        """One more persistence operation to wait for."""
        self.remaining += 1

    def release(self, _result: Any = None) -> None:
        """One persistence operation finished."""
        self.remaining -= 1
        if self.remaining == 0:
            self.on_ready()


Submit = Callable[[Op], None]


def _serialize_for(message: Message, qos: int, retain: bool) -> bytes:
    if message.qos == qos and message.retain == retain:
        return message.serialize()
    return Message(
        message.topic,
        message.payload,
        qos,
        retain,
        message.properties,
        message.created_ms,
        message.expires_ms,
    ).serialize()


class Session:
    """One client's session (see the module docstring)."""

    __slots__ = (
        "app_pubrel",
        "client_id",
        "client_type",
        "conn",
        "dropped",
        "expiry_handle",
        "expiry_s",
        "inflight",
        "loading",
        "message_ttl_s",
        "mode",
        "next_pid",
        "pending",
        "qos2_in",
        "restored",
        "sent",
        "submit_app",
        "submit_device",
        "subscriptions",
        "will",
        "will_handle",
        "window",
    )

    def __init__(
        self,
        client_id: str,
        client_type: ClientType,
        mode: str,
        submit_device: Submit,
        submit_app: Submit,
        message_ttl_s: int = 600,
    ) -> None:
        """``submit_*`` put operations into the broker's device-store and app-queue queues."""
        self.client_id = client_id
        self.client_type = client_type
        self.mode = mode
        self.submit_device = submit_device
        self.submit_app = submit_app
        self.message_ttl_s = message_ttl_s
        self.conn: Link | None = None
        self.loading = False
        self.subscriptions: dict[str, Subscription] = {}
        self.inflight: dict[int, Outgoing] = {}
        self.pending: deque[Outgoing] = deque()
        self.window = 1000
        self.next_pid = 1
        self.qos2_in: set[int] = set()
        self.sent: set[int] = set()
        """DEVICE: packet ids sent at least once (DUP on redelivery)."""
        self.app_pubrel: set[int] = set()
        """APPLICATION: QoS 2 packet ids past PUBREC (the queue entry is acked already)."""
        self.restored = False
        """True when the session was not in memory but its store may hold old messages."""
        self.expiry_s: int | None = 0
        """Seconds the session outlives its connection; None: forever; 0: ends with it."""
        self.expiry_handle: Any = None
        self.will: Any = None
        self.will_handle: Any = None
        self.dropped = 0
        """Messages lost to persistence errors or too large for the client."""

    # ------------------------------------------------------------------ connection

    def attach(self, conn: Link, window: int, resume: bool) -> None:
        """A connection takes the session; ``resume``: reload what the store kept."""
        self.conn = conn
        self.window = max(1, window)
        self.inflight.clear()
        self.pending.clear()
        if self.mode == DEVICE and resume:
            self.loading = True
            self.submit_device(Fetch(self.client_id, self._fetched))
        elif self.mode == APP:
            for pid in sorted(self.app_pubrel):
                self.inflight[pid] = Outgoing(None, 2, packet_id=pid, state=REL)
                conn.send_pubrel(pid)
            if resume:
                self.loading = True
                self.submit_app(Read(self.client_id, self._read))

    def take_shared(self) -> list[Outgoing]:
        """MEMORY: the shared-subscription QoS 1 deliveries not acknowledged yet.

        A memory session loses them with its connection, so the broker gives them to
        another member of their group; a persistent session keeps them in its store.
        Only QoS 1: a QoS 2 message must never go to another member (MQTT 5.0, 4.8.2).
        """
        if self.mode != MEMORY:
            return []
        return [
            out
            for out in (*self.inflight.values(), *self.pending)
            if out.share is not None and out.qos == 1 and out.message is not None
        ]

    def detach(self) -> None:
        """The connection went away: what is unacknowledged stays in the store."""
        self.conn = None
        self.loading = False
        self.inflight.clear()
        self.pending.clear()

    # ------------------------------------------------------------------ delivery

    def offer(
        self,
        message: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...] = (),
        ack: PendingAck | None = None,
        share: object | None = None,
    ) -> None:
        """Deliver ``message`` at ``qos`` (>= 1); ``ack`` waits for its persistence;
        ``share`` is the shared-subscription group that chose this session, if any."""
        mode = self.mode
        out = Outgoing(message, qos, retain, sub_ids, share=share)
        if mode == MEMORY:
            if self.conn is not None:
                self._enqueue(out)
            return
        if mode == DEVICE:
            if ack is not None:
                ack.hold()
            ttl = message.ttl_s(self.message_ttl_s)

            def saved(pids: Any) -> None:
                if ack is not None:
                    ack.release()
                self._saved(out, pids)

            self.submit_device(
                Save(self.client_id, [_serialize_for(message, qos, retain)], [ttl], saved)
            )
            return
        if ack is not None:
            ack.hold()

        def appended(entry: Any) -> None:
            if ack is not None:
                ack.release()
            if entry is None:
                self.dropped += 1
                return
            out.entry = str(entry)
            if self.conn is not None and not self.loading:
                self._enqueue(out)

        self.submit_app(Append(self.client_id, _serialize_for(message, qos, retain), appended))

    def _saved(self, out: Outgoing, pids: Any) -> None:
        if not pids:
            self.dropped += 1
            return
        out.packet_id = pids[0]
        if self.conn is not None and not self.loading:
            self._enqueue(out)

    def _enqueue(self, out: Outgoing) -> None:
        if len(self.inflight) < self.window and not self.pending:
            self._send(out)
        else:
            self.pending.append(out)

    def _send(self, out: Outgoing) -> None:
        conn = self.conn
        if conn is None:
            return
        if out.state == REL:
            self.inflight[out.packet_id] = out
            conn.send_pubrel(out.packet_id)
            return
        if not out.packet_id:
            out.packet_id = self._allocate_pid()
            if not out.packet_id:
                self.pending.appendleft(out)
                return
        self.inflight[out.packet_id] = out
        if self.mode == DEVICE:
            self.sent.add(out.packet_id)
        if not conn.send_publish(out):
            # Too large for this client (MQTT 5 maximum packet size): dropped, as if acked.
            self.dropped += 1
            del self.inflight[out.packet_id]
            self._release(out)

    def _allocate_pid(self) -> int:
        pid = self.next_pid
        inflight = self.inflight
        for _ in range(0xFFFF):
            if pid not in inflight and pid not in self.app_pubrel:
                self.next_pid = pid + 1 if pid < 0xFFFF else 1
                return pid
            pid = pid + 1 if pid < 0xFFFF else 1
        return 0

    def _pump(self) -> None:
        pending = self.pending
        while pending and len(self.inflight) < self.window and self.conn is not None:
            self._send(pending.popleft())

    def _release(self, out: Outgoing) -> None:
        """The flow of ``out`` is complete: forget it in the store."""
        if self.mode == DEVICE:
            self.sent.discard(out.packet_id)
            self.submit_device(Remove(self.client_id, [out.packet_id]))
        elif self.mode == APP and out.entry is not None:
            self.submit_app(Ack(self.client_id, [out.entry]))

    # ------------------------------------------------------------------ acks from the client

    def on_puback(self, packet_id: int) -> None:
        """PUBACK: a QoS 1 delivery is complete."""
        out = self.inflight.get(packet_id)
        if out is None or out.qos != 1:
            return
        del self.inflight[packet_id]
        self._release(out)
        self._pump()

    def on_pubrec(self, packet_id: int, reason_code: int = 0) -> None:
        """PUBREC: the client has the QoS 2 message; answer PUBREL (or end on failure)."""
        out = self.inflight.get(packet_id)
        if out is None or out.qos != 2:
            # Unknown id: MQTT 5 answers PUBREL "packet identifier not found"; 3.1.1 PUBREL.
            if self.conn is not None and reason_code < 0x80:
                self.conn.send_pubrel(packet_id)
            return
        if reason_code >= 0x80:
            del self.inflight[packet_id]
            self._release(out)
            self._pump()
            return
        if out.state == PUB:
            out.state = REL
            out.message = None
            if self.mode == DEVICE:
                self.submit_device(MarkPubrel(self.client_id, [packet_id]))
            elif self.mode == APP:
                if out.entry is not None:
                    self.submit_app(Ack(self.client_id, [out.entry]))
                    out.entry = None
                self.app_pubrel.add(packet_id)
        if self.conn is not None:
            self.conn.send_pubrel(packet_id)

    def on_pubcomp(self, packet_id: int) -> None:
        """PUBCOMP: a QoS 2 delivery is complete."""
        out = self.inflight.get(packet_id)
        if out is None or out.state != REL:
            return
        del self.inflight[packet_id]
        self.app_pubrel.discard(packet_id)
        self._release(out)
        self._pump()

    # ------------------------------------------------------------------ reloads

    def _fetched(self, items: Any) -> None:
        self.loading = False
        if self.conn is None or items is None:
            return
        now_ms = time.time_ns() // 1_000_000
        expired: list[int] = []
        for pid, data in items:
            if data == PUBREL_MARKER:
                self._enqueue(Outgoing(None, 2, packet_id=pid, state=REL))
                continue
            try:
                message = deserialize(data)
            except ValueError:
                message = None
            if message is None or message.expired(now_ms):
                expired.append(pid)
                continue
            dup = self.restored or pid in self.sent
            self._enqueue(Outgoing(message, message.qos, message.retain, (), pid, None, PUB, dup))
        self.restored = False
        if expired:
            self.submit_device(Remove(self.client_id, expired))

    def _read(self, items: Any) -> None:
        self.loading = False
        if self.conn is None or items is None:
            return
        now_ms = time.time_ns() // 1_000_000
        stale: list[str] = []
        for entry, data in items:
            try:
                message = deserialize(data)
            except ValueError:
                message = None
            if message is None or message.expired(now_ms):
                stale.append(entry)
                continue
            self._enqueue(Outgoing(message, message.qos, message.retain, (), 0, entry, PUB, True))
        if stale:
            self.submit_app(Ack(self.client_id, stale))
