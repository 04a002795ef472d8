"""Open-loop token-bucket schedule (docs/architecture.md, measurement rule 1).

Message ``seq`` of publisher ``p`` is *intended* at ``intended_ns(start, r, n, p, seq)``
whatever happened before it: a slow send never moves later messages. When the generator
falls behind, every overdue message is still sent (at once, in intended order) with its
original intended time, so the lateness shows up as send lag and in the corrected latency
instead of disappearing behind a reset schedule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from mqbench.records.intended import intended_ns
from mqbench.workload.timer import Timer, TimerFactory

SendFn = Callable[[int, int, int], None]
"""``(pub, seq, intended_ns)``: hand one message to its publisher's client."""
Clock = Callable[[], int]
Defer = Callable[[Callable[[], None]], object]
"""Run a callback on a later loop iteration, after pending I/O (``loop.call_soon``)."""


@dataclass
class ScheduleStats:
    """What the schedule loop observed about itself."""

    due: int = 0
    """Messages whose intended time has come and that were handed to ``send``."""
    late: int = 0
    """Messages handed over more than ``late_threshold_ns`` after their intended time."""
    max_lag_ns: int = 0
    """Largest observed send lag (actual hand-over minus intended)."""
    timer: str = ""
    """Which timer woke the loop: ``timerfd`` (ns deadlines) or ``loop`` (~1 ms)."""
    wakeups: int = 0
    """Timer expiries that woke the loop."""
    yields: int = 0
    """Times the loop handed control back to pending I/O in the middle of due sends."""
    spin_ns: int = 0
    """Time spent busy-waiting for due times (the CPU cost of precision)."""
    margin_ns: int = 0
    """Final wake-up margin: how early the timer was armed before a due time."""


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


class WakeMargin:
    """How early to arm the timer so that busy-waiting, not the wake-up, meets the due time.

    A timer expiry reaches the loop some microseconds late (scheduler wake-up, epoll,
    callback). The loop arms ``value_ns`` before each due time and busy-waits the rest, so
    the typical send leaves within a microsecond of its due time. ``value_ns`` follows the
    90th percentile of the last ``window`` observed overshoots, capped at ``cap_ns`` so a
    loaded machine cannot turn waiting into spinning; what the cap does not cover is
    recorded as send lag, never hidden.
    """

    QUANTILE = 0.9

    def __init__(self, cap_ns: int, *, initial_ns: int = 20_000, window: int = 64) -> None:
        self.cap_ns = max(0, cap_ns)
        self.value_ns = min(self.cap_ns, initial_ns)
        self._samples: list[int] = []
        self._window = window
        self._next = 0
        self._seen = 0

    def observe(self, overshoot_ns: int) -> None:
        """Record how late one timer expiry was handled (negative counts as zero)."""
        sample = max(0, overshoot_ns)
        if len(self._samples) < self._window:
            self._samples.append(sample)
        else:
            self._samples[self._next] = sample
            self._next = (self._next + 1) % self._window
        self._seen += 1
        if self._seen % 16 == 0 or self._seen == 4:
            ordered = sorted(self._samples)
            quantile = ordered[min(len(ordered) - 1, int(self.QUANTILE * len(ordered)))]
            self.value_ns = min(self.cap_ns, quantile)


SPIN_SHARE = 0.05
"""Busy-waiting may always take this share of the worker's mean send period."""
WAKE_COVER_NS = 50_000
"""Busy-waiting may take this long per send (a real-time wake-up of the 2-core VM:
cyclictest p50 31 µs, p99 70 µs under SCHED_FIFO, docs/performance.md), within
``WAKE_COVER_SHARE`` of the period."""
WAKE_COVER_SHARE = 0.2


def spin_cap_ns(spin_ns: int, local_rate: float) -> int:
    """The most the loop busy-waits before a send, for a worker sending ``local_rate``
    msg/s: ``spin_ns``, and within it the larger of ``SPIN_SHARE`` of the mean send period
    and ``WAKE_COVER_NS``, the latter only up to ``WAKE_COVER_SHARE`` of the period.

    A sleeping virtual CPU can take 100 µs or more to wake after milliseconds of idleness,
    which 5 % of a long period covers; at 2,000-10,000 msg/s 5 % of the period (5-25 µs)
    is less than even a real-time wake-up (~30 µs), whose rest would be send lag, so the
    cap covers 50 µs there, at most a fifth of a core; above, wake-ups come hot and the
    period itself bounds the cap. Busy-waiting is what the margin did not need, so it
    usually costs far less than the cap (``ScheduleStats.spin_ns`` records it).
    """
    if local_rate <= 0:
        return max(0, spin_ns)
    period_ns = 1e9 / local_rate
    cover = max(SPIN_SHARE * period_ns, min(WAKE_COVER_NS, WAKE_COVER_SHARE * period_ns))
    return max(0, int(min(spin_ns, cover)))


