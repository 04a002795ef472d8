"""Locally built images, for real: built (cached) by ``mqbench brokers build-images``, run
through their compose files by ``docker compose up --wait`` (so the files' healthchecks
pass in them), served on a published 127.0.0.1 port, and chosen by the runtime's image
selection when the official image cannot be pulled. Every other target's local image runs
end to end in tests/integration/test_docker_run.py (``mqbench run`` in Docker), the
Toxiproxy image in test_docker_engine.py.

The compose files' ``nofile`` limit follows ``MQBENCH_NOFILE``; these tests set it to the
host's hard limit (as the runtime does) and add an override file that only labels the
containers.
"""

from __future__ import annotations

import os
import resource
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_support import TEST_LABEL, docker_engine, docker_images  # noqa: F401

from mqbench.brokers.docker.compose import compose_dir, load_compose, service_images
from mqbench.brokers.docker.image_engine import SdkEngine
from mqbench.brokers.docker.image_recipes import parse_apt_policy
from mqbench.brokers.docker.images import ImageSelector, choose_images, image_variable
from mqbench.brokers.runtime.net import free_port
from mqbench.brokers.runtime.probes import nats_probe

pytestmark = [pytest.mark.integration, pytest.mark.docker]

UP_TIMEOUT_S = 120


def nofile_limit() -> int:
    """The host's hard ``nofile`` limit (at most 65536), which containers may not exceed."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)


class ComposeRun:
    """One compose project of a compose/ file with chosen images; ``down`` at the end."""

    def __init__(
        self,
        file: str,
        images: dict[str, str],
        tmp: Path,
        port_vars: tuple[str, ...] = ("MQBENCH_PORT",),
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.project = f"mqbench-test-images-{secrets.token_hex(3)}"
        self.ports = {var: free_port("127.0.0.1") for var in port_vars}
        self.port = self.ports[port_vars[0]]
        override = self._override(load_compose(compose_dir() / file), tmp)
        self.files = [str(compose_dir() / file), str(override)]
        self.env = {
            **{var: str(port) for var, port in self.ports.items()},
            "MQBENCH_CPUS": "1",
            "MQBENCH_MEM": "1024m",
            "MQBENCH_JVM_OPTS": "-Xms256m -Xmx512m",
            "MQBENCH_NOFILE": str(nofile_limit()),
            **{image_variable(service): image for service, image in images.items()},
            **(extra_env or {}),
        }

    def _override(self, document: dict[str, Any], tmp: Path) -> Path:
        services: dict[str, Any] = {}
        for service in document["services"]:
            services[service] = {"labels": {TEST_LABEL: "test_docker_local_images"}}
        path = tmp / f"override-{self.project}.yaml"
        path.write_text(yaml.safe_dump({"services": services}), encoding="utf-8")
        return path

    def compose(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        """``docker compose -p <project> -f <file> -f <override> <args>``."""
        argv = ["docker", "compose", "-p", self.project]
        for f in self.files:
            argv += ["-f", f]
        return subprocess.run(
            [*argv, *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def up(self) -> None:
        """Start and wait until the compose file's healthcheck passes."""
        proc = self.compose(
            "up", "-d", "--wait", "--wait-timeout", str(UP_TIMEOUT_S), timeout_s=UP_TIMEOUT_S + 60
        )
        if proc.returncode != 0:
            logs = self.compose("logs", "--tail", "20").stdout
            self.down()
            pytest.fail(f"compose up failed: {proc.stderr.strip()[-800:]}\n{logs}")

    def down(self) -> None:
        """Remove the project's containers, networks and volumes."""
        self.compose("down", "-v", "--remove-orphans", "--timeout", "5", timeout_s=120)


@pytest.fixture(scope="module")
def built(docker_images):  # type: ignore[no-untyped-def]  # noqa: F811
    """The local mosquitto and nats images (built once, cached by recipe hash)."""
    return docker_images("mosquitto", "nats")


@pytest.fixture(scope="module")
def mosquitto_run(built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeRun]:  # type: ignore[no-untyped-def]
    """compose/mosquitto.yaml running the local mosquitto image."""
    run = ComposeRun(
        "mosquitto.yaml", {"mosquitto": built["mosquitto"].ref}, tmp_path_factory.mktemp("mosq")
    )
    run.up()
    yield run
    run.down()


