"""Soak run: does the generator's memory stay flat and is nothing lost over a long run?

Runs ``scenarios/soak.yaml`` (30 minutes at 5,000 msg/s on NATS) through the real CLI, then
checks, from the result folder:

- generator RSS growth after warm-up below 10 %: the mean of the generator's RSS samples
  (``resources.csv``, role ``generator``) in the last ``--edge`` of the measured window
  against the mean in its first ``--edge``;
- zero loss: ``lost == 0`` and ``unsent == 0`` in the cell's summary, and ``valid``.

It prints the workers' event-loop stalls (count, longest, total) and the cell's generator
warnings: a stall too rare to mark the cell (docs/performance.md, "Soak") still shows.

Not a test (it takes the scenario's duration); run on demand, on a quiet machine::

    .venv/bin/python benchmarks/soak.py                  # the documented 30 minutes
    .venv/bin/python benchmarks/soak.py --duration 5m    # a shortened check
    .venv/bin/python benchmarks/soak.py --set targets=[mosquitto]

Exit code 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from mqbench.analysis.api import analyze_run
from mqbench.scenario.units import parse_duration

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "soak.yaml"
MAX_RSS_GROWTH = 0.10


def generator_rss(resources: Path, start_ns: int, end_ns: int) -> list[tuple[int, int]]:
    """(t_ns, rss_bytes) of the generator role inside ``[start_ns, end_ns)``."""
    with resources.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [
        (int(r["t_ns"]), int(r["rss_bytes"]))
        for r in rows
        if r["role"] == "generator" and start_ns <= int(r["t_ns"]) < end_ns
    ]


def rss_growth(samples: list[tuple[int, int]], edge_ns: int) -> tuple[float, float, float]:
    """Mean RSS (MB) of the first and last ``edge_ns`` of the samples, and the growth."""
    first_t, last_t = samples[0][0], samples[-1][0]
    head = [rss for t, rss in samples if t < first_t + edge_ns]
    tail = [rss for t, rss in samples if t > last_t - edge_ns]
    start = sum(head) / len(head) / 1e6
    end = sum(tail) / len(tail) / 1e6
    return start, end, (end - start) / start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", help="override workload.duration, e.g. 5m")
    parser.add_argument("--edge", default="60s", help="span averaged at each end (default 60s)")
    parser.add_argument("--out", type=Path, help="results root (default: a temporary folder)")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="mqbench-soak-"))
    argv = [sys.executable, "-m", "mqbench.cli", "run", str(SCENARIO), "--out", str(out)]
    argv += ["--no-analyze"]
    if args.duration:
        argv += ["--set", f"workload.duration={args.duration}"]
    for item in args.overrides:
        argv += ["--set", item]
    print("running:", " ".join(argv[2:]), flush=True)
    done = subprocess.run(argv, check=False)
    if done.returncode != 0:
        print(f"the run failed (exit code {done.returncode})")
        return 1
    (run_dir,) = [p for p in out.glob("soak/*") if p.is_dir()]
    (summary,) = analyze_run(run_dir, engine="numpy")
    cell_dir = run_dir / "cells" / summary.cell_id
    samples = generator_rss(
        cell_dir / "resources.csv", summary.window_start_ns, summary.window_end_ns
    )
    edge_ns = int(parse_duration(args.edge) * 1e9)
    start_mb, end_mb, growth = rss_growth(samples, edge_ns)
    lat = summary.latency
    generator = json.loads((run_dir / "manifest.json").read_text())["cells"][0]["generator"]
    report = {
        "result_dir": str(run_dir),
        "window_s": summary.window_s,
        "scheduled": summary.scheduled,
        "sent": summary.sent,
        "received": summary.received,
        "lost": summary.lost,
        "unsent": summary.unsent,
        "valid": summary.valid,
        "invalid_reasons": [r.to_dict() for r in summary.invalid_reasons],
        "throughput_msg_s": summary.throughput_msg_s,
        "latency_p50_ms": lat.p50_us / 1000 if lat else None,
        "latency_p99_ms": lat.p99_us / 1000 if lat else None,
        "generator_rss_mb_start": round(start_mb, 2),
        "generator_rss_mb_end": round(end_mb, 2),
        "generator_rss_growth_pct": round(100 * growth, 2),
        "generator_rss_samples": len(samples),
        "broker_rss_mb_max": summary.broker_rss_mb_max,
        # the event-loop stalls stay visible even when too rare to mark the cell
        "generator_warnings": generator["warnings"],
        "loop_stalls": [
            {k: w.get(k) for k in ("worker", "max_loop_lag_ns", "loop_stalls", "loop_stall_ns")}
            for w in generator["workers"]
        ],
    }
    print(json.dumps(report, indent=2))
    checks = {
        f"generator RSS growth {100 * growth:.2f} % < {100 * MAX_RSS_GROWTH:.0f} %": growth
        < MAX_RSS_GROWTH,
        f"lost {summary.lost} == 0": summary.lost == 0,
        f"unsent {summary.unsent} == 0": summary.unsent == 0,
        "valid": summary.valid,
    }
    for text, ok in checks.items():
        print(("PASS " if ok else "FAIL ") + text)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
