"""Adding a transport takes one module and one registry entry (docs/extending.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mqbench.endpoint import Endpoint
from mqbench.records.format import HEADER
from mqbench.scenario.loader import load_scenario
from mqbench.scenario.matrix import expand
from mqbench.transports import registry
from mqbench.transports.base import ClientOptions
from mqbench.workload.preflight import check_cells, check_clients

FAKE_MODULE_DIR = Path(__file__).resolve().parents[1] / "integration"
"""Where ``fake_transport.py`` (the one module) lives."""


@pytest.fixture
def fake_registered(monkeypatch: pytest.MonkeyPatch) -> registry.ClientEntry:
    """The registry with exactly one more entry: the fake transport."""
    monkeypatch.syspath_prepend(str(FAKE_MODULE_DIR))
    entry = registry.ClientEntry("fake", "mqtt", "fake_transport:DroppingTransport")
    monkeypatch.setattr(registry, "_ENTRIES", (*registry._ENTRIES, entry))
    monkeypatch.setattr(registry, "_BY_NAME", {**registry._BY_NAME, entry.name: entry})
    return entry


def test_one_registry_entry_makes_a_new_client_known_by_name_and_protocol(
    fake_registered: registry.ClientEntry,
) -> None:
    assert "fake" in registry.transport_names()
    assert registry.resolve_client("mqtt", "fake") == "fake"
    assert "fake" in [e.name for e in registry.clients_for("mqtt")]
    assert registry.get_transport("fake").capabilities.max_qos == 0


def test_the_preflight_checks_the_new_client_by_its_declared_capabilities(
    fake_registered: registry.ClientEntry, tmp_path: Path
) -> None:
    from mqbench.errors import ScenarioError

    path = tmp_path / "s.yaml"
    path.write_text("name: f\ntargets: [mosquitto]\nclient: [fake]\nworkload: {pairs: 2}\n")
    scenario, _ = load_scenario(path)
    check_clients(scenario)
    check_cells(scenario, expand(scenario))
    path.write_text("name: f\ntargets: [mosquitto]\nclient: [fake]\nworkload: {qos: 1}\n")
    scenario, _ = load_scenario(path)
    with pytest.raises(ScenarioError, match="QoS 1 is not supported by the fake client"):
        check_clients(scenario)


def test_clients_of_the_new_transport_deliver_through_the_contract(
    fake_registered: registry.ClientEntry,
) -> None:
    transport = registry.get_transport("fake")
    received: list[bytes] = []

    async def round_trip() -> None:
        subscriber = transport.create_client(Endpoint("127.0.0.1", 1), ClientOptions("t-s1"))
        publisher = transport.create_client(Endpoint("127.0.0.1", 1), ClientOptions("t-p0"))
        await subscriber.connect()
        await publisher.connect()
        await subscriber.subscribe("a/+", 0, lambda payload, t: received.append(bytes(payload)))
        send = publisher.sender("a/b", 0)
        for seq in range(14):
            message = bytearray(HEADER.size + 8)
            HEADER.pack_into(message, 0, 0, seq, 0, 0)
            assert send(bytes(message), 0)
        await publisher.close()
        await subscriber.close()

    asyncio.run(round_trip())
    # The fake drops 1 in 7 for subscriber 1 (fake_transport.dropped): 12 of 14 arrive.
    assert len(received) == 12
