"""Container CPU/memory math against recorded stats JSON (cgroup v1 and v2), and the source."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mqbench.brokers.docker.stats import (
    ContainerRef,
    ContainerStatsSource,
    ProxyCpu,
    cgroup_version,
    cpu_cores,
    cpu_cores_from_stats,
    cpu_reading,
    memory_bytes,
    proxy_pids,
)
from mqbench.brokers.resources.sampler import CSV_HEADER, ResourceSampler

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docker"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def test_cgroup_v1_cpu_is_usage_delta_over_system_delta_times_cpus() -> None:
    t0, t1 = load("cgroup_v1_oneshot_t0"), load("cgroup_v1_oneshot_t1")
    prev, cur = cpu_reading(t0["cpu_stats"]), cpu_reading(t1["cpu_stats"])
    assert prev is not None and cur is not None
    assert cpu_cores(prev, cur) == pytest.approx(1.5)


def test_cgroup_v1_without_online_cpus_counts_percpu_entries() -> None:
    reading = cpu_reading(load("cgroup_v1_oneshot_t1")["cpu_stats"])
    assert reading is not None and reading.online_cpus == 4


def test_cgroup_v1_memory_subtracts_the_page_cache() -> None:
    assert cgroup_version(load("cgroup_v1_oneshot_t0")["memory_stats"]) == 1
    assert memory_bytes(load("cgroup_v1_oneshot_t0")["memory_stats"]) == 200_000_000
    assert memory_bytes(load("cgroup_v1_oneshot_t1")["memory_stats"]) == 209_500_000


def test_cgroup_v2_cpu_and_memory_without_inactive_file() -> None:
    t0, t1 = load("cgroup_v2_oneshot_t0"), load("cgroup_v2_oneshot_t1")
    prev, cur = cpu_reading(t0["cpu_stats"]), cpu_reading(t1["cpu_stats"])
    assert prev is not None and cur is not None
    assert cpu_cores(prev, cur) == pytest.approx(0.5)
    assert cgroup_version(t1["memory_stats"]) == 2
    assert memory_bytes(t0["memory_stats"]) == 380_000_000
    assert memory_bytes(t1["memory_stats"]) == 402_000_000


def test_regular_read_uses_the_daemons_precpu_stats() -> None:
    assert cpu_cores_from_stats(load("cgroup_v2_with_precpu")) == pytest.approx(0.5)


def test_one_shot_documents_have_no_usable_precpu_reading() -> None:
    doc = load("cgroup_v2_oneshot_t1")
    assert cpu_reading(doc["precpu_stats"]) is None
    assert cpu_cores_from_stats(doc) is None


def test_counters_that_go_backwards_or_stand_still_give_no_cpu_value() -> None:
    a = cpu_reading(load("cgroup_v2_oneshot_t1")["cpu_stats"])
    b = cpu_reading(load("cgroup_v2_oneshot_t0")["cpu_stats"])
    assert a is not None and b is not None
    assert cpu_cores(a, b) is None
    assert cpu_cores(a, a) is None


def test_memory_never_goes_negative_and_missing_usage_is_none() -> None:
    assert memory_bytes({"usage": 10, "stats": {"inactive_file": 50}}) == 0
    assert memory_bytes({"usage": 10, "stats": {}}) == 10
    assert memory_bytes({}) is None
    assert memory_bytes(None) is None


class Replay:
    """A fake stats reader: each container id replays its recorded documents in order."""

    def __init__(self, docs: Mapping[str, list[dict[str, Any]]]) -> None:
        self.docs = {cid: list(seq) for cid, seq in docs.items()}
        self.calls: list[str] = []

    def __call__(self, container_id: str) -> Mapping[str, Any]:
        self.calls.append(container_id)
        seq = self.docs[container_id]
        if not seq:
            raise RuntimeError(f"container {container_id} is gone")
        return seq.pop(0)


def tbmq_like_source() -> tuple[ContainerStatsSource, Replay]:
    v1 = [load("cgroup_v1_oneshot_t0"), load("cgroup_v1_oneshot_t1")]
    v2 = [load("cgroup_v2_oneshot_t0"), load("cgroup_v2_oneshot_t1")]
    replay = Replay({"c-tbmq": v2, "c-kafka": v1, "c-valkey": list(v2), "c-pg": list(v1)})
    refs = [
        ContainerRef("c-tbmq", "tbmq", 4001),
        ContainerRef("c-kafka", "kafka", 4002),
        ContainerRef("c-valkey", "valkey", 4003),
        ContainerRef("c-pg", "postgres", 4004),
    ]
    return ContainerStatsSource(refs, replay), replay


def test_first_one_shot_tick_is_a_baseline_and_writes_nothing() -> None:
    source, replay = tbmq_like_source()
    assert source.sample(1) == []
    assert replay.calls == ["c-tbmq", "c-kafka", "c-valkey", "c-pg"]


def test_four_containers_are_summed_into_broker_and_kept_per_service() -> None:
    source, _ = tbmq_like_source()
    source.sample(1)
    rows = source.sample(2)
    by_role = {r.role: r for r in rows}
    assert list(by_role) == [
        "broker",
        "broker:tbmq",
        "broker:kafka",
        "broker:valkey",
        "broker:postgres",
    ]
    assert by_role["broker:tbmq"].cpu_cores == pytest.approx(0.5)
    assert by_role["broker:kafka"].cpu_cores == pytest.approx(1.5)
    assert by_role["broker:kafka"].rss_bytes == 209_500_000
    assert by_role["broker"].cpu_cores == pytest.approx(0.5 + 1.5 + 0.5 + 1.5)
    assert by_role["broker"].rss_bytes == 2 * 402_000_000 + 2 * 209_500_000
    assert by_role["broker"].pid == 4001
    assert all(r.t_ns == 2 for r in rows)


def test_a_vanished_container_is_skipped_and_the_error_remembered() -> None:
    source, _ = tbmq_like_source()
    source.sample(1)
    source.sample(2)
    assert source.sample(3) == []
    assert source.last_error is not None and "gone" in source.last_error


def test_a_regular_read_gives_a_row_on_the_first_tick() -> None:
    source = ContainerStatsSource(
        [ContainerRef("c1", "zenoh", 7)], Replay({"c1": [load("cgroup_v2_with_precpu")]})
    )
    rows = source.sample(5)
    assert [(r.role, r.cpu_cores, r.rss_bytes) for r in rows] == [
        ("broker", pytest.approx(0.5), 402_000_000),
        ("broker:zenoh", pytest.approx(0.5), 402_000_000),
    ]


def test_sampler_writes_container_rows_in_the_resources_csv_schema(tmp_path: Path) -> None:
    source, _ = tbmq_like_source()
    clock = iter(range(1_000, 10_000, 1_000))
    sampler = ResourceSampler(
        tmp_path / "resources.csv",
        interval_s=3600.0,  # the thread never ticks during the test; ticks are by hand
        clock_ns=lambda: next(clock),
        monotonic_ns=lambda: 0,
    )
    sampler.add_source(source)
    sampler.start()  # baseline of the source
    rows = sampler.sample_once()
    sampler.stop()
    lines = (tmp_path / "resources.csv").read_text().splitlines()
    assert lines[0] == CSV_HEADER
    assert lines[1] == f"{rows[0].t_ns},broker,4001,4.000000,1223000000"
    assert [line.split(",")[1] for line in lines[1:]] == [
        "broker",
        "broker:tbmq",
        "broker:kafka",
        "broker:valkey",
        "broker:postgres",
    ]


def test_a_failing_source_does_not_stop_the_sampler(tmp_path: Path) -> None:
    class Broken:
        def sample(self, t_ns: int) -> list[Any]:
            raise RuntimeError("engine went away")

    sampler = ResourceSampler(tmp_path / "r.csv")
    sampler.add_source(Broken())
    assert sampler.sample_once() == []
    assert sampler.last_error == "RuntimeError: engine went away"


class FakeProc:
    """A ``psutil`` process row / process with set CPU times and RSS."""

    def __init__(self, pid: int, argv: list[str], cpu: float = 0.0, rss: int = 0) -> None:
        self.pid = pid
        self.info = {"cmdline": argv}
        self.cpu = cpu
        self.rss = rss

    def cpu_times(self) -> SimpleNamespace:
        return SimpleNamespace(user=self.cpu * 0.25, system=self.cpu * 0.75)

    def memory_info(self) -> SimpleNamespace:
        return SimpleNamespace(rss=self.rss)


PROXY = "/usr/sbin/docker-proxy -proto tcp -host-ip 127.0.0.1 -host-port {} -container-ip 1.2.3.4"


def test_the_docker_proxies_of_the_published_ports_are_found_and_no_others() -> None:
    rows = [
        FakeProc(10, PROXY.format(41000).split()),
        FakeProc(11, PROXY.format(41001).split()),
        FakeProc(12, PROXY.format(50000).split()),
        FakeProc(13, ["/usr/bin/python3", "-host-port", "41000"]),
        FakeProc(14, []),
    ]
    assert proxy_pids([41000, 41001], rows) == [10, 11]


def test_proxy_cpu_is_its_own_role_and_not_part_of_the_brokers_sum() -> None:
    proxies = {20: FakeProc(20, [], cpu=1.0, rss=3_000_000)}
    proxy_cpu = ProxyCpu([20], process=lambda pid: proxies[pid])
    stats = {"c1": [load("cgroup_v1_oneshot_t0"), load("cgroup_v1_oneshot_t1")]}
    source = ContainerStatsSource(
        [ContainerRef("c1", "mosquitto", 1000)], lambda cid: stats[cid].pop(0), proxies=proxy_cpu
    )
    assert source.sample(1_000_000_000) == []  # baselines only
    proxies[20].cpu = 1.5  # half a core over the next second
    rows = source.sample(2_000_000_000)
    assert [(r.role, round(r.cpu_cores, 6)) for r in rows] == [
        ("broker", 1.5),
        ("broker:mosquitto", 1.5),
        ("docker-proxy", 0.5),
    ]
    assert rows[-1].rss_bytes == 3_000_000 and rows[-1].pid == 20
