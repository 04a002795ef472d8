"""End-to-end throughput through the whole engine (not a test; run on demand).

Runs ``mqbench run`` machinery against a native broker with ONE generator worker process,
64-byte QoS 0 messages, offering increasing loads, and prints for each step what was
offered, sent and delivered in the measured window, latency, send lag and whether the
generator flagged itself as saturated. The issue's target: >= 50K msg/s delivered on
native mosquitto from one generator process with no saturation flag.

    .venv/bin/python benchmarks/engine_throughput.py --target mosquitto
    .venv/bin/python benchmarks/engine_throughput.py --target nats --rates 2000,5000

Against an older tree (one venv, ``PYTHONPATH`` choosing the tree; run from outside both
checkouts so the working directory does not shadow it), with this tree's settings the old
one lacks switched off: ``--realtime off --hot-path python``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.brokers.runtime.liveness import BrokerExit
from mqbench.records.cell_entry import CellEntry
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.scenario.matrix import Cell
from mqbench.workload.coordinator import Progress
from mqbench.workload.run import run_scenario


class QuietReporter:
    """Prints one line per cell."""

    def run_started(self, result_dir: Path | RemoteRoot, cells: list[Cell]) -> None:
        print(f"results in {result_dir}")

    def cell_started(self, cell: Cell) -> None:
        pass

    def phase(self, cell: Cell, text: str) -> None:
        pass

    def progress(self, cell: Cell, progress: Progress) -> None:
        pass

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        if status != "completed":
            print(f"{cell.id}: {status} {detail.error or ''}")

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        print(f"{cell.id}: the broker {exit.describe()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="mosquitto")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument(
        "--rates", default="3000,5000,6000", help="msg/s per publisher, comma separated"
    )
    parser.add_argument("--duration", default="15s")
    parser.add_argument("--payload", default="64B")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--realtime",
        choices=["auto", "on", "off"],
        default="auto",
        help="generator.realtime (off: compare with a tree that has no real-time path)",
    )
    parser.add_argument(
        "--hot-path",
        choices=["auto", "python", "compiled"],
        default="auto",
        help="generator.hot_path",
    )
    args = parser.parse_args()

    rates = [float(r) for r in args.rates.split(",")]
    data = {
        "name": "bench-engine",
        "targets": [args.target],
        "workload": {
            "pairs": args.pairs,
            "rate": rates,
            "payload": args.payload,
            "qos": 0,
            "warmup": "3s",
            "duration": args.duration,
            "drain": "3s",
        },
        "generator": {
            "workers": args.workers,
            "realtime": args.realtime,
            "hot_path": args.hot_path,
        },
    }
    scenario = validate_scenario(data, "benchmark")
    with tempfile.TemporaryDirectory(prefix="mqbench-bench-") as tmp:
        result = run_scenario(
            scenario,
            source=ScenarioSource("benchmark", data),
            out_root=Path(tmp),
            argv=["benchmarks/engine_throughput.py"],
            reporter=QuietReporter(),
        )
        header = (
            f"{'cell':<40} {'offered':>9} {'sent/s':>9} {'deliv/s':>9} {'loss%':>7} "
            f"{'p50ms':>7} {'p99ms':>7} {'lag99ms':>8} {'brokerCPU':>9} {'genCPU':>7}  generator"
        )
        print(header)
        for cell in result.cells:
            if cell.status != "completed":
                continue
            s = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
            lat, lag = s.latency, s.send_lag
            verdict = "SATURATED: " + (s.generator_reason or "") if s.generator_saturated else "ok"
            p50 = (lat.p50_us if lat else 0) / 1e3
            p99 = (lat.p99_us if lat else 0) / 1e3
            lag99 = (lag.p99_us if lag else 0) / 1e3
            print(
                f"{s.cell_id:<40} {s.offered_rate or 0:>9,.0f} {s.send_rate or 0:>9,.0f} "
                f"{s.throughput_msg_s or 0:>9,.0f} {s.loss_pct or 0:>7.3f} "
                f"{p50:>7.2f} {p99:>7.2f} {lag99:>8.2f} {s.broker_cpu_cores_mean or 0:>9.2f} "
                f"{s.generator_cpu_cores_mean or 0:>7.2f}  {verdict}"
            )


if __name__ == "__main__":
    main()
