"""`mqbench targets`' line on what was verified of a target in Docker, from the images its
compose file names and the local builds that stand in for them."""

from __future__ import annotations

import dataclasses

import pytest

from mqbench.brokers import registry
from mqbench.brokers.definition import BrokerDefinition
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.brokers.docker.verification import verify
from mqbench.brokers.registry import get_definition


def test_a_target_whose_images_all_build_here_is_run_end_to_end_by_the_tests() -> None:
    line = verify("mosquitto", {"mosquitto": "eclipse-mosquitto:2.0.20"}).describe()
    assert line == (
        "run end to end in containers by the test suite, on local images "
        "(mqbench brokers build-images mosquitto)"
    )


def test_a_target_with_an_image_nothing_here_builds_had_only_its_compose_entry_checked() -> None:
    verification = verify("emqx", {"emqx": "emqx/emqx:5.8.6"})
    assert not verification.runs_here
    assert verification.describe() == (
        "compose entry checked with `docker compose config` only, never run here: no local "
        "build of emqx/emqx:5.8.6 exists"
    )


def test_emqx_and_tbmq_are_the_targets_docker_never_ran_here() -> None:
    runtime = DockerRuntime()
    never = [
        t
        for t in ("emqx", "tbmq", "mosquitto", "nats")
        if runtime.verification(t).startswith("compose entry checked")
    ]
    assert "emqx" in never and "tbmq" in never
    assert "mosquitto" not in never and "nats" not in never


def test_a_target_without_a_compose_entry_has_no_docker_verification_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    native_only = dataclasses.replace(get_definition("mosquitto"), name="native-only", compose=None)
    broker = BrokerDefinition("native-only", (native_only,))
    monkeypatch.setattr(registry, "BROKERS", (*registry.BROKERS, broker))
    assert DockerRuntime().verification("native-only") == ""
