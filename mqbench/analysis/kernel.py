"""Numpy kernels run inside Spark tasks: one chunk of records in, small partial aggregates out.

Every partial is additive (counts, histograms, bitmaps) or combinable in file order (the
per-route running maximum used for reordering), so the driver merges a few megabytes instead
of shuffling millions of rows. See docs/performance.md, "## Analysis".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mqbench.analysis.plan import CellPlan, Chunk
from mqbench.errors import AnalysisError
from mqbench.records.format import (
    LAT_UNIT_NS,
    RECORD_DTYPE,
    RECORD_SIZE,
    SEND_ACK,
    SEND_FAILED,
    SEND_OK,
)

Hist = tuple[np.ndarray, np.ndarray]
"""A histogram: sorted unique int64 values and their int64 counts."""

_BINCOUNT_SPAN = 1 << 22
_SHIFT = np.int64(1 << 32)


def empty_hist() -> Hist:
    """A histogram with no values."""
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def histogram(values: np.ndarray) -> Hist:
    """Exact histogram of int64 ``values`` (bincount when the range is narrow, else unique)."""
    if values.size == 0:
        return empty_hist()
    lo = int(values.min())
    hi = int(values.max())
    if hi - lo < _BINCOUNT_SPAN:
        counts = np.bincount(values - lo).astype(np.int64)
        nz = np.flatnonzero(counts)
        return nz.astype(np.int64) + lo, counts[nz]
    uniq, counts = np.unique(values, return_counts=True)
    return uniq.astype(np.int64), counts.astype(np.int64)


APPROX_BITS = 7
"""Mantissa bits kept in approximate mode: relative error < 2**-7 (0.78 %)."""


def approx_rel_error(bits: int | None) -> float | None:
    """Bound on the relative error of approximate percentiles (None when exact)."""
    return None if bits is None else 2.0**-bits


def approx_encode(values: np.ndarray, bits: int) -> np.ndarray:
    """Monotone bucket index of int64 ``values``: exact below ``2**(bits+1)``, else log-linear.

    ``|v|`` with bit length ``L > bits + 1`` keeps its top ``bits + 1`` bits (shift
    ``s = L - bits - 1``); the index ``s * 2**bits + (|v| >> s)`` is contiguous and small
    (< 64 * 2**bits), so the histogram is a bincount. The sign is kept.
    """
    mag = np.abs(values.astype(np.int64))
    _, exp = np.frexp(mag.astype(np.float64))  # bit length; exact below 2**53
    shift = np.maximum(exp.astype(np.int64) - bits - 1, 0)
    idx = (shift << bits) + (mag >> shift)
    return np.where(values < 0, -idx, idx)


def approx_decode(index: np.ndarray, bits: int) -> np.ndarray:
    """Representative value of each bucket index: its value rounded toward zero."""
    mag = np.abs(index.astype(np.int64))
    shift = np.maximum((mag >> bits) - 1, 0)
    value = (mag - (shift << bits)) << shift
    out: np.ndarray = np.where(index < 0, -value, value)
    return out


def histogram_of(values: np.ndarray, bits: int | None) -> Hist:
    """Exact histogram, or with ``bits`` the histogram of values rounded toward zero to
    ``bits + 1`` significant bits (see :func:`approx_encode`)."""
    if bits is None:
        return histogram(values)
    idx, counts = histogram(approx_encode(values, bits))
    return approx_decode(idx, bits), counts


def per_second_counts(plan: CellPlan, t_recv: np.ndarray) -> np.ndarray:
    """Records per second of receive time: bin ``i`` = ``[win_start + i s, ... + 1 s)``,
    clipped to the window; int64 array of ``ceil(window_s)`` bins."""
    bins = -(-plan.window_ns // 1_000_000_000)
    inside = t_recv[(t_recv >= plan.win_start) & (t_recv < plan.win_end)]
    if bins == 0:
        return np.zeros(0, dtype=np.int64)
    idx = (inside - plan.win_start) // 1_000_000_000
    counts: np.ndarray = np.bincount(idx, minlength=bins).astype(np.int64)
    return counts


def merge_hists(hists: list[Hist]) -> Hist:
    """Sum histograms."""
    hists = [h for h in hists if h[0].size]
    if not hists:
        return empty_hist()
    if len(hists) == 1:
        return hists[0]
    values = np.concatenate([h[0] for h in hists])
    counts = np.concatenate([h[1] for h in hists])
    uniq, inverse = np.unique(values, return_inverse=True)
    total = np.zeros(uniq.size, dtype=np.int64)
    np.add.at(total, inverse, counts)
    return uniq.astype(np.int64), total


def read_chunk(path: str, offset: int, count: int) -> np.ndarray:
    """Read ``count`` records at record ``offset``; never returns fewer (raises instead)."""
    rec = np.fromfile(path, dtype=RECORD_DTYPE, count=count, offset=offset * RECORD_SIZE)
    if rec.size != count:
        raise AnalysisError(
            f"{path}: expected {count} records at record {offset}, read {rec.size} "
            "(file truncated while being analysed)"
        )
    return rec


def route_slots(plan: CellPlan, pub: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """Slot of each (pub, sub) among the publisher's routed subscribers; -1 if not routed."""
    slot = np.full(pub.size, -1, dtype=np.int64)
    pub64 = pub.astype(np.int64)
    sub64 = sub.astype(np.int64)
    for r, (kind, a, b, c, d) in enumerate(plan.routes):
        in_pubs = (pub64 >= a) & (pub64 < b)
        if kind == "pairs":
            hit = in_pubs & (sub64 == pub64 - a + c)
            local = np.zeros(pub.size, dtype=np.int64)
        else:
            hit = in_pubs & (sub64 >= c) & (sub64 < d)
            local = sub64 - c
        hit &= slot < 0
        idx = np.flatnonzero(hit)
        slot[idx] = plan.route_offset[r, pub64[idx]] + local[idx]
    return slot


