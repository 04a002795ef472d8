"""Per-second series of a cell and its HdrHistogram interval log, from the delivery records.

Written by the analysis next to ``summary.json`` (docs/results.md):

- ``series.csv``: one row per second of the measured window, by receive time (the bins of
  ``deliveries_per_s``): ``second``, ``t_start_ns``, ``seconds`` (the bin's length; the last
  may be shorter), ``deliveries``, ``throughput_msg_s``, and the nearest-rank ``p50_ms``,
  ``p99_ms`` and ``max_ms`` of the latency from the intended send time of the deliveries
  received in that second (empty when none arrived).
- ``latency.hlog``: the same seconds as an HdrHistogram interval log (format 1.2, values
  in nanoseconds, 3 significant digits, one interval per second with its start relative
  to ``StartTime``, the window start): readable by HdrHistogram's tools and libraries
  (``HistogramLogProcessor``, the ``hdrhistogram`` Python package).

Latency here is binned by the second a delivery *arrived* (a time series), whereas the
summary's percentiles cover the messages *intended* in the window; the two differ only at
the window's edges.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import numpy as np

from mqbench.analysis.kernel import Hist, histogram, merge_hists, read_chunk
from mqbench.analysis.plan import CellPlan
from mqbench.analysis.summary import nearest_rank
from mqbench.errors import AnalysisError
from mqbench.records.format import LAT_UNIT_NS, RECORD_SIZE
from mqbench.records.intended import intended_ns_array

SERIES_CSV: Final = "series.csv"
HDR_LOG: Final = "latency.hlog"
CHUNK: Final = 1 << 22
HDR_HIGHEST_NS: Final = 3_600 * 10**9
"""The largest latency an interval histogram tracks (an hour); larger ones are clamped."""
HDR_DIGITS: Final = 3
COLUMNS: Final = (
    "second",
    "t_start_ns",
    "seconds",
    "deliveries",
    "throughput_msg_s",
    "p50_ms",
    "p99_ms",
    "max_ms",
)


@dataclass(frozen=True)
class Second:
    """One second of the window: deliveries received in it and their latency."""

    second: int
    t_start_ns: int
    seconds: float
    deliveries: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None

    @property
    def throughput_msg_s(self) -> float:
        """Deliveries per second of the bin."""
        return self.deliveries / self.seconds if self.seconds > 0 else 0.0


def _chunks(plan: CellPlan) -> Iterator[np.ndarray]:
    for path in plan.delivery_files:
        total = os.path.getsize(path) // RECORD_SIZE
        for offset in range(0, total, CHUNK):
            yield read_chunk(path, offset, min(CHUNK, total - offset))


def second_hists(plan: CellPlan) -> list[Hist]:
    """Per second of receive time in the window: the histogram (100 ns units) of latency
    from the intended send time of the deliveries received then."""
    bins = -(-(plan.win_end - plan.win_start) // 1_000_000_000)
    parts: list[list[Hist]] = [[] for _ in range(max(0, bins))]
    for rec in _chunks(plan):
        pub, seq = rec["pub"], rec["seq"]
        t_recv = rec["t_sent"] + rec["lat"].astype(np.int64) * LAT_UNIT_NS
        keep = (pub < plan.publishers) & (t_recv >= plan.win_start) & (t_recv < plan.win_end)
        if not keep.any():
            continue
        intended = intended_ns_array(
            plan.start_ns, plan.rate, plan.publishers, pub[keep], seq[keep]
        )
        t_recv = t_recv[keep]
        latency = (t_recv - intended) // LAT_UNIT_NS
        second = (t_recv - plan.win_start) // 1_000_000_000
        order = np.argsort(second, kind="stable")
        second, latency = second[order], latency[order]
        cuts = np.flatnonzero(np.diff(second)) + 1
        for idx, values in zip(second[np.r_[0, cuts]], np.split(latency, cuts), strict=True):
            parts[int(idx)].append(histogram(values))
    return [merge_hists(p) for p in parts]


def _quantile_ms(hist: Hist, num: int, den: int) -> float | None:
    values, counts = hist
    n = int(counts.sum())
    if n == 0:
        return None
    cum = np.cumsum(counts)
    idx = int(np.searchsorted(cum, nearest_rank(n, num, den), side="left"))
    return float(values[idx]) * LAT_UNIT_NS / 1e6


def seconds_of(plan: CellPlan, hists: list[Hist]) -> list[Second]:
    """The series rows of ``hists`` (from :func:`second_hists`)."""
    out = []
    for i, hist in enumerate(hists):
        start = plan.win_start + i * 1_000_000_000
        length = min(1_000_000_000, plan.win_end - start) / 1e9
        out.append(
            Second(
                i,
                start,
                length,
                int(hist[1].sum()),
                _quantile_ms(hist, 1, 2),
                _quantile_ms(hist, 99, 100),
                _quantile_ms(hist, 1, 1),
            )
        )
    return out


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def series_csv(rows: list[Second]) -> str:
    """``series.csv`` text."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow(
            [
                r.second,
                r.t_start_ns,
                f"{r.seconds:g}",
                r.deliveries,
                f"{r.throughput_msg_s:.1f}",
                _number(r.p50_ms),
                _number(r.p99_ms),
                _number(r.max_ms),
            ]
        )
    return buf.getvalue()


