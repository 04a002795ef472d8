"""A broker-less Redis Pub/Sub (RESP2) relay for calibration; commands parsed by hiredis.

It answers ``PING``, ``CLIENT``, ``AUTH``, ``SELECT``, ``QUIT``, ``SUBSCRIBE`` and
``UNSUBSCRIBE`` as a RESP2 Redis does for the lean client, and forwards each ``PUBLISH`` as
a ``message`` push to the connections subscribed to that exact channel (the lean client
subscribes to exact channels only), replying with the receiver count. Anything else gets
``-ERR``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

import hiredis

from mqbench.calibration.relays import Hub, RelayConnection
from mqbench.wire.resp import CRLF, bulk, message_prefix

OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
SUBSCRIBED_PONG: Final = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
"""``PING`` on a subscribed RESP2 connection answers with a ``pong`` push."""


def _confirmation(kind: bytes, channel: bytes, count: int) -> bytes:
    return b"*3\r\n" + bulk(kind) + bulk(channel) + b":%d\r\n" % count


class RedisHub(Hub):
    """Subscribed connections by channel."""

    def __init__(self) -> None:
        super().__init__()
        self.channels: dict[bytes, list[RedisRelayConnection]] = {}
        self._prefixes: dict[tuple[bytes, int], bytes] = {}

    def route(self, channel: bytes, payload: bytes) -> int:
        """Queue a ``message`` push for every subscriber of ``channel``; return how many."""
        subs = self.channels.get(channel)
        if not subs:
            return 0
        key = (channel, len(payload))
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = message_prefix(channel, len(payload))
            if len(self._prefixes) < 4096:
                self._prefixes[key] = prefix
        frame = prefix + payload + CRLF
        for conn in subs:
            conn.queue(frame)
        self.routed += 1
        return len(subs)


class RedisRelayConnection(RelayConnection):
    """One client connection to the Redis relay."""

    def __init__(self, hub: RedisHub) -> None:
        super().__init__(hub)
        self.redis = hub
        self.reader = hiredis.Reader()
        self.subscribed: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        """Run every complete command, then write everything queued by this read."""
        t_read = time.time_ns()
        reader = self.reader
        try:
            reader.feed(data)
            while (command := reader.gets()) is not False:
                self._command(command)
        except hiredis.ProtocolError:
            self.queue(b"-ERR Protocol error\r\n")
            self.close_after_flush()
        self.hub.flush(t_read)

    def _command(self, command: Any) -> None:
        if not isinstance(command, list) or not command:
            self.queue(b"-ERR Protocol error: expected an array of bulk strings\r\n")
            return
        name = bytes(command[0]).upper()
        args: list[bytes] = command[1:]
        if name == b"PUBLISH" and len(args) == 2:
            self.queue(b":%d\r\n" % self.redis.route(args[0], args[1]))
        elif name == b"PING":
            self.queue(SUBSCRIBED_PONG if self.subscribed else PONG)
        elif name in (b"CLIENT", b"AUTH", b"SELECT"):
            self.queue(OK)
        elif name == b"SUBSCRIBE" and args:
            for channel in args:
                if channel not in self.subscribed:
                    self.subscribed.append(channel)
                    self.redis.channels.setdefault(channel, []).append(self)
                self.queue(_confirmation(b"subscribe", channel, len(self.subscribed)))
        elif name == b"UNSUBSCRIBE":
            for channel in args or list(self.subscribed):
                if channel in self.subscribed:
                    self.subscribed.remove(channel)
                    self.redis.channels[channel].remove(self)
                self.queue(_confirmation(b"unsubscribe", channel, len(self.subscribed)))
        elif name == b"QUIT":
            self.queue(OK)
            self.close_after_flush()
        else:
            shown = name.decode("utf-8", "replace")
            self.queue(b"-ERR unknown command '%s' for the calibration relay\r\n" % shown.encode())

    def forget(self) -> None:
        """Drop this connection's subscriptions."""
        for channel in self.subscribed:
            subs = self.redis.channels.get(channel)
            if subs and self in subs:
                subs.remove(self)
        self.subscribed = []


def relay_factory() -> tuple[RedisHub, Callable[[], RedisRelayConnection]]:
    """The relay's hub and a protocol factory for ``loop.create_server`` sharing it."""
    hub = RedisHub()
    return hub, lambda: RedisRelayConnection(hub)
