"""Secured brokers (TLS + password) in real containers, one per target for the module: the
image runs the native config (its binary at the path the runtime names, as the image's
broker user, reading the staged files through read-only and read-write bind mounts), its
healthcheck passes over TLS with the password read inside the container, TLS + the password
connects from this machine, and a wrong password or an untrusted CA is refused in one line."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_runs import docker, image_recipes, local_targets, wait_gone
from docker_support import ensure_images, require_engine
from secured_probe import connect_as_bob

from mqbench.brokers.base import BrokerSecurity, RunningBroker, StartRequest
from mqbench.brokers.docker.runtime import DockerBroker, DockerRuntime
from mqbench.brokers.registry import get_definition
from mqbench.brokers.security.tls_material import TlsMaterial, generate
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind

pytestmark = [pytest.mark.integration, pytest.mark.docker]

PASSWORD = "Container-pw-5d1e"
WRONG = "Wrong-pw-0c7b"
SECURED = ["mosquitto", "nats", "redis", "rabbitmq-mqtt"]
"""rabbitmq-amqp runs the same image and config as rabbitmq-mqtt, whose container also
publishes the AMQP listener: one RabbitMQ container serves both clients' cases."""
TARGETS = [t for t in SECURED if t in local_targets()]
"""The secured targets whose images build here."""
CASES = [
    (target, client)
    for target, client in [
        ("mosquitto", "mqtt"),
        ("nats", "nats"),
        ("redis", "redis"),
        ("rabbitmq-mqtt", "mqtt"),
        ("rabbitmq-mqtt", "amqp"),
    ]
    if target in TARGETS
]


class Secured:
    def __init__(self, root: Path) -> None:
        self.material: TlsMaterial = generate(root / "tls")
        self.stranger: TlsMaterial = generate(root / "stranger")
        self.security = BrokerSecurity(root / "private", self.material, False, "bob", PASSWORD)
        self.running: dict[str, RunningBroker] = {}


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    require_engine()
    for target in TARGETS:
        ensure_images(*(image_recipes(target) or []))
    with tempfile.TemporaryDirectory(prefix="mqbench-secured-containers-") as tmp:
        state = Secured(Path(tmp))
        state.security.private_dir.mkdir(mode=0o700)
        try:
            for target in TARGETS:
                state.running[target] = DockerRuntime().start(
                    StartRequest(
                        target,
                        Path(tmp) / target,
                        security=state.security,
                        startup_timeout_s=120.0,
                    )
                )
            yield state
        finally:
            for broker in state.running.values():
                broker.stop()
    projects = [b.project.name for b in state.running.values() if isinstance(b, DockerBroker)]
    assert wait_gone(projects, within_s=10) == {}


def container(broker: RunningBroker) -> dict[str, Any]:
    assert isinstance(broker, DockerBroker)
    (ref,) = [c for c in broker.containers if c.service == broker.info.name]
    data: list[dict[str, Any]] = json.loads(docker("inspect", ref.id).stdout)
    return data[0]


def endpoint(secured: Secured, target: str, client: str) -> Endpoint:
    """The published port of ``client``'s protocol (RabbitMQ's AMQP port for AMQP)."""
    broker = secured.running[target]
    if client == "amqp" and target == "rabbitmq-mqtt":
        return Endpoint(broker.endpoint.host, int(broker.info.ports["MQBENCH_AMQP_PORT"]))
    return broker.endpoint


@pytest.mark.parametrize(("target", "client"), CASES)
def test_tls_with_the_password_connects_to_the_broker_in_its_container(
    secured: Secured, target: str, client: str
) -> None:
    ca = secured.material.ca_cert
    asyncio.run(connect_as_bob(client, endpoint(secured, target, client), PASSWORD, ca, "ok"))


@pytest.mark.parametrize(("target", "client"), CASES)
def test_a_wrong_password_is_refused_in_one_line(
    secured: Secured, target: str, client: str
) -> None:
    ca = secured.material.ca_cert
    with pytest.raises(TransportError) as info:
        asyncio.run(connect_as_bob(client, endpoint(secured, target, client), WRONG, ca, "no"))
    message = str(info.value)
    assert info.value.kind is TransportErrorKind.CONNECT_FAILED
    assert "\n" not in message and WRONG not in message
    assert "user 'bob'" in message


@pytest.mark.parametrize(("target", "client"), CASES)
def test_a_client_that_does_not_trust_the_ca_is_refused(
    secured: Secured, target: str, client: str
) -> None:
    stranger = secured.stranger.ca_cert
    with pytest.raises(TransportError) as info:
        asyncio.run(
            connect_as_bob(client, endpoint(secured, target, client), PASSWORD, stranger, "ca")
        )
    message = str(info.value)
    assert info.value.kind is TransportErrorKind.CONNECT_FAILED
    assert "\n" not in message
    assert "not trusted" in message or "CERTIFICATE_VERIFY_FAILED" in message


@pytest.mark.parametrize("target", TARGETS)
def test_the_container_runs_the_native_config_as_the_images_broker_user(
    secured: Secured, target: str
) -> None:
    spec = get_definition(target).secured_container
    assert spec is not None
    inspected = container(secured.running[target])
    config = inspected["Config"]
    assert config["User"] == f"{spec.uid}:{spec.gid}"
    assert config["Entrypoint"][0] in (str(spec.binary), "/usr/bin/env")
    assert str(spec.binary) in config["Entrypoint"]  # the image has the binary there
    assert inspected["State"]["Health"]["Status"] == "healthy"  # the TLS healthcheck passed
    mounts = {m["Destination"]: m["RW"] for m in inspected["Mounts"]}
    assert mounts == {"/mqbench/work": True, "/mqbench/private": False}
    assert PASSWORD not in json.dumps(inspected)
