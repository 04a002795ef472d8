"""Throughput of mqbench's TBMQ-style broker per persistence backend (a benchmark, not a test).

For each backend (``--backends``, default memory, redis-async, redis-sync, postgres) it
starts the broker with the native runtime (which also starts a throwaway redis-server or
PostgreSQL cluster and stops everything by PID), then runs TBMQ's P2P test shape in a
separate load-generator process (mqbench's own MQTT client, uvloop):

- ``--pairs`` publisher/subscriber pairs; subscriber ``n`` connects with
  ``clean_session=false`` (a persistent DEVICE session) and subscribes to
  ``europe/ua/kyiv/<n>/+`` at QoS 1; publisher ``n`` publishes 62-byte messages at QoS 1
  to ``europe/ua/kyiv/<n>/data``;
- closed loop: each publisher keeps ``--window`` unacknowledged messages in flight (a new
  one per PUBACK), so the rate is what the broker + backend sustain;
- ``--warmup`` seconds are discarded, then delivered messages are counted for
  ``--seconds`` (bounded: at most ~60 s per backend including start-up).

It prints delivered msg/s per backend (TBMQ counts incoming + outgoing, i.e. 2x this) and
the ratio table beside the paper's PostgreSQL 30K < Redis sync 40K < Redis async 60K.
``--qos0`` adds the QoS 0 pairs benchmark (memory backend, no persistence in the path).

    .venv/bin/python benchmarks/broker_persistence_bench.py
    .venv/bin/python benchmarks/broker_persistence_bench.py --backends redis-async --qos0
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.endpoint import Endpoint
from mqbench.transports.base import ClientOptions
from mqbench.transports.mqtt import MqttClient

PAPER = {"postgres": 30_000, "redis-sync": 40_000, "redis-async": 60_000}
PAYLOAD = b"x" * 62


async def _load(
    host: str, port: int, pairs: int, qos: int, window: int, warmup: float, seconds: float
) -> dict[str, Any]:
    endpoint = Endpoint(host, port)
    received = 0
    subs: list[MqttClient] = []
    pubs: list[MqttClient] = []
    persistent = qos > 0

    def on_message(payload: memoryview, t_ns: int) -> None:
        nonlocal received
        received += 1

    for n in range(pairs):
        sub = MqttClient(endpoint, ClientOptions(f"sub-{n}", clean_session=not persistent))
        await sub.connect()
        await sub.subscribe(f"europe/ua/kyiv/{n}/+", qos, on_message)
        subs.append(sub)
    senders = []
    for n in range(pairs):
        pub = MqttClient(endpoint, ClientOptions(f"pub-{n}", clean_session=True))
        await pub.connect()
        pubs.append(pub)
        senders.append(pub.sender(f"europe/ua/kyiv/{n}/data", qos))
    loop = asyncio.get_running_loop()
    start = loop.time()
    stop_at = start + warmup + seconds
    running = True
    if qos:
        for pub, send in zip(pubs, senders, strict=True):

            def on_ack(tag: int, t_ns: int, send: Any = send) -> None:
                if running:
                    send(PAYLOAD, tag)

            pub.set_ack_handler(on_ack)
            for k in range(window):
                send(PAYLOAD, k)
        await asyncio.sleep(warmup)
        base = received
        t0 = loop.time()
        await asyncio.sleep(seconds)
        count = received - base
        elapsed = loop.time() - t0
    else:
        base = 0
        t0 = 0.0
        counted = False
        while loop.time() < stop_at:
            now = loop.time()
            if not counted and now >= start + warmup:
                counted = True
                base = received
                t0 = now
            # Bounded: write at most `window` per publisher per tick, and only while the
            # broker keeps up (a small write buffer per publisher).
            for pub, send in zip(pubs, senders, strict=True):
                if pub.pending_write_bytes() < 64 * 1024:
                    for k in range(window):
                        send(PAYLOAD, k)
            await asyncio.sleep(0.001)
        count = received - base
        elapsed = loop.time() - t0
    running = False
    for client in (*pubs, *subs):
        await client.close()
    return {"delivered": count, "seconds": elapsed, "rate": count / elapsed if elapsed else 0.0}


def _loader_main(args: tuple[Any, ...], out: Any) -> None:
    import uvloop

    try:
        result = uvloop.run(_load(*args))
    except Exception as exc:  # reported to the parent
        result = {"error": f"{type(exc).__name__}: {exc}"}
    out.put(result)


def run_backend(
    persistence: str, pairs: int, qos: int, window: int, warmup: float, seconds: float
) -> dict[str, Any]:
    """Start the broker with ``persistence`` and measure one workload."""
    runtime = NativeRuntime()
    workdir = Path(tempfile.mkdtemp(prefix=f"mqbench-bench-{persistence}-"))
    broker = runtime.start(
        StartRequest(
            "tbmq-style",
            workdir,
            options={"persistence": persistence, "log_level": "warning", "max_inflight": 1000},
        )
    )
    try:
        procs = [psutil.Process(broker.pids[0])]
        services = broker.info.settings.get("service_pids") or []
        for pid in services:
            if pid:
                service = psutil.Process(pid)
                # PostgreSQL works in child processes of the postmaster.
                procs += [service, *service.children(recursive=True)]
        for p in procs:
            p.cpu_percent(None)
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        args = (broker.endpoint.host, broker.endpoint.port, pairs, qos, window, warmup, seconds)
        loader = ctx.Process(target=_loader_main, args=(args, queue))
        t0 = time.monotonic()
        loader.start()
        # Sample CPU over (roughly) the measured window only: connect + warm-up first.
        time.sleep(warmup + 1.0)
        for p in procs:
            p.cpu_percent(None)
        result = queue.get(timeout=warmup + seconds + 60)
        loader.join(10)
        wall = time.monotonic() - t0
        cpu = [p.cpu_percent(None) / 100 for p in procs]
        result["broker_cores"] = round(cpu[0], 2)
        result["service_cores"] = round(sum(cpu[1:]), 2)
        result["wall_s"] = round(wall, 1)
        return result
    finally:
        broker.stop()


def main() -> None:
    """Parse arguments, run every backend, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backends", nargs="+", default=["memory", "redis-async", "redis-sync", "postgres"]
    )
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--qos0", action="store_true", help="also run the QoS 0 pairs benchmark")
    parser.add_argument("--qos0-pairs", type=int, default=100)
    parser.add_argument("--qos0-only", action="store_true")
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} CPUs, python {sys.version.split()[0]}", flush=True)
    if args.qos0 or args.qos0_only:
        r = run_backend("memory", args.qos0_pairs, 0, 20, args.warmup, args.seconds)
        print(f"QoS 0 pairs ({args.qos0_pairs} pairs, 62 B): {r}", flush=True)
        if args.qos0_only:
            return
    rows: dict[str, dict[str, Any]] = {}
    for backend in args.backends:
        r = run_backend(backend, args.pairs, 1, args.window, args.warmup, args.seconds)
        rows[backend] = r
        print(f"P2P QoS 1 persistent, {backend}: {r}", flush=True)
    print()
    print(
        "| backend | msg/s delivered | broker cores | redis/pg cores | ratio to postgres "
        "| paper msg/s (in+out) | paper ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = rows.get("postgres", {}).get("rate")
    for backend, r in rows.items():
        rate = r.get("rate", 0.0)
        ratio = f"{rate / base:.2f}" if base else "-"
        paper = PAPER.get(backend)
        paper_text = f"{paper:,}" if paper else "-"
        paper_ratio = f"{paper / PAPER['postgres']:.2f}" if paper else "-"
        print(
            f"| {backend} | {rate:,.0f} | {r.get('broker_cores', '-')} | "
            f"{r.get('service_cores', '-')} | {ratio} | {paper_text} | {paper_ratio} |"
        )


if __name__ == "__main__":
    main()
