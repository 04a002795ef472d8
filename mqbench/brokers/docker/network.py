"""Where a broker container's listener lives: the bridge (default) or the host's network.

``bridge`` (Compose's default): the container has its own network namespace on a network
the project creates; Docker publishes the listener on the bind address (127.0.0.1), and
with dockerd's default ``"userland-proxy": true`` every client connection to it is copied
through a ``docker-proxy`` process on the host: one more process, two more socket hops per
message, CPU that docker stats does not count (it runs outside the container).
``benchmarks/docker_vs_native.py`` measures what that costs (docs/docker.md).

``host`` (runtime option ``network: host``): the container shares the host's network
namespace (``network_mode: host``), there is no port mapping and no proxy, and the broker
itself listens on the bind address and the chosen port (the compose file's
``MQBENCH_LISTEN_HOST``/``MQBENCH_LISTEN_PORT``), so it stays on loopback. CPU and memory
limits, the image and its user are as with ``bridge``. Offered where the compose file
takes those variables (``ComposeEntry.host_network``); not with TLS/users (the secured
config listens on the container port) nor with the Toxiproxy container (it joins the
broker's bridge network).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.errors import BrokerError

NetworkMode = Literal["bridge", "host"]
NETWORK_MODES: tuple[NetworkMode, ...] = ("bridge", "host")


def network_mode(target: str, ct: ComposeEntry, options: Mapping[str, Any]) -> NetworkMode:
    """The ``network`` option checked for ``target`` (default ``bridge``)."""
    value = options.get("network") or "bridge"
    if value == "bridge":
        return "bridge"
    if value != "host":
        raise BrokerError(f"option 'network' is {value!r}; it is one of {', '.join(NETWORK_MODES)}")
    if not ct.host_network:
        raise BrokerError(
            f"{target} cannot run with network: host (its compose file {ct.file} has no "
            "listener variables); use the default network: bridge"
        )
    return "host"


def host_network_document(compose: Mapping[str, Any], service: str) -> dict[str, Any]:
    """A copy of the compose document whose ``service`` runs on the host's network."""
    doc: dict[str, Any] = copy.deepcopy(dict(compose))
    spec: dict[str, Any] = doc["services"][service]
    spec.pop("ports", None)
    spec["network_mode"] = "host"
    return doc
