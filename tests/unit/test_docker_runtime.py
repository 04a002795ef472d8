"""The docker runtime against a fake ``docker`` CLI on PATH and a fake Docker SDK."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_fakes import HEALTHY_ENGINE, FakeDocker, FakeSdk, install_fake_docker

import mqbench.brokers.definitions.tbmq as tbmq_definition
import mqbench.brokers.docker.runtime as docker_runtime
from mqbench.brokers.base import HasResourceSource, StartRequest
from mqbench.brokers.docker.compose import compose_dir
from mqbench.brokers.docker.engine import engine_remote_host
from mqbench.brokers.docker.project import failed_services, parse_ps_json
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.brokers.runtime.registry import get_runtime
from mqbench.errors import BrokerError, ScenarioError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docker"


def doc(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    return install_fake_docker(tmp_path, monkeypatch)


def no_health(url: str, timeout_s: float) -> None:
    raise AssertionError("only TBMQ waits for /actuator/health")


HEALTH: list[Callable[[str, float], None]] = [no_health]
"""TBMQ's health wait for the current test (its definition's hook calls it)."""


@pytest.fixture(autouse=True)
def health(monkeypatch: pytest.MonkeyPatch) -> None:
    HEALTH[0] = no_health
    monkeypatch.setattr(tbmq_definition, "wait_for_health", lambda u, t: HEALTH[0](u, t))


def runtime(sdk: FakeSdk, health: Callable[[str, float], None] = no_health) -> DockerRuntime:
    HEALTH[0] = health
    return DockerRuntime(client_factory=sdk.factory)


MOSQUITTO = FakeSdk(
    {"mosquitto": "eclipse-mosquitto:2.0.20"},
    {"mosquitto": [doc("cgroup_v2_oneshot_t0"), doc("cgroup_v2_oneshot_t1")]},
)


def test_runtime_registry_returns_the_compose_runtime() -> None:
    assert isinstance(get_runtime("docker"), DockerRuntime)


def test_missing_docker_cli_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    reason = DockerRuntime().availability("mosquitto").reason
    assert reason.startswith("the docker CLI is not installed")


def test_missing_compose_plugin_is_explained(fake: FakeDocker) -> None:
    fake.set_rules(
        {"match": ["compose"], "stderr": "docker: unknown command: docker compose\n", "rc": 1}
    )
    availability = DockerRuntime().availability("emqx")
    assert not availability.available
    assert availability.reason == (
        "the docker compose plugin (Compose v2) is missing (`docker compose version` failed: "
        "docker: unknown command: docker compose); install Compose v2 as a CLI plugin "
        "(Debian 13+/Docker's apt repository: docker-compose-plugin; on Debian 12, "
        "scripts/install.sh --dev builds it into ~/.docker/cli-plugins/)"
    )


def test_no_engine_is_explained_with_dockers_own_words(fake: FakeDocker) -> None:
    fake.set_rules(
        HEALTHY_ENGINE[0],
        {
            "match": ["info"],
            "stderr": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
            "Is the docker daemon running?\n",
            "rc": 1,
        },
    )
    reason = DockerRuntime().availability("nats").reason
    assert reason.startswith("no Docker engine answers at the local socket: Cannot connect")


def test_engine_checks_run_once_per_runtime(fake: FakeDocker) -> None:
    rt = runtime(FakeSdk({"nats": "nats:2.10.22-alpine", "redis": "redis:7.4.1-alpine"}))
    assert rt.availability("nats").available and rt.availability("redis").available
    assert fake.argvs() == [
        ["compose", "version", "--short"],
        ["info", "--format", "{{json .}}"],
    ]


def test_unknown_target_is_a_scenario_error(fake: FakeDocker) -> None:
    with pytest.raises(ScenarioError, match="unknown target 'kafka'"):
        DockerRuntime().availability("kafka")


def test_start_without_engine_raises_and_runs_no_compose(fake: FakeDocker, tmp_path: Path) -> None:
    fake.set_rules(HEALTHY_ENGINE[0], {"match": ["info"], "stderr": "no daemon\n", "rc": 1})
    with pytest.raises(BrokerError, match="mosquitto: no Docker engine answers"):
        DockerRuntime().start(StartRequest("mosquitto", tmp_path / "w"))
    assert fake.compose_verbs() == []


def test_start_waits_healthy_and_records_images_profile_and_ports(
    fake: FakeDocker, tmp_path: Path
) -> None:
    sdk = FakeSdk(
        {"mosquitto": "eclipse-mosquitto:2.0.20"},
        {"mosquitto": [doc("cgroup_v2_oneshot_t0"), doc("cgroup_v2_oneshot_t1")]},
    )
    broker = runtime(sdk).start(
        StartRequest("mosquitto", tmp_path / "w", options={"resources": "1cpu-2g"})
    )
    (up,) = [c for c in fake.calls() if c["argv"][:2] == ["compose", "-p"]]
    project = up["argv"][2]
    assert project.startswith("mqbench-mosquitto-")
    assert up["argv"][3:5] == ["-f", str(compose_dir() / "mosquitto.yaml")]
    assert up["argv"][5:] == ["up", "-d", "--wait", "--wait-timeout", "60"]
    assert up["env"]["MQBENCH_IMAGE_MOSQUITTO"] == "eclipse-mosquitto:2.0.20"
    port = broker.endpoint.port
    assert up["env"]["MQBENCH_PORT"] == str(port)
    assert up["env"]["MQBENCH_BIND"] == "127.0.0.1"
    assert (up["env"]["MQBENCH_CPUS"], up["env"]["MQBENCH_MEM"]) == ("1", "2048m")
    assert broker.endpoint.host == "127.0.0.1" and broker.pids == []
    info = broker.info.to_dict()
    assert info["project"] == project and info["profile"]["name"] == "1cpu-2g"
    assert info["services"]["mosquitto"]["repo_digests"] == [
        f"eclipse-mosquitto@sha256:{'ab' * 32}"
    ]
    assert info["version"] == "eclipse-mosquitto:2.0.20"
    assert info["images"]["mosquitto"]["kind"] == "official"
    assert info["engine_version"] == "27.3.1" and info["compose_version"] == "2.29.7"
    assert up["env"]["MQBENCH_NOFILE"] == str(info["nofile"])
    assert sdk.list_filters == [{"label": f"com.docker.compose.project={project}"}]
    assert (tmp_path / "w" / "compose.env").read_text().count("MQBENCH_") >= 9
    assert (
        "127.0.0.1:" + str(port) + ":1883" in (tmp_path / "w" / "compose.resolved.yaml").read_text()
    )


def test_the_running_broker_samples_container_stats_through_the_sdk(
    fake: FakeDocker, tmp_path: Path
) -> None:
    sdk = FakeSdk(
        {"mosquitto": "eclipse-mosquitto:2.0.20"},
        {"mosquitto": [doc("cgroup_v1_oneshot_t0"), doc("cgroup_v1_oneshot_t1")]},
    )
    broker = runtime(sdk).start(StartRequest("mosquitto", tmp_path / "w"))
    assert isinstance(broker, HasResourceSource)
    source = broker.resource_source()
    assert source is not None
    assert source.sample(1) == []
    rows = source.sample(2)
    assert [(r.role, round(r.cpu_cores, 6), r.rss_bytes, r.pid) for r in rows] == [
        ("broker", 1.5, 209_500_000, 1000),
        ("broker:mosquitto", 1.5, 209_500_000, 1000),
    ]
    assert sdk.api.stats_calls[0] == ("mosquitto-cid", {"stream": False, "one_shot": True})


def test_stop_runs_compose_down_once_and_removes_volumes_and_orphans(
    fake: FakeDocker, tmp_path: Path
) -> None:
    broker = runtime(FakeSdk({"nats": "nats:2.10.22-alpine"})).start(
        StartRequest("nats", tmp_path / "w")
    )
    broker.stop()
    broker.stop()
    downs = [a for a in fake.argvs() if "down" in a]
    assert len(downs) == 1
    assert downs[0][5:] == ["down", "-v", "--remove-orphans", "--timeout", "10"]
    assert broker.info.down_exit_code == 0


def test_every_sdk_client_the_runtime_makes_is_closed_once_the_broker_stops(
    fake: FakeDocker, tmp_path: Path
) -> None:
    sdk = FakeSdk({"nats": "nats:2.10.22-alpine"})
    docker = runtime(sdk)
    assert docker.availability("nats").available
    assert sdk.made >= 1 and sdk.closed == sdk.made
    broker = docker.start(StartRequest("nats", tmp_path / "w"))
    assert sdk.made - sdk.closed == 1  # the running broker's, for its stats and exit watch
    broker.stop()
    assert sdk.closed == sdk.made


def test_a_start_that_fails_after_up_closes_the_sdk_clients_it_made(
    fake: FakeDocker, tmp_path: Path
) -> None:
    def never(url: str, timeout_s: float) -> None:
        raise BrokerError(f"TBMQ at {url} did not report UP")

    sdk = FakeSdk({"tbmq": "thingsboard/tbmq:2.1.0"})
    with pytest.raises(BrokerError, match="did not report UP"):
        runtime(sdk, never).start(StartRequest("tbmq", tmp_path / "w"))
    assert sdk.made == 3  # availability, the image choice, the started project's
    assert sdk.closed == sdk.made


def test_an_image_that_is_missing_and_cannot_be_pulled_names_the_build_command(
    fake: FakeDocker, tmp_path: Path
) -> None:
    sdk = FakeSdk({}, missing=frozenset({"eclipse-mosquitto:2.0.20"}))
    fake.set_rules(
        *HEALTHY_ENGINE,
        {"match": ["pull"], "stderr": "Error response from daemon: no such host\n", "rc": 1},
    )
    with pytest.raises(BrokerError) as err:
        runtime(sdk).start(StartRequest("mosquitto", tmp_path / "w"))
    assert str(err.value) == (
        "mosquitto: image eclipse-mosquitto:2.0.20 is not here and cannot be pulled; build "
        "a local one with: mqbench brokers build-images mosquitto"
    )
    assert ["pull", "--quiet", "eclipse-mosquitto:2.0.20"] in fake.argvs()
    assert fake.compose_verbs() == []


def test_unhealthy_container_after_timeout_shows_its_last_log_lines(
    fake: FakeDocker, tmp_path: Path
) -> None:
    ps = "\n".join(
        json.dumps(row)
        for row in (
            {"Service": "kafka", "State": "running", "Health": "healthy"},
            {"Service": "tbmq", "State": "running", "Health": "unhealthy"},
        )
    )
    fake.set_rules(
        *HEALTHY_ENGINE,
        {
            "match": ["compose", "up"],
            "stderr": "container mqbench-tbmq-abc-tbmq-1 is unhealthy\n",
            "rc": 1,
        },
        {"match": ["compose", "ps"], "stdout": ps + "\n"},
        {
            "match": ["compose", "logs", "tbmq"],
            "stdout": "tbmq-1  | Starting TBMQ\ntbmq-1  | Failed to connect to kafka:9092\n",
        },
    )
    with pytest.raises(BrokerError) as err:
        runtime(FakeSdk({})).start(StartRequest("tbmq", tmp_path / "w", startup_timeout_s=5))
    message = str(err.value)
    assert message.startswith("tbmq: service(s) tbmq not healthy within 300 s (docker: container")
    assert message.endswith("Failed to connect to kafka:9092")
    assert fake.compose_verbs() == ["up", "ps", "logs", "down", "down"]
    up = next(a for a in fake.argvs() if "up" in a)
    assert up[-1] == "300"  # the request's 5 s is raised to TBMQ's start-up floor


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_requested_port_already_taken_fails_before_compose(
    fake: FakeDocker, tmp_path: Path, taken_port: int
) -> None:
    with pytest.raises(BrokerError, match=f"port {taken_port} on 127.0.0.1 is already in use"):
        runtime(FakeSdk({})).start(StartRequest("redis", tmp_path / "w", port=taken_port))
    assert fake.compose_verbs() == []


def test_a_port_taken_between_the_choice_and_up_is_named_with_the_log_lines(
    fake: FakeDocker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.set_rules(
        *HEALTHY_ENGINE,
        {
            "match": ["compose", "up"],
            "stderr": "Error response from daemon: driver failed\n",
            "rc": 1,
        },
        {"match": ["compose", "logs"], "stdout": "redis-1  | (no output)\n"},
    )
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    monkeypatch.setattr(docker_runtime, "free_port", lambda host: taken)
    with holder, pytest.raises(BrokerError) as err:
        runtime(FakeSdk({})).start(StartRequest("redis", tmp_path / "w"))
    assert str(err.value) == (
        f"redis: port {taken} on 127.0.0.1 is already in use by another program (docker: "
        "Error response from daemon: driver failed); last log lines: redis-1  | (no output)"
    )
    assert fake.compose_verbs() == ["up", "ps", "logs", "down", "down"]


def test_tbmq_waits_for_health_and_turns_basic_auth_off_by_default(
    fake: FakeDocker, tmp_path: Path
) -> None:
    seen: list[tuple[str, float]] = []
    sdk = FakeSdk(
        {
            "kafka": "apache/kafka:3.9.0",
            "postgres": "postgres:16.4",
            "tbmq": "thingsboard/tbmq:2.1.0",
            "valkey": "valkey/valkey:8.0.2",
        }
    )
    broker = runtime(sdk, lambda url, t: seen.append((url, t))).start(
        StartRequest("tbmq", tmp_path / "w")
    )
    up = next(c for c in fake.calls() if "up" in c["argv"])
    assert up["env"]["MQBENCH_TBMQ_BASIC_AUTH"] == "false"
    assert seen and seen[0][0] == f"http://127.0.0.1:{up['env']['MQBENCH_HTTP_PORT']}"
    assert sorted(broker.info.services) == ["kafka", "postgres", "tbmq", "valkey"]
    assert broker.info.hook_facts["tbmq_credentials"] == []
    assert broker.info.version == "thingsboard/tbmq:2.1.0"


def test_tbmq_health_timeout_is_reported_with_logs_and_cleans_up(
    fake: FakeDocker, tmp_path: Path
) -> None:
    fake.set_rules(
        *HEALTHY_ENGINE, {"match": ["compose", "logs"], "stdout": "tbmq-1  | still installing\n"}
    )

    def never(url: str, timeout_s: float) -> None:
        raise BrokerError(f"TBMQ at {url} did not report UP")

    with pytest.raises(BrokerError, match=r"^tbmq: TBMQ at http.* did not report UP; last log"):
        runtime(FakeSdk({"tbmq": "thingsboard/tbmq:2.1.0"}), never).start(
            StartRequest("tbmq", tmp_path / "w")
        )
    assert fake.compose_verbs()[-1] == "down"


def test_credentials_option_turns_tbmq_basic_auth_on(
    fake: FakeDocker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[Any] = []
    rt = runtime(FakeSdk({"tbmq": "thingsboard/tbmq:2.1.0"}), lambda url, t: None)
    monkeypatch.setattr(
        tbmq_definition,
        "bootstrap_credentials",
        lambda url, creds: created.append((url, creds)),
    )
    creds = [{"username": "app", "password": "p", "client_type": "application"}]
    broker = rt.start(StartRequest("tbmq", tmp_path / "w", options={"tbmq_credentials": creds}))
    up = next(c for c in fake.calls() if "up" in c["argv"])
    assert up["env"]["MQBENCH_TBMQ_BASIC_AUTH"] == "true"
    assert created[0][1][0].client_type == "APPLICATION"
    assert broker.info.hook_facts["tbmq_credentials"] == [
        {"username": "app", "client_type": "APPLICATION"}
    ]


def test_bad_options_and_profiles_are_rejected_before_anything_starts(
    fake: FakeDocker, tmp_path: Path
) -> None:
    rt = runtime(FakeSdk({}))
    with pytest.raises(BrokerError, match=r"unknown docker runtime option\(s\) cpu"):
        rt.start(StartRequest("nats", tmp_path / "w", options={"cpu": 2}))
    with pytest.raises(BrokerError, match="unknown resource profile '8cpu'"):
        rt.start(StartRequest("nats", tmp_path / "w", options={"resources": "8cpu"}))
    with pytest.raises(BrokerError, match="only applies to target tbmq"):
        rt.start(StartRequest("nats", tmp_path / "w", options={"tbmq_credentials": []}))
    assert fake.compose_verbs() == []


def test_remote_docker_host_needs_an_explicit_bind_address(
    fake: FakeDocker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "ssh://bench@broker-vm")
    rt = runtime(FakeSdk({"nats": "nats:2.10.22-alpine"}))
    with pytest.raises(BrokerError, match=r"DOCKER_HOST points at another machine \(broker-vm\)"):
        rt.start(StartRequest("nats", tmp_path / "w"))
    broker = rt.start(StartRequest("nats", tmp_path / "w2", options={"bind": "0.0.0.0"}))
    assert (broker.endpoint.host, broker.endpoint.port) == ("broker-vm", 4222)
    up = next(c for c in fake.calls() if "up" in c["argv"])
    assert up["env"]["MQBENCH_BIND"] == "0.0.0.0"


@pytest.mark.parametrize(
    ("value", "host"),
    [
        ("", None),
        ("unix:///var/run/docker.sock", None),
        ("tcp://127.0.0.1:2375", None),
        ("tcp://localhost:2375", None),
        ("tcp://10.0.0.5:2376", "10.0.0.5"),
        ("ssh://user@broker-vm:2222", "broker-vm"),
    ],
)
def test_docker_host_is_remote_only_for_other_machines(value: str, host: str | None) -> None:
    assert engine_remote_host({"DOCKER_HOST": value}) == host


def test_compose_ps_json_is_read_in_both_shapes_and_failures_found() -> None:
    rows = [{"Service": "a", "State": "exited"}, {"Service": "b", "State": "running"}]
    assert parse_ps_json(json.dumps(rows)) == rows
    assert parse_ps_json("\n".join(json.dumps(r) for r in rows)) == rows
    assert parse_ps_json("") == []
    assert failed_services([*rows, {"Service": "c", "Health": "unhealthy"}]) == ["a", "c"]


def test_network_host_runs_the_broker_on_the_hosts_network_listening_on_loopback_itself(
    fake: FakeDocker, tmp_path: Path
) -> None:
    broker = runtime(FakeSdk({"nats": "nats:2.10.22-alpine"})).start(
        StartRequest("nats", tmp_path / "w", options={"network": "host"})
    )
    (up,) = [c for c in fake.calls() if c["argv"][:2] == ["compose", "-p"]]
    generated = tmp_path / "w" / "compose.hostnet.yaml"
    assert up["argv"][3:5] == ["-f", str(generated)]
    service = yaml.safe_load(generated.read_text())["services"]["nats"]
    assert service["network_mode"] == "host" and "ports" not in service
    port = broker.endpoint.port
    assert up["env"]["MQBENCH_LISTEN_HOST"] == "127.0.0.1"
    assert up["env"]["MQBENCH_LISTEN_PORT"] == str(port)
    monitor = int(up["env"]["MQBENCH_MONITOR_PORT"])
    assert monitor not in (port, 8222)  # a free port: 8222 may be taken on the host
    assert broker.info.network == "host"
    with pytest.raises(BrokerError, match="joins the broker's bridge network"):
        broker.start_fault_proxy()


def test_network_options_that_cannot_work_are_refused_in_one_line(
    fake: FakeDocker, tmp_path: Path
) -> None:
    rt = runtime(FakeSdk({}))
    with pytest.raises(BrokerError, match="option 'network' is 'overlay'; it is one of"):
        rt.start(StartRequest("nats", tmp_path / "w", options={"network": "overlay"}))
    with pytest.raises(BrokerError) as err:
        rt.check_options("hivemq", {"network": "host"})
    assert str(err.value) == (
        "hivemq cannot run with network: host (its compose file hivemq.yaml has no listener "
        "variables); use the default network: bridge"
    )
    assert fake.compose_verbs() == []
