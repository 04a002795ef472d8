"""Open-loop token-bucket schedule (DESIGN.md, measurement rule 1).

Message ``seq`` of publisher ``p`` is *intended* at ``intended_ns(start, r, n, p, seq)``
whatever happened before it: a slow send never moves later messages. When the generator
falls behind, every overdue message is still sent (at once, in intended order) with its
original intended time, so the lateness shows up as send lag and in the corrected latency
instead of disappearing behind a reset schedule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mqbench.records.schedule import intended_ns

SendFn = Callable[[int, int, int], None]
"""``(pub, seq, intended_ns)``: hand one message to its publisher's client."""
Clock = Callable[[], int]
Sleep = Callable[[float], Awaitable[None]]


@dataclass
class ScheduleStats:
    """What the schedule loop observed about itself."""

    due: int = 0
    """Messages whose intended time has come and that were handed to ``send``."""
    late: int = 0
    """Messages handed over more than ``late_threshold_ns`` after their intended time."""
    max_lag_ns: int = 0
    """Largest observed send lag (actual hand-over minus intended)."""


class InterleavedSchedule:
    """Due messages of publishers ``[first, last)`` out of ``publishers``, in intended order."""

    def __init__(
        self,
        start_ns: int,
        rate: float,
        publishers: int,
        first: int,
        last: int,
        messages_per_publisher: int,
    ) -> None:
        if not 0 <= first < last <= publishers:
            raise ValueError(f"publisher range [{first}, {last}) outside 0..{publishers}")
        self.start_ns = start_ns
        self.rate = rate
        self.publishers = publishers
        self.first = first
        self.last = last
        self.messages_per_publisher = messages_per_publisher
        self._pub = first
        self._seq = 0

    @property
    def finished(self) -> bool:
        """True once every scheduled message was handed out."""
        return self._seq >= self.messages_per_publisher

    def next_due_ns(self) -> int:
        """Intended time of the next message (only valid while not finished)."""
        return intended_ns(self.start_ns, self.rate, self.publishers, self._pub, self._seq)

    def advance(self) -> None:
        """Move past the current message."""
        self._pub += 1
        if self._pub == self.last:
            self._pub = self.first
            self._seq += 1

    def current(self) -> tuple[int, int]:
        """``(pub, seq)`` of the next message."""
        return self._pub, self._seq

    def total(self) -> int:
        """Messages this schedule hands out in all."""
        return (self.last - self.first) * self.messages_per_publisher


class PublishLoop:
    """Drives an ``InterleavedSchedule``: sleeps until due, sends, records lateness.

    Event-loop timers resolve to about a millisecond. When sends are far apart (the
    period between this loop's sends is at least ``SPIN_PERIOD_FACTOR`` x ``spin_ns``), the
    loop sleeps until ``spin_ns`` before the next due time and then yields to the loop
    (``sleep(0)``) until it is due, costing at most ~1/``SPIN_PERIOD_FACTOR`` of a core;
    I/O keeps being served while it waits. When sends are closer together, spinning would
    take a whole core from the broker on a small machine, so the loop wakes at most once
    per ``MIN_SLEEP_S`` and sends everything due; the resulting lag (< ~1-2 ms) is
    recorded per message, never hidden. ``batch`` bounds how many overdue messages go out
    before the loop yields, so a backlog never starves receivers.
    """

    SPIN_PERIOD_FACTOR = 5
    MIN_SLEEP_S = 0.001

    def __init__(
        self,
        schedule: InterleavedSchedule,
        send: SendFn,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
        *,
        spin_ns: int = 1_000_000,
        late_threshold_ns: int = 5_000_000,
        batch: int = 2000,
    ) -> None:
        self.schedule = schedule
        self.stats = ScheduleStats()
        self._send = send
        self._clock = clock
        self._sleep = sleep
        local_rate = schedule.rate * (schedule.last - schedule.first)
        period_ns = 1e9 / local_rate
        self._spin_ns = spin_ns if period_ns >= self.SPIN_PERIOD_FACTOR * spin_ns else 0
        self._late_ns = late_threshold_ns
        self._batch = batch
        self._stopped = False

    def stop(self) -> None:
        """Stop after the current batch (used for interrupts)."""
        self._stopped = True

    async def run(self) -> ScheduleStats:
        """Send every scheduled message (or until stopped); return what was observed."""
        schedule, stats, clock, send = self.schedule, self.stats, self._clock, self._send
        while not schedule.finished and not self._stopped:
            now = clock()
            sent_in_batch = 0
            while not schedule.finished:
                due = schedule.next_due_ns()
                if due > now:
                    break
                pub, seq = schedule.current()
                lag = clock() - due
                send(pub, seq, due)
                schedule.advance()
                stats.due += 1
                if lag > stats.max_lag_ns:
                    stats.max_lag_ns = lag
                if lag > self._late_ns:
                    stats.late += 1
                sent_in_batch += 1
                if sent_in_batch >= self._batch:
                    break
            if schedule.finished or self._stopped:
                break
            wait = schedule.next_due_ns() - clock()
            if sent_in_batch >= self._batch or wait <= 0:
                await self._sleep(0)
            elif self._spin_ns == 0:
                await self._sleep(max(wait / 1e9, self.MIN_SLEEP_S))
            elif wait > self._spin_ns:
                await self._sleep((wait - self._spin_ns) / 1e9)
            else:
                await self._sleep(0)
        return stats
