"""``mqbench brokers up|down|status|logs``: state files, errors, stopping by PID and project."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import typer
from docker_fakes import HEALTHY_ENGINE, FakeDocker, install_fake_docker
from typer.testing import CliRunner

from mqbench.brokers.docker.compose import compose_dir
from mqbench.brokers.java import maven
from mqbench.brokers.registry import maven_distributions
from mqbench.brokers.runtime.manage import BrokerState, find_states, state_path
from mqbench.cli.brokers_cmd import brokers_app

app = typer.Typer()
app.add_typer(brokers_app, name="brokers")
runner = CliRunner()


@pytest.fixture(autouse=True)
def state_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("MQBENCH_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["brokers", *args])
    return result.exit_code, result.output


def native_state(proc: subprocess.Popen[bytes], log: Path) -> BrokerState:
    state = BrokerState(
        target="mosquitto",
        runtime="native",
        host="127.0.0.1",
        port=18831,
        workdir=str(log.parent),
        started_ns=time.time_ns(),
        pid=proc.pid,
        pid_create_time=psutil.Process(proc.pid).create_time(),
        log_path=str(log),
    )
    state.save()
    return state


def test_a_native_profile_larger_than_the_machine_is_refused_before_starting(
    monkeypatch: pytest.MonkeyPatch, state_folder: Path
) -> None:
    monkeypatch.setattr("mqbench.brokers.resources.native_profiles.machine_cpus", lambda: [0, 1])
    code, out = invoke("up", "mosquitto", "--profile", "4cpu-8g")
    assert code == 1
    assert out.startswith(
        "error: resources profile '4cpu-8g' asks for 4 CPUs but this machine has 2 (CPUs 0-1)"
    )
    assert len(out.strip().splitlines()) == 1
    assert not state_folder.exists()


def test_an_unknown_profile_is_a_usage_error() -> None:
    code, out = invoke("up", "mosquitto", "--profile", "8cpu")
    assert code == 2
    assert "error: unknown profile '8cpu' (known: 1cpu-2g, 2cpu-4g, 4cpu-8g, unlimited)" in out


def test_unknown_runtime_and_target_are_rejected_in_one_line() -> None:
    code, out = invoke("up", "mosquitto", "--runtime", "k8s")
    assert (code, out.strip()) == (2, "error: --runtime must be one of native, docker, not 'k8s'")
    code, out = invoke("up", "kafka")
    assert code == 1 and out.startswith("error: unknown target 'kafka'")


def test_docker_up_without_compose_plugin_explains_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install_fake_docker(tmp_path, monkeypatch)
    fake.set_rules({"match": ["compose"], "stderr": "docker: unknown command\n", "rc": 1})
    code, out = invoke("up", "emqx", "--runtime", "docker")
    assert code == 1
    assert out.startswith("error: emqx (docker): the docker compose plugin (Compose v2) is missing")
    assert find_states() == []


def test_down_without_a_recorded_broker_says_so() -> None:
    code, out = invoke("down", "mosquitto")
    assert code == 1 and "no mosquitto broker started with `mqbench brokers up`" in out


def test_native_broker_is_stopped_by_its_recorded_pid(
    sleeper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    native_state(sleeper, tmp_path / "m.log")
    code, out = invoke("status")
    assert code == 0 and "running" in out and str(sleeper.pid) in out
    code, out = invoke("down", "mosquitto")
    assert (code, out.strip()) == (0, "mosquitto (native): stopped")
    assert sleeper.wait(timeout=5) is not None
    assert not state_path("mosquitto", "native").exists()


def test_a_reused_pid_is_never_signalled(sleeper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    state = native_state(sleeper, tmp_path / "m.log")
    state.pid_create_time = (state.pid_create_time or 0) - 1000  # another process's start
    state.save()
    code, out = invoke("down", "mosquitto")
    assert (code, out.strip()) == (0, "mosquitto (native): was not running")
    assert sleeper.poll() is None


def test_up_refuses_while_the_recorded_broker_still_runs(
    sleeper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    native_state(sleeper, tmp_path / "m.log")
    code, out = invoke("up", "mosquitto")
    assert code == 1
    assert "mosquitto (native) already runs on 127.0.0.1:18831; stop it first" in out


def test_logs_print_the_native_log_tail(sleeper: subprocess.Popen[bytes], tmp_path: Path) -> None:
    log = tmp_path / "m.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    native_state(sleeper, log)
    code, out = invoke("logs", "mosquitto", "-n", "2")
    assert (code, out) == (0, "line 98\nline 99\n")


def test_docker_broker_is_stopped_with_compose_down_of_its_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake: FakeDocker = install_fake_docker(tmp_path, monkeypatch)
    fake.set_rules(
        *HEALTHY_ENGINE,
        {"match": ["compose", "logs"], "stdout": "emqx-1  | EMQX 5.8.6 is running now!\n"},
    )
    BrokerState(
        target="emqx",
        runtime="docker",
        host="127.0.0.1",
        port=21883,
        workdir=str(tmp_path),
        started_ns=1,
        project="mqbench-emqx-abc123",
        compose_file=str(compose_dir() / "emqx.yaml"),
        profile="1cpu-2g",
    ).save()
    code, out = invoke("logs", "emqx")
    assert (code, out) == (0, "emqx-1  | EMQX 5.8.6 is running now!\n")
    code, out = invoke("down", "emqx", "--runtime", "docker")
    assert (code, out.strip()) == (0, "emqx (docker): containers, networks and volumes removed")
    down = fake.argvs()[-1]
    assert down[:3] == ["compose", "-p", "mqbench-emqx-abc123"]
    assert down[5:8] == ["down", "-v", "--remove-orphans"]
    assert find_states() == []


def test_failed_compose_down_keeps_the_state_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install_fake_docker(tmp_path, monkeypatch)
    fake.set_rules({"match": ["down"], "stderr": "Cannot connect to the Docker daemon\n", "rc": 1})
    BrokerState(
        "nats",
        "docker",
        "127.0.0.1",
        4222,
        str(tmp_path),
        1,
        project="mqbench-nats-1",
        compose_file=str(compose_dir() / "nats.yaml"),
    ).save()
    code, out = invoke("down", "nats")
    assert code == 1
    assert "`docker compose down` of mqbench-nats-1 failed: Cannot connect" in out
    assert [s.project for s in find_states()] == ["mqbench-nats-1"]


def test_fetch_checks_every_name_before_fetching_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fetched: list[str] = []
    monkeypatch.setattr(maven, "fetch", lambda dist: fetched.append(dist.name))
    code, out = invoke("fetch", "artemis", "mosquitto")
    assert (code, out.strip()) == (
        2,
        "error: mosquitto is not fetched from Maven (Java brokers: hivemq, artemis)",
    )
    code, out = invoke("fetch", "kafka")
    assert code == 1 and out.startswith("error: unknown target 'kafka' (known: mosquitto,")
    assert fetched == []


def test_fetch_reports_each_java_broker_as_its_jars_land_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def installed(dist: maven.JavaDistribution) -> maven.Installed | None:
        return fake(dist) if dist.name == "artemis" else None

    def fake(dist: maven.JavaDistribution) -> maven.Installed:
        return maven.Installed(dist, tmp_path / dist.key, ("a.jar", "b.jar"))

    monkeypatch.setattr(maven, "installed", installed)
    monkeypatch.setattr(maven, "fetch", fake)
    code, out = invoke("fetch")
    assert code == 0
    hivemq, artemis = (maven_distributions()[n] for n in ("hivemq", "artemis"))
    assert out.splitlines() == [
        f"hivemq {hivemq.version}: fetched 2 jars ({tmp_path / hivemq.key})",
        f"artemis {artemis.version}: already in the cache ({tmp_path / artemis.key})",
    ]
