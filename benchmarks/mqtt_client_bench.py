"""Max-rate throughput of the lean MQTT client against a native mosquitto (not a test).

Starts ``mosquitto`` on a free loopback port (stopped by PID at the end), connects
``--pairs`` publisher/subscriber client pairs in ONE process (uvloop by default), one topic
per pair, and blasts QoS 0 (or 1) messages of ``--size`` bytes as fast as the broker takes
them, with a bounded window of messages in flight per pair so nothing queues without limit.
Each payload carries the 24-byte mqbench header stamped with ``time.time_ns()`` and each
subscriber unpacks it, as the real workload does.

Prints delivered msg/s, client CPU (cores) and broker CPU (cores). Bounded by ``--count``
messages in total and ``--max-seconds`` of wall time.

    .venv/bin/python benchmarks/mqtt_client_bench.py --pairs 1 --count 1000000
    .venv/bin/python benchmarks/mqtt_client_bench.py --profile   # cProfile of the client
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from mqbench.endpoint import Endpoint
from mqbench.records.format import HEADER
from mqbench.transports.base import ClientOptions, MessageHandler, Sender
from mqbench.transports.mqtt import MqttClient, MqttTransport


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_mosquitto(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        "max_queued_messages 0\n"
    )
    workdir.chmod(0o755)
    conf.chmod(0o644)
    proc = subprocess.Popen(
        [exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise SystemExit(f"mosquitto exited: {err}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    stop(proc)
    raise SystemExit("mosquitto did not open its port within 10 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class Pair:
    index: int
    count: int
    received: int = 0
    wake_at: int = -1
    bad: int = 0
    event: asyncio.Event = field(default_factory=asyncio.Event)


async def run(args: argparse.Namespace, port: int, broker_pid: int) -> None:
    transport = MqttTransport()
    endpoint = Endpoint("127.0.0.1", port)
    per_pair = args.count // args.pairs
    pairs = [Pair(i, per_pair) for i in range(args.pairs)]
    clients: list[MqttClient] = []
    senders: list[Sender] = []
    for pair in pairs:
        sub = transport.create_client(endpoint, ClientOptions(f"bench-sub-{pair.index}"))
        pub = transport.create_client(endpoint, ClientOptions(f"bench-pub-{pair.index}"))
        await sub.connect()
        await pub.connect()
        clients += [sub, pub]
        topic = f"bench/{pair.index}"
        await sub.subscribe(topic, args.qos, make_handler(pair))
        senders.append(pub.sender(topic, args.qos))

    broker = psutil.Process(broker_pid)
    broker.cpu_percent(None)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = time.monotonic() + args.max_seconds
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    await asyncio.gather(
        *(
            blast(p, s, args.size, args.window, args.burst, deadline)
            for p, s in zip(pairs, senders, strict=True)
        )
    )
    elapsed = time.perf_counter() - t0
    if profiler:
        profiler.disable()
    cpu = time.process_time() - cpu0
    broker_cpu = broker.cpu_percent(None) / 100
    delivered = sum(p.received for p in pairs)
    sent = sum(p.count for p in pairs)
    for client in clients:
        await client.close()
    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(
        f"pairs={args.pairs} qos={args.qos} size={args.size}B loop={loop_name} "
        f"window={args.window} burst={args.burst}"
    )
    print(f"delivered {delivered}/{sent} in {elapsed:.2f} s: {delivered / elapsed:,.0f} msg/s")
    print(f"client CPU {cpu / elapsed:.2f} cores ({cpu / max(delivered, 1) * 1e6:.2f} us/msg)")
    print(f"broker CPU {broker_cpu:.2f} cores")
    if any(p.bad for p in pairs):
        print(f"out-of-order or foreign messages: {sum(p.bad for p in pairs)}")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def make_handler(pair: Pair) -> MessageHandler:
    unpack = HEADER.unpack_from

    def on_message(payload: memoryview | bytes, t_recv: int) -> None:
        _pub, seq, _t_sent, _spare = unpack(payload)
        if seq != pair.received:
            pair.bad += 1
        pair.received += 1
        if pair.received >= pair.wake_at:
            pair.event.set()

    return on_message


async def blast(
    pair: Pair, send: Sender, size: int, window: int, burst: int, deadline: float
) -> None:
    pack = HEADER.pack
    now = time.time_ns
    pad = b"\0" * (size - HEADER.size)
    idx = pair.index
    seq = 0
    while seq < pair.count:
        if time.monotonic() > deadline:
            pair.count = seq
            break
        end = min(seq + burst, pair.count)
        while seq < end:
            send(pack(idx, seq, now(), 0) + pad, seq)
            seq += 1
        if seq - pair.received > window:
            pair.wake_at = seq - window // 2
            pair.event.clear()
            try:
                await asyncio.wait_for(pair.event.wait(), 10)
            except TimeoutError:
                print(f"pair {idx}: no progress for 10 s at {pair.received}/{seq}", file=sys.stderr)
                pair.count = seq
                return
        else:
            await asyncio.sleep(0)
    drain_deadline = time.monotonic() + 10
    while pair.received < pair.count and time.monotonic() < drain_deadline:
        pair.wake_at = pair.count
        pair.event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pair.event.wait(), 1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--count", type=int, default=1_000_000, help="messages in total")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--qos", type=int, default=0, choices=(0, 1))
    parser.add_argument("--window", type=int, default=20_000, help="max in flight per pair")
    parser.add_argument("--burst", type=int, default=1000, help="sends between yields")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--asyncio", action="store_true", help="default loop instead of uvloop")
    parser.add_argument("--profile", action="store_true", help="cProfile the blast phase")
    parser.add_argument("--port", type=int, default=0, help="use a running broker on this port")
    args = parser.parse_args()
    if args.size < HEADER.size:
        parser.error(f"--size must be >= {HEADER.size}")
    port = args.port or free_port()
    proc = None
    with tempfile.TemporaryDirectory(prefix="mqbench-bench-") as tmp:
        try:
            if not args.port:
                proc = start_mosquitto(Path(tmp), port)
                broker_pid = proc.pid
            else:
                broker_pid = next(
                    c.pid
                    for c in psutil.net_connections("tcp")
                    if c.laddr and c.laddr.port == port and c.pid
                )
            if args.asyncio:
                asyncio.run(run(args, port, broker_pid))
            else:
                import uvloop

                uvloop.run(run(args, port, broker_pid))
        finally:
            if proc is not None:
                stop(proc)
    print(f"client pid {os.getpid()} done")


if __name__ == "__main__":
    main()
