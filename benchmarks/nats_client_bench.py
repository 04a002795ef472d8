"""Throughput of mqbench's lean NATS client vs nats-py, end to end through a local nats-server.

Starts ``nats-server`` on a free loopback port (stopped by PID at the end), then for each
client runs N publisher/subscriber connection pairs in this one process (subject
``bench.<i>`` per pair), publishes fixed-size payloads as fast as a bounded in-flight window
allows, and reports delivered messages/s, client CPU (this process) and server CPU.

This is a closed-loop, max-rate measurement of *client cost*: use it to compare clients and
to profile, never for broker latency.

    .venv/bin/python benchmarks/nats_client_bench.py --pairs 1 --messages 1000000
    .venv/bin/python benchmarks/nats_client_bench.py --pairs 10 --profile

Bounds: at most 1,000,000 messages per client and 60 s per client run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from mqbench.endpoint import Endpoint
from mqbench.transports.base import ClientOptions
from mqbench.transports.nats import NatsTransport

MAX_MESSAGES = 1_000_000
MAX_SECONDS = 60.0
BATCH = int(os.environ.get("BENCH_BATCH", "500"))


@dataclass
class Result:
    """One client's run."""

    client: str
    pairs: int
    sent: int
    delivered: int
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float

    def line(self) -> str:
        rate = self.delivered / self.wall_s if self.wall_s > 0 else 0.0
        return (
            f"{self.client:<8} pairs={self.pairs:<4} delivered={self.delivered:>8}/{self.sent:<8} "
            f"wall={self.wall_s:6.2f}s  {rate:>10,.0f} msg/s  "
            f"client CPU {self.client_cpu_s / self.wall_s * 100:5.1f}% "
            f"({self.client_cpu_s / max(self.delivered, 1) * 1e6:5.2f} us/msg)  "
            f"server CPU {self.server_cpu_s / self.wall_s * 100:5.1f}%"
        )


