"""Which runtime can run which target on this machine (``mqbench targets``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mqbench.brokers.base import Availability
from mqbench.brokers.registry import Target, get_target, target_names
from mqbench.brokers.runtime.registry import get_runtime

LISTED_RUNTIMES = ("native", "docker")
"""Runtimes that start brokers themselves (``external`` can point at any target)."""


@dataclass(frozen=True)
class TargetAvailability:
    """One target and, per runtime, whether it can run here and why not."""

    target: Target
    runtimes: dict[str, Availability]


def target_availability(runtimes: Sequence[str] = LISTED_RUNTIMES) -> list[TargetAvailability]:
    """Every known target with its availability under each of ``runtimes``."""
    instances = [get_runtime(name) for name in runtimes]
    return [
        TargetAvailability(
            get_target(name), {runtime.name: runtime.availability(name) for runtime in instances}
        )
        for name in target_names()
    ]
