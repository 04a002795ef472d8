"""Shared driver of the two-process pub/sub client benchmarks (redis, zenoh).

One spawned process runs every subscriber client, another every publisher client, each on
uvloop; pair ``i`` uses topic ``mqbench/bench/<i>``. Publishers send fixed-size payloads as
fast as the client's back-pressure allows (bounded in-flight window: unanswered ``PUBLISH``
replies for the lean redis client, queued bytes for stock clients, zenoh's blocking ``put``
for zenoh), stop after ``messages`` in total or ``seconds``. The subscriber process counts
deliveries and reports delivered messages per second between the first and the last
delivery. Closed-loop, max-rate: a measure of client/broker cost, not of latency.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import time
from dataclasses import dataclass
from typing import Any

import psutil

from mqbench.endpoint import Endpoint
from mqbench.transports.base import ClientOptions
from mqbench.transports.registry import get_transport

MAX_MESSAGES = 2_000_000
MAX_SECONDS = 60.0
IDLE_STOP_S = 3.0
"""The subscriber process stops after this long without a delivery (once any arrived)."""


@dataclass
class Outcome:
    """What one run measured."""

    client: str
    pairs: int
    sent: int
    delivered: int
    send_s: float
    deliver_s: float
    pub_cpu_s: float
    sub_cpu_s: float
    broker_cpu_s: float
    wall_s: float

    def lines(self) -> list[str]:
        rate = self.delivered / self.deliver_s if self.deliver_s > 0 else 0.0
        send_rate = self.sent / self.send_s if self.send_s > 0 else 0.0
        return [
            f"client={self.client} pairs={self.pairs} sent={self.sent} "
            f"delivered={self.delivered} lost={self.sent - self.delivered}",
            f"  delivered {rate:,.0f} msg/s  (publishers offered {send_rate:,.0f} msg/s)",
            f"  CPU over {self.wall_s:.1f} s: publishers {self.pub_cpu_s / self.wall_s:.0%}, "
            f"subscribers {self.sub_cpu_s / self.wall_s:.0%}, "
            f"broker {self.broker_cpu_s / self.wall_s:.0%} of one core",
        ]


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _options(name: str, extra: dict[str, Any]) -> ClientOptions:
    return ClientOptions(client_id=name, connect_timeout_s=10.0, extra=dict(extra))


def _sub_main(
    client: str,
    host: str,
    port: int,
    pairs: int,
    expected: int,
    seconds: float,
    extra: dict[str, Any],
    ready: Any,
    results: Any,
) -> None:
    import uvloop

    async def main() -> None:
        transport = get_transport(client)
        endpoint = Endpoint(host, port)
        count = 0
        first = last = 0.0

        def on_message(payload: memoryview | bytes, t_recv_ns: int) -> None:
            nonlocal count, first, last
            count += 1
            if count == 1:
                first = time.perf_counter()
            last = time.perf_counter()

        clients = []
        for i in range(pairs):
            c = transport.create_client(endpoint, _options(f"sub-{i}", extra))
            await c.connect()
            await c.subscribe(f"mqbench/bench/{i}", 0, on_message)
            clients.append(c)
        cpu0 = _cpu()
        ready.set()
        deadline = time.monotonic() + seconds + 2 * IDLE_STOP_S
        seen, seen_at = -1, time.monotonic()
        while count < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if count != seen:
                seen, seen_at = count, time.monotonic()
            elif count > 0 and time.monotonic() - seen_at > IDLE_STOP_S:
                break
        cpu = _cpu() - cpu0
        for c in clients:
            await c.close()
        results.put(("sub", count, last - first, cpu))

    uvloop.run(main())


def _pub_main(
    client: str,
    host: str,
    port: int,
    pairs: int,
    messages: int,
    seconds: float,
    payload_size: int,
    extra: dict[str, Any],
    window: int,
    ready: Any,
    results: Any,
) -> None:
    import uvloop

    async def main() -> None:
        transport = get_transport(client)
        endpoint = Endpoint(host, port)
        clients = []
        for i in range(pairs):
            c = transport.create_client(endpoint, _options(f"pub-{i}", extra))
            await c.connect()
            clients.append(c)
        senders = [c.sender(f"mqbench/bench/{i}", 0) for i, c in enumerate(clients)]
        payload = os.urandom(payload_size)
        stats = [getattr(c, "publish_stats", None) is not None for c in clients]
        use_replies = all(stats)
        while not ready.wait(0.1):
            await asyncio.sleep(0)
        per_client = messages // pairs
        batch = 256
        cpu0 = _cpu()
        started = time.perf_counter()
        deadline = time.monotonic() + seconds
        sent = 0
        rounds = per_client // batch
        for _ in range(rounds):
            for send in senders:
                for _ in range(batch):
                    send(payload, 0)
            sent += batch * pairs
            await asyncio.sleep(0)
            for _ in range(200_000):  # bounded wait for the in-flight window
                if use_replies:
                    inflight = sum(
                        c.publish_stats.published - c.publish_stats.replies  # type: ignore[attr-defined]
                        for c in clients
                    )
                else:
                    inflight = sum(c.pending_write_bytes() for c in clients) // payload_size
                if inflight <= window:
                    break
                await asyncio.sleep(0.0005)
            if time.monotonic() > deadline:
                break
        for c in clients:
            await c.flush(10.0)
        send_s = time.perf_counter() - started
        cpu = _cpu() - cpu0
        for c in clients:
            await c.close()
        results.put(("pub", sent, send_s, cpu))

    uvloop.run(main())


def run(
    client: str,
    endpoint: Endpoint,
    broker_pid: int,
    *,
    pairs: int,
    messages: int,
    seconds: float,
    payload_size: int = 64,
    extra: dict[str, Any] | None = None,
    window: int = 50_000,
) -> Outcome:
    """Run one two-process measurement against a broker that is already running."""
    messages = min(messages, MAX_MESSAGES)
    seconds = min(seconds, MAX_SECONDS)
    messages -= messages % (pairs * 256)
    extra = extra or {}
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    results = ctx.Queue()
    broker = psutil.Process(broker_pid)
    b0 = broker.cpu_times()
    wall0 = time.perf_counter()
    sub = ctx.Process(
        target=_sub_main,
        args=(
            client,
            endpoint.host,
            endpoint.port,
            pairs,
            messages,
            seconds,
            extra,
            ready,
            results,
        ),
    )
    pub = ctx.Process(
        target=_pub_main,
        args=(
            client,
            endpoint.host,
            endpoint.port,
            pairs,
            messages,
            seconds,
            payload_size,
            extra,
            window,
            ready,
            results,
        ),
    )
    sub.start()
    pub.start()
    got: dict[str, tuple[Any, ...]] = {}
    try:
        while len(got) < 2:
            try:
                item = results.get(timeout=seconds + 30)
            except queue.Empty:
                raise SystemExit("benchmark processes did not report in time") from None
            got[item[0]] = item
    finally:
        for proc in (pub, sub):
            proc.join(timeout=15)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    wall = time.perf_counter() - wall0
    b1 = broker.cpu_times()
    _, sent, send_s, pub_cpu = got["pub"]
    _, delivered, deliver_s, sub_cpu = got["sub"]
    return Outcome(
        client=client,
        pairs=pairs,
        sent=sent,
        delivered=delivered,
        send_s=send_s,
        deliver_s=deliver_s,
        pub_cpu_s=pub_cpu,
        sub_cpu_s=sub_cpu,
        broker_cpu_s=(b1.user + b1.system) - (b0.user + b0.system),
        wall_s=wall,
    )


def load_note() -> str:
    """The machine's load, for the report (the machine is shared)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs"
