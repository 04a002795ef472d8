"""The machine's wake-up floor, as ``mqbench calibrate`` measures it on the idle machine.

The probe itself (a spawned process in the worker's process model, waking on a ``timerfd``
every ``interval``) is ``mqbench.workload.wakeup_probe``; ``run`` keeps the same probe
running beside each cell. Here every policy mqbench may use is measured in its own process,
one after the other (``PROBE_POLICIES``); a policy this process may not use is reported
with the reason.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
from collections.abc import Callable
from dataclasses import dataclass
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
from mqbench.workload.timer import timerfd_available
from mqbench.workload.wakeup_probe import JOIN_GRACE_S, floor_of, receive_answer, sample

INTERVAL_US: Final = 1000
"""One wake-up per millisecond (cyclictest's default interval)."""
DURATION_S: Final = 3.0

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


def _probe_main(settings: RealtimeSettings | None, count: int, interval_ns: int, conn: Any) -> None:
    """Entry point of the probe process: apply the policy, sample, send the samples."""
    try:
        applied = apply_realtime(settings)
        if applied.errors:
            conn.send(("error", "; ".join(applied.errors)))
            return
        import uvloop

        samples = uvloop.run(sample(count, interval_ns))
        conn.send(("ok", list(samples.lateness)))
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
        message = receive_answer(parent, duration_s + JOIN_GRACE_S)
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