def reorder_scan(
    route: np.ndarray, seq: np.ndarray, m_prev: np.ndarray | None = None
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Count deliveries whose seq is below an earlier seq of the same route (file order).

    ``m_prev`` (indexed by route id, -1 = none) is the highest seq each route had before
    this chunk. Returns the count and, per route present, its id, first seq and max seq.
    """
    if route.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return 0, z, z, z
    order = np.argsort(route, kind="stable")
    r = route[order]
    s = seq[order].astype(np.int64)
    key = r * _SHIFT + s
    acc = np.maximum.accumulate(key)
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    prior = np.empty_like(key)
    prior[0] = -1
    prior[1:] = acc[:-1] - r[1:] * _SHIFT
    prior[starts] = -1
    if m_prev is not None:
        prior = np.maximum(prior, m_prev[r])
    count = int(np.count_nonzero(s < prior))
    ends = np.r_[starts[1:] - 1, r.size - 1]
    return count, r[starts], s[starts], acc[ends] - r[ends] * _SHIFT


@dataclass
class DeliveryPartial:
    """Partial aggregates of one chunk of delivery records."""

    records: int = 0
    recv_in_window: int = 0
    routed: int = 0
    unrouted: int = 0
    hist_intended: Hist = field(default_factory=empty_hist)
    hist_sent: Hist = field(default_factory=empty_hist)
    bitmap_base: int = 0
    bitmap: bytes = b""
    reordered: int = 0
    routes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    first_seq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    max_seq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    per_second: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_recv_ns: int = 0
    """The latest receive time of any record in the chunk (0: no record)."""


@dataclass
class SendPartial:
    """Partial aggregates of one chunk of send records."""

    records: int = 0
    sent: int = 0
    failed: int = 0
    expected: int = 0
    hist_lag: Hist = field(default_factory=empty_hist)
    hist_ack: Hist = field(default_factory=empty_hist)


def selected_deliveries(
    plan: CellPlan, rec: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """In-window routed deliveries of ``rec``.

    Returns (rows, slot, k, lat_intended_100ns, recv_in_window, routed_count, unrouted_count)
    where ``rows`` indexes ``rec``, ``k = seq * n + pub`` and latency from the intended time
    is floored to 100 ns: ``floor((t_sent - intended) / 100) + lat``.
    """
    t_sent = rec["t_sent"]
    lat = rec["lat"].astype(np.int64)
    t_recv = t_sent + lat * LAT_UNIT_NS
    recv_in = int(np.count_nonzero((t_recv >= plan.win_start) & (t_recv < plan.win_end)))
    pub = rec["pub"]
    seq = rec["seq"]
    intended, in_window = plan.in_window(pub, seq)
    rows = np.flatnonzero(in_window)
    slot = route_slots(plan, pub[rows], rec["sub"][rows])
    routed_mask = slot >= 0
    unrouted = int(rows.size - np.count_nonzero(routed_mask))
    rows = rows[routed_mask]
    slot = slot[routed_mask]
    k = seq[rows].astype(np.int64) * plan.publishers + pub[rows].astype(np.int64)
    lat_int = (t_sent[rows] - intended[rows]) // LAT_UNIT_NS + lat[rows]
    return rows, slot, k, lat_int, recv_in, int(rows.size), unrouted


def scan_deliveries(plan: CellPlan, rec: np.ndarray) -> DeliveryPartial:
    """Aggregate one chunk of delivery records."""
    rows, slot, k, lat_int, recv_in, routed, unrouted = selected_deliveries(plan, rec)
    out = DeliveryPartial(
        records=int(rec.size), recv_in_window=recv_in, routed=routed, unrouted=unrouted
    )
    if rec.size:
        t_recv = rec["t_sent"] + rec["lat"].astype(np.int64) * LAT_UNIT_NS
        out.last_recv_ns = int(t_recv.max())
        if recv_in:
            out.per_second = per_second_counts(plan, t_recv)
    if routed == 0:
        return out
    out.hist_intended = histogram_of(lat_int, plan.approx_bits)
    out.hist_sent = histogram_of(rec["lat"][rows].astype(np.int64), plan.approx_bits)
    key = (k - plan.k_lo) * plan.f_max + slot
    base = int(key.min()) & ~7
    bits = np.zeros(int(key.max()) - base + 1, dtype=np.bool_)
    bits[key - base] = True
    out.bitmap_base = base
    out.bitmap = np.packbits(bits, bitorder="little").tobytes()
    route = rec["pub"][rows].astype(np.int64) * plan.f_max + slot
    out.reordered, out.routes, out.first_seq, out.max_seq = reorder_scan(route, rec["seq"][rows])
    return out


def reorder_chunk(plan: CellPlan, rec: np.ndarray, m_prev: np.ndarray) -> int:
    """Reordered deliveries of a chunk given each route's highest seq in earlier chunks."""
    rows, slot, _k, _lat, _recv, _routed, _unrouted = selected_deliveries(plan, rec)
    route = rec["pub"][rows].astype(np.int64) * plan.f_max + slot
    return reorder_scan(route, rec["seq"][rows], m_prev)[0]


def scan_sends(plan: CellPlan, rec: np.ndarray) -> SendPartial:
    """Aggregate one chunk of send records."""
    out = SendPartial(records=int(rec.size))
    pub = rec["pub"]
    seq = rec["seq"]
    flags = rec["sub"]
    intended, in_window = plan.in_window(pub, seq)
    ok = in_window & ((flags & SEND_OK) != 0)
    out.sent = int(np.count_nonzero(ok))
    out.failed = int(np.count_nonzero(in_window & ((flags & SEND_FAILED) != 0)))
    out.expected = int(plan.fanout[pub[ok].astype(np.int64)].sum()) if out.sent else 0
    out.hist_lag = histogram_of((rec["t_sent"][ok] - intended[ok]) // LAT_UNIT_NS, plan.approx_bits)
    ack = in_window & ((flags & SEND_ACK) != 0)
    out.hist_ack = histogram_of(rec["lat"][ack].astype(np.int64), plan.approx_bits)
    return out


def scan_chunk(plan: CellPlan, chunk: Chunk) -> DeliveryPartial | SendPartial:
    """Read and aggregate one chunk."""
    rec = read_chunk(chunk.path, chunk.offset, chunk.count)
    if chunk.kind == "deliveries":
        return scan_deliveries(plan, rec)
    return scan_sends(plan, rec)
