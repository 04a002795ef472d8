"""Signals stop a run once and only hurry it after; result files are never torn."""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import intended, make_cell, records, sends_ok, write_manifest

from mqbench.analysis.compare import compare_runs
from mqbench.brokers.resources.sampler import ResourceSampler
from mqbench.brokers.runtime.liveness import BrokerExit, ContainerExitWatch
from mqbench.cli.app import app
from mqbench.cli.report_cmd import compare, report
from mqbench.errors import ResultsWriteError, ScenarioError
from mqbench.process import interrupts
from mqbench.process.interrupts import StopRequested, StopSignals, exit_code_for
from mqbench.records.events import EventKind, EventLog
from mqbench.records.format import SEND_FAILED
from mqbench.records.results import SpaceReserve, write_json_atomic
from mqbench.scenario.loader import read_scenario_data

runner = CliRunner()

# -- signals ---------------------------------------------------------------------------------


def test_the_first_signal_raises_once_and_later_ones_only_hurry() -> None:
    stop = StopSignals()
    hurried: list[bool] = []
    stop.on_hurry(lambda: hurried.append(True))
    with pytest.raises(StopRequested) as info:
        stop.request(signal.SIGTERM)
    assert isinstance(info.value, KeyboardInterrupt) and info.value.signum == signal.SIGTERM
    stop.request(signal.SIGINT)  # no exception
    stop.request(signal.SIGINT)
    assert stop.hurry and hurried == [True] and stop.signum == signal.SIGTERM and stop.count == 3


def test_a_signal_inside_a_deferred_block_is_raised_when_the_block_ends() -> None:
    stop = StopSignals()
    done = []
    with pytest.raises(StopRequested), stop.deferred():
        stop.request(signal.SIGINT)
        done.append("still running")
    assert done == ["still running"]


def test_exit_codes_follow_the_shell_convention() -> None:
    assert (exit_code_for(signal.SIGINT), exit_code_for(signal.SIGTERM)) == (130, 143)


def test_handlers_are_installed_only_inside_the_block() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert interrupts.active() is stop
        assert signal.getsignal(signal.SIGTERM) == stop._handle
    assert signal.getsignal(signal.SIGTERM) == before and interrupts.active() is None
    with interrupts.deferred():  # a no-op without a run
        pass


# -- events.jsonl, JSON files, the space reserve, resources.csv -----------------------------


def test_an_event_that_cannot_be_written_whole_leaves_no_torn_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.write(EventKind.WARNING, n=1)
    real_write = os.write

    def short_write(fd: int, data: bytes) -> int:
        return real_write(fd, data[:10])

    monkeypatch.setattr(os, "write", short_write)
    log.write(EventKind.ERROR, n=2)
    monkeypatch.setattr(os, "write", real_write)
    log.write(EventKind.ERROR, n=3)  # dropped: the log stopped at the first failure
    log.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["warning"]
    assert log.error is not None and log.error.errno == errno.ENOSPC


