"""The docker CLI as a subprocess, and what the engine behind it is.

``check_engine`` answers, once per runtime, whether the docker CLI, the Compose v2 plugin
and an engine are there, and if not, what is missing and how to install it, in one line.
When they are, it returns the engine's facts (``EngineFacts``): versions for the manifest,
and the host's CPUs, memory and open-files ceiling, which limits must fit
(``host_limits.py``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from mqbench.brokers.docker.host_limits import HostLimits, local_nofile_ceiling
from mqbench.errors import BrokerError

CHECK_TIMEOUT_S = 10.0
"""Timeout of ``docker info`` / ``docker compose version``."""
INSTALL_ENGINE = (
    "install Docker Engine (Debian: apt-get install docker.io; or "
    "https://docs.docker.com/engine/install/)"
)
INSTALL_COMPOSE = (
    "install Compose v2 as a CLI plugin (Debian 13+/Docker's apt repository: "
    "docker-compose-plugin; on Debian 12, scripts/install.sh --dev builds it into "
    "~/.docker/cli-plugins/)"
)


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` ('' when none)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def last_lines(text: str, n: int = 3) -> str:
    """The last ``n`` non-empty lines of ``text`` joined by `` | ``."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def engine_remote_host(env: Mapping[str, str]) -> str | None:
    """The engine's host name when ``DOCKER_HOST`` points at another machine, else None."""
    raw = env.get("DOCKER_HOST", "").strip()
    if not raw or raw.startswith(("unix://", "npipe://", "fd://")):
        return None
    host = urlparse(raw).hostname
    if not host or host == "localhost":
        return None
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return None
    return host


class DockerCli:
    """Runs ``docker`` commands as subprocesses with timeouts (found on ``PATH`` per call)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        """Use ``env`` for lookups and child processes (default: ``os.environ`` at call time)."""
        self._env = env

    @property
    def env(self) -> dict[str, str]:
        """The environment children get."""
        return dict(os.environ if self._env is None else self._env)

    def binary(self) -> str | None:
        """Path of the docker CLI, or None."""
        return shutil.which("docker", path=self.env.get("PATH"))

    def run(
        self, args: list[str], timeout_s: float, extra_env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker <args>``; ``BrokerError`` when the CLI is missing or it times out."""
        docker = self.binary()
        if docker is None:
            raise BrokerError(f"the docker CLI is not installed ({INSTALL_ENGINE})")
        env = self.env
        env.update(extra_env or {})
        try:
            return subprocess.run(
                [docker, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(
                f"`docker {' '.join(args[:4])}` did not finish within {timeout_s:g} s"
            ) from exc
        except OSError as exc:
            raise BrokerError(f"cannot run {docker}: {exc}") from exc


@dataclass(frozen=True)
class EngineFacts:
    """The engine behind the CLI: versions (for the manifest) and its host's limits."""

    engine_version: str
    compose_version: str
    limits: HostLimits
    cgroup_version: str | None = None


def _info(text: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def check_engine(cli: DockerCli) -> EngineFacts | str:
    """The engine's facts, or one line saying what is missing and how to install it."""
    if cli.binary() is None:
        return f"the docker CLI is not installed ({INSTALL_ENGINE})"
    try:
        compose = cli.run(["compose", "version", "--short"], CHECK_TIMEOUT_S)
    except BrokerError as exc:
        return f"`docker compose version` failed: {exc}"
    if compose.returncode != 0:
        detail = first_line(compose.stderr) or first_line(compose.stdout)
        return (
            "the docker compose plugin (Compose v2) is missing (`docker compose version` "
            f"failed: {detail or 'exit ' + str(compose.returncode)}); {INSTALL_COMPOSE}"
        )
    where = cli.env.get("DOCKER_HOST") or "the local socket"
    try:
        proc = cli.run(["info", "--format", "{{json .}}"], CHECK_TIMEOUT_S)
    except BrokerError as exc:
        return f"no Docker engine answers at {where} ({exc})"
    info = _info(proc.stdout)
    version = info.get("ServerVersion")
    if proc.returncode != 0 or not isinstance(version, str) or not version:
        detail = last_lines(proc.stderr, 1) or f"exit {proc.returncode}"
        return f"no Docker engine answers at {where}: {detail} (start dockerd, or {INSTALL_ENGINE})"
    remote = engine_remote_host(cli.env) is not None
    limits = HostLimits(
        cpus=_int(info.get("NCPU")),
        mem_bytes=_int(info.get("MemTotal")),
        nofile_ceiling=local_nofile_ceiling(remote),
    )
    cgroup = info.get("CgroupVersion")
    return EngineFacts(
        version, compose.stdout.strip(), limits, cgroup if isinstance(cgroup, str) else None
    )
