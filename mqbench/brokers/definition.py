"""What mqbench knows about one broker, in one typed value: a ``BrokerDefinition``.

Each broker is one module in ``mqbench/brokers/definitions/`` that exports ``DEFINITION``,
and ``mqbench/brokers/registry.py`` lists those modules. A definition holds one
``TargetDefinition`` per target (a broker plus the protocol used to talk to it; RabbitMQ
has two): the target row that ``mqbench targets`` shows, the compose entry the docker
runtime runs, the native spec the native runtime runs, the resource knobs a native profile
sets, the Maven distribution of a Java broker, and optional docker hooks (TBMQ's REST
bootstrap). The runtimes read only these fields; none of them names a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mqbench.brokers.resources.knobs import NoKnobs, ProfileKnobs
from mqbench.wire.limits import PayloadLimit

if TYPE_CHECKING:
    from mqbench.brokers.docker.compose import ComposeEntry
    from mqbench.brokers.docker.security import SecuredContainer
    from mqbench.brokers.java.maven import JavaDistribution
    from mqbench.brokers.runtime.native_spec import NativeSpec

TransportName = Literal["mqtt", "nats", "redis", "amqp", "zenoh"]


@dataclass(frozen=True)
class Target:
    """A broker plus the protocol used to talk to it: the row ``mqbench targets`` shows."""

    name: str
    broker: str
    transport: TransportName
    description: str
    default_port: int
    native_spec: str | None
    """Name of the native spec that runs it here; None when mqbench has none (yet)."""
    native_source: str | None = None
    """Where a native install would come from; None means the broker is Docker only."""
    docker_only: str = ""
    """Why a Docker-only broker has no native runtime (one line)."""


@dataclass(frozen=True)
class ComposeStarted:
    """What a docker hook may use once the compose project is healthy."""

    target: str
    host: str
    """Where the published ports are reachable from here (loopback, or a remote engine)."""
    ports: Mapping[str, int]
    """Compose variable -> published host port (``port_var`` and ``extra_ports``)."""
    options: Mapping[str, Any]
    """The runtime options of the start request."""
    timeout_s: float
    """What is left of the start-up timeout (at least 5 s)."""


class DockerHooks:
    """Steps the docker runtime runs for one target besides ``compose up`` (default: none).

    A hook may own runtime ``options`` (given for another target they are refused, naming
    the owner), add compose ``variables`` (called before anything starts, so it is also
    where its options are checked), and bootstrap the broker ``after_up`` (a
    ``BrokerError`` there tears the project down and is reported with the broker
    service's last log lines).
    """

    options: frozenset[str] = frozenset()
    """Docker runtime options only this target understands."""

    def variables(self, options: Mapping[str, Any]) -> dict[str, str]:
        """Extra compose variables for this start; raises ``BrokerError`` on a bad option."""
        return {}

    def after_up(self, started: ComposeStarted) -> dict[str, Any]:
        """Bootstrap the healthy broker; returns facts for the manifest (``info``)."""
        return {}


@dataclass(frozen=True)
class TargetDefinition:
    """One target of a broker: its row, and how each runtime runs it."""

    name: str
    broker: str
    transport: TransportName
    description: str
    default_port: int
    native: Callable[[], NativeSpec] | None = None
    """Makes the native spec (a fresh one per runtime; a spec may keep per-instance
    state). Its ``name`` is the target's name. None: no native runtime."""
    native_source: str | None = None
    """Where the native install comes from (a Debian, PyPI or Maven package, or mqbench
    itself); None: the broker runs in Docker only."""
    docker_only: str = ""
    """Why a Docker-only broker has no native runtime (one line)."""
    compose: ComposeEntry | None = None
    """How the docker runtime runs it; None: no compose file."""
    knobs: ProfileKnobs = field(default_factory=NoKnobs)
    """What a native resource profile sets besides the cgroup (threads, heap)."""
    maven: JavaDistribution | None = None
    """The jars ``mqbench brokers fetch`` downloads for a Java broker."""
    docker_hooks: DockerHooks | None = None
    """Target-specific steps of the docker runtime."""
    secured_container: SecuredContainer | None = None
    """How the docker runtime runs the native spec's secured config in the image (TLS,
    users); None: the docker runtime refuses ``security`` for this target."""
    docker_security_gap: str = ""
    """Why the docker runtime cannot secure this target (one line; shown when refused)."""
    payload_limit: Callable[[Mapping[str, Any]], PayloadLimit] | None = None
    """The largest payload the broker takes with these broker options, where its own
    settings (which mqbench writes) decide it; raises ``BrokerError`` on a malformed
    option. None: only the protocol's limit applies (``TransportCapabilities``)."""
    secret_options: frozenset[str] = frozenset()
    """Broker options that hold a secret although their names do not say so
    (``scenario.security.is_secret_name``): like those, a scenario gives them only as
    ``<name>_env`` or ``<name>_file``, and their values are never written. A typed options
    model can derive this set from its secret-typed fields."""

    @property
    def target(self) -> Target:
        """The target row."""
        return Target(
            self.name,
            self.broker,
            self.transport,
            self.description,
            self.default_port,
            self.name if self.native is not None else None,
            self.native_source,
            self.docker_only,
        )


@dataclass(frozen=True)
class BrokerDefinition:
    """One broker: the targets it serves (one per protocol mqbench speaks to it)."""

    name: str
    targets: tuple[TargetDefinition, ...]
