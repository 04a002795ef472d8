"""Runtime registry, availability reasons and native config generation (no broker processes;
one ``sleep`` stands in for a broker left running)."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from mqbench.brokers.base import StartRequest
from mqbench.brokers.definitions.mosquitto import MosquittoSpec
from mqbench.brokers.definitions.nats import NatsSpec
from mqbench.brokers.runtime import native
from mqbench.brokers.runtime.external import ExternalRuntime
from mqbench.brokers.runtime.native import NativeRuntime, read_tail
from mqbench.brokers.runtime.probes import mqtt_connect_packet
from mqbench.brokers.runtime.registry import DockerRuntime, get_runtime, runtime_names
from mqbench.errors import BrokerError, ScenarioError


def test_runtimes_are_found_by_name_and_unknown_names_are_listed() -> None:
    assert runtime_names() == ["native", "external", "docker"]
    assert [get_runtime(name).name for name in runtime_names()] == runtime_names()
    with pytest.raises(ScenarioError, match=r"unknown runtime 'k8s' \(known: native, external"):
        get_runtime("k8s")


def test_docker_runtime_without_the_docker_cli_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    runtime = DockerRuntime()
    availability = runtime.availability("emqx")
    assert not availability.available
    assert availability.reason.startswith("the docker CLI is not installed (install Docker")
    with pytest.raises(BrokerError, match="emqx: the docker CLI is not installed"):
        runtime.start(StartRequest(target="emqx", workdir=tmp_path / "w"))


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("emqx", "emqx runs in Docker only"),
        ("tbmq", "tbmq runs in Docker only"),
    ],
)
def test_native_runtime_explains_targets_it_cannot_run(target: str, reason: str) -> None:
    availability = NativeRuntime().availability(target)
    assert not availability.available
    assert availability.reason.startswith(reason)


def test_native_runtime_start_of_an_unsupported_target_raises_the_same_reason(
    tmp_path: Path,
) -> None:
    with pytest.raises(BrokerError, match="emqx runs in Docker only: EMQX is in no registry"):
        NativeRuntime().start(StartRequest(target="emqx", workdir=tmp_path))


def test_unknown_target_is_a_scenario_error_for_every_runtime() -> None:
    for runtime in (NativeRuntime(), ExternalRuntime(), DockerRuntime()):
        with pytest.raises(ScenarioError, match="unknown target 'kafka'"):
            runtime.availability("kafka")


def test_mosquitto_config_has_loopback_listener_anonymous_access_and_benchmark_limits(
    tmp_path: Path,
) -> None:
    plan = MosquittoSpec().prepare(
        Path("/usr/sbin/mosquitto"), tmp_path, "127.0.0.1", 18830, {"max_inflight_messages": 5}
    )
    assert plan.argv == ["/usr/sbin/mosquitto", "-c", str(tmp_path / "mosquitto.conf")]
    assert plan.config_path is not None
    assert plan.config_path.read_text() == plan.config_text
    lines = plan.config_text.splitlines()
    for expected in (
        "listener 18830 127.0.0.1",
        "allow_anonymous true",
        "persistence false",
        "log_dest stderr",
        "set_tcp_nodelay true",
        "max_queued_messages 100000",
        "max_inflight_messages 5",
    ):
        assert expected in lines
    assert any(line.startswith("user ") for line in lines)
    assert plan.settings["max_inflight_messages"] == 5
    assert plan.settings["max_queued_messages"] == 100000


def test_mosquitto_persistence_option_puts_the_database_in_the_workdir(tmp_path: Path) -> None:
    plan = MosquittoSpec().prepare(
        Path("mosquitto"), tmp_path, "127.0.0.1", 1, {"persistence": True}
    )
    assert f"persistence_location {tmp_path / 'data'}/" in plan.config_text.splitlines()
    assert (tmp_path / "data").is_dir()


def test_nats_config_listens_on_loopback_without_monitoring(tmp_path: Path) -> None:
    plan = NatsSpec().prepare(Path("nats-server"), tmp_path, "127.0.0.1", 4333, {})
    assert 'listen: "127.0.0.1:4333"' in plan.config_text
    assert "http" not in plan.config_text
    assert plan.settings["monitoring"] is False
    assert plan.argv[1:] == ["-c", str(tmp_path / "nats.conf")]


@pytest.mark.parametrize("spec", [MosquittoSpec(), NatsSpec()])
def test_unknown_broker_options_are_refused_with_the_known_ones(
    spec: MosquittoSpec | NatsSpec, tmp_path: Path
) -> None:
    with pytest.raises(BrokerError, match=r"unknown \w+ option\(s\) max_qeued \(known: "):
        spec.prepare(Path("x"), tmp_path, "127.0.0.1", 1, {"max_qeued": 1})


def test_mqtt_probe_connect_packet_is_a_valid_mqtt_311_connect() -> None:
    packet = mqtt_connect_packet("ab", keepalive_s=60)
    assert packet == bytes.fromhex("100e00044d5154540402003c00026162")


def test_nats_binary_is_found_in_the_environment_scripts_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "nats-server"
    fake.write_text("#!/bin/sh\necho 'nats-server: v9.8.7'\n")
    fake.chmod(0o755)
    monkeypatch.setattr("sysconfig.get_path", lambda name: str(tmp_path))
    spec = NatsSpec()
    assert spec.find_binary() == fake
    assert spec.version(fake) == "9.8.7"


def test_log_tail_returns_the_last_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert read_tail(log, 3) == "line 97\nline 98\nline 99"
    assert read_tail(tmp_path / "missing.log", 3) == ""


def test_external_runtime_refuses_unknown_options_and_missing_pids(tmp_path: Path) -> None:
    runtime = ExternalRuntime()
    with pytest.raises(BrokerError, match=r"unknown external runtime option\(s\) prot"):
        runtime.start(StartRequest(target="nats", workdir=tmp_path, options={"prot": 1}))
    with pytest.raises(BrokerError, match="pid 999999999 does not exist"):
        runtime.start(StartRequest(target="nats", workdir=tmp_path, options={"pid": 999999999}))


def test_an_unknown_option_named_with_a_newline_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(BrokerError) as refused:
        NatsSpec().prepare(Path("x"), tmp_path, "127.0.0.1", 1, {"\n": 1})
    assert str(refused.value).startswith("unknown nats option(s) '\\n' (known: ")
    assert "\n" not in str(refused.value)


def test_a_broker_left_running_on_purpose_is_reaped_when_stopped_by_pid_after_its_handle_is_gone(
    tmp_path: Path,
) -> None:
    # ``brokers up`` drops the broker's handle while it runs and ``brokers down`` kills it by
    # PID, perhaps from the same process: it must neither be reported as a dropped running
    # child (a ResourceWarning, an error here) nor stay a zombie.
    request = StartRequest(target="sleep", workdir=tmp_path, outlive_mqbench=True)
    sleep = Path(shutil.which("sleep") or "/bin/sleep")
    process = native._spawn("sleep", sleep, [str(sleep), "30"], request, tmp_path / "log", None)
    pid = process.pid
    del process
    gc.collect()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _exists(pid):
        time.sleep(0.01)
    assert not _exists(pid)  # killed and reaped: no zombie left behind


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # a zombie still exists until its parent waits for it
    except ProcessLookupError:
        return False
    return True
