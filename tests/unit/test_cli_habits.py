"""What users expect of a CLI: --version, figures that say what they are, analysis progress,
and fault metrics written by the analysis (not by the CLI)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import MS, intended, make_cell, records, sends_ok, write_manifest

from mqbench import __version__
from mqbench.analysis.api import analyze_results
from mqbench.analysis.progress import AnalysisProgress, ProgressTracker
from mqbench.cli.app import app
from mqbench.cli.progress import AnalysisReporter, analysis_line, progress_line
from mqbench.scenario.matrix import Cell
from mqbench.workload.coordinator import Progress

runner = CliRunner()


def test_dash_dash_version_prints_the_version_like_the_version_command() -> None:
    flag = runner.invoke(app, ["--version"])
    command = runner.invoke(app, ["version"])
    assert flag.exit_code == command.exit_code == 0
    assert flag.output == command.output == f"mqbench {__version__}\n"


def _progress(phase: str = "publishing", elapsed: float = 12.2, **kw: float) -> Progress:
    values: dict[str, float] = {
        "elapsed_s": elapsed,
        "total_s": 25.0,
        "offered_rate": 200.0,
        "send_rate": 222.0,
        "receive_rate": 219.6,
        "sent": 2400,
        "received": 2398,
        "connected": 40,
        "connections": 40,
        "send_failed": 3,
        "warmup_s": 5.0,
        "expected_rate": 200.0,
    }
    values.update(kw)
    return Progress(phase=phase, **values)  # type: ignore[arg-type]


PAIRS = Cell(0, 0, "nats", "pairs", 20, 10.0, 64, 0, 20.0, 5.0, 3.0)


def test_the_progress_line_names_every_figure() -> None:
    line = progress_line(PAIRS, _progress()).plain
    assert line.startswith("nats-64B-20pairs-10hz-qos0  measuring 7/20 s  ")
    assert "msg/s sent 222 of 200, recv 220  " in line  # no "of ..." when it equals the offer
    assert "so far 2,400 sent, 2,398 recv" in line
    assert "3 sends failed" in line
    assert "connected" not in line  # all connected: nothing to say


def test_the_progress_line_says_warm_up_then_measuring_then_draining() -> None:
    assert " warm-up 3/5 s " in progress_line(PAIRS, _progress(elapsed=3.4)).plain
    assert " measuring 0/20 s " in progress_line(PAIRS, _progress(elapsed=5.2)).plain
    draining = progress_line(PAIRS, _progress("draining", elapsed=25.3)).plain
    assert draining.startswith("nats-64B-20pairs-10hz-qos0  draining  ")
    assert "sent" not in draining.replace("sends failed", "")  # no sends while draining
    assert "msg/s recv 220" in draining and "2,398 of 2,400 delivered" in draining
    connecting = progress_line(PAIRS, _progress("connecting", elapsed=0, connected=12)).plain
    assert "connecting  connected 12/40" in connecting


@pytest.mark.parametrize("width", [60, 80, 100, 120])
def test_the_progress_line_fits_the_terminal_keeping_the_cell_id_and_stage(width: int) -> None:
    cell = Cell(0, 0, "tbmq-standalone", "pairs", 2000, 10.0, 1024, 1, 20.0, 5.0, 3.0)
    p = _progress(offered_rate=20000.0, send_rate=19998.4, receive_rate=20001.0, sent=2_400_000)
    line = progress_line(cell, p, width).plain
    assert len(line) < width
    assert line.startswith(f"{cell.id}  measuring 7/20 s")
    full = progress_line(cell, p).plain
    assert all(part in full for part in line.split("  "))  # parts are left out, never cut


def test_a_fanout_progress_line_says_how_many_deliveries_are_expected() -> None:
    cell = Cell(0, 0, "nats", "fanout", 1, 10.0, 64, 0, 20.0, 5.0, 3.0, fanout_subscribers=50)
    p = Progress("publishing", 6, 25, 10.0, 10.0, 498.0, 60, 2990, 51, 51, 0, 5.0, 500.0)
    assert "msg/s sent 10 of 10, recv 498 of 500" in progress_line(cell, p).plain


def test_the_analysis_line_says_which_cell_of_how_many_and_for_how_long() -> None:
    p = AnalysisProgress("summarising", cells=6, cell=2, cell_id="nats-x", elapsed_s=14.4)
    assert analysis_line(p).plain == "analysing 6 cell(s): summarising cell 2 of 6 (nats-x), 14 s"
    scan = AnalysisProgress("scanning", cells=6, elapsed_s=9, tasks_done=3, tasks=8)
    assert analysis_line(scan).plain == "analysing 6 cell(s): scanning, Spark tasks 3/8, 9 s"


def test_the_tracker_reports_every_step_with_the_elapsed_time_of_its_clock() -> None:
    seen: list[AnalysisProgress] = []
    now = [100.0]
    tracker = ProgressTracker(seen.append, cells=2, clock=lambda: now[0], heartbeat_s=0)
    now[0] = 103.0
    tracker.step("planning", 1, "a")
    now[0] = 107.5
    tracker.step("summarising", 2, "b")
    tracker.close()
    assert [(p.phase, p.cell, p.cell_id, p.elapsed_s) for p in seen] == [
        ("planning", 1, "a", 3.0),
        ("summarising", 2, "b", 7.5),
    ]


def test_without_a_terminal_the_reporter_prints_each_phase_once(tmp_path: Path) -> None:
    console = Console(file=(tmp_path / "out.txt").open("w"), force_terminal=False, width=200)
    with AnalysisReporter(console) as reporter:
        for phase, k in (("planning", 1), ("planning", 2), ("scanning", 0)):
            reporter.update(AnalysisProgress(phase, cells=2, cell=k, cell_id=f"c{k}"))  # type: ignore[arg-type]
    console.file.close()
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert [line.split(": ", 1)[1].split(" ")[0] for line in lines] == ["planning", "scanning"]


def test_the_analysis_writes_fault_metrics_and_reports_every_step(tmp_path: Path) -> None:
    rows = [(intended(0, s), 10, 0, 0, s) for s in range(100)]
    cell = make_cell(
        tmp_path,
        deliveries=[records(rows)],
        sends=[sends_ok(1, range(100))],
        events=[
            {"t_ns": 20 * MS, "kind": "fault_injected", "subscribers": [0]},
            {"t_ns": 30 * MS, "kind": "fault_recovered"},
        ],
    )
    write_manifest(tmp_path, [cell])
    seen: list[AnalysisProgress] = []
    analysis = analyze_results(tmp_path, engine="numpy", on_progress=seen.append)
    assert analysis.faults["c0"].faults == 1
    written = json.loads((tmp_path / "cells" / "c0" / "faults.json").read_text())
    assert written == analysis.faults["c0"].to_dict() and written["version"] == 1
    phases = list(dict.fromkeys(p.phase for p in seen))  # heartbeats may repeat a step
    assert phases == ["planning", "scanning", "summarising", "fault metrics"]
    assert all(p.cells == 1 and p.cell == 1 and p.cell_id == "c0" for p in seen)


def test_connections_show_while_some_are_down_but_not_while_stopping() -> None:
    down = progress_line(PAIRS, _progress(connected=38)).plain
    assert "connected 38/40" in down
    assert "connected" not in progress_line(PAIRS, _progress("stopping", connected=0)).plain
