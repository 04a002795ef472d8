"""Per-second series and the HdrHistogram interval log written by the analysis."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import MS, intended, make_cell, records, sends_ok, write_manifest

from mqbench.analysis import analyze_run
from mqbench.analysis.series import HDR_LOG, SERIES_CSV, read_series

SECOND = 1000 * MS


def _run(tmp_path: Path) -> Path:
    """2.5 s of one publisher at 1000 msg/s; latency 1 ms in the first second, 3 ms after,
    and one slow delivery of 50 ms."""
    rows = []
    for s in range(2500):
        lat_us = 1000 if intended(0, s) < SECOND else 3000
        if s == 1500:
            lat_us = 50_000
        rows.append((intended(0, s), lat_us * 10, 0, 0, s))
    cell = make_cell(
        tmp_path,
        window=(0, 2500 * MS),
        deliveries=[records(rows)],
        sends=[sends_ok(1, range(2500))],
    )
    return write_manifest(tmp_path, [cell])


def test_the_analysis_writes_one_series_row_per_second_of_the_window(tmp_path: Path) -> None:
    root = _run(tmp_path)
    (summary,) = analyze_run(root, engine="numpy")
    rows = read_series(root / "cells" / "c0")
    assert [r.second for r in rows] == [0, 1, 2]
    assert [r.seconds for r in rows] == [1.0, 1.0, 0.5]
    assert [r.deliveries for r in rows] == summary.deliveries_per_s
    assert sum(r.deliveries for r in rows) == summary.deliveries_in_window
    assert rows[0].p50_ms == pytest.approx(1.0) and rows[2].p50_ms == pytest.approx(3.0)
    assert rows[1].max_ms == pytest.approx(50.0) and rows[1].p99_ms == pytest.approx(3.0)
    assert rows[2].throughput_msg_s == pytest.approx(rows[2].deliveries / 0.5)
    header = (root / "cells" / "c0" / SERIES_CSV).read_text().splitlines()[0]
    assert header == "second,t_start_ns,seconds,deliveries,throughput_msg_s,p50_ms,p99_ms,max_ms"


def test_the_hdrhistogram_interval_log_reads_back_with_the_hdrhistogram_package(
    tmp_path: Path,
) -> None:
    from hdrh.histogram import HdrHistogram
    from hdrh.log import HistogramLogReader

    root = _run(tmp_path)
    analyze_run(root, engine="numpy")
    rows = read_series(root / "cells" / "c0")
    reader = HistogramLogReader(str(root / "cells" / "c0" / HDR_LOG), HdrHistogram(1, 10**12, 3))
    with contextlib.closing(reader):
        intervals = []
        while (h := reader.get_next_interval_histogram()) is not None:
            intervals.append(h)
        start_s = reader.get_start_time_sec()
    assert [h.get_total_count() for h in intervals] == [r.deliveries for r in rows]
    for h, r in zip(intervals, rows, strict=True):
        assert r.p50_ms is not None
        assert h.get_value_at_percentile(50) / 1e6 == pytest.approx(r.p50_ms, rel=1e-3)
    assert intervals[1].get_max_value() / 1e6 == pytest.approx(50.0, rel=1e-3)
    assert start_s == pytest.approx(0.0)


def test_the_report_draws_each_cell_over_time_with_fault_windows_shaded(tmp_path: Path) -> None:
    from mqbench.records.fault_metrics import FaultMetrics, FaultSpan, write_fault_metrics_json
    from mqbench.report import build_report

    root = _run(tmp_path)
    analyze_run(root, engine="numpy")
    metrics = FaultMetrics(
        windows=(FaultSpan(1200 * MS, 1700 * MS),),
        downtime_fraction=0.25,
        subscriber_outage_fraction=None,
        latency_in_faults=None,
        latency_outside=None,
        recoveries=(),
        reconnects=0,
        outage_ms_p50=None,
        outage_ms_max=None,
        duplicates=0,
    )
    write_fault_metrics_json(root / "cells" / "c0", metrics)
    rep = build_report([root], "md", tmp_path / "figs")
    data = next(f.data for f in rep.figures if f.name == "timeseries-c0")
    throughput, latency = data.panel(0, 0), data.panel(1, 0)
    assert throughput.ylabel == "throughput (msg/s)" and throughput.shaded == ((1.2, 1.7),)
    assert latency.shaded == ((1.2, 1.7),) and [s.stat for s in latency.series] == ["p50", "p99"]
    assert throughput.series[0].ys == [r.throughput_msg_s for r in read_series(root / "cells/c0")]
    fig = next(f.figure for f in rep.figures if f.name == "timeseries-c0")
    assert len(fig.axes[0].patches) == 1  # the shaded fault window
    assert "Shaded: fault windows" in data.note


def test_bucketing_before_recording_leaves_the_hdrhistogram_unchanged() -> None:
    import numpy as np
    from hdrh.histogram import HdrHistogram

    from mqbench.analysis.series import HDR_DIGITS, HDR_HIGHEST_NS, hdr_floor

    values = np.random.default_rng(1).integers(1, HDR_HIGHEST_NS, 5000)
    exact, floored = (HdrHistogram(1, HDR_HIGHEST_NS, HDR_DIGITS) for _ in range(2))
    for v in values.tolist():
        exact.record_value(v)
    for v in hdr_floor(values).tolist():
        floored.record_value(v)
    assert exact.encode() == floored.encode()
    assert np.unique(hdr_floor(values)).size < values.size
