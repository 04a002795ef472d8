"""Clock offsets between a load task and the driver: a tiny TCP time service and probes.

The driver serves its clock; a task sends a few one-byte requests and gets the driver's
``time_ns`` back for each. A probe sent at ``t0`` and answered at ``t1`` (task clock) with
the driver's time ``s`` says the task's clock is ahead by ``(t0 + t1)/2 - s``, exact up to
half the round trip. The estimate keeps the probe with the smallest round trip (the one
least delayed by queues and scheduling) and reports ``rtt/2`` as its error bound.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.clocks import ClockOffset

Clock = Callable[[], int]
"""A wall clock in nanoseconds (``time.time_ns``; tests inject a skewed one)."""

PROBES = 16
"""Probes per measurement: enough that one of them usually sees an idle path."""
_REPLY = struct.Struct(">q")


@dataclass(frozen=True)
class Probe:
    """One request/response: sent and answered on the task's clock, the driver's time."""

    sent_ns: int
    server_ns: int
    received_ns: int

    @property
    def rtt_ns(self) -> int:
        """Round trip on the task's clock."""
        return self.received_ns - self.sent_ns

    @property
    def offset_ns(self) -> int:
        """Task clock minus driver clock, assuming the reply came half-way."""
        return (self.sent_ns + self.received_ns) // 2 - self.server_ns


def estimate(probes: Sequence[Probe]) -> ClockOffset:
    """The min-RTT estimate: the fastest probe's offset, ``±rtt/2``."""
    if not probes:
        raise ValueError("no clock probes")
    best = min(probes, key=lambda p: p.rtt_ns)
    return ClockOffset(
        offset_ns=best.offset_ns,
        error_ns=(best.rtt_ns + 1) // 2,
        rtt_ns=best.rtt_ns,
        probes=len(probes),
    )


class TimeService:
    """Serves ``clock()`` to any client on ``host`` (a free port), one thread per client."""

    def __init__(self, host: str, clock: Clock = time.time_ns) -> None:
        self._clock = clock
        self._sock = socket.create_server((host, 0))
        self._sock.settimeout(0.2)
        self.endpoint = Endpoint(host, int(self._sock.getsockname()[1]))
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="mqbench-time", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._clients.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(1):
                conn.sendall(_REPLY.pack(self._clock()))
        conn.close()

    def close(self) -> None:
        """Stop serving (clients still connected see their connection close)."""
        self._stop.set()
        self._sock.close()
        for conn in self._clients:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(2)


def measure_offset(
    endpoint: Endpoint, probes: int = PROBES, clock: Clock = time.time_ns, timeout_s: float = 5.0
) -> ClockOffset:
    """Probe the time service at ``endpoint`` ``probes`` times; the min-RTT estimate.

    Raises ``TransportError`` when the service cannot be reached or stops answering.
    """
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            found = []
            for _ in range(probes):
                t0 = clock()
                sock.sendall(b"t")
                reply = _recv_exactly(sock, _REPLY.size)
                t1 = clock()
                found.append(Probe(t0, _REPLY.unpack(reply)[0], t1))
    except OSError as exc:
        raise TransportError(
            f"clock probe to the driver at {endpoint.host}:{endpoint.port}: {exc.strerror or exc}"
        ) from None
    return estimate(found)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError("the time service closed the connection")
        data += chunk
    return data
