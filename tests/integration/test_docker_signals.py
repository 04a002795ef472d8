"""No container, network or volume outlives a `mqbench run` in Docker, however it is
stopped: SIGTERM, a double Ctrl-C, or SIGKILL of its whole process group (then the orphan
reaper, in its own session, takes the compose project down). Checked by the labels Compose
puts on the project's containers, networks and volumes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from docker_runs import finish, leftovers, start_run, wait_for_project, wait_gone, write_scenario
from docker_support import ensure_images, require_engine

pytestmark = [pytest.mark.integration, pytest.mark.docker]

LONG_RUN = (
    "targets: [mosquitto]\n"
    "workload: {pairs: 4, rate: 20, payload: 64, qos: 0, warmup: 1s, duration: 120s, drain: 1s}\n"
)


@pytest.fixture(scope="module", autouse=True)
def images() -> None:
    require_engine()
    ensure_images("mosquitto")


def started(tmp_path: Path) -> tuple[Path, subprocess.Popen[str], str]:
    out = tmp_path / "results"
    proc = start_run(write_scenario(tmp_path, "signals", LONG_RUN), out)
    project = wait_for_project(out, proc)
    assert any(leftovers(project).values())  # the project runs: something to clean up
    return out, proc, project


def test_sigterm_takes_the_compose_project_down(tmp_path: Path) -> None:
    _, proc, project = started(tmp_path)
    proc.send_signal(signal.SIGTERM)
    output = finish(proc, 90)
    assert proc.returncode == 143, output
    assert wait_gone([project], within_s=5) == {}


def test_a_double_ctrl_c_takes_the_compose_project_down(tmp_path: Path) -> None:
    _, proc, project = started(tmp_path)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    output = finish(proc, 90)
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    assert wait_gone([project], within_s=5) == {}


def test_sigkill_of_the_process_group_leaves_the_project_to_the_reaper(tmp_path: Path) -> None:
    _, proc, project = started(tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)
    finish(proc, 30)
    assert wait_gone([project], within_s=60) == {}
