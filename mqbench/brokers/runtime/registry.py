"""Runtime registry: ``native``, ``external`` and ``docker``."""

from __future__ import annotations

from collections.abc import Callable

from mqbench.brokers.base import Runtime
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.brokers.runtime.external import ExternalRuntime
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.errors import ScenarioError

__all__ = ["DockerRuntime", "get_runtime", "runtime_names"]

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
