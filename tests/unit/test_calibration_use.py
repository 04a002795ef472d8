"""What ``run`` does with a calibration: per-cell ceiling warnings and the manifest entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from calibration_fixtures import calibration

from mqbench.calibration.model import current_host
from mqbench.calibration.store import LoadedCalibration
from mqbench.calibration.use import check_cells
from mqbench.records.calibration_entry import CalibrationEntry
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import expand


def scenario(**workload: Any) -> Any:
    data = {"name": "s", "targets": ["mosquitto", "nats"], "workload": {"qos": 0, **workload}}
    return validate_scenario(data, "test")


def valid(ceilings: dict[str, float | None]) -> LoadedCalibration:
    return LoadedCalibration(Path("/c.json"), "valid", calibration(ceilings))


def test_cells_above_their_clients_ceiling_get_one_warning_each() -> None:
    s = scenario(pairs=10, rate=[50, 200])  # 500 and 2,000 msg/s offered, one worker
    check = check_cells(s, expand(s), valid({"mqtt": 1000.0, "nats": 3000.0}), cpus=2)
    assert [w.cell_id for w in check.warnings] == ["mosquitto-1KiB-10pairs-200hz-qos0"]
    (line,) = check.notes()
    assert line.startswith("mosquitto-1KiB-10pairs-200hz-qos0: 2,000 msg/s offered per worker")
    assert "calibrated mqtt ceiling of 1,000 msg/s per worker" in line


def test_the_load_is_shared_by_the_cells_worker_processes() -> None:
    s = validate_scenario(
        {
            "name": "s",
            "targets": ["nats"],
            "workload": {"pairs": 10, "rate": 300},
            "generator": {"workers": 2, "layout": "shared"},
        },
        "test",
    )
    assert check_cells(s, expand(s), valid({"nats": 2000.0}), cpus=2).warnings == []
    assert len(check_cells(s, expand(s), valid({"nats": 1000.0}), cpus=2).warnings) == 1


def test_in_the_split_layout_publisher_processes_carry_the_offered_load() -> None:
    s = validate_scenario(
        {
            "name": "s",
            "targets": ["nats"],
            "workload": {"pairs": 10, "rate": 300},
            "generator": {"workers": 2, "layout": "split"},
        },
        "test",
    )
    (warning,) = check_cells(s, expand(s), valid({"nats": 2000.0}), cpus=2).warnings
    assert warning.offered_per_worker == 3000 and warning.delivered_per_worker == 3000
    assert check_cells(s, expand(s), valid({"nats": 3000.0}), cpus=2).warnings == []


def test_a_fanout_cell_is_judged_by_the_deliveries_its_worker_receives() -> None:
    s = validate_scenario(
        {
            "name": "s",
            "targets": ["nats"],
            "workload": {"topology": "fanout", "subscribers": 100, "rate": 20},
        },
        "test",
    )
    (warning,) = check_cells(s, expand(s), valid({"nats": 1000.0}), cpus=2).warnings
    assert warning.offered_per_worker == 20
    assert warning.delivered_per_worker == 2000
    assert "2,000 deliveries/s per worker" in warning.text()


def test_clients_without_a_ceiling_are_not_checked() -> None:
    s = validate_scenario(
        {"name": "s", "targets": ["nats"], "client": "nats-py", "workload": {"rate": 10_000}},
        "test",
    )
    assert check_cells(s, expand(s), valid({"nats": 10.0}), cpus=2).warnings == []
    s2 = scenario(rate=10_000)  # mosquitto and nats; mqtt's search found no ceiling
    warnings = check_cells(s2, expand(s2), valid({"mqtt": None, "nats": 10.0}), 2).warnings
    assert [w.client for w in warnings] == ["nats"]


def test_the_manifest_records_the_calibration_used_and_its_figures() -> None:
    s = scenario(pairs=10, rate=200)
    entry = check_cells(s, expand(s), valid({"mqtt": 1000.0, "nats": 3000.0}), 2).manifest_record()
    record = entry.to_dict()
    assert record["path"] == "/c.json"
    assert record["status"] == "valid" and record["used"] is True
    assert record["created_utc"] == "2026-11-22T10:00:00+00:00"
    assert record["figures"]["ceilings"]["mqtt"]["msg_s_per_worker"] == 1000.0
    assert record["figures"]["ceilings"]["mqtt"]["bounds"]["lag_p99_us"] == 1000.0
    assert record["figures"]["floors"]["nats"]["latency_p50_us"] == 120.0
    assert record["warnings"] == [
        {
            "cell": "mosquitto-1KiB-10pairs-200hz-qos0",
            "client": "mqtt",
            "workers": 1,
            "offered_per_worker": 2000.0,
            "delivered_per_worker": 2000.0,
            "ceiling_per_worker": 1000.0,
        }
    ]


def test_the_stored_calibration_entry_keeps_its_keys_order_and_reads_back_unchanged() -> None:
    s = scenario(pairs=10, rate=200)
    record = check_cells(s, expand(s), valid({"mqtt": 1000.0}), 2).manifest_record().to_dict()
    assert list(record) == [
        "path",
        "status",
        "used",
        "reasons",
        "created_utc",
        "updated_utc",
        "host",
        "figures",
        "warnings",
    ]
    assert list(record["figures"]) == ["ceilings", "floors", "wakeup"]
    text = json.dumps(record)
    assert json.dumps(CalibrationEntry.from_dict(json.loads(text)).to_dict()) == text
    older = {"path": "/c.json", "status": "valid", "figures": {"ceilings": {}, "floors": {}}}
    assert CalibrationEntry.from_dict(older).to_dict() == older  # before the wake-up probe


def test_a_stale_calibration_is_named_and_not_used() -> None:
    s = scenario(rate=10_000)
    other = current_host().model_copy(update={"hostname": "elsewhere"})
    loaded = LoadedCalibration(Path("/c.json"), "stale", calibration(host=other), ["hostname x"])
    check = check_cells(s, expand(s), loaded, cpus=2)
    assert check.warnings == []
    assert check.notes() == [
        "calibration /c.json is stale and not used (hostname x); re-run `mqbench calibrate`"
    ]
    record = check.manifest_record().to_dict()
    assert record["used"] is False and record["status"] == "stale"
    assert "figures" not in record


def test_no_calibration_is_recorded_as_missing_without_a_note() -> None:
    s = scenario()
    check = check_cells(s, expand(s), LoadedCalibration(Path("/none.json"), "missing"), cpus=2)
    assert check.notes() == []
    assert check.manifest_record().to_dict() == {
        "path": "/none.json",
        "status": "missing",
        "used": False,
        "reasons": [],
    }
