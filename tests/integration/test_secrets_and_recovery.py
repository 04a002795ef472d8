"""Nothing lost, nothing leaked (issue 27), against real brokers:

- a secured nats run ended normally, by SIGTERM and by SIGKILL leaves its password in no
  file of the result folder, of ``$TMPDIR``, and in nothing it printed; the SIGKILL'd run is
  then analysed as interrupted with its records up to the kill;
- redis's ``password`` option, read from a file, reaches only the private folder;
- a record file deleted after the run is a record issue, never loss.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqbench.analysis.api import analyze_results
from mqbench.analysis.verdict import InvalidKind

pytestmark = pytest.mark.integration

SECRET = "Zq7-reliability-secret-91c"
OPTION_SECRET = "Rp4-requirepass-secret-2ab"
CLI = [sys.executable, "-m", "mqbench.cli"]
WORKLOAD = "workload: {pairs: 2, rate: 50, payload: 64, warmup: 1s, drain: 1s, duration: %s}\n"


def scenario_file(root: Path, target: str, duration: str, extra: str = "") -> Path:
    path = root / f"{target}.yaml"
    path.write_text(
        f"name: secret-{target}\ntargets: [{target}]\n"
        "security:\n  tls: true\n  auth: {username: bench, password_env: MQB_RELIABILITY_PW}\n"
        + WORKLOAD % duration
        + extra
    )
    return path


class Started:
    """A ``mqbench run`` in its own session, with a private ``$TMPDIR``."""

    def __init__(self, root: Path, scenario: Path) -> None:
        self.tmpdir = root / "tmp"
        self.tmpdir.mkdir()
        self.out = root / "results"
        env = {
            **os.environ,
            "MQB_RELIABILITY_PW": SECRET,
            "TMPDIR": str(self.tmpdir),
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("MQBENCH_DEBUG", None)
        self.proc = subprocess.Popen(
            [*CLI, "run", str(scenario), "--out", str(self.out), "--no-analyze"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.console = ""

    @property
    def result_dir(self) -> Path:
        (folder,) = [p for p in self.out.glob("*/*") if p.is_dir()]
        return folder

    def wait_for_records(self, seconds_after: float, timeout_s: float = 120.0) -> None:
        """Until the first send records are on disk, then ``seconds_after`` more."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.finish()
            found = list(self.out.glob("*/*/cells/*/sends-0.bin"))
            if found and found[0].stat().st_size > 0:
                time.sleep(seconds_after)
                return
            time.sleep(0.1)
        raise AssertionError("no records within the time limit")

    def finish(self, timeout_s: float = 180.0) -> str:
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        finally:
            self.kill()
        self.console += out or ""
        return self.console

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Started]]:
    runs: list[Started] = []
    yield runs
    for run in runs:
        run.kill()


def leaks(secret: str, *folders: Path) -> list[str]:
    """Files under ``folders`` whose bytes contain ``secret``."""
    needle = secret.encode()
    return [
        str(p)
        for folder in folders
        for p in folder.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    ]


def private_dirs_gone(tmpdir: Path, within_s: float = 15.0) -> list[Path]:
    """``mqbench-private-*`` folders still in ``tmpdir`` after ``within_s`` (the orphan
    reaper removes them once it has stopped the brokers that read them)."""
    deadline = time.monotonic() + within_s
    while True:
        left = list(tmpdir.glob("mqbench-private-*"))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.parametrize("ending", ["normal", "sigterm", "sigkill"])
def test_a_secured_nats_run_leaves_its_password_nowhere_however_it_ends(
    tmp_path: Path, started: list[Started], ending: str
) -> None:
    duration = "2s" if ending == "normal" else "60s"
    run = Started(tmp_path, scenario_file(tmp_path, "nats", duration))
    started.append(run)
    if ending == "sigterm":
        run.wait_for_records(1.0)
        run.proc.send_signal(signal.SIGTERM)
    elif ending == "sigkill":
        run.wait_for_records(3.5)  # past warm-up and drain: the window holds records
        os.killpg(run.proc.pid, signal.SIGKILL)
    console = run.finish()
    expected = {"normal": 0, "sigterm": 143, "sigkill": -signal.SIGKILL}[ending]
    assert run.proc.returncode == expected, console
    assert private_dirs_gone(run.tmpdir) == []
    assert leaks(SECRET, run.result_dir, run.tmpdir) == []
    assert SECRET not in console
    manifest = json.loads((run.result_dir / "manifest.json").read_text())
    status = {"normal": "completed", "sigterm": "interrupted", "sigkill": "running"}[ending]
    assert manifest["status"] == status
    if ending != "sigkill":
        return
    analysis = analyze_results(run.result_dir, engine="numpy")
    assert analysis.recovered is not None and "is gone" in analysis.recovered
    (summary,) = analysis.summaries
    assert summary.status == "interrupted" and summary.received > 0
    assert InvalidKind.INTERRUPTED in [r.kind for r in summary.invalid_reasons]
    assert summary.record_issues  # the writers never closed their files: said, not hidden
    cell_dir = run.result_dir / "cells" / summary.cell_id
    last = max(json.loads(p.read_text())["t_ns"] for p in cell_dir.glob("*.bin.count"))
    # The window ends at the last checkpoint less the drain (1 s), and the workers'
    # checkpoints are at most about a second apart: nothing more is lost.
    assert summary.window_end_ns >= last - 2_000_000_000
    assert leaks(SECRET, run.result_dir) == []


@pytest.fixture(scope="module")
def redis_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    root = tmp_path_factory.mktemp("redis-option")
    secrets = root / "secrets"
    secrets.mkdir(mode=0o700)
    (secrets / "requirepass").write_text(OPTION_SECRET + "\n")
    extra = f"broker:\n  options: {{password_file: {secrets / 'requirepass'}}}\n"
    run = Started(root, scenario_file(root, "redis", "2s", extra))
    run.finish()
    yield run


def test_the_redis_password_option_from_a_file_reaches_only_the_private_folder(
    redis_run: Started,
) -> None:
    assert redis_run.proc.returncode == 0, redis_run.console
    assert private_dirs_gone(redis_run.tmpdir) == []
    for secret in (SECRET, OPTION_SECRET):
        assert leaks(secret, redis_run.result_dir, redis_run.tmpdir) == []
        assert secret not in redis_run.console
    manifest = json.loads((redis_run.result_dir / "manifest.json").read_text())
    (cell,) = manifest["cells"]
    assert cell["status"] == "completed"
    assert cell["broker"]["settings"]["requirepass"] is True
    assert "redis-requirepass.conf" in cell["broker"]["config"]  # an include, not the line
    assert cell["params"]["broker_options"] == {
        "password_file": str(redis_run.tmpdir.parent / "secrets" / "requirepass")
    }


def test_a_record_file_deleted_after_the_run_is_a_record_issue_not_loss(
    redis_run: Started, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(redis_run.result_dir, copy)
    (cell_dir,) = (copy / "cells").iterdir()
    (cell_dir / "deliveries-0.bin").unlink()
    for summary_file in copy.glob("summary*.parquet"):
        summary_file.unlink()
    (summary,) = analyze_results(copy, engine="numpy").summaries
    assert not summary.valid
    assert InvalidKind.RECORDS_TRUNCATED in [r.kind for r in summary.invalid_reasons]
    assert any(issue.startswith("deliveries-0.bin: missing") for issue in summary.record_issues)
