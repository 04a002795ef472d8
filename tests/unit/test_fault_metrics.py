import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from mqbench.analysis.faults import fault_metrics, fault_windows
from mqbench.errors import AnalysisError
from mqbench.faults.schedule import downtime_fraction, exponential_schedule, fixed_schedule
from mqbench.records.cell_entry import CellEntry
from mqbench.records.events import Event, EventKind
from mqbench.records.fault_metrics import (
    FAULT_METRICS_VERSION,
    FAULTS_JSON,
    FaultLatency,
    FaultMetrics,
    FaultMetricsError,
    FaultSpan,
    Recovery,
    read_fault_metrics_json,
    write_fault_metrics_json,
)
from mqbench.records.format import RECORD_DTYPE
from mqbench.records.intended import intended_ns

START = 1_800_000_000_000_000_000
S = 1_000_000_000


def test_exponential_schedule_is_reproducible_and_recovers_before_the_horizon() -> None:
    a = exponential_schedule(30.0, 5.0, 180.0, seed=7)
    assert a == exponential_schedule(30.0, 5.0, 180.0, seed=7)
    assert a != exponential_schedule(30.0, 5.0, 180.0, seed=8)
    assert all(0 < w.start_s < w.end_s <= 180.0 for w in a)
    assert all(x.end_s <= y.start_s for x, y in itertools.pairwise(a))


def test_exponential_schedule_approaches_mttr_over_mttf_plus_mttr_downtime() -> None:
    windows = exponential_schedule(30.0, 5.0, 200_000.0, seed=1)
    assert abs(downtime_fraction(windows, 200_000.0) - 5 / 35) < 0.01


def test_fixed_schedule_repeats_every_period() -> None:
    windows = fixed_schedule(10.0, 2.0, 35.0)
    assert [(w.start_s, w.end_s) for w in windows] == [(10, 12), (20, 22), (30, 32)]


def test_fault_windows_pair_injections_with_recoveries() -> None:
    events = [
        Event(EventKind.FAULT_INJECTED, 5),
        Event(EventKind.FAULT_RECOVERED, 9),
        Event(EventKind.FAULT_INJECTED, 20),
        Event(EventKind.DRAIN_FINISHED, 30),
    ]
    assert fault_windows(events) == [(5, 9), (20, 30)]


