"""Every transport declares what it can do; the engine checks scenarios against that."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mqbench.endpoint import Endpoint
from mqbench.errors import ScenarioError, TransportError, TransportErrorKind
from mqbench.scenario.loader import load_scenario
from mqbench.scenario.matrix import expand
from mqbench.transports.base import ClientOptions, TransportCapabilities, require_qos
from mqbench.transports.registry import client_entry, get_transport, transport_names
from mqbench.workload.preflight import check_cells, check_clients

EXPECTED = {
    "mqtt": (2, True, True),
    "paho": (1, True, True),
    "aiomqtt": (1, True, True),
    "nats": (0, False, True),
    "nats-py": (0, False, False),
    "redis": (0, False, False),
    "redis-py": (0, False, False),
    "amqp": (1, False, False),
    "aio-pika": (1, False, False),
    "zenoh": (0, False, True),
}


@pytest.mark.parametrize("name", transport_names())
def test_every_registered_client_declares_its_capabilities(name: str) -> None:
    transport = get_transport(name)
    assert (transport.name, transport.protocol) == (name, client_entry(name).protocol)
    capabilities = transport.capabilities
    assert isinstance(capabilities, TransportCapabilities)
    assert (
        capabilities.max_qos,
        capabilities.persistent_sessions,
        capabilities.wildcard_filters,
    ) == EXPECTED[name]


def test_a_qos_above_the_maximum_is_unsupported_and_says_so() -> None:
    require_qos(1, "amqp", get_transport("amqp").capabilities)
    with pytest.raises(TransportError) as info:
        require_qos(1, "nats", get_transport("nats").capabilities)
    assert info.value.kind is TransportErrorKind.UNSUPPORTED
    assert str(info.value) == "the nats client is at-most-once: QoS 1 is not supported"
    with pytest.raises(TransportError, match="supports QoS 0 to 1: QoS 2"):
        require_qos(2, "amqp", get_transport("amqp").capabilities)


def check(tmp_path: Path, text: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: caps\n" + text)
    scenario, _ = load_scenario(path)
    check_clients(scenario)
    check_cells(scenario, expand(scenario))


P2P = "workload: {topology: p2p, pairs: 2, rate: 1, persistent: false}\n"


def test_wildcard_subscriptions_are_refused_for_clients_without_wildcards(
    tmp_path: Path,
) -> None:
    check(tmp_path, "targets: [nats, mosquitto]\n" + P2P)
    with pytest.raises(ScenarioError, match="which the redis client does not support"):
        check(tmp_path, "targets: redis\n" + P2P)
    with pytest.raises(ScenarioError, match="which the nats-py client does not support"):
        check(tmp_path, "targets: nats\nclient: [nats-py]\n" + P2P)


def test_persistent_sessions_need_a_client_that_keeps_them(tmp_path: Path) -> None:
    persistent = "workload: {pairs: 1, rate: 1, persistent: true}\n"
    check(tmp_path, "targets: mosquitto\nclient: [paho]\n" + persistent)
    with pytest.raises(ScenarioError, match=r"the nats client \(nats\) has no persistent sessions"):
        check(tmp_path, "targets: nats\n" + persistent)


def test_qos_above_the_clients_maximum_is_refused_before_the_run(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"QoS 2 is not supported by the paho client"):
        check(tmp_path, "targets: mosquitto\nclient: [paho]\nworkload: {qos: 2}\n")


@pytest.mark.parametrize("name", transport_names())
def test_every_client_refuses_a_qos_above_its_maximum_before_touching_the_network(
    name: str,
) -> None:
    transport = get_transport(name)
    too_high = transport.capabilities.max_qos + 1
    client = transport.create_client(Endpoint("127.0.0.1", 1), ClientOptions("unit"))

    async def subscribe() -> None:
        await client.subscribe("mqbench/a", too_high, lambda payload, t: None)

    with pytest.raises(TransportError) as at_sender:
        client.sender("mqbench/a", too_high)
    with pytest.raises(TransportError) as at_subscribe:
        asyncio.run(subscribe())
    for error in (at_sender.value, at_subscribe.value):
        assert error.kind is TransportErrorKind.UNSUPPORTED
        assert str(error) == (
            f"the {name} client "
            + ("is at-most-once" if too_high == 1 else f"supports QoS 0 to {too_high - 1}")
            + f": QoS {too_high} is not supported"
        )
