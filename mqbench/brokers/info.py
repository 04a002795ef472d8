"""What a runtime says about the broker it started: ``RunningBroker.info``, one typed value
per runtime (``BrokerInfo``).

The manifest stores it as the cell's ``broker`` entry through ``to_dict``, which writes the
keys in the order manifests have always had (each class's ``to_dict`` lists them), so old
and new manifests read alike (``records.cell_entry.CellEntry.broker``). Facts learnt when
the broker stops (exit code, helper PIDs, ``compose down``) are set on the same value and
reach ``to_dict`` too; the manifest is written at start and does not carry them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mqbench.brokers.runtime.settings import BrokerSettings


def _present(data: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``data`` plus every ``optional`` key whose value is not None, in order."""
    data.update({key: value for key, value in optional.items() if value is not None})
    return data


@dataclass
class NativeInfo:
    """A broker process started by the native runtime."""

    name: str
    """The native spec's name (= the target's)."""
    target: str
    version: str
    binary: str
    argv: list[str]
    """The command line as started (wrapped by the cgroup helper when profiled: that one is
    not here, the broker's own is)."""
    config_path: str | None
    config: str
    """The config file's full text (no secret: those live in the private folder)."""
    host: str
    port: int
    pid: int
    log_path: str
    settings: BrokerSettings
    """``LaunchPlan.settings``: what the spec wrote that changes results."""
    resources: Mapping[str, Any] | None
    """The resource profile as applied (``NativeLimiter.describe``; updated when the
    cgroup is removed), None: no profile."""
    security: Mapping[str, Any] | None = None
    """``BrokerSecurity.describe()`` for a secured broker."""
    started_ns: int | None = None
    """When it answered its readiness probe (wall clock)."""
    exit_code: int | None = None
    """After ``stop()``: the process's exit code."""
    companion_pids: list[int] | None = None
    """After ``stop()``: the helper processes stopped with it (RabbitMQ's ``epmd``)."""
    runtime: str = "native"

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``broker`` entry."""
        data: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "runtime": self.runtime,
            "version": self.version,
            "binary": self.binary,
            "argv": list(self.argv),
            "config_path": self.config_path,
            "config": self.config,
            "host": self.host,
            "port": self.port,
            "pid": self.pid,
            "log_path": self.log_path,
            "settings": dict(self.settings),
            "resources": None if self.resources is None else dict(self.resources),
        }
        return _present(
            data,
            security=None if self.security is None else dict(self.security),
            started_ns=self.started_ns,
            exit_code=self.exit_code,
            companion_pids=self.companion_pids,
        )


@dataclass
class ExternalInfo:
    """A broker someone else started, reached by the external runtime."""

    name: str
    target: str
    version: str
    """The ``version`` option, else ``unknown (external)``."""
    host: str
    port: int
    pid: int | None
    """The PID given to sample (None: not sampled)."""
    security: Mapping[str, Any] | None = None
    runtime: str = "external"

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``broker`` entry."""
        data: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "runtime": self.runtime,
            "version": self.version,
            "host": self.host,
            "port": self.port,
            "pid": self.pid,
        }
        return _present(data, security=None if self.security is None else dict(self.security))


@dataclass
class DockerInfo:
    """A compose project started by the docker runtime."""

    name: str
    """The compose service of the broker."""
    target: str
    project: str
    compose_file: str
    compose_sha256: str
    variables: dict[str, str]
    profile: Mapping[str, Any]
    """The resource profile as the compose variables set it (``Profile.describe``)."""
    nofile: int
    network: str
    host: str
    """Where the published ports are reachable from here."""
    bind: str
    port: int
    ports: dict[str, int]
    docker_host: str | None
    engine_version: str
    compose_version: str
    cgroup_version: str | None
    services: dict[str, Any]
    """Per service: the image as the engine reports it (id, digests)."""
    images: dict[str, Any]
    """Per service: the image chosen and why (``docker/images.py``)."""
    version: str | None
    """The broker service's image."""
    started_ns: int
    hook_facts: dict[str, Any] = field(default_factory=dict)
    """What the target's ``DockerHooks.after_up`` returned (written at the top level)."""
    security: Mapping[str, Any] | None = None
    """The rest is set only for a secured broker: ``BrokerSecurity.describe()``, ..."""
    secured_container: Mapping[str, Any] | None = None
    """... how the container runs the native spec's secured config (user, mounts, argv)..."""
    config_path: str | None = None
    """... and that config: its path inside the container, its text and settings."""
    config: str | None = None
    settings: BrokerSettings | None = None
    down_exit_code: int | None = None
    """After ``stop()``: the exit code of ``docker compose down``."""
    down_error: str | None = None
    runtime: str = "docker"

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``broker`` entry."""
        data: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "runtime": self.runtime,
            "project": self.project,
            "compose_file": self.compose_file,
            "compose_sha256": self.compose_sha256,
            "variables": dict(self.variables),
            "profile": dict(self.profile),
            "nofile": self.nofile,
            "network": self.network,
            "host": self.host,
            "bind": self.bind,
            "port": self.port,
            "ports": dict(self.ports),
            "docker_host": self.docker_host,
            "engine_version": self.engine_version,
            "compose_version": self.compose_version,
            "cgroup_version": self.cgroup_version,
            "services": dict(self.services),
            "images": dict(self.images),
            "version": self.version,
            "started_ns": self.started_ns,
            **self.hook_facts,
        }
        if self.secured_container is not None:
            data.update(
                security=None if self.security is None else dict(self.security),
                secured_container=dict(self.secured_container),
                config_path=self.config_path,
                config=self.config,
                settings=None if self.settings is None else dict(self.settings),
            )
        return _present(data, down_exit_code=self.down_exit_code, down_error=self.down_error)


BrokerInfo = NativeInfo | DockerInfo | ExternalInfo
"""What ``RunningBroker.info`` is, by runtime."""
