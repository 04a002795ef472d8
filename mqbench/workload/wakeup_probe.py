"""The wake-up probe: how late a sleeping process runs after its timer expired, in the
worker's process model, and the same probe kept running beside a cell's load.

A worker sleeps on a ``timerfd`` armed at an absolute deadline inside its uvloop event loop
(``workload.timer``) and sends when it wakes; how late it wakes is the floor under every
send lag it records. The probe measures exactly that: a spawned process, its scheduling set
by ``workload.realtime.apply_realtime``, a uvloop loop and a ``TimerfdTimer`` re-armed every
interval at the next absolute deadline. Each sample is the wall clock when the callback ran
minus the deadline. Unlike the publish loop it never busy-waits, so it sees the machine's
wake-up latency alone (cyclictest's figure, with an event loop on top).

Two uses:

- ``mqbench calibrate`` runs it on the idle machine under every policy mqbench may use
  (``mqbench.calibration.wakeup``): the calibrated floor.
- ``run`` keeps one running through every cell whose workers run real time
  (:class:`CellProbe`), one real-time priority *above* the workers and on their CPUs, and
  keeps the samples of the measured window: the wake-up latency the machine imposed *during
  that cell* (``cells[].timing.wakeup_during``). Above the workers, the probe is not delayed
  by the generator's own work, only by what delays every task on those CPUs (the hypervisor
  taking the vCPU away, interrupts, the kernel). The latency verdict allows send lag up to
  that figure as the machine's (``analysis.latency_check``; docs/calibration.md, "The floor
  during the cell").
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import multiprocessing as mp
import time
from array import array
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any, Final

from mqbench.records.timing import WakeupFloor
from mqbench.workload.realtime import (
    RealtimeSettings,
    apply_realtime,
    policy_name,
)
from mqbench.workload.timer import TimerfdTimer, timerfd_available

CELL_SAMPLES: Final = 1000
"""The cell probe aims at this many wake-ups in the measured window: a p99 of its ten
latest (as many as the sends of a cell of 100 msg/s over 10 s give their p99)."""
CELL_INTERVAL_US: Final = (2000, 10000)
"""The cell probe's interval is kept within these bounds (µs): each wake-up of the Python
probe cost 90-210 µs of CPU on the 2-core VM (docs/calibration.md), so a long window is
sampled more sparsely rather than more often."""
JOIN_GRACE_S: Final = 60.0
"""A spawned process imports mqbench first: seconds on a loaded machine."""
END_MARGIN_S: Final = 600.0
"""The cell probe stops sampling this long after the cell's planned end if never told to
(a slow connect phase delays the window; the bound only keeps a lost probe from living on)."""


def nearest_rank(ordered: list[int], q: float) -> int:
    """The nearest-rank ``q`` percentile (0-100) of an ascending list."""
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[min(len(ordered), int(rank)) - 1]


def floor_of(policy: str, lateness_ns: list[int], measured_utc: str = "") -> WakeupFloor:
    """Percentiles (µs) of the wake-up lateness samples of one policy (at least one)."""
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


@dataclass
class Samples:
    """The probe's wake-ups: the deadline each was armed for and how late it ran (ns)."""

    deadlines: array[int]
    lateness: array[int]

    def within(self, start_ns: int, end_ns: int) -> list[int]:
        """The lateness of the wake-ups whose deadline is in ``[start_ns, end_ns)``."""
        return [
            late
            for deadline, late in zip(self.deadlines, self.lateness, strict=True)
            if start_ns <= deadline < end_ns
        ]


