"""Native against Docker on the same broker, side by side (run on demand).

The same Mosquitto (Debian's 2.0.11: the native runtime runs the host's package, the local
image ``mqbench-local/mosquitto`` holds the same package) under the same load, in modes
measured in alternation, round after round, so a change in the machine's load hits every
mode alike:

* ``native``: the broker as a host process (``runtime: native``), clients on 127.0.0.1;
* ``docker``: the broker in a container (``runtime: docker``), clients on the port Docker
  publishes on 127.0.0.1, i.e. through the userland proxy ``docker-proxy`` (the default of
  dockerd: ``"userland-proxy": true``) into the container's bridge network;
* ``docker-host``: the broker in a container on the host's network namespace (the docker
  runtime's ``network: host`` option: no bridge, no proxy, the broker listens on
  127.0.0.1 itself);
* ``docker-bridge``: the broker in a container, clients straight to its address on the
  bridge network the run created (no proxy; what ``"userland-proxy": false`` leaves, minus
  its NAT rule). Run as ``runtime: external`` with ``broker.pid`` = the container's main
  process, so CPU also comes from ``/proc`` for the very process docker stats reports.

Per run: latency p50/p99 from the intended send time, delivered msg/s, the broker's CPU as
mqbench records it (docker stats for ``docker``/``docker-host``, ``/proc`` for ``native``
and ``docker-bridge``), the ``docker-proxy`` process's CPU (which docker stats does not
count: it runs outside the container) and, in ``docker-bridge``, docker stats of the same
container sampled alongside. Defaults: the issue's target load, 20 pairs x 50 msg/s =
1,000 msg/s, 64 B, QoS 0.

    .venv/bin/python benchmarks/docker_vs_native.py
    .venv/bin/python benchmarks/docker_vs_native.py --rounds 5 --duration 30s
    .venv/bin/python benchmarks/docker_vs_native.py --modes native,docker --rate 250

It prints one table (median over rounds per mode and every round) and the load average;
the machine has two cores and other work may run on it: read the ratios of one run, and
re-measure on a quiet machine before quoting absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.brokers.base import StartRequest
from mqbench.brokers.docker.runtime import DockerBroker, DockerRuntime
from mqbench.brokers.runtime.net import free_port
from mqbench.records.cell_entry import CellEntry
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.scenario.matrix import Cell
from mqbench.workload.run import SilentReporter, run_scenario

MODES = ("native", "docker", "docker-host", "docker-bridge")


class QuietReporter(SilentReporter):
    """Reports failed cells only."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        if status != "completed":
            print(f"{cell.id}: {status} {detail.error or ''}", file=sys.stderr)


@dataclass
class Row:
    """One run of one mode."""

    mode: str
    round: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    delivered: float | None = None
    lost: int | None = None
    broker_cpu: float | None = None
    proxy_cpu: float | None = None
    stats_cpu: float | None = None
    generator: str = ""
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ProcessCpu:
    """Mean CPU (cores) of the processes ``match`` finds, sampled twice a second until
    ``stop()``: from the first reading that saw them to the last (they may be gone at the
    end: docker-proxy exits with its container)."""

    def __init__(self, match: Callable[[list[str]], bool]) -> None:
        self._match = match
        self._done = threading.Event()
        self._first: tuple[float, float] | None = None
        self._last: tuple[float, float] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _total(self) -> float | None:
        total, seen = 0.0, False
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if self._match(proc.info["cmdline"] or []):
                    times = proc.cpu_times()
                    total += times.user + times.system
                    seen = True
            except psutil.Error:
                continue
        return total if seen else None

    def _run(self) -> None:
        while not self._done.wait(0.5):
            cpu = self._total()
            if cpu is None:
                continue
            reading = (time.monotonic(), cpu)
            self._first = self._first or reading
            self._last = reading

    def stop(self) -> float | None:
        """Stop sampling; the mean cores between the first and the last reading."""
        self._done.set()
        self._thread.join()
        if self._first is None or self._last is None or self._last[0] <= self._first[0]:
            return None
        return (self._last[1] - self._first[1]) / (self._last[0] - self._first[0])


def _is_docker_proxy(argv: list[str]) -> bool:
    return bool(argv) and Path(argv[0]).name == "docker-proxy"


def _scenario(args: argparse.Namespace, mode: str, broker: dict[str, Any]) -> dict[str, Any]:
    runtime = {"native": "native", "docker-bridge": "external"}.get(mode, "docker")
    data: dict[str, Any] = {
        "name": f"docker-vs-native-{mode}",
        "targets": ["mosquitto"],
        "runtime": runtime,
        "workload": {
            "pairs": args.pairs,
            "rate": args.rate / args.pairs,
            "payload": "64B",
            "qos": 0,
            "warmup": "3s",
            "duration": args.duration,
            "drain": "2s",
        },
        "broker": {"startup_timeout": "120s", **broker},
    }
    if args.resources != "none" and runtime != "external":  # docker-bridge: set at start
        data["resources"] = [args.resources]
    return data


def _run(args: argparse.Namespace, mode: str, n: int, out: Path, broker: dict[str, Any]) -> Row:
    data = _scenario(args, mode, broker)
    result = run_scenario(
        validate_scenario(data, "benchmark"),
        source=ScenarioSource("benchmark", data),
        out_root=out,
        argv=["benchmarks/docker_vs_native.py"],
        reporter=QuietReporter(),
        evaluate=analyze_cell_numpy,
    )
    (cell,) = result.cells
    row = Row(mode, n)
    if cell.window is not None:
        row.extra["window"] = (cell.window.start_ns, cell.window.end_ns)
    if cell.status != "completed":
        row.error = cell.error
        return row
    summary = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
    if summary.latency is not None:
        row.p50_ms = summary.latency.p50_us / 1e3
        row.p99_ms = summary.latency.p99_us / 1e3
    row.delivered = summary.throughput_msg_s
    row.lost = summary.lost
    row.broker_cpu = summary.broker_cpu_cores_mean
    row.generator = "saturated" if summary.generator_saturated else "ok"
    return row


