"""A broker still delivering when the drain ends: its loss may be a backlog, not drops."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analysis_fixtures import MS, intended, make_cell, records, sends_ok

from mqbench.analysis import analyze_cell_numpy
from mqbench.analysis.plan import plan_cell
from mqbench.analysis.spark_job import aggregate_cells_serial
from mqbench.analysis.summary import build_summary
from mqbench.records.cell_entry import CellEntry

LAT_UNIT_NS = 100
N = 100  # one publisher at 1000 msg/s: seq 0..99 in the window [0, 100 ms)


def _cell(tmp_path: Path, delivered: range, delay_ns: Any, drain_s: float = 1.0) -> dict:
    rows = [(intended(0, s), delay_ns(s) // LAT_UNIT_NS, 0, 0, s) for s in delivered]
    cell = make_cell(
        tmp_path,
        deliveries=[records(rows)],
        sends=[sends_ok(1, range(N))],
        params={"target": "fake", "pairs": 1, "drain_s": drain_s},
    )
    cell["schedule"]["messages_per_publisher"] = N
    return cell


def _both_engines(tmp_path: Path, cell: dict) -> tuple[Any, Any]:
    folder = tmp_path / "cells" / "c0"
    whole = analyze_cell_numpy(cell, folder)
    plan = plan_cell(CellEntry.from_dict(cell), folder)
    (chunked,) = aggregate_cells_serial([plan], 7)
    return whole, build_summary(plan, chunked)


def test_missing_messages_while_deliveries_reach_the_drain_end_are_flagged_as_backlog(
    tmp_path: Path,
) -> None:
    # Half delivered, each later than the one before: the last 0.93 s after the window,
    # inside the last third of a 1 s drain. The other half never arrived.
    cell = _cell(tmp_path, range(50), lambda s: 1 * MS + s * 20 * MS)
    for summary in _both_engines(tmp_path, cell):
        assert summary.lost == 50
        assert summary.backlog_at_drain_end
        assert summary.last_delivery_s == pytest.approx(0.05 + 0.98 - 0.1, abs=1e-6)


def test_missing_messages_with_a_quiet_drain_are_not_called_a_backlog(tmp_path: Path) -> None:
    cell = _cell(tmp_path, range(50), lambda s: 1 * MS)
    for summary in _both_engines(tmp_path, cell):
        assert summary.lost == 50
        assert not summary.backlog_at_drain_end
        assert summary.last_delivery_s == pytest.approx(0.049 + 0.001 - 0.1, abs=1e-6)


def test_late_deliveries_without_loss_are_not_a_backlog(tmp_path: Path) -> None:
    cell = _cell(tmp_path, range(N), lambda s: 950 * MS)
    for summary in _both_engines(tmp_path, cell):
        assert summary.lost == 0
        assert not summary.backlog_at_drain_end


def test_the_drain_end_event_takes_precedence_over_the_nominal_drain(tmp_path: Path) -> None:
    # Nominal drain 1 s, but the subscribers stopped 3 s after the window (a slow stop):
    # a delivery 0.95 s after the window is then far from the drain's end.
    cell = _cell(tmp_path, range(50), lambda s: 1 * MS + s * 20 * MS)
    events = tmp_path / "cells" / "c0" / "events.jsonl"
    stopped = 100 * MS + 3000 * MS
    events.write_text(json.dumps({"t_ns": stopped, "kind": "drain_finished"}) + "\n")
    for summary in _both_engines(tmp_path, cell):
        assert summary.lost == 50 and not summary.backlog_at_drain_end
