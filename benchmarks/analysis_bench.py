"""Time ``analyze_run`` (Spark, including start-up) against the numpy reference.

    .venv/bin/python benchmarks/analysis_bench.py [--deliveries 10000000] [--dir /tmp/x]

Generates a synthetic result folder (pairs topology, two worker files per kind, log-normal
latency, 0.1 % loss, 0.05 % duplicates, some reordering) unless it already exists, then
times the Spark analysis and the numpy reference and checks that they agree.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from mqbench.records.format import RECORD_DTYPE, SEND_OK
from mqbench.records.intended import intended_ns_array


def make_synthetic_run(
    root: Path, deliveries: int, publishers: int = 1000, workers: int = 2, seed: int = 1
) -> Path:
    """Write manifest + one cell of ~``deliveries`` delivery records under ``root``."""
    rng = np.random.default_rng(seed)
    rate = 1000.0
    per_pub = -(-deliveries // publishers)
    start = 1_700_000_000_000_000_000
    total_s = per_pub / rate
    cell_id = "synthetic-pairs"
    folder = root / "cells" / cell_id
    folder.mkdir(parents=True, exist_ok=False)
    warm = int(0.1 * total_s * 1e9)
    cell = {
        "id": cell_id,
        "index": 0,
        "repeat": 0,
        "status": "completed",
        "error": None,
        "params": {
            "target": "synthetic",
            "transport": "none",
            "topology": "pairs",
            "pairs": publishers,
            "rate": rate,
            "payload_bytes": 64,
            "qos": 0,
            "duration_s": total_s * 0.8,
            "warmup_s": total_s * 0.1,
            "drain_s": 1.0,
            "workers": workers,
        },
        "offered_rate": rate * publishers,
        "publishers": publishers,
        "subscribers": publishers,
        "routes": [{"kind": "pairs", "pubs": [0, publishers], "subs": [0, publishers]}],
        "schedule": {
            "kind": "interleaved",
            "start_ns": start,
            "rate": rate,
            "publishers": publishers,
            "messages_per_publisher": per_pub,
        },
        "window": {
            "start_ns": start + warm,
            "end_ns": start + warm + int(0.8 * total_s * 1e9),
            "connected_ns": start,
        },
        "generator": {"workers": []},
    }
    n = per_pub * publishers
    k = np.arange(n, dtype=np.int64)
    pub = (k % publishers).astype(np.uint32)
    seq = (k // publishers).astype(np.uint32)
    intended = intended_ns_array(start, rate, publishers, pub, seq)
    t_sent = intended + rng.exponential(20_000, n).astype(np.int64)
    lat = (rng.lognormal(np.log(300_000), 0.5, n) / 100).astype(np.int32)
    per_worker = -(-publishers // workers)
    for w in range(workers):
        mine = (pub // per_worker) == w
        sends = np.zeros(int(mine.sum()), dtype=RECORD_DTYPE)
        sends["t_sent"], sends["pub"], sends["seq"] = t_sent[mine], pub[mine], seq[mine]
        sends["sub"] = SEND_OK
        sends.tofile(folder / f"sends-{w}.bin")
        keep = mine & (rng.random(n) >= 0.001)
        idx = np.flatnonzero(keep)
        dup = idx[rng.random(idx.size) < 0.0005]
        idx = np.concatenate([idx, dup])
        recv = t_sent[idx] + lat[idx].astype(np.int64) * 100
        recv[-dup.size :] += 1_000_000  # duplicates arrive 1 ms later
        jitter = rng.random(idx.size) < 0.001  # some messages overtaken by later ones
        recv[jitter] += 3_000_000
        order = np.argsort(recv, kind="stable")
        idx = idx[order]
        rec = np.zeros(idx.size, dtype=RECORD_DTYPE)
        rec["t_sent"], rec["pub"], rec["seq"] = t_sent[idx], pub[idx], seq[idx]
        rec["sub"] = pub[idx]
        rec["lat"] = ((recv[order] - t_sent[idx]) // 100).astype(np.int32)
        rec.tofile(folder / f"deliveries-{w}.bin")
    manifest = {"schema_version": 1, "status": "completed", "cells": [cell]}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


def main() -> None:
    """Generate (if needed) and time both engines."""
    from mqbench.analysis import analyze_run

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--deliveries", type=int, default=10_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/mqbench-analysis-bench"))
    ap.add_argument("--master", default=None)
    ap.add_argument("--chunk-records", type=int, default=1 << 20)
    ap.add_argument("--skip-numpy", action="store_true")
    args = ap.parse_args()
    if not (args.dir / "manifest.json").exists():
        t0 = time.perf_counter()
        make_synthetic_run(args.dir, args.deliveries)
        print(f"generated {args.dir} in {time.perf_counter() - t0:.1f} s")
    size = sum(p.stat().st_size for p in args.dir.glob("cells/*/*.bin"))
    print(f"records: {size // 24:,} ({size / 2**20:.0f} MiB)")
    t0 = time.perf_counter()
    spark_summary = analyze_run(args.dir, master=args.master, chunk_records=args.chunk_records)
    t_spark = time.perf_counter() - t0
    print(f"spark analyze_run (incl. start-up): {t_spark:.1f} s")
    if not args.skip_numpy:
        t0 = time.perf_counter()
        numpy_summary = analyze_run(args.dir, engine="numpy")
        t_numpy = time.perf_counter() - t0
        print(f"numpy reference:                    {t_numpy:.1f} s")
        same = [dataclasses.asdict(s) for s in spark_summary] == [
            dataclasses.asdict(s) for s in numpy_summary
        ]
        print(f"spark == numpy: {same}")
    s = spark_summary[0]
    lat = s.latency
    print(
        f"sent {s.sent:,} expected {s.expected:,} received {s.received:,} lost {s.lost:,} "
        f"dup {s.duplicates:,} reordered {s.reordered:,} thr {s.throughput_msg_s:,.0f}/s"
    )
    if lat is not None:
        print(f"latency p50 {lat.p50_us:.1f} p99 {lat.p99_us:.1f} p99.9 {lat.p999_us:.1f} us")


if __name__ == "__main__":
    main()
