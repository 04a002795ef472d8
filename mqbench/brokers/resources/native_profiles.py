"""Resource profiles for native brokers: a cgroup per broker plus the matching thread knobs.

The same profiles as the Docker runtime (``mqbench/brokers/resources/profiles.py``: 1cpu-2g,
2cpu-4g, 4cpu-8g, unlimited) applied to a local process:

- limits: the broker's process tree runs in a cgroup of its own (``cgroups.py``) with a
  CPU quota of ``cpus`` x 100 ms per 100 ms, a cpuset of the first ``cpus`` CPUs mqbench may
  use (so the broker sees and uses exactly that many, like a VM's vCPUs) and a memory limit
  of ``mem_mb`` MiB;
- knobs: the ``knobs`` of the target's definition (``knobs.py``: GOMAXPROCS for NATS,
  ``+S N:N`` for RabbitMQ, ``-XX:ActiveProcessorCount`` and a fixed heap of half the memory
  for JVM brokers).

``unlimited`` creates no cgroup and sets no knob. A profile asking for more CPUs (or memory)
than this machine has is refused before anything starts, as is a profile that cannot be
applied (no cgroup write access): never a silent unlimited run. Without ``resources`` a
native broker runs as before, with no cgroup.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import psutil

from mqbench.brokers.resources.cgroups import CgroupManager, Limits, format_cpu_list
from mqbench.brokers.resources.profiles import Profile, get_profile
from mqbench.errors import BrokerError

if TYPE_CHECKING:
    from mqbench.brokers.resources.cgroups import BrokerCgroup
    from mqbench.brokers.resources.knobs import ProfileKnobs
    from mqbench.brokers.runtime.native_spec import LaunchPlan

PROFILE_KEYS = ("resources", "profile")
"""Option keys that name a profile (``resources`` from scenarios, ``profile`` from
``mqbench brokers up --profile``); they are taken out before the spec sees the options."""
MIB = 1024 * 1024


def split_profile(options: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The profile name in ``options`` (if any) and the options without it."""
    names = {str(options[k]) for k in PROFILE_KEYS if options.get(k) is not None}
    if len(names) > 1:
        raise BrokerError(f"options resources and profile disagree: {', '.join(sorted(names))}")
    rest = {k: v for k, v in options.items() if k not in PROFILE_KEYS}
    return (names.pop() if names else None), rest


def machine_cpus() -> list[int]:
    """CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))


def machine_memory_mb() -> int:
    """Physical memory in MiB."""
    return int(psutil.virtual_memory().total // MIB)


def check_fits(profile: Profile, cpus: list[int], memory_mb: int) -> None:
    """``BrokerError`` with the reason when the profile asks for more than the machine has."""
    if profile.cpus is not None and profile.cpus > len(cpus):
        smaller = [
            p.name
            for p in _profiles()
            if p.cpus is not None and p.cpus <= len(cpus) and p.name != profile.name
        ]
        raise BrokerError(
            f"resources profile {profile.name!r} asks for {profile.cpus} CPUs but this machine "
            f"has {len(cpus)} (CPUs {format_cpu_list(cpus)}); a quota cannot give more than "
            f"there is (use {' or '.join(smaller) or 'unlimited'})"
        )
    if profile.mem_mb is not None and profile.mem_mb > memory_mb:
        raise BrokerError(
            f"resources profile {profile.name!r} asks for {profile.mem_mb} MiB of memory but "
            f"this machine has {memory_mb} MiB"
        )


def _profiles() -> list[Profile]:
    from mqbench.brokers.resources.profiles import PROFILES

    return list(PROFILES.values())


def check_native_profile(name: str, manager: CgroupManager | None = None) -> Profile:
    """Everything that can be checked before a run: known, fits, cgroups writable.

    Raises ``BrokerError`` (``CgroupError`` for cgroup access) with one line.
    """
    profile = get_profile(name)
    check_fits(profile, machine_cpus(), machine_memory_mb())
    if _limits_anything(profile):
        (manager or CgroupManager()).check_writable()
    return profile


def _limits_anything(profile: Profile) -> bool:
    return profile.cpus is not None or profile.mem_mb is not None


class NativeLimiter:
    """Applies one profile to one broker start: knobs, cgroup, manifest facts, clean-up."""

    def __init__(self, profile: Profile, manager: CgroupManager | None = None) -> None:
        """Check that the profile fits this machine (``BrokerError`` otherwise)."""
        check_fits(profile, machine_cpus(), machine_memory_mb())
        self.profile = profile
        self._manager = manager
        self.cgroup: BrokerCgroup | None = None
        self.knobs: dict[str, Any] = {}

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any], manager: CgroupManager | None = None
    ) -> tuple[NativeLimiter | None, dict[str, Any]]:
        """A limiter for the profile named in ``options`` (None without one) and the rest."""
        name, rest = split_profile(options)
        if name is None:
            return None, rest
        return cls(get_profile(name), manager), rest

    def tune(
        self, knobs: ProfileKnobs, broker: str, plan: LaunchPlan, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """The broker's thread/heap settings for this profile (nothing for ``unlimited``)."""
        if not _limits_anything(self.profile):
            return plan
        tuned, self.knobs = knobs.tune(broker, plan, self.profile, options)
        return tuned

    def wrap(self, argv: list[str], label: str) -> list[str]:
        """Create the broker's cgroup and return ``argv`` started inside it."""
        if not _limits_anything(self.profile):
            return argv
        manager = self._manager or CgroupManager()
        cpuset = self.profile.cpuset(manager.effective_cpus())
        if cpuset is not None and self.profile.cpus is not None and len(cpuset) < self.profile.cpus:
            raise BrokerError(
                f"resources profile {self.profile.name!r} asks for {self.profile.cpus} CPUs "
                f"but mqbench's cgroup may use only CPUs {format_cpu_list(cpuset)}"
            )
        memory = self.profile.mem_mb * MIB if self.profile.mem_mb is not None else None
        name = f"{label}-{os.getpid()}-{secrets.token_hex(3)}"
        self.cgroup = manager.create(name, Limits(self.profile.cpus, cpuset, memory))
        return self.cgroup.wrap(argv)

    def describe(self) -> dict[str, Any]:
        """Manifest facts: the profile, the cgroup as applied (or None) and the knobs."""
        return {
            "profile": self.profile.name,
            "cpus": self.profile.cpus,
            "mem_mb": self.profile.mem_mb,
            "cgroup": self.cgroup.describe() if self.cgroup is not None else None,
            "knobs": dict(self.knobs),
        }

    def release(self) -> None:
        """Remove the cgroup (after the broker stopped); never raises."""
        if self.cgroup is not None:
            with contextlib.suppress(Exception):
                self.cgroup.remove()
