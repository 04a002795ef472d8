"""Records (and CPU/RSS samples) shipped from a Spark task to the driver, piece by piece."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mqbench.errors import ResultsWriteError
from mqbench.records.format import RECORD_SIZE
from mqbench.records.integrity import check_record_file, count_path
from mqbench.records.transfer import (
    RecordChunk,
    RecordCount,
    RecordSink,
    Shipment,
    StagingReader,
)
from mqbench.records.writer import RecordWriter
from mqbench.workload.messages import RecordsShipped, TaskMessage, TaskSample
from mqbench.workload.spark_engine import RecordShipper, SelfSampler, SparkStage


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    staging, cell = tmp_path / "staging", tmp_path / "cell"
    staging.mkdir()
    cell.mkdir()
    return staging, cell


def _deliver(items: list[Shipment], sink: RecordSink) -> None:
    for item in items:
        sink.accept(item)


def test_chunks_carry_whole_records_and_never_exceed_the_bound(tmp_path: Path) -> None:
    staging, _ = _folders(tmp_path)
    (staging / "sends-0.bin").write_bytes(bytes(range(256)) * 10 + b"xyz")  # a torn tail
    reader = StagingReader(staging, max_chunk=100)
    chunks = [c for c in reader.new() if isinstance(c, RecordChunk)]
    assert chunks[0] == RecordChunk("sends-0.bin", 0, b"")
    data = chunks[1:]
    assert all(len(c.data) <= 96 and len(c.data) % RECORD_SIZE == 0 for c in data)
    assert [c.offset for c in data] == list(range(0, 2544, 96))[: len(data)]
    assert sum(len(c.data) for c in data) == 2560 - 2560 % RECORD_SIZE
    assert reader.new() == []  # nothing new, nothing shipped twice


def test_the_driver_copy_of_a_closed_file_is_the_file_and_passes_the_checks(
    tmp_path: Path,
) -> None:
    staging, cell = _folders(tmp_path)
    reader = StagingReader(staging, max_chunk=1000)
    sink = RecordSink(cell, 3)
    writer = RecordWriter(staging / "deliveries-3.bin", block_records=7)
    for seq in range(20):
        writer.append(seq, 5, 1, 2, seq)
    writer.checkpoint(11)
    _deliver(reader.new(), sink)
    middle = check_record_file(cell / "deliveries-3.bin")
    assert middle.counted == 20 and middle.records >= 20 and middle.closed is False
    for seq in range(20, 45):
        writer.append(seq, 5, 1, 2, seq)
    writer.close()
    _deliver(reader.new(), sink)
    sink.close()
    copy = cell / "deliveries-3.bin"
    assert copy.read_bytes() == (staging / "deliveries-3.bin").read_bytes()
    check = check_record_file(copy)
    assert check.records == check.counted == 45 and check.closed and not check.truncated


def test_a_sidecar_never_counts_records_the_copy_does_not_hold(tmp_path: Path) -> None:
    staging, cell = _folders(tmp_path)
    with RecordWriter(staging / "sends-0.bin", block_records=4) as writer:
        for seq in range(10):
            writer.append(seq, 0, 0, 0, seq)
        writer.checkpoint(1)
        for seq in range(10, 14):
            writer.append(seq, 0, 0, 0, seq)  # 4 more written as a full block, count says 10
        reader, sink = StagingReader(staging), RecordSink(cell, 0)
        items = reader.new()
    assert isinstance(items[-1], RecordCount) and items[-1].records == 10
    _deliver(items, sink)
    sink.close()  # the task died here: its copy is unclosed but intact up to the count
    check = check_record_file(cell / "sends-0.bin")
    assert check.records == 14 and check.counted == 10 and check.closed is False
    assert check.missing == 0


def test_an_empty_file_arrives_as_an_empty_file(tmp_path: Path) -> None:
    staging, cell = _folders(tmp_path)
    RecordWriter(staging / "sends-1.bin").close()
    sink = RecordSink(cell, 1)
    _deliver(StagingReader(staging).new(), sink)
    assert (cell / "sends-1.bin").read_bytes() == b""
    assert check_record_file(cell / "sends-1.bin").closed is True


@pytest.mark.parametrize(
    "item",
    [
        RecordChunk("../escape-0.bin", 0, b""),
        RecordChunk("sends-2.bin", 0, b""),  # another task's file
        RecordChunk("sends-0.bin", 24, bytes(24)),  # a gap
        RecordCount("deliveries-0.bin", 1, False, 1),  # a count without its file
    ],
)
def test_the_sink_refuses_what_does_not_belong_where_it_says(tmp_path: Path, item: Any) -> None:
    _, cell = _folders(tmp_path)
    with pytest.raises(ResultsWriteError):
        RecordSink(cell, 0).accept(item)
    assert not any(cell.iterdir())


def test_a_torn_chunk_is_refused(tmp_path: Path) -> None:
    _, cell = _folders(tmp_path)
    with contextlib.closing(RecordSink(cell, 0)) as sink:
        sink.accept(RecordChunk("sends-0.bin", 0, b""))
        with pytest.raises(ResultsWriteError):
            sink.accept(RecordChunk("sends-0.bin", 0, bytes(25)))


def test_the_shipper_sends_on_its_own_thread_and_ships_the_rest_when_finished(
    tmp_path: Path,
) -> None:
    staging, cell = _folders(tmp_path)
    sink = RecordSink(cell, 0)
    threads: set[str] = set()
    shipped = threading.Event()

    def send(message: TaskMessage) -> None:
        assert isinstance(message, RecordsShipped)
        threads.add(threading.current_thread().name)
        sink.accept(message.item)
        shipped.set()

    writer = RecordWriter(staging / "sends-0.bin")
    shipper = RecordShipper(StagingReader(staging), send, interval_s=0.01)
    shipper.start()
    writer.append(1, 0, 0, 0, 1)
    writer.checkpoint(1)
    assert shipped.wait(5)
    writer.append(2, 0, 0, 0, 2)
    writer.close()
    shipper.finish()
    shipper.finish()
    sink.close()
    assert "mqbench-shipper" in threads  # periodic shipping never runs on the caller's thread
    assert (cell / "sends-0.bin").read_bytes() == (staging / "sends-0.bin").read_bytes()
    assert (
        count_path(cell / "sends-0.bin").read_text()
        == count_path(staging / "sends-0.bin").read_text()
    )


def test_a_broken_driver_connection_stops_the_shipping_quietly(tmp_path: Path) -> None:
    staging, _ = _folders(tmp_path)
    (staging / "sends-0.bin").write_bytes(bytes(48))
    calls: list[str] = []

    def send(message: TaskMessage) -> None:
        calls.append(type(message).__name__)
        raise BrokenPipeError(32, "broken pipe")

    shipper = RecordShipper(StagingReader(staging), send)
    shipper.finish()
    shipper.ship()
    assert shipper.broken and calls == ["RecordsShipped"]


class _Times:
    def __init__(self, user: float, system: float) -> None:
        self.user, self.system = user, system


class _Memory:
    def __init__(self, rss: int) -> None:
        self.rss = rss


class _FakeProcess:
    """A process whose CPU time and RSS the test sets."""

    pid = 4242

    def __init__(self) -> None:
        self.cpu = 0.0
        self.rss = 100

    def create_time(self) -> float:
        return 0.0

    def cpu_times(self) -> _Times:
        return _Times(self.cpu, 0.0)

    def memory_info(self) -> _Memory:
        return _Memory(self.rss)

    def children(self, recursive: bool = False) -> list[Any]:
        return []


def test_a_task_samples_its_own_cpu_and_rss_once_a_second() -> None:
    process, now = _FakeProcess(), [0]
    sampler = SelfSampler(3, "exec-host", process, monotonic_ns=lambda: now[0])
    assert sampler.sample() is None  # the baseline
    now[0], process.cpu, process.rss = 500_000_000, 0.4, 200
    assert sampler.sample() is None  # not a second yet
    now[0], process.cpu = 2_000_000_000, 1.0
    sample = sampler.sample()
    assert sample == TaskSample(3, "exec-host", 4242, 0.5, 200)


def _handle(task: int, host: str, sample: TaskSample | None, age_s: float) -> Any:
    handle = SimpleNamespace(latest=None)
    if sample is not None:
        handle.latest = (time.monotonic() - age_s, sample)
    return handle


def test_the_driver_writes_every_tasks_samples_as_generator_rows() -> None:
    stage = SparkStage(
        master="x", conf={}, bind_host="127.0.0.1", max_clock_error_ns=None, crossing_routes=0
    )
    stage._handles = [
        _handle(1, "b", TaskSample(1, "b", 11, 0.25, 1000), 0.5),
        _handle(0, "a", TaskSample(0, "a", 10, 0.5, 3000), 0.2),
        _handle(2, "c", TaskSample(2, "c", 12, 0.9, 9), 10.0),  # stopped reporting
        _handle(3, "d", None, 0),
    ]
    rows = stage.sample(77)
    assert [(r.role, r.pid, r.cpu_cores, r.rss_bytes, r.t_ns) for r in rows] == [
        ("generator", 11, 0.75, 4000, 77),
        ("generator:task-0@a", 10, 0.5, 3000, 77),
        ("generator:task-1@b", 11, 0.25, 1000, 77),
    ]
    stage._handles = []
    assert stage.sample(78) == []
