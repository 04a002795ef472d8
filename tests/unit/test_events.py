"""events.jsonl: one enum of kinds, one writer, one reader, and the window events."""

import json
from pathlib import Path

import pytest

from mqbench.analysis.plan import window_from_events
from mqbench.errors import AnalysisError
from mqbench.records.cell_params import CellParams
from mqbench.records.events import Event, EventKind, EventLog, read_events


def test_what_the_log_writes_the_reader_reads_back_with_its_kind(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.write(EventKind.CLIENTS_CONNECTED, count=4, connected_ns=7)
    log.write(EventKind.WINDOW_START, t_ns=123)
    log.close()
    first, second = read_events(tmp_path)
    assert first.kind is EventKind.CLIENTS_CONNECTED and first.details == {
        "count": 4,
        "connected_ns": 7,
    }
    assert second == Event(EventKind.WINDOW_START, 123, {})


def test_the_reader_skips_a_torn_last_line_and_kinds_it_does_not_know(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text(
        json.dumps({"t_ns": 1, "kind": "broker_started"})
        + "\n"
        + json.dumps({"t_ns": 2, "kind": "from_a_newer_mqbench"})
        + '\n[1, 2]\n{"t_ns": 3, "kind": "drain_fin'
    )
    assert [(e.kind, e.t_ns) for e in read_events(tmp_path)] == [(EventKind.BROKER_STARTED, 1)]


def test_a_folder_without_an_event_log_has_no_events(tmp_path: Path) -> None:
    assert read_events(tmp_path) == []


def test_every_kind_the_docs_list_is_an_event_kind() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    section = docs.split("## events.jsonl", 1)[1].split("\n## ", 1)[0]
    for kind in EventKind:
        assert f"`{kind.value}`" in section, kind


def test_window_events_give_the_window_of_a_manifest_without_one() -> None:
    events = [
        Event(EventKind.CLIENTS_CONNECTED, 5, {"connected_ns": 6}),
        Event(EventKind.WINDOW_START, 20),
        Event(EventKind.WINDOW_END, 70),
        Event(EventKind.PUBLISHING_STOPPED, 90),
    ]
    assert window_from_events("c", events, 0, CellParams({"warmup_s": 0, "duration_s": 1})) == (
        20,
        70,
    )


def test_without_window_or_connection_events_the_window_is_an_error_naming_the_cell() -> None:
    with pytest.raises(AnalysisError, match="cell c7: the manifest has no window"):
        window_from_events("c7", [Event(EventKind.BROKER_STARTED, 1)], 0, CellParams({}))