@pytest.fixture(scope="module")
def nats_run(built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeRun]:  # type: ignore[no-untyped-def]
    """compose/nats.yaml running the local nats image."""
    run = ComposeRun("nats.yaml", {"nats": built["nats"].ref}, tmp_path_factory.mktemp("nats"))
    run.up()
    yield run
    run.down()


def test_local_images_carry_their_own_name_and_the_software_inside(built) -> None:  # type: ignore[no-untyped-def]
    with SdkEngine() as engine:
        for target in ("mosquitto", "nats"):
            result = built[target]
            assert result.ref.startswith(f"mqbench-local/{target}:")
            facts = engine.image(result.ref)
            assert facts is not None and facts.id == result.image_id
            assert facts.labels["org.mqbench.recipe"] == target
    names = {s.name: s.version for s in built["mosquitto"].software}
    policy = subprocess.run(
        ["apt-cache", "policy", "mosquitto"], capture_output=True, text=True, check=True
    ).stdout
    installed, candidate, _ = parse_apt_policy(policy)
    # the native runtime's Debian package (or what a fresh machine installs, once the
    # archive no longer serves the installed version)
    assert names["mosquitto"] in {installed, candidate}
    assert {s.name for s in built["nats"].software} == {"nats-server", "busybox"}


def test_a_second_build_finds_every_image_up_to_date(built) -> None:  # type: ignore[no-untyped-def]
    from mqbench.brokers.docker.image_engine import build_local_images

    again = build_local_images(["mosquitto", "nats"])
    assert {r.action for r in again} == {"up-to-date"}
    assert {r.recipe: r.image_id for r in again}["mosquitto"] == built["mosquitto"].image_id


def test_the_local_mosquitto_passes_its_compose_healthcheck_and_delivers(
    mosquitto_run: ComposeRun,
) -> None:
    port = str(mosquitto_run.port)
    sub = subprocess.Popen(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-t",
            "t/1",
            "-q",
            "1",
            "-C",
            "1",
            "-W",
            "10",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(20):
            subprocess.run(
                [
                    "mosquitto_pub",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    port,
                    "-t",
                    "t/1",
                    "-q",
                    "1",
                    "-m",
                    "hello",
                ],
                check=True,
                timeout=10,
            )
            try:
                out, _ = sub.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            pytest.fail("no message came back through the containerised mosquitto")
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert out.strip() == "hello"


def test_the_local_nats_passes_its_compose_healthcheck_and_answers_ping(
    nats_run: ComposeRun,
) -> None:
    assert nats_probe("127.0.0.1", nats_run.port, 5.0)


def test_selection_falls_back_to_the_local_image_when_the_official_cannot_be_pulled(
    built,  # type: ignore[no-untyped-def]
) -> None:
    document = load_compose(compose_dir() / "mosquitto.yaml", {})
    wanted = service_images(document)
    assert wanted == {"mosquitto": "eclipse-mosquitto:2.0.20"}
    with SdkEngine() as engine:
        if engine.image("eclipse-mosquitto:2.0.20") is not None:
            pytest.skip("the official image is present here, so it is chosen (unit-tested)")
        variables, choices = choose_images(wanted, ImageSelector(engine))
    choice = choices["mosquitto"]
    assert choice.kind == "local" and choice.ref == built["mosquitto"].ref
    assert variables == {"MQBENCH_IMAGE_MOSQUITTO": built["mosquitto"].ref}
    assert choice.describe()["image_id"] == built["mosquitto"].image_id


def test_down_leaves_no_container_or_network_of_the_project(
    docker_engine: SdkEngine,  # noqa: F811
    built,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    run = ComposeRun("nats.yaml", {"nats": built["nats"].ref}, tmp_path)
    run.up()
    label = {"label": f"com.docker.compose.project={run.project}"}
    assert len(docker_engine.client.containers.list(all=True, filters=label)) == 1
    run.down()
    assert docker_engine.client.containers.list(all=True, filters=label) == []
    assert docker_engine.client.networks.list(filters=label) == []
