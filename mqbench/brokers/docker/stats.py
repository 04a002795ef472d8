"""Container CPU and memory from the Docker stats API, as ``resources.csv`` rows.

The math (pure functions, checked against recorded stats JSON in ``tests/fixtures/docker``):

- CPU in cores between two readings of one container::

      cores = (cpu_usage.total_usage - prev total_usage)
              / (system_cpu_usage - prev system_cpu_usage) * online_cpus

  ``system_cpu_usage`` is the host's CPU time summed over all its CPUs, so
  ``delta_system / online_cpus`` is the wall time between the readings and the ratio is
  "CPU seconds per second" (1.0 = one core), the same unit as psutil samples.
  ``online_cpus`` falls back to the length of ``percpu_usage`` (old cgroup v1 engines).
- Memory without page cache (what ``docker stats`` calls usage, and what the paper reports
  as the broker's memory): cgroup v1 ``memory_stats.usage - memory_stats.stats.cache``;
  cgroup v2 ``memory_stats.usage - memory_stats.stats.inactive_file`` (the Docker API
  documentation's formulas). The cgroup version is told apart by the keys of
  ``memory_stats.stats``: v1 has ``cache``, v2 has ``inactive_file`` and no ``cache``.
  (The docker CLI subtracts ``total_inactive_file`` on v1 instead of ``cache``; that leaves
  active page cache in, so it reads higher than this.)

Sampling: ``ContainerStatsSource`` asks for one-shot stats (``one_shot=True``: no 1 s wait
for a second reading inside the daemon) once per tick and keeps each container's previous
reading, so CPU comes from two of *our* readings one tick apart. When one-shot is not
available the daemon's own ``precpu_stats`` is used for the first row. It writes one row
per container (role ``broker:<service>``) and one summed row (role ``broker``: the
target's total, e.g. TBMQ's four containers) per tick, in the ``resources.csv`` schema
``t_ns,role,pid,cpu_cores,rss_bytes``; ``pid`` is the container's main process on the
engine's host (``State.Pid``), an identifier only.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import psutil

from mqbench.brokers.resources.sampler import Sample


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU counters of one container at one moment (nanoseconds)."""

    total_usage_ns: int
    system_usage_ns: int
    online_cpus: int


def cpu_reading(cpu_stats: Mapping[str, Any] | None) -> CpuReading | None:
    """Parse ``cpu_stats`` (or ``precpu_stats``); None when it holds no usable counters."""
    if not cpu_stats:
        return None
    usage = cpu_stats.get("cpu_usage") or {}
    total = usage.get("total_usage")
    system = cpu_stats.get("system_cpu_usage")
    if total is None or not system:  # one-shot documents carry an all-zero precpu_stats
        return None
    online = cpu_stats.get("online_cpus") or len(usage.get("percpu_usage") or ())
    if not online:
        return None
    return CpuReading(int(total), int(system), int(online))


def cpu_cores(prev: CpuReading, cur: CpuReading) -> float | None:
    """Cores used between two readings; None when the counters did not advance sanely."""
    delta_cpu = cur.total_usage_ns - prev.total_usage_ns
    delta_system = cur.system_usage_ns - prev.system_usage_ns
    if delta_system <= 0 or delta_cpu < 0:
        return None
    return delta_cpu / delta_system * cur.online_cpus


def cgroup_version(memory_stats: Mapping[str, Any]) -> int | None:
    """1 or 2 from the keys of ``memory_stats.stats``; None when there are no stats."""
    stats = memory_stats.get("stats") or {}
    if "cache" in stats:
        return 1
    if "inactive_file" in stats:
        return 2
    return None


def memory_bytes(memory_stats: Mapping[str, Any] | None) -> int | None:
    """Memory used without page cache (module docstring); None when there is no usage."""
    if not memory_stats or memory_stats.get("usage") is None:
        return None
    usage = int(memory_stats["usage"])
    stats = memory_stats.get("stats") or {}
    version = cgroup_version(memory_stats)
    if version == 1:
        cache = int(stats["cache"])
    elif version == 2:
        cache = int(stats["inactive_file"])
    else:
        cache = 0
    return max(usage - cache, 0)


def cpu_cores_from_stats(stats: Mapping[str, Any]) -> float | None:
    """Cores from one non-one-shot stats document (``cpu_stats`` vs ``precpu_stats``)."""
    prev = cpu_reading(stats.get("precpu_stats"))
    cur = cpu_reading(stats.get("cpu_stats"))
    if prev is None or cur is None:
        return None
    return cpu_cores(prev, cur)


@dataclass(frozen=True)
class ContainerRef:
    """A container to sample: its id, its compose service and its main PID."""

    id: str
    service: str
    pid: int = 0


StatsReader = Callable[[str], Mapping[str, Any]]
"""``container id -> one stats document`` (the Docker SDK in production, recordings in tests)."""


