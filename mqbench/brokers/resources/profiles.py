"""Resource profiles for brokers: CPU and memory limits plus matched threads.

The Docker runtime applies them as container limits (below); the native runtime as a cgroup
per broker with the same thread settings (``native_profiles.py``, docs/brokers.md).

The mq-bench paper ran every broker in a container on VMs of 1 vCPU / 2 GB, 2 vCPU / 4 GB
and 4 vCPU / 8 GB and tuned thread pools to the vCPUs. A profile reproduces one such size
with Docker limits (``cpus``, ``mem_limit``) and tells each runtime how many threads to
use, because a CPU quota does not change the number of CPUs a process *sees*:

- Go (NATS): ``GOMAXPROCS=<cpus>``;
- Erlang (EMQX, RabbitMQ): ``+S <cpus>:<cpus>`` schedulers;
- JVM (HiveMQ, Artemis, TBMQ): ``-XX:ActiveProcessorCount=<cpus>`` and a fixed heap of half
  the memory limit (``-Xms`` = ``-Xmx``, so the heap does not grow during a run);
- Kafka, PostgreSQL and Valkey next to TBMQ (and Redis next to the TBMQ-style broker) are
  *auxiliary* services with their own fixed limits (``MQBENCH_AUX_*``), so the profile
  always describes the broker container itself.

``unlimited`` sets no limit (Docker reads ``0`` as "no limit") and leaves thread counts to
the brokers' own defaults. The compose files read every value from these variables; their
defaults (used by a hand-run ``docker compose up``) are the ``2cpu-4g`` values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mqbench.errors import BrokerError

DEFAULT_PROFILE = "2cpu-4g"
"""Profile used when none is given (the middle VM of the paper)."""

AUX_CPUS = "1"
"""CPU limit of each auxiliary container (Kafka, PostgreSQL, Valkey/Redis)."""
AUX_MEM = "1g"
"""Memory limit of each auxiliary container."""
AUX_JVM_HEAP_MB = 512
"""Kafka's fixed heap inside its auxiliary container."""
HEAP_FRACTION = 0.5
"""Share of a JVM broker's memory limit given to its heap (the rest: metaspace, direct
buffers, thread stacks, page cache of the container)."""


@dataclass(frozen=True)
class Profile:
    """One resource profile: limits and the thread and heap settings derived from them."""

    name: str
    cpus: int | None
    """CPU limit in cores; None = no limit."""
    mem_mb: int | None
    """Memory limit in MiB; None = no limit."""

    @property
    def cpus_value(self) -> str:
        """Compose ``cpus`` value (``"0"`` = no limit)."""
        return str(self.cpus) if self.cpus is not None else "0"

    @property
    def mem_value(self) -> str:
        """Compose ``mem_limit`` value, e.g. ``"2048m"`` (``"0"`` = no limit)."""
        return f"{self.mem_mb}m" if self.mem_mb is not None else "0"

    @property
    def threads(self) -> str:
        """Thread count for GOMAXPROCS-like settings ('' = the broker's default)."""
        return str(self.cpus) if self.cpus is not None else ""

    @property
    def erl_flags(self) -> str:
        """Erlang VM flags: ``+S N:N`` schedulers ('' = one per visible CPU)."""
        return f"+S {self.cpus}:{self.cpus}" if self.cpus is not None else ""

    @property
    def heap_mb(self) -> int | None:
        """JVM heap in MiB (half the memory limit); None without a memory limit."""
        return int(self.mem_mb * HEAP_FRACTION) if self.mem_mb is not None else None

    @property
    def jvm_opts(self) -> str:
        """JVM options: processor count and fixed heap, or a RAM percentage when unlimited."""
        opts: list[str] = []
        if self.cpus is not None:
            opts.append(f"-XX:ActiveProcessorCount={self.cpus}")
        heap = self.heap_mb
        if heap is not None:
            opts += [f"-Xms{heap}m", f"-Xmx{heap}m"]
        else:
            opts.append("-XX:MaxRAMPercentage=50.0")
        return " ".join(opts)

    def cpuset(self, cpus: Sequence[int]) -> tuple[int, ...] | None:
        """The CPUs a broker under this profile is pinned to, out of ``cpus`` (the CPUs
        mqbench may use): the first ``self.cpus`` of them, like a VM's vCPUs; None without
        a CPU limit. The one rule every runtime that pins a profiled broker follows, so the
        generator can be given the other CPUs (``workload.cell_timing``)."""
        if self.cpus is None:
            return None
        return tuple(sorted(cpus)[: self.cpus])

    def env(self) -> dict[str, str]:
        """Variables the compose files read (``MQBENCH_*``)."""
        return {
            "MQBENCH_PROFILE": self.name,
            "MQBENCH_CPUS": self.cpus_value,
            "MQBENCH_MEM": self.mem_value,
            "MQBENCH_THREADS": self.threads,
            "MQBENCH_ERL_FLAGS": self.erl_flags,
            "MQBENCH_JVM_OPTS": self.jvm_opts,
            "MQBENCH_AUX_CPUS": AUX_CPUS,
            "MQBENCH_AUX_MEM": AUX_MEM,
            "MQBENCH_AUX_JVM_OPTS": f"-Xms{AUX_JVM_HEAP_MB}m -Xmx{AUX_JVM_HEAP_MB}m",
        }

    def describe(self) -> dict[str, object]:
        """Manifest facts: limits and every derived setting."""
        return {
            "name": self.name,
            "cpus": self.cpus,
            "mem_mb": self.mem_mb,
            "threads": self.threads or None,
            "erl_flags": self.erl_flags or None,
            "jvm_opts": self.jvm_opts,
            "aux": {"cpus": AUX_CPUS, "mem": AUX_MEM, "kafka_heap_mb": AUX_JVM_HEAP_MB},
        }


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("1cpu-2g", 1, 2048),
        Profile("2cpu-4g", 2, 4096),
        Profile("4cpu-8g", 4, 8192),
        Profile("unlimited", None, None),
    )
}
"""All profiles by name: the paper's three VM sizes and ``unlimited``."""


def profile_names() -> list[str]:
    """Names of all profiles."""
    return list(PROFILES)


def get_profile(name: str | None) -> Profile:
    """The profile called ``name`` (None: the default); ``BrokerError`` listing known names."""
    key = DEFAULT_PROFILE if name is None else name
    try:
        return PROFILES[key]
    except KeyError:
        known = ", ".join(profile_names())
        raise BrokerError(f"unknown resource profile {key!r} (known: {known})") from None