class Counter:
    """Counts deliveries across all subscribers; wakes the waiter when all arrived."""

    def __init__(self, expected: int) -> None:
        self.received = 0
        self.expected = expected
        self.done = asyncio.Event()
        self.wake_at = expected
        self.wake = asyncio.Event()

    def hit(self) -> None:
        self.received += 1
        if self.received >= self.wake_at:
            self.wake.set()
            if self.received >= self.expected:
                self.done.set()

    async def catch_up(self, sent: int, window: int, deadline: float) -> None:
        """Wait (without spinning) until at most ``window // 2`` messages are in flight."""
        while sent - self.received > window:
            self.wake_at = sent - window // 2
            self.wake.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), remaining)
        self.wake_at = self.expected


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(binary: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [binary, "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):  # bounded: ~10 s
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_server(proc)
    raise SystemExit(f"nats-server did not start on port {port}")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def pump(
    publish: Callable[[], Any],
    count: int,
    counter: Counter,
    window: int,
    sent_total: list[int],
    deadline: float,
) -> None:
    """Publish ``count`` messages in batches, keeping at most ``window`` in flight overall."""
    done = 0
    while done < count and time.monotonic() < deadline:
        batch = min(BATCH, count - done)
        for _ in range(batch):
            publish()
        done += batch
        sent_total[0] += batch
        await counter.catch_up(sent_total[0], window, deadline)
        await asyncio.sleep(0)


async def run_ours(port: int, pairs: int, per_pair: int, payload: bytes, window: int) -> Result:
    transport = NatsTransport()
    endpoint = Endpoint("127.0.0.1", port)
    counter = Counter(pairs * per_pair)
    hit = counter.hit
    subs, pubs, senders = [], [], []

    def on_message(data: memoryview | bytes, t_recv_ns: int) -> None:
        hit()

    for i in range(pairs):
        sub = transport.create_client(endpoint, ClientOptions(client_id=f"sub{i}"))
        pub = transport.create_client(endpoint, ClientOptions(client_id=f"pub{i}"))
        await sub.connect()
        await pub.connect()
        await sub.subscribe(f"bench.{i}", 0, on_message)
        subs.append(sub)
        pubs.append(pub)
        senders.append(pub.sender(f"bench.{i}", 0))

    def publisher(send: Callable[[bytes, int], bool]) -> Callable[[], Any]:
        return lambda: send(payload, 0)

    result = await measure(
        "ours",
        pairs,
        counter,
        [publisher(s) for s in senders],
        per_pair,
        window,
    )
    for c in pubs + subs:
        await c.close()
    return result


async def run_nats_py(port: int, pairs: int, per_pair: int, payload: bytes, window: int) -> Result:
    import nats

    counter = Counter(pairs * per_pair)
    hit = counter.hit
    conns = []

    async def on_msg(msg: Any) -> None:
        hit()

    publishers = []
    for i in range(pairs):
        sub = await nats.connect(f"nats://127.0.0.1:{port}", pending_size=64 << 20)
        pub = await nats.connect(f"nats://127.0.0.1:{port}", pending_size=64 << 20)
        await sub.subscribe(f"bench.{i}", cb=on_msg, pending_msgs_limit=1 << 20)
        await sub.flush()
        conns += [sub, pub]
        subject = f"bench.{i}"

        def make(p: Any, subj: str = subject) -> Callable[[], Any]:
            # nats-py's publish is a coroutine (it only appends to its pending buffer);
            # pump_awaited awaits each one, as a nats-py application would.
            return lambda: p.publish(subj, payload)

        publishers.append(make(pub))

    result = await measure("nats-py", pairs, counter, publishers, per_pair, window, awaited=True)
    for c in conns:
        await c.close()
    return result


async def measure(
    name: str,
    pairs: int,
    counter: Counter,
    publishers: list[Callable[[], Any]],
    per_pair: int,
    window: int,
    awaited: bool = False,
) -> Result:
    me = psutil.Process()
    server = psutil.Process(SERVER_PID[0])
    cpu0 = me.cpu_times()
    srv0 = server.cpu_times()
    t0 = time.monotonic()
    deadline = t0 + MAX_SECONDS
    sent_total = [0]
    if awaited:
        tasks = [
            pump_awaited(p, per_pair, counter, window, sent_total, deadline) for p in publishers
        ]
    else:
        tasks = [pump(p, per_pair, counter, window, sent_total, deadline) for p in publishers]
    await asyncio.gather(*tasks)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(counter.done.wait(), max(0.1, deadline - time.monotonic()))
    wall = time.monotonic() - t0
    cpu1 = me.cpu_times()
    srv1 = server.cpu_times()
    return Result(
        client=name,
        pairs=pairs,
        sent=sent_total[0],
        delivered=counter.received,
        wall_s=wall,
        client_cpu_s=(cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
        server_cpu_s=(srv1.user + srv1.system) - (srv0.user + srv0.system),
    )


async def pump_awaited(
    publish: Callable[[], Awaitable[Any]],
    count: int,
    counter: Counter,
    window: int,
    sent_total: list[int],
    deadline: float,
) -> None:
    """Like ``pump`` for a client whose publish must be awaited (nats-py)."""
    done = 0
    while done < count and time.monotonic() < deadline:
        batch = min(BATCH, count - done)
        for _ in range(batch):
            await publish()
        done += batch
        sent_total[0] += batch
        await counter.catch_up(sent_total[0], window, deadline)
        await asyncio.sleep(0)


SERVER_PID = [0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1, help="publisher/subscriber pairs")
    parser.add_argument("--messages", type=int, default=500_000, help="total, ours")
    parser.add_argument("--nats-py-messages", type=int, default=100_000, help="total, nats-py")
    parser.add_argument("--payload", type=int, default=64, help="payload bytes")
    parser.add_argument("--window", type=int, default=20_000, help="max in flight overall")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--profile", action="store_true", help="cProfile our client's run")
    parser.add_argument("--skip-nats-py", action="store_true")
    parser.add_argument(
        "--nats-server", default=str(Path(sys.executable).parent / "nats-server"), help="binary"
    )
    args = parser.parse_args()
    total = min(args.messages, MAX_MESSAGES)
    theirs = min(args.nats_py_messages, MAX_MESSAGES)
    payload = os.urandom(args.payload)

    if args.loop == "uvloop":
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        loop_factory = asyncio.new_event_loop

    port = free_port()
    proc = start_server(args.nats_server, port)
    SERVER_PID[0] = proc.pid
    print(
        f"nats-server pid {proc.pid} port {port}; loop={args.loop}; payload={args.payload} B; "
        f"cores={os.cpu_count()}"
    )
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            per_pair = max(1, total // args.pairs)
            profiler = cProfile.Profile() if args.profile else None
            if profiler:
                profiler.enable()
            ours = runner.run(run_ours(port, args.pairs, per_pair, payload, args.window))
            if profiler:
                profiler.disable()
            print(ours.line())
            if not args.skip_nats_py:
                per_pair = max(1, theirs // args.pairs)
                other = runner.run(run_nats_py(port, args.pairs, per_pair, payload, args.window))
                print(other.line())
                ratio = (ours.delivered / ours.wall_s) / max(other.delivered / other.wall_s, 1)
                print(f"ours / nats-py throughput: {ratio:.1f}x")
            if profiler:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
                print(out.getvalue())
    finally:
        stop_server(proc)


if __name__ == "__main__":
    main()
