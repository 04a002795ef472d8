"""``mqbench brokers up/status/logs/down`` with real brokers, across CLI processes: a
mosquitto by hand, and every native target's ``up``/``down`` leaving no process (checked
by PID, daemons that left the broker's tree included)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mqbench.brokers.registry import definitions
from mqbench.brokers.runtime.manage import start_broker, stop_broker
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.brokers.runtime.net import tcp_reachable

pytestmark = pytest.mark.integration

CLI = "from mqbench.cli.brokers_cmd import brokers_app; brokers_app()"


def brokers(state: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MQBENCH_STATE_DIR": str(state)}
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.skipif(
    shutil.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").exists(),
    reason="mosquitto is not installed (apt-get install mosquitto)",
)
def test_mosquitto_started_by_hand_outlives_the_cli_and_stops_by_pid(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = brokers(state, "up", "mosquitto")
    assert up.returncode == 0, up.stderr + up.stdout
    recorded = json.loads((state / "mosquitto-native.json").read_text())
    pid, port = recorded["pid"], recorded["port"]
    try:
        assert psutil.pid_exists(pid)  # the `up` process has exited; the broker runs on
        assert tcp_reachable("127.0.0.1", port, 5.0)
        status = brokers(state, "status")
        assert "running" in status.stdout and f"127.0.0.1:{port}" in status.stdout
        logs = brokers(state, "logs", "mosquitto")
        assert logs.returncode == 0 and "mosquitto" in logs.stdout.lower()
        down = brokers(state, "down", "mosquitto")
        assert down.returncode == 0 and "mosquitto (native): stopped" in down.stdout
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert not (state / "mosquitto-native.json").exists()
    finally:
        if psutil.pid_exists(pid):
            psutil.Process(pid).kill()


@pytest.mark.skipif(
    shutil.which("mosquitto") is None and not Path("/usr/sbin/mosquitto").exists(),
    reason="mosquitto is not installed (apt-get install mosquitto)",
)
def test_a_native_profile_by_hand_puts_the_broker_in_a_cgroup_that_down_removes(
    tmp_path: Path,
) -> None:
    from mqbench.brokers.resources.cgroups import CgroupError, CgroupManager, remove_cgroup_dirs

    try:
        CgroupManager().check_writable()
    except CgroupError as exc:
        pytest.skip(f"cgroups not writable here: {exc}")
    state = tmp_path / "state"
    up = brokers(state, "up", "mosquitto", "--profile", "1cpu-2g")
    assert up.returncode == 0, up.stderr + up.stdout
    recorded = json.loads((state / "mosquitto-native.json").read_text())
    pid = recorded["pid"]
    paths = [Path(p) for p in recorded["info"]["resources"]["cgroup"]["paths"].values()]
    try:
        assert recorded["profile"] == "1cpu-2g"
        assert all(str(pid) in (p / "cgroup.procs").read_text().split() for p in paths)
        assert "1cpu-2g" in brokers(state, "status").stdout
        down = brokers(state, "down", "mosquitto")
        assert down.returncode == 0
        assert "mosquitto (native): stopped; its cgroup removed" in down.stdout
        assert not any(p.exists() for p in paths)
    finally:
        if psutil.pid_exists(pid):
            psutil.Process(pid).kill()
        remove_cgroup_dirs(paths)


NATIVE_TARGETS = [name for name, d in definitions().items() if d.native is not None]


def _related(pid: int, workdir: str, candidates: set[int]) -> set[int]:
    """The broker ``pid``, its process tree, and every process new since before ``up``
    whose environment names the broker's work directory (a daemon it started that left
    its tree, such as RabbitMQ's ``epmd``)."""
    found = {pid}
    with contextlib.suppress(psutil.Error):
        found |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    for other in candidates - found:
        with contextlib.suppress(psutil.Error):
            if any(workdir in value for value in psutil.Process(other).environ().values()):
                found.add(other)
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("target", NATIVE_TARGETS)
def test_brokers_up_then_down_leaves_no_process_of_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """What ``mqbench brokers up``/``down`` call (the CLI around them is tested above)."""
    availability = NativeRuntime().availability(target)
    if not availability.available:
        pytest.skip(availability.reason)
    monkeypatch.setenv("MQBENCH_STATE_DIR", str(tmp_path / "state"))
    before = set(psutil.pids())
    state = start_broker(target, "native", None, None, 240.0)
    assert state.pid is not None
    pids = _related(state.pid, state.workdir, set(psutil.pids()) - before)
    try:
        (stopped,) = stop_broker(target, "native")
        assert stopped.outcome.startswith(("stopped", "killed"))
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p for p in pids if _alive(p)] == [], (pids, stopped.outcome)
    finally:
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                if _alive(pid):
                    psutil.Process(pid).kill()
