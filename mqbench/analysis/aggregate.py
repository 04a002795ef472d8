"""Cell aggregates: merged on the driver from chunk partials (Spark) or computed directly."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mqbench.analysis.kernel import DeliveryPartial, Hist, SendPartial, empty_hist, merge_hists
from mqbench.analysis.plan import CellPlan, Chunk


def series_length(plan: CellPlan) -> int:
    """Bins of the per-second series: ``ceil(window_s)``."""
    return -(-plan.window_ns // 1_000_000_000)


@dataclass
class CellAggregate:
    """Exact counts and histograms of one cell, engine independent."""

    delivery_records: int = 0
    send_records: int = 0
    sent: int = 0
    send_failed: int = 0
    expected: int = 0
    routed: int = 0
    distinct: int = 0
    unrouted: int = 0
    reordered: int = 0
    recv_in_window: int = 0
    hist_intended: Hist = field(default_factory=empty_hist)
    hist_sent: Hist = field(default_factory=empty_hist)
    hist_lag: Hist = field(default_factory=empty_hist)
    hist_ack: Hist = field(default_factory=empty_hist)
    per_second: list[int] = field(default_factory=list)
    last_recv_ns: int = 0
    """The latest receive time of any delivery record (0: none)."""


def add_series(total: list[int], part: np.ndarray) -> list[int]:
    """Element-wise sum of two per-second series (the shorter one padded with zeros)."""
    if part.size == 0:
        return total
    out = np.zeros(max(len(total), part.size), dtype=np.int64)
    out[: len(total)] += np.asarray(total, dtype=np.int64)
    out[: part.size] += part
    return [int(v) for v in out]


@dataclass
class ReorderFix:
    """A chunk whose reordering depends on earlier chunks: re-scan it with ``m_prev``."""

    chunk: Chunk
    routes: np.ndarray
    m_prev: np.ndarray
    local_count: int


def merge_partials(
    plan: CellPlan, parts: list[tuple[Chunk, DeliveryPartial | SendPartial]]
) -> tuple[CellAggregate, list[ReorderFix]]:
    """Merge the partials of one cell; also return the chunks needing a reorder re-scan.

    A chunk needs a re-scan only when some route's first seq in it is below the highest seq
    that route had in earlier chunks of the same file; otherwise its local count is exact.
    """
    agg = CellAggregate(per_second=[0] * series_length(plan))
    e_bits = (plan.k_hi - plan.k_lo) * plan.f_max
    bitmap = np.zeros(e_bits // 8 + 2, dtype=np.uint8)
    h_int: list[Hist] = []
    h_sent: list[Hist] = []
    h_lag: list[Hist] = []
    h_ack: list[Hist] = []
    by_file: dict[int, list[tuple[Chunk, DeliveryPartial]]] = {}
    for chunk, part in parts:
        if isinstance(part, SendPartial):
            agg.send_records += part.records
            agg.sent += part.sent
            agg.send_failed += part.failed
            agg.expected += part.expected
            h_lag.append(part.hist_lag)
            h_ack.append(part.hist_ack)
            continue
        agg.delivery_records += part.records
        agg.recv_in_window += part.recv_in_window
        agg.last_recv_ns = max(agg.last_recv_ns, part.last_recv_ns)
        agg.routed += part.routed
        agg.unrouted += part.unrouted
        agg.reordered += part.reordered
        agg.per_second = add_series(agg.per_second, part.per_second)
        h_int.append(part.hist_intended)
        h_sent.append(part.hist_sent)
        if part.bitmap:
            chunk_bits = np.frombuffer(part.bitmap, dtype=np.uint8)
            start = part.bitmap_base // 8
            bitmap[start : start + chunk_bits.size] |= chunk_bits
        by_file.setdefault(chunk.file, []).append((chunk, part))
    agg.distinct = int(np.bitwise_count(bitmap).sum())
    agg.hist_intended = merge_hists(h_int)
    agg.hist_sent = merge_hists(h_sent)
    agg.hist_lag = merge_hists(h_lag)
    agg.hist_ack = merge_hists(h_ack)
    fixes: list[ReorderFix] = []
    for file_parts in by_file.values():
        high = np.full(plan.n_routes, -1, dtype=np.int64)
        for chunk, part in sorted(file_parts, key=lambda cp: cp[0].index):
            if part.routes.size == 0:
                continue
            before = high[part.routes]
            if np.any(before > part.first_seq):
                fixes.append(ReorderFix(chunk, part.routes, before.copy(), part.reordered))
            high[part.routes] = np.maximum(before, part.max_seq)
    return agg, fixes
