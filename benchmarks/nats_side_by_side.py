"""The full engine on NATS against ``nats bench``, side by side (not a test; run on demand).

Starts one ``nats-server`` on a free loopback port (stopped by PID at the end), runs the
official ``nats bench`` (natscli, built once from the Go module proxy into
``~/.cache/mqbench``) with one publisher and one subscriber, then the whole ``mqbench run``
machinery against the same server (external runtime, 1 pair, 64 B, QoS 0, records and the
self-check) at fractions of the rate ``nats bench`` reached, on each engine of
``--engine``. Per step it prints offered and delivered msg/s, the ratio to ``nats bench``,
the generator's CPU per message and the verdict. The machine's load average is printed
before every step: compare within one invocation.

    .venv/bin/python benchmarks/nats_side_by_side.py
    .venv/bin/python benchmarks/nats_side_by_side.py --fractions 0.5,0.6 --engine compiled

Bounds: ``nats bench`` sends at most ``--bench-msgs`` messages; each mqbench step lasts
warm-up + ``--duration`` + 2 s of drain.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from paper_topology import CpuSamples, QuietReporter, free_port

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.workload.run import run_scenario

NATSCLI = "github.com/nats-io/natscli/nats@v0.5.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mqbench"


def _bench_argv(cli: str, role: str, server: str, msgs: int, size: int) -> list[str]:
    """``nats bench pub|sub`` with one client on the side-by-side subject."""
    return [cli, "bench", role, "bench.side", "--server", server, "--msgs", str(msgs),
            "--size", f"{size}B", "--clients", "1", "--no-progress"]  # fmt: skip


def nats_cli() -> Path:
    """The ``nats`` CLI, built once from the Go module proxy."""
    binary = CACHE / "natscli-0.5.0" / "nats"
    if binary.exists():
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(binary.parent), "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    subprocess.run([go, "install", NATSCLI], check=True, env=env, cwd=tempfile.gettempdir())
    return binary


def server_binary() -> str:
    here = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "nats-server"
    return str(here) if here.exists() else (shutil.which("nats-server") or "nats-server")


@contextlib.contextmanager
def nats_server() -> Iterator[tuple[int, int]]:
    """A nats-server on a free loopback port: yields (port, pid)."""
    port = free_port()
    proc = subprocess.Popen(
        [server_binary(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def nats_bench(port: int, msgs: int, size: int) -> float:
    """Messages per second ``nats bench`` delivered 1 publisher -> 1 subscriber."""
    server = f"nats://127.0.0.1:{port}"
    cli = str(nats_cli())
    sub = subprocess.Popen(
        _bench_argv(cli, "sub", server, msgs, size),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    time.sleep(1.0)  # subscribed before the publisher starts
    subprocess.run(
        _bench_argv(cli, "pub", server, msgs, size),
        check=True,
        capture_output=True,
        timeout=120,
    )
    out, _ = sub.communicate(timeout=120)
    rates = re.findall(r"([\d,]+) msgs/sec", out)
    if not rates:
        raise SystemExit(f"could not read nats bench's rate:\n{out}")
    return float(rates[0].replace(",", ""))


def engine_step(
    port: int, pid: int, rate: float, engine: str, args: argparse.Namespace, out: Path
) -> str:
    data = {
        "name": "nats-side",
        "runtime": "external",
        "targets": ["nats"],
        "broker": {"host": "127.0.0.1", "port": port, "pid": pid},
        "workload": {
            "pairs": 1,
            "rate": rate,
            "payload": f"{args.size}B",
            "qos": 0,
            "warmup": "2s",
            "duration": args.duration,
            "drain": "2s",
        },
        "generator": {"hot_path": engine},
    }
    scenario = validate_scenario(data, "benchmark")
    samples = CpuSamples(exclude=pid)
    with samples.running():
        result = run_scenario(
            scenario,
            source=ScenarioSource("benchmark", data),
            out_root=out,
            argv=["benchmarks/nats_side_by_side.py"],
            reporter=QuietReporter(),
        )
    cell = result.cells[0]
    if cell.status != "completed":
        return f"cell {cell.status}: {cell.error}"
    s = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
    seconds, user, system = samples.between(s.window_start_ns, s.window_end_ns)
    delivered = s.throughput_msg_s or 0.0
    per_msg = ""
    if seconds > 0 and delivered > 0:
        n = delivered * seconds
        per_msg = f"{user / n * 1e6:.2f}+{system / n * 1e6:.2f}"
    verdict = (
        "ok"
        if s.valid and not s.generator_saturated
        else (
            f"GENERATOR SATURATED: {s.generator_reason}"
            if s.generator_saturated
            else "INVALID: " + ", ".join(str(r) for r in s.invalid_reasons)
        )
    )
    ran = cell.hot_path.engine if cell.hot_path else engine
    return (
        f"{ran:>9} {rate:>11,.0f} {delivered:>11,.0f} {per_msg:>12} "
        f"loss {s.loss_pct or 0:.3f}%  {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--bench-msgs", type=int, default=5_000_000)
    parser.add_argument("--fractions", default="0.25,0.5,0.6")
    parser.add_argument("--engine", default="python,compiled")
    parser.add_argument("--duration", default="10s")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="mqbench-nats-side-") as tmp,
        nats_server() as (
            port,
            pid,
        ),
    ):
        load = os.getloadavg()
        print(f"# load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
        peer = nats_bench(port, args.bench_msgs, args.size)
        print(f"nats bench 1->1, {args.size} B: {peer:,.0f} msg/s", flush=True)
        print(
            f"{'fraction':>8} {'engine':>9} {'offered':>11} {'delivered':>11} "
            f"{'us/msg u+s':>12}  verdict",
            flush=True,
        )
        for fraction in (float(f) for f in args.fractions.split(",")):
            for engine in args.engine.split(","):
                load = os.getloadavg()
                print(f"# load average {load[0]:.1f}", flush=True)
                line = engine_step(port, pid, peer * fraction, engine, args, Path(tmp))
                print(f"{fraction:>8.2f} {line}", flush=True)


if __name__ == "__main__":
    main()
