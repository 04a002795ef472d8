from __future__ import annotations

import asyncio
import time

import pytest

from mqbench.workload.timer import LoopTimer, TimerfdTimer, timer_factory, timerfd_available

needs_timerfd = pytest.mark.skipif(not timerfd_available(), reason="timerfd is Linux-only")


async def _fire_times(timer_kind: str, deadlines: list[int]) -> list[int]:
    loop = asyncio.get_running_loop()
    fired: list[int] = []
    waiter: asyncio.Future[None] | None = None

    def on_fire() -> None:
        fired.append(time.time_ns())
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    timer = timer_factory(timer_kind, loop)(on_fire)
    try:
        for deadline in deadlines:
            waiter = loop.create_future()
            timer.arm(deadline)
            await asyncio.wait_for(waiter, 2.0)
    finally:
        timer.close()
        timer.close()  # closing twice is harmless
    return fired


@needs_timerfd
def test_a_timerfd_fires_after_its_absolute_deadline_never_before() -> None:
    base = time.time_ns() + 3_000_000
    deadlines = [base + k * 1_700_000 for k in range(5)]
    fired = asyncio.run(_fire_times("timerfd", deadlines))
    assert len(fired) == 5
    assert all(f >= d for f, d in zip(fired, deadlines, strict=True))


@needs_timerfd
def test_a_timerfd_armed_in_the_past_fires_at_once() -> None:
    fired = asyncio.run(_fire_times("timerfd", [time.time_ns() - 1_000_000, 0]))
    assert len(fired) == 2


@needs_timerfd
def test_rearming_a_timerfd_replaces_the_earlier_deadline() -> None:
    async def go() -> list[int]:
        loop = asyncio.get_running_loop()
        fired: list[int] = []
        timer = TimerfdTimer(lambda: fired.append(time.time_ns()), loop)
        far = time.time_ns() + 10_000_000_000
        timer.arm(far)
        near = time.time_ns() + 2_000_000
        timer.arm(near)
        await asyncio.sleep(0.05)
        timer.close()
        assert fired and fired[0] >= near
        return fired

    assert len(asyncio.run(go())) == 1


def test_the_loop_timer_fires_after_its_deadline() -> None:
    deadline = time.time_ns() + 3_000_000
    fired = asyncio.run(_fire_times("loop", [deadline]))
    assert fired[0] >= deadline  # never early, though the loop clock rounds to a millisecond


def test_auto_picks_timerfd_where_available() -> None:
    async def kind() -> str:
        timer = timer_factory("auto", asyncio.get_running_loop())(lambda: None)
        timer.close()
        return timer.kind

    expected = "timerfd" if timerfd_available() else "loop"
    assert asyncio.run(kind()) == expected
    assert LoopTimer.kind == "loop"


def test_an_unknown_timer_kind_is_rejected() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="unknown timer kind 'hr'"):
            timer_factory("hr", loop)
    finally:
        loop.close()
