"""What one hop through a Toxiproxy-API proxy costs: round trip and bulk rate, no toxics.

Starts a loopback echo server and a sink (threads), the built-in proxy as a process (on
uvloop, as runs use it; stopped by PID at the end) and, for each ``--proxy-url`` given (a
real ``toxiproxy-server``, another build of mqbench's), one more proxy through that API.
Then, direct and through every proxy in turn: ``--round-trips`` 64-byte ping-pongs on one
connection (median and p99), and ``--bulk-mib`` MiB sent one way to the sink (MB/s).

    .venv/bin/python benchmarks/fault_proxy_bench.py
    .venv/bin/python benchmarks/fault_proxy_bench.py --proxy-url real=http://127.0.0.1:8474

Bounds: at most 100,000 round trips and 1 GiB per path, and 60 s per measurement.
"""

from __future__ import annotations

import argparse
import os
import socket
import socketserver
import statistics
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mqbench.faults.client import ToxiproxyClient
from mqbench.faults.proxy import start_proxy_process

LIMIT_S = 60.0
BLOCK = 65536


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := sock.recv(BLOCK):
            sock.sendall(data)


class _Sink(socketserver.BaseRequestHandler):
    """Reads an 8-byte length, then that many bytes, then answers 8 bytes."""

    def handle(self) -> None:
        sock = self.request
        (remaining,) = struct.unpack("!Q", _recv_exact(sock, 8))
        while remaining > 0:
            data = sock.recv(min(remaining, BLOCK))
            if not data:
                return
            remaining -= len(data)
        sock.sendall(b"received")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed early")
        buf += chunk
    return bytes(buf)


@contextmanager
def _server(handler: type[socketserver.BaseRequestHandler]) -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def round_trips(port: int, count: int) -> list[float]:
    """``count`` 64-byte ping-pongs on one connection, seconds each."""
    payload = b"p" * 64
    out = []
    deadline = time.monotonic() + LIMIT_S
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            t0 = time.perf_counter()
            sock.sendall(payload)
            _recv_exact(sock, 64)
            out.append(time.perf_counter() - t0)
            if time.monotonic() > deadline:
                break
    return out


def bulk(port: int, mib: int) -> float:
    """MB/s of ``mib`` MiB sent one way and acknowledged by the sink."""
    total = mib * 1024 * 1024
    block = b"x" * BLOCK
    with socket.create_connection(("127.0.0.1", port), timeout=LIMIT_S) as sock:
        t0 = time.perf_counter()
        sock.sendall(struct.pack("!Q", total))
        sent = 0
        while sent < total:
            n = min(BLOCK, total - sent)
            sock.sendall(block[:n])
            sent += n
        _recv_exact(sock, 8)
        return total / (time.perf_counter() - t0) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--bulk-mib", type=int, default=256)
    parser.add_argument("--proxy-url", action="append", default=[], metavar="LABEL=URL")
    args = parser.parse_args()
    count = min(args.round_trips, 100_000)
    mib = min(args.bulk_mib, 1024)
    one, five, _ = os.getloadavg()
    print(f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs")
    process = start_proxy_process(api_port=0)
    try:
        apis = [("builtin", process.url)] + [tuple(u.split("=", 1)) for u in args.proxy_url]
        with _server(_Echo) as echo, _server(_Sink) as sink:
            paths: list[tuple[str, int, int]] = [("direct", echo, sink)]
            for label, url in apis:
                client = ToxiproxyClient(url)
                ports = []
                for name, upstream in (("bench-echo", echo), ("bench-sink", sink)):
                    client.delete_proxy(name, missing_ok=True)
                    ports.append(client.create_proxy(name, f"127.0.0.1:{upstream}").listen_port)
                paths.append((f"{label} {client.version()}", ports[0], ports[1]))
            print(f"{'path':28} {'rtt p50 us':>11} {'rtt p99 us':>11} {'bulk MB/s':>10}")
            for label, echo_port, sink_port in paths:
                rtts = sorted(round_trips(echo_port, count))
                p50 = statistics.median(rtts) * 1e6
                p99 = rtts[int(0.99 * (len(rtts) - 1))] * 1e6
                rate = bulk(sink_port, mib)
                print(f"{label:28} {p50:11.0f} {p99:11.0f} {rate:10.0f}")
            for _label, url in apis:
                client = ToxiproxyClient(url)
                for name in ("bench-echo", "bench-sink"):
                    client.delete_proxy(name, missing_ok=True)
    finally:
        process.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
