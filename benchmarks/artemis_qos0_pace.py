"""How many QoS 0 messages a broker moves from one MQTT connection to another, window by
window from its start, and what its threads spend the time on (run on demand;
docs/findings.md, "Artemis delivered 7,610 of 200,000").

Against a broker mqbench starts natively (a fresh one per variant and round): one
subscriber subscribes at QoS 0, one publisher sends ``--rate`` msg/s of ``--payload`` bytes
at QoS 0 (each PUBLISH its own ``send``, as mqbench's clients send them) for ``--windows``
consecutive windows of ``--window`` s, then the subscriber reads ``--drain`` s more.
Printed per window: messages received in it (msg/s), their p50 latency (send to receipt,
both stamps this process's clock), and from the broker's ``/proc/<pid>/task/*/schedstat``
the cores its threads ran, the cores of those that were its JIT compiler threads
(``C1/C2 CompilerThre``), and how long its threads waited for a CPU while runnable
(thread-seconds per second), with the load average. A JVM broker that starts cold on a
busy machine shows it: its compiler threads get a CPU a fraction of the time, the hot path
runs interpreted for tens of seconds, and the delivered rate climbs window by window.

    .venv/bin/python benchmarks/artemis_qos0_pace.py
    .venv/bin/python benchmarks/artemis_qos0_pace.py --rate 20000 --windows 9 --rounds 2
    .venv/bin/python benchmarks/artemis_qos0_pace.py --target mosquitto --windows 3
    .venv/bin/python benchmarks/artemis_qos0_pace.py --variant default={} \\
        --variant wbhw='{"acceptor_params": "writeBufferHighWaterMark=1048576"}'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from _raw_mqtt import Conn

from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.wire.mqtt.packets import Connack, Connect, Publish, Suback, Subscribe

TOPIC = "pace/t"
STAMP = struct.Struct(">d")
MAX_SECONDS = 300.0
MAX_RATE = 100_000
COMPILER_THREAD = "CompilerThre"


@dataclass
class Counts:
    """What the subscriber saw, filled by its reader thread."""

    received: int = 0
    latencies: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Sched:
    """The broker's threads' CPU time and run-queue wait, seconds, summed."""

    cpu: float
    jit: float
    wait: float


def sched(pid: int) -> Sched:
    """Sum ``/proc/<pid>/task/*/schedstat`` (run ns, wait ns) over the process's threads."""
    cpu = jit = wait = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = (int(x) for x in f.read().split())
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read()
        except (OSError, ValueError):
            continue
        cpu += run_ns / 1e9
        wait += wait_ns / 1e9
        if COMPILER_THREAD in comm:
            jit += run_ns / 1e9
    return Sched(cpu, jit, wait)


def read(conn: Conn, counts: Counts) -> None:
    """Count PUBLISHes and their latency until ``counts.stop`` is set."""
    conn.sock.settimeout(0.2)
    while not counts.stop.is_set():
        try:
            data = conn.sock.recv(1 << 16)
        except TimeoutError:
            continue
        except OSError:
            return
        if not data:
            return
        now = time.monotonic()
        for packet in conn.parser.feed(data):
            if isinstance(packet, Publish):
                counts.received += 1
                counts.latencies.append(now - STAMP.unpack_from(packet.payload)[0])


def connect(port: int, cid: str) -> Conn:
    """A connected MQTT 3.1.1 client with a clean session."""
    conn = Conn(port)
    conn.send(Connect(cid))
    if not isinstance(conn.next(), Connack):
        conn.close()
        raise RuntimeError(f"{cid}: no CONNACK")
    return conn


def publish(conn: Conn, rate: int, seconds: float, size: int, stop: threading.Event) -> None:
    """Send at ``rate`` msg/s for ``seconds`` on schedule (no catch-up burst beyond it)."""
    pad = b"\0" * max(0, size - STAMP.size)
    start = time.monotonic()
    for i in range(int(rate * seconds)):
        if stop.is_set():
            return
        due = start + i / rate
        now = time.monotonic()
        if due > now + 0.001:
            time.sleep(due - now)
        conn.send(Publish(TOPIC, STAMP.pack(time.monotonic()) + pad))


def window_line(k: int, got: int, lat: list[float], s0: Sched, s1: Sched, dt: float) -> str:
    """One window's numbers (module docstring)."""
    p50 = f"{statistics.median(lat) * 1e3:9,.1f} ms" if lat else "        - ms"
    return (
        f"  window {k:2d}  {got / dt:>8,.0f} msg/s  p50 {p50}  broker {(s1.cpu - s0.cpu) / dt:.2f}"
        f" cores (JIT {(s1.jit - s0.jit) / dt:.2f}), waited for a CPU"
        f" {(s1.wait - s0.wait) / dt:.2f}  load {os.getloadavg()[0]:.1f}"
    )


def measure(port: int, pid: int, args: argparse.Namespace) -> None:
    """One publisher -> broker -> one subscriber run, printed window by window."""
    sub = connect(port, "pace-sub")
    pub = None
    counts = Counts()
    reader = threading.Thread(target=read, args=(sub, counts), daemon=True)
    sender: threading.Thread | None = None
    try:
        sub.send(Subscribe(1, ((TOPIC, 0),)))
        if not isinstance(sub.next(), Suback):
            raise RuntimeError("no SUBACK")
        pub = connect(port, "pace-pub")
        reader.start()
        total = args.window * args.windows
        sender = threading.Thread(
            target=publish, args=(pub, args.rate, total, args.payload, counts.stop), daemon=True
        )
        sender.start()
        start = time.monotonic()
        got, seen, s0 = 0, 0, sched(pid)
        for k in range(args.windows):
            time.sleep(max(0.0, start + (k + 1) * args.window - time.monotonic()))
            now_got, lat, s1 = counts.received, counts.latencies[seen:], sched(pid)
            seen += len(lat)
            print(window_line(k, now_got - got, lat, s0, s1, args.window), flush=True)
            got, s0 = now_got, s1
        sender.join(args.window)
        time.sleep(args.drain)
        sent = int(args.rate * total)
        print(f"  sent {sent:,}, received {counts.received:,} (after a {args.drain:g} s drain)")
    finally:
        counts.stop.set()
        if sender is not None:
            sender.join(5)
        if reader.is_alive():
            reader.join(5)
        if pub is not None:
            pub.close()
        sub.close()


def run_variant(
    target: str, label: str, options: dict[str, object], args: argparse.Namespace
) -> None:
    """Start ``target`` with ``options``, measure, stop it."""
    with tempfile.TemporaryDirectory(prefix="mqbench-pace-") as tmp:
        broker = NativeRuntime().start(
            StartRequest(
                target=target, workdir=Path(tmp), port=None, options=options, startup_timeout_s=120
            )
        )
        try:
            print(f"{target} {label} {json.dumps(options)}: {args.rate:,} msg/s", flush=True)
            measure(broker.endpoint.port, broker.pids[0], args)
        finally:
            broker.stop()


def main() -> None:
    """Parse the arguments and run the variants round by round, alternating."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="artemis")
    parser.add_argument(
        "--variant",
        action="append",
        metavar="LABEL=JSON",
        help="broker options (repeatable; default: default={})",
    )
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--window", type=float, default=5.0, help="seconds per window")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--drain", type=float, default=3.0)
    parser.add_argument("--payload", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if not 0 < args.window * args.windows <= MAX_SECONDS or not 0 < args.rate <= MAX_RATE:
        parser.error(
            f"--window x --windows must be in (0, {MAX_SECONDS:g}] s, --rate in (0, {MAX_RATE}]"
        )
    if args.payload < STAMP.size:
        parser.error(f"--payload must be at least {STAMP.size} bytes (the send stamp)")
    variants = [v.split("=", 1) for v in (args.variant or ["default={}"])]
    for _ in range(args.rounds):
        for label, options in variants:
            run_variant(args.target, label, json.loads(options), args)


if __name__ == "__main__":
    main()
