"""Kernel receive timestamps against the user-space clock after wake-up (run on demand).

A sender process writes 64-byte frames carrying their send time (``time.time_ns()`` just
before ``send``) on a loopback TCP connection at ``--rate`` frames/s. A receiver process,
built like a worker (spawned, uvloop), reads them in one of two ways:

* ``user``: an ``asyncio.Protocol`` on a uvloop transport, each read stamped with
  ``time.time_ns()`` in ``data_received`` (what the lean clients do,
  ``mqbench/transports/stream.py``);
* ``kernel``: the socket with ``SO_TIMESTAMPNS``, read by ``recvmsg`` from a loop reader;
  each read carries the kernel's receive time of its last segment, and is also stamped
  with ``time.time_ns()`` after ``recvmsg`` returns.

It prints, per mode and scheduling policy, the stamp minus the send time (p50/p99/p99.9 in
µs), for the kernel mode also user stamp minus kernel stamp (what a kernel stamp removes:
the receiver's wake-up and the event loop), and the receiver's CPU per read (µs).

    .venv/bin/python benchmarks/receive_stamp.py
    .venv/bin/python benchmarks/receive_stamp.py --rate 4000 --duration 10 --policy fifo
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import struct
import time
from typing import Any

import numpy as np

from mqbench.workload.realtime import RealtimeSettings, apply_realtime

FRAME = struct.Struct("<q56x")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
TIMESPEC = struct.Struct("@ll")


def _sender(port: int, rate: float, count: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    period = 1e9 / rate
    start = time.time_ns() + 200_000_000
    for k in range(count):
        due = start + int(k * period)
        while (wait := due - time.time_ns()) > 0:
            time.sleep(wait / 1e9 if wait > 200_000 else 0)
        sock.sendall(FRAME.pack(time.time_ns()))
    time.sleep(0.2)
    sock.close()


class _UserProtocol(asyncio.Protocol):
    def __init__(self, out: list[tuple[int, int, int]], done: asyncio.Future[None]) -> None:
        self.out, self.done, self.buf = out, done, b""
        self.reads = 0

    def data_received(self, data: bytes) -> None:
        t = time.time_ns()
        self.reads += 1
        self.buf += data
        while len(self.buf) >= FRAME.size:
            (sent,) = FRAME.unpack_from(self.buf)
            self.out.append((sent, t, 0))
            self.buf = self.buf[FRAME.size :]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def _receive_user(sock: socket.socket, out: list[tuple[int, int, int]]) -> int:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    protocol = _UserProtocol(out, done)
    await loop.connect_accepted_socket(lambda: protocol, sock)
    await done
    return protocol.reads


async def _receive_kernel(sock: socket.socket, out: list[tuple[int, int, int]]) -> int:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.setblocking(False)
    anc = socket.CMSG_SPACE(TIMESPEC.size)
    buf = bytearray()
    reads = 0

    def readable() -> None:
        nonlocal buf, reads
        try:
            data, ancdata, _, _ = sock.recvmsg(65536, anc)
        except BlockingIOError:
            return
        t_user = time.time_ns()
        if not data:
            loop.remove_reader(sock.fileno())
            done.set_result(None)
            return
        reads += 1
        t_kernel = 0
        for level, kind, raw in ancdata:
            if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
                sec, nsec = TIMESPEC.unpack_from(raw)
                t_kernel = sec * 1_000_000_000 + nsec
        buf += data
        while len(buf) >= FRAME.size:
            (sent,) = FRAME.unpack_from(buf)
            out.append((sent, t_user, t_kernel))
            del buf[: FRAME.size]

    loop.add_reader(sock.fileno(), readable)
    await done
    return reads


def _receiver(mode: str, policy: str, listener: socket.socket, conn: Any) -> None:
    settings = None if policy == "other" else RealtimeSettings(timer_slack_ns=None)
    applied = apply_realtime(settings)
    import uvloop

    sock, _ = listener.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out: list[tuple[int, int, int]] = []
    cpu0 = time.process_time()
    receive = _receive_user if mode == "user" else _receive_kernel
    reads = uvloop.run(receive(sock, out))
    cpu = time.process_time() - cpu0
    conn.send((out, reads, cpu, applied.policy))
    conn.close()


def _pct(values: np.ndarray, q: float) -> float:
    ordered = np.sort(values)
    return float(ordered[max(1, int(np.ceil(q / 100 * ordered.size))) - 1]) / 1e3


def measure(mode: str, policy: str, rate: float, duration: float) -> dict[str, Any]:
    """One receiver mode under one policy: stamps minus send times, CPU per read."""
    ctx = mp.get_context("spawn")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    parent, child = ctx.Pipe(duplex=False)
    receiver = ctx.Process(target=_receiver, args=(mode, policy, listener, child))
    receiver.start()
    sender = ctx.Process(target=_sender, args=(port, rate, int(rate * duration)))
    sender.start()
    out, reads, cpu, applied = parent.recv()
    sender.join(10)
    receiver.join(10)
    listener.close()
    stamps = np.array(out, dtype=np.int64)[int(rate * 0.5) :]  # skip the first 0.5 s
    user = stamps[:, 1] - stamps[:, 0]
    row = {
        "mode": mode,
        "policy": applied,
        "frames": int(stamps.shape[0]),
        "reads": reads,
        "user_p50": _pct(user, 50),
        "user_p99": _pct(user, 99),
        "user_p999": _pct(user, 99.9),
        "cpu_us_per_read": 1e6 * cpu / max(1, reads),
    }
    if mode == "kernel":
        kernel = stamps[:, 2] - stamps[:, 0]
        gap = stamps[:, 1] - stamps[:, 2]
        row |= {
            "kernel_p50": _pct(kernel, 50),
            "kernel_p99": _pct(kernel, 99),
            "kernel_p999": _pct(kernel, 99.9),
            "gap_p50": _pct(gap, 50),
            "gap_p99": _pct(gap, 99),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--policy", default="other,fifo", help="other, fifo or both")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    args = parser.parse_args()
    print(
        f"# {args.rate:g} frames/s, {args.duration:g} s, load average "
        f"{os.getloadavg()[0]:.2f}; µs (stamp - send time); cpu = receiver CPU per read",
        flush=True,
    )
    columns = (
        "mode", "policy", "frames", "reads", "user_p50", "user_p99", "user_p999",
        "kernel_p50", "kernel_p99", "kernel_p999", "gap_p50", "gap_p99", "cpu_us_per_read",
    )  # fmt: skip
    print(" ".join(f"{c:>11}" for c in columns), flush=True)
    for _ in range(args.rounds):
        for policy in args.policy.split(","):
            for mode in ("user", "kernel"):
                row = measure(mode, policy, args.rate, args.duration)
                cells = [row.get(c, "-") for c in columns]
                text = [f"{v:>11.1f}" if isinstance(v, float) else f"{v!s:>11}" for v in cells]
                print(" ".join(text), flush=True)


if __name__ == "__main__":
    main()
