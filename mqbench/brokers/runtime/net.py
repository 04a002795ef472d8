"""Loopback networking helpers for runtimes: free ports, port checks, bounded TCP probes.

Free-port race: ``free_port`` binds port 0, reads the port the kernel chose and closes the
socket before the broker binds it. Another process may take the port in between. The
window is small (milliseconds) and the kernel hands out ephemeral ports in a rotating
order, so a clash is rare; when it happens the broker exits during start-up with "address
in use" in its log, and ``NativeRuntime`` retries a port it picked itself (never a port the
user asked for).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and 127.0.0.0/8 / ::1 addresses."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that was free a moment ago (see the module docstring)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_in_use(host: str, port: int) -> bool:
    """True when something is bound to ``host:port`` (TIME_WAIT leftovers do not count).

    ``SO_REUSEADDR`` is set like brokers set it, so a port that only has connections in
    TIME_WAIT is reported free, while a listening socket still makes ``bind`` fail.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


def tcp_connect(host: str, port: int, timeout_s: float) -> socket.socket | None:
    """Open a TCP connection within ``timeout_s``; None when refused or timed out."""
    try:
        return socket.create_connection((host, port), timeout=max(timeout_s, 0.01))
    except OSError:
        return None


def tcp_reachable(host: str, port: int, timeout_s: float, interval_s: float = 0.1) -> bool:
    """Retry a TCP connect to ``host:port`` until it succeeds or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        sock = tcp_connect(host, port, min(max(remaining, 0.01), 1.0))
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
            return True
        if time.monotonic() + interval_s > deadline:
            return False
        time.sleep(interval_s)


def recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    """Read exactly ``n`` bytes before ``deadline`` (monotonic); raises OSError otherwise."""
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        sock.settimeout(remaining)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def recv_line(sock: socket.socket, deadline: float, limit: int = 65536) -> bytes:
    """Read up to and including ``\\r\\n`` before ``deadline``; raises OSError otherwise."""
    buf = bytearray()
    while not buf.endswith(b"\r\n"):
        if len(buf) > limit:
            raise ConnectionError("line too long")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        sock.settimeout(remaining)
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)
