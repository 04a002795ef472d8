"""Contracts between the engine and the broker runtimes.

A *target* is a broker plus the transport used to talk to it (``registry.py``). A *runtime*
starts a broker for a target and hands back a ``RunningBroker``: where it listens, which
processes to sample, what to write into the manifest, and how to stop it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mqbench.endpoint import Endpoint

if TYPE_CHECKING:
    from mqbench.brokers.info import BrokerInfo
    from mqbench.brokers.resources.sampler import SampleSource
    from mqbench.brokers.security.tls_material import TlsMaterial


@dataclass(frozen=True)
class Availability:
    """Whether a runtime can run a target on this machine, and why not."""

    available: bool
    reason: str = ""


class RunningBroker(Protocol):
    """A broker that a runtime started (or found) and will stop."""

    @property
    def endpoint(self) -> Endpoint:
        """Where clients connect."""
        ...

    @property
    def pids(self) -> list[int]:
        """Processes whose CPU and RSS are sampled (children are included by the sampler)."""
        ...

    @property
    def info(self) -> BrokerInfo:
        """Facts for the manifest (``info.py``): version, config, runtime, settings that
        matter; a snapshot."""
        ...

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the broker's log, for error messages."""
        ...

    def stop(self) -> None:
        """Stop what this runtime started, by PID; idempotent; never raises."""
        ...


@runtime_checkable
class HasResourceSource(Protocol):
    """A running broker whose resources are sampled by a source, not by PIDs (containers).

    The engine adds the source to its ``ResourceSampler`` (``add_source``) after start.
    """

    def resource_source(self) -> SampleSource | None:
        """Rows for ``resources.csv`` each tick (None: nothing to sample)."""
        ...


class FaultProxy(Protocol):
    """A Toxiproxy a runtime started next to its broker (see ``HasFaultProxy``)."""

    url: str
    """The Toxiproxy API, published on loopback."""
    upstream: str
    """The broker as the proxy reaches it (``host:port`` on the proxy's network)."""
    listen: str
    """Where the proxy listens on its network (``0.0.0.0:<port>``)."""
    port: int
    """Where clients connect on this machine."""

    def stop(self) -> None:
        """Remove the proxy's container(s); idempotent; never raises."""
        ...


@runtime_checkable
class HasFaultProxy(Protocol):
    """A running broker that can start a Toxiproxy on its own network (docker runtime)."""

    def start_fault_proxy(self) -> FaultProxy:
        """Start the proxy and return once its API answers; ``BrokerError`` otherwise."""
        ...


@dataclass(frozen=True)
class BrokerSecurity:
    """TLS and credentials a runtime configures the broker with (scenario ``security``).

    Every file a runtime writes for it (password files, secret config fragments) goes into
    ``private_dir``, which lies outside the result folder and is removed after the run;
    nothing here is ever written into the manifest except through :meth:`describe`.
    """

    private_dir: Path
    """A directory only this user can read (0700), outside the result folder."""
    tls: TlsMaterial | None = None
    """The run's CA and server certificate; None: plain TCP."""
    require_client_cert: bool = False
    """The broker refuses clients without a certificate signed by the CA."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def auth(self) -> bool:
        """True when the broker must require the user name and password."""
        return self.username is not None and self.password is not None

    def describe(self) -> dict[str, Any]:
        """What the manifest records: what is on, the user name, certificate facts."""
        return {
            "tls": self.tls is not None,
            "auth": self.auth,
            "username": self.username,
            "client_certificate_required": self.require_client_cert,
            "certificates": self.tls.describe() if self.tls is not None else None,
        }


@dataclass(frozen=True)
class StartRequest:
    """What the engine asks of a runtime for one cell."""

    target: str
    workdir: Path
    """A fresh directory for config, data and logs of this broker instance."""
    host: str = "127.0.0.1"
    port: int | None = None
    """None: pick a free port."""
    options: dict[str, Any] = field(default_factory=dict)
    startup_timeout_s: float = 60.0
    outlive_mqbench: bool = False
    """Keep the broker running after mqbench exits (``mqbench brokers up``); otherwise it
    dies with mqbench (``mqbench/process/lifeline.py``)."""
    security: BrokerSecurity | None = None
    """TLS and/or credentials to configure (None: plain TCP, no authentication)."""


@dataclass(frozen=True)
class RuntimeCapabilities:
    """What a runtime does with the broker; the engine asks these instead of its name."""

    starts_broker: bool
    """The runtime starts (and stops) the broker; False: the user runs it (external), so
    its certificates, limits and process are the user's."""
    inherits_open_files: bool
    """The broker process inherits mqbench's open-files limit (a child process)."""
    cgroup_profiles: bool
    """Resource profiles are applied through this machine's cgroups, so the pre-flight
    checks they fit the machine (docker applies them through the engine)."""
    local_process: bool
    """The broker is a process tree the runtime starts on this machine: found, stopped and
    checked by PID, its log a file (False: the engine runs it, or the user does)."""


class Runtime(Protocol):
    """Starts brokers one way (native processes, docker compose, or an external broker)."""

    name: str
    capabilities: RuntimeCapabilities

    def availability(self, target: str) -> Availability:
        """Can this runtime run ``target`` here? The reason says how to fix it when not."""
        ...

    def check_options(self, target: str, options: Mapping[str, Any]) -> None:
        """Raise ``BrokerError`` for a broker option this runtime or broker does not know
        (the pre-flight asks before anything starts; ``start`` refuses the same)."""
        ...

    def check_security(self, target: str, tls: bool, auth: bool) -> None:
        """Raise ``BrokerError`` (one line, the reason) when this runtime cannot run
        ``target`` with TLS or authentication (asked by the pre-flight)."""
        ...

    def start(self, request: StartRequest) -> RunningBroker:
        """Start the broker and return once it accepts connections.

        Raises ``mqbench.errors.BrokerError`` with a one-line reason (and, where useful, the
        log tail) and leaves nothing running when it fails.
        """
        ...
