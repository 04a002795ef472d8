"""The docker runtime's secured brokers: the native config staged for bind mounts, the
compose document that mounts it (valid against the Compose Specification), the files'
owners and modes, and no secret in anything written to the result folder."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_schema import compose_errors
from docker_fakes import HEALTHY_ENGINE, FakeDocker, FakeSdk, engine_answers, install_fake_docker

from mqbench.brokers.base import BrokerSecurity, StartRequest
from mqbench.brokers.docker.compose import compose_dir, interpolate_tree, load_compose
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.brokers.docker.security import (
    MOUNT_PRIVATE,
    MOUNT_WORK,
    PROBE_PASSWORD,
    StagedConfig,
    secured_service,
    stage_secured,
)
from mqbench.brokers.registry import compose_entry, get_definition
from mqbench.brokers.resources.profiles import get_profile
from mqbench.brokers.runtime.native_spec import ReadyCheck
from mqbench.brokers.security.tls_material import TlsMaterial, generate
from mqbench.errors import BrokerError

SECRET = "Docker-Secret-7f3a91"
SECURED = ["mosquitto", "nats", "redis", "rabbitmq-mqtt", "rabbitmq-amqp"]
OWNERS = {
    "mosquitto": (1883, 1883),
    "nats": (0, 0),
    "redis": (999, 999),
    "rabbitmq-mqtt": (999, 999),
    "rabbitmq-amqp": (999, 999),
}
VARIANTS = {
    "tls": {"tls": True, "client_cert": False, "auth": False},
    "tls+client-cert": {"tls": True, "client_cert": True, "auth": False},
    "auth": {"tls": False, "client_cert": False, "auth": True},
    "tls+auth": {"tls": True, "client_cert": False, "auth": True},
}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to uid 1883/999")
needs_engine = pytest.mark.skipif(
    not engine_answers(),
    reason="the CLI in a child process reaches the engine through the Docker SDK, which a "
    "fake docker command does not serve (scripts/install_docker.sh starts an engine)",
)


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return generate(tmp_path_factory.mktemp("tls"), client_cert=True)


def _security(tmp_path: Path, material: TlsMaterial, variant: str) -> BrokerSecurity:
    v = VARIANTS[variant]
    return BrokerSecurity(
        tmp_path / "private",
        material if v["tls"] else None,
        bool(v["client_cert"]),
        "bob" if v["auth"] else None,
        SECRET if v["auth"] else None,
    )


def _stage(target: str, tmp_path: Path, security: BrokerSecurity) -> StagedConfig:
    container = get_definition(target).secured_container
    assert container is not None
    return stage_secured(
        get_definition(target), tmp_path / "stage", security, "0.0.0.0", container.port
    )


def _document(target: str, staged: StagedConfig) -> dict[str, Any]:
    entry = compose_entry(target)
    return secured_service(load_compose(entry.path()), entry.service, staged)


def _files(root: Path) -> Iterator[Path]:
    return (p for p in root.rglob("*") if p.is_file())


@needs_root
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("target", SECURED)
def test_the_secured_compose_document_is_valid_and_mounts_the_staged_files(
    target: str, variant: str, tmp_path: Path, material: TlsMaterial
) -> None:
    staged = _stage(target, tmp_path, _security(tmp_path, material, variant))
    document = _document(target, staged)
    assert compose_errors(document) == []
    variables = {**get_profile("1cpu-2g").env(), "MQBENCH_BIND": "127.0.0.1"}
    assert compose_errors(interpolate_tree(document, variables)) == []
    service = document["services"][compose_entry(target).service]
    uid, gid = OWNERS[target]
    assert service["user"] == f"{uid}:{gid}"
    assert "command" not in service
    assert service["entrypoint"] == staged.plan.argv
    assert service["volumes"] == [
        {"type": "bind", "source": str(staged.work), "target": str(MOUNT_WORK)},
        {
            "type": "bind",
            "source": str(staged.private),
            "target": str(MOUNT_PRIVATE),
            "read_only": True,
        },
    ]
    base = load_compose(compose_entry(target).path())["services"][compose_entry(target).service]
    assert service["ports"] == base["ports"]
    assert all(p.startswith("${MQBENCH_BIND:-127.0.0.1}:") for p in service["ports"])
    assert service["healthcheck"]["interval"] == base["healthcheck"]["interval"]
    # the password travels as a mounted file only: no variable is added to the container
    assert service.get("environment") == base.get("environment")


@needs_root
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("target", SECURED)
def test_the_container_config_names_mount_points_never_the_hosts_private_paths(
    target: str, variant: str, tmp_path: Path, material: TlsMaterial
) -> None:
    staged = _stage(target, tmp_path, _security(tmp_path, material, variant))
    text = staged.plan.config_text + " ".join(staged.plan.argv)
    assert str(tmp_path) not in text
    assert str(MOUNT_WORK) in " ".join(staged.plan.argv)
    if VARIANTS[variant]["tls"]:
        assert f"{MOUNT_PRIVATE}/ca.pem" in text and f"{MOUNT_PRIVATE}/server.key" in text
    for path in _files(staged.stage):
        assert str(tmp_path) not in path.read_text(encoding="utf-8", errors="replace"), path


@needs_root
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("target", SECURED)
def test_the_staged_files_belong_to_the_images_user_and_keys_are_not_world_readable(
    target: str, variant: str, tmp_path: Path, material: TlsMaterial
) -> None:
    staged = _stage(target, tmp_path, _security(tmp_path, material, variant))
    uid, gid = OWNERS[target]
    for path in [staged.stage, *staged.stage.rglob("*")]:
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (uid, gid), path
        if path.is_dir() and path in (staged.stage, staged.work, staged.private):
            assert stat.S_IMODE(info.st_mode) == 0o700, path
    for path in _files(staged.private):
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.suffix == ".pem":
            continue
        assert mode == 0o600, (path, oct(mode))


@needs_root
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("target", SECURED)
def test_the_password_is_only_in_private_files_and_never_in_the_compose_document(
    target: str, variant: str, tmp_path: Path, material: TlsMaterial
) -> None:
    staged = _stage(target, tmp_path, _security(tmp_path, material, variant))
    assert SECRET not in yaml.safe_dump(_document(target, staged))
    assert SECRET not in staged.plan.config_text
    assert SECRET not in " ".join(staged.healthcheck)
    assert SECRET not in str(staged.plan.settings)
    for path in _files(staged.work):
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    holding = {p.name for p in _files(staged.private) if SECRET in p.read_text(errors="replace")}
    if not VARIANTS[variant]["auth"]:
        assert holding == set()
        return
    assert (PROBE_PASSWORD in holding) == (target in ("mosquitto", "redis"))
    if target == "mosquitto":
        assert holding == {PROBE_PASSWORD}, "mosquitto's password file holds a PBKDF2 hash"


@needs_root
@pytest.mark.parametrize("target", SECURED)
def test_the_healthcheck_logs_in_with_the_password_file_and_trusts_the_runs_ca(
    target: str, tmp_path: Path, material: TlsMaterial
) -> None:
    staged = _stage(target, tmp_path, _security(tmp_path, material, "tls+auth"))
    check = " ".join(staged.healthcheck)
    if target == "mosquitto":
        assert f"--cafile {MOUNT_PRIVATE}/ca.pem" in check and "-u bob" in check
        assert f"$(cat {MOUNT_PRIVATE}/{PROBE_PASSWORD})" in check
        assert "$SYS/broker/version" in check
    elif target == "redis":
        assert f'REDISCLI_AUTH="$(cat {MOUNT_PRIVATE}/{PROBE_PASSWORD})"' in check
        assert f"--tls --cacert {MOUNT_PRIVATE}/ca.pem" in check and "--user bob" in check
    elif target == "nats":
        assert "http://127.0.0.1:8222/healthz" in check
        assert 'http: "127.0.0.1:8222"' in staged.plan.config_text
    else:
        settings = staged.plan.settings
        assert f"-n {settings['nodename']}" in check
        assert f"check_port_listener {settings['amqp_port']}" in check
        assert f"HOME={MOUNT_WORK}" in check


@needs_root
def test_dollar_signs_are_escaped_for_compose_and_come_back_after_interpolation(
    tmp_path: Path, material: TlsMaterial
) -> None:
    staged = _stage("mosquitto", tmp_path, _security(tmp_path, material, "tls+auth"))
    service = _document("mosquitto", staged)["services"]["mosquitto"]
    assert "$$SYS/broker/version" in service["healthcheck"]["test"][1]
    resolved = interpolate_tree(service, {})
    assert resolved["healthcheck"]["test"] == staged.healthcheck


@needs_root
def test_the_container_listens_on_every_interface_and_redis_drops_protected_mode(
    tmp_path: Path, material: TlsMaterial
) -> None:
    staged = _stage("redis", tmp_path, _security(tmp_path, material, "tls"))
    lines = staged.plan.config_text.splitlines()
    assert "bind 0.0.0.0" in lines and "protected-mode no" in lines
    assert "tls-port 6379" in lines and "port 0" in lines


def test_targets_without_a_secured_container_are_refused_naming_why() -> None:
    runtime = DockerRuntime()
    for target, why in [
        ("emqx", "no EMQX config code"),
        ("hivemq", "Java keystore"),
        ("zenoh", "zenohd"),
        ("tbmq", "tbmq_credentials"),
    ]:
        with pytest.raises(BrokerError, match=why) as caught:
            runtime.check_security(target, True, False)
        assert "\n" not in str(caught.value)
        assert f"for {target}:" in str(caught.value)


def test_secured_targets_pass_the_runtime_check_and_plain_runs_are_never_refused() -> None:
    runtime = DockerRuntime(env={"PATH": os.environ.get("PATH", "")})
    for target in SECURED:
        runtime.check_security(target, True, True)
    runtime.check_security("emqx", False, False)


def test_a_remote_docker_host_cannot_mount_the_runs_keys() -> None:
    runtime = DockerRuntime(env={"DOCKER_HOST": "tcp://10.0.0.5:2376"})
    with pytest.raises(BrokerError, match=r"engine at 10\.0\.0\.5 \(DOCKER_HOST\) cannot see"):
        runtime.check_security("mosquitto", True, False)


MOSQUITTO = FakeSdk({"mosquitto": "eclipse-mosquitto:2.0.20"})


class Probe:
    """Records the host-side readiness wait of a secured start."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[tuple[ReadyCheck, str, int, float]] = []

    def __call__(self, check: ReadyCheck, host: str, port: int, timeout_s: float) -> bool:
        self.calls.append((check, host, port, timeout_s))
        return self.answer


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    return install_fake_docker(tmp_path, monkeypatch)


