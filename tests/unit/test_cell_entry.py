"""Manifest cell entries: one typed record, written and read in one module, old ones too."""

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from mqbench.records.cell_entry import (
    BrokerExitEntry,
    CellEntry,
    CellEntryError,
    GeneratorVerdict,
    Route,
    Schedule,
    Totals,
    Window,
    cell_entries,
)
from mqbench.records.cell_params import CellParamsError
from mqbench.records.manifest import Manifest
from mqbench.records.worker_stats import WorkerStats

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report"


def finished_entry() -> CellEntry:
    return CellEntry(
        id="nats-64B-2pairs-10hz-qos0",
        index=0,
        status="completed",
        params={"target": "nats", "warmup_s": 1.0, "drain_s": 2.0},
        offered_rate=20.0,
        publishers=2,
        subscribers=2,
        expected_delivery_rate=20.0,
        routes=(Route("pairs", (0, 2), (0, 2)),),
        send_failures_expected=False,
        broker={"version": "2.10"},
        schedule=Schedule(start_ns=10, rate=10.0, publishers=2, messages_per_publisher=30),
        window=Window.planned(10, 5, 1.0, 2.0),
        generator=GeneratorVerdict(
            late_threshold_ms=5.0, warnings=("w",), workers=(WorkerStats(worker=0, sent=60),)
        ),
        totals=Totals(60, 60),
        finished_ns=99,
    )


def test_a_finished_entry_writes_the_documented_keys_and_reads_back_equal() -> None:
    entry = finished_entry()
    data = json.loads(json.dumps(entry.to_dict()))
    assert list(data) == [
        "id", "index", "repeat", "status", "error", "params", "offered_rate", "publishers",
        "subscribers", "expected_delivery_rate", "routes", "send_failures_expected", "broker",
        "schedule", "window", "generator", "totals", "finished_ns",
    ]  # fmt: skip
    assert data["routes"] == [{"kind": "pairs", "pubs": [0, 2], "subs": [0, 2]}]
    assert data["window"] == {"start_ns": 1_000_000_010, "end_ns": 3_000_000_010, "connected_ns": 5}
    assert data["generator"]["workers"][0]["sent"] == 60
    assert CellEntry.from_dict(data) == entry


def test_a_skipped_entry_holds_only_what_a_skipped_cell_had() -> None:
    entry = CellEntry(id="c", status="skipped", params={"rate": 1}, skip_reason="search stopped")
    assert entry.to_dict() == {
        "id": "c",
        "index": 0,
        "repeat": 0,
        "status": "skipped",
        "error": None,
        "params": {"rate": 1},
        "skip_reason": "search stopped",
    }


def test_the_committed_fixture_manifest_reads_with_its_legacy_generator_reason() -> None:
    data = json.loads((FIXTURE / "20260101T000000Z-fixture" / "manifest.json").read_text())
    entries = cell_entries(data)
    assert len(entries) == 8 and all(e.analysable for e in entries)
    last = entries[-1].generator
    assert last is not None and last.saturated and last.reasons == ("send lag",)
    assert entries[0].send_failures_expected is None  # not recorded by that manifest


def test_another_manifest_version_is_refused() -> None:
    with pytest.raises(CellEntryError, match="schema version 2"):
        cell_entries({"schema_version": 2, "cells": []})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"routes": [{"kind": "star", "pubs": [0, 1], "subs": [0, 1]}]}, "unknown route kind"),
        ({"routes": [{"kind": "pairs", "pubs": [0, 2], "subs": [0, 1]}]}, "'pairs' route with"),
        ({"routes": [{"kind": "all"}]}, "malformed route"),
        ({"schedule": {"rate": 1, "publishers": 1}}, "lacks schedule ('start_ns')"),
        ({"window": {"start_ns": 1}}, "malformed window"),
        ({"offered_rate": "fast"}, "offered_rate 'fast' is not a number"),
        ({"status": "exploded"}, "unknown status 'exploded'"),
        ({"generator": {"workers": [{"sent": [1]}]}}, "generator.worker stats: sent"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_cell_and_the_key(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(CellEntryError, match="cell c9") as info:
        CellEntry.from_dict({"id": "c9", "status": "completed", **change})
    assert message in str(info.value)


def test_an_interrupted_cell_is_analysable_only_once_it_has_a_schedule() -> None:
    entry = CellEntry(id="c", status="interrupted")
    assert not entry.analysable
    assert replace(entry, schedule=Schedule(0, 1.0, 1)).analysable


def test_manifest_updates_from_two_threads_both_land(tmp_path: Path) -> None:
    manifest = Manifest(tmp_path, {"name": "s"}, "s.yaml", ["mqbench"])
    manifest.add_cell(CellEntry(id="c", status="running"))
    exit_entry = BrokerExitEntry(pid=7, exit_code=-9, t_ns=1, signal="SIGKILL", reason="killed")
    other = threading.Thread(
        target=lambda: manifest.update_cell("c", lambda c: replace(c, broker_exit=exit_entry))
    )
    other.start()
    manifest.update_cell("c", lambda c: replace(c, status="completed"))
    other.join()
    saved = json.loads((tmp_path / "manifest.json").read_text())
    (cell,) = cell_entries(saved)
    assert cell.status == "completed" and cell.broker_exit == exit_entry
    assert saved["schema_version"] == 1 and saved["scenario"] == {"name": "s"}


def test_cell_parameters_read_by_name_with_their_types() -> None:
    entry = replace(
        finished_entry(),
        params={"topology": "fanout", "rate": 10, "subscribers": 4.0, "drain_s": "2.5"},
    )
    params = entry.cell_params
    assert params.topology == "fanout" and params.rate == 10.0
    assert params.subscribers == 4 and isinstance(params.subscribers, int)
    assert params.drain_s == 2.5 and params.warmup_s is None


@pytest.mark.parametrize(("key", "value"), [("rate", "fast"), ("qos", True), ("pairs", 2.5)])
def test_a_cell_parameter_of_the_wrong_type_is_one_error_naming_the_cell_and_the_key(
    key: str, value: object
) -> None:
    entry = replace(finished_entry(), params={key: value})
    with pytest.raises(CellParamsError, match=rf"cell nats-64B-2pairs-10hz-qos0: params\.{key} "):
        getattr(entry.cell_params, key)
