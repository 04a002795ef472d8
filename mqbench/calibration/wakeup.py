"""The machine's wake-up floor: a cyclictest-like probe in the worker's process model.

A worker sleeps on a ``timerfd`` armed at an absolute deadline inside its uvloop event
loop (``workload.timer``) and sends when it wakes; how late it wakes is the floor under
every send lag it records. The probe measures exactly that: a process spawned the way
workers are (``multiprocessing`` spawn), its scheduling set up by the same
``workload.realtime.apply``, a uvloop loop, and a ``TimerfdTimer`` re-armed every
``interval`` at the next absolute deadline; each sample is the wall clock when the callback
runs minus the deadline. Unlike the publish loop it never busy-waits, so it sees the
machine's wake-up latency alone (cyclictest's figure, with an event loop on top).

Every policy mqbench may use is measured in its own process, one after the other
(``PROBE_POLICIES``); a policy this process may not use is reported with the reason.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final

from mqbench.calibration.model import WakeupFigures, WakeupResult
from mqbench.records.timing import WakeupFloor
from mqbench.workload.realtime import (
    HOLD_DMA_LATENCY_US,
    TIMER_SLACK_NS,
    RealtimeSettings,
    apply_realtime,
    policy_name,
)
from mqbench.workload.timer import TimerfdTimer, timerfd_available

INTERVAL_US: Final = 1000
"""One wake-up per millisecond (cyclictest's default interval)."""
DURATION_S: Final = 3.0
JOIN_GRACE_S: Final = 60.0
"""A spawned process imports mqbench first: seconds on a loaded machine."""

PROBE_POLICIES: Final[tuple[RealtimeSettings | None, ...]] = (
    None,
    RealtimeSettings(policy="other", dma_latency_us=None, timer_slack_ns=TIMER_SLACK_NS),
    RealtimeSettings(policy="other", dma_latency_us=HOLD_DMA_LATENCY_US, timer_slack_ns=None),
    RealtimeSettings(policy="fifo", dma_latency_us=None, timer_slack_ns=None),
    RealtimeSettings(policy="fifo", dma_latency_us=HOLD_DMA_LATENCY_US, timer_slack_ns=None),
    RealtimeSettings(
        policy="fifo", dma_latency_us=HOLD_DMA_LATENCY_US, timer_slack_ns=TIMER_SLACK_NS
    ),
)
"""Each knob alone and together, so each one's effect can be seen (docs/calibration.md)."""


@dataclass(frozen=True)
class ProbeOutcome:
    """One policy's floor, or why it could not be measured."""

    policy: str
    floor: WakeupFloor | None
    reason: str | None = None


def nearest_rank(ordered: list[int], q: float) -> int:
    """The nearest-rank ``q`` percentile (0-100) of an ascending list."""
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[min(len(ordered), int(rank)) - 1]


def floor_of(policy: str, lateness_ns: list[int], measured_utc: str = "") -> WakeupFloor:
    """Percentiles (µs) of the wake-up lateness samples of one policy."""
    ordered = sorted(max(0, x) for x in lateness_ns)
    return WakeupFloor(
        policy=policy,
        p50_us=round(nearest_rank(ordered, 50) / 1e3, 1),
        p99_us=round(nearest_rank(ordered, 99) / 1e3, 1),
        p999_us=round(nearest_rank(ordered, 99.9) / 1e3, 1),
        max_us=round(ordered[-1] / 1e3, 1),
        samples=len(ordered),
        measured_utc=measured_utc,
    )


async def _sample(count: int, interval_ns: int) -> list[int]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    lateness: list[int] = []
    deadline = time.time_ns() + interval_ns

    def on_timer() -> None:
        nonlocal deadline
        lateness.append(time.time_ns() - deadline)
        if len(lateness) >= count:
            if not done.done():
                done.set_result(None)
            return
        deadline += interval_ns
        now = time.time_ns()
        if deadline <= now:  # the probe fell behind: measure from the next interval on
            deadline = now + interval_ns
        timer.arm(deadline)

    timer = TimerfdTimer(on_timer, loop)
    try:
        timer.arm(deadline)
        await done
    finally:
        timer.close()
    return lateness


def _probe_main(settings: RealtimeSettings | None, count: int, interval_ns: int, conn: Any) -> None:
    """Entry point of the probe process: apply the policy, sample, send the samples."""
    try:
        applied = apply_realtime(settings)
        if applied.errors:
            conn.send(("error", "; ".join(applied.errors)))
            return
        import uvloop

        conn.send(("ok", uvloop.run(_sample(count, interval_ns))))
    except Exception as exc:  # report, never hang the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def probe_policy(
    settings: RealtimeSettings | None,
    duration_s: float = DURATION_S,
    interval_us: int = INTERVAL_US,
) -> ProbeOutcome:
    """Measure one policy in a fresh spawned process (bounded by ``duration_s`` + grace)."""
    name = policy_name(settings)
    if not timerfd_available():
        return ProbeOutcome(name, None, "timerfd is not available on this platform")
    count = max(10, int(duration_s * 1e6 / interval_us))
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=_probe_main,
        args=(settings, count, interval_us * 1000, child),
        name=f"mqbench-wakeup-{name}",
    )
    process.start()
    child.close()
    try:
        message = _receive(parent, duration_s + JOIN_GRACE_S)
    finally:
        process.join(JOIN_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()
        parent.close()
    if message is None:
        return ProbeOutcome(name, None, "the probe process did not answer in time")
    kind, data = message
    if kind != "ok":
        return ProbeOutcome(name, None, str(data))
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return ProbeOutcome(name, floor_of(name, list(data), now))


def _receive(conn: Connection, timeout_s: float) -> tuple[str, Any] | None:
    if not conn.poll(timeout_s):
        return None
    try:
        kind, data = conn.recv()
    except EOFError:
        return ("error", "the probe process exited without an answer")
    return str(kind), data


def probe_all(
    duration_s: float = DURATION_S,
    progress: Callable[[str], None] | None = None,
    policies: tuple[RealtimeSettings | None, ...] = PROBE_POLICIES,
    interval_us: int = INTERVAL_US,
) -> list[ProbeOutcome]:
    """Every policy in turn (``progress`` gets one line per policy)."""
    outcomes = []
    for settings in policies:
        outcome = probe_policy(settings, duration_s, interval_us)
        if progress is not None:
            floor = outcome.floor
            progress(
                f"wake-up floor {outcome.policy}: "
                + (
                    f"p50 {floor.p50_us:g} µs, p99 {floor.p99_us:g} µs, p99.9 {floor.p999_us:g} µs"
                    if floor is not None
                    else f"not measured ({outcome.reason})"
                )
            )
        outcomes.append(outcome)
    return outcomes


def wakeup_results(
    duration_s: float = DURATION_S,
    progress: Callable[[str], None] | None = None,
    interval_us: int = INTERVAL_US,
) -> dict[str, WakeupResult]:
    """Every policy's floor as the calibration file keeps it (by policy name)."""
    results: dict[str, WakeupResult] = {}
    for outcome in probe_all(duration_s, progress, interval_us=interval_us):
        floor = outcome.floor
        figures = None
        if floor is not None:
            figures = WakeupFigures(
                p50_us=floor.p50_us,
                p99_us=floor.p99_us,
                p999_us=floor.p999_us,
                max_us=floor.max_us,
                samples=floor.samples,
            )
        results[outcome.policy] = WakeupResult(
            policy=outcome.policy,
            interval_us=interval_us,
            measured_utc=floor.measured_utc
            if floor is not None
            else dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            figures=figures,
            reason=outcome.reason,
        )
    return results


def as_floor(result: WakeupResult | None) -> WakeupFloor | None:
    """A stored policy's floor in the manifest's form (None when not measured)."""
    if result is None or result.figures is None:
        return None
    f = result.figures
    return WakeupFloor(
        result.policy, f.p50_us, f.p99_us, f.p999_us, f.max_us, f.samples, result.measured_utc
    )
