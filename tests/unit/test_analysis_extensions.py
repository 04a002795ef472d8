"""Per-second throughput, window from events, approximate percentiles, repeats with CIs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import MS, intended, make_cell, records, rich_run, sends_ok, write_manifest

from mqbench.analysis import analyze_cell_numpy, analyze_run
from mqbench.analysis.kernel import approx_decode, approx_encode
from mqbench.analysis.plan import plan_cell
from mqbench.analysis.repeats import (
    aggregate_repeats,
    base_id,
    mean_ci,
    t_quantile,
)
from mqbench.analysis.spark_job import aggregate_cells_serial
from mqbench.analysis.summary import SUMMARY_SCHEMA_VERSION, CellSummary, read_summary_json
from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import CellEntry

S = 1_000_000_000


def test_per_second_series_counts_deliveries_by_receive_second_within_the_window(
    tmp_path: Path,
) -> None:
    # 1 publisher at 1000/s for 3.5 s; every message arrives 0.2 s after its intended time.
    n = 3500
    rows = [(intended(0, s), 2_000_000, 0, 0, s) for s in range(n)]
    cell = make_cell(tmp_path, deliveries=[records(rows)], sends=[sends_ok(1, range(n))])
    cell["schedule"]["messages_per_publisher"] = n
    cell["window"] = {"start_ns": S // 2, "end_ns": 3 * S}
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    # receive times 0.2 .. 3.7 s; window [0.5, 3.0) s: bins [0.5,1.5) [1.5,2.5) [2.5,3.0)
    assert s.deliveries_per_s == [1000, 1000, 500]
    assert sum(s.deliveries_per_s) == s.deliveries_in_window
    assert (s.throughput_min_msg_s, s.throughput_max_msg_s) == (1000.0, 1000.0)


def test_per_second_series_is_identical_when_merged_from_chunks(tmp_path: Path) -> None:
    manifest = json.loads((rich_run(tmp_path) / "manifest.json").read_text())
    for cell in manifest["cells"]:
        plan = plan_cell(CellEntry.from_dict(cell), tmp_path / "cells" / cell["id"])
        whole = analyze_cell_numpy(cell, tmp_path / "cells" / cell["id"]).deliveries_per_s
        (chunked,) = aggregate_cells_serial([plan], 5)
        assert chunked.per_second == whole and sum(whole) > 0


def test_window_comes_from_events_when_the_manifest_has_none(tmp_path: Path) -> None:
    rows = [(intended(0, s), 10, 0, 0, s) for s in range(100)]
    cell = make_cell(
        tmp_path,
        deliveries=[records(rows)],
        sends=[sends_ok(1, range(100))],
        events=[
            {"t_ns": 1, "kind": "broker_started"},
            {"t_ns": 12 * MS, "kind": "clients_connected", "connected_ns": 15 * MS},
            {"t_ns": 99 * MS, "kind": "publishing_stopped"},
        ],
        params={"warmup_s": 0.01, "duration_s": 0.05},
    )
    del cell["window"]
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    # start = max(connected 15 ms, start 0 + warm-up 10 ms); end = 0 + 10 ms + 50 ms
    assert (s.window_start_ns, s.window_end_ns) == (15 * MS, 60 * MS)
    assert s.window_source == "events" and (s.sent, s.received) == (45, 45)


def test_window_start_event_wins_and_publishing_stopped_ends_without_duration(
    tmp_path: Path,
) -> None:
    cell = make_cell(
        tmp_path,
        deliveries=[],
        sends=[sends_ok(1, range(100))],
        events=[
            {"t_ns": 5 * MS, "kind": "clients_connected"},
            {"t_ns": 20 * MS, "kind": "window_start"},
            {"t_ns": 70 * MS, "kind": "publishing_stopped"},
        ],
        params={},
    )
    cell["window"] = None
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert (s.window_start_ns, s.window_end_ns, s.sent) == (20 * MS, 70 * MS, 50)


def test_manifest_window_stays_authoritative_over_events(tmp_path: Path) -> None:
    cell = make_cell(
        tmp_path,
        deliveries=[],
        sends=[sends_ok(1, range(100))],
        window=(30 * MS, 40 * MS),
        events=[{"t_ns": 5 * MS, "kind": "window_start"}],
    )
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert (s.window_start_ns, s.window_source, s.sent) == (30 * MS, "manifest", 10)


def test_missing_window_without_connection_events_is_explained(tmp_path: Path) -> None:
    cell = make_cell(tmp_path, deliveries=[], sends=[], events=[{"t_ns": 1, "kind": "x"}])
    del cell["window"]
    with pytest.raises(AnalysisError, match=r"no window.*clients_connected"):
        analyze_cell_numpy(cell, tmp_path / "cells" / "c0")


def test_approx_buckets_are_monotone_exact_below_256_and_within_relative_bound() -> None:
    values = np.concatenate([np.arange(-5000, 5000), np.arange(0, 2**34, 999_983)])
    values = np.sort(values).astype(np.int64)
    rounded = approx_decode(approx_encode(values, 7), 7)
    assert np.all(np.diff(rounded) >= 0)
    small = np.abs(values) < 256
    assert np.array_equal(rounded[small], values[small])
    big = ~small
    err = (np.abs(values[big]) - np.abs(rounded[big])) / np.abs(values[big])
    assert err.min() >= 0 and err.max() < 2**-7


def test_approx_percentiles_are_exact_ones_rounded_down_to_8_significant_bits(
    tmp_path: Path,
) -> None:
    rows = [(intended(0, s), 1000 + 37 * s, 0, 0, s) for s in range(100)]
    cell = make_cell(tmp_path, deliveries=[records(rows)], sends=[sends_ok(1, range(100))])
    exact = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    approx = analyze_cell_numpy(cell, tmp_path / "cells" / "c0", approx_bits=7)
    assert exact.latency is not None and approx.latency is not None
    assert approx.approx_rel_error == 2**-7 and exact.approx_rel_error is None
    # p50 exact = 1000 + 37*49 = 2813 (100 ns units) -> 2813 >> 4 << 4 = 2800
    assert exact.latency.p50_us == pytest.approx(281.3)
    assert approx.latency.p50_us == pytest.approx(280.0)
    plan = plan_cell(CellEntry.from_dict(cell), tmp_path / "cells" / "c0", 7)
    (chunked,) = aggregate_cells_serial([plan], 9)
    values, _ = chunked.hist_intended
    assert 2800 in values.tolist() and 2813 not in values.tolist()


def test_student_t_quantiles_match_published_tables() -> None:
    for df, expected in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)):
        assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_mean_ci_is_the_hand_computed_student_t_interval() -> None:
    m = mean_ci([10.0, 12.0, 14.0])
    # mean 12, s = 2, half = t(0.975, 2) * 2 / sqrt(3) = 4.302653 * 1.154701 = 4.968275
    assert (m.n, m.mean, m.std) == (3, 12.0, 2.0)
    assert m.ci95 == pytest.approx(4.968275, abs=1e-6)
    assert (m.low, m.high) == pytest.approx((12.0 - 4.968275, 12.0 + 4.968275))
    single = mean_ci([5.0, None])
    assert (single.n, single.mean, single.ci95) == (1, 5.0, None)


def test_repeats_are_grouped_by_base_id_and_aggregated(tmp_path: Path) -> None:
    cells = []
    for repeat, lat in enumerate((100, 120, 140)):
        rows = [(intended(0, s), lat, 0, 0, s) for s in range(100)]
        cid = "t-64B" + (f"-r{repeat}" if repeat else "")
        cell = make_cell(
            tmp_path,
            cell_id=cid,
            index=repeat,
            deliveries=[records(rows)],
            sends=[sends_ok(1, range(100))],
            params={"target": "t", "index": repeat, "repeat": repeat},
        )
        cell["repeat"] = repeat
        cells.append(cell)
    write_manifest(tmp_path, cells)
    summaries = analyze_run(tmp_path, engine="numpy")
    (agg,) = aggregate_repeats(summaries)
    assert (agg.base_id, agg.n, agg.repeats) == ("t-64B", 3, [0, 1, 2])
    p50 = agg.metrics["latency_p50_us"]
    assert (p50.mean, p50.std) == (12.0, 2.0)
    assert p50.ci95 == pytest.approx(4.968275, abs=1e-6)
    import pyarrow.parquet as pq

    (row,) = pq.read_table(tmp_path / "summary_agg.parquet").to_pylist()
    assert row["base_id"] == "t-64B" and row["latency_p50_us_ci95"] == pytest.approx(4.968275)
    assert row["n_repeats"] == 3 and row["param_target"] == "t"


def test_cells_sharing_a_base_id_with_other_params_are_rejected(tmp_path: Path) -> None:
    a = make_cell(tmp_path, cell_id="x", deliveries=[], sends=[], params={"target": "a"})
    b = make_cell(tmp_path, cell_id="x-r1", deliveries=[], sends=[], params={"target": "b"})
    b["repeat"] = 1
    write_manifest(tmp_path, [a, b])
    with pytest.raises(AnalysisError, match="differ in more than the repeat"):
        analyze_run(tmp_path, engine="numpy")


def test_base_id_strips_only_the_matching_repeat_suffix() -> None:
    assert base_id("nats-64B-r2", 2) == "nats-64B"
    assert base_id("nats-64B-r2", 0) == "nats-64B-r2"
    assert base_id("nats-64B", 3) == "nats-64B"


def test_version_1_summaries_are_read_with_the_later_defaults(tmp_path: Path) -> None:
    root = rich_run(tmp_path)
    (summary,) = analyze_run(root, engine="numpy", cells=["fanout"])
    data = summary.to_dict()
    for key in (
        "window_source",
        "deliveries_per_s",
        "throughput_min_msg_s",
        "unsent",
        "invalid_reasons",
        "record_issues",
        "latency_verdict",
        "latency_reason",
        "latency_error_ms",
        "last_delivery_s",
        "backlog_at_drain_end",
        "unmatched_deliveries",
    ):
        del data[key]
    data["schema_version"] = 1
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = read_summary_json(path)
    assert old.schema_version == SUMMARY_SCHEMA_VERSION == 6
    assert (old.window_source, old.deliveries_per_s) == ("manifest", [])
    assert (old.unsent, old.invalid_reasons, old.record_issues) == (None, [], [])
    assert old.latency_verdict == "n/a" and not old.latency_generator_bound
    assert old.latency_error_ms is None
    assert old.last_delivery_s is None and not old.backlog_at_drain_end
    assert old.unmatched_deliveries == 0
    data["schema_version"] = 99
    with pytest.raises(AnalysisError, match="schema version 99"):
        CellSummary.from_dict(data)


def test_summary_parquet_holds_the_series_as_a_list_column(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    root = rich_run(tmp_path)
    summaries = analyze_run(root, engine="numpy")
    rows = pq.read_table(root / "summary.parquet").to_pylist()
    assert [r["deliveries_per_s"] for r in rows] == [s.deliveries_per_s for s in summaries]
    assert not math.isnan(rows[0]["throughput_msg_s"])
