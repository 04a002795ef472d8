"""The run's state machine, its typed manifest, recovery of a killed run, and record
integrity (issue 27 "Recovery" and "Integrity"; issue 24's versioned ``RunManifest``)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from analysis_fixtures import MS, make_cell, records, sends_ok, write_manifest

from mqbench.analysis.api import analyze_results
from mqbench.analysis.verdict import InvalidKind
from mqbench.errors import AnalysisError
from mqbench.records.calibration_entry import CalibrationEntry
from mqbench.records.cell_entry import BrokerExitEntry, CellEntry
from mqbench.records.integrity import write_count
from mqbench.records.manifest import Manifest
from mqbench.records.run_manifest import (
    ManifestError,
    RunManifest,
    RunnerProcess,
    RunStateError,
    next_status,
    open_run_manifest,
    read_run_manifest,
    recover,
    run_failure,
)


def gone(_: RunnerProcess) -> bool:
    return False


def test_a_run_goes_from_running_to_exactly_one_final_state() -> None:
    for final in ("completed", "failed", "interrupted"):
        assert next_status("running", final) == final
        for again in ("running", "completed", "failed", "interrupted"):
            with pytest.raises(RunStateError):
                next_status(final, again)  # type: ignore[arg-type]
    with pytest.raises(RunStateError):
        next_status("running", "running")


def test_a_new_manifest_is_running_and_records_its_own_process(tmp_path: Path) -> None:
    manifest = Manifest(tmp_path, {"name": "s"}, "s.yaml", ["mqbench", "run"])
    manifest.save()
    run = read_run_manifest(tmp_path)
    assert run.status == "running" and run.finished_utc is None
    assert run.runner is not None and run.runner.pid == os.getpid()
    assert run.runner.alive() is True
    assert run.scenario_name == "s" and run.command_line == ("mqbench", "run")


def test_a_manifest_finishes_once_and_reads_back_as_written(tmp_path: Path) -> None:
    manifest = Manifest(
        tmp_path, {"name": "s"}, "s.yaml", ["mqbench"], calibration=CalibrationEntry("missing")
    )
    manifest.add_cell(CellEntry(id="c", status="running"))
    manifest.update_cell("c", lambda c: replace(c, status="completed"))
    manifest.finish("completed")
    with pytest.raises(RunStateError):
        manifest.finish("failed", "again")
    back = read_run_manifest(tmp_path)
    assert back == manifest.run
    assert back.status == "completed" and back.cells[0].status == "completed"
    assert back.calibration == CalibrationEntry("missing")
    assert RunManifest.from_dict(back.to_dict()) == back


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (os.urandom(64) + b"\xff\xfe", "not a manifest (not UTF-8 text)"),
        (b"{not json", "not a manifest (invalid JSON"),
        (b"[1, 2]", "not a manifest object"),
        (b'{"schema_version": 9}', "schema version 9"),
        (b'{"schema_version": 1, "status": "exploded"}', "unknown run status 'exploded'"),
        (b'{"schema_version": 1, "cells": [{"id": "c", "status": "bad"}]}', "cell c: unknown"),
        (b'{"schema_version": 1, "runner": {"pid": -1}}', "runner.pid -1 is not a process id"),
        (b"[" * 100_000, "not a manifest"),
    ],
)
def test_a_corrupt_manifest_is_one_line_naming_its_path(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "manifest.json").write_bytes(content)
    with pytest.raises(ManifestError) as caught:
        read_run_manifest(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'manifest.json'}: ") and "\n" not in message
    assert problem in message
    with pytest.raises(AnalysisError, match=r"manifest\.json: "):
        analyze_results(tmp_path, engine="numpy")


def test_a_cell_that_failed_or_a_broker_that_died_makes_the_run_failed() -> None:
    ok = CellEntry(id="a", status="completed")
    assert run_failure([ok]) is None
    died = replace(ok, id="b", broker_exit=BrokerExitEntry(7, -9, 1, "SIGKILL", "killed"))
    assert run_failure([ok, died]) == (
        "the broker died in 1 of 2 cell(s); b: killed (exit code -9); results are marked invalid"
    )
    failed = CellEntry(id="c", status="failed", error="no broker")
    assert run_failure([ok, died, failed]) == "1 of 3 cell(s) failed; c: no broker"


def running_manifest(**changes: object) -> RunManifest:
    runner = RunnerProcess(pid=4242, start_ticks=1, boot_id="b", hostname="h")
    base = RunManifest(
        runner=runner,
        cells=(
            CellEntry(id="done", status="completed"),
            CellEntry(id="now", status="running"),
        ),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_running_manifest_whose_process_is_gone_is_recovered_as_interrupted() -> None:
    recovered = recover(running_manifest(), alive=gone, now=lambda: "T")
    assert recovered is not None
    assert recovered.status == "interrupted" and recovered.finished_utc == "T"
    assert recovered.error is not None and "mqbench (pid 4242) is gone" in recovered.error
    assert recovered.recovered is not None and recovered.recovered.recovered_utc == "T"
    assert [c.status for c in recovered.cells] == ["completed", "interrupted"]
    assert recovered.cells[1].error == "mqbench was killed during the cell"


@pytest.mark.parametrize(
    ("manifest", "alive"),
    [
        (running_manifest(), True),  # the run goes on
        (running_manifest(), None),  # another host: cannot tell
        (running_manifest(status="completed"), False),
        (running_manifest(runner=None), False),  # an older manifest
    ],
)
def test_a_run_that_may_still_run_or_has_ended_is_not_recovered(
    manifest: RunManifest, alive: bool | None
) -> None:
    assert recover(manifest, alive=lambda _: alive) is None


def test_a_process_is_known_by_its_start_time_and_boot_not_only_its_pid() -> None:
    me = RunnerProcess.current()
    assert me.alive() is True
    assert replace(me, start_ticks=(me.start_ticks or 0) + 1).alive() is False
    assert replace(me, boot_id="another-boot").alive() is False
    assert replace(me, hostname=me.hostname + "-elsewhere").alive() is None


def killed_run(root: Path, *, drain_s: float = 0.0) -> Path:
    """A result folder as a SIGKILL leaves it: manifest running, its process gone, record
    files with unclosed sidecars checkpointed at 60 ms of a planned 100 ms window."""
    n, seqs = 1, range(60)
    entry = make_cell(
        root,
        status="running",
        deliveries=[records([(s * MS, 10, 0, 0, s) for s in seqs])],
        sends=[sends_ok(n, seqs)],
        params={"target": "fake", "pairs": 1, "drain_s": drain_s, "duration_s": 0.1},
    )
    folder = root / "cells" / "c0"
    for name in ("deliveries-0.bin", "sends-0.bin"):
        write_count(folder / name, 60, closed=False, t_ns=60 * MS)
    write_manifest(root, [entry])
    data = json.loads((root / "manifest.json").read_text())
    data.update(status="running", runner={"pid": 1, "start_ticks": -1, "hostname": "x"})
    data["custom"] = "kept"
    (root / "manifest.json").write_text(json.dumps(data))
    return root


def test_analyze_treats_a_killed_run_as_interrupted_and_marks_the_cell_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = killed_run(tmp_path)
    monkeypatch.setattr(RunnerProcess, "alive", gone)
    analysis = analyze_results(run, engine="numpy")
    assert analysis.recovered is not None and "\n" not in analysis.recovered
    assert analysis.recovered.startswith(f"{run}: run interrupted: mqbench (pid 1) is gone")
    (summary,) = analysis.summaries
    assert summary.status == "interrupted" and not summary.valid
    assert InvalidKind.INTERRUPTED in [r.kind for r in summary.invalid_reasons]
    assert summary.window_end_ns == 60 * MS  # up to the last checkpoint before the kill
    assert summary.received == 60 and summary.lost == 0
    saved = json.loads((run / "manifest.json").read_text())
    assert saved["status"] == "interrupted" and saved["cells"][0]["status"] == "interrupted"
    assert saved["recovered"]["by"] == "mqbench analyze" and saved["custom"] == "kept"
    again, note = open_run_manifest(run)
    assert note is None and again.status == "interrupted"


def test_a_killed_run_is_recovered_in_memory_when_its_folder_is_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = killed_run(tmp_path)
    monkeypatch.setattr(RunnerProcess, "alive", gone)

    def read_only(*_: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("mqbench.records.run_manifest.write_json_atomic", read_only)
    manifest, recovery = open_run_manifest(run)
    assert recovery is not None and manifest.status == "interrupted"
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"


def complete_cell(root: Path, workers: int = 1, written: int | None = None) -> Path:
    """One cell whose worker 0 wrote 100 sends and deliveries; other workers wrote none."""
    seqs = range(100)
    stats = [{"worker": w, "records_written": written or 0} for w in range(workers)]
    stats[1:] = [{"worker": w, "records_written": 0} for w in range(1, workers)]
    empty = records([])
    entry = make_cell(
        root,
        deliveries=[records([(s * MS, 10, 0, 0, s) for s in seqs])] + [empty] * (workers - 1),
        sends=[sends_ok(1, seqs)] + [empty] * (workers - 1),
        params={"target": "fake", "pairs": 1, "drain_s": 0.0, "workers": workers},
        generator={"workers": stats},
    )
    folder = root / "cells" / "c0"
    for path in folder.glob("*.bin"):
        write_count(path, path.stat().st_size // 24, closed=True, t_ns=200 * MS)
    return write_manifest(root, [entry])


def test_a_deleted_record_file_is_a_record_issue_not_loss(tmp_path: Path) -> None:
    run = complete_cell(tmp_path)
    (run / "cells" / "c0" / "deliveries-0.bin").unlink()
    (summary,) = analyze_results(run, engine="numpy").summaries
    assert not summary.valid
    assert [r.kind for r in summary.invalid_reasons] == [InvalidKind.RECORDS_TRUNCATED]
    assert summary.record_issues == [
        "deliveries-0.bin: missing, although its count sidecar says 100 records were written"
    ]


def test_a_record_file_missing_with_its_sidecar_is_found_from_the_manifest(
    tmp_path: Path,
) -> None:
    run = complete_cell(tmp_path, workers=2)
    for name in ("deliveries-1.bin", "deliveries-1.bin.count"):
        (run / "cells" / "c0" / name).unlink()
    (summary,) = analyze_results(run, engine="numpy").summaries
    assert not summary.valid
    assert summary.record_issues == [
        "deliveries-1.bin: missing, although the manifest says worker 1 ran"
    ]


def test_a_record_file_shorter_than_its_writer_said_is_a_record_issue(tmp_path: Path) -> None:
    run = complete_cell(tmp_path, written=200)
    folder = run / "cells" / "c0"
    for name in ("deliveries-0.bin", "deliveries-0.bin.count"):
        (folder / name).unlink()
    (folder / "deliveries-0.bin").write_bytes(b"")
    (summary,) = analyze_results(run, engine="numpy").summaries
    assert not summary.valid
    assert summary.record_issues == ["worker 0 wrote 200 records; its files hold 100"]


def test_intact_record_files_leave_a_cell_valid(tmp_path: Path) -> None:
    run = complete_cell(tmp_path, workers=2, written=200)
    (summary,) = analyze_results(run, engine="numpy").summaries
    assert summary.valid and summary.record_issues == []
    assert np.isclose(summary.loss_pct or 0.0, 0.0)


def test_an_interrupted_cell_is_never_shown_as_ok_by_analyze_report_or_compare(
    tmp_path: Path,
) -> None:
    from mqbench.analysis.compare import compare_runs
    from mqbench.cli.tables import mark_reasons
    from mqbench.report.build import build_report

    entry = make_cell(
        tmp_path,
        status="interrupted",
        deliveries=[records([(s * MS, 10, 0, 0, s) for s in range(100)])],
        sends=[sends_ok(1, range(100))],
        params={"target": "fake", "pairs": 1, "drain_s": 0.0, "duration_s": 0.1},
        events=[{"t_ns": 50 * MS, "kind": "interrupted", "signal": "SIGINT"}],
    )
    entry["error"] = "interrupted by SIGINT (Ctrl-C)"
    run = write_manifest(tmp_path, [entry])
    (summary,) = analyze_results(run, engine="numpy").summaries
    assert summary.window_end_ns == 50 * MS and summary.received == 50
    (reason,) = summary.invalid_reasons
    assert reason.kind is InvalidKind.INTERRUPTED
    assert reason.message == (
        "the run was stopped during the cell (interrupted by SIGINT (Ctrl-C)): "
        "0.05 s measured of the planned 0.1 s"
    )
    shown = [text for _, text in mark_reasons(summary)]
    assert shown == [f"invalid (interrupted): {reason.message}"]
    assert "§" in build_report([run], "md").text
    refused = compare_runs(run, run)
    assert [p.kind for p in refused.problems][:1] == ["invalid_cells"]
    assert "invalid in the baseline run (interrupted)" in refused.problems[0].message