class PublishLoop:
    """Drives an ``InterleavedSchedule``: wakes at each due time, sends, records lateness.

    Between sends the loop sleeps on a ``Timer`` armed ``margin`` before the next due time
    (a ``timerfd`` with nanosecond deadlines where available: event-loop timers resolve to
    about a millisecond) and busy-waits the last few microseconds. While it sleeps the
    event loop serves I/O, so receive timestamps are not queued behind the schedule; when
    the next send is too close to be worth a wake-up (``margin + min_sleep_ns``) it
    busy-waits instead. Busy-waiting is bounded by ``spin_ns`` per send, which bounds its
    CPU cost. Every ``batch`` sends, or after ``budget_ns`` of continuous work, the loop
    hands control back to pending I/O before it goes on: a backlog never starves receivers.
    A message is never sent before its intended time and the schedule is never reset: when
    the loop falls behind, overdue messages go out in intended order and their lateness is
    recorded.

    The busy-wait cap is :func:`spin_cap_ns`: a bounded share of the worker's mean send
    period, so precision costs a bounded share of a core at any rate.

    ``flush`` runs at the end of every step that sent something, before the timer is armed
    and before the loop yields: the clients queue their frames (one write per connection
    per step), and the step hands them to the kernel before it does anything else, so the
    time from a message's send stamp to its socket is spent on neither the timer's system
    call nor other callbacks.
    """

    def __init__(
        self,
        schedule: InterleavedSchedule,
        send: SendFn,
        clock: Clock,
        timers: TimerFactory,
        defer: Defer,
        *,
        flush: Callable[[], None] | None = None,
        spin_ns: int = 1_000_000,
        min_sleep_ns: int = 20_000,
        late_threshold_ns: int = 5_000_000,
        batch: int = 64,
        budget_ns: int = 200_000,
    ) -> None:
        self.schedule = schedule
        self.stats = ScheduleStats()
        self._send = send
        self._clock = clock
        self._timers = timers
        self._defer = defer
        self._flush = flush
        local_rate = schedule.rate * (schedule.last - schedule.first)
        self._margin = WakeMargin(spin_cap_ns(spin_ns, local_rate))
        self._min_sleep_ns = min_sleep_ns
        self._late_ns = late_threshold_ns
        self._batch = max(1, batch)
        self._budget_ns = budget_ns
        self._stopped = False
        self._timer: Timer | None = None
        self._armed_at: int | None = None
        self._finished: Callable[[], None] | None = None

    def stop(self) -> None:
        """Stop after the current send (used for interrupts and shutdown)."""
        self._stopped = True
        if self._timer is not None:
            self._defer(self._step)

    def start(self, finished: Callable[[], None]) -> None:
        """Begin; ``finished`` is called once every message was sent or after ``stop``."""
        self._finished = finished
        self._timer = self._timers(self._on_timer)
        self.stats.timer = self._timer.kind
        self._step()

    async def run(self) -> ScheduleStats:
        """Send every scheduled message (or until stopped); return what was observed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        self.start(finished)
        try:
            await done
        finally:
            self._close()
        return self.stats

    def _on_timer(self) -> None:
        armed = self._armed_at
        if armed is None:
            return
        self._armed_at = None
        self.stats.wakeups += 1
        self._margin.observe(self._clock() - armed)
        self._step()

    def _close(self) -> None:
        if self._timer is not None:
            self._timer.close()
        self._armed_at = None
        self.stats.margin_ns = self._margin.value_ns

    def _done(self) -> None:
        self._close()
        finished, self._finished = self._finished, None
        if finished is not None:
            finished()

    def _step(self) -> None:
        """Send what is due, hand it to the kernel (``flush``), then sleep, busy-wait or
        yield until the next due time."""
        if self._finished is None:
            return
        if self._stopped or self.schedule.finished:
            self._done()
            return
        if self._armed_at is not None:
            return  # a stale deferred call while the timer is armed
        sent = self._send_due()
        if sent and self._flush is not None:
            self._flush()
        if self._armed_at is not None:
            # armed after the flush: the timer's system call is not spent between the
            # messages' send stamps and their write
            assert self._timer is not None
            self._timer.arm(self._armed_at)

    def _send_due(self) -> int:
        """Send every message that is due, then choose the timer's deadline
        (``_armed_at``), yield or finish; returns how many were sent."""
        schedule, stats, clock, send = self.schedule, self.stats, self._clock, self._send
        now = clock()
        began = now
        sent = 0
        late_ns, margin = self._late_ns, self._margin
        while True:
            due = schedule.next_due_ns()
            wait = due - now
            if wait > 0:
                if wait > margin.value_ns + self._min_sleep_ns:
                    self._armed_at = due - margin.value_ns
                    return sent
                spin_from = now
                while now < due:
                    now = clock()
                stats.spin_ns += now - spin_from
            pub, seq = schedule.current()
            lag = now - due
            send(pub, seq, due)
            schedule.advance()
            stats.due += 1
            if lag > stats.max_lag_ns:
                stats.max_lag_ns = lag
            if lag > late_ns:
                stats.late += 1
            sent += 1
            if schedule.finished or self._stopped:
                self._done()
                return sent
            now = clock()
            if sent >= self._batch or now - began >= self._budget_ns:
                stats.yields += 1
                self._defer(self._step)
                return sent
