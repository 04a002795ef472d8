"""The docker runtime against the real engine, one broker container for the whole module:
loopback-only published ports, the resources profile as container limits (checked by
`docker inspect` and by docker stats under a load that needs two cores), nofile fitted to
the host, stats rows once a second on the records' clock, and the Toxiproxy container that
joins the broker's network for faults."""

from __future__ import annotations

import csv
import itertools
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker as docker_sdk
import psutil
import pytest
from docker_runs import docker, leftovers, wait_gone
from docker_support import ensure_images, require_engine

from mqbench.brokers.base import StartRequest
from mqbench.brokers.docker.engine import EngineFacts
from mqbench.brokers.docker.runtime import DockerBroker, DockerRuntime
from mqbench.brokers.resources.sampler import ResourceSampler
from mqbench.brokers.runtime.probes import mqtt_probe
from mqbench.faults.client import ToxiproxyClient

pytestmark = [pytest.mark.integration, pytest.mark.docker]

BUSY_LOOP = "i=0; while [ $i -lt 1500000 ]; do i=$((i+1)); done"
"""A shell loop bounded by its count (a few CPU-seconds): one core's worth of demand."""


@pytest.fixture(scope="module")
def runtime() -> DockerRuntime:
    require_engine()
    ensure_images("mosquitto", "toxiproxy")
    return DockerRuntime()


@pytest.fixture(scope="module")
def broker(runtime: DockerRuntime) -> Iterator[DockerBroker]:
    with tempfile.TemporaryDirectory(prefix="mqbench-docker-rt-") as tmp:
        started = runtime.start(
            StartRequest("mosquitto", Path(tmp), options={"resources": "1cpu-2g"})
        )
        try:
            yield started
        finally:
            started.stop()
            assert wait_gone([started.project.name], within_s=10) == {}


