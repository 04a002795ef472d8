"""``mqbench brokers up/status/logs/down`` with a real mosquitto, across CLI processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from mqbench.brokers.runtime.net import tcp_reachable

pytestmark = pytest.mark.integration

CLI = "from mqbench.cli.brokers_cmd import brokers_app; brokers_app()"


def brokers(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MQBENCH_STATE_DIR": str(state)}
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
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
