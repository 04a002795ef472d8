"""What the per-second series and the HdrHistogram log add to an analysis (CPU seconds).

    .venv/bin/python benchmarks/series_cost.py [--deliveries 4000000]

Builds one synthetic cell (a publisher at 100,000 msg/s, every message delivered) in a
temporary folder, twice: latencies spread over 0.2-0.3 ms (about 1,000 distinct values a
second) and over 0.2-100 ms (100 ns resolution, up to 100,000 distinct values a second),
and prints the CPU time of the numpy engine's summary and of ``write_cell_series``
(``series.csv`` + ``latency.hlog``) for each. Measured under load average 15-20 on the
2-core development machine: 3.4 s vs 0.50 s (narrow) and 3.5 s vs 1.6 s (wide) for 4 M
deliveries; the lead re-runs it on a quiet machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from analysis_fixtures import make_cell, write_manifest

from mqbench.analysis.api import read_manifest
from mqbench.analysis.numpy_ref import aggregate_cell_numpy
from mqbench.analysis.plan import plan_cell
from mqbench.analysis.series import write_cell_series
from mqbench.records.format import RECORD_DTYPE, SEND_OK

RATE = 100_000


def _cell(root: Path, n: int, spread: int) -> Path:
    seq = np.arange(n, dtype=np.uint32)
    t = (seq.astype(np.int64) * 10**9) // RATE
    deliveries = np.zeros(n, RECORD_DTYPE)
    deliveries["t_sent"], deliveries["seq"] = t, seq
    deliveries["lat"] = 2000 + np.random.default_rng(1).integers(0, spread, n)
    sends = np.zeros(n, RECORD_DTYPE)
    sends["t_sent"], sends["sub"], sends["seq"] = t, SEND_OK, seq
    entry = make_cell(root, window=(0, n * 10**9 // RATE), deliveries=[deliveries], sends=[sends])
    entry["schedule"]["rate"] = float(RATE)
    return write_manifest(root, [entry])


def main() -> None:
    """Print the CPU seconds of both steps for a narrow and a wide latency spread."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=4_000_000)
    n = parser.parse_args().deliveries
    for label, spread in (("narrow (0.1 ms)", 1_000), ("wide (100 ms)", 1_000_000)):
        with tempfile.TemporaryDirectory() as tmp:
            root = _cell(Path(tmp), n, spread)
            (entry,) = read_manifest(root).cells
            plan = plan_cell(entry, root / "cells" / entry.id)
            costs = []
            for step in (aggregate_cell_numpy, write_cell_series):
                t0 = time.process_time()
                step(plan)
                costs.append(time.process_time() - t0)
            print(
                f"{label}: summary {costs[0]:.2f} s CPU, series + hlog {costs[1]:.2f} s CPU "
                f"for {n:,} deliveries"
            )


if __name__ == "__main__":
    main()
