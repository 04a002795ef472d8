"""The config files the docker runtime mounts into secured containers work: no Docker
engine runs here, so the exact files ``stage_secured`` writes for a container (the same
call the docker runtime makes, only the listen address and port differ) are run by the
real native brokers on 127.0.0.1 through the native runtime, with the container mount
points mapped back to the staging directories. Then TLS + the password connects, a wrong
password and an untrusted CA are refused in one line."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secured_probe import connect_as_bob, endpoint_of

from mqbench.brokers.base import BrokerSecurity, RunningBroker, StartRequest
from mqbench.brokers.docker.security import (
    MOUNT_PRIVATE,
    MOUNT_WORK,
    StagedConfig,
    stage_secured,
)
from mqbench.brokers.registry import get_definition
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.brokers.runtime.native_spec import LaunchPlan, NativeSpec
from mqbench.brokers.runtime.net import free_port
from mqbench.brokers.security.tls_material import TlsMaterial, generate
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASSWORD = "Container-pw-5d1e"
WRONG = "Wrong-pw-0c7b"
TARGETS = ["mosquitto", "nats", "redis", "rabbitmq-mqtt", "rabbitmq-amqp"]
CASES = [
    ("mosquitto", "mqtt"),
    ("nats", "nats"),
    ("redis", "redis"),
    ("rabbitmq-mqtt", "mqtt"),
    ("rabbitmq-mqtt", "amqp"),
    ("rabbitmq-amqp", "amqp"),
]


class StagedSpec(NativeSpec):
    """The real spec, except that the launch plan is the staged container one."""

    def __init__(self, real: NativeSpec, binary: Path, port: int, plan: LaunchPlan) -> None:
        self.real = real
        self.name = real.name
        self.executable = real.executable
        self.install_hint = real.install_hint
        self._binary = binary
        self._port = port
        self._plan = plan

    def find_binary(self) -> Path | None:
        return self._binary

    def version(self, binary: Path) -> str:
        return self.real.version(binary)

    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        raise AssertionError("a secured start must use the staged plan")

    def prepare_secured(
        self,
        binary: Path,
        workdir: Path,
        host: str,
        port: int,
        options: Mapping[str, Any],
        security: BrokerSecurity,
    ) -> LaunchPlan:
        assert port == self._port
        return self._plan

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        return self.real.check_ready(host, port, timeout_s)

    def companion_pids(self, plan: LaunchPlan) -> list[int]:
        return self.real.companion_pids(plan)


def _to_host(text: str, staged: StagedConfig) -> str:
    """Container mount points -> the staging directories they are mounted from."""
    return text.replace(str(MOUNT_WORK), str(staged.work)).replace(
        str(MOUNT_PRIVATE), str(staged.private)
    )


def _files(root: Path) -> Iterable[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def _host_plan(staged: StagedConfig, container_binary: str, binary: Path) -> LaunchPlan:
    """Rewrite the staged files in place (owner and mode stay) and the argv."""
    for path in _files(staged.stage):
        text = path.read_text(encoding="utf-8")
        path.write_text(_to_host(text, staged), encoding="utf-8")
    argv = [
        _to_host(arg, staged).replace(container_binary, str(binary)) for arg in staged.plan.argv
    ]
    plan = staged.plan
    return LaunchPlan(argv, plan.config_path, plan.config_text, plan.settings, plan.ready_check)


class Brokers:
    def __init__(self, material: TlsMaterial, stranger: TlsMaterial) -> None:
        self.material = material
        self.stranger = stranger
        self.running: dict[str, RunningBroker] = {}
        self.staged: dict[str, StagedConfig] = {}


@pytest.fixture(scope="module")
def brokers() -> Iterator[Brokers]:
    if os.geteuid() != 0:
        pytest.skip("handing the staged files to the brokers' users needs root")
    # Mosquitto drops root to its own user before it reads certificates and the password
    # file, so the directories above the stage must be traversable (pytest's are 0700).
    root = Path(tempfile.mkdtemp(prefix="mqbench-container-configs-"))
    os.chmod(root, 0o711)
    state = Brokers(generate(root / "tls"), generate(root / "stranger"))
    security = BrokerSecurity(root / "private", state.material, False, "bob", PASSWORD)
    try:
        for target in TARGETS:
            definition = get_definition(target)
            assert definition.native is not None and definition.secured_container is not None
            real = definition.native()
            binary = real.find_binary()
            if binary is None:
                continue
            port = free_port()
            options: dict[str, Any] = {}
            owner = None
            if target == "rabbitmq-mqtt":
                options["amqp_port"] = free_port()
            if target == "mosquitto":
                # the container's uid 1883 is the image's mosquitto user; here it is Debian's
                user = pwd.getpwnam("mosquitto")
                owner = (user.pw_uid, user.pw_gid)
            staged = stage_secured(
                definition, root / f"stage-{target}", security, "127.0.0.1", port, options, owner
            )
            state.staged[target] = staged
            plan = _host_plan(staged, str(definition.secured_container.binary), binary)
            runtime = NativeRuntime({target: StagedSpec(real, binary, port, plan)})
            state.running[target] = runtime.start(
                StartRequest(
                    target=target,
                    workdir=root / "run" / target,
                    port=port,
                    security=security,
                    startup_timeout_s=90,
                )
            )
        yield state
    finally:
        for broker in state.running.values():
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def _endpoint(brokers: Brokers, target: str, client: str) -> Endpoint:
    return endpoint_of(brokers.running, target, client)


async def _connect(client: str, endpoint: Endpoint, password: str, ca: Path) -> None:
    await connect_as_bob(client, endpoint, password, ca, "container-config-probe")


@pytest.mark.parametrize(("target", "client"), CASES)
def test_the_container_config_accepts_tls_with_the_password(
    brokers: Brokers, target: str, client: str
) -> None:
    endpoint = _endpoint(brokers, target, client)
    asyncio.run(_connect(client, endpoint, PASSWORD, brokers.material.ca_cert))


@pytest.mark.parametrize(("target", "client"), CASES)
def test_the_container_config_refuses_a_wrong_password_in_one_line(
    brokers: Brokers, target: str, client: str
) -> None:
    endpoint = _endpoint(brokers, target, client)
    with pytest.raises(TransportError) as caught:
        asyncio.run(_connect(client, endpoint, WRONG, brokers.material.ca_cert))
    message = str(caught.value)
    assert caught.value.kind is TransportErrorKind.CONNECT_FAILED
    assert "\n" not in message and WRONG not in message
    assert "user 'bob'" in message


@pytest.mark.parametrize(("target", "client"), CASES)
def test_the_container_config_is_refused_by_a_client_that_does_not_trust_its_ca(
    brokers: Brokers, target: str, client: str
) -> None:
    endpoint = _endpoint(brokers, target, client)
    with pytest.raises(TransportError) as caught:
        asyncio.run(_connect(client, endpoint, PASSWORD, brokers.stranger.ca_cert))
    message = str(caught.value)
    assert caught.value.kind is TransportErrorKind.CONNECT_FAILED
    assert "\n" not in message
    assert "not trusted" in message or "CERTIFICATE_VERIFY_FAILED" in message


@pytest.mark.parametrize("target", TARGETS)
def test_the_broker_ran_the_staged_files_with_their_container_owner(
    brokers: Brokers, target: str
) -> None:
    if target not in brokers.running:
        pytest.skip(f"{target} is not installed")
    staged = brokers.staged[target]
    argv = " ".join(brokers.running[target].info.argv)
    assert str(staged.work) in argv
    uid = int(staged.user.split(":")[0])
    assert all(p.stat().st_uid == uid for p in _files(staged.private))


@pytest.mark.parametrize("target", ["mosquitto", "nats", "redis", "rabbitmq-mqtt"])
def test_the_tested_config_differs_from_the_containers_only_in_address_and_ports(
    target: str, tmp_path: Path
) -> None:
    definition = get_definition(target)
    container = definition.secured_container
    assert container is not None
    material = generate(tmp_path / "tls")
    security = BrokerSecurity(tmp_path / "private", material, False, "bob", PASSWORD)
    me = (os.geteuid(), os.getegid())
    options = {"amqp_port": 25672} if target == "rabbitmq-mqtt" else {}
    docker = stage_secured(
        definition, tmp_path / "d", security, "0.0.0.0", container.port, None, me
    )
    tested = stage_secured(definition, tmp_path / "t", security, "127.0.0.1", 21883, options, me)
    ports = {str(container.port), "21883", "5672", "25672"}
    differing = set(docker.plan.config_text.splitlines()) ^ set(
        tested.plan.config_text.splitlines()
    )
    # Redis's protected mode follows the listen address (off behind a published port).
    follows_address = {"protected-mode yes", "protected-mode no"}
    for line in differing - follows_address:
        assert any(p in line for p in ports) or "0.0.0.0" in line or "127.0.0.1" in line, line
