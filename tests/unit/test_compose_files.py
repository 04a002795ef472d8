"""Every compose file, checked without an engine: images, healthchecks, limits, ports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from mqbench.brokers.docker.compose import (
    TOXIPROXY,
    InterpolationError,
    compose_dir,
    interpolate,
    load_compose,
)
from mqbench.brokers.registry import compose_entries, target_names
from mqbench.brokers.resources.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from mqbench.errors import BrokerError

COMPOSE_TARGETS = compose_entries()

FILES = sorted({c.file for c in COMPOSE_TARGETS.values()} | {TOXIPROXY.file})
AUX_SERVICES = {"tbmq.yaml": {"postgres", "kafka", "valkey"}, "tbmq-style.yaml": {"redis"}}
"""Helper services next to a broker: fixed auxiliary limits, not the profile's."""


def resolved(file: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return load_compose(compose_dir() / file, env or {})


def services(file: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = resolved(file, env)["services"]
    return data


def test_every_target_has_a_compose_file_with_its_broker_service() -> None:
    assert sorted(COMPOSE_TARGETS) == sorted(target_names())
    for name, ct in COMPOSE_TARGETS.items():
        assert ct.path().is_file(), name
        assert ct.service in services(ct.file), name


@pytest.mark.parametrize("file", FILES)
def test_every_image_is_pinned_to_a_version_tag(file: str) -> None:
    for name, spec in services(file).items():
        image = spec.get("image")
        assert image, f"{file}:{name} has no image"
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"{file}:{name}: {image} has no tag"
        assert tag != "latest" and re.match(r"^v?\d+\.\d+", tag), f"{file}:{name}: {image}"


@pytest.mark.parametrize("file", FILES)
def test_every_service_has_a_healthcheck_and_300000_open_files_unless_the_host_has_fewer(
    file: str,
) -> None:
    for name, spec in services(file).items():
        test = spec.get("healthcheck", {}).get("test")
        assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), f"{file}:{name}"
        assert spec["ulimits"]["nofile"] == {"soft": "300000", "hard": "300000"}, f"{file}:{name}"
    for name, spec in services(file, {"MQBENCH_NOFILE": "20000"}).items():
        assert spec["ulimits"]["nofile"] == {"soft": "20000", "hard": "20000"}, f"{file}:{name}"


def published(spec: dict[str, Any]) -> list[str]:
    return [str(p) for p in spec.get("ports", [])]


@pytest.mark.parametrize("file", FILES)
def test_published_ports_bind_to_loopback_unless_overridden(file: str) -> None:
    ports = [p for spec in services(file).values() for p in published(spec)]
    assert ports, file
    assert all(p.startswith("127.0.0.1:") and p.count(":") == 2 for p in ports), ports
    overridden = [
        p for spec in services(file, {"MQBENCH_BIND": "0.0.0.0"}).values() for p in published(spec)
    ]
    assert all(p.startswith("0.0.0.0:") for p in overridden), overridden


def test_the_port_variable_of_each_target_sets_its_published_port() -> None:
    for name, ct in COMPOSE_TARGETS.items():
        env = {ct.port_var: "40001", **{var: "40002" for var in ct.extra_ports}}
        ports = published(services(ct.file, env)[ct.service])
        mapped = {p.split(":")[1]: p.rsplit(":", 1)[1] for p in ports}
        assert "40001" in mapped, (name, ports)
        for var, inner in ct.extra_ports.items():
            assert mapped.get("40002") == str(inner), (name, var, ports)


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("file", FILES)
def test_cpu_and_memory_limits_resolve_for_every_profile(file: str, profile: str) -> None:
    p = get_profile(profile)
    for name, spec in services(file, p.env()).items():
        if name in AUX_SERVICES.get(file, set()):
            assert (spec["cpus"], spec["mem_limit"]) == ("1", "1g"), f"{file}:{name}"
        else:
            assert (spec["cpus"], spec["mem_limit"]) == (p.cpus_value, p.mem_value), name


@pytest.mark.parametrize("file", FILES)
def test_defaults_without_variables_equal_the_default_profile(file: str) -> None:
    assert services(file) == services(file, get_profile(DEFAULT_PROFILE).env())


THREAD_SETTINGS = [
    ("nats.yaml", "nats", "GOMAXPROCS", "threads"),
    ("emqx.yaml", "emqx", "ERL_FLAGS", "erl_flags"),
    ("rabbitmq.yaml", "rabbitmq", "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "erl_flags"),
    ("hivemq.yaml", "hivemq", "JAVA_OPTS", "jvm_opts"),
    ("artemis.yaml", "artemis", "JAVA_ARGS_APPEND", "jvm_opts"),
    ("activemq.yaml", "activemq", "ACTIVEMQ_OPTS_MEMORY", "jvm_opts"),
    ("tbmq.yaml", "tbmq", "JAVA_OPTS", "jvm_opts"),
]


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize(("file", "service", "variable", "attr"), THREAD_SETTINGS)
def test_thread_settings_follow_the_cpu_limit(
    file: str, service: str, variable: str, attr: str, profile: str
) -> None:
    p = get_profile(profile)
    value = services(file, p.env())[service]["environment"][variable]
    assert value == getattr(p, attr)


def test_profiles_derive_threads_and_heap_from_the_limits() -> None:
    p = get_profile("1cpu-2g")
    assert (p.threads, p.erl_flags) == ("1", "+S 1:1")
    assert p.jvm_opts == "-XX:ActiveProcessorCount=1 -Xms1024m -Xmx1024m"
    q = get_profile("4cpu-8g")
    assert q.env()["MQBENCH_MEM"] == "8192m" and q.env()["MQBENCH_CPUS"] == "4"
    u = get_profile("unlimited")
    assert (u.cpus_value, u.mem_value, u.threads, u.erl_flags) == ("0", "0", "", "")
    assert u.jvm_opts == "-XX:MaxRAMPercentage=50.0"
    with pytest.raises(BrokerError, match=r"unknown resource profile '3cpu' \(known: 1cpu-2g"):
        get_profile("3cpu")


def test_kafka_next_to_tbmq_gets_the_auxiliary_heap_and_processor_count() -> None:
    env = services("tbmq.yaml", get_profile("4cpu-8g").env())["kafka"]["environment"]
    assert env["KAFKA_HEAP_OPTS"] == "-Xms512m -Xmx512m"
    assert env["KAFKA_OPTS"] == "-XX:ActiveProcessorCount=1"


def test_tbmq_basic_auth_is_off_unless_mqbench_turns_it_on() -> None:
    assert services("tbmq.yaml")["tbmq"]["environment"]["SECURITY_MQTT_BASIC_ENABLED"] == "false"
    on = services("tbmq.yaml", {"MQBENCH_TBMQ_BASIC_AUTH": "true"})
    assert on["tbmq"]["environment"]["SECURITY_MQTT_BASIC_ENABLED"] == "true"


def test_tbmq_waits_for_its_three_backing_services_to_be_healthy() -> None:
    depends = services("tbmq.yaml")["tbmq"]["depends_on"]
    assert depends == {
        name: {"condition": "service_healthy"} for name in ("postgres", "kafka", "valkey")
    }


def test_redis_runs_without_persistence_and_with_the_pubsub_limit_set() -> None:
    command = services("redis.yaml")["redis"]["command"]
    assert command[command.index("--save") + 1] == ""
    assert command[command.index("--appendonly") + 1] == "no"
    assert command[command.index("--client-output-buffer-limit") + 1] == "pubsub 0 0 0"


def test_zenoh_router_turns_multicast_scouting_off() -> None:
    assert "--no-multicast-scouting" in services("zenoh.yaml")["zenoh"]["command"]


def test_tbmq_style_image_is_built_from_the_repository_with_a_pinned_base() -> None:
    spec = services("tbmq-style.yaml")["broker"]
    dockerfile = compose_dir().parent / spec["build"]["dockerfile"]
    assert (compose_dir() / spec["build"]["context"]).resolve() == compose_dir().parent
    text = dockerfile.read_text()
    base = re.search(r"^FROM (\S+)", text, re.MULTILINE)
    assert base and re.match(r"python:\d+\.\d+\.\d+-", base.group(1))
    assert "pip install ." in text


def test_interpolation_follows_compose_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("$$SYS/${SET}/$SET", env) == "$SYS/x/x"
    assert interpolate("${EMPTY:-d}|${EMPTY-d}|${UNSET-d}", env) == "d||d"
    assert interpolate("${UNSET:-${SET:-y}z}", env) == "xz"
    assert interpolate("${SET:+alt}|${UNSET:+alt}", env) == "alt|"
    assert interpolate("${X:--Xmx1g}", {}) == "-Xmx1g"
    with pytest.raises(InterpolationError, match="NEED: set it"):
        interpolate("${NEED:?set it}", env)
    with pytest.raises(InterpolationError, match="unclosed"):
        interpolate("${OPEN", env)


def test_a_broken_compose_file_is_a_broker_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("services: [1, 2]\n")
    with pytest.raises(BrokerError, match="not a compose file"):
        load_compose(bad)


def test_the_tbmq_style_image_command_uses_only_options_broker_serve_has() -> None:
    from typer.testing import CliRunner

    from mqbench.cli.app import app

    dockerfile = (compose_dir() / "tbmq-style" / "Dockerfile").read_text()
    (cmd,) = [line for line in dockerfile.splitlines() if line.startswith("CMD ")]
    assert "mqbench broker serve" in cmd
    used = set(re.findall(r"(--[a-z][a-z-]+)", cmd.split("mqbench broker serve", 1)[1]))
    assert used >= {"--host", "--port", "--persistence", "--redis-url"}
    help_text = CliRunner().invoke(app, ["broker", "serve", "--help"], terminal_width=200).output
    assert all(option in help_text for option in used), used - set(help_text.split())