@needs_root
def test_a_secured_start_runs_the_generated_file_and_probes_tls_from_the_host(
    fake: FakeDocker, tmp_path: Path, material: TlsMaterial
) -> None:
    probe = Probe(True)
    runtime = DockerRuntime(client_factory=MOSQUITTO.factory, wait_ready=probe)
    security = _security(tmp_path, material, "tls+auth")
    workdir = tmp_path / "result" / "broker"
    broker = runtime.start(
        StartRequest("mosquitto", workdir, options={"resources": "1cpu-2g"}, security=security)
    )
    generated = workdir / "compose.secured.yaml"
    (up,) = [c for c in fake.calls() if c["argv"][:2] == ["compose", "-p"]]
    assert up["argv"][3:5] == ["-f", str(generated)]
    ((check, host, port, _),) = probe.calls
    assert (host, port) == ("127.0.0.1", broker.endpoint.port)
    assert getattr(check, "__name__", "") == "ready"  # the plan's TLS probe, not check_ready
    info = broker.info.to_dict()
    assert info["security"]["tls"] is True and info["security"]["auth"] is True
    assert info["secured_container"]["user"] == "1883:1883"
    assert info["config_path"] == f"{MOUNT_WORK}/mosquitto.conf"
    assert (workdir / "container-mosquitto.conf").read_text() == info["config"]
    written = [p for p in (tmp_path / "result").rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {
        "compose.secured.yaml",
        "compose.env",
        "compose.resolved.yaml",
    }
    for path in written:
        assert SECRET not in path.read_text(errors="replace"), path
    assert SECRET not in str(info)
    assert all(SECRET not in str(call) for call in fake.calls())
    broker.stop()


@needs_root
def test_a_secured_broker_that_fails_the_host_probe_is_torn_down_in_one_line(
    fake: FakeDocker, tmp_path: Path, material: TlsMaterial
) -> None:
    runtime = DockerRuntime(client_factory=MOSQUITTO.factory, wait_ready=Probe(False))
    request = StartRequest(
        "mosquitto", tmp_path / "w", security=_security(tmp_path, material, "tls")
    )
    with pytest.raises(BrokerError, match="did not answer a TLS/login probe") as caught:
        runtime.start(request)
    assert "\n" not in str(caught.value)
    assert fake.compose_verbs()[-1] == "down"


def test_every_compose_file_is_valid_against_the_compose_specification() -> None:
    for path in sorted(compose_dir().glob("*.yaml")):
        assert compose_errors(load_compose(path, {})) == [], path.name


def test_the_schema_check_catches_a_key_compose_does_not_know() -> None:
    errors = compose_errors({"services": {"broker": {"image": "x:1", "mount": "/a"}}})
    assert errors and "mount" in errors[0]


@needs_root
@needs_engine
def test_a_secured_docker_run_that_fails_leaves_no_secret_in_results_or_console(
    fake: FakeDocker, tmp_path: Path
) -> None:
    fake.set_rules(
        {"match": ["compose", "version"], "stdout": "2.29.7\n"},
        HEALTHY_ENGINE[1],
        {"match": ["compose", "up"], "stderr": "container mosquitto is unhealthy\n", "rc": 1},
        {"match": ["compose", "logs"], "stdout": "mosquitto-1 | Opening ipv4 listen socket\n"},
    )
    scenario = tmp_path / "secured-docker.yaml"
    scenario.write_text(
        "name: secured-docker\ntargets: mosquitto\nruntime: docker\n"
        "security: {tls: true, auth: {username: bob, password_env: H2_DOCKER_PW}}\n"
        "workload: {pairs: 1, rate: 10, payload: 64, duration: 1s, warmup: 0s, drain: 1s}\n"
    )
    env = {**os.environ, "H2_DOCKER_PW": SECRET}
    env.pop("MQBENCH_DEBUG", None)
    out = tmp_path / "out"
    stages = "mqbench-private-*/broker/docker-mqbench-mosquitto-*"
    before = set(Path(tempfile.gettempdir()).glob(stages))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mqbench.cli",
            "run",
            str(scenario),
            "--no-analyze",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    console = proc.stdout + proc.stderr
    assert "container mosquitto is unhealthy" in console and "Traceback" not in console
    written = [p for p in out.rglob("*") if p.is_file()]
    assert "compose.secured.yaml" in {p.name for p in written}, console
    assert [str(p) for p in written if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in console
    assert all(SECRET not in " ".join(argv) for argv in fake.argvs())
    assert set(Path(tempfile.gettempdir()).glob(stages)) - before == set()  # removed
