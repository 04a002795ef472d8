"""The mq-bench paper topology on one machine (not a test; run on demand).

Every publisher and every subscriber has its own connection (``pairs`` topology), 10 msg/s
each, 1 KiB, QoS 0. mosquitto runs pinned to one CPU (``taskset``), the whole ``mqbench
run`` machinery (external runtime, default workers) pinned to another, so one core of
generator faces one core of broker. Per step it prints offered and delivered msg/s, the
generator's and the broker's CPU (cores), the generator's CPU per delivered message split
into user and system time (µs; sends and receives of that message together), send lag,
latency and the verdicts. With ``--engine python,compiled`` each step runs on both
engines back to back against the same broker, so their ratio is measured side by side.

    .venv/bin/python benchmarks/paper_topology.py --pairs 1000,2000,4000,8000
    .venv/bin/python benchmarks/paper_topology.py --pairs 8000 --engine python,compiled
    .venv/bin/python benchmarks/paper_topology.py --pairs 4000 --engine compiled,compiled@1000

The load average is printed before every step: on a loaded machine compare engines
within one invocation, never across invocations.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.analysis.summary import CellSummary
from mqbench.brokers.runtime.liveness import BrokerExit
from mqbench.records.cell_entry import CellEntry
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.scenario.matrix import Cell
from mqbench.workload.reporter import SilentReporter
from mqbench.workload.run import run_scenario


class QuietReporter(SilentReporter):
    """Prints a line only when a cell does not complete or its broker exits."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        if status != "completed":
            print(f"{cell.id}: {status} {detail.error or ''}", flush=True)

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        print(f"{cell.id}: the broker {exit.describe()}", flush=True)


