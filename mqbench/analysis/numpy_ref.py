"""Single-process reference analysis in plain numpy/pandas.

It loads whole files and computes every quantity directly (sorting for distinct deliveries
and percentiles, a grouped running maximum for reordering) instead of merging chunk
partials, so it cross-checks the Spark engine and serves as the single-process baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mqbench.analysis.aggregate import CellAggregate, series_length
from mqbench.analysis.kernel import Hist, approx_decode, approx_encode, empty_hist, route_slots
from mqbench.analysis.plan import CellPlan, manifest_cell, plan_cell
from mqbench.analysis.summary import CellSummary, build_summary
from mqbench.records.cell_entry import CellEntry
from mqbench.records.format import LAT_UNIT_NS, SEND_ACK, SEND_FAILED, SEND_OK, read_records


def _hist_by_sort(values: np.ndarray, bits: int | None = None) -> Hist:
    if values.size == 0:
        return empty_hist()
    values = values.astype(np.int64)
    if bits is not None:
        values = approx_decode(approx_encode(values, bits), bits)
    ordered = np.sort(values)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, ordered.size])
    return ordered[starts], counts.astype(np.int64)


def aggregate_cell_numpy(plan: CellPlan) -> CellAggregate:
    """Exact aggregates of one cell computed directly from whole record files."""
    agg = CellAggregate()
    bins = series_length(plan)
    per_second = np.zeros(bins, dtype=np.int64)
    lags: list[np.ndarray] = []
    acks: list[np.ndarray] = []
    for path in plan.send_files:
        rec = read_records(path)
        agg.send_records += rec.size
        intended, win = plan.in_window(rec["pub"], rec["seq"])
        ok = win & ((rec["sub"] & SEND_OK) != 0)
        agg.sent += int(ok.sum())
        agg.send_failed += int((win & ((rec["sub"] & SEND_FAILED) != 0)).sum())
        agg.expected += int(plan.fanout[rec["pub"][ok]].sum())
        lags.append((rec["t_sent"][ok] - intended[ok]) // LAT_UNIT_NS)
        acks.append(rec["lat"][win & ((rec["sub"] & SEND_ACK) != 0)].astype(np.int64))
    keys: list[pd.DataFrame] = []
    lat_int: list[np.ndarray] = []
    lat_sent: list[np.ndarray] = []
    for file_no, path in enumerate(plan.delivery_files):
        rec = read_records(path)
        agg.delivery_records += rec.size
        t_recv = rec["t_sent"] + rec["lat"].astype(np.int64) * LAT_UNIT_NS
        in_win = (t_recv >= plan.win_start) & (t_recv < plan.win_end)
        agg.recv_in_window += int(in_win.sum())
        if rec.size:
            agg.last_recv_ns = max(agg.last_recv_ns, int(t_recv.max()))
        if bins:
            idx = (t_recv[in_win] - plan.win_start) // 1_000_000_000
            per_second += np.bincount(idx, minlength=bins)[:bins]
        intended, win = plan.in_window(rec["pub"], rec["seq"])
        sel = rec[win]
        slot = route_slots(plan, sel["pub"], sel["sub"])
        agg.unrouted += int((slot < 0).sum())
        sel = sel[slot >= 0]
        agg.routed += sel.size
        lat_int.append((sel["t_sent"] - intended[win][slot >= 0]) // LAT_UNIT_NS + sel["lat"])
        lat_sent.append(sel["lat"].astype(np.int64))
        keys.append(
            pd.DataFrame(
                {
                    "file": np.full(sel.size, file_no, dtype=np.int32),
                    "pub": sel["pub"].astype(np.int64),
                    "sub": sel["sub"].astype(np.int64),
                    "seq": sel["seq"].astype(np.int64),
                }
            )
        )
    if keys:
        frame = pd.concat(keys, ignore_index=True)
        if len(frame):
            pub = frame["pub"].to_numpy()
            sub = frame["sub"].to_numpy()
            seq = frame["seq"].to_numpy()
            order = np.lexsort((sub, seq, pub))
            p, q, s = pub[order], seq[order], sub[order]
            new = np.r_[True, (p[1:] != p[:-1]) | (q[1:] != q[:-1]) | (s[1:] != s[:-1])]
            agg.distinct = int(new.sum())
            groups = frame.groupby(["file", "pub", "sub"], sort=False)["seq"]
            prior = groups.cummax().groupby([frame["file"], frame["pub"], frame["sub"]]).shift(1)
            agg.reordered = int((frame["seq"] < prior).sum())
    bits = plan.approx_bits
    agg.hist_intended = _hist_by_sort(np.concatenate(lat_int), bits) if lat_int else empty_hist()
    agg.hist_sent = _hist_by_sort(np.concatenate(lat_sent), bits) if lat_sent else empty_hist()
    agg.hist_lag = _hist_by_sort(np.concatenate(lags), bits) if lags else empty_hist()
    agg.hist_ack = _hist_by_sort(np.concatenate(acks), bits) if acks else empty_hist()
    agg.per_second = [int(v) for v in per_second]
    return agg


def analyze_cell_numpy(
    cell: CellEntry | Mapping[str, Any], folder: Path, approx_bits: int | None = None
) -> CellSummary:
    """Summary of one manifest cell computed in this process with numpy (no Spark).

    ``cell`` may be the entry's stored JSON form (as a test or script reads it from
    ``manifest.json``); it is read into a ``CellEntry`` here, at the edge."""
    entry = cell if isinstance(cell, CellEntry) else manifest_cell(cell)
    plan = plan_cell(entry, folder, approx_bits)
    return build_summary(plan, aggregate_cell_numpy(plan))
