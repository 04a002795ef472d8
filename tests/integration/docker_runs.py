"""Helpers of the docker runtime's integration tests: `mqbench run` processes and what a
compose project left behind, found by the labels Compose puts on everything it creates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mqbench.brokers.docker.image_recipes import recipe_for_repository
from mqbench.brokers.docker.images import repository_of
from mqbench.brokers.docker.runtime import compose_images
from mqbench.brokers.registry import target_names

PROJECT_LABEL = "com.docker.compose.project"


def image_recipes(target: str) -> list[str] | None:
    """The local image recipes behind every service of ``target``'s compose file (what
    ``ensure_images`` builds); None when some service has none (EMQX, TBMQ)."""
    recipes: list[str] = []
    for ref in compose_images(target).values():
        recipe = recipe_for_repository(repository_of(ref))
        if recipe is None:
            return None
        recipes.append(recipe.name)
    return sorted(set(recipes))


def local_targets() -> list[str]:
    """Targets whose every image this machine can build (``mqbench brokers build-images``)."""
    return [t for t in target_names() if image_recipes(t) is not None]


def docker(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``docker <args>`` (the CLI the runtime uses), output captured, never raising."""
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def leftovers(project: str) -> dict[str, list[str]]:
    """Containers, networks and volumes still labelled with ``project`` (empty lists: none)."""
    label = f"label={PROJECT_LABEL}={project}"
    found = {
        "containers": docker("ps", "-aq", "--filter", label).stdout.split(),
        "networks": docker("network", "ls", "-q", "--filter", label).stdout.split(),
        "volumes": docker("volume", "ls", "-q", "--filter", label).stdout.split(),
    }
    return found


def wait_gone(projects: list[str], within_s: float = 30.0) -> dict[str, dict[str, list[str]]]:
    """What ``projects`` still have after up to ``within_s`` (empty dict: all gone)."""
    deadline = time.monotonic() + within_s
    while True:
        left = {p: found for p in projects if any((found := leftovers(p)).values())}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def write_scenario(tmp_path: Path, name: str, body: str) -> Path:
    """A scenario file ``<name>.yaml`` running in Docker."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nruntime: docker\n{body}", encoding="utf-8")
    return path


def start_run(scenario: Path, out: Path, *args: str) -> subprocess.Popen[str]:
    """``mqbench run --no-analyze`` in its own session (its group can be signalled)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop("MQBENCH_DEBUG", None)
    argv = [sys.executable, "-m", "mqbench.cli", "run", str(scenario), "--out", str(out)]
    return subprocess.Popen(
        [*argv, "--no-analyze", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen[str], timeout_s: float = 120.0) -> str:
    """The process's output once it ended (killed with its group after ``timeout_s``)."""
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return output


def run_dir(out: Path) -> Path:
    """The one run folder under ``out``."""
    (found,) = [p for p in out.glob("*/*") if p.is_dir()]
    return found


def manifest(out: Path) -> dict[str, Any]:
    """The run's manifest."""
    data: dict[str, Any] = json.loads((run_dir(out) / "manifest.json").read_text())
    return data


def wait_for_project(out: Path, proc: subprocess.Popen[str], timeout_s: float = 180.0) -> str:
    """The compose project of the first cell, once the manifest names it and sends began."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        sends = list(out.glob("*/*/cells/*/sends-0.bin"))
        if sends and sends[0].stat().st_size > 0:
            for cell in manifest(out)["cells"]:
                project = (cell.get("broker") or {}).get("project")
                if project:
                    return str(project)
        time.sleep(0.1)
    raise AssertionError("the run named no compose project within the timeout")
