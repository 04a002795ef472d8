"""What every protocol relay shares: coalesced writes and the relay registry.

A relay is *not* a broker: it keeps no sessions, queues nothing and acknowledges only what
the lean client's handshake waits for. It hands each published message straight to the
connections subscribed to its topic at that moment, on 127.0.0.1, so a cell run through it
measures the generator, its clients and the loopback path, plus one minimal hop.

Writes are coalesced per read: a relay connection queues what it sends (to itself or to
subscribers) with :meth:`RelayConnection.queue` and the :class:`Hub` writes every queued
buffer once, at the end of the ``data_received`` that produced them. The hub also records
how long each read that forwarded messages was held (:class:`HopStats`), so the relay's own
share of a floor can be told apart from the tool's.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass
from typing import Final, cast

RELAY_PROTOCOLS: Final = ("mqtt", "nats", "redis", "amqp", "zenoh")
"""Protocols with a broker-less calibration path, in display order."""

WRITE_BUFFER_HIGH: Final = 64 << 20
"""Relay connections never pause a sender; a slow reader just buffers (bounded by the run)."""


MAX_HOPS: Final = 2_000_000
"""Residence times kept per relay (a calibration cell forwards far fewer reads)."""


@dataclass(frozen=True)
class HopStats:
    """How long the relay held forwarded data: from the start of handling a read that
    routed at least one message to the end of its writes (wall clock, in-process)."""

    reads: int
    p50_us: float
    p99_us: float
    max_us: float


class Hub:
    """Subscriptions of one relay plus the set of connections with queued output."""

    def __init__(self) -> None:
        self.dirty: list[RelayConnection] = []
        self.routed = 0
        """Messages routed since the last flush."""
        self.hops: list[int] = []

    def flush(self, t_read_ns: int | None = None) -> None:
        """Write every queued buffer (one ``write`` per connection); when the read that
        started at ``t_read_ns`` routed messages, record how long the relay held them."""
        dirty = self.dirty
        if dirty:
            self.dirty = []
            for conn in dirty:
                conn.flush()
        if self.routed:
            self.routed = 0
            if t_read_ns is not None and len(self.hops) < MAX_HOPS:
                self.hops.append(time.time_ns() - t_read_ns)

    def hop_stats(self) -> HopStats | None:
        """Nearest-rank percentiles of the recorded residence times (None: none)."""
        if not self.hops:
            return None
        ordered = sorted(self.hops)
        n = len(ordered)

        def pct(q: int) -> float:
            return ordered[max(1, -(-n * q // 100)) - 1] / 1000

        return HopStats(n, pct(50), pct(99), ordered[-1] / 1000)


class RelayConnection(asyncio.Protocol):
    """Base of the per-protocol connection handlers: socket setup and queued output."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self._out = bytearray()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """TCP_NODELAY (latency) and a high write-buffer limit (never pause)."""
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)

    def queue(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data`` to this connection's output; written at the hub's next flush."""
        if self.closed:
            return
        if not self._out:
            self.hub.dirty.append(self)
        self._out += data

    def flush(self) -> None:
        """Hand the queued output to the transport."""
        out = self._out
        if not out:
            return
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(bytes(out))
        out.clear()

    def close_after_flush(self) -> None:
        """Write what is queued, then close (protocol goodbye or error)."""
        self.flush()
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection's subscriptions (subclasses extend ``forget``)."""
        self.closed = True
        self._out.clear()
        self.forget()

    def forget(self) -> None:
        """Remove this connection from the hub's routing tables."""
