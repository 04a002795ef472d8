"""1 Hz CPU and RSS samples of the broker and generator processes -> ``resources.csv``.

Each *role* (``broker``, ``generator``, ...) is a set of root PIDs; a sample covers the
roots and all their descendants (``children(recursive=True)``). One CSV row per role per
tick (docs/results.md)::

    t_ns,role,pid,cpu_cores,rss_bytes

- ``t_ns``: ``time.time_ns()`` at the sample, the clock the records use.
- ``pid``: the role's first root PID (an identifier, not the only process counted).
- ``cpu_cores``: CPU time (user + system) used by the role's processes since the previous
  sample, divided by the monotonic wall time between the two samples (1.0 = one core).
  A process first seen at this sample counts in full when it was created after the
  previous sample, otherwise it only sets its baseline. CPU a process used between the
  last sample and its exit is lost (it cannot be read after the exit); processes that
  vanish are otherwise tolerated. Times of reaped children (``children_user``) are not
  used because they would count children twice.
- ``rss_bytes``: sum of the processes' resident set sizes (shared pages count once per
  process, as ``ps`` shows them).

A role with no live process at a tick writes no row; ``forget(pid)`` drops a root that
exited (the engine calls it when the broker dies), so a dead broker gets no rows of 0 CPU
and 0 RSS. The first sample of a role (at
``start`` or ``add_role``) is a baseline and writes no row either.

Besides process roles, *sources* (``add_source``) contribute ready-made rows each tick, e.g.
container stats from the Docker API (``docker_stats.ContainerStatsSource``: role
``broker`` summed over a target's containers plus ``broker:<service>`` per container). A
source is called once at ``start`` (or when added to a running sampler) for its baseline;
those rows are discarded.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Protocol

import psutil

CSV_HEADER = "t_ns,role,pid,cpu_cores,rss_bytes"
"""First line of ``resources.csv``."""


class CpuTimesLike(Protocol):
    """The part of ``psutil.Process.cpu_times()`` the sampler reads."""

    @property
    def user(self) -> float:
        """User CPU seconds."""
        ...

    @property
    def system(self) -> float:
        """System CPU seconds."""
        ...


class MemoryInfoLike(Protocol):
    """The part of ``psutil.Process.memory_info()`` the sampler reads."""

    @property
    def rss(self) -> int:
        """Resident set size in bytes."""
        ...


class ProcessLike(Protocol):
    """The part of ``psutil.Process`` the sampler uses (fakes implement this in tests)."""

    @property
    def pid(self) -> int:
        """Process id."""
        ...

    def create_time(self) -> float:
        """Creation time, seconds since the epoch."""
        ...

    def cpu_times(self) -> CpuTimesLike:
        """Cumulative CPU times."""
        ...

    def memory_info(self) -> MemoryInfoLike:
        """Memory usage."""
        ...

    def children(self, recursive: bool = False) -> Sequence[ProcessLike]:
        """Child processes (all descendants when ``recursive``)."""
        ...


class SampleSource(Protocol):
    """Something that produces ready-made rows per tick (e.g. container stats)."""

    def sample(self, t_ns: int) -> list[Sample]:
        """Rows for the tick at ``t_ns``; may be empty; should not raise."""
        ...


ProcessFactory = Callable[[int], ProcessLike]
"""``pid -> process``; raises ``psutil.NoSuchProcess`` when the PID does not exist."""

GONE = (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError)
"""Errors that mean a process vanished or cannot be read; it is skipped."""


@dataclass(frozen=True)
class Sample:
    """One row of ``resources.csv``."""

    t_ns: int
    role: str
    pid: int
    cpu_cores: float
    rss_bytes: int

    def csv_line(self) -> str:
        """The row as written to the file (CPU with 6 decimals)."""
        return f"{self.t_ns},{self.role},{self.pid},{self.cpu_cores:.6f},{self.rss_bytes}"


@dataclass
class _Role:
    name: str
    roots: list[int]
    cache: dict[int, ProcessLike] = field(default_factory=dict)
    prev_cpu: dict[int, float] = field(default_factory=dict)
    prev_mono_ns: int | None = None
    prev_wall_ns: int | None = None


def _psutil_process(pid: int) -> ProcessLike:
    return psutil.Process(pid)


class ResourceSampler:
    """Background thread writing one CSV row per role per ``interval_s`` (default 1 s)."""

    def __init__(
        self,
        path: Path,
        roles: Mapping[str, Iterable[int]] | None = None,
        interval_s: float = 1.0,
        process_factory: ProcessFactory = _psutil_process,
        clock_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        """Sample ``roles`` (name -> root PIDs) into the CSV file at ``path``.

        ``process_factory``, ``clock_ns`` (row timestamps) and ``monotonic_ns`` (CPU-rate
        denominators) are injectable so the arithmetic can be tested without real processes.
        """
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.path = path
        self.interval_s = interval_s
        self._factory = process_factory
        self._clock_ns = clock_ns
        self._monotonic_ns = monotonic_ns
        self._roles: dict[str, _Role] = {}
        self._sources: list[SampleSource] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._file: IO[str] | None = None
        self._good_size = 0
        self.rows_written = 0
        """Rows written so far (header not counted)."""
        self.last_error: str | None = None
        """The last unexpected error in the sampling thread (it keeps running)."""
        for role, pids in (roles or {}).items():
            self.add_role(role, pids)

    @property
    def running(self) -> bool:
        """True between ``start`` and ``stop``."""
        return self._thread is not None and self._thread.is_alive()

    def roles(self) -> dict[str, list[int]]:
        """Role name -> root PIDs."""
        with self._lock:
            return {name: list(role.roots) for name, role in self._roles.items()}

    def add_role(self, role: str, pids: Iterable[int]) -> None:
        """Sample ``pids`` (and their descendants) as ``role``; may be called while running.

        Adding PIDs to an existing role extends it. When the sampler has started, the new
        processes get their baseline now and appear in the next tick's row.
        """
        if not role or any(ch in role for ch in ",\r\n"):
            raise ValueError(f"invalid role name {role!r}")
        new = [int(pid) for pid in pids]
        with self._lock:
            state = self._roles.get(role)
            if state is None:
                state = self._roles[role] = _Role(role, [])
            state.roots.extend(pid for pid in new if pid not in state.roots)
            if self._file is not None:
                self._measure(state, self._clock_ns())

    def forget(self, pid: int) -> None:
        """Stop sampling root ``pid`` (it exited); a role left without roots writes no rows."""
        with self._lock:
            for state in self._roles.values():
                if pid in state.roots:
                    state.roots.remove(pid)
                    state.cache.pop(pid, None)

    def add_source(self, source: SampleSource) -> None:
        """Write ``source``'s rows every tick; when running, take its baseline now."""
        with self._lock:
            self._sources.append(source)
            if self._file is not None:
                self._call_source(source, self._clock_ns())

    def _call_source(self, source: SampleSource, wall_ns: int) -> list[Sample]:
        try:
            return list(source.sample(wall_ns))
        except Exception as exc:  # a source must not stop the process roles
            self.last_error = f"{type(exc).__name__}: {exc}"
            return []

    def start(self) -> None:
        """Open the CSV (header), take baselines and start the sampling thread."""
        with self._lock:
            if self._file is not None:
                raise RuntimeError("sampler already started")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8", newline="\n")
            self._file.write(CSV_HEADER + "\n")
            self._file.flush()
            self._good_size = len(CSV_HEADER) + 1
            wall = self._clock_ns()
            for state in self._roles.values():
                self._measure(state, wall)
            for source in self._sources:
                self._call_source(source, wall)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="mqbench-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (bounded wait) and close the file; idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.interval_s + 5.0)
        with self._lock:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None

    def __enter__(self) -> ResourceSampler:
        """Start sampling."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop sampling."""
        self.stop()

    def sample_once(self) -> list[Sample]:
        """Take one sample of every role, write the rows and return them.

        Called by the thread once per interval; tests call it directly (after ``start`` or
        on an unstarted sampler, where it measures but writes nothing).
        """
        with self._lock:
            wall = self._clock_ns()
            samples = [
                sample
                for state in self._roles.values()
                if (sample := self._measure(state, wall)) is not None
            ]
            for source in self._sources:
                samples.extend(self._call_source(source, wall))
            if self._file is not None and samples:
                self._write_rows("".join(s.csv_line() + "\n" for s in samples))
                self.rows_written += len(samples)
            return samples

    def _write_rows(self, text: str) -> None:
        """Write whole rows; on a write error cut the file back to its last whole row and
        stop writing (a full disk never leaves a torn row)."""
        file = self._file
        assert file is not None
        try:
            file.write(text)
            file.flush()
        except OSError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            self._file = None
            with contextlib.suppress(OSError, ValueError):
                file.close()  # may still flush part of the buffer: cut it off below
            with contextlib.suppress(OSError, ValueError):
                os.truncate(self.path, self._good_size)
            return
        self._good_size += len(text.encode("utf-8"))

    def _run(self) -> None:
        next_tick = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_tick - time.monotonic())):
            try:
                self.sample_once()
            except Exception as exc:  # keep sampling; report via last_error
                self.last_error = f"{type(exc).__name__}: {exc}"
            next_tick += self.interval_s
            now = time.monotonic()
            if next_tick < now:  # fell behind (suspended, overloaded): skip missed ticks
                next_tick = now + self.interval_s

    def _processes(self, state: _Role) -> dict[int, ProcessLike]:
        procs: dict[int, ProcessLike] = {}
        for pid in state.roots:
            proc = state.cache.get(pid)
            if proc is None:
                try:
                    proc = self._factory(pid)
                except GONE:
                    continue
                state.cache[pid] = proc
            procs[pid] = proc
            try:
                descendants = proc.children(recursive=True)
            except GONE:
                state.cache.pop(pid, None)
                continue
            for child in descendants:
                procs.setdefault(child.pid, child)
        return procs

    def _measure(self, state: _Role, wall_ns: int) -> Sample | None:
        cpu_now: dict[int, float] = {}
        created: dict[int, float] = {}
        rss = 0
        for pid, proc in self._processes(state).items():
            try:
                times = proc.cpu_times()
                mem = proc.memory_info()
                if state.prev_wall_ns is not None and pid not in state.prev_cpu:
                    created[pid] = proc.create_time()
            except GONE:
                state.cache.pop(pid, None)
                continue
            cpu_now[pid] = times.user + times.system
            rss += mem.rss
        # The rate's interval ends when this role's CPU times were read, not when the sample
        # began: a read delayed by other roles or by the GIL (the generator shares this
        # process) would otherwise move CPU time from one interval into the next and show a
        # capped broker above its quota for one sample and below it for the next.
        mono_ns = self._monotonic_ns()
        prev_mono, prev_wall, prev_cpu = state.prev_mono_ns, state.prev_wall_ns, state.prev_cpu
        state.prev_cpu, state.prev_mono_ns, state.prev_wall_ns = cpu_now, mono_ns, wall_ns
        if prev_mono is None or prev_wall is None or not cpu_now or mono_ns <= prev_mono:
            return None
        used = 0.0
        for pid, cpu in cpu_now.items():
            before = prev_cpu.get(pid)
            if before is None:
                # first seen now: all of its CPU is new only if it started after the last sample
                if created.get(pid, 0.0) * 1e9 >= prev_wall:
                    used += cpu
            elif cpu >= before:
                used += cpu - before
            else:  # PID reused by a new process within one interval
                used += cpu
        cores = used / ((mono_ns - prev_mono) / 1e9)
        return Sample(wall_ns, state.name, state.roots[0], cores, rss)
