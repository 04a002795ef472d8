"""The target rows: every target, with its transport, port and native spec, in a fixed order."""

from __future__ import annotations

import dataclasses

import pytest

from mqbench.brokers.registry import Target, get_target, native_specs, target_names
from mqbench.errors import ScenarioError

TARGETS_IN_ORDER = [
    "mosquitto",
    "emqx",
    "hivemq",
    "rabbitmq-mqtt",
    "rabbitmq-amqp",
    "artemis",
    "activemq",
    "nats",
    "redis",
    "zenoh",
    "tbmq",
    "tbmq-style",
]


def test_every_target_is_listed_in_the_documented_order() -> None:
    assert target_names() == TARGETS_IN_ORDER


@pytest.mark.parametrize(
    ("name", "transport", "port"),
    [
        ("mosquitto", "mqtt", 1883),
        ("emqx", "mqtt", 1883),
        ("hivemq", "mqtt", 1883),
        ("rabbitmq-mqtt", "mqtt", 1883),
        ("rabbitmq-amqp", "amqp", 5672),
        ("artemis", "mqtt", 1883),
        ("activemq", "mqtt", 1883),
        ("nats", "nats", 4222),
        ("redis", "redis", 6379),
        ("zenoh", "zenoh", 7447),
        ("tbmq", "mqtt", 1883),
        ("tbmq-style", "mqtt", 1883),
    ],
)
def test_each_target_talks_its_protocol_on_its_usual_port(
    name: str, transport: str, port: int
) -> None:
    target = get_target(name)
    assert (target.name, target.transport, target.default_port) == (name, transport, port)
    assert target.description


def test_targets_with_a_native_runtime_name_specs_that_exist() -> None:
    with_spec = {name: get_target(name).native_spec for name in target_names()}
    expected = {
        "mosquitto": "mosquitto",
        "rabbitmq-mqtt": "rabbitmq-mqtt",
        "rabbitmq-amqp": "rabbitmq-amqp",
        "activemq": "activemq",
        "hivemq": "hivemq",
        "artemis": "artemis",
        "nats": "nats",
        "redis": "redis",
        "zenoh": "zenoh",
        "tbmq-style": "tbmq-style",
    }
    assert {k: v for k, v in with_spec.items() if v} == expected
    assert set(native_specs()) == set(expected.values())


@pytest.mark.parametrize("name", ["emqx", "tbmq"])
def test_docker_only_brokers_have_no_native_source_and_say_why(name: str) -> None:
    target = get_target(name)
    assert target.native_source is None
    assert "registry" in target.docker_only
    assert "\n" not in target.docker_only


@pytest.mark.parametrize("name", ["hivemq", "artemis"])
def test_the_java_brokers_come_from_maven_central(name: str) -> None:
    assert (get_target(name).native_source or "").startswith("Maven Central ")


def test_unknown_target_error_lists_the_known_ones() -> None:
    with pytest.raises(ScenarioError) as excinfo:
        get_target("kafka")
    assert str(excinfo.value) == f"unknown target 'kafka' (known: {', '.join(TARGETS_IN_ORDER)})"


def test_targets_are_immutable() -> None:
    target = get_target("nats")
    assert isinstance(target, Target)
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.default_port = 1  # type: ignore[misc]
