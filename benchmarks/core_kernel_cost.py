"""Where the compiled core's kernel time per message goes, and what lowers it (issue 25).

The paper topology (a connection per publisher and per subscriber, 10 msg/s each, 1 KiB,
QoS 0) with nothing around the core: this process connects N pairs of lean MQTT clients
to a mosquitto pinned to one CPU, lends every session to one ``mqbench_core.Core`` (the
records written as a worker writes them) and pins itself to the other CPU. While the core
runs, the asyncio loop only sleeps, so this process's CPU is the core's. Per step (one
``--coalesce-us`` value each) it prints, per delivered message: this process's user and
system CPU, mosquitto's, context switches, system calls by kind (``perf stat`` on syscall
tracepoints; ``--no-perf`` skips it), interrupts of both CPUs by kind
(``/proc/interrupts``: rescheduling and function-call IPIs, local timer), and the send lag.
``--perf-record`` adds the kernel's hottest symbols for the core (``perf record -g``).

``--coalesce-us C`` makes sends due within C µs of one another leave together (one wake-up,
mosquitto woken once per batch); each is up to C µs late, which the lag column shows. 0 is
what ``mqbench run`` does.

    .venv/bin/python benchmarks/core_kernel_cost.py --pairs 1000 --coalesce-us 0,250,1000,5000
    .venv/bin/python benchmarks/core_kernel_cost.py --pairs 1000 --coalesce-us 0 --perf-record

Needs the compiled core, mosquitto, ``taskset``/``chrt``, and ``perf`` for the syscall
columns (Debian: ``linux-perf``; without it they are blank).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from paper_topology import _raise_nofile, pinned_mosquitto

from mqbench.endpoint import Endpoint
from mqbench.records.format import RECORD_DTYPE, SEND_OK
from mqbench.records.intended import intended_ns_array
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import ClientOptions
from mqbench.transports.registry import get_transport

SYSCALLS = ("sendto", "recvmsg", "epoll_wait", "epoll_pwait", "clock_nanosleep", "write")
"""The core's system calls (``perf stat`` tracepoints ``syscalls:sys_enter_<name>``)."""
IRQS = ("RES", "CAL", "LOC", "TLB")
"""Rescheduling and function-call IPIs, local timer, TLB shootdowns (``/proc/interrupts``)."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
INCLUSIVE = {
    "entry_SYSCALL_64",
    "__x64_sys_sendto",
    "__x64_sys_recvmsg",
    "__x64_sys_epoll_wait",
    "__x64_sys_clock_nanosleep",
    "__x64_sys_write",
    "tcp_sendmsg",
    "tcp_recvmsg",
    "tcp_cleanup_rbuf",
    "__tcp_transmit_skb",
    "__dev_queue_xmit",
    "handle_softirqs",
    "__do_softirq",
    "net_rx_action",
    "process_backlog",
    "tcp_v4_rcv",
    "tcp_ack",
    "sock_def_readable",
    "ep_poll_callback",
    "try_to_wake_up",
    "hrtimer_start_range_ns",
    "do_nanosleep",
    "schedule",
    "__schedule",
    "native_write_msr",
    "native_apic_msr_write",
    "x2apic_send_IPI",
    "asm_sysvec_apic_timer_interrupt",
    "nf_conntrack_in",
    "nf_hook_slow",
}
"""Kernel functions whose share including callees (``perf report --children``) says where
the system time goes: system-call entry, TCP send and receive, the softirq that runs the
peer's receive inside our send, wake-ups of the peer, timers, VM-exiting MSR writes."""


@dataclass
class Snapshot:
    """Counters at one instant."""

    t: float
    me: tuple[float, float]
    broker: tuple[float, float]
    switches: int
    irqs: dict[str, int]
    softirq: dict[int, float]
    stats: dict[str, int]


def cpu_times(pid: int | str) -> tuple[float, float]:
    """``(user_s, system_s)`` of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def context_switches(pid: int | str) -> int:
    """Voluntary plus involuntary context switches over every thread of a process."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
    return total


def interrupts() -> dict[str, int]:
    """Interrupts of every CPU by kind (``IRQS``), summed over the CPUs."""
    counts: dict[str, int] = {}
    for line in Path("/proc/interrupts").read_text().splitlines():
        name, _, rest = line.strip().partition(":")
        if name in IRQS:
            counts[name] = sum(int(v) for v in rest.split() if v.isdigit())
    return counts