def sdk_stats_reader(api: Any) -> StatsReader:
    """A reader over the Docker SDK's low-level client (``docker.APIClient``).

    Uses one-shot stats (API >= 1.41); on older engines falls back to the regular
    single read, which waits about a second inside the daemon to fill ``precpu_stats``.
    """
    state = {"one_shot": True}

    def read(container_id: str) -> Mapping[str, Any]:
        if state["one_shot"]:
            try:
                result: Mapping[str, Any] = api.stats(container_id, stream=False, one_shot=True)
                return result
            except Exception as exc:  # docker.errors.InvalidVersion on old APIs
                if type(exc).__name__ != "InvalidVersion":
                    raise
                state["one_shot"] = False
        fallback: Mapping[str, Any] = api.stats(container_id, stream=False)
        return fallback

    return read


class ContainerStatsSource:
    """Per-tick container samples for ``ResourceSampler`` (see the module docstring)."""

    def __init__(
        self,
        containers: Sequence[ContainerRef],
        reader: StatsReader,
        role: str = "broker",
        proxies: ProxyCpu | None = None,
    ) -> None:
        """Sample ``containers`` through ``reader``; rows use ``role`` and ``role:<service>``;
        ``proxies`` add a ``docker-proxy`` row (not part of ``role``'s sum: it runs outside
        the containers)."""
        self.containers = list(containers)
        self.role = role
        self._proxies = proxies
        self._reader = reader
        self._prev: dict[str, CpuReading] = {}
        self._lock = threading.Lock()
        self.last_error: str | None = None
        """The last error reading a container's stats (that container is skipped)."""

    def sample(self, t_ns: int) -> list[Sample]:
        """One tick: a row per container that has both CPU and memory, plus the summed row.

        The first reading of a container is its baseline (no row) unless the document
        carries ``precpu_stats``. Containers that fail to answer are skipped this tick.
        """
        with self._lock:
            rows: list[Sample] = []
            for ref in self.containers:
                row = self._sample_one(ref, t_ns)
                if row is not None:
                    rows.append(row)
            proxy = self._proxies.sample(t_ns) if self._proxies is not None else None
            if not rows:
                return [proxy] if proxy is not None else []
            total = Sample(
                t_ns,
                self.role,
                self.containers[0].pid,
                sum(r.cpu_cores for r in rows),
                sum(r.rss_bytes for r in rows),
            )
            return [total, *rows, *([proxy] if proxy is not None else [])]

    def _sample_one(self, ref: ContainerRef, t_ns: int) -> Sample | None:
        try:
            stats = self._reader(ref.id)
        except Exception as exc:  # a stopped/removed container: skip, keep sampling
            self.last_error = f"{ref.service}: {type(exc).__name__}: {exc}"
            return None
        cur = cpu_reading(stats.get("cpu_stats"))
        mem = memory_bytes(stats.get("memory_stats"))
        if cur is None or mem is None:
            return None
        prev = self._prev.get(ref.id) or cpu_reading(stats.get("precpu_stats"))
        self._prev[ref.id] = cur
        if prev is None:
            return None
        cores = cpu_cores(prev, cur)
        if cores is None:
            return None
        return Sample(t_ns, f"{self.role}:{ref.service}", ref.pid, cores, mem)


PROXY_ROLE = "docker-proxy"
"""``resources.csv`` role of the userland proxies that carry a container's published ports."""


def proxy_pids(ports: Sequence[int], processes: Iterable[Any] | None = None) -> list[int]:
    """PIDs of the ``docker-proxy`` processes publishing any of ``ports`` on this machine.

    dockerd's default ``"userland-proxy": true`` starts one per published port (and address
    family); it copies every byte of every client connection, outside the container, so
    docker stats never counts its CPU. ``processes``: ``psutil.process_iter`` rows (tests).
    """
    wanted = {str(port) for port in ports}
    found: list[int] = []
    for proc in processes if processes is not None else psutil.process_iter(["cmdline"]):
        argv: list[str] = proc.info.get("cmdline") or []
        if not argv or PurePath(argv[0]).name != "docker-proxy" or "-host-port" not in argv:
            continue
        at = argv.index("-host-port") + 1
        if argv[at : at + 1] and argv[at] in wanted:
            found.append(int(proc.pid))
    return sorted(found)


class ProxyCpu:
    """One ``docker-proxy`` row per tick: CPU (cores) and RSS of the proxies, summed."""

    def __init__(self, pids: Sequence[int], process: Callable[[int], Any] = psutil.Process) -> None:
        """Sample ``pids``; a proxy that is gone is left out."""
        self._procs: list[Any] = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                self._procs.append(process(pid))
        self._prev: dict[int, tuple[int, float]] = {}

    def sample(self, t_ns: int) -> Sample | None:
        """The proxies' row for the tick at ``t_ns`` (None at the first tick: a baseline)."""
        cores = 0.0
        rss = 0
        complete = bool(self._procs)
        for proc in self._procs:
            try:
                times = proc.cpu_times()
                rss += int(proc.memory_info().rss)
            except psutil.Error:
                continue
            cpu = float(times.user + times.system)
            prev = self._prev.get(proc.pid)
            self._prev[proc.pid] = (t_ns, cpu)
            if prev is None or t_ns <= prev[0]:
                complete = False
                continue
            cores += (cpu - prev[1]) / ((t_ns - prev[0]) / 1e9)
        if not complete:
            return None
        return Sample(t_ns, PROXY_ROLE, self._procs[0].pid, cores, rss)
