"""Delivered msg/s of mqbench's Redis clients through a local redis-server, in two processes.

Starts ``redis-server`` with mqbench's native spec (free loopback port, benchmark config;
stopped by PID at the end), then runs publishers in one process and subscribers in another
(``_pubsub_bench``): 64-byte payloads, QoS 0, ``--pairs`` channel pairs.

    .venv/bin/python benchmarks/redis_client_bench.py
    .venv/bin/python benchmarks/redis_client_bench.py --client redis-py --messages 200000

Bounds: at most 2,000,000 messages and 60 s of publishing per run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from _pubsub_bench import load_note, run

from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", default="redis", choices=["redis", "redis-py"])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--payload", type=int, default=64)
    args = parser.parse_args()
    print(load_note())
    with tempfile.TemporaryDirectory(prefix="mqbench-redis-bench-") as tmp:
        broker = NativeRuntime().start(StartRequest(target="redis", workdir=Path(tmp)))
        try:
            print(
                f"redis {broker.info.version} pid {broker.pids[0]} on "
                f"{broker.endpoint.host}:{broker.endpoint.port}; settings {broker.info.settings}"
            )
            outcome = run(
                args.client,
                broker.endpoint,
                broker.pids[0],
                pairs=args.pairs,
                messages=args.messages,
                seconds=args.seconds,
                payload_size=args.payload,
            )
        finally:
            broker.stop()
    print("\n".join(outcome.lines()))
    print(load_note())
    return 0


if __name__ == "__main__":
    sys.exit(main())
