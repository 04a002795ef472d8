"""`mqbench run` with `runtime: docker`, end to end, on every target whose image this
machine can build: everything delivered (MQTT at QoS 1, the others at their QoS 0), broker
CPU and memory from docker stats in resources.csv, the image and limits in the manifest,
and nothing left afterwards; a container that dies mid-run makes the cell invalid."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import pytest
from docker_runs import (
    docker,
    finish,
    image_recipes,
    local_targets,
    manifest,
    run_dir,
    start_run,
    wait_for_project,
    wait_gone,
    write_scenario,
)
from docker_support import ensure_images, require_engine

from mqbench.analysis.api import analyze_run
from mqbench.brokers.registry import compose_entry, get_target

pytestmark = [pytest.mark.integration, pytest.mark.docker]

TARGETS = local_targets()
"""Every target whose images this machine builds (``mqbench brokers build-images``)."""
SHORT = "warmup: 1s, duration: 3s, drain: 2s"


class Runs:
    """Two `mqbench run`s for the module: the MQTT targets at QoS 1, the others at QoS 0
    (one process each; every target its own cell and its own compose project)."""

    def __init__(self, tmp: Path) -> None:
        self.outputs: dict[str, str] = {}
        self.runs: dict[str, Path] = {}
        groups = {
            1: [t for t in TARGETS if get_target(t).transport == "mqtt"],
            0: [t for t in TARGETS if get_target(t).transport != "mqtt"],
        }
        for qos, targets in groups.items():
            if not targets:
                continue
            out = tmp / f"qos{qos}"
            body = (
                f"targets: [{', '.join(targets)}]\nresources: [1cpu-2g]\n"
                f"workload: {{pairs: 5, rate: 20, payload: 64, qos: {qos}, {SHORT}}}\n"
            )
            proc = start_run(write_scenario(tmp, f"docker-qos{qos}", body), out)
            output = finish(proc, 1800)
            assert proc.returncode == 0, output
            for target in targets:
                self.outputs[target] = output
                self.runs[target] = out

    def cell(self, target: str) -> dict[str, Any]:
        cells = manifest(self.runs[target])["cells"]
        (cell,) = [c for c in cells if c["params"]["target"] == target]
        return cell


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    require_engine()
    for target in TARGETS:
        ensure_images(*(image_recipes(target) or []))
    return Runs(tmp_path_factory.mktemp("docker-runs"))


@pytest.mark.parametrize("target", TARGETS)
def test_a_run_in_docker_delivers_everything_and_records_the_container(
    runs: Runs, target: str
) -> None:
    cell = runs.cell(target)
    out = runs.runs[target]
    assert cell["status"] == "completed", runs.outputs[target]
    summaries = analyze_run(run_dir(out), engine="numpy")
    (summary,) = [s for s in summaries if s.cell_id == cell["id"]]
    assert summary.lost == 0 and summary.received == summary.expected > 0
    assert summary.duplicates == 0
    broker = cell["broker"]
    service = compose_entry(target).service
    assert broker["runtime"] == "docker" and broker["profile"]["name"] == "1cpu-2g"
    assert broker["services"][service]["image_id"].startswith("sha256:")
    assert broker["nofile"] > 0
    with (run_dir(out) / "cells" / cell["id"] / "resources.csv").open() as fh:
        roles = {row["role"] for row in csv.DictReader(fh)}
    assert {"broker", f"broker:{service}", "generator", "docker-proxy"} <= roles
    assert wait_gone([broker["project"]], within_s=5) == {}


def test_a_container_that_exits_marks_its_cell_invalid(tmp_path: Path) -> None:
    require_engine()
    ensure_images("nats")
    out = tmp_path / "results"
    body = "targets: [nats]\nworkload: {pairs: 4, rate: 20, payload: 64, qos: 0, warmup: 1s, "
    body += "duration: 10s, drain: 1s}\n"
    proc = start_run(write_scenario(tmp_path, "docker-exit", body), out)
    project = wait_for_project(out, proc)
    time.sleep(1.0)
    killed = docker("kill", f"{project}-nats-1")
    assert killed.returncode == 0, killed.stderr
    output = finish(proc, 120)
    (cell,) = manifest(out)["cells"]
    assert cell["broker_exit"]["exit_code"] == 137, output  # SIGKILL from `docker kill`
    (summary,) = analyze_run(run_dir(out), engine="numpy")
    assert not summary.valid
    assert "broker_exited" in [r.kind.value for r in summary.invalid_reasons]
    assert wait_gone([project], within_s=5) == {}
