"""Which runtime can run which target on this machine (``mqbench targets``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mqbench.brokers.base import Availability, Runtime
from mqbench.brokers.registry import Target, get_target, target_names
from mqbench.brokers.runtime.registry import get_runtime

LISTED_RUNTIMES = ("native", "docker")
"""Runtimes that start brokers themselves (``external`` can point at any target)."""


@dataclass(frozen=True)
class TargetAvailability:
    """One target and, per runtime, whether it can run here and why not."""

    target: Target
    runtimes: dict[str, Availability]
    verified: dict[str, str] = field(default_factory=dict)
    """Per runtime that says so (docker): what was and was not verified here, one line."""


def target_availability(runtimes: Sequence[str] = LISTED_RUNTIMES) -> list[TargetAvailability]:
    """Every known target with its availability under each of ``runtimes``."""
    instances = [get_runtime(name) for name in runtimes]
    return [
        TargetAvailability(
            get_target(name),
            {runtime.name: runtime.availability(name) for runtime in instances},
            _verified(instances, name),
        )
        for name in target_names()
    ]


def _verified(instances: Sequence[Runtime], target: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for runtime in instances:
        verification = getattr(runtime, "verification", None)
        line = verification(target) if callable(verification) else None
        if line:
            found[runtime.name] = line
    return found