def test_an_atomic_json_write_that_fails_names_the_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "manifest.json"
    write_json_atomic(path, {"v": 1})

    def full(src: Any, dst: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ResultsWriteError) as info:
        write_json_atomic(path, {"v": 2})
    assert str(info.value) == f"cannot write {path}: No space left on device"
    assert info.value.path == str(path) and info.value.errno == errno.ENOSPC
    assert json.loads(path.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_the_space_reserve_holds_its_bytes_until_released(tmp_path: Path) -> None:
    reserve = SpaceReserve(tmp_path, 4096)
    assert (tmp_path / SpaceReserve.NAME).stat().st_size == 4096
    reserve.release()
    reserve.release()
    assert not (tmp_path / SpaceReserve.NAME).exists()


def test_the_sampler_forgets_a_dead_root_and_cuts_a_failed_row(tmp_path: Path) -> None:
    sampler = ResourceSampler(tmp_path / "r.csv", {"broker": [os.getpid()]})
    sampler.start()
    real = None
    try:
        sampler.sample_once()
        sampler.forget(os.getpid())
        assert sampler.sample_once() == []
        assert sampler.roles() == {"broker": []}

        class Full:
            def write(self, text: str) -> int:
                raise OSError(errno.ENOSPC, "No space left on device")

            def flush(self) -> None:
                pass

            def close(self) -> None:
                pass

        real, sampler._file = sampler._file, Full()  # type: ignore[assignment]
        sampler._write_rows("1,broker,1,0.1,10\n")
        assert sampler.last_error is not None and sampler._file is None
    finally:
        sampler.stop()
        if real is not None:
            real.close()  # the test swapped it out: the sampler no longer owns it
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert all(len(line.split(",")) == 5 for line in lines)


# -- broker exits ----------------------------------------------------------------------------


def test_a_broker_exit_describes_its_signal_or_exit_code() -> None:
    killed = BrokerExit(10, -9, 5)
    assert (killed.signal_name, killed.describe()) == ("SIGKILL", "killed by SIGKILL")
    assert BrokerExit(10, 3, 5).describe() == "exited with code 3"
    assert killed.to_dict() == {
        "pid": 10,
        "exit_code": -9,
        "t_ns": 5,
        "signal": "SIGKILL",
        "reason": "killed by SIGKILL",
    }


def test_a_stopped_container_is_reported_with_its_exit_code() -> None:
    states = {
        "a": {"State": {"Running": True}},
        "b": {"State": {"Running": False, "ExitCode": 137}},
    }
    seen: list[BrokerExit] = []
    watch = ContainerExitWatch([("a", 1), ("b", 2)], states.__getitem__, seen.append, 3600)
    found = watch.check_once()
    watch.cancel()
    assert found is not None and (found.pid, found.exit_code) == (2, 137)


# -- scenario files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"name: a\nname: b\ntargets: [nats]\n", "duplicate key 'name' (first given at line 1)"),
        (b"name: x\nworkload:\n  rate: 1\n  rate: 2\n", "duplicate key 'rate'"),
        (b"name: \xff\xfe\n", "not UTF-8 text (byte 0xff at line 1)"),
        (b"\x7fELF\x02\x01\x01\x00\x00", "not a scenario file (binary data: NUL byte"),
    ],
)
def test_bad_scenario_files_get_a_one_line_error_naming_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    with pytest.raises(ScenarioError) as info:
        read_scenario_data(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    result = runner.invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 1 and result.output.count("\n") == 1


def test_report_figures_pointing_at_a_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    write_manifest(tmp_path, [make_cell(tmp_path, deliveries=[], sends=[])])
    target = tmp_path / "figs.png"
    target.write_text("x")
    result = runner.invoke(app, ["report", str(tmp_path), "--figures", str(target)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: --figures {target}: is a file, not a folder"


# -- compare and report on invalid cells ------------------------------------------------------


def _run_with(tmp_path: Path, name: str, failed: int) -> Path:
    """A one-cell run of 100 scheduled messages whose last ``failed`` were never sent."""
    root = tmp_path / name
    root.mkdir()
    ok = 100 - failed
    failures = records([(intended(0, s), 0, 0, SEND_FAILED, s) for s in range(ok, 100)])
    sends = np.concatenate([sends_ok(1, range(ok)), failures])
    deliveries = records([(intended(0, s), 10, 0, 0, s) for s in range(ok)])
    write_manifest(root, [make_cell(root, deliveries=[deliveries], sends=[sends])])
    return root


def _cli() -> typer.Typer:
    cli = typer.Typer()
    cli.command()(report)
    cli.command()(compare)
    return cli


def test_compare_refuses_to_gate_on_invalid_cells_unless_allowed(tmp_path: Path) -> None:
    good, bad = _run_with(tmp_path, "good", 0), _run_with(tmp_path, "bad", 30)
    refused = compare_runs(good, bad)
    assert refused.invalid == [("c0", "current", ("sends_failed",))]
    assert [p.kind for p in refused.problems] == ["invalid_cells"] and refused.exit_code == 4
    result = runner.invoke(_cli(), ["compare", str(good), str(bad)])
    assert result.exit_code == 4
    assert "refused: cell 'c0' is invalid in the current run (sends_failed)" in result.output
    allowed = runner.invoke(_cli(), ["compare", str(good), str(bad), "--allow-invalid"])
    assert allowed.exit_code == 3, allowed.output  # loss went up by 30 points
    assert "current: invalid in some repeat (sends_failed)" in allowed.output


def test_the_report_marks_invalid_cells(tmp_path: Path) -> None:
    bad = _run_with(tmp_path, "bad", 30)
    result = runner.invoke(_cli(), ["report", str(bad)])
    assert result.exit_code == 0, result.output
    assert "c0 §" in result.output and "§ invalid in at least one repeat" in result.output


def test_a_signal_held_back_without_raising_at_the_end_is_raised_by_raise_pending() -> None:
    stop = StopSignals()
    with stop.deferred(raise_at_end=False):
        stop.request(signal.SIGTERM)
    with pytest.raises(StopRequested):
        stop.raise_pending()
    stop.raise_pending()  # only once


def test_after_a_stop_later_signals_stay_swallowed_so_the_exit_code_holds() -> None:
    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(StopRequested), StopSignals() as stop:
            stop.request(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt
    finally:
        signal.signal(signal.SIGINT, before)
