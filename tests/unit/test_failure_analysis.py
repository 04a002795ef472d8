"""Analysis of cells that met a failure: never-sent messages, a dead broker, truncated records."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import MS, intended, make_cell, records, sends_ok, write_manifest

from mqbench.analysis import analyze_cell_numpy, analyze_run
from mqbench.analysis.plan import plan_cell
from mqbench.analysis.spark_job import aggregate_cells_serial
from mqbench.analysis.summary import build_summary
from mqbench.analysis.verdict import MAX_UNSENT_FRACTION, InvalidKind, unsent_reason
from mqbench.records.cell_entry import CellEntry
from mqbench.records.format import RECORD_SIZE, SEND_FAILED
from mqbench.records.integrity import check_record_file, count_path, write_count
from mqbench.records.writer import RecordWriter


def kinds(summary: Any) -> list[str]:
    return [r.kind.value for r in summary.invalid_reasons]


def deliveries_for(seqs: range) -> np.ndarray:
    return records([(intended(0, s), 10, 0, 0, s) for s in seqs])


def failed_sends(seqs: range) -> np.ndarray:
    return records([(intended(0, s), 0, 0, SEND_FAILED, s) for s in seqs])


def test_never_sent_messages_count_as_unsent_and_enter_the_loss_over_scheduled(
    tmp_path: Path,
) -> None:
    sent = np.concatenate([sends_ok(1, range(60)), failed_sends(range(60, 100))])
    cell = make_cell(tmp_path, deliveries=[deliveries_for(range(58))], sends=[sent])
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert (s.scheduled, s.sent, s.send_failed, s.unsent) == (100, 60, 40, 40)
    assert (s.expected, s.expected_scheduled, s.received, s.lost) == (60, 100, 58, 2)
    assert s.loss_pct == pytest.approx(42.0)
    assert s.loss_sent_pct == pytest.approx(2.0) and s.loss_unsent_pct == pytest.approx(40.0)
    assert not s.valid and kinds(s) == ["sends_failed"]
    assert "40 of 100 scheduled messages (40.0%) were never sent" in s.invalid_reasons[0].message


def test_messages_with_no_send_record_at_all_are_unsent_too(tmp_path: Path) -> None:
    cell = make_cell(
        tmp_path, deliveries=[deliveries_for(range(90))], sends=[sends_ok(1, range(90))]
    )
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert (s.unsent, s.send_failed) == (10, 0)
    assert "10 without any send record" in s.invalid_reasons[-1].message


def test_a_complete_cell_is_valid_and_its_loss_is_unchanged(tmp_path: Path) -> None:
    cell = make_cell(
        tmp_path, deliveries=[deliveries_for(range(99))], sends=[sends_ok(1, range(100))]
    )
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert s.valid and s.invalid_reasons == [] and s.unsent == 0
    assert s.loss_pct == pytest.approx(1.0) == s.loss_sent_pct
    assert s.loss_unsent_pct == 0.0


def test_sends_that_fail_by_design_do_not_invalidate_the_cell(tmp_path: Path) -> None:
    sent = np.concatenate([sends_ok(1, range(50)), failed_sends(range(50, 100))])
    cell = make_cell(tmp_path, deliveries=[deliveries_for(range(50))], sends=[sent])
    cell["send_failures_expected"] = True  # faults on publishers, publisher churn
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert s.unsent == 50 and s.valid


def test_the_unsent_threshold_is_a_small_fraction_of_the_schedule() -> None:
    limit = int(10_000 * MAX_UNSENT_FRACTION)
    assert unsent_reason(10_000, limit, limit, 0, False) == []
    (reason,) = unsent_reason(10_000, limit + 1, limit + 1, 3, False)
    assert reason.kind is InvalidKind.SENDS_FAILED and "3 refused by a full output buffer" in (
        reason.message
    )


def test_a_broker_exit_in_the_manifest_makes_the_cell_invalid_with_its_exit_code(
    tmp_path: Path,
) -> None:
    cell = make_cell(
        tmp_path, deliveries=[deliveries_for(range(100))], sends=[sends_ok(1, range(100))]
    )
    cell["broker_exit"] = {
        "pid": 4242,
        "exit_code": -9,
        "t_ns": 1500 * MS,
        "signal": "SIGKILL",
        "reason": "killed by SIGKILL",
    }
    s = analyze_cell_numpy(cell, tmp_path / "cells" / "c0")
    assert not s.valid and kinds(s) == ["broker_exited"]
    assert s.invalid_reasons[0].message == (
        "the broker (pid 4242) killed by SIGKILL (exit code -9) +1.5 s from the window start"
    )


def test_an_unclosed_record_file_clips_the_window_to_its_last_checkpoint_minus_drain(
    tmp_path: Path,
) -> None:
    cell = make_cell(
        tmp_path,
        deliveries=[deliveries_for(range(100))],
        sends=[sends_ok(1, range(100))],
        params={"drain_s": 0.01},
    )
    folder = tmp_path / "cells" / "c0"
    write_count(folder / "deliveries-0.bin", 100, closed=False, t_ns=70 * MS)
    write_count(folder / "sends-0.bin", 100, closed=True, t_ns=99 * MS)
    s = analyze_cell_numpy(cell, folder)
    assert s.window_clipped and s.window_end_ns == 60 * MS
    assert s.scheduled == s.sent == s.received == 60
    assert s.valid  # the window was clipped around what may be missing
    assert s.record_issues == ["deliveries-0.bin: its writer never closed it (stopped hard)"]


def test_records_missing_from_a_counted_file_make_the_cell_invalid(tmp_path: Path) -> None:
    cell = make_cell(
        tmp_path, deliveries=[deliveries_for(range(100))], sends=[sends_ok(1, range(100))]
    )
    folder = tmp_path / "cells" / "c0"
    write_count(folder / "deliveries-0.bin", 120, closed=True, t_ns=99 * MS)
    s = analyze_cell_numpy(cell, folder)
    assert kinds(s) == ["records_truncated"]
    assert "20 of 120 counted records are missing" in s.invalid_reasons[0].message


def test_spark_kernels_and_numpy_agree_on_a_torn_file(tmp_path: Path) -> None:
    cell = make_cell(
        tmp_path, deliveries=[deliveries_for(range(100))], sends=[sends_ok(1, range(100))]
    )
    folder = tmp_path / "cells" / "c0"
    path = folder / "deliveries-0.bin"
    path.write_bytes(path.read_bytes()[: 50 * RECORD_SIZE + 7])
    plan = plan_cell(CellEntry.from_dict(cell), folder)
    (agg,) = aggregate_cells_serial([plan], chunk_records=16)
    serial = build_summary(plan, agg)
    numpy_summary = analyze_cell_numpy(cell, folder)
    assert serial.received == numpy_summary.received == 50
    assert serial.record_issues == numpy_summary.record_issues
    assert "records_truncated" in kinds(serial)


def test_an_interrupted_cell_without_a_schedule_is_skipped_not_an_error(tmp_path: Path) -> None:
    done = make_cell(
        tmp_path, deliveries=[deliveries_for(range(100))], sends=[sends_ok(1, range(100))]
    )
    early = {"id": "c1", "index": 1, "repeat": 0, "status": "interrupted", "params": {}}
    (tmp_path / "cells" / "c1").mkdir()
    write_manifest(tmp_path, [done, early])
    summaries = analyze_run(tmp_path, engine="numpy")
    assert [s.cell_id for s in summaries] == ["c0"]


def test_summary_json_and_parquet_carry_the_typed_reasons(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    sent = np.concatenate([sends_ok(1, range(60)), failed_sends(range(60, 100))])
    write_manifest(
        tmp_path, [make_cell(tmp_path, deliveries=[deliveries_for(range(60))], sends=[sent])]
    )
    analyze_run(tmp_path, engine="numpy")
    data = json.loads((tmp_path / "cells" / "c0" / "summary.json").read_text())
    assert data["valid"] is False
    assert [r["kind"] for r in data["invalid_reasons"]] == ["sends_failed"]
    (row,) = pq.read_table(tmp_path / "summary.parquet").to_pylist()
    assert row["invalid_kinds"] == ["sends_failed"]
    assert row["invalid_reason"].startswith("40 of 100 scheduled messages")
    assert row["unsent"] == 40


# -- the record writer and its count sidecar ------------------------------------------------


def test_a_checkpoint_writes_the_partial_block_and_the_count(tmp_path: Path) -> None:
    path = tmp_path / "d.bin"
    writer = RecordWriter(path, block_records=1000)
    for i in range(10):
        writer.append(i, 0, 0, 0, i)
    assert path.stat().st_size == 0
    writer.checkpoint(t_ns=123)
    assert path.stat().st_size == 10 * RECORD_SIZE
    assert json.loads(count_path(path).read_text()) == {"records": 10, "closed": False, "t_ns": 123}
    writer.close()
    check = check_record_file(path)
    assert (check.records, check.counted, check.closed, check.truncated) == (10, 10, True, False)
    assert not list(tmp_path.glob(".*.tmp"))


class _FullDisk:
    """A file whose writes stop after ``room`` bytes with ENOSPC (after a short write)."""

    def __init__(self, real: Any, room: int) -> None:
        self.real = real
        self.room = room

    def write(self, data: memoryview) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = self.real.write(data[: self.room])
        self.room -= n
        return int(n)

    def fileno(self) -> int:
        return int(self.real.fileno())

    def close(self) -> None:
        self.real.close()


def test_a_full_disk_leaves_only_whole_records_and_an_error_for_the_owner(tmp_path: Path) -> None:
    path = tmp_path / "d.bin"
    writer = RecordWriter(path, block_records=4)
    writer._file = _FullDisk(writer._file, room=5 * RECORD_SIZE + 7)  # type: ignore[assignment]
    for i in range(20):  # never raises on the hot path
        writer.append(i, 0, 0, 0, i)
    writer.checkpoint()
    writer.close()
    assert writer.error is not None and writer.error.errno == errno.ENOSPC
    assert path.stat().st_size == 4 * RECORD_SIZE == writer.written * RECORD_SIZE
    assert writer.count == 20


def test_a_torn_record_without_a_sidecar_is_reported_as_unknown_truncation(tmp_path: Path) -> None:
    path = tmp_path / "d.bin"
    path.write_bytes(b"\0" * (3 * RECORD_SIZE + 5))
    check = check_record_file(path)
    assert (check.records, check.torn_bytes, check.counted, check.closed) == (3, 5, None, None)
    assert check.truncated
