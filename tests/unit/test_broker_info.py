"""``RunningBroker.info`` is one typed value per runtime (``mqbench/brokers/info.py``) whose
``to_dict`` is the manifest's ``broker`` entry with the keys, in the order, that manifests
have always had."""

from __future__ import annotations

import json
from dataclasses import replace

from mqbench.brokers.info import DockerInfo, ExternalInfo, NativeInfo

NATIVE = NativeInfo(
    name="nats",
    target="nats",
    version="2.10.0",
    binary="/bin/nats-server",
    argv=["/bin/nats-server", "-c", "nats.conf"],
    config_path="/w/nats.conf",
    config="listen: 1\n",
    host="127.0.0.1",
    port=4222,
    pid=7,
    log_path="/w/nats.log",
    settings={"max_pending": 1},
    resources=None,
)

DOCKER = DockerInfo(
    name="tbmq",
    target="tbmq",
    project="mqbench-tbmq-1",
    compose_file="/c/tbmq.yaml",
    compose_sha256="ab",
    variables={"MQBENCH_PORT": "1883"},
    profile={"name": "1cpu-2g"},
    nofile=300000,
    network="bridge",
    host="127.0.0.1",
    bind="127.0.0.1",
    port=1883,
    ports={"MQBENCH_PORT": 1883},
    docker_host=None,
    engine_version="27.3.1",
    compose_version="2.29.7",
    cgroup_version="2",
    services={"tbmq": {"image": "thingsboard/tbmq:2.1.0"}},
    images={},
    version="thingsboard/tbmq:2.1.0",
    started_ns=1,
    hook_facts={"tbmq_credentials": []},
)


def test_a_native_brokers_entry_keeps_its_historic_keys_in_order() -> None:
    assert list(NATIVE.to_dict()) == [
        "name",
        "target",
        "runtime",
        "version",
        "binary",
        "argv",
        "config_path",
        "config",
        "host",
        "port",
        "pid",
        "log_path",
        "settings",
        "resources",
    ]
    secured = replace(NATIVE, security={"tls": True}, started_ns=5)
    assert list(secured.to_dict())[-2:] == ["security", "started_ns"]
    assert NATIVE.to_dict()["runtime"] == "native"


def test_what_a_stop_learns_follows_the_start_facts() -> None:
    stopped = replace(NATIVE, exit_code=0, companion_pids=[9])
    assert list(stopped.to_dict())[-2:] == ["exit_code", "companion_pids"]
    down = replace(DOCKER, down_exit_code=1, down_error="x")
    assert list(down.to_dict())[-2:] == ["down_exit_code", "down_error"]


def test_a_docker_brokers_hook_facts_sit_at_the_top_level_before_its_secured_config() -> None:
    data = DOCKER.to_dict()
    assert list(data)[-2:] == ["started_ns", "tbmq_credentials"]
    assert "security" not in data and "settings" not in data
    secured = replace(
        DOCKER,
        security={"tls": True},
        secured_container={"user": "1883:1883"},
        config_path=None,
        config="c",
        settings={"a": 1},
    ).to_dict()
    assert list(secured)[-6:] == [
        "tbmq_credentials",
        "security",
        "secured_container",
        "config_path",
        "config",
        "settings",
    ]
    assert secured["config_path"] is None


def test_an_external_broker_records_only_what_mqbench_knows() -> None:
    info = ExternalInfo("nats", "nats", "unknown (external)", "127.0.0.1", 4222, None)
    assert json.dumps(info.to_dict()) == (
        '{"name": "nats", "target": "nats", "runtime": "external", '
        '"version": "unknown (external)", "host": "127.0.0.1", "port": 4222, "pid": null}'
    )


def test_the_entry_is_a_copy_the_caller_may_change() -> None:
    data = NATIVE.to_dict()
    data["settings"]["max_pending"] = 2
    data["argv"].append("x")
    assert NATIVE.settings == {"max_pending": 1} and len(NATIVE.argv) == 3