@dataclass
class CpuSamples:
    """User and system CPU seconds of this process's descendants but the broker (the
    generator's workers), sampled twice a second from another thread."""

    exclude: int = 0
    """The broker's PID (a child of this process too): not the generator."""

    series: list[tuple[int, float, float]] = field(default_factory=list)
    """``(t_ns, user_s, system_s)``: the sums over every descendant alive at ``t_ns`` plus
    those already gone (their last sample)."""
    _last: dict[int, tuple[float, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.5):
            for child in me.children(recursive=True):
                if child.pid == self.exclude:
                    continue
                with contextlib.suppress(psutil.Error):
                    times = child.cpu_times()
                    self._last[child.pid] = (times.user, times.system)
            user = sum(u for u, _ in self._last.values())
            system = sum(s for _, s in self._last.values())
            self.series.append((time.time_ns(), user, system))

    def between(self, start_ns: int, end_ns: int) -> tuple[float, float, float]:
        """``(seconds, user_s, system_s)`` between the samples nearest inside the window."""
        inside = [s for s in self.series if start_ns <= s[0] <= end_ns]
        if len(inside) < 2:
            return 0.0, 0.0, 0.0
        (t0, u0, s0), (t1, u1, s1) = inside[0], inside[-1]
        return (t1 - t0) / 1e9, u1 - u0, s1 - s0

    @contextlib.contextmanager
    def running(self) -> Iterator[CpuSamples]:
        thread = threading.Thread(target=self.run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _raise_nofile() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextlib.contextmanager
def pinned_mosquitto(cpu: int, workdir: Path, fifo: bool) -> Iterator[tuple[int, int]]:
    """mosquitto on ``127.0.0.1:<free port>`` pinned to ``cpu`` (``fifo``: SCHED_FIFO at
    priority 1, as the generator's real-time workers): yields (port, pid)."""
    port = free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\nmax_connections -1\n"
        f"max_queued_messages 100000\npersistence false\nuser {os.environ.get('USER', 'root')}\n"
        "log_dest stderr\nlog_type error\nlog_type warning\n"
    )
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    log = (workdir / "mosquitto.log").open("wb")
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(cpu),
            *(["chrt", "-f", "1"] if fifo else []),
            binary,
            "-c",
            str(conf),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_raise_nofile,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None:
                raise SystemExit(f"mosquitto exited: {(workdir / 'mosquitto.log').read_text()}")
            time.sleep(0.05)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def scenario_data(args: argparse.Namespace, pairs: int, port: int, pid: int, engine: str) -> dict:
    generator: dict[str, object] = {
        "realtime": args.realtime,
        "connect_timeout": args.connect_timeout,
    }
    if args.workers != "auto":
        generator["workers"] = int(args.workers)
    name, _, coalesce_us = engine.partition("@")
    if name != "default":
        generator["hot_path"] = name
    if coalesce_us:
        generator["coalesce_us"] = float(coalesce_us)
    return {
        "name": "paper-topology",
        "runtime": "external",
        "targets": ["mosquitto"],
        "broker": {"host": "127.0.0.1", "port": port, "pid": pid},
        "workload": {
            "topology": "pairs",
            "pairs": pairs,
            "rate": args.rate,
            "payload": args.payload,
            "qos": 0,
            "warmup": args.warmup,
            "duration": args.duration,
            "drain": "5s",
            "connect_rate": args.connect_rate,
        },
        "generator": generator,
    }


def run_step(
    args: argparse.Namespace, pairs: int, port: int, pid: int, engine: str, out: Path
) -> tuple[CellSummary, CellEntry, tuple[float, float, float]] | None:
    data = scenario_data(args, pairs, port, pid, engine)
    scenario = validate_scenario(data, "benchmark")
    samples = CpuSamples(exclude=pid)
    with samples.running():
        result = run_scenario(
            scenario,
            source=ScenarioSource("benchmark", data),
            out_root=out,
            argv=["benchmarks/paper_topology.py"],
            reporter=QuietReporter(),
        )
    cell = result.cells[0]
    if cell.status != "completed":
        return None
    summary = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
    cpu = samples.between(summary.window_start_ns, summary.window_end_ns)
    return summary, cell, cpu


def verdict(s: CellSummary) -> str:
    if s.generator_saturated:
        return f"GENERATOR SATURATED: {s.generator_reason}"
    if not s.valid:
        return "INVALID: " + ", ".join(str(r) for r in s.invalid_reasons)
    return f"ok (latency {s.latency_verdict})"


HEADER = (
    f"{'pairs':>6} {'engine':>13} {'offered':>8} {'deliv/s':>8} {'genCPU':>6} {'brkCPU':>11} "
    f"{'us/msg usr+sys':>15} {'lag p99':>8} {'p50 ms':>7} {'p99 ms':>7}  verdict"
)


def row(pairs: int, engine: str, s: CellSummary, entry: CellEntry, cpu: tuple) -> str:
    seconds, user, system = cpu
    delivered = s.throughput_msg_s or 0.0
    per_msg = ""
    if seconds > 0 and delivered > 0:
        n = delivered * seconds
        per_msg = f"{user / n * 1e6:.1f}+{system / n * 1e6:.1f}"
    lat, lag = s.latency, s.send_lag
    brk = f"{s.broker_cpu_cores_mean or 0:.2f}/{s.broker_cpu_cores_max or 0:.2f}"
    ran = entry.hot_path.engine if entry.hot_path else engine
    if "@" in engine:
        ran += "@" + engine.partition("@")[2]
    return (
        f"{pairs:>6} {ran:>13} {s.offered_rate or 0:>8,.0f} {delivered:>8,.0f} "
        f"{s.generator_cpu_cores_mean or 0:>6.2f} {brk:>11} {per_msg:>15} "
        f"{(lag.p99_us if lag else 0) / 1e3:>8.2f} {(lat.p50_us if lat else 0) / 1e3:>7.2f} "
        f"{(lat.p99_us if lat else 0) / 1e3:>7.2f}  {verdict(s)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="1000,2000,4000,8000")
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--payload", default="1KiB")
    parser.add_argument("--warmup", default="5s")
    parser.add_argument("--duration", default="15s")
    parser.add_argument("--connect-rate", type=float, default=0.0)
    parser.add_argument("--connect-timeout", default="30s")
    parser.add_argument("--workers", default="auto")
    parser.add_argument("--realtime", default="auto", choices=["auto", "on", "off"])
    parser.add_argument(
        "--engine",
        default="default",
        help="comma separated generator.hot_path values, run in turn; compiled@1000 adds "
        "generator.coalesce_us: 1000",
    )
    parser.add_argument("--broker-cpu", type=int, default=0)
    parser.add_argument("--generator-cpu", type=int, default=1)
    parser.add_argument(
        "--broker-fifo",
        action="store_true",
        help="run mosquitto SCHED_FIFO too (on a loaded machine: the broker's core is its own)",
    )
    args = parser.parse_args()

    _raise_nofile()
    with tempfile.TemporaryDirectory(prefix="mqbench-paper-") as tmp:
        root = Path(tmp)
        with pinned_mosquitto(args.broker_cpu, root, args.broker_fifo) as (port, pid):
            os.sched_setaffinity(0, {args.generator_cpu})
            print(
                f"mosquitto pid {pid} on CPU {args.broker_cpu}, generator on CPU "
                f"{args.generator_cpu}; {args.rate:g} msg/s per pair, {args.payload}, QoS 0",
                flush=True,
            )
            print(HEADER, flush=True)
            for pairs in (int(p) for p in args.pairs.split(",")):
                for engine in args.engine.split(","):
                    load = os.getloadavg()
                    print(f"# load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
                    step = run_step(args, pairs, port, pid, engine, root / f"{pairs}-{engine}")
                    if step is None:
                        print(f"{pairs:>6} {engine:>13} cell did not complete", flush=True)
                        continue
                    print(row(pairs, engine, *step), flush=True)
                    shutil.rmtree(root / f"{pairs}-{engine}", ignore_errors=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
