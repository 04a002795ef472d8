"""Toxiproxy in a container on the broker project's network (``faults.proxy: container``).

The paper's Toxiproxy sits between clients and the broker inside Docker. Here it is a
compose project of its own (``compose/toxiproxy.yaml``), named after the broker's project
(``<broker project>-toxiproxy``) and joined to the broker project's default network, so
the proxy reaches the broker by its service name and container port (``mosquitto:1883``)
and never through an address of this machine. Its API and the one proxy port a cell
needs are published on the broker's bind address (loopback); the proxy listens on
``0.0.0.0:<port>`` inside its container and the same port on the host is where clients
connect.

The project file (``compose.toxiproxy.yaml`` in the broker's work folder) is
``toxiproxy.yaml`` plus the external network; it is registered with the orphan reaper
like every project, and taken down before the broker's (a network cannot be removed while
a container is attached to it).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mqbench.brokers.docker.compose import TOXIPROXY, load_compose
from mqbench.brokers.docker.engine import last_lines
from mqbench.brokers.docker.project import ComposeProject
from mqbench.brokers.runtime.net import free_port
from mqbench.errors import BrokerError
from mqbench.process.lifeline import guard_compose, release_compose

TOXIPROXY_API_PORT = 8474
"""The API's port inside the container (``toxiproxy.yaml``)."""
TOXIPROXY_START_S = 60.0


@dataclass(frozen=True)
class BrokerSite:
    """Where a started broker is on its compose network, and how its project was run."""

    project: ComposeProject
    service: str
    container_port: int
    bind: str
    nofile: int
    workdir: Path
    folder: Path
    """The compose folder (``toxiproxy.yaml`` is read from there)."""
    choose_images: Callable[[ComposeProject, str], dict[str, Any]]
    """Sets a project's image variables (``images.py``: official, else the local stand-in)
    and returns the manifest facts."""

    @property
    def network(self) -> str:
        """The broker project's default network (Compose names it ``<project>_default``)."""
        return f"{self.project.name}_default"


@dataclass
class ContainerToxiproxy:
    """A running Toxiproxy container (implements ``brokers.base.FaultProxy``)."""

    url: str
    upstream: str
    listen: str
    port: int
    project: ComposeProject
    _stopped: bool = field(default=False, repr=False)

    def stop(self) -> None:
        """``compose down`` of the proxy's project; idempotent; never raises."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            if self.project.down().returncode == 0:
                release_compose(self.project.name)


def toxiproxy_document(folder: Path, network: str) -> dict[str, Any]:
    """``toxiproxy.yaml`` joined to ``network`` (an existing network: the broker's)."""
    doc = copy.deepcopy(load_compose(TOXIPROXY.path(folder)))
    doc["networks"] = {"default": {"name": network, "external": True}}
    return doc


def start_toxiproxy(site: BrokerSite, docker_binary: str) -> ContainerToxiproxy:
    """Start Toxiproxy next to the broker of ``site``; return once it is healthy."""
    path = site.workdir / "compose.toxiproxy.yaml"
    path.write_text(
        "# written by mqbench (mqbench/brokers/docker/fault_proxy.py) from toxiproxy.yaml\n"
        + yaml.safe_dump(toxiproxy_document(site.folder, site.network), sort_keys=False),
        encoding="utf-8",
    )
    api_port = free_port(site.bind)
    proxy_port = free_port(site.bind)
    project = ComposeProject(
        f"{site.project.name}-toxiproxy",
        path,
        {
            "MQBENCH_BIND": site.bind,
            "MQBENCH_PORT": str(api_port),
            "MQBENCH_PROXY_PORTS": str(proxy_port),
            "MQBENCH_NOFILE": str(site.nofile),
            # The proxy is not the system under test: no CPU or memory limit of its own.
            "MQBENCH_CPUS": "0",
            "MQBENCH_MEM": "0",
        },
        site.project.cli,
    )
    site.choose_images(project, "toxiproxy")
    guard_compose(project.name, docker_binary)
    args = ["up", "-d", "--wait", "--wait-timeout", str(round(TOXIPROXY_START_S))]
    try:
        proc = project.run(args, TOXIPROXY_START_S + 30.0)
    except BaseException:
        _down(project)
        raise
    if proc.returncode != 0:
        logs = project.log_line(15)
        _down(project)
        raise BrokerError(
            f"the Toxiproxy container did not start: "
            f"{last_lines(proc.stderr, 1) or 'exit ' + str(proc.returncode)}; "
            f"last log lines: {logs}"
        )
    return ContainerToxiproxy(
        url=f"http://{site.bind}:{api_port}",
        upstream=f"{site.service}:{site.container_port}",
        listen=f"0.0.0.0:{proxy_port}",
        port=proxy_port,
        project=project,
    )


def _down(project: ComposeProject) -> None:
    with contextlib.suppress(Exception):
        if project.down().returncode == 0:
            release_compose(project.name)