HDR_SUB_BUCKET_BITS: Final = 11
"""3 significant digits: 2048 sub-buckets, so values of more than 11 bits share buckets."""


def hdr_floor(ns: np.ndarray) -> np.ndarray:
    """Each value rounded down to the lowest value of its HdrHistogram bucket (3 digits), so
    a second of millions of distinct latencies is recorded in a few thousand calls."""
    bits = np.floor(np.log2(np.maximum(ns, 1))).astype(np.int64) + 1
    shift = np.maximum(bits - HDR_SUB_BUCKET_BITS, 0)
    floored: np.ndarray = (ns >> shift) << shift
    return floored


def hdr_log(plan: CellPlan, hists: list[Hist]) -> str:
    """``hists`` as an HdrHistogram interval log (values in ns)."""
    from hdrh.histogram import HdrHistogram
    from hdrh.log import HistogramLogWriter

    with io.StringIO() as out:
        writer = HistogramLogWriter(out)
        writer.output_comment(f"mqbench cell {plan.cell_id}: latency from intended send (ns)")
        writer.output_log_format_version()
        # the package's output_start_time() fails on Python 3 (datetime.iso_format)
        start = datetime.fromtimestamp(plan.win_start / 1e9, tz=UTC)
        out.write(
            f"#[StartTime: {plan.win_start / 1e9:.3f} (seconds since epoch), "
            f"{start.isoformat(' ')}]\n"
        )
        writer.output_legend()
        for i, (values, counts) in enumerate(hists):
            hdr = HdrHistogram(1, HDR_HIGHEST_NS, HDR_DIGITS)
            ns = np.clip(values.astype(np.int64) * LAT_UNIT_NS, 1, HDR_HIGHEST_NS)
            buckets, inverse = np.unique(hdr_floor(ns), return_inverse=True)
            summed = np.bincount(inverse, weights=counts, minlength=buckets.size)
            for value, count in zip(
                buckets.tolist(), summed.astype(np.int64).tolist(), strict=True
            ):
                hdr.record_value(value, count)
            end = min(i + 1.0, (plan.win_end - plan.win_start) / 1e9)
            writer.output_interval_histogram(hdr, float(i), end)
        return out.getvalue()


def write_cell_series(plan: CellPlan) -> list[Second]:
    """Write ``series.csv`` and ``latency.hlog`` into the cell's folder; return the rows."""
    hists = second_hists(plan)
    rows = seconds_of(plan, hists)
    folder = Path(plan.folder)
    _atomic_write(folder / SERIES_CSV, series_csv(rows))
    _atomic_write(folder / HDR_LOG, hdr_log(plan, hists))
    return rows


def _atomic_write(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file that never outlives a failure."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise AnalysisError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_series(folder: Path) -> list[Second]:
    """The rows of a cell's ``series.csv`` ([] when there is none)."""
    path = Path(folder) / SERIES_CSV
    if not path.exists():
        return []

    def num(text: str) -> float | None:
        return float(text) if text else None

    with path.open(encoding="utf-8") as f:
        return [
            Second(
                int(r["second"]),
                int(r["t_start_ns"]),
                float(r["seconds"]),
                int(r["deliveries"]),
                num(r["p50_ms"]),
                num(r["p99_ms"]),
                num(r["max_ms"]),
            )
            for r in csv.DictReader(f)
        ]
