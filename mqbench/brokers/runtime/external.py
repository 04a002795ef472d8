"""The external runtime: a broker someone else started, at a given host and port.

Options (``StartRequest.options``): ``host`` (default: the request's host), ``port``
(default: the request's port, else the target's default port), ``pid`` (optional; the
broker process to sample — it must exist on this machine), ``version`` (optional, for the
manifest). mqbench never stops an external broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import psutil

from mqbench.brokers.base import Availability, RuntimeCapabilities, StartRequest
from mqbench.brokers.info import ExternalInfo
from mqbench.brokers.registry import get_target
from mqbench.brokers.runtime.net import tcp_reachable
from mqbench.endpoint import Endpoint
from mqbench.errors import BrokerError, names_in_one_line

KNOWN_OPTIONS = frozenset({"host", "port", "pid", "version"})
"""Options the external runtime understands."""


class ExternalBroker:
    """A reachable broker mqbench did not start (implements ``RunningBroker``)."""

    def __init__(self, endpoint: Endpoint, pid: int | None, info: ExternalInfo) -> None:
        """Describe a broker at ``endpoint``; ``pid`` (if known) is sampled."""
        self._endpoint = endpoint
        self._pid = pid
        self._info = info

    @property
    def endpoint(self) -> Endpoint:
        """Where clients connect."""
        return self._endpoint

    @property
    def pids(self) -> list[int]:
        """``[pid]`` when one was given, else empty (nothing to sample)."""
        return [self._pid] if self._pid is not None else []

    @property
    def info(self) -> ExternalInfo:
        """Manifest facts: runtime, host, port, pid, version if given."""
        return replace(self._info)

    def log_tail(self, lines: int = 20) -> str:
        """An external broker's log is not available to mqbench."""
        return ""

    def stop(self) -> None:
        """Does nothing: mqbench only stops what it started."""


class ExternalRuntime:
    """Points mqbench at an already running broker (implements ``Runtime``)."""

    name = "external"
    capabilities = RuntimeCapabilities(
        starts_broker=False, inherits_open_files=False, cgroup_profiles=False, local_process=False
    )

    def availability(self, target: str) -> Availability:
        """Always available for a known target (reachability is checked by ``start``)."""
        get_target(target)
        return Availability(True)

    def check_options(self, target: str, options: Mapping[str, Any]) -> None:
        """Only the external runtime's own options (``KNOWN_OPTIONS``)."""
        unknown = sorted(set(options) - KNOWN_OPTIONS)
        if unknown:
            raise BrokerError(
                f"unknown external runtime option(s) {names_in_one_line(unknown)} "
                f"(known: {', '.join(sorted(KNOWN_OPTIONS))})"
            )

    def check_security(self, target: str, tls: bool, auth: bool) -> None:
        """Nothing to refuse: the broker's owner configured its TLS and users; the clients
        use the scenario's CA, certificate and credentials."""
        get_target(target)

    def start(self, request: StartRequest) -> ExternalBroker:
        """Check that the broker accepts TCP connections within ``startup_timeout_s``."""
        target = get_target(request.target)
        self.check_options(request.target, request.options)
        host = str(request.options.get("host", request.host))
        port = int(request.options.get("port", request.port or target.default_port))
        raw_pid = request.options.get("pid")
        pid = int(raw_pid) if raw_pid is not None else None
        if pid is not None and not psutil.pid_exists(pid):
            raise BrokerError(f"external broker pid {pid} does not exist on this machine")
        if not tcp_reachable(host, port, request.startup_timeout_s):
            raise BrokerError(
                f"external {target.name} broker at {host}:{port} is not reachable "
                f"(no TCP connection within {request.startup_timeout_s:g} s)"
            )
        info = ExternalInfo(
            name=target.name,
            target=target.name,
            version=str(request.options.get("version", "unknown (external)")),
            host=host,
            port=port,
            pid=pid,
            security=request.security.describe() if request.security is not None else None,
            runtime=self.name,
        )
        return ExternalBroker(Endpoint(host, port), pid, info)
