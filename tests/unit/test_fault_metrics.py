import itertools
import json
from pathlib import Path

import numpy as np

from mqbench.analysis.faults import fault_metrics, fault_windows
from mqbench.faults.schedule import downtime_fraction, exponential_schedule, fixed_schedule
from mqbench.records.events import Event, EventKind
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
    cell = {
        "schedule": {"start_ns": START, "rate": rate, "publishers": 1},
        "window": {"start_ns": START, "end_ns": START + 10 * S},
    }
    metrics = fault_metrics(cell, tmp_path)
    assert metrics is not None
    assert metrics["faults"] == 1
    assert metrics["downtime_fraction"] == 0.2
    assert metrics["latency_outside"]["count"] == 80
    assert metrics["latency_outside"]["p50_us"] == 1000.0
    assert metrics["latency_in_faults"]["count"] == 21  # 20 messages + the redelivery
    assert metrics["latency_in_faults"]["max_us"] > 2_000_000
    (recovery,) = metrics["recoveries"]
    assert 200 <= recovery["first_delivery_ms"] < 201
    assert 200 <= recovery["drain_ms"] < 201
    assert metrics["duplicates"] == 1
    assert metrics["reconnects"] == 1 and metrics["outage_ms_max"] == 2150
    assert metrics["subscriber_outage_fraction"] == 0.215  # 2.15 s of one subscriber in 10 s


def test_cells_without_faults_have_no_fault_metrics(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text('{"t_ns": 1, "kind": "publishing_started"}\n')
    assert fault_metrics({"schedule": {}, "window": {}}, tmp_path) is None
