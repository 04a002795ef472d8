from pathlib import Path

import numpy as np
import pytest

from mqbench.records.format import (
    HEADER_SIZE,
    LAT_MAX,
    LAT_MIN,
    RECORD_DTYPE,
    RECORD_SIZE,
    encode_latency,
    pack_header,
    pack_record,
    read_records,
    unpack_header,
)
from mqbench.records.writer import RecordWriter


def test_header_round_trips_and_is_24_bytes_little_endian() -> None:
    raw = pack_header(7, 123456, 1_800_000_000_123_456_789, 0)
    assert len(raw) == HEADER_SIZE == 24
    assert raw[:4] == (7).to_bytes(4, "little")
    assert unpack_header(raw + b"padding") == (7, 123456, 1_800_000_000_123_456_789, 0)


def test_record_layout_matches_numpy_dtype() -> None:
    raw = pack_record(1_800_000_000_000_000_001, -5, 3, 9, 2**32 - 1)
    assert len(raw) == RECORD_SIZE
    (rec,) = np.frombuffer(raw, dtype=RECORD_DTYPE)
    assert (rec["t_sent"], rec["lat"], rec["pub"], rec["sub"], rec["seq"]) == (
        1_800_000_000_000_000_001,
        -5,
        3,
        9,
        2**32 - 1,
    )


def test_latency_encoding_saturates_at_i32() -> None:
    assert encode_latency(12_345) == 123
    assert encode_latency(10**15) == LAT_MAX
    assert encode_latency(-(10**15)) == LAT_MIN


def test_writer_flushes_partial_blocks_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "deliveries-0.bin"
    writer = RecordWriter(path, block_records=4)
    for i in range(10):
        writer.append_delivery(1000 * i, 1000 * i + 250, 1, 2, i)
    assert path.stat().st_size == 8 * RECORD_SIZE  # two full blocks written so far
    writer.flush()
    assert path.stat().st_size == 10 * RECORD_SIZE
    writer.close()
    records = read_records(str(path))
    assert records["seq"].tolist() == list(range(10))
    assert set(records["lat"].tolist()) == {2}  # 250 ns -> 2 units of 100 ns
    assert writer.count == 10


def test_writer_saturates_huge_delivery_latency(tmp_path: Path) -> None:
    with RecordWriter(tmp_path / "d.bin") as writer:
        writer.append_delivery(0, 10**15, 0, 0, 0)
        writer.append_delivery(10**15, 0, 0, 0, 1)
    assert read_records(str(tmp_path / "d.bin"))["lat"].tolist() == [LAT_MAX, LAT_MIN]


def test_writer_never_overwrites_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "sends-0.bin"
    path.write_bytes(b"x" * 24)
    with pytest.raises(FileExistsError):
        RecordWriter(path)
    assert path.read_bytes() == b"x" * 24


def test_reading_a_torn_record_file_returns_its_whole_records(tmp_path: Path) -> None:
    path = tmp_path / "d.bin"
    path.write_bytes(b"\0" * (RECORD_SIZE * 3 + 5))
    assert read_records(str(path)).size == 3
    assert read_records(str(path), offset=2).size == 1