def softirq_seconds() -> dict[int, float]:
    """Softirq time of each CPU (``/proc/stat``; with tick accounting it is also in the
    system time of whichever process the softirq interrupted or ran inside)."""
    seconds: dict[int, float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            seconds[int(name[3:])] = int(values[6]) / CLK_TCK
    return seconds


def snapshot(broker_pid: int, core: Any) -> Snapshot:
    return Snapshot(
        time.monotonic(),
        cpu_times("self"),
        cpu_times(broker_pid),
        context_switches("self"),
        interrupts(),
        softirq_seconds(),
        dict(core.stats()),
    )


def perf_stat(pid: int, seconds: float) -> subprocess.Popen[str] | None:
    """``perf stat`` of the syscall tracepoints of ``pid`` for ``seconds`` (None: no perf)."""
    perf = shutil.which("perf")
    if perf is None:
        return None
    events = ",".join(
        ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{name}" for name in SYSCALLS]
    )
    return subprocess.Popen(
        [perf, "stat", "-x", ",", "-e", events, "-p", str(pid), "--", "sleep", f"{seconds:g}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def perf_counts(proc: subprocess.Popen[str] | None) -> dict[str, int]:
    """The counts ``perf stat -x ,`` printed, by event name."""
    if proc is None:
        return {}
    _, err = proc.communicate(timeout=120)
    counts: dict[str, int] = {}
    for line in err.splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].isdigit():
            counts[parts[2].split(":")[-1].replace("sys_enter_", "")] = int(parts[0])
    return counts


def perf_record(pid: int, seconds: float, folder: Path) -> str:
    """The kernel's hottest symbols in ``pid`` over ``seconds`` (``perf record -g``)."""
    perf = shutil.which("perf")
    if perf is None:
        return "perf is not installed"
    data = folder / "perf.data"
    record = [perf, "record", "-q", "-e", "cpu-clock", "-g", "-p", str(pid), "-o", str(data)]
    subprocess.run(
        [*record, "--", "sleep", f"{seconds:g}"],
        capture_output=True,
        check=False,
    )
    show = [perf, "report", "-i", str(data), "--no-children", "--sort", "dso,sym", "--stdio"]
    report = subprocess.run(
        [*show, "-g", "none", "--percent-limit", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in report.stdout.splitlines() if re.match(r"\s+\d", line)]
    inclusive = subprocess.run(
        [perf, "report", "-i", str(data), "--children", "--sort", "sym", "--stdio", "-g", "none"],
        capture_output=True,
        text=True,
        check=False,
    )
    wanted = [
        line
        for line in inclusive.stdout.splitlines()
        if re.match(r"\s+\d", line) and line.split()[-1] in INCLUSIVE
    ]
    return "\n".join(["self time:", *lines[:30], "inclusive (children):", *wanted])


async def connect(port: int, topics: list[str]) -> tuple[list[Any], list[Any]]:
    """A subscriber per topic, then as many publishers."""
    transport = get_transport("mqtt")
    endpoint = Endpoint("127.0.0.1", port)
    gate = asyncio.Semaphore(200)
    tag = os.urandom(3).hex()

    async def client(name: str, topic: str | None) -> Any:
        options = ClientOptions(f"kc{tag}{name}", receive_stamp="kernel", connect_timeout_s=60)
        c = transport.create_client(endpoint, options)
        async with gate:
            await c.connect()
            if topic is not None:
                await c.subscribe(topic, 0, lambda payload, t: None)
        return c

    subs = await asyncio.gather(*(client(f"s{k}", topic) for k, topic in enumerate(topics)))
    pubs = await asyncio.gather(*(client(f"p{k}", None) for k in range(len(topics))))
    return list(pubs), list(subs)


def build_core(folder: Path, args: argparse.Namespace, coalesce_us: float, start_ns: int) -> Any:
    import mqbench_core

    messages = int(args.rate * (args.warmup + args.duration + 1))
    deliveries = RecordWriter(folder / "deliveries-0.bin")
    sends = RecordWriter(folder / "sends-0.bin")
    return mqbench_core.Core(
        "mqtt",
        deliveries.lend(),
        sends.lend(),
        start_ns,
        args.rate,
        args.pairs,
        0,
        args.pairs,
        messages,
        args.payload,
        1_000_000,
        5_000_000,
        True,
        60.0,
        1 << 20,
        int(coalesce_us * 1000),
    )


async def run_step(
    args: argparse.Namespace, port: int, broker_pid: int, coalesce_us: float, folder: Path
) -> dict[str, Any]:
    tag = os.urandom(3).hex()
    topics = [f"kc/{tag}/{k}" for k in range(args.pairs)]
    pubs, subs = await connect(port, topics)
    start_ns = time.time_ns() + 500_000_000
    core = build_core(folder, args, coalesce_us, start_ns)
    for k, (pub, topic) in enumerate(zip(pubs, topics, strict=True)):
        head, tail = pub.publish_frame(topic, args.payload)
        core.add_publisher(pub.lend_socket(), k, head, tail)
    for k, sub in enumerate(subs):
        core.add_subscriber(sub.lend_socket(), k)
    thread = threading.Thread(target=core.run, daemon=True)
    thread.start()
    await asyncio.sleep(0.5 + args.warmup)
    stat = perf_stat(os.getpid(), args.duration)
    first = snapshot(broker_pid, core)
    window_start = time.time_ns()
    hot = ""
    if args.perf_record:
        hot = await asyncio.to_thread(perf_record, os.getpid(), min(5.0, args.duration), folder)
    await asyncio.sleep(max(0.0, args.duration - (time.monotonic() - first.t)))
    last = snapshot(broker_pid, core)
    window_end = time.time_ns()
    counts = await asyncio.to_thread(perf_counts, stat)
    core.stop()
    await asyncio.to_thread(thread.join, 10)
    await asyncio.gather(*(c.close() for c in pubs + subs), return_exceptions=True)
    lag = send_lag_us(folder / "sends-0.bin", start_ns, args, (window_start, window_end))
    return {"first": first, "last": last, "syscalls": counts, "lag": lag, "hot": hot}


def send_lag_us(
    path: Path, start_ns: int, args: argparse.Namespace, window: tuple[int, int]
) -> tuple[float, float]:
    """Send lag p50 and p99 (µs) of the sends intended inside ``window``."""
    sends = np.fromfile(path, dtype=RECORD_DTYPE)
    ok = sends[sends["sub"] == SEND_OK]
    intended = intended_ns_array(start_ns, args.rate, args.pairs, ok["pub"], ok["seq"])
    inside = (intended >= window[0]) & (intended < window[1])
    lag = (ok["t_sent"][inside] - intended[inside]) / 1e3
    if lag.size == 0:
        return 0.0, 0.0
    return float(np.percentile(lag, 50)), float(np.percentile(lag, 99))


def row(coalesce_us: float, step: dict[str, Any], cpus: tuple[int, int]) -> str:
    first, last = step["first"], step["last"]
    delivered = last.stats["deliveries"] - first.stats["deliveries"]
    seconds = last.t - first.t
    if delivered <= 0:
        return f"{coalesce_us:>8g}  nothing delivered"
    per = 1e6 / delivered
    me_u, me_s = (b - a for a, b in zip(first.me, last.me, strict=True))
    br_u, br_s = (b - a for a, b in zip(first.broker, last.broker, strict=True))
    irq = {k: (last.irqs.get(k, 0) - first.irqs.get(k, 0)) / delivered for k in IRQS}
    soft = [(last.softirq[c] - first.softirq[c]) * per for c in cpus]
    wakeups = (last.stats["wakeups"] - first.stats["wakeups"]) / delivered
    switches = (last.switches - first.switches) / delivered
    calls = step["syscalls"]
    sys_cols = " ".join(f"{calls.get(n, 0) / delivered:>6.2f}" for n in SYSCALLS)
    total = calls.get("raw_syscalls:sys_enter", calls.get("sys_enter", 0)) / delivered
    p50, p99 = step["lag"]
    return (
        f"{coalesce_us:>8g} {delivered / seconds:>8,.0f} {me_u * per:>6.1f} {me_s * per:>6.1f} "
        f"{br_u * per:>6.1f} {br_s * per:>6.1f} {soft[0]:>6.1f} {soft[1]:>6.1f} "
        f"{wakeups:>6.2f} {switches:>6.2f} "
        f"{total:>6.2f} {sys_cols} "
        + " ".join(f"{irq[k]:>5.2f}" for k in IRQS)
        + f" {p50:>8.0f} {p99:>8.0f}"
    )


HEADER = (
    f"{'coal µs':>8} {'msg/s':>8} {'core u':>6} {'core s':>6} {'brk u':>6} {'brk s':>6} "
    f"{'sirq g':>6} {'sirq b':>6} "
    f"{'wakes':>6} {'ctxsw':>6} {'calls':>6} "
    + " ".join(f"{n[:6]:>6}" for n in SYSCALLS)
    + " "
    + " ".join(f"{k:>5}" for k in IRQS)
    + f" {'lag p50':>8} {'lag p99':>8}"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--payload", type=int, default=1024)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--coalesce-us", default="0,250,1000,5000")
    parser.add_argument("--broker-cpu", type=int, default=0)
    parser.add_argument("--generator-cpu", type=int, default=1)
    parser.add_argument("--broker-fifo", action="store_true")
    parser.add_argument("--perf-record", action="store_true")
    args = parser.parse_args()
    _raise_nofile()
    with tempfile.TemporaryDirectory(prefix="mqbench-kcost-") as tmp:
        root = Path(tmp)
        with pinned_mosquitto(args.broker_cpu, root, args.broker_fifo) as (port, pid):
            os.sched_setaffinity(0, {args.generator_cpu})
            print(
                f"mosquitto pid {pid} on CPU {args.broker_cpu}, core on CPU {args.generator_cpu};"
                f" {args.pairs} pairs x {args.rate:g} msg/s, {args.payload} B, QoS 0; "
                "per delivered message: CPU µs (core and broker, user and system; softirq "
                "time of the generator's and the broker's CPU), the core's wake-ups, context "
                "switches, system calls, interrupts (both CPUs); send lag µs",
                flush=True,
            )
            print(HEADER, flush=True)
            for value in (float(v) for v in args.coalesce_us.split(",")):
                load = os.getloadavg()
                print(f"# load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
                folder = root / f"step-{value:g}"
                folder.mkdir()
                step = asyncio.run(run_step(args, port, pid, value, folder))
                print(row(value, step, (args.generator_cpu, args.broker_cpu)), flush=True)
                if step["hot"]:
                    print(step["hot"], flush=True)
                shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