def inspect(container_id: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(docker("inspect", container_id).stdout)
    return data[0]


def test_clients_reach_the_broker_on_a_port_published_on_loopback_only(
    broker: DockerBroker,
) -> None:
    assert broker.endpoint.host == "127.0.0.1"
    assert mqtt_probe("127.0.0.1", broker.endpoint.port, 5.0)
    bindings = inspect(broker.containers[0].id)["HostConfig"]["PortBindings"]
    published = {"HostIp": "127.0.0.1", "HostPort": str(broker.endpoint.port)}
    assert bindings == {"1883/tcp": [published]}


def test_the_profile_is_the_containers_cpu_and_memory_limit_and_nofile_fits_the_host(
    runtime: DockerRuntime, broker: DockerBroker
) -> None:
    host = inspect(broker.containers[0].id)["HostConfig"]
    assert host["NanoCpus"] == 1_000_000_000
    assert host["Memory"] == 2048 * 1024 * 1024
    facts = runtime.engine()
    assert isinstance(facts, EngineFacts)
    nofile = facts.limits.nofile
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": nofile, "Hard": nofile}]
    assert broker.info.nofile == nofile and broker.info.profile["name"] == "1cpu-2g"
    top = docker("exec", broker.containers[0].id, "sh", "-c", "ulimit -n").stdout.strip()
    assert top == str(nofile)


def test_a_container_limited_to_one_cpu_stays_near_one_core_under_a_two_core_load(
    broker: DockerBroker,
) -> None:
    cid = broker.containers[0].id
    source = broker.resource_source()
    assert source is not None
    before = throttled_periods(cid)
    source.sample(time.time_ns())
    idle_before = psutil.cpu_times().idle
    started = time.monotonic()
    for _ in range(2):
        assert docker("exec", "-d", cid, "sh", "-c", BUSY_LOOP).returncode == 0
    cores: list[float] = []
    for _ in range(3):
        time.sleep(1.0)
        rows = source.sample(time.time_ns())
        cores += [r.cpu_cores for r in rows if r.role == "broker"]
    spare = (psutil.cpu_times().idle - idle_before) / (time.monotonic() - started)
    assert cores and max(cores) <= 1.15, cores
    if spare >= 0.5:  # the host had room for more than one core: only the quota stopped it
        assert throttled_periods(cid) > before, (cores, spare)


def throttled_periods(container_id: str) -> int:
    """CFS periods in which the container's quota stopped it (docker stats' throttling data)."""
    client = docker_sdk.from_env()
    try:
        stats = client.api.stats(container_id, stream=False, one_shot=True)
    finally:
        client.close()
    return int(stats["cpu_stats"]["throttling_data"]["throttled_periods"])


def test_docker_stats_and_the_proxys_cpu_are_sampled_once_a_second_on_the_records_clock(
    broker: DockerBroker, tmp_path: Path
) -> None:
    source = broker.resource_source()
    assert source is not None
    sampler = ResourceSampler(tmp_path / "resources.csv")
    sampler.add_source(source)
    t0 = time.time_ns()
    sampler.start()
    time.sleep(3.5)
    sampler.stop()
    t1 = time.time_ns()
    with (tmp_path / "resources.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    broker_rows = [r for r in rows if r["role"] == "broker"]
    # docker-proxy: the userland proxy of the published port, outside the container
    assert {r["role"] for r in rows} == {"broker", "broker:mosquitto", "docker-proxy"}
    assert len(broker_rows) >= 2
    stamps = [int(r["t_ns"]) for r in broker_rows]
    assert all(t0 <= t <= t1 for t in stamps)
    gaps = [(b - a) / 1e9 for a, b in itertools.pairwise(stamps)]
    assert all(0.5 < gap < 2.0 for gap in gaps), gaps
    assert all(int(r["rss_bytes"]) > 0 for r in broker_rows)


def test_the_toxiproxy_container_joins_the_brokers_network_and_cuts_connections(
    broker: DockerBroker,
) -> None:
    proxy = broker.start_fault_proxy()
    try:
        label = f"label=com.docker.compose.project={proxy.project.name}"
        (container,) = docker("ps", "-q", "--filter", label).stdout.split()
        networks = inspect(container)["NetworkSettings"]["Networks"]
        assert list(networks) == [f"{broker.project.name}_default"]
        client = ToxiproxyClient(proxy.url)
        client.create_proxy("t", proxy.upstream, listen=proxy.listen)
        assert proxy.upstream == "mosquitto:1883"
        assert mqtt_probe("127.0.0.1", proxy.port, 5.0)
        client.add_toxic("t", "reset_peer", {"timeout": 0}, stream="downstream", name="cut")
        assert not mqtt_probe("127.0.0.1", proxy.port, 2.0)
        client.remove_toxic("t", "cut")
        assert mqtt_probe("127.0.0.1", proxy.port, 5.0)
    finally:
        proxy.stop()
    assert wait_gone([proxy.project.name], within_s=10) == {}
    assert any(leftovers(broker.project.name).values())  # the broker's network is still there


def test_network_host_puts_the_broker_on_loopback_with_no_proxy_in_between(
    runtime: DockerRuntime, tmp_path: Path
) -> None:
    broker = runtime.start(StartRequest("mosquitto", tmp_path, options={"network": "host"}))
    try:
        port = broker.endpoint.port
        assert mqtt_probe("127.0.0.1", port, 5.0)
        assert inspect(broker.containers[0].id)["HostConfig"]["NetworkMode"] == "host"
        listening = {
            c.laddr.ip
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        }
        assert listening == {"127.0.0.1"}  # the broker itself, on loopback only
        proxies = [
            p.pid
            for p in psutil.process_iter(["name", "cmdline"])
            if p.info["name"] == "docker-proxy" and str(port) in (p.info["cmdline"] or [])
        ]
        assert proxies == []
        source = broker.resource_source()
        assert source is not None
        source.sample(time.time_ns())
        time.sleep(1.0)
        assert "docker-proxy" not in {r.role for r in source.sample(time.time_ns())}
    finally:
        broker.stop()
    assert wait_gone([broker.project.name], within_s=10) == {}
