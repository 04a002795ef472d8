"""The broker registry: one definition per broker, consistent, and runtimes that name none."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import pytest

from mqbench.brokers import registry
from mqbench.brokers.definition import DockerHooks
from mqbench.brokers.docker import runtime as docker
from mqbench.brokers.resources import native_profiles
from mqbench.brokers.resources.knobs import ErlangSchedulers, GoMaxProcs, JvmFlags, NoKnobs
from mqbench.brokers.runtime import external, manage, native


def test_target_names_are_unique_across_brokers() -> None:
    names = [t.name for broker in registry.BROKERS for t in broker.targets]
    assert len(names) == len(set(names)) == len(registry.target_names())


def test_each_native_spec_is_named_after_its_target_and_made_fresh() -> None:
    for name, definition in registry.definitions().items():
        if definition.native is None:
            continue
        spec = definition.native()
        assert spec.name == name
        assert definition.native() is not spec
        assert registry.get_target(name).native_spec == name


def test_docker_only_targets_say_why_and_have_a_compose_entry() -> None:
    docker_only = [d for d in registry.definitions().values() if d.native_source is None]
    assert [d.name for d in docker_only] == ["emqx", "tbmq"]
    assert all(d.docker_only and d.compose is not None for d in docker_only)


def test_profile_knobs_follow_the_brokers_runtime() -> None:
    knobs = {name: type(d.knobs) for name, d in registry.definitions().items()}
    assert knobs["nats"] is GoMaxProcs
    assert knobs["rabbitmq-mqtt"] is knobs["rabbitmq-amqp"] is ErlangSchedulers
    assert knobs["hivemq"] is knobs["artemis"] is knobs["activemq"] is JvmFlags
    assert knobs["mosquitto"] is knobs["redis"] is knobs["tbmq-style"] is NoKnobs


def test_only_the_java_brokers_are_fetched_from_maven() -> None:
    assert sorted(registry.maven_distributions()) == ["artemis", "hivemq"]


def test_only_tbmq_has_docker_hooks_and_owns_its_option() -> None:
    hooked = [n for n, d in registry.definitions().items() if d.docker_hooks is not None]
    assert hooked == ["tbmq"]
    assert isinstance(registry.get_definition("tbmq").docker_hooks, DockerHooks)
    assert registry.docker_option_owners() == {"tbmq_credentials": "tbmq"}


def string_constants(module: ModuleType) -> set[str]:
    """Every string constant of a module's code, docstrings left out."""
    tree = ast.parse(inspect.getsource(module))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    }


@pytest.mark.parametrize("module", [native, docker, external, native_profiles, manage])
def test_the_generic_runtimes_name_no_broker(module: ModuleType) -> None:
    assert string_constants(module) & set(registry.target_names()) == set()
