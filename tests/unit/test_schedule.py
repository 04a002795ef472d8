import asyncio

import numpy as np
import pytest

from mqbench.records.schedule import first_seq_at_or_after, intended_ns, intended_ns_array
from mqbench.workload.schedule import InterleavedSchedule, PublishLoop

START = 1_800_000_000_000_000_000


class FakeClock:
    """A clock that only moves when the loop sleeps (or a test stalls it)."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self.stall_at: dict[int, int] = {}
        self.calls = 0

    def __call__(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        # a zero sleep is a spin: time still passes, 100 us per spin
        self.now += int(seconds * 1e9) if seconds > 0 else 100_000


def run_loop(
    schedule: InterleavedSchedule, clock: FakeClock, **kwargs: int
) -> tuple[list, PublishLoop]:
    sent: list[tuple[int, int, int, int]] = []

    def send(pub: int, seq: int, intended: int) -> None:
        sent.append((pub, seq, intended, clock.now))
        stall = clock.stall_at.pop(len(sent), 0)
        clock.now += stall

    loop = PublishLoop(schedule, send, clock, clock.sleep, **kwargs)
    asyncio.run(loop.run())
    return sent, loop


def test_intended_times_are_exact_and_evenly_phase_shifted() -> None:
    # 4 publishers at 10 msg/s: aggregate slots every 25 ms
    assert [intended_ns(START, 10.0, 4, p, 0) - START for p in range(4)] == [
        0,
        25_000_000,
        50_000_000,
        75_000_000,
    ]
    assert intended_ns(START, 10.0, 4, 0, 1) - START == 100_000_000


def test_vectorised_intended_times_are_bit_identical_to_scalar() -> None:
    pubs = np.repeat(np.arange(7), 500)
    seqs = np.tile(np.arange(500), 7)
    vector = intended_ns_array(START, 33.3, 7, pubs, seqs)
    scalar = [intended_ns(START, 33.3, 7, int(p), int(s)) for p, s in zip(pubs, seqs, strict=True)]
    assert vector.tolist() == scalar


def test_first_seq_at_or_after_finds_window_start() -> None:
    t = START + 1_000_000_000
    seq = first_seq_at_or_after(10.0, 3, 2, START, t)
    assert intended_ns(START, 10.0, 3, 2, seq) >= t
    assert intended_ns(START, 10.0, 3, 2, seq - 1) < t


def test_schedule_hands_out_every_message_once_in_intended_order() -> None:
    schedule = InterleavedSchedule(START, 10.0, 4, 1, 3, messages_per_publisher=3)
    clock = FakeClock(START)
    sent, loop = run_loop(schedule, clock, spin_ns=0)
    assert [(p, s) for p, s, _, _ in sent] == [(1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (2, 2)]
    assert [i for _, _, i, _ in sent] == [intended_ns(START, 10.0, 4, p, s) for p, s, _, _ in sent]
    assert loop.stats.due == 6 == schedule.total()


def test_no_message_is_sent_before_its_intended_time() -> None:
    schedule = InterleavedSchedule(START, 100.0, 2, 0, 2, messages_per_publisher=20)
    clock = FakeClock(START - 3_000_000)
    sent, _ = run_loop(schedule, clock)
    assert all(actual >= intended for _, _, intended, actual in sent)


def test_a_stall_is_recorded_as_lateness_not_hidden_by_a_reset_schedule() -> None:
    schedule = InterleavedSchedule(START, 10.0, 1, 0, 1, messages_per_publisher=10)
    clock = FakeClock(START)
    clock.stall_at[3] = 350_000_000  # the 3rd send blocks the loop for 350 ms
    sent, loop = run_loop(schedule, clock, late_threshold_ns=5_000_000)
    # every message keeps its intended slot: 0, 100, 200, ... ms
    assert [i - START for _, _, i, _ in sent] == [k * 100_000_000 for k in range(10)]
    # messages 3..5 (intended 300, 400, 500 ms) go out at once at 550 ms and are late
    actual = {s: a - START for _, s, _, a in sent}
    assert actual[3] == actual[4] == actual[5]
    assert 550_000_000 <= actual[3] < 551_000_000
    assert loop.stats.late == 3
    assert loop.stats.max_lag_ns == actual[3] - 300_000_000
    # after the backlog the schedule is back on its original grid, not shifted
    assert actual[6] >= 600_000_000
    assert actual[6] - 600_000_000 < 1_000_000


def test_backlog_is_sent_in_bounded_batches_yielding_between() -> None:
    schedule = InterleavedSchedule(START, 1000.0, 1, 0, 1, messages_per_publisher=50)
    clock = FakeClock(START + 10_000_000_000)  # everything already overdue
    sent, loop = run_loop(schedule, clock, batch=20)
    assert len(sent) == 50
    assert clock.sleeps.count(0) >= 2  # yielded after each batch of 20
    assert loop.stats.late == 50


def test_invalid_publisher_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="outside"):
        InterleavedSchedule(START, 1.0, 2, 1, 3, 1)


def test_dense_schedules_do_not_spin_but_sleep_at_least_a_millisecond() -> None:
    # 10 publishers x 500 msg/s: a send every 200 us, far below 5 x the 1 ms spin
    schedule = InterleavedSchedule(START, 500.0, 10, 0, 10, messages_per_publisher=20)
    clock = FakeClock(START)
    sent, _ = run_loop(schedule, clock, spin_ns=1_000_000)
    assert len(sent) == 200
    assert 0 not in clock.sleeps
    assert min(clock.sleeps) >= 0.001


def test_sparse_schedules_spin_close_to_the_due_time() -> None:
    # one publisher at 10 msg/s: 100 ms between sends, spinning costs little
    schedule = InterleavedSchedule(START, 10.0, 1, 0, 1, messages_per_publisher=3)
    clock = FakeClock(START + 1)
    sent, _ = run_loop(schedule, clock, spin_ns=1_000_000)
    assert 0 in clock.sleeps
    assert all(actual - intended < 200_000 for _, _, intended, actual in sent)
