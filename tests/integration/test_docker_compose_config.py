"""Every compose file, EMQX's and TBMQ's included (no image of theirs can be had here), is
accepted by the real Compose v2 (`docker compose config`) with the variables the runtime
passes for a limiting and for the unlimited resources profile, and comes out with the limits
the profile asks for."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from docker_support import require_engine

from mqbench.brokers.docker.compose import TOXIPROXY, compose_dir
from mqbench.brokers.registry import compose_entry, target_names
from mqbench.brokers.resources.profiles import get_profile

pytestmark = [pytest.mark.integration, pytest.mark.docker]

FILES = sorted({compose_entry(t).file for t in target_names()} | {TOXIPROXY.file})


@pytest.fixture(scope="module", autouse=True)
def engine() -> None:
    require_engine()


def compose_config(file: str, variables: dict[str, str]) -> dict[str, Any]:
    """``docker compose -f <file> config --format json`` with only ``variables`` set."""
    proc = subprocess.run(
        [
            "docker",
            "compose",
            "-p",
            "mqbench-config-check",
            "-f",
            str(compose_dir() / file),
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_docker_env(), **variables},
        check=False,
    )
    assert proc.returncode == 0, f"{file}: {proc.stderr.strip()}"
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _docker_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MQBENCH_")}


@pytest.mark.parametrize("profile", ["1cpu-2g", "unlimited"])
@pytest.mark.parametrize("file", FILES)
def test_compose_accepts_every_file_with_every_profiles_variables(file: str, profile: str) -> None:
    chosen = get_profile(profile)
    variables = {**chosen.env(), "MQBENCH_NOFILE": "20000", "MQBENCH_TBMQ_BASIC_AUTH": "true"}
    config = compose_config(file, variables)
    services = config["services"]
    assert services
    for name, service in services.items():
        ulimits = service["ulimits"]["nofile"]
        assert (ulimits["soft"], ulimits["hard"]) == (20000, 20000), name
    broker = _broker_service(file, services)
    if chosen.cpus is not None:
        assert float(broker["cpus"]) == chosen.cpus
        assert int(broker["mem_limit"]) == chosen.mem_mb * 1024 * 1024
    for port in broker.get("ports", []):
        assert port["host_ip"] == "127.0.0.1"


def _broker_service(file: str, services: dict[str, Any]) -> dict[str, Any]:
    names = {compose_entry(t).service for t in target_names() if compose_entry(t).file == file}
    names |= {TOXIPROXY.service} if file == TOXIPROXY.file else set()
    (name,) = names
    return services[name]
