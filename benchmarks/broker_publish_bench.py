"""CPU cost of the built-in broker's routing per PUBLISH (a benchmark, not a test).

Runs in one process, no sockets to clients: subscribers are broker connections on a
counting transport, and ``Broker.publish`` is called directly with a cached route, the way
the MQTT 3.1.1 QoS 0 fast path calls it. Cases: one ordinary subscriber; two members of one
shared subscription (``$share/g/...``, round robin). Prints CPU ns per publish, best of
``--repeats`` runs of ``--count`` publishes (process CPU time, so other load on the machine
matters less than with wall time, but still matters: compare runs side by side).

    .venv/bin/python benchmarks/broker_publish_bench.py
    .venv/bin/python benchmarks/broker_publish_bench.py --count 200000 --repeats 15
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from mqbench.builtin_broker import Broker, BrokerConfig
from mqbench.builtin_broker.connection import Connection
from mqbench.wire.mqtt.packets import Connect, Subscribe


class CountingTransport(asyncio.Transport):
    """Counts the bytes the broker writes to one subscriber."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        return None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


async def measure(topic_filter: str, members: int, count: int, repeats: int) -> float:
    """Best CPU ns per publish to ``members`` subscribers of ``topic_filter``."""
    broker = Broker(BrokerConfig(port=0, host="127.0.0.1"))
    await broker.start()
    try:
        for k in range(members):
            conn = Connection(broker)
            conn.connection_made(CountingTransport())
            conn.data_received(
                Connect(f"s{k}").encode() + Subscribe(1, ((topic_filter, 0),)).encode()
            )
        await asyncio.sleep(0)
        payload = memoryview(b"x" * 62)
        best = float("inf")
        for _ in range(repeats):
            started = time.process_time()
            for i in range(count):
                broker.publish(None, b"bench/x", None, payload, 0, 0, False, None)
                if i % 64 == 0:
                    broker.flush_writes()
            broker.flush_writes()
            best = min(best, time.process_time() - started)
        return best / count * 1e9
    finally:
        await broker.stop()


def main() -> None:
    """Parse arguments, run each case, print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    count = max(1, min(args.count, 5_000_000))
    repeats = max(1, min(args.repeats, 100))
    cases = [("ordinary subscriber", "bench/x", 1), ("shared, 2 members", "$share/g/bench/x", 2)]
    print("| case | CPU ns / publish |")
    print("|---|---:|")
    for name, topic_filter, members in cases:
        ns = asyncio.run(measure(topic_filter, members, count, repeats))
        print(f"| {name} | {ns:,.0f} |")


if __name__ == "__main__":
    main()
