"""Runtime registry: ``native``, ``external`` and ``docker``."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from mqbench.brokers.base import Availability, RunningBroker, Runtime, StartRequest
from mqbench.brokers.external import ExternalRuntime
from mqbench.brokers.native import NativeRuntime
from mqbench.brokers.targets import get_target
from mqbench.errors import BrokerError, ScenarioError

DOCKER_INFO_TIMEOUT_S = 5.0
"""How long ``docker info`` may take before the engine counts as not running."""


def docker_engine_status(timeout_s: float = DOCKER_INFO_TIMEOUT_S) -> str | None:
    """None when a Docker engine answers ``docker info``; otherwise why not."""
    docker = shutil.which("docker")
    if docker is None:
        return "the docker CLI is not installed"
    try:
        proc = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"`docker info` did not answer within {timeout_s:g} s"
    except OSError as exc:
        return f"`docker info` cannot run: {exc}"
    if proc.returncode != 0:
        return "no Docker engine is running here"
    return None


class DockerRuntime:
    """Placeholder for the compose-based runtime: reports why it cannot run (issue 5)."""

    name = "docker"

    def __init__(self, engine_status: Callable[[], str | None] = docker_engine_status) -> None:
        """``engine_status`` checks the Docker engine (injectable for tests)."""
        self._engine_status = engine_status

    def availability(self, target: str) -> Availability:
        """Never available yet; the reason also says whether an engine is running."""
        get_target(target)
        reason = "docker runtime not implemented yet (issue 5)"
        engine = self._engine_status()
        if engine is not None:
            reason += f"; and {engine}"
        return Availability(False, reason)

    def start(self, request: StartRequest) -> RunningBroker:
        """Always raises ``BrokerError`` with the availability reason."""
        raise BrokerError(self.availability(request.target).reason)


_RUNTIMES: dict[str, Callable[[], Runtime]] = {
    "native": NativeRuntime,
    "external": ExternalRuntime,
    "docker": DockerRuntime,
}


def runtime_names() -> list[str]:
    """Names of all runtimes."""
    return list(_RUNTIMES)


def get_runtime(name: str) -> Runtime:
    """A new runtime called ``name``; ``ScenarioError`` listing known names otherwise."""
    try:
        factory = _RUNTIMES[name]
    except KeyError:
        known = ", ".join(runtime_names())
        raise ScenarioError(f"unknown runtime {name!r} (known: {known})") from None
    return factory()
