"""The Python engine's send path: a published frame reaches its socket when the publish step
ends, not after the event loop's other work (docs/performance.md, "The Python engine's send
path")."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from stream_fakes import FakeTransport, attach

from mqbench.records.writer import RecordWriter
from mqbench.transports.base import ClientOptions, Sender
from mqbench.transports.stream import StreamConnection
from mqbench.transports.write_batch import WriteBatch, write_batch
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.publishing import Publishing
from mqbench.workload.topology import PubSpec

PAYLOAD_BYTES = 64
FRAME_BYTES = 1 + PAYLOAD_BYTES
"""The fake client's frame: ``F`` and the payload."""


def make_stream() -> StreamConnection:
    return StreamConnection(
        "test at 127.0.0.1:1", ClientOptions("c1"), lambda data: None, lambda failure: None
    )


class StreamClient:
    """A publisher whose frames go through a real ``StreamConnection`` to a fake transport.

    Before each frame it queues a callback on the event loop, standing for a read or timer
    that was already due when the publish step ran; the callback notes how many whole frames
    the transport had been given by then.
    """

    def __init__(self, stream: StreamConnection, transport: FakeTransport) -> None:
        self.stream = stream
        self.transport = transport
        self.written_before_other_work: list[int] = []

    def sender(self, topic: str, qos: int) -> Sender:
        loop = asyncio.get_running_loop()

        def send(payload: bytes, tag: int) -> bool:
            loop.call_soon(self._note)
            return self.stream.send(b"F", payload)

        return send

    def _note(self) -> None:
        written = sum(len(w) for w in self.transport.writes)
        self.written_before_other_work.append(written // FRAME_BYTES)


def make_plan(tmp_path: Path, messages: int) -> WorkerPlan:
    return WorkerPlan(
        worker=0,
        cell_dir=str(tmp_path),
        transport="unused",
        host="127.0.0.1",
        port=1,
        publishers=[PubSpec(0, "p0", "t/0")],
        subscribers=[],
        publishers_total=1,
        rate=200.0,
        payload_bytes=PAYLOAD_BYTES,
        qos=0,
        messages_per_publisher=messages,
        connect_timeout_s=1.0,
        spin_ns=0,
        late_threshold_ns=5_000_000,
        timer="loop",
    )


def test_a_published_frame_reaches_its_socket_before_the_loops_waiting_callbacks_run(
    tmp_path: Path,
) -> None:
    messages = 4

    async def scenario() -> StreamClient:
        stream = make_stream()
        client = StreamClient(stream, attach(stream))
        sends = RecordWriter(tmp_path / "sends.bin")
        try:
            publishing = Publishing(make_plan(tmp_path, messages), sends)
            await publishing.run(time.time_ns() + 2_000_000, [client])  # type: ignore[list-item]
        finally:
            sends.close()
        return client

    client = asyncio.run(scenario())
    # the k-th frame is on the transport before anything queued ahead of it runs (a late
    # step may send several at once: then they are all there)
    notes = client.written_before_other_work
    assert len(notes) == messages
    assert all(written >= k + 1 for k, written in enumerate(notes)), notes
    assert sum(len(w) for w in client.transport.writes) == messages * FRAME_BYTES


def test_frames_queued_outside_a_publish_step_leave_at_the_end_of_the_iteration() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        first, second = make_stream(), make_stream()
        t1, t2 = attach(first), attach(second)
        assert first.send(b"a") and second.send(b"b") and first.send(b"c")
        before = t1.writes + t2.writes
        await asyncio.sleep(0)
        return before, t1.writes + t2.writes, len(t1.writes)

    before, after, first_writes = asyncio.run(scenario())
    assert before == []
    assert after == [b"ac", b"b"] and first_writes == 1


def test_a_batch_flushes_every_queued_connection_once_and_schedules_itself_once() -> None:
    scheduled: list[object] = []
    flushed: list[str] = []
    batch = WriteBatch(scheduled.append)
    batch.add(lambda: flushed.append("a"))
    batch.add(lambda: flushed.append("b"))
    assert len(scheduled) == 1 and flushed == []
    batch.flush()
    batch.flush()
    assert flushed == ["a", "b"]


def test_each_event_loop_has_its_own_write_batch() -> None:
    async def batch_of_running_loop() -> WriteBatch:
        loop = asyncio.get_running_loop()
        batch = write_batch(loop)
        assert write_batch(loop) is batch
        return batch

    assert asyncio.run(batch_of_running_loop()) is not asyncio.run(batch_of_running_loop())
