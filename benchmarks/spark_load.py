"""Distributed load as a Spark barrier stage (not a test; run on demand).

Part 1, start spread and clocks: runs a small pairs scenario ``--repeats`` times on a
``local-cluster`` master and prints, per run, the barrier start spread (max - min of the
tasks' barrier exits on the driver's clock) and each task's clock offset to the driver
before and after the run, with its error bound (RTT/2 of the fastest probe).

Part 2 (``--pairs N``, e.g. 4500): N pairs per executor at 1 msg/s through the Spark engine
(2 executors x 4,500 pairs = 18,000 connections; every process here, the broker included,
is capped at 20,000 open files) against one local run of the same scenario with two local
worker processes; prints sent, received, loss and latency of both, side by side.

Part 3 (``--ingest PAIRS``), the driver's record ingest: tasks ship their records to the
driver over the control connection, and the driver appends them to the cell folder. (a) The
path alone: 1 MiB chunks pickled through a pipe and appended by ``RecordSink`` (MB/s, CPU
seconds per MB). (b) A run of 2 tasks x PAIRS pairs at ``--ingest-rate`` msg/s: record bytes
received, the driver process's CPU time during the run, and the same for the local engine
with two worker processes (whose records need no ingest), side by side.

    .venv/bin/python benchmarks/spark_load.py
    .venv/bin/python benchmarks/spark_load.py --repeats 1 --pairs 4500 --target nats
    .venv/bin/python benchmarks/spark_load.py --repeats 0 --ingest 100 --ingest-rate 100
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.records.transfer import MAX_CHUNK_BYTES, RecordChunk, RecordSink
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.workload.messages import RecordsShipped
from mqbench.workload.run import RunResult, SilentReporter, run_scenario
from mqbench.workload.spark_engine import spark_context, stop_spark

MASTER = "local-cluster[2,1,1024]"
CONF = {"spark.executor.memory": "1g"}


def scenario(target: str, pairs: int, rate: float, duration: str, generator: dict[str, Any]) -> Any:
    data = {
        "name": "spark-load-bench",
        "targets": [target],
        "workload": {
            "topology": "pairs",
            "pairs": pairs,
            "rate": rate,
            "payload": 64,
            "qos": 0,
            "warmup": "5s",
            "duration": duration,
            "drain": "5s",
            "connect_rate": 0,
        },
        "generator": {"connect_timeout": "60s", **generator},
        "seed": 1,
    }
    return validate_scenario(data, "bench.yaml"), data


def run(
    target: str, pairs: int, rate: float, duration: str, generator: dict[str, Any], out: Path
) -> RunResult:
    model, data = scenario(target, pairs, rate, duration, generator)
    return run_scenario(
        model,
        source=ScenarioSource("bench.yaml", data),
        out_root=out,
        argv=["benchmarks/spark_load.py"],
        reporter=SilentReporter(),
    )


def describe(label: str, result: RunResult) -> None:
    cell = result.cells[0]
    totals = cell.totals
    line = f"{label}: status={cell.status}"
    if totals is not None:
        line += f" sent={totals.sent} received={totals.received}"
    if cell.status == "completed":
        summary = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
        line += f" | window: sent={summary.sent} received={summary.received} "
        line += f"loss={summary.loss_pct}%"
        if summary.latency is not None:
            line += f" p50={summary.latency.p50_us:.0f} us p99={summary.latency.p99_us:.0f} us"
    else:
        line += f" error={cell.error}"
    print(line, flush=True)


def print_clocks(result: RunResult) -> None:
    manifest = json.loads((result.result_dir / "manifest.json").read_text())
    clocks = manifest["cells"][0]["clocks"]
    print(f"  barrier start spread: {clocks['start_spread_ns'] / 1e6:.3f} ms")
    for task in clocks["tasks"]:
        text = f"  task {task['task']} (pid {task['pid']}): offset before {_us(task['before'])}"
        if task["after"] is not None:
            text += f", after {_us(task['after'])}"
        print(text, flush=True)


def _us(offset: dict[str, int]) -> str:
    return f"{offset['offset_ns'] / 1e3:+.1f} us ±{offset['error_ns'] / 1e3:.1f} us"


def ingest_path(megabytes: int, folder: Path) -> None:
    """Part 3a: chunks through a pipe into a ``RecordSink`` (the driver's side alone)."""
    ours, theirs = multiprocessing.Pipe(duplex=True)
    folder.mkdir()
    sink = RecordSink(folder, 0)
    data = os.urandom(MAX_CHUNK_BYTES - MAX_CHUNK_BYTES % 24)

    def sender() -> None:
        offset = 0
        ours.send(RecordsShipped(RecordChunk("sends-0.bin", 0, b"")))
        for _ in range(megabytes):
            ours.send(RecordsShipped(RecordChunk("sends-0.bin", offset, data)))
            offset += len(data)
        ours.send(None)

    thread = threading.Thread(target=sender)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    thread.start()
    while True:
        message = theirs.recv()
        if not isinstance(message, RecordsShipped):
            break
        sink.accept(message.item)
    sink.close()
    thread.join()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    mb = sink.received_bytes / 1e6
    print(
        f"part 3a: {mb:.0f} MB in 1 MiB chunks through a pipe into RecordSink: "
        f"{mb / wall:.0f} MB/s, {cpu / mb * 1e3:.2f} ms CPU per MB (sender and receiver)",
        flush=True,
    )


def record_bytes(result: RunResult) -> int:
    """Bytes of record files in the run's first cell."""
    folder = result.result_dir / "cells" / result.cells[0].id
    return sum(p.stat().st_size for p in folder.glob("*.bin"))


def ingest_run(
    target: str, pairs: int, rate: float, duration: str, generator: dict[str, Any], out: Path
) -> tuple[RunResult, float, float]:
    """Part 3b: a run and the driver process's CPU seconds and wall seconds during it."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = run(target, pairs, rate, duration, generator, out)
    return result, time.process_time() - cpu0, time.perf_counter() - wall0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="nats")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=0, help="pairs per executor (part 2)")
    parser.add_argument("--duration", default="20s")
    parser.add_argument("--ingest", type=int, default=0, help="pairs per executor (part 3)")
    parser.add_argument("--ingest-rate", type=float, default=100.0)
    parser.add_argument("--ingest-mb", type=int, default=256)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    spark = {"engine": "spark", "master": MASTER, "spark_conf": CONF}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        spark_context(MASTER, CONF, "127.0.0.1")
        try:
            for i in range(args.repeats):
                result = run(args.target, 20, 10, "5s", spark, out)
                describe(f"part 1, run {i + 1}: spark 2 tasks x 10 pairs", result)
                print_clocks(result)
            if args.pairs:
                total = 2 * args.pairs
                result = run(args.target, total, 1, args.duration, spark, out)
                describe(f"part 2: spark 2 tasks x {args.pairs} pairs @ 1 msg/s", result)
                if result.cells[0].clocks is not None:
                    print_clocks(result)
                print(f"load average: {os.getloadavg()}", flush=True)
                local = run(args.target, total, 1, args.duration, {"workers": 2}, out)
                describe(f"part 2: local 2 workers, {total} pairs @ 1 msg/s", local)
            if args.ingest:
                ingest_path(args.ingest_mb, out / "ingest")
                total, rate = 2 * args.ingest, args.ingest_rate
                for label, generator in (
                    ("spark 2 tasks", spark),
                    ("local 2 workers", {"workers": 2}),
                ):
                    result, cpu, wall = ingest_run(
                        args.target, total, rate, args.duration, generator, out
                    )
                    describe(f"part 3b: {label}, {total} pairs @ {rate:g} msg/s", result)
                    mb = record_bytes(result) / 1e6
                    print(
                        f"  record bytes {mb:.1f} MB in {wall:.1f} s ({mb / wall:.2f} MB/s over "
                        f"the run); driver process CPU {cpu:.2f} s ({cpu / wall:.3f} cores)",
                        flush=True,
                    )
                    print(f"  load average: {os.getloadavg()}", flush=True)
        finally:
            stop_spark()
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