def test_fault_metrics_split_latency_and_time_recovery(tmp_path: Path) -> None:
    # one publisher at 10 msg/s for 10 s; a fault from 3 s to 5 s; nothing is delivered
    # from 3 s until 5.2 s (the reconnect), then the backlog arrives in a burst; every
    # other message takes 1 ms
    rate, n = 10.0, 100
    rows = []
    for seq in range(n):
        t_int = intended_ns(START, rate, 1, 0, seq)
        blocked = 3 * S <= t_int - START < int(5.2 * S)
        t_recv = START + int(5.2 * S) + seq * 1000 if blocked else t_int + 1_000_000
        rows.append((t_int, (t_recv - t_int) // 100, 0, 0, seq))
    rows.append(rows[40])  # one redelivery
    np.array(rows, dtype=RECORD_DTYPE).tofile(tmp_path / "deliveries-0.bin")
    events = [
        {"t_ns": START + 3 * S, "kind": "fault_injected", "subscribers": [0]},
        {"t_ns": START + 5 * S, "kind": "fault_recovered"},
        {
            "t_ns": START + 5 * S + 150_000_000,
            "kind": "client_reconnected",
            "outage_ms": 2150,
            "role": "sub",
        },
    ]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    cell = CellEntry.from_dict(
        {
            "id": "c0",
            "schedule": {"start_ns": START, "rate": rate, "publishers": 1},
            "window": {"start_ns": START, "end_ns": START + 10 * S},
        }
    )
    metrics = fault_metrics(cell, tmp_path)
    assert metrics is not None
    assert metrics.faults == 1
    assert metrics.windows == (FaultSpan(START + 3 * S, START + 5 * S),)
    assert metrics.downtime_fraction == 0.2
    assert metrics.latency_outside is not None and metrics.latency_in_faults is not None
    assert metrics.latency_outside.count == 80
    assert metrics.latency_outside.p50_us == 1000.0
    assert metrics.latency_in_faults.count == 21  # 20 messages + the redelivery
    assert metrics.latency_in_faults.max_us > 2_000_000
    (recovery,) = metrics.recoveries
    assert recovery.first_delivery_ms is not None and recovery.drain_ms is not None
    assert 200 <= recovery.first_delivery_ms < 201
    assert 200 <= recovery.drain_ms < 201
    assert metrics.duplicates == 1
    assert metrics.reconnects == 1 and metrics.outage_ms_max == 2150
    assert metrics.subscriber_outage_fraction == 0.215  # 2.15 s of one subscriber in 10 s


def test_cells_without_faults_have_no_fault_metrics(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text('{"t_ns": 1, "kind": "publishing_started"}\n')
    assert fault_metrics(CellEntry(id="c0"), tmp_path) is None


def test_a_cell_with_faults_but_no_schedule_is_refused_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text('{"t_ns": 1, "kind": "fault_injected"}\n')
    with pytest.raises(AnalysisError, match=r"^cell c7: fault metrics need .*schedule"):
        fault_metrics(CellEntry(id="c7"), tmp_path)


METRICS = FaultMetrics(
    windows=(FaultSpan(5, 9), FaultSpan(20, 30)),
    downtime_fraction=0.25,
    subscriber_outage_fraction=None,
    latency_in_faults=FaultLatency(3, 1500.0, 2000.0, 2500.0, 3000.0, 1750.0),
    latency_outside=None,
    recoveries=(
        Recovery(5, 9, 4e-6, 0.5, None, 2),
        Recovery(20, 30, 1e-5, None, 1.25, 0),
    ),
    reconnects=2,
    outage_ms_p50=120.0,
    outage_ms_max=130.5,
    duplicates=1,
)


def test_fault_metrics_read_back_as_written(tmp_path: Path) -> None:
    write_fault_metrics_json(tmp_path, METRICS)
    stored = json.loads((tmp_path / FAULTS_JSON).read_text())
    assert stored["version"] == FAULT_METRICS_VERSION
    assert stored["faults"] == 2 and stored["windows"] == [[5, 9], [20, 30]]
    assert stored["recoveries"][0]["first_delivery_ms"] == 0.5
    assert stored["latency_in_faults"]["max_us"] == 3000.0 and stored["latency_outside"] is None
    assert read_fault_metrics_json(tmp_path) == METRICS
    assert read_fault_metrics_json(tmp_path / "elsewhere") is None


def test_a_faults_json_written_before_the_version_key_reads_as_version_one() -> None:
    stored = METRICS.to_dict()
    del stored["version"]
    assert FaultMetrics.from_dict(stored) == METRICS


@pytest.mark.parametrize("version", [0, 2, "1", True])
def test_a_faults_json_of_another_version_is_refused_with_one_line(
    tmp_path: Path, version: object
) -> None:
    (tmp_path / FAULTS_JSON).write_text(json.dumps({**METRICS.to_dict(), "version": version}))
    with pytest.raises(FaultMetricsError) as caught:
        read_fault_metrics_json(tmp_path)
    message = str(caught.value)
    assert message == (
        f"{tmp_path / FAULTS_JSON}: version {version!r}; this mqbench reads version 1"
    )
    assert "\n" not in message


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"faults": 3}, "faults 3 but 2 windows"),
        ({"windows": [[5, 9], [20]]}, "windows[1]"),
        ({"recoveries": [{"injected_ns": 5}]}, "recoveries[0].recovered_ns"),
        ({"latency_outside": {"count": 1, "p50_us": "fast"}}, "latency_outside.p50_us"),
        ({"duplicates": None}, "duplicates None"),
    ],
)
def test_a_malformed_faults_json_names_the_file_and_the_key(
    tmp_path: Path, change: dict[str, object], named: str
) -> None:
    (tmp_path / FAULTS_JSON).write_text(json.dumps({**METRICS.to_dict(), **change}))
    with pytest.raises(FaultMetricsError, match=re.escape(named)) as caught:
        read_fault_metrics_json(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / FAULTS_JSON}: ")


def test_the_fault_table_reads_each_cells_metrics() -> None:
    from mqbench.cli.tables import fault_view

    title, *lines = fault_view({"c0": METRICS}, 160)
    assert "faults" in title.plain
    row = next(line.plain.split() for line in lines if line.plain.startswith("c0"))
    # cell, faults, downtime %, sub away, p50/p99 out, p50/p99 in, first, drain, reconnects, dup
    assert row == ["c0", "2", "25.0", "-", "-", "-", "1.50", "2.50", "0", "1", "2", "1"]