async def sample(count: int, interval_ns: int, stop_fd: int | None = None) -> Samples:
    """Wake every ``interval_ns`` until ``count`` samples, or until ``stop_fd`` is readable."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    samples = Samples(array("q"), array("q"))
    deadline = time.time_ns() + interval_ns

    def finish() -> None:
        if not done.done():
            done.set_result(None)

    def on_timer() -> None:
        nonlocal deadline
        samples.deadlines.append(deadline)
        samples.lateness.append(time.time_ns() - deadline)
        if len(samples.lateness) >= count:
            finish()
            return
        deadline += interval_ns
        now = time.time_ns()
        if deadline <= now:  # the probe fell behind: measure from the next interval on
            deadline = now + interval_ns
        timer.arm(deadline)

    timer = TimerfdTimer(on_timer, loop)
    if stop_fd is not None:
        loop.add_reader(stop_fd, finish)
    try:
        timer.arm(deadline)
        await done
    finally:
        timer.close()
        if stop_fd is not None:
            loop.remove_reader(stop_fd)
    return samples


def cell_interval_us(window_s: float) -> int:
    """The cell probe's interval for a measured window of ``window_s``: :data:`CELL_SAMPLES`
    wake-ups over it, within :data:`CELL_INTERVAL_US`."""
    low, high = CELL_INTERVAL_US
    return int(min(high, max(low, window_s * 1e6 / CELL_SAMPLES)))


def cell_probe_settings(workers: RealtimeSettings | None) -> RealtimeSettings | None:
    """The cell probe's scheduling: SCHED_FIFO one priority above the workers, on their
    CPUs, holding nothing itself (the workers hold ``/dev/cpu_dma_latency``). None when the
    workers are not real time: a probe at normal priority would wait behind a busy
    generator and count its delay as the machine's, and a real-time one beside normal
    workers could take CPU from a broker that real time was kept away from
    (``workload.realtime.decide``)."""
    if workers is None or workers.policy != "fifo":
        return None
    return RealtimeSettings(
        policy="fifo",
        priority=workers.priority + 1,
        dma_latency_us=None,
        timer_slack_ns=None,
        cpus=workers.cpus,
    )


@dataclass(frozen=True)
class ProbeResult:
    """The floor during a window, or why there is none."""

    floor: WakeupFloor | None
    reason: str | None = None


class CellProbe:
    """A wake-up probe process that runs through one cell (start, then :meth:`stop` with
    the measured window; :meth:`close` on any other path). Bounded: it stops sampling
    :data:`END_MARGIN_S` after ``planned_s`` (the cell's connect timeout, warm-up, window
    and drain), and exits when this process goes away."""

    def __init__(self, settings: RealtimeSettings, planned_s: float, interval_us: int) -> None:
        self.settings = settings
        self.interval_ns = interval_us * 1000
        self.count = max(10, int((planned_s + END_MARGIN_S) * 1e6 / interval_us))
        self._process: Any = None
        self._conn: Connection | None = None

    @property
    def pid(self) -> int | None:
        """The probe process's PID while it runs (None before start and after close)."""
        return None if self._process is None else int(self._process.pid)

    def start(self) -> ProbeResult | None:
        """Spawn the probe; a ``ProbeResult`` with the reason when it cannot run."""
        if not timerfd_available():
            return ProbeResult(None, "timerfd is not available on this platform")
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        self._process = ctx.Process(
            target=_cell_probe_main,
            args=(self.settings, self.count, self.interval_ns, child),
            name="mqbench-cell-wakeup",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._conn = parent
        return None

    def stop(self, start_ns: int, end_ns: int) -> ProbeResult:
        """Stop sampling and return the floor of the wake-ups due in ``[start_ns, end_ns)``."""
        conn = self._conn
        if conn is None:
            return ProbeResult(None, "the probe was not started")
        try:
            conn.send((start_ns, end_ns))
            answer = receive_answer(conn, JOIN_GRACE_S)
        except OSError as exc:
            answer = ("error", f"the probe process went away ({exc.strerror or exc})")
        finally:
            self.close()
        if answer is None:
            return ProbeResult(None, "the probe process did not answer in time")
        kind, data = answer
        if kind != "ok":
            return ProbeResult(None, str(data))
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        return ProbeResult(replace(data, measured_utc=now))

    def close(self) -> None:
        """Reap the process (killed if it does not exit) and close the pipe; idempotent."""
        conn, process = self._conn, self._process
        self._conn = self._process = None
        if conn is not None:
            conn.close()  # the probe sees EOF and exits
        if process is not None:
            process.join(JOIN_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
            process.close()


def receive_answer(conn: Connection, timeout_s: float) -> tuple[str, Any] | None:
    """A probe process's ``(kind, data)`` answer, or None when none came within
    ``timeout_s`` (an exit without one is an ``error`` answer)."""
    if not conn.poll(timeout_s):
        return None
    try:
        kind, data = conn.recv()
    except EOFError:
        return ("error", "the probe process exited without an answer")
    return str(kind), data


def _cell_probe_main(
    settings: RealtimeSettings, count: int, interval_ns: int, conn: Connection
) -> None:
    """Entry point of the cell probe: sample until told the window, answer its floor."""
    try:
        import uvloop  # before real time: the import is not the probe's to hurry

        applied = apply_realtime(settings)
        if applied.errors:
            conn.send(("error", "; ".join(applied.errors)))
            return
        samples = uvloop.run(sample(count, interval_ns, stop_fd=conn.fileno()))
        if not conn.poll(JOIN_GRACE_S):
            return  # sampled for ``max_s`` and nobody asked: the cell is gone
        start_ns, end_ns = conn.recv()
        lateness = samples.within(start_ns, end_ns)
        if not lateness:
            conn.send(("error", "no wake-up of the probe fell in the measured window"))
            return
        conn.send(("ok", floor_of(policy_name(settings), lateness)))
    except EOFError:
        return  # the cell went away without asking: nothing to answer
    except Exception as exc:  # report, never hang the parent
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
