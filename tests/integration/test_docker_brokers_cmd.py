"""`mqbench brokers up/status/logs/down --runtime docker` on the real engine: `up` returns
with the container healthy and leaves it running after mqbench exits (the orphan reaper lets
it be), `status` and `logs` find it from the state file, `down` removes its containers,
network and volumes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docker_runs import leftovers, wait_gone
from docker_support import ensure_images, require_engine
from typer.testing import CliRunner

from mqbench.brokers.runtime.manage import find_states
from mqbench.brokers.runtime.probes import mqtt_probe
from mqbench.cli.app import app

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture(scope="module", autouse=True)
def images() -> None:
    require_engine()
    ensure_images("mosquitto")


def test_a_broker_brought_up_by_hand_outlives_mqbench_and_goes_down_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQBENCH_STATE_DIR", str(tmp_path / "state"))
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "mqbench.cli",
            "brokers",
            "up",
            "mosquitto",
            "--runtime",
            "docker",
            "--profile",
            "1cpu-2g",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
        check=False,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    (state,) = find_states("mosquitto", "docker")
    assert state.project and state.profile == "1cpu-2g"
    try:
        assert mqtt_probe("127.0.0.1", state.port, 5.0)  # mqbench has exited; it still runs
        runner = CliRunner()
        status = runner.invoke(app, ["brokers", "status"])
        assert status.exit_code == 0 and "running" in status.output, status.output
        assert state.project in status.output or str(state.port) in status.output
        logs = runner.invoke(app, ["brokers", "logs", "mosquitto", "--runtime", "docker"])
        assert logs.exit_code == 0 and "mosquitto version" in logs.output, logs.output
        down = runner.invoke(app, ["brokers", "down", "mosquitto", "--runtime", "docker"])
        assert down.exit_code == 0, down.output
        assert "containers, networks and volumes removed" in down.output
    finally:
        if any(leftovers(state.project).values()):
            subprocess.run(["docker", "compose", "-p", state.project, "down", "-v"], check=False)
    assert wait_gone([state.project], within_s=5) == {}
    assert find_states("mosquitto", "docker") == []
