"""Saturation search: the engine steps an axis and asks an evaluate callable, never analysis."""

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from mqbench.errors import AnalysisError, ScenarioError
from mqbench.records.cell_entry import CellEntry, CellStatus
from mqbench.records.run_manifest import ManifestError, RunManifest
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.scenario.matrix import Cell, expand
from mqbench.workload.run import SilentReporter, run_scenario
from mqbench.workload.search import SearchTracker


@dataclass(frozen=True)
class Latency:
    p99_us: float


@dataclass(frozen=True)
class Figures:
    loss_pct: float | None
    latency: Latency | None
    generator_saturated: bool = False
    generator_reason: str | None = None
    throughput_msg_s: float | None = None


def searched_cells() -> tuple[SearchTracker, list[Cell], list[str]]:
    scenario = validate_scenario(
        {
            "name": "s",
            "targets": ["nats", "zenoh"],
            "workload": {"pairs": 2},
            "search": {
                "axis": "rate",
                "values": [10, 20, 40],
                "stop": {"loss_pct": 1, "p99_ms": 5},
            },
        },
        "s.yaml",
    )
    by_rate = {
        10.0: Figures(0.0, Latency(900.0), throughput_msg_s=20.0),
        20.0: Figures(0.2, Latency(7000.0), throughput_msg_s=40.0),
        40.0: Figures(9.0, Latency(9000.0)),
    }
    asked: list[str] = []

    def evaluate(entry: CellEntry, folder: Path) -> Figures:
        asked.append(entry.id)
        if entry.params["target"] == "zenoh" and entry.params["rate"] == 10.0:
            raise AnalysisError("no records")
        return by_rate[float(entry.params["rate"])]

    assert scenario.search is not None
    return SearchTracker(scenario.search, evaluate), expand(scenario), asked


def entry_of(cell: Cell, status: CellStatus = "completed") -> CellEntry:
    return CellEntry(id=cell.id, index=cell.index, status=status, params=cell.params())


def test_each_combination_stops_at_its_first_step_over_a_limit(tmp_path: Path) -> None:
    tracker, cells, asked = searched_cells()
    skipped = []
    for cell in cells:
        if tracker.should_skip(cell):
            skipped.append(cell.id)
            continue
        tracker.observe(cell, entry_of(cell), tmp_path)
    report = tracker.report()
    (best,) = report.highest_sustainable
    assert best.value == 10.0 and best.cell.startswith("nats")
    assert best.stopped_by == "p99 7.0 ms > 5 ms"
    steps = {s.cell: s for s in report.steps}
    zenoh_first = next(s for c, s in steps.items() if c.startswith("zenoh"))
    assert zenoh_first.crossed == ("analysis failed: no records",)
    assert not zenoh_first.sustainable
    assert len(asked) == 3 and len(skipped) == 3  # 40 Hz of nats, 20 and 40 Hz of zenoh


def test_the_search_report_reads_back_from_the_manifest_as_it_was_written(
    tmp_path: Path,
) -> None:
    tracker, cells, _ = searched_cells()
    for cell in cells:
        if not tracker.should_skip(cell):
            tracker.observe(cell, entry_of(cell), tmp_path)
    report = tracker.report()
    stored = json.loads(json.dumps(RunManifest(search=report).to_dict()))
    assert stored["search"]["stop"] == {"loss_pct": 1.0, "p99_ms": 5.0, "generator_saturated": True}
    assert stored["search"]["steps"][0]["sustainable"] is True
    assert RunManifest.from_dict(stored).search == report


def test_a_search_entry_without_its_axis_is_a_malformed_manifest() -> None:
    stored = RunManifest().to_dict() | {"search": {"values": [1, 2]}}
    with pytest.raises(ManifestError, match="search lacks 'axis'"):
        RunManifest.from_dict(stored)


def test_a_step_that_did_not_complete_is_not_evaluated_and_stops_its_combination(
    tmp_path: Path,
) -> None:
    tracker, cells, asked = searched_cells()
    failed = replace(entry_of(cells[0], "failed"), error="broker died")
    tracker.observe(cells[0], failed, tmp_path)
    assert asked == []
    assert tracker.should_skip(cells[2])
    assert tracker.skip_reason(cells[2]).endswith("cell failed: broker died")


def test_a_search_without_an_evaluation_is_refused_before_anything_starts(tmp_path: Path) -> None:
    data = {
        "name": "s",
        "targets": ["nats"],
        "search": {"axis": "rate", "values": [1, 2]},
    }
    with pytest.raises(ScenarioError, match="needs an evaluation"):
        run_scenario(
            validate_scenario(data, "s.yaml"),
            source=ScenarioSource("s.yaml", data),
            out_root=tmp_path / "out",
            argv=[],
            reporter=SilentReporter(),
        )
    assert not (tmp_path / "out").exists()