def _published(args: argparse.Namespace, mode: str, n: int, out: Path) -> Row:
    """``native``, ``docker`` or ``docker-host``: mqbench starts the broker itself."""
    port = free_port("127.0.0.1")
    broker: dict[str, Any] = {"port": port}
    if mode == "docker-host":
        broker["options"] = {"network": "host"}
    proxy = ProcessCpu(
        lambda argv: Path(argv[0] if argv else "").name == "docker-proxy" and str(port) in argv
    )
    row = _run(args, mode, n, out, broker)
    row.proxy_cpu = proxy.stop() if mode == "docker" else None
    return row


def _bridge(args: argparse.Namespace, n: int, out: Path) -> Row:
    """``docker-bridge``: the container's own address on the network the run created."""
    with tempfile.TemporaryDirectory(prefix="mqbench-dvn-") as tmp:
        options = {} if args.resources == "none" else {"resources": args.resources}
        container = DockerRuntime().start(StartRequest("mosquitto", Path(tmp), options=options))
        assert isinstance(container, DockerBroker)
        try:
            ref = container.containers[0]
            inspect = json.loads(
                subprocess.run(
                    ["docker", "inspect", ref.id], capture_output=True, text=True, check=True
                ).stdout
            )[0]
            network = inspect["NetworkSettings"]["Networks"][f"{container.project.name}_default"]
            source = container.resource_source()
            samples: list[tuple[int, float]] = []
            stop = threading.Event()

            def stats() -> None:
                while not stop.wait(1.0):
                    if source is not None:
                        now = time.time_ns()
                        rows = source.sample(now)
                        samples.extend((now, r.cpu_cores) for r in rows if r.role == "broker")

            sampler = threading.Thread(target=stats, daemon=True)
            sampler.start()
            broker = {"host": network["IPAddress"], "port": 1883, "pid": ref.pid}
            row = _run(args, "docker-bridge", n, out, broker)
            stop.set()
            sampler.join()
            start, end = row.extra.get("window", (0, 0))
            inside = [cores for t, cores in samples if start <= t <= end]
            row.stats_cpu = statistics.mean(inside) if inside else None
            return row
        finally:
            container.stop()


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _median(rows: list[Row], key: str) -> float | None:
    values = [getattr(r, key) for r in rows if getattr(r, key) is not None]
    return statistics.median(values) if values else None


def _print(rows: list[Row], args: argparse.Namespace, modes: list[str]) -> None:
    load = os.getloadavg()
    print(
        f"# mosquitto 2.0.11, {args.pairs} pairs x {args.rate / args.pairs:g} msg/s = "
        f"{args.rate:g} msg/s, 64 B, QoS 0, {args.duration} measured, resources "
        f"{args.resources}, {args.rounds} round(s) "
        f"alternating {', '.join(modes)}; load average {load[0]:.2f} / {load[1]:.2f} "
        "(1 / 5 min) after the run"
    )
    head = "| mode | round | p50 ms | p99 ms | delivered msg/s | lost | broker CPU | "
    print(head + "docker-proxy CPU | docker stats CPU | generator |")
    print("|" + "---|" * 10)
    for r in rows:
        if r.error:
            print(f"| {r.mode} | {r.round} | failed: {r.error} ||||||||")
            continue
        print(
            f"| {r.mode} | {r.round} | {_fmt(r.p50_ms, '.3f')} | {_fmt(r.p99_ms, '.3f')} | "
            f"{_fmt(r.delivered, ',.0f')} | {r.lost} | {_fmt(r.broker_cpu, '.3f')} | "
            f"{_fmt(r.proxy_cpu, '.3f')} | {_fmt(r.stats_cpu, '.3f')} | {r.generator} |"
        )
    native = _median([r for r in rows if r.mode == "native"], "p50_ms")
    for mode in modes:
        mine = [r for r in rows if r.mode == mode and not r.error]
        p50 = _median(mine, "p50_ms")
        ratio = f"{p50 / native:.2f}x native" if p50 and native else "-"
        print(
            f"| **{mode} median** | {len(mine)} | {_fmt(p50, '.3f')} ({ratio}) | "
            f"{_fmt(_median(mine, 'p99_ms'), '.3f')} | {_fmt(_median(mine, 'delivered'), ',.0f')}"
            f" | | {_fmt(_median(mine, 'broker_cpu'), '.3f')} | "
            f"{_fmt(_median(mine, 'proxy_cpu'), '.3f')} | {_fmt(_median(mine, 'stats_cpu'), '.3f')}"
            " | |"
        )


def main() -> None:
    """Parse arguments, run the modes in alternation, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--rate", type=float, default=1000.0, help="msg/s, all publishers")
    parser.add_argument("--duration", default="20s")
    parser.add_argument(
        "--resources",
        default="unlimited",
        help="profile for every mode (none: each runtime's default, native none, docker 2cpu-4g)",
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(sorted(unknown))} (known: {', '.join(MODES)})")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="mqbench-docker-vs-native-") as tmp:
        for n in range(1, args.rounds + 1):
            for mode in modes:
                if mode == "docker-bridge":
                    row = _bridge(args, n, Path(tmp))
                else:
                    row = _published(args, mode, n, Path(tmp))
                rows.append(row)
                print(f"round {n} {mode}: p50 {_fmt(row.p50_ms, '.3f')} ms", file=sys.stderr)
    _print(rows, args, modes)


if __name__ == "__main__":
    main()
