"""ResourceSampler: CPU-core and RSS arithmetic with fake processes and an injected clock."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from mqbench.brokers.resources.sampler import CSV_HEADER, ProcessLike, ResourceSampler, Sample

SECOND = 1_000_000_000
WALL0 = 1_700_000_000 * SECOND


@dataclass
class FakeTimes:
    user: float
    system: float


@dataclass
class FakeMemory:
    rss: int


@dataclass
class FakeProcess:
    world: FakeWorld
    pid: int
    parent: int | None = None
    user: float = 0.0
    system: float = 0.0
    rss: int = 0
    created_s: float = 0.0
    gone: bool = False

    def _check(self) -> None:
        if self.gone:
            raise psutil.NoSuchProcess(self.pid)

    def create_time(self) -> float:
        self._check()
        return self.created_s

    def cpu_times(self) -> FakeTimes:
        self._check()
        return FakeTimes(self.user, self.system)

    def memory_info(self) -> FakeMemory:
        self._check()
        return FakeMemory(self.rss)

    def children(self, recursive: bool = False) -> Sequence[ProcessLike]:
        self._check()
        found: list[ProcessLike] = []
        frontier = [self.pid]
        while frontier:
            parent = frontier.pop()
            for proc in self.world.procs.values():
                if proc.parent == parent and not proc.gone:
                    found.append(proc)
                    if recursive:
                        frontier.append(proc.pid)
        return found


@dataclass
class FakeWorld:
    """Fake process table plus one clock for wall and monotonic time."""

    procs: dict[int, FakeProcess] = field(default_factory=dict)
    mono_ns: int = 5 * SECOND
    wall_ns: int = WALL0
    factory_calls: int = 0

    def spawn(self, pid: int, parent: int | None = None, **kw: float) -> FakeProcess:
        proc = FakeProcess(self, pid, parent, created_s=self.wall_ns / SECOND, **kw)  # type: ignore[arg-type]
        self.procs[pid] = proc
        return proc

    def process(self, pid: int) -> ProcessLike:
        self.factory_calls += 1
        proc = self.procs.get(pid)
        if proc is None or proc.gone:
            raise psutil.NoSuchProcess(pid)
        return proc

    def advance(self, seconds: float) -> None:
        self.mono_ns += int(seconds * SECOND)
        self.wall_ns += int(seconds * SECOND)

    def sampler(self, path: Path, roles: dict[str, list[int]]) -> ResourceSampler:
        return ResourceSampler(
            path,
            roles,
            process_factory=self.process,
            clock_ns=lambda: self.wall_ns,
            monotonic_ns=lambda: self.mono_ns,
        )


def read_rows(path: Path) -> list[list[str]]:
    lines = path.read_text().splitlines()
    assert lines[0] == CSV_HEADER
    return [line.split(",") for line in lines[1:]]


def test_cpu_cores_is_cpu_time_delta_over_wall_delta_summed_over_descendants(
    tmp_path: Path,
) -> None:
    world = FakeWorld()
    root = world.spawn(10, user=3.0, system=1.0, rss=1000)
    child = world.spawn(11, parent=10, user=7.0, rss=200)
    grandchild = world.spawn(12, parent=11, system=2.0, rss=30)
    world.spawn(99, user=50.0, rss=10**9)  # unrelated process: never counted
    sampler = world.sampler(tmp_path / "resources.csv", {"broker": [10]})
    sampler.start()
    try:
        world.advance(2.0)
        root.user += 0.5
        root.system += 0.25
        child.user += 0.75
        grandchild.system += 0.5
        root.rss = 4000
        samples = sampler.sample_once()
    finally:
        sampler.stop()

    assert samples == [Sample(world.wall_ns, "broker", 10, 1.0, 4230)]
    assert read_rows(tmp_path / "resources.csv") == [
        [str(world.wall_ns), "broker", "10", "1.000000", "4230"]
    ]


def test_first_sample_of_a_role_is_a_baseline_without_a_row(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10, user=100.0)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    assert sampler.sample_once() == []  # baseline
    world.advance(1.0)
    world.procs[10].user += 0.25
    (sample,) = sampler.sample_once()
    assert sample.cpu_cores == 0.25


def test_each_role_gets_one_row_named_by_its_first_root_pid(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10, rss=5)
    world.spawn(20, rss=7)
    world.spawn(21, rss=11)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10], "generator": [20, 21]})
    sampler.start()
    world.advance(0.5)
    world.procs[20].user += 0.25
    world.procs[21].system += 0.125
    sampler.sample_once()
    sampler.stop()
    assert read_rows(tmp_path / "r.csv") == [
        [str(world.wall_ns), "broker", "10", "0.000000", "5"],
        [str(world.wall_ns), "generator", "20", "0.750000", "18"],
    ]


def test_a_child_vanishing_is_tolerated_and_only_survivors_count(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10, rss=100)
    child = world.spawn(11, parent=10, rss=50)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.sample_once()
    world.advance(1.0)
    world.procs[10].user += 0.5
    child.user += 0.75
    child.gone = True
    (sample,) = sampler.sample_once()
    assert (sample.cpu_cores, sample.rss_bytes) == (0.5, 100)


def test_a_process_that_vanishes_between_listing_and_reading_is_skipped(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10, rss=100)
    child = world.spawn(11, parent=10, rss=50)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.sample_once()
    world.advance(1.0)

    def vanish() -> FakeTimes:
        raise psutil.NoSuchProcess(11)

    child.cpu_times = vanish  # type: ignore[method-assign]
    (sample,) = sampler.sample_once()
    assert (sample.cpu_cores, sample.rss_bytes) == (0.0, 100)


def test_a_child_started_after_the_previous_sample_counts_in_full(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.sample_once()
    world.advance(0.5)
    world.spawn(11, parent=10, user=0.25)  # created now, after the last sample
    world.advance(0.5)
    world.procs[11].user += 0.25
    (sample,) = sampler.sample_once()
    assert sample.cpu_cores == 0.5


def test_a_process_first_seen_late_but_created_earlier_only_sets_its_baseline(
    tmp_path: Path,
) -> None:
    world = FakeWorld()
    world.spawn(10)
    old = world.spawn(11, user=40.0)  # not yet a child of 10
    world.advance(1.0)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.sample_once()
    world.advance(1.0)
    old.parent = 10  # e.g. re-parented: all 40 s were used long before
    (sample,) = sampler.sample_once()
    assert sample.cpu_cores == 0.0
    world.advance(1.0)
    old.user += 0.5
    (sample,) = sampler.sample_once()
    assert sample.cpu_cores == 0.5


def test_a_reused_pid_with_less_cpu_counts_as_a_new_process(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10)
    world.spawn(11, parent=10, user=9.0)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.sample_once()
    world.advance(1.0)
    world.spawn(11, parent=10, user=0.25)
    (sample,) = sampler.sample_once()
    assert sample.cpu_cores == 0.25


def test_a_role_without_live_processes_writes_no_row(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10)
    world.spawn(20)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10], "generator": [20]})
    sampler.sample_once()
    world.procs[10].gone = True
    world.advance(1.0)
    assert [s.role for s in sampler.sample_once()] == ["generator"]


def test_root_process_objects_are_created_once_and_reused(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    for _ in range(4):
        sampler.sample_once()
        world.advance(1.0)
    assert world.factory_calls == 1


def test_a_role_added_while_running_starts_with_a_baseline(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10)
    world.spawn(20, user=30.0)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.start()
    try:
        world.advance(1.0)
        sampler.add_role("generator", [20])
        world.advance(1.0)
        world.procs[20].user += 1.5
        samples = sampler.sample_once()
    finally:
        sampler.stop()
    assert [(s.role, s.cpu_cores) for s in samples] == [("broker", 0.0), ("generator", 1.5)]
    assert sampler.roles() == {"broker": [10], "generator": [20]}


def test_cpu_rate_uses_the_monotonic_clock_not_wall_clock_steps(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.sample_once()
    world.mono_ns += 2 * SECOND
    world.wall_ns += 60 * SECOND  # e.g. NTP step
    world.procs[10].user += 1.0
    (sample,) = sampler.sample_once()
    assert sample.cpu_cores == 0.5
    assert sample.t_ns == world.wall_ns


def test_a_late_read_of_cpu_times_does_not_move_cpu_time_into_the_wrong_interval(
    tmp_path: Path,
) -> None:
    # A broker capped at one core: 1 s of CPU per 1 s. The second read of its CPU times is
    # held up 0.25 s (the generator held the GIL); the interval must end at the read, or that
    # sample shows 1.25 cores and the next 0.75.
    world = FakeWorld()
    broker = world.spawn(10)
    sampler = world.sampler(tmp_path / "r.csv", {"broker": [10]})
    sampler.sample_once()
    rates = []
    for late in (0.25, 0.0):
        world.advance(1.0)
        broker.user += 1.0
        if late:
            original = broker.cpu_times

            def delayed(late: float = late, original: object = original) -> FakeTimes:
                world.advance(late)
                broker.user += late
                broker.cpu_times = original  # type: ignore[method-assign]
                return original()  # type: ignore[operator, no-any-return]

            broker.cpu_times = delayed  # type: ignore[method-assign]
        (sample,) = sampler.sample_once()
        rates.append(sample.cpu_cores)
    assert rates == [pytest.approx(1.0), pytest.approx(1.0)]


def test_role_names_that_would_break_the_csv_are_refused(tmp_path: Path) -> None:
    sampler = ResourceSampler(tmp_path / "r.csv")
    with pytest.raises(ValueError, match="invalid role name"):
        sampler.add_role("broker,x", [1])


def test_background_thread_writes_flushed_rows_each_interval(tmp_path: Path) -> None:
    world = FakeWorld()
    world.spawn(10, rss=123)
    path = tmp_path / "r.csv"
    sampler = ResourceSampler(
        path, {"broker": [10]}, interval_s=0.05, process_factory=world.process
    )
    with sampler:
        deadline = time.monotonic() + 5
        while sampler.rows_written < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        rows_while_running = read_rows(path)  # flushed: readable before stop
        assert sampler.running
    assert not sampler.running
    assert len(rows_while_running) >= 3
    assert all(row[1:3] == ["broker", "10"] and row[4] == "123" for row in rows_while_running)
    sampler.stop()  # idempotent
    assert sampler.last_error is None


def test_samples_a_real_busy_process_with_psutil(tmp_path: Path) -> None:
    sampler = ResourceSampler(tmp_path / "r.csv", {"generator": [os.getpid()]})
    sampler.sample_once()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        pass
    (sample,) = sampler.sample_once()
    assert sample.cpu_cores > 0.2
    assert sample.rss_bytes > 10 * 1024 * 1024
