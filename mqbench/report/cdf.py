"""Latency distributions for the CDF figures, computed from the delivery records.

Each record file is read in chunks with numpy; the intended send time of every
``(pub, seq)`` comes from the schedule, and deliveries whose intended time lies in the
measured window contribute ``t_recv - intended`` (floored to 100 ns) to an exact histogram.
Summary quantiles are never used to draw a distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from mqbench.analysis.kernel import Hist, histogram, merge_hists, read_chunk
from mqbench.analysis.plan import CellPlan
from mqbench.records.format import LAT_UNIT_NS, RECORD_SIZE

CDF_CHUNK: Final = 1 << 22
"""Records read at once (4M records, 96 MiB)."""
MAX_POINTS: Final = 2000


def latency_hist_from_records(plan: CellPlan, chunk_records: int = CDF_CHUNK) -> Hist:
    """Histogram (100 ns units) of latency from the intended send time of every delivery
    whose intended time lies in the window, read from the record files chunk by chunk."""
    hists: list[Hist] = []
    for path in plan.delivery_files:
        total = Path(path).stat().st_size // RECORD_SIZE
        for offset in range(0, total, chunk_records):
            rec = read_chunk(path, offset, min(chunk_records, total - offset))
            pub, seq = rec["pub"], rec["seq"]
            intended, keep = plan.in_window(pub, seq)
            t_recv = rec["t_sent"][keep] + rec["lat"][keep].astype(np.int64) * LAT_UNIT_NS
            hists.append(histogram((t_recv - intended[keep]) // LAT_UNIT_NS))
    return merge_hists(hists)


@dataclass(frozen=True)
class Distribution:
    """A latency distribution at selected distinct values (ascending).

    ``cdf[i]`` is the fraction of deliveries with latency <= ``ms[i]``; ``tail[i]`` the
    fraction with latency >= ``ms[i]`` (1 - CDF just below ``ms[i]``): it ends at 1/N at the
    maximum, so the slowest delivery stays visible on a log axis.
    """

    ms: np.ndarray
    cdf: np.ndarray
    tail: np.ndarray
    count: int


def distribution(hist: Hist, max_points: int = MAX_POINTS) -> Distribution:
    """The distribution of a histogram, thinned to about ``max_points`` values: evenly in
    cumulative fraction up to the 99th percentile, then (the tail) evenly among the values
    above it; the minimum and the maximum are always kept."""
    values, counts = hist
    if values.size == 0:
        empty = np.zeros(0)
        return Distribution(empty, empty, empty, 0)
    cum = np.cumsum(counts)
    total = int(cum[-1])
    cdf = cum / total
    tail = (total - cum + counts) / total
    ms = values.astype(np.float64) * LAT_UNIT_NS / 1e6
    if values.size > max_points:
        grid = np.searchsorted(cdf, np.linspace(0.0, 0.99, max_points // 2), side="left")
        above = np.flatnonzero(cdf >= 0.99)
        if above.size > max_points // 2:
            above = above[np.linspace(0, above.size - 1, max_points // 2).astype(np.int64)]
        idx = np.unique(np.concatenate([[0], grid, above, [values.size - 1]]))
        ms, cdf, tail = ms[idx], cdf[idx], tail[idx]
    return Distribution(ms, cdf, tail, total)
