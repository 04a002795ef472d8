"""Bad input and failure in Docker, against the real engine: no engine, no compose plugin,
a missing image that cannot be pulled, a port someone else holds, a container that never
becomes healthy. Each is one line saying what is wrong (and how to fix it), and no
container, network or volume of the attempt is left."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from docker_runs import wait_gone
from docker_support import ensure_images, require_engine
from typer.testing import CliRunner

import mqbench.brokers.docker.runtime as docker_runtime
from mqbench.brokers.base import StartRequest
from mqbench.brokers.docker.compose import compose_dir
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.cli.app import app
from mqbench.errors import BrokerError

pytestmark = [pytest.mark.integration, pytest.mark.docker]

PROJECT = re.compile(r"mqbench-mosquitto-[0-9a-f]{6}")


@pytest.fixture(scope="module", autouse=True)
def images() -> None:
    require_engine()
    ensure_images("mosquitto")


def edited_compose(tmp_path: Path, pattern: str, new: str) -> Path:
    """A copy of the compose folder whose mosquitto.yaml has the first match of ``pattern``
    (a regular expression) replaced by ``new``."""
    folder = tmp_path / "compose"
    shutil.copytree(compose_dir(), folder)
    path = folder / "mosquitto.yaml"
    text, count = re.subn(pattern, new, path.read_text(), count=1)
    assert count == 1, pattern
    path.write_text(text)
    return folder


def projects_in(tmp_path: Path) -> list[str]:
    """Compose projects the starts under ``tmp_path`` wrote into their ``compose.env``."""
    names = set()
    for path in tmp_path.rglob("compose.env"):
        names.update(PROJECT.findall(path.read_text()))
    return sorted(names)


def mqbench_run(tmp_path: Path) -> tuple[int, str]:
    """``mqbench run`` of a one-cell docker scenario (in this process): exit code, output."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: bad\nruntime: docker\ntargets: [mosquitto]\n"
        "workload: {pairs: 1, rate: 10, payload: 64, duration: 1s, warmup: 0s, drain: 1s}\n"
    )
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(tmp_path / "out")])
    return result.exit_code, result.output


def test_no_engine_is_one_line_naming_the_socket_and_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    code, output = mqbench_run(tmp_path)
    assert code == 1
    (line,) = output.strip().splitlines()
    assert line.startswith("error: ")
    assert f"target 'mosquitto': no Docker engine answers at unix://{tmp_path}" in line
    assert "start dockerd, or install Docker Engine" in line


def test_no_compose_plugin_is_one_line_saying_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "docker-config"
    empty.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(empty))
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    assert probe.returncode != 0, "compose is installed system-wide; it cannot be hidden here"
    code, output = mqbench_run(tmp_path)
    assert code == 1
    (line,) = output.strip().splitlines()
    assert "the docker compose plugin (Compose v2) is missing" in line
    assert "install Compose v2 as a CLI plugin" in line


def test_a_missing_image_that_cannot_be_pulled_is_named_with_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQBENCH_IMAGES", "official")  # no local stand-in may replace it
    with pytest.raises(BrokerError) as err:
        DockerRuntime().start(StartRequest("mosquitto", tmp_path / "w"))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("mosquitto: image eclipse-mosquitto:2.0.20 is not here and cannot")
    assert message.endswith("mqbench brokers build-images mosquitto)")
    projects = projects_in(tmp_path)
    assert projects == [] or wait_gone(projects, within_s=5) == {}


def test_emqx_without_its_image_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    with pytest.raises(BrokerError) as err:
        DockerRuntime().start(StartRequest("emqx", tmp_path / "w"))
    assert str(err.value) == (
        "emqx: image emqx/emqx:5.8.6 is not here and cannot be pulled, and mqbench cannot "
        "build a local one (no Debian, Maven, PyPI or Go package supplies it; docs/docker.md)"
    )
    assert not list(tmp_path.rglob("compose.env"))  # refused before any project existed


def test_a_port_someone_else_holds_is_named_with_the_log_lines_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        monkeypatch.setattr(docker_runtime, "free_port", lambda host: taken)
        with pytest.raises(BrokerError) as err:
            DockerRuntime().start(StartRequest("mosquitto", tmp_path / "w"))
    message = str(err.value)
    assert message.startswith(f"mosquitto: port {taken} on 127.0.0.1 is already in use")
    assert "last log lines:" in message and "\n" not in message
    projects = projects_in(tmp_path)
    assert projects and wait_gone(projects, within_s=5) == {}


def test_a_container_that_never_becomes_healthy_is_named_with_its_last_log_lines(
    tmp_path: Path,
) -> None:
    folder = edited_compose(tmp_path, r"test: \[.*\]", 'test: ["CMD", "false"]')
    path = folder / "mosquitto.yaml"
    path.write_text(path.read_text().replace("retries: 30", "retries: 1"))
    with pytest.raises(BrokerError) as err:
        DockerRuntime(compose_folder=folder).start(StartRequest("mosquitto", tmp_path / "w"))
    message = str(err.value)
    assert message.startswith("mosquitto: service(s) mosquitto not healthy within 60 s")
    assert "last log lines:" in message and "mosquitto" in message.split("last log lines:")[1]
    assert "\n" not in message
    projects = projects_in(tmp_path)
    assert projects and wait_gone(projects, within_s=5) == {}
