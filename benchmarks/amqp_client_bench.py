"""Max-rate throughput of the lean AMQP client (and aio-pika) through a native RabbitMQ.

Starts its own RabbitMQ node (the ``rabbitmq-amqp`` native target, in a temporary
directory; stopped by PID at the end, together with the epmd it started), then runs
``--procs`` generator processes (default 2). Each process connects ``--pairs`` publisher /
subscriber client pairs (one routing key per pair), waits until every process is ready,
and blasts ``--size``-byte messages (the 24-byte mqbench header stamped with
``time.time_ns()``, unpacked by the subscriber) with a bounded window in flight per pair.

Prints delivered msg/s (all processes), client CPU and broker CPU (cores). Bounded: at most
1,000,000 messages in total and ``--max-seconds`` (<= 60) of sending per run.

    .venv/bin/python benchmarks/amqp_client_bench.py                       # lean client
    .venv/bin/python benchmarks/amqp_client_bench.py --client aio-pika --count 50000
    .venv/bin/python benchmarks/amqp_client_bench.py --client both

This is a closed-loop measurement of client cost, never of broker latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psutil

from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.endpoint import Endpoint
from mqbench.records.format import HEADER
from mqbench.transports.base import Client, ClientOptions, MessageHandler, Sender
from mqbench.transports.registry import get_transport

MAX_MESSAGES = 1_000_000
MAX_SECONDS = 60.0


@dataclass
class Pair:
    index: int
    count: int
    received: int = 0
    wake_at: int = -1
    bad: int = 0
    event: asyncio.Event = field(default_factory=asyncio.Event)


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


async def blast(pair: Pair, send: Sender, size: int, window: int, deadline: float) -> None:
    pack = HEADER.pack
    now = time.time_ns
    pad = b"\0" * (size - HEADER.size)
    idx = pair.index
    seq = 0
    burst = 500
    while seq < pair.count:
        if time.monotonic() > deadline:
            pair.count = seq
            break
        end = min(seq + burst, pair.count)
        while seq < end:
            if not send(pack(idx, seq, now(), 0) + pad, seq):
                pair.count = seq
                print(f"pair {idx}: sender refused at {seq}", file=sys.stderr)
                return
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


async def worker_main(
    proc_index: int, args: dict[str, Any], port: int, barrier: Barrier
) -> dict[str, Any]:
    transport = get_transport(args["client"])
    endpoint = Endpoint("127.0.0.1", port)
    per_pair = args["count"] // (args["procs"] * args["pairs"])
    pairs = [Pair(proc_index * args["pairs"] + i, per_pair) for i in range(args["pairs"])]
    clients: list[Client] = []
    senders: list[Sender] = []
    for pair in pairs:
        sub = transport.create_client(endpoint, ClientOptions(f"bench-sub-{pair.index}"))
        pub = transport.create_client(endpoint, ClientOptions(f"bench-pub-{pair.index}"))
        await sub.connect()
        await pub.connect()
        clients += [sub, pub]
        topic = f"bench.{pair.index}"
        await sub.subscribe(topic, args["qos"], make_handler(pair))
        senders.append(pub.sender(topic, args["qos"]))
    await asyncio.get_running_loop().run_in_executor(None, barrier.wait, 60)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = time.monotonic() + args["max_seconds"]
    await asyncio.gather(
        *(
            blast(p, s, args["size"], args["window"], deadline)
            for p, s in zip(pairs, senders, strict=True)
        )
    )
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    for client in clients:
        await client.close()
    return {
        "delivered": sum(p.received for p in pairs),
        "sent": sum(p.count for p in pairs),
        "bad": sum(p.bad for p in pairs),
        "elapsed": elapsed,
        "cpu": cpu,
        "t0": t0,
    }


def worker(proc_index: int, args: dict[str, Any], port: int, barrier: Barrier, out: Any) -> None:
    import uvloop

    try:
        out.put(uvloop.run(worker_main(proc_index, args, port, barrier)))
    except BaseException as exc:
        with contextlib.suppress(Exception):
            barrier.abort()
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def run_client(args: argparse.Namespace, client: str, count: int, port: int, beam: int) -> None:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.procs + 1)
    out = ctx.Queue()
    params = {**vars(args), "client": client, "count": count}
    procs = [
        ctx.Process(target=worker, args=(i, params, port, barrier, out), daemon=True)
        for i in range(args.procs)
    ]
    for proc in procs:
        proc.start()
    broker = psutil.Process(beam)
    try:
        barrier.wait(60)
        broker.cpu_percent(None)
        t0 = time.monotonic()
        results = [out.get(timeout=args.max_seconds + 60) for _ in procs]
        wall = time.monotonic() - t0
        broker_cpu = broker.cpu_percent(None) / 100
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        print(f"{client}: worker failed: {errors}")
        return
    delivered = sum(r["delivered"] for r in results)
    sent = sum(r["sent"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    cpu = sum(r["cpu"] for r in results)
    print(
        f"{client}: procs={args.procs} pairs/proc={args.pairs} qos={args.qos} size={args.size}B "
        f"window={args.window}"
    )
    print(
        f"  delivered {delivered}/{sent} in {elapsed:.2f} s: {delivered / elapsed:,.0f} msg/s "
        f"(out of order: {sum(r['bad'] for r in results)})"
    )
    print(
        f"  client CPU {cpu / elapsed:.2f} cores ({cpu / max(delivered, 1) * 1e6:.1f} us/msg), "
        f"broker CPU {broker_cpu * wall / elapsed:.2f} cores, load avg {psutil.getloadavg()[0]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--client", default="amqp", choices=("amqp", "aio-pika", "both"))
    parser.add_argument("--procs", type=int, default=2, help="generator processes")
    parser.add_argument("--pairs", type=int, default=1, help="pairs per process")
    parser.add_argument("--count", type=int, default=1_000_000, help="messages in total")
    parser.add_argument(
        "--pika-count", type=int, default=50_000, help="messages for aio-pika with --client both"
    )
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--qos", type=int, default=0, choices=(0, 1))
    parser.add_argument("--window", type=int, default=20_000, help="max in flight per pair")
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS)
    args = parser.parse_args()
    if args.size < HEADER.size:
        parser.error(f"--size must be >= {HEADER.size}")
    args.count = min(args.count, MAX_MESSAGES)
    args.max_seconds = min(args.max_seconds, MAX_SECONDS)
    runtime = NativeRuntime()
    with tempfile.TemporaryDirectory(prefix="mqbench-amqp-bench-") as tmp:
        t0 = time.monotonic()
        broker = runtime.start(
            StartRequest(target="rabbitmq-amqp", workdir=Path(tmp), startup_timeout_s=120)
        )
        try:
            print(
                f"RabbitMQ {broker.info.version} ready in {time.monotonic() - t0:.1f} s "
                f"on port {broker.endpoint.port} (pid {broker.pids[0]})"
            )
            if args.client in ("amqp", "both"):
                run_client(args, "amqp", args.count, broker.endpoint.port, broker.pids[0])
            if args.client == "aio-pika":
                run_client(args, "aio-pika", args.count, broker.endpoint.port, broker.pids[0])
            if args.client == "both":
                run_client(args, "aio-pika", args.pika_count, broker.endpoint.port, broker.pids[0])
        finally:
            broker.stop()
            print(f"broker stopped (companions stopped: {broker.info.companion_pids})")


if __name__ == "__main__":
    main()
