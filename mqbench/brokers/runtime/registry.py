"""Runtime registry: ``native``, ``external`` and ``docker``."""

from __future__ import annotations

from mqbench.brokers.base import Runtime, RuntimeCapabilities
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.brokers.runtime.external import ExternalRuntime
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.errors import ScenarioError

__all__ = ["DockerRuntime", "get_runtime", "runtime_capabilities", "runtime_names"]

_RUNTIMES: dict[str, type[NativeRuntime] | type[ExternalRuntime] | type[DockerRuntime]] = {
    "native": NativeRuntime,
    "external": ExternalRuntime,
    "docker": DockerRuntime,
}


def runtime_names() -> list[str]:
    """Names of all runtimes."""
    return list(_RUNTIMES)


def _runtime_class(
    name: str,
) -> type[NativeRuntime] | type[ExternalRuntime] | type[DockerRuntime]:
    try:
        return _RUNTIMES[name]
    except KeyError:
        known = ", ".join(runtime_names())
        raise ScenarioError(f"unknown runtime {name!r} (known: {known})") from None


def get_runtime(name: str) -> Runtime:
    """A new runtime called ``name``; ``ScenarioError`` listing known names otherwise."""
    return _runtime_class(name)()


def runtime_capabilities(name: str) -> RuntimeCapabilities:
    """What the runtime called ``name`` does with a broker (without creating it)."""
    return _runtime_class(name).capabilities
