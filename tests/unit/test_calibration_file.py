"""The calibration file: where it lives, versioning, stale detection, merging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from calibration_fixtures import calibration

from mqbench.calibration import store
from mqbench.calibration.model import current_host
from mqbench.calibration.runner import default_settings
from mqbench.errors import ResultsError


def test_a_saved_calibration_loads_back_as_valid_on_the_same_machine(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "calibration.json"
    original = calibration()
    store.save(original, path)
    loaded = store.load(path)
    assert loaded.status == "valid"
    assert loaded.usable == original
    assert json.loads(path.read_text())["schema_version"] == 1


def test_a_calibration_from_another_machine_or_version_is_stale_and_says_why(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.json"
    other = current_host().model_copy(update={"hostname": "elsewhere", "mqbench_version": "9.9"})
    store.save(calibration(host=other), path)
    loaded = store.load(path)
    assert loaded.status == "stale"
    assert loaded.usable is None
    assert loaded.calibration is not None
    assert any(r.startswith("hostname 'elsewhere' != ") for r in loaded.reasons)
    assert any(r.startswith("mqbench_version '9.9' != ") for r in loaded.reasons)
    assert "is stale and not used" in loaded.describe()


def test_another_schema_version_is_reported_not_guessed_at(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    data = calibration().model_dump(mode="json")
    data["schema_version"] = 2
    path.write_text(json.dumps(data))
    loaded = store.load(path)
    assert loaded.status == "unreadable"
    assert loaded.reasons == ["schema version 2; this mqbench reads version 1"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"schema_version": 1, "host": {}}', "created_utc: Field required"),
    ],
)
def test_a_broken_file_is_unreadable_with_a_reason(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    loaded = store.load(path)
    assert loaded.status == "unreadable"
    assert reason in loaded.reasons[0]


def test_a_missing_file_is_reported_as_missing(tmp_path: Path) -> None:
    loaded = store.load(tmp_path / "none.json")
    assert loaded.status == "missing"
    assert "run `mqbench calibrate`" in loaded.describe()


def test_the_default_path_follows_the_environment_variable_then_xdg_then_home() -> None:
    assert store.default_path({"MQBENCH_CALIBRATION": "/x/c.json", "HOME": "/h"}) == Path(
        "/x/c.json"
    )
    assert store.default_path({"XDG_STATE_HOME": "/state", "HOME": "/h"}) == Path(
        "/state/mqbench/calibration.json"
    )
    assert store.default_path({"HOME": "/h"}) == Path("/h/.local/state/mqbench/calibration.json")


def test_an_unwritable_path_is_refused_before_anything_is_measured(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(
        ResultsError, match=r"cannot write the calibration to .*: .*file is not a directory"
    ):
        store.check_writable(blocker / "calibration.json")
    with pytest.raises(ResultsError, match="it is a directory"):
        store.check_writable(tmp_path)
    store.check_writable(tmp_path / "new" / "calibration.json")
    assert not list((tmp_path / "new").iterdir())  # the probe file is gone


def test_a_partial_calibration_keeps_what_it_did_not_remeasure_from_a_valid_one() -> None:
    older = calibration({"mqtt": 1000.0, "nats": 2000.0})
    newer = calibration({"nats": 3000.0}).model_copy(
        update={
            "created_utc": "2026-11-23T00:00:00+00:00",
            "updated_utc": "2026-11-23T00:00:00+00:00",
        }
    )
    merged = newer.merged_into(older)
    assert merged.created_utc == older.created_utc
    assert merged.updated_utc == "2026-11-23T00:00:00+00:00"
    assert merged.ceilings["mqtt"].msg_s_per_worker == 1000.0
    assert merged.ceilings["nats"].msg_s_per_worker == 3000.0
    assert set(merged.floors) == {"mqtt", "nats"}


def test_entries_measured_with_other_settings_or_elsewhere_are_not_merged() -> None:
    older = calibration({"mqtt": 1000.0})
    newer = calibration({"nats": 3000.0}).model_copy(update={"settings": default_settings(9.0)})
    assert set(newer.merged_into(older).ceilings) == {"nats"}
    elsewhere = calibration(
        {"mqtt": 1000.0}, host=current_host().model_copy(update={"cpu_count": 64})
    )
    assert set(calibration({"nats": 1.0}).merged_into(elsewhere).ceilings) == {"nats"}
