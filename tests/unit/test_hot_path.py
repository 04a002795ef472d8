"""Which engine runs a cell's hot path (``generator.hot_path``): the choice, its record."""

from __future__ import annotations

from typing import Any

import pytest

from mqbench.errors import ScenarioError
from mqbench.records.cell_entry import CellEntry, CellEntryError
from mqbench.records.hot_path import HotPathEntry
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import Cell, expand
from mqbench.scenario.model import Scenario
from mqbench.transports.base import TransportCapabilities
from mqbench.transports.registry import get_transport
from mqbench.workload.hot_path import CoreInstall, choose, stale_core_note
from mqbench.workload.plan import build_worker_plans
from mqbench.workload.topology import build_topology

LEAN = TransportCapabilities(max_qos=2, persistent_sessions=True, wildcard_filters=True)
COMPILED = TransportCapabilities(
    max_qos=2, persistent_sessions=True, wildcard_filters=True, compiled="mqtt"
)
INSTALLED = CoreInstall("9.9.9")
MISSING = CoreInstall(None, "the compiled core is not installed (mqbench_core)")
STALE = CoreInstall(
    None,
    "the compiled core is stale (built from other core/ sources than this checkout's; "
    "rebuild it with scripts/install.sh)",
    stale=True,
)


def scenario(**sections: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": "hp",
        "targets": ["mosquitto"],
        "workload": {"pairs": 2, "rate": 10, "qos": 0, "duration": "2s"},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return validate_scenario(data, "test")


def only_cell(s: Scenario) -> Cell:
    (cell,) = expand(s)
    return cell


def test_a_plain_qos0_cell_of_a_lean_client_runs_on_the_compiled_core() -> None:
    s = scenario()
    entry = choose(s, only_cell(s), COMPILED, INSTALLED)
    assert entry == HotPathEntry("compiled", "auto: the compiled core serves this cell", "9.9.9")


@pytest.mark.parametrize(
    ("sections", "reason"),
    [
        ({"workload": {"qos": 1}}, "QoS 1 (the core sends QoS 0 only)"),
        ({"security": {"tls": True}}, "TLS (the core reads plain TCP)"),
        (
            {"workload": {"churn": {"every": "2s", "downtime": "1s", "fraction": 0.5}}},
            "churn (the core does not close clients on purpose)",
        ),
        ({"generator": {"timer": "loop"}}, "timer: loop (the core uses timerfd)"),
    ],
)
def test_a_cell_the_core_cannot_serve_falls_back_to_python_saying_why(
    sections: dict[str, Any], reason: str
) -> None:
    s = scenario(**sections)
    entry = choose(s, only_cell(s), COMPILED, INSTALLED)
    assert entry.engine == "python"
    assert entry.reason == f"auto: python, {reason}"
    assert entry.core_version is None


def test_faults_and_distributed_load_fall_back_to_python() -> None:
    faulty = scenario(
        faults={
            "type": "reset_peer",
            "schedule": {"kind": "fixed", "every": "2s", "duration": "1s"},
        }
    )
    assert "faults" in choose(faulty, only_cell(faulty), COMPILED, INSTALLED).reason
    spark = scenario(generator={"engine": "spark", "master": "local-cluster[2,1,1024]"})
    assert "distributed load" in choose(spark, only_cell(spark), COMPILED, INSTALLED).reason


def test_a_client_without_a_compiled_path_runs_on_python() -> None:
    s = scenario()
    entry = choose(s, only_cell(s), LEAN, INSTALLED)
    assert entry.engine == "python"
    assert "has no compiled path" in entry.reason


@pytest.mark.parametrize(
    ("core", "refusal"),
    [
        (MISSING, r"generator\.hot_path compiled: the compiled core is"),
        (STALE, r"compiled: the compiled core is stale .*install\.sh"),
    ],
    ids=["missing", "stale"],
)
def test_a_missing_or_stale_core_runs_auto_on_python_saying_why_and_refuses_compiled(
    core: CoreInstall, refusal: str
) -> None:
    s = scenario()
    entry = choose(s, only_cell(s), COMPILED, core)
    assert entry == HotPathEntry("python", f"auto: python, {core.missing}")
    strict = scenario(generator={"hot_path": "compiled"})
    with pytest.raises(ScenarioError, match=refusal):
        choose(strict, only_cell(strict), COMPILED, core)


def test_a_stale_core_gives_an_auto_run_one_line_naming_the_fix() -> None:
    note = stale_core_note(scenario(), STALE)
    assert note is not None and "scripts/install.sh" in note
    assert note.endswith("every cell runs on the Python engine")
    assert stale_core_note(scenario(), INSTALLED) is None
    assert stale_core_note(scenario(), MISSING) is None
    assert stale_core_note(scenario(generator={"hot_path": "python"}), STALE) is None
    assert stale_core_note(scenario(generator={"hot_path": "compiled"}), STALE) is None


def test_compiled_is_refused_for_a_cell_it_cannot_serve() -> None:
    s = scenario(generator={"hot_path": "compiled"}, workload={"qos": 1})
    with pytest.raises(ScenarioError, match=r"generator.hot_path compiled: QoS 1"):
        choose(s, only_cell(s), COMPILED, INSTALLED)


def test_python_is_chosen_whatever_the_cell_when_asked_for() -> None:
    s = scenario(generator={"hot_path": "python"})
    entry = choose(s, only_cell(s), COMPILED, INSTALLED)
    assert entry == HotPathEntry("python", "generator.hot_path is python")


def test_an_unknown_hot_path_is_refused_by_the_scenario() -> None:
    with pytest.raises(ScenarioError, match="hot_path"):
        scenario(generator={"hot_path": "rust"})


def test_the_lean_mqtt_nats_and_redis_clients_declare_their_compiled_framing() -> None:
    assert get_transport("mqtt").capabilities.compiled == "mqtt"
    assert get_transport("nats").capabilities.compiled == "nats"
    assert get_transport("redis").capabilities.compiled == "redis"
    for stock in ("paho", "nats-py", "redis-py", "amqp", "zenoh"):
        assert get_transport(stock).capabilities.compiled is None


def test_the_manifest_keeps_the_engine_of_each_cell() -> None:
    entry = CellEntry(id="c", hot_path=HotPathEntry("compiled", "auto: served", "0.1.0"))
    data = entry.to_dict()
    assert data["hot_path"] == {
        "version": 1,
        "engine": "compiled",
        "reason": "auto: served",
        "core_version": "0.1.0",
    }
    assert CellEntry.from_dict(data).hot_path == entry.hot_path
    assert CellEntry.from_dict({"id": "old"}).hot_path is None


def test_an_unknown_engine_in_a_manifest_is_named() -> None:
    with pytest.raises(CellEntryError, match=r"cell c: hot_path\.engine 'rust'"):
        CellEntry.from_dict({"id": "c", "hot_path": {"engine": "rust"}})


def test_the_worker_plans_carry_the_chosen_engine() -> None:
    s = scenario()
    cell = only_cell(s)
    plans = build_worker_plans(
        cell,
        build_topology(cell, "t", 0),
        cell_dir="/tmp/x",
        transport="mqtt",
        host="127.0.0.1",
        port=1883,
        workers=2,
        connect_timeout_s=1.0,
        spin_ns=0,
        late_threshold_ns=1,
        hot_path="compiled",
        coalesce_ns=250_000,
    )
    assert [p.hot_path for p in plans] == ["compiled", "compiled"]
    assert [p.coalesce_ns for p in plans] == [250_000, 250_000]


@pytest.mark.parametrize("value", [-1, 5001])
def test_a_send_coalescing_window_outside_0_to_5_ms_is_refused(value: int) -> None:
    with pytest.raises(ScenarioError, match="coalesce_us"):
        scenario(generator={"coalesce_us": value})


@pytest.mark.parametrize("stamp", ["kernel", "user"])
def test_the_core_serves_large_payloads_with_either_receive_stamp(stamp: str) -> None:
    # With kernel stamps the core holds no read a broker's ACK wait depends on (a partial
    # frame, a loop idle for 1 ms: core/src/engine.rs), so payload size is no reason to fall back.
    for payload in ("16KiB", "1MiB"):
        s = scenario(workload={"payload": payload}, generator={"receive_stamp": stamp})
        assert choose(s, only_cell(s), COMPILED, INSTALLED).engine == "compiled"
