"""A broker-less core-NATS relay for calibration, on the shared NATS framing.

It greets with ``INFO``, takes ``CONNECT`` (no verbose ``+OK``), answers ``PING`` with
``PONG``, keeps ``SUB``/``UNSUB`` and forwards each ``PUB`` as ``MSG`` to every matching
subscription. Nothing else: ``HPUB`` and unknown operations get ``-ERR`` and a close.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Final

from mqbench import __version__
from mqbench.calibration.relays import Hub, RelayConnection
from mqbench.wire.nats import CRLF, PONG

MAX_PAYLOAD: Final = 1 << 20
"""``max_payload`` announced in INFO (nats-server's default)."""

MAX_LINE: Final = 64 << 10
"""Longest control line accepted from a client."""


def info_line() -> bytes:
    """The ``INFO`` the relay greets every connection with."""
    info = {
        "server_id": "mqbench-calibration-relay",
        "server_name": "mqbench-calibration-relay",
        "version": __version__,
        "proto": 1,
        "headers": False,
        "max_payload": MAX_PAYLOAD,
        "tls_required": False,
    }
    return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + CRLF


def subject_matches(pattern: bytes, subject: bytes) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` one or more trailing tokens."""
    p_tokens = pattern.split(b".")
    s_tokens = subject.split(b".")
    for k, token in enumerate(p_tokens):
        if token == b">":
            return len(s_tokens) > k
        if k >= len(s_tokens) or token not in (b"*", s_tokens[k]):
            return False
    return len(p_tokens) == len(s_tokens)


class NatsRelayError(Exception):
    """A client sent something the relay does not take."""


class NatsHub(Hub):
    """Subscriptions ``(connection, sid)`` by exact subject and by wildcard pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.exact: dict[bytes, list[tuple[NatsRelayConnection, bytes]]] = {}
        self.wildcard: list[tuple[bytes, NatsRelayConnection, bytes]] = []
        self._lines: dict[tuple[bytes, bytes, int], bytes] = {}

    def subscribe(self, subject: bytes, conn: NatsRelayConnection, sid: bytes) -> None:
        """Route ``subject`` to subscription ``sid`` of ``conn``."""
        if b"*" in subject.split(b".") or b">" in subject.split(b"."):
            self.wildcard.append((subject, conn, sid))
        else:
            self.exact.setdefault(subject, []).append((conn, sid))

    def unsubscribe(self, conn: NatsRelayConnection, sid: bytes | None) -> None:
        """Remove subscription ``sid`` of ``conn`` (all of them when ``sid`` is None)."""
        self.wildcard = [
            (p, c, s) for p, c, s in self.wildcard if c is not conn or sid not in (None, s)
        ]
        for subject, subs in list(self.exact.items()):
            kept = [(c, s) for c, s in subs if c is not conn or sid not in (None, s)]
            if kept:
                self.exact[subject] = kept
            else:
                del self.exact[subject]

    def route(self, subject: bytes, payload: bytes) -> None:
        """Queue a ``MSG`` with ``payload`` for every subscription matching ``subject``."""
        subs = self.exact.get(subject, ())
        if self.wildcard:
            subs = [*subs, *((c, s) for p, c, s in self.wildcard if subject_matches(p, subject))]
        size = len(payload)
        lines = self._lines
        for conn, sid in subs:
            key = (subject, sid, size)
            line = lines.get(key)
            if line is None:
                line = b"MSG %s %s %d\r\n" % (subject, sid, size)
                if len(lines) < 4096:
                    lines[key] = line
            conn.queue(line + payload + CRLF)
        if subs:
            self.routed += 1


class NatsRelayConnection(RelayConnection):
    """One client connection to the NATS relay."""

    def __init__(self, hub: NatsHub) -> None:
        super().__init__(hub)
        self.nats = hub
        self._buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Send ``INFO`` at once, as a NATS server does."""
        super().connection_made(transport)
        self.queue(info_line())
        self.flush()

    def data_received(self, data: bytes) -> None:
        """Parse complete operations, route, then write everything queued by this read."""
        t_read = time.time_ns()
        buf = self._buf + data if self._buf else data
        try:
            pos = self._parse(buf)
        except NatsRelayError as exc:
            self.queue(b"-ERR '%s'\r\n" % str(exc).encode())
            self.close_after_flush()
            self.hub.flush()
            return
        self._buf = buf[pos:]
        self.hub.flush(t_read)

    def _parse(self, data: bytes) -> int:
        """Handle every complete operation in ``data``; return where the rest starts."""
        n = len(data)
        pos = 0
        while pos < n:
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > MAX_LINE:
                    raise NatsRelayError("Maximum Control Line Exceeded")
                return pos
            if data.startswith(b"PUB ", pos):
                parts = data[pos + 4 : eol].split()
                if len(parts) not in (2, 3) or not parts[-1].isdigit():
                    raise NatsRelayError("Unknown Protocol Operation")
                size = int(parts[-1])
                if size > MAX_PAYLOAD:
                    raise NatsRelayError("Maximum Payload Violation")
                start = eol + 2
                end = start + size
                if end + 2 > n:
                    return pos
                self.nats.route(parts[0], data[start:end])
                pos = end + 2
                continue
            self._control(data[pos:eol])
            pos = eol + 2
        return pos

    def _control(self, line: bytes) -> None:
        parts = line.split()
        op = parts[0].upper() if parts else b""
        if op == b"PING":
            self.queue(PONG)
        elif op in (b"PONG", b"CONNECT"):
            return
        elif op == b"SUB" and len(parts) in (3, 4):
            self.nats.subscribe(parts[1], self, parts[-1])
        elif op == b"UNSUB" and len(parts) in (2, 3):
            self.nats.unsubscribe(self, parts[1])
        else:
            raise NatsRelayError("Unknown Protocol Operation")

    def forget(self) -> None:
        """Drop this connection's subscriptions."""
        self.nats.unsubscribe(self, None)


def relay_factory() -> tuple[NatsHub, Callable[[], NatsRelayConnection]]:
    """The relay's hub and a protocol factory for ``loop.create_server`` sharing it."""
    hub = NatsHub()
    return hub, lambda: NatsRelayConnection(hub)
