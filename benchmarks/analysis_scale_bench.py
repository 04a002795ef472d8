"""Analysis at scale: 100M delivery records (+ 100M sends), Spark vs single-process numpy.

    .venv/bin/python benchmarks/analysis_scale_bench.py [--deliveries 100000000]
        [--dir /tmp/mqbench-scale-bench] [--master local[*]] [--keep] [--skip-numpy]

Generates a synthetic pairs cell block by block (1000 publishers at 1000 msg/s, two worker
files per kind, log-normal latency, 0.1 % loss, 0.05 % duplicates, some reordering;
2.4 GB per kind at 100M), then times

- ``analyze_run`` with Spark, including SparkSession start-up (target: <= 120 s), and
- the same chunk-and-merge kernels in this one process (numpy, 2^20-record chunks; the
  whole-file numpy reference would need ~3x the record bytes of memory),

checks that both give the same summary and deletes the data unless ``--keep``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

from mqbench.records.format import RECORD_DTYPE, SEND_OK
from mqbench.records.intended import intended_ns_array

PUBLISHERS = 1000
RATE = 1000.0
WORKERS = 2
START = 1_700_000_000_000_000_000


def make_run(root: Path, deliveries: int, block_seqs: int = 5000, seed: int = 1) -> Path:
    """Write a one-cell result folder with about ``deliveries`` records, block by block."""
    rng = np.random.default_rng(seed)
    per_pub = -(-deliveries // PUBLISHERS)
    total_s = per_pub / RATE
    warm = int(0.1 * total_s * 1e9)
    cell_id = "scale-pairs"
    folder = root / "cells" / cell_id
    folder.mkdir(parents=True)
    cell = {
        "id": cell_id,
        "index": 0,
        "repeat": 0,
        "status": "completed",
        "error": None,
        "params": {"target": "synthetic", "topology": "pairs", "pairs": PUBLISHERS, "rate": RATE},
        "offered_rate": RATE * PUBLISHERS,
        "publishers": PUBLISHERS,
        "subscribers": PUBLISHERS,
        "routes": [{"kind": "pairs", "pubs": [0, PUBLISHERS], "subs": [0, PUBLISHERS]}],
        "schedule": {
            "kind": "interleaved",
            "start_ns": START,
            "rate": RATE,
            "publishers": PUBLISHERS,
            "messages_per_publisher": per_pub,
        },
        "window": {
            "start_ns": START + warm,
            "end_ns": START + warm + int(0.8 * total_s * 1e9),
            "connected_ns": START,
        },
        "generator": {"workers": []},
    }
    per_worker = -(-PUBLISHERS // WORKERS)
    files = {
        (kind, w): open(folder / f"{kind}-{w}.bin", "wb")  # noqa: SIM115
        for kind in ("sends", "deliveries")
        for w in range(WORKERS)
    }
    try:
        for seq0 in range(0, per_pub, block_seqs):
            seqs = min(block_seqs, per_pub - seq0)
            k = np.arange(seq0 * PUBLISHERS, (seq0 + seqs) * PUBLISHERS, dtype=np.int64)
            pub = (k % PUBLISHERS).astype(np.uint32)
            seq = (k // PUBLISHERS).astype(np.uint32)
            intended = intended_ns_array(START, RATE, PUBLISHERS, pub, seq)
            t_sent = intended + rng.exponential(20_000, k.size).astype(np.int64)
            lat = (rng.lognormal(np.log(300_000), 0.5, k.size) / 100).astype(np.int64)
            for w in range(WORKERS):
                mine = np.flatnonzero((pub // per_worker) == w)
                sends = np.zeros(mine.size, dtype=RECORD_DTYPE)
                sends["t_sent"], sends["pub"], sends["seq"] = t_sent[mine], pub[mine], seq[mine]
                sends["sub"] = SEND_OK
                sends.tofile(files[("sends", w)])
                idx = mine[rng.random(mine.size) >= 0.001]
                dup = idx[rng.random(idx.size) < 0.0005]
                idx = np.concatenate([idx, dup])
                recv = t_sent[idx] + lat[idx] * 100
                recv[idx.size - dup.size :] += 1_000_000
                recv[rng.random(idx.size) < 0.001] += 3_000_000
                order = np.argsort(recv, kind="stable")
                idx, recv = idx[order], recv[order]
                rec = np.zeros(idx.size, dtype=RECORD_DTYPE)
                rec["t_sent"], rec["pub"], rec["seq"] = t_sent[idx], pub[idx], seq[idx]
                rec["sub"] = pub[idx]
                rec["lat"] = ((recv - t_sent[idx]) // 100).astype(np.int32)
                rec.tofile(files[("deliveries", w)])
    finally:
        for handle in files.values():
            handle.close()
    manifest = {"schema_version": 1, "status": "completed", "cells": [cell]}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


def main() -> None:
    """Generate, time Spark and numpy, compare, clean up."""
    from mqbench.analysis import analyze_run
    from mqbench.analysis.api import read_manifest
    from mqbench.analysis.plan import plan_cell
    from mqbench.analysis.spark_job import aggregate_cells_serial
    from mqbench.analysis.summary import build_summary

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--deliveries", type=int, default=100_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/mqbench-scale-bench"))
    ap.add_argument("--master", default=None)
    ap.add_argument("--approx", action="store_true", help="approximate percentiles")
    ap.add_argument("--keep", action="store_true", help="keep the generated data")
    ap.add_argument("--skip-numpy", action="store_true")
    args = ap.parse_args()
    try:
        if not (args.dir / "manifest.json").exists():
            t0 = time.perf_counter()
            make_run(args.dir, args.deliveries)
            print(f"generated {args.dir} in {time.perf_counter() - t0:.1f} s", flush=True)
        deliveries = sum(p.stat().st_size for p in args.dir.glob("cells/*/deliveries-*.bin"))
        sends = sum(p.stat().st_size for p in args.dir.glob("cells/*/sends-*.bin"))
        print(
            f"records: {deliveries // 24:,} deliveries + {sends // 24:,} sends "
            f"({(deliveries + sends) / 2**30:.2f} GiB)",
            flush=True,
        )
        t0 = time.perf_counter()
        (spark_summary,) = analyze_run(args.dir, master=args.master, approx=args.approx)
        t_spark = time.perf_counter() - t0
        print(f"spark analyze_run (incl. start-up):  {t_spark:6.1f} s", flush=True)
        if not args.skip_numpy:
            cell = read_manifest(args.dir).cells[0]
            t0 = time.perf_counter()
            plan = plan_cell(cell, args.dir / "cells" / cell.id, 7 if args.approx else None)
            (agg,) = aggregate_cells_serial([plan])
            numpy_summary = build_summary(plan, agg)
            t_numpy = time.perf_counter() - t0
            print(f"numpy, one process, chunked:         {t_numpy:6.1f} s")
            same = dataclasses.asdict(spark_summary) == dataclasses.asdict(numpy_summary)
            print(f"spark == numpy: {same}")
        s = spark_summary
        print(
            f"sent {s.sent:,} received {s.received:,} lost {s.lost:,} dup {s.duplicates:,} "
            f"reordered {s.reordered:,} thr {s.throughput_msg_s or 0:,.0f}/s"
        )
        if s.latency is not None:
            lat = s.latency
            print(f"latency p50 {lat.p50_us:.1f} p99 {lat.p99_us:.1f} p99.9 {lat.p999_us:.1f} us")
    finally:
        if not args.keep and args.dir.exists():
            shutil.rmtree(args.dir)
            print(f"deleted {args.dir}")


if __name__ == "__main__":
    main()
