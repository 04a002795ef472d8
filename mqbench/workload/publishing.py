"""A worker's publishing: the send function on the schedule, acks, and what it cost.

The schedule and its timer are ``workload.publish_loop``; this part binds them to the
worker's publishers and its send records, counts what was sent, failed and acknowledged,
and measures the CPU the worker spent while publishing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from mqbench.records.format import HEADER, LAT_MAX, SEND_ACK, SEND_FAILED, SEND_OK
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import Client, Sender
from mqbench.transports.write_batch import write_batch
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.publish_loop import InterleavedSchedule, PublishLoop, ScheduleStats
from mqbench.workload.timer import timer_factory


def _never(payload: bytes, tag: int) -> bool:
    return False


class Publishing:
    """The publishers of one worker on their open-loop schedule."""

    def __init__(self, plan: WorkerPlan, sends: RecordWriter) -> None:
        self.plan = plan
        self.sends = sends
        self.sent_ok = 0
        self.send_failed = 0
        self.acked = 0
        self.loop: PublishLoop | None = None
        self._cpu_marks: list[float] = []
        """process_time and monotonic time at the start and end of publishing."""

    @property
    def stats(self) -> ScheduleStats | None:
        """The publish loop's counters (None before publishing started)."""
        return self.loop.stats if self.loop is not None else None

    async def run(self, start_ns: int, publishers: list[Client | None]) -> None:
        """Publish the worker's share of the schedule starting at ``start_ns``."""
        plan = self.plan
        first, last = plan.pub_range
        if first >= last:
            return
        loop = asyncio.get_running_loop()
        schedule = InterleavedSchedule(
            start_ns,
            plan.rate,
            plan.publishers_total,
            first,
            last,
            plan.messages_per_publisher,
        )
        self.loop = PublishLoop(
            schedule,
            self._make_send(publishers),
            time.time_ns,
            timer_factory(plan.timer, loop),
            loop.call_soon,
            flush=write_batch(loop).flush,
            spin_ns=plan.spin_ns,
            late_threshold_ns=plan.late_threshold_ns,
        )
        delay = (start_ns - time.time_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        self._cpu_marks = [time.process_time(), time.monotonic()]
        await self.loop.run()
        self._cpu_marks += [time.process_time(), time.monotonic()]

    def stop(self) -> None:
        """Stop handing out the schedule (the worker is stopping)."""
        if self.loop is not None:
            self.loop.stop()

    def cpu_fraction(self) -> float | None:
        """Share of a core the worker was busy while publishing, busy-waiting excluded.

        Busy-waiting for a due time (the publish loop's spin) is CPU the worker would
        give up if it had work: it is reported as ``spin_s``, not counted as load.
        """
        marks = self._cpu_marks
        if len(marks) < 2:
            return None
        cpu = (marks[2] if len(marks) > 2 else time.process_time()) - marks[0]
        wall = (marks[3] if len(marks) > 2 else time.monotonic()) - marks[1]
        spin = self.loop.stats.spin_ns / 1e9 if self.loop else 0.0
        return max(0.0, cpu - spin) / wall if wall > 0 else None

    def _make_send(self, publishers: list[Client | None]) -> Callable[[int, int, int], None]:
        plan = self.plan
        first = plan.pub_range[0]
        pad = bytes(plan.payload_bytes - HEADER.size)
        pack = HEADER.pack
        time_ns = time.time_ns
        record = self.sends.append
        senders: list[Sender] = [
            client.sender(spec.topic, plan.qos) if client is not None else _never
            for spec, client in zip(plan.publishers, publishers, strict=True)
        ]
        pending: list[dict[int, int]] = [{} for _ in publishers]
        if plan.qos > 0:
            for i, client in enumerate(publishers):
                if client is not None:
                    client.set_ack_handler(self._ack_handler(first + i, pending[i]))
        track_acks = plan.qos > 0

        def send(pub: int, seq: int, intended: int) -> None:
            t = time_ns()
            if senders[pub - first](pack(pub, seq, t, 0) + pad, seq):
                record(t, 0, pub, SEND_OK, seq)
                self.sent_ok += 1
                if track_acks:
                    pending[pub - first][seq] = t
            else:
                record(intended, 0, pub, SEND_FAILED, seq)
                self.send_failed += 1

        return send

    def _ack_handler(self, pub: int, pending: dict[int, int]) -> Callable[[int, int], None]:
        record = self.sends.append

        def on_ack(seq: int, t_ack: int) -> None:
            t_sent = pending.pop(seq, None)
            if t_sent is not None:
                record(t_sent, min((t_ack - t_sent) // 100, LAT_MAX), pub, SEND_ACK, seq)
                self.acked += 1

        return on_ack
