"""The numpy reference analysis on synthetic records with known answers."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import (
    MS,
    intended,
    make_cell,
    records,
    rich_run,
    sends_ok,
    write_manifest,
)

from mqbench.analysis import analyze_cell_numpy, analyze_run
from mqbench.analysis.numpy_ref import aggregate_cell_numpy
from mqbench.analysis.plan import plan_cell
from mqbench.analysis.spark_job import aggregate_cells_serial
from mqbench.analysis.summary import CellSummary, nearest_rank
from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.format import SEND_ACK, SEND_FAILED


def one_route(tmp_path: Path, rows: list[tuple[int, int, int, int, int]], **kw: object):
    cell = make_cell(tmp_path, deliveries=[records(rows)], sends=[sends_ok(1, range(100))], **kw)
    return analyze_cell_numpy(cell, tmp_path / "cells" / "c0")


def test_nearest_rank_is_ceiling_of_q_times_n_computed_with_integers() -> None:
    assert nearest_rank(1000, 999, 1000) == 999
    assert nearest_rank(1001, 999, 1000) == 1000
    assert nearest_rank(100, 50, 100) == 50
    assert nearest_rank(1, 99, 100) == 1


def test_latency_percentiles_are_exact_nearest_rank_values(tmp_path: Path) -> None:
    rows = [(intended(0, s), (s + 1) * 10, 0, 0, s) for s in range(100)]
    s = one_route(tmp_path, rows)
    lat = s.latency
    assert lat is not None
    assert (lat.count, lat.min_us, lat.p50_us, lat.p90_us) == (100, 1.0, 50.0, 90.0)
    assert (lat.p95_us, lat.p99_us, lat.p999_us, lat.max_us) == (95.0, 99.0, 100.0, 100.0)
    assert lat.mean_us == pytest.approx(50.5)
    assert lat.stddev_us == pytest.approx(math.sqrt((100**2 - 1) / 12))
    assert s.latency_from_send == lat  # sent exactly on time


def test_latency_from_intended_adds_send_lag_floored_to_100ns(tmp_path: Path) -> None:
    rows = [(intended(0, s) + 2_550, 10, 0, 0, s) for s in range(100)]
    s = one_route(tmp_path, rows)
    assert s.latency is not None and s.latency_from_send is not None
    assert s.latency.p50_us == pytest.approx(3.5)  # 2.55 us lag + 1 us, floored to 0.1 us
    assert s.latency_from_send.p50_us == pytest.approx(1.0)


def test_loss_counts_messages_missing_at_head_and_tail(tmp_path: Path) -> None:
    rows = [(intended(0, s), 10, 0, 0, s) for s in range(2, 98)]
    s = one_route(tmp_path, rows)
    assert (s.sent, s.expected, s.received, s.lost) == (100, 100, 96, 4)
    assert s.loss_pct == pytest.approx(4.0)


def test_duplicates_are_counted_but_received_only_once(tmp_path: Path) -> None:
    rows = [(intended(0, s), 10, 0, 0, s) for s in range(100)]
    rows += [(intended(0, 5), 20, 0, 0, 5), (intended(0, 5), 30, 0, 0, 5)]
    s = one_route(tmp_path, rows)
    assert (s.received, s.duplicates, s.lost) == (100, 2, 0)
    assert s.latency is not None and s.latency.count == 102


def test_reordering_counts_deliveries_below_an_earlier_seq_of_the_same_route(
    tmp_path: Path,
) -> None:
    order = [0, 1, 2, 5, 3, 4, 6, *range(7, 100)]
    rows = [(intended(0, s), 10, 0, 0, s) for s in order]
    s = one_route(tmp_path, rows)
    assert s.reordered == 2


def test_reordering_is_tracked_per_route(tmp_path: Path) -> None:
    # Route 0 and route 1 interleave; each is in order on its own.
    rows = []
    for seq in range(50):
        rows.append((intended(1, seq, 2), 10, 1, 1, seq))
        rows.append((intended(0, 49 - seq, 2), 10, 0, 0, 49 - seq))
    cell = make_cell(
        tmp_path, publishers=2, deliveries=[records(rows)], sends=[sends_ok(2, range(50))]
    )
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert s.reordered == 49  # all of route 0 after its first delivery, none of route 1


def test_window_selects_messages_by_intended_time_and_throughput_by_receive_time(
    tmp_path: Path,
) -> None:
    rows = [(intended(0, s), 50_000, 0, 0, s) for s in range(100)]  # 5 ms latency
    s = one_route(tmp_path, rows, window=(10 * MS, 20 * MS))
    assert (s.scheduled, s.sent, s.expected, s.received) == (10, 10, 10, 10)
    assert s.latency is not None and s.latency.count == 10
    assert s.window_s == pytest.approx(0.01)
    # received in [10, 20) ms: messages intended at 5..14 ms
    assert s.deliveries_in_window == 10
    assert s.throughput_msg_s == pytest.approx(1000.0)


def test_send_lag_and_ack_latency_come_from_send_records(tmp_path: Path) -> None:
    sends = records(
        [(intended(0, s) + (s + 1) * 1000, 0, 0, 1, s) for s in range(100)]
        + [(intended(0, s) + 5000, 20 + s, 0, SEND_ACK, s) for s in range(100)]
        + [(intended(0, s), 0, 0, SEND_FAILED, s) for s in range(100, 103)]
    )
    cell = make_cell(tmp_path, window=(0, 200 * MS), deliveries=[], sends=[sends])
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert (s.sent, s.send_failed) == (100, 3)
    assert s.send_lag is not None and s.ack_latency is not None
    assert (s.send_lag.p50_us, s.send_lag.p99_us, s.send_lag.max_us) == (50.0, 99.0, 100.0)
    assert (s.ack_latency.p50_us, s.ack_latency.p99_us) == pytest.approx((6.9, 11.8))
    assert s.lost == 100 and s.latency is None


def test_ack_latency_is_absent_without_ack_records(tmp_path: Path) -> None:
    s = one_route(tmp_path, [(intended(0, 0), 10, 0, 0, 0)])
    assert s.ack_latency is None


def test_all_route_expects_every_subscriber_and_flags_unrouted_deliveries(
    tmp_path: Path,
) -> None:
    rows = [
        (intended(p, s, 2), 10, p, sub, s) for s in range(10) for p in range(2) for sub in (0, 1, 2)
    ]
    rows.append((intended(0, 1, 2), 10, 0, 9, 1))
    cell = make_cell(
        tmp_path,
        publishers=2,
        subscribers=3,
        routes=[{"kind": "all", "pubs": [0, 2], "subs": [0, 3]}],
        deliveries=[records(rows[:-8]), records(rows[-8:])],
        sends=[sends_ok(2, range(10))],
    )
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert (s.sent, s.expected, s.received, s.unrouted, s.lost) == (20, 60, 60, 1, 0)


def test_resources_are_averaged_over_samples_inside_the_window(tmp_path: Path) -> None:
    csv = "t_ns,role,pid,cpu_cores,rss_bytes\n" + "".join(
        f"{t * MS},broker,1,{t},{t * 10**6}\n" for t in (5, 15, 25, 35)
    )
    s = one_route(tmp_path, [], window=(10 * MS, 30 * MS), resources=csv)
    assert (s.broker_cpu_cores_mean, s.broker_cpu_cores_max) == (20.0, 25.0)
    assert (s.broker_rss_mb_mean, s.broker_rss_mb_max) == (20.0, 25.0)
    assert s.generator_cpu_cores_mean is None


def test_a_torn_record_file_is_analysed_up_to_its_last_whole_record_and_reported(
    tmp_path: Path,
) -> None:
    cell = make_cell(tmp_path, deliveries=[records([(0, 1, 0, 0, 0)])], sends=[])
    path = tmp_path / "cells" / "c0" / "deliveries-0.bin"
    path.write_bytes(path.read_bytes() + b"\0" * 5)
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert s.delivery_records == 1
    assert s.record_issues == ["deliveries-0.bin: 5 bytes of a torn last record ignored"]
    assert not s.valid
    assert "records_truncated" in [r.kind.value for r in s.invalid_reasons]


def test_interrupted_cell_clips_window_to_stop_time_minus_drain(tmp_path: Path) -> None:
    rows = [(intended(0, s), 10, 0, 0, s) for s in range(60)]
    cell = make_cell(
        tmp_path,
        deliveries=[records(rows)],
        sends=[sends_ok(1, range(60))],
        status="interrupted",
        events=[
            {"t_ns": 10, "kind": "clients_connected"},
            {"t_ns": 70 * MS, "kind": "interrupted"},
        ],
        params={"drain_s": 0.01},
    )
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert s.window_clipped and s.window_end_ns == 60 * MS
    assert (s.sent, s.received, s.lost) == (60, 60, 0)


def test_generator_saturation_from_manifest_marks_cell_invalid(tmp_path: Path) -> None:
    s = one_route(tmp_path, [], generator={"saturated": True, "reason": "send lag p99 > 1 s"})
    assert s.generator_saturated and not s.valid
    assert s.generator_reason == "send lag p99 > 1 s"


def test_chunked_merge_equals_whole_file_reference(tmp_path: Path) -> None:
    manifest = json.loads((rich_run(tmp_path) / "manifest.json").read_text())
    for cell in manifest["cells"]:
        plan = plan_cell(CellEntry.from_dict(cell), tmp_path / "cells" / cell["id"])
        reference = aggregate_cell_numpy(plan)
        for chunk_records in (1, 7, 1000):
            (chunked,) = aggregate_cells_serial([plan], chunk_records)
            for f in dataclasses.fields(reference):
                a, b = getattr(reference, f.name), getattr(chunked, f.name)
                if isinstance(a, tuple):
                    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), f.name
                else:
                    assert a == b, (f.name, chunk_records)


def test_rich_run_has_the_designed_loss_duplicates_and_reordering(tmp_path: Path) -> None:
    summaries = {s.cell_id: s for s in analyze_run(rich_run(tmp_path), engine="numpy")}
    pairs, fanout = summaries["pairs"], summaries["fanout"]
    assert pairs.lost == 1  # (3, 50); (1, 0) is before the window, (2, 199) after it
    assert pairs.duplicates > 0 and pairs.reordered > 0
    assert pairs.ack_latency is not None and not pairs.valid
    # subscriber 2 misses seq 91..94 of both publishers inside the window (seq 5..94)
    assert (fanout.unrouted, fanout.lost, fanout.expected) == (1, 8, 2 * 90 * 3)


def test_analyze_run_writes_summary_json_and_parquet(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    root = rich_run(tmp_path)
    summaries = analyze_run(root, engine="numpy", cells=["fanout"])
    data = json.loads((root / "cells" / "fanout" / "summary.json").read_text())
    assert CellSummary.from_dict(data) == summaries[0]
    table = pq.read_table(root / "summary.parquet").to_pylist()
    assert [r["cell_id"] for r in table] == ["fanout"]
    assert table[0]["latency_p50_us"] == summaries[0].latency.p50_us  # type: ignore[union-attr]
    assert table[0]["param_target"] == "fake"


def test_missing_manifest_raises_analysis_error(tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match=r"no manifest\.json"):
        analyze_run(tmp_path, engine="numpy")


def test_other_manifest_schema_version_raises_analysis_error(tmp_path: Path) -> None:
    write_manifest(tmp_path, [], version=2)
    with pytest.raises(AnalysisError, match="schema version 2"):
        analyze_run(tmp_path, engine="numpy")


def test_missing_cell_folder_raises_analysis_error(tmp_path: Path) -> None:
    cell = make_cell(tmp_path, cell_id="gone")
    (tmp_path / "cells" / "gone").rename(tmp_path / "cells" / "elsewhere")
    write_manifest(tmp_path, [cell])
    with pytest.raises(AnalysisError, match=r"gone.*missing"):
        analyze_run(tmp_path, engine="numpy")


def test_failed_cells_are_skipped_and_cannot_be_requested(tmp_path: Path) -> None:
    ok = make_cell(tmp_path, cell_id="ok", deliveries=[], sends=[sends_ok(1, range(10))])
    bad = make_cell(tmp_path, cell_id="bad", status="failed")
    write_manifest(tmp_path, [ok, bad])
    assert [s.cell_id for s in analyze_run(tmp_path, engine="numpy")] == ["ok"]
    with pytest.raises(AnalysisError, match="status 'failed'"):
        analyze_run(tmp_path, engine="numpy", cells=["bad"])


def clocks(cross_task_routes: int, latency_error_ns: int) -> dict[str, object]:
    task = {
        "task": 0,
        "host": "h",
        "pid": 9,
        "before": {"offset_ns": 1, "error_ns": 2, "rtt_ns": 4, "probes": 16},
        "after": {"offset_ns": 1, "error_ns": 2, "rtt_ns": 4, "probes": 16},
        "barrier_ns": 7,
    }
    return {
        "version": 1,
        "engine": "spark",
        "master": "local-cluster[2,1,1024]",
        "tasks": [task],
        "cross_task_routes": cross_task_routes,
        "latency_error_ns": latency_error_ns,
    }


def test_routes_across_load_tasks_carry_the_clock_bound_into_the_summary(
    tmp_path: Path,
) -> None:
    rows = [(intended(0, s), 10, 0, 0, s) for s in range(100)]
    cell = make_cell(tmp_path, deliveries=[records(rows)], sends=[sends_ok(1, range(100))])
    folder = tmp_path / "cells" / "c0"
    assert analyze_cell_numpy(cell, folder).latency_error_ms is None  # one clock
    across = analyze_cell_numpy({**cell, "clocks": clocks(3, 250_000)}, folder)
    assert across.latency_error_ms == 0.25
    within = analyze_cell_numpy({**cell, "clocks": clocks(0, 0)}, folder)
    assert within.latency_error_ms is None
