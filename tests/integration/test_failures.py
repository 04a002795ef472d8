"""Results that survive failure: a dead broker, signals, hard kills, a full disk, load that
cannot fit. Every run is a real ``mqbench run`` process against brokers it starts itself;
orphans are checked by PID (the run's own descendants, recorded before it is stopped).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mqbench.analysis.api import analyze_results, analyze_run
from mqbench.records.format import RECORD_SIZE
from mqbench.workload.capacity import open_files_limit

pytestmark = pytest.mark.integration

SHORT = "drain: 1s, warmup: 1s"


def write_scenario(tmp_path: Path, target: str, duration: str = "4s", extra: str = "") -> Path:
    path = tmp_path / f"{target}.yaml"
    path.write_text(
        f"name: fail-{target}\ntargets: [{target}]\n"
        f"workload: {{pairs: 10, rate: 50, payload: 256B, qos: 0, {SHORT}, "
        f"duration: {duration}}}\n" + extra
    )
    return path


def start_run(
    scenario: Path, out: Path, *args: str, prefix: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """``mqbench run`` in its own session (so its whole process group can be signalled)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop("MQBENCH_DEBUG", None)
    argv = [sys.executable, "-m", "mqbench.cli", "run", str(scenario), "--out", str(out)]
    return subprocess.Popen(
        [*prefix, *argv, "--no-analyze", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


def result_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.glob("*/*") if p.is_dir()]
    return run_dir


def wait_for_sends(out: Path, proc: subprocess.Popen[str], timeout_s: float = 60.0) -> Path:
    """Wait until the first worker's send records reach the disk; return the cell folder."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        for path in out.glob("*/*/cells/*/sends-0.bin"):
            if path.stat().st_size > 0:
                return path.parent
        time.sleep(0.05)
    raise AssertionError("no send records within the timeout")


def sleep_into_window(out: Path, seconds: float) -> None:
    """Sleep until ``seconds`` after warm-up + drain (1 s each) from the schedule's start, so
    an interrupt leaves that much of a measured window (it is clipped to stop − drain)."""
    (cell,) = manifest_of(out)["cells"]
    start_ns = int(cell["schedule"]["start_ns"])
    time.sleep(max(0.0, (start_ns + int((2.0 + seconds) * 1e9) - time.time_ns()) / 1e9))


def descendants(pid: int) -> list[int]:
    with contextlib.suppress(psutil.Error):
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    return []


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def assert_gone(pids: list[int], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    assert not left, f"still running {within_s} s later: {left}"


def finish(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return output


def manifest_of(out: Path) -> dict:
    return json.loads((result_dir(out) / "manifest.json").read_text())


def assert_intact_records(cell_dir: Path) -> None:
    for name in ("sends-0.bin", "deliveries-0.bin"):
        size = (cell_dir / name).stat().st_size
        assert size > 0 and size % RECORD_SIZE == 0, (name, size)


def assert_interrupted_with_schedule(out: Path) -> dict:
    manifest = manifest_of(out)
    assert manifest["status"] == "interrupted"
    (cell,) = manifest["cells"]
    assert cell["status"] == "interrupted"
    assert cell["schedule"]["start_ns"] > 0 and cell["window"]["end_ns"] > 0
    return cell


@pytest.fixture
def no_leftovers() -> Iterator[list[subprocess.Popen[str]]]:
    """Runs registered here are killed (whole group) at teardown if a test left them, and
    their output pipes closed (a test that kills a run never reads it to the end)."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


# -- a broker that dies --------------------------------------------------------------------


@pytest.mark.parametrize("target", ["mosquitto", "nats", "redis"])
def test_a_broker_killed_mid_run_makes_the_cell_invalid_and_counts_never_sent_messages(
    tmp_path: Path, target: str, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = tmp_path / "results"
    proc = start_run(write_scenario(tmp_path, target), out)
    no_leftovers.append(proc)
    cell_dir = wait_for_sends(out, proc)
    time.sleep(1.0)
    (cell,) = manifest_of(out)["cells"]
    broker_pid = int(cell["broker"]["pid"])
    os.kill(broker_pid, signal.SIGKILL)
    output = finish(proc)

    assert proc.returncode == 1, output
    assert "the broker died in 1 of 1 cell(s)" in output and "killed by SIGKILL" in output
    assert "Traceback" not in output
    manifest = manifest_of(out)
    assert manifest["status"] == "failed"  # as the exit code says
    assert manifest["error"].startswith("the broker died in 1 of 1 cell(s)")
    (cell,) = manifest["cells"]
    assert cell["status"] == "completed"
    exit_info = cell["broker_exit"]
    assert (exit_info["pid"], exit_info["exit_code"], exit_info["signal"]) == (
        broker_pid,
        -9,
        "SIGKILL",
    )
    events = [json.loads(line) for line in (cell_dir / "events.jsonl").read_text().splitlines()]
    assert [e["exit_code"] for e in events if e["kind"] == "broker_exited"] == [-9]
    # The sampler wrote no row for the dead broker (none of 0 CPU / 0 RSS after its exit).
    rows = [r.split(",") for r in (cell_dir / "resources.csv").read_text().splitlines()[1:]]
    broker_rows = [r for r in rows if r[1] == "broker"]
    assert broker_rows and all(int(r[0]) < exit_info["t_ns"] for r in broker_rows)
    assert all(int(r[4]) > 0 for r in broker_rows)

    (summary,) = analyze_run(result_dir(out), engine="numpy")
    assert not summary.valid
    kinds = [r.kind.value for r in summary.invalid_reasons]
    assert "broker_exited" in kinds and "sends_failed" in kinds
    assert summary.unsent is not None and summary.unsent > summary.scheduled // 10
    assert summary.unsent == summary.scheduled - summary.sent
    assert summary.loss_unsent_pct is not None and summary.loss_unsent_pct > 10
    assert summary.loss_pct == pytest.approx((summary.loss_sent_pct or 0) + summary.loss_unsent_pct)


# -- signals -------------------------------------------------------------------------------


def test_sigterm_stops_the_run_like_ctrl_c_with_exit_143_and_leaves_nothing_running(
    tmp_path: Path, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = tmp_path / "results"
    proc = start_run(write_scenario(tmp_path, "nats", duration="60s"), out)
    no_leftovers.append(proc)
    cell_dir = wait_for_sends(out, proc)
    children = descendants(proc.pid)
    assert len(children) >= 3  # broker, reaper, worker (+ multiprocessing's tracker)
    proc.send_signal(signal.SIGTERM)
    output = finish(proc, 30)
    assert proc.returncode == 143, output
    assert "interrupted by SIGTERM" in output and "Traceback" not in output
    assert_interrupted_with_schedule(out)
    assert_intact_records(cell_dir)
    assert_gone(children)
    assert not list(result_dir(out).rglob("*.tmp"))


def test_timeout_command_leaves_an_interrupted_manifest_and_records_on_disk(
    tmp_path: Path, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = tmp_path / "results"
    # timeout's SIGTERM must come after the first sends: mqbench's start-up (imports, the
    # broker, 20 clients) alone takes about 7 s on a loaded 2-core machine, so 6 s was flaky
    scenario = write_scenario(tmp_path, "nats", duration="60s")
    proc = start_run(scenario, out, prefix=("timeout", "20"))
    no_leftovers.append(proc)
    cell_dir = wait_for_sends(out, proc)
    children = descendants(proc.pid)
    output = finish(proc, 40)
    assert proc.returncode == 124, output  # timeout's own code after it sent SIGTERM
    assert "interrupted by SIGTERM" in output
    assert_interrupted_with_schedule(out)
    assert_intact_records(cell_dir)
    assert_gone(children)


def test_two_sigints_10_ms_apart_still_leave_an_analysable_result(
    tmp_path: Path, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = tmp_path / "results"
    proc = start_run(write_scenario(tmp_path, "nats", duration="60s"), out)
    no_leftovers.append(proc)
    cell_dir = wait_for_sends(out, proc)
    sleep_into_window(out, 1.5)
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    output = finish(proc, 30)
    assert proc.returncode == 130, output
    assert_interrupted_with_schedule(out)
    assert_intact_records(cell_dir)
    assert_gone(children)
    (summary,) = analyze_run(result_dir(out), engine="numpy")
    assert summary.status == "interrupted" and summary.window_clipped
    assert summary.sent > 0 and summary.received > 0


def test_sigint_while_workers_are_spawning_stops_promptly(
    tmp_path: Path, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = tmp_path / "results"
    path = write_scenario(tmp_path, "nats", extra="generator: {workers: 8}\n")
    proc = start_run(path, out)
    no_leftovers.append(proc)
    deadline = time.monotonic() + 60
    seen: set[int] = set()
    while time.monotonic() < deadline:  # the first worker process appears
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            break
        seen.update(k.pid for k in kids)
        if any("spawn_main" in " ".join(k.cmdline()) for k in kids if alive(k.pid)):
            break
        time.sleep(0.02)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    output = finish(proc, 30)
    assert proc.returncode == 130, output
    assert time.monotonic() - t0 < 10
    assert_gone(sorted(seen | set(descendants(proc.pid))))
    manifest = manifest_of(out)
    assert manifest["status"] == "interrupted"


def test_sigkill_of_the_process_group_leaves_no_broker_or_worker_running(
    tmp_path: Path, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = tmp_path / "results"
    proc = start_run(write_scenario(tmp_path, "mosquitto", duration="60s"), out)
    no_leftovers.append(proc)
    cell_dir = wait_for_sends(out, proc)
    time.sleep(3.5)  # past the 1 s warm-up and 1 s drain: the window has checkpointed records
    children = descendants(proc.pid)
    (cell,) = manifest_of(out)["cells"]
    assert int(cell["broker"]["pid"]) in children
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert_gone(children, within_s=5.0)
    # What was flushed before the kill is intact and counted.
    for name in ("sends-0.bin", "deliveries-0.bin"):
        size = (cell_dir / name).stat().st_size
        count = json.loads((cell_dir / f"{name}.count").read_text())
        assert size % RECORD_SIZE == 0 and size // RECORD_SIZE >= count["records"] > 0
        assert count["closed"] is False
    assert manifest_of(out)["status"] == "running"  # nobody was left to finish it
    analysis = analyze_results(result_dir(out), engine="numpy")
    assert analysis.recovered is not None and "is gone" in analysis.recovered
    (summary,) = analysis.summaries
    assert summary.status == "interrupted" and summary.received > 0
    assert "interrupted" in [r.kind.value for r in summary.invalid_reasons]
    assert manifest_of(out)["status"] == "interrupted"


# -- a full disk ---------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted for the test (root only), unmounted at teardown."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_disk_that_fills_up_mid_run_fails_cleanly_with_the_path_and_intact_records(
    tmp_path: Path, small_tmpfs: Path, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = small_tmpfs / "results"
    proc = start_run(write_scenario(tmp_path, "mosquitto", duration="60s"), out)
    no_leftovers.append(proc)
    cell_dir = wait_for_sends(out, proc)
    children = descendants(proc.pid)
    with contextlib.suppress(OSError), open(small_tmpfs / "filler", "wb") as filler:
        while True:
            filler.write(b"\0" * 65536)
            filler.flush()
    output = finish(proc, 60)
    assert proc.returncode == 1, output
    assert "Traceback" not in output and "internal error" not in output
    last = output.strip().splitlines()[-1]
    assert last.startswith("error: cannot write ") and str(cell_dir) in last
    assert "No space left on device" in last
    manifest = manifest_of(out)
    assert manifest["status"] == "failed" and str(cell_dir) in manifest["error"]
    (cell,) = manifest["cells"]
    assert cell["status"] == "failed" and "schedule" in cell
    for name in ("sends-0.bin", "deliveries-0.bin"):
        assert (cell_dir / name).stat().st_size % RECORD_SIZE == 0
    for line in (cell_dir / "events.jsonl").read_text().splitlines():
        json.loads(line)  # no torn line
    for line in (cell_dir / "resources.csv").read_text().splitlines()[1:]:
        assert len(line.split(",")) == 5
    assert not [p for p in small_tmpfs.rglob("*") if p.name.endswith(".tmp")]
    assert not list(small_tmpfs.rglob(".mqbench-space-reserve"))
    assert_gone(children)


def test_run_refuses_before_load_when_the_results_would_not_fit_on_disk(
    tmp_path: Path, small_tmpfs: Path
) -> None:
    path = write_scenario(tmp_path, "nats", duration="60s")
    out = small_tmpfs / "results"
    argv = [sys.executable, "-m", "mqbench.cli", "run", str(path), "--out", str(out)]
    done = subprocess.run(
        [*argv, "--set", "workload.rate=2000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"error: {path}: results need about ") and "free" in line
    assert str(small_tmpfs) in line
    assert not out.exists() or not any(out.rglob("manifest.json"))


# -- load that cannot fit ------------------------------------------------------------------


@pytest.mark.parametrize("command", [["scenario", "validate"], ["run", "--dry-run"], ["run"]])
def test_more_connections_than_the_broker_can_open_are_refused_naming_the_limit(
    tmp_path: Path, command: list[str]
) -> None:
    limit = open_files_limit()
    pairs = limit // 2 + 100
    path = write_scenario(tmp_path, "nats")
    args = [command[0], *command[1:2], str(path), "--set", f"workload.pairs={pairs}"]
    if command[0] == "run":
        args += ["--out", str(tmp_path / "r")]
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mqbench.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"open-files limit of {limit:,}" in done.stderr
    assert "broker process" in done.stderr or "worker processes" in done.stderr
    assert time.monotonic() - t0 < 30  # refused up front, not after connecting
    assert not (tmp_path / "r").exists()


def test_sigkill_of_mqbench_alone_makes_workers_flush_and_close_their_records(
    tmp_path: Path, no_leftovers: list[subprocess.Popen[str]]
) -> None:
    out = tmp_path / "results"
    proc = start_run(write_scenario(tmp_path, "nats", duration="60s"), out)
    no_leftovers.append(proc)
    cell_dir = wait_for_sends(out, proc)
    children = descendants(proc.pid)
    proc.kill()  # the main process only: workers get their parent-death signal
    proc.wait(10)
    assert_gone(children, within_s=8.0)
    for name in ("sends-0.bin", "deliveries-0.bin"):
        count = json.loads((cell_dir / f"{name}.count").read_text())
        assert count["closed"] is True  # the worker stopped, flushed and closed its files
        assert (cell_dir / name).stat().st_size == count["records"] * RECORD_SIZE > 0
