"""Thread (and heap) knobs: how a native broker learns the CPU count of a resource profile.

A CPU quota does not change how many CPUs a runtime *sees*, so Go, the BEAM and the JVM
would size their thread pools to the host (``mqbench/brokers/resources/profiles.py``). Each broker
definition names one of these knobs; ``native_profiles.NativeLimiter`` applies it to the
launch plan when a profile limits anything, and records the returned facts in the manifest
(``info.resources["knobs"]``). The Docker profiles set the same values through the
compose files' environment (docs/docker.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mqbench.brokers.runtime.native_spec import LaunchPlan
from mqbench.errors import BrokerError

if TYPE_CHECKING:
    from mqbench.brokers.resources.profiles import Profile


class ProfileKnobs(ABC):
    """What a broker is told about a resource profile (a value object; no state)."""

    @abstractmethod
    def tune(
        self, broker: str, plan: LaunchPlan, profile: Profile, options: Mapping[str, Any]
    ) -> tuple[LaunchPlan, dict[str, Any]]:
        """The plan with the profile's settings applied, and those settings for the manifest.

        ``broker`` names the broker in error messages; ``options`` are the broker options
        without the profile (a knob may refuse one that conflicts with the profile).
        """


@dataclass(frozen=True)
class NoKnobs(ProfileKnobs):
    """The broker has no such setting (single-threaded, or none is known): nothing changes."""

    def tune(
        self, broker: str, plan: LaunchPlan, profile: Profile, options: Mapping[str, Any]
    ) -> tuple[LaunchPlan, dict[str, Any]]:
        """The plan unchanged, no facts."""
        return plan, {}


@dataclass(frozen=True)
class GoMaxProcs(ProfileKnobs):
    """``GOMAXPROCS=<cpus>`` in a Go server's environment (through ``/usr/bin/env``)."""

    def tune(
        self, broker: str, plan: LaunchPlan, profile: Profile, options: Mapping[str, Any]
    ) -> tuple[LaunchPlan, dict[str, Any]]:
        """Prefix the argv with ``/usr/bin/env GOMAXPROCS=<cpus>`` (recorded in ``argv``)."""
        if profile.cpus is None:
            return plan, {}
        argv = ["/usr/bin/env", f"GOMAXPROCS={profile.cpus}", *plan.argv]
        return LaunchPlan(argv, plan.config_path, plan.config_text, plan.settings), {
            "GOMAXPROCS": profile.cpus
        }


@dataclass(frozen=True)
class ErlangSchedulers(ProfileKnobs):
    """Erlang schedulers ``+S N:N`` appended to an ``env`` assignment in the argv."""

    variable: str = "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"
    """The environment variable (an ``/usr/bin/env KEY=value`` argument) to append to."""

    def tune(
        self, broker: str, plan: LaunchPlan, profile: Profile, options: Mapping[str, Any]
    ) -> tuple[LaunchPlan, dict[str, Any]]:
        """Append the profile's ``erl_flags`` to ``<variable>=...``."""
        if not profile.erl_flags:
            return plan, {}
        key = f"{self.variable}="
        argv = [f"{arg} {profile.erl_flags}" if arg.startswith(key) else arg for arg in plan.argv]
        tuned = LaunchPlan(argv, plan.config_path, plan.config_text, plan.settings)
        return tuned, {"erl_flags": profile.erl_flags}


def jvm_profile_argv(argv: list[str], profile: Profile) -> tuple[list[str], dict[str, Any]]:
    """``argv`` (``argv[0]`` is java) with the profile's heap and processor count.

    Existing ``-Xms``/``-Xmx``/``-XX:ActiveProcessorCount`` flags are replaced (HotSpot would
    take the last one given; replacing keeps the command line unambiguous). Flags go right
    after ``argv[0]``, before the main class or ``-jar``.
    """
    flags: list[str] = []
    dropped: list[str] = []
    knobs: dict[str, Any] = {}
    if profile.cpus is not None:
        flags.append(f"-XX:ActiveProcessorCount={profile.cpus}")
        dropped.append("-XX:ActiveProcessorCount=")
        knobs["active_processor_count"] = profile.cpus
    heap = profile.heap_mb
    if heap is not None:
        flags += [f"-Xms{heap}m", f"-Xmx{heap}m"]
        dropped += ["-Xms", "-Xmx"]
        knobs["heap_min"] = knobs["heap_max"] = f"{heap}m"
    if not flags:
        return list(argv), {}
    kept = [arg for arg in argv[1:] if not arg.startswith(tuple(dropped))]
    knobs["jvm_flags"] = flags
    return [argv[0], *flags, *kept], knobs


def refuse_heap_with_profile(broker: str, options: Mapping[str, Any], profile: Profile) -> None:
    """A profile that sets the heap and an explicit heap option: refuse, name both."""
    if profile.heap_mb is None:
        return
    given = sorted(key for key in ("heap", "heap_min") if options.get(key) is not None)
    if given:
        raise BrokerError(
            f"{broker} option {given[0]}={options[given[0]]!r} conflicts with resources profile "
            f"{profile.name!r} (heap {profile.heap_mb}m, half its memory limit); drop one"
        )


@dataclass(frozen=True)
class JvmFlags(ProfileKnobs):
    """``-XX:ActiveProcessorCount`` and a fixed heap of half the profile's memory."""

    def tune(
        self, broker: str, plan: LaunchPlan, profile: Profile, options: Mapping[str, Any]
    ) -> tuple[LaunchPlan, dict[str, Any]]:
        """Replace the JVM's heap and processor flags; ``heap_min``/``heap_max`` follow."""
        refuse_heap_with_profile(broker, options, profile)
        argv, knobs = jvm_profile_argv(plan.argv, profile)
        settings = dict(plan.settings)
        if "heap_max" in knobs:
            settings.update(heap_min=knobs["heap_min"], heap_max=knobs["heap_max"])
        return LaunchPlan(argv, plan.config_path, plan.config_text, settings), knobs
