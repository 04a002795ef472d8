"""Real-time scheduling of the worker processes (``generator.realtime``), never at the
broker's expense.

The decision (:func:`decide`) is a pure function of injected facts: the machine
(:class:`MachineFacts`: CPUs, permission, the kernel's real-time throttle), where the broker
may run (the CPUs its processes are allowed on, read from the kernel), and how much CPU the
cell's generator needs. The rule (docs/performance.md, "Real-time workers"):

* ``off``: normal scheduling.
* No permission for SCHED_FIFO (root or CAP_SYS_NICE): off; ``on`` is refused in one line.
* The broker runs on a subset of the CPUs (a resource profile gave it a cpuset): the
  workers are pinned to the other CPUs and run SCHED_FIFO. With no CPU left over, off.
* The broker may run on every CPU (no profile, or a quota without a cpuset): mqbench never
  takes cores from it. Real time only when the generator needs at most
  ``SMALL_SHARE_CORES``: a worker that sleeps most of the time gets the same CPU time
  under SCHED_FIFO as under SCHED_OTHER, only sooner after each wake-up. A busier one
  preempts the broker whenever both are runnable, and the broker falls behind.
* A broker not on this machine: real time, workers not pinned.
* ``auto`` when the workers' CPUs would carry more than ``RT_MESSAGES_PER_CPU`` messages
  sent and received per second each: off, wherever the broker runs. A busy real-time worker
  keeps every normal task on its CPU waiting, the kernel's ``ksoftirqd`` among them, and the
  broker's traffic waits with it, even with the broker on CPUs of its own.
* ``auto`` with more than ``RT_CONNECTIONS_PER_WORKER`` connections per worker: off,
  wherever the broker runs. The kernel's network work for that many sockets overflows into
  the CPU's ``ksoftirqd`` thread, a normal task that waits behind a real-time worker, and
  the worker's own sends and reads wait for it in turn. ``on`` is honoured as asked.

The kernel's real-time throttling (``sched_rt_runtime_us``) stays in force: a worker that
would exceed it is reported by the self-check, not hidden.

:func:`apply` runs inside each worker process, before its event loop starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Final

from mqbench.records.timing import (
    RealtimeMode,
    ReceiveStamp,
    SchedPolicy,
    TimingEntry,
    WakeupFloor,
)

FIFO_PRIORITY: Final = 1
"""The lowest real-time priority: above every normal task, below every kernel RT thread."""
SMALL_SHARE_CORES: Final = 0.1
"""Beside a broker that may use every CPU, real time only for a generator estimated to need
at most this many cores (``estimate_generator_cores``: 5,000 msg/s per worker with a
45,000 msg/s ceiling). At 0.5, mosquitto lost to the real-time worker: at 22,627 msg/s
(estimated 0.45 core, measured 0.69) it delivered 19,872 msg/s with a p50 of 1.2 s against
all of them at 1.3 ms with real time off (docs/performance.md)."""
RT_CONNECTIONS_PER_WORKER: Final = 1000
"""``auto`` keeps real time off above this many connections per worker. The paper
topology (a connection per client, 10,000 msg/s in total, compiled core, broker on the other CPU,
docs/performance.md): at 200 pairs real time lowered send lag p99 from 0.78 to 0.25 ms, at
500 pairs it was even (1.33 against 1.62 ms), at 1,000 pairs it raised it from 1.5-1.6 to
5.9-6.7 ms and marked the cell saturated (4.3 to 14.8 ms on the Python engine, whose step
had ksoftirqd on the workers' CPU waiting 5.5 s behind it, 0.02 s with real time off)."""
RT_MESSAGES_PER_CPU: Final = 8_000
"""``auto`` keeps real time off when the workers' CPUs would each carry more than this many
messages sent plus received per second. Measured with mosquitto on CPU 0 (``--resources
1cpu-2g``) and one compiled-core worker on CPU 1, 20 pairs, 64 B, two sessions
(docs/performance.md, "A busy real-time worker"): at 4,000 msg/s real time lowered the send
lag and cost the broker nothing; at 8,000 it was even in one session and in the other
raised the lag and the independent subscriber's p50 (0.145 against 0.083 ms); at 12,000 that
subscriber waited (p50 0.46 against 0.17 ms); at 16,000 the broker's own latency rose (p50
0.58 against 0.16 ms); at 24,000 and 32,000 it delivered 14-18 % less, and lost 3.8 % at
32,000."""
CORE_S_PER_MSG: Final = 100e-6
"""Estimated CPU seconds a worker spends per message it sends and receives (a pair), when
no calibrated ceiling says better: 0.08-0.09 core at 1,000 msg/s measured on the 2-core
development machine (docs/performance.md)."""
CEILING_CPU_SHARE: Final = 0.9
"""A calibrated ceiling is the rate at which one worker used at most this share of a core."""
DMA_LATENCY_PATH: Final = Path("/dev/cpu_dma_latency")
HOLD_DMA_LATENCY_US: Final = 0
TIMER_SLACK_NS: Final = 1
PR_SET_TIMERSLACK: Final = 29

USE_DMA_LATENCY: Final = True
"""Hold ``/dev/cpu_dma_latency`` at 0 while real time: it removes deep idle states' exit
latency (p99 26 µs instead of 60 µs under SCHED_FIFO, docs/performance.md)."""
USE_TIMER_SLACK: Final = False
"""Timer slack is not set: timerfd deadlines carry no slack and SCHED_FIFO tasks get none,
so it measured no difference (docs/performance.md)."""


@dataclass(frozen=True)
class MachineFacts:
    """What the decision needs to know about this machine."""

    cpus: tuple[int, ...]
    """CPUs mqbench may run on."""
    permission: str | None
    """None when SCHED_FIFO may be used; else why not (one phrase)."""
    throttle_share: float | None = 0.95
    """The kernel's real-time limit per CPU as a share (None: not throttled)."""
    dma_latency: bool = True
    """Whether ``/dev/cpu_dma_latency`` can be written."""


@dataclass(frozen=True)
class BrokerPlacement:
    """Where the cell's broker may run."""

    local: bool
    """On this machine (native, docker, or an external broker on a loopback address)."""
    cpus: tuple[int, ...] = ()
    """The CPUs its processes are allowed on (empty: unknown, taken as every CPU)."""


@dataclass(frozen=True)
class RealtimeSettings:
    """What a worker process applies to itself (travels in its ``WorkerPlan``)."""

    policy: SchedPolicy = "fifo"
    priority: int = FIFO_PRIORITY
    dma_latency_us: int | None = HOLD_DMA_LATENCY_US if USE_DMA_LATENCY else None
    timer_slack_ns: int | None = TIMER_SLACK_NS if USE_TIMER_SLACK else None
    cpus: tuple[int, ...] = ()
    """Pin to these CPUs (empty: not pinned)."""


def policy_name(settings: RealtimeSettings | None) -> str:
    """The name of a policy and its knobs, as the wake-up floors are keyed: ``other``,
    ``fifo``, ``fifo+dma``, ``other+slack``, ..."""
    if settings is None:
        return "other"
    name: str = settings.policy
    if settings.dma_latency_us is not None:
        name += "+dma"
    if settings.timer_slack_ns is not None:
        name += "+slack"
    return name


@dataclass(frozen=True)
class RealtimeDecision:
    """The cell's scheduling: settings for the workers (None: normal) and why."""

    mode: RealtimeMode
    settings: RealtimeSettings | None
    reason: str
    refused: str | None = None
    """Set when ``on`` cannot be honoured: the one line to show before any load."""
    broker_cpus: tuple[int, ...] = ()
    generator_cores: float | None = None
    throttle_share: float | None = None

    @property
    def policy(self) -> SchedPolicy:
        """What the workers run under."""
        return self.settings.policy if self.settings is not None else "other"

    def entry(
        self, floor: WakeupFloor | None = None, receive_stamp: ReceiveStamp = "user"
    ) -> TimingEntry:
        """The manifest's ``timing`` record for a cell run with this decision."""
        s = self.settings
        return TimingEntry(
            mode=self.mode,
            policy=self.policy,
            reason=self.reason,
            priority=s.priority if s is not None else None,
            dma_latency_us=s.dma_latency_us if s is not None else None,
            timer_slack_ns=s.timer_slack_ns if s is not None else None,
            worker_cpus=s.cpus if s is not None else (),
            broker_cpus=self.broker_cpus,
            generator_cores=self.generator_cores,
            receive_stamp=receive_stamp,
            wakeup_floor=floor,
            throttle_share=self.throttle_share if s is not None else None,
        )


def cpu_text(cpus: Iterable[int]) -> str:
    """CPU numbers for a message: ``0``, ``0-1``, ``0,2``."""
    ordered = sorted(set(cpus))
    if not ordered:
        return "none"
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 1:
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(str(c) for c in ordered)


def estimate_generator_cores(
    offered: float, delivered: float, workers: int, ceiling_per_worker: float | None = None
) -> float:
    """Cores a cell's workers need to send ``offered`` and receive ``delivered`` msg/s
    (all workers together), costed from the client's calibrated ceiling when there is one
    (a worker at its ceiling sends and receives that rate with at most 90 % of a core),
    else at ``CORE_S_PER_MSG`` per message sent and received; at most a core per worker."""
    if ceiling_per_worker is not None and ceiling_per_worker > 0:
        per_event = CEILING_CPU_SHARE / (2 * ceiling_per_worker)
    else:
        per_event = CORE_S_PER_MSG / 2
    return round(min(float(workers), per_event * (offered + delivered)), 3)


def decide(
    mode: RealtimeMode,
    machine: MachineFacts,
    broker: BrokerPlacement,
    generator_cores: float,
    settings: RealtimeSettings | None = None,
    connections_per_worker: int = 0,
    messages_per_s: float = 0.0,
) -> RealtimeDecision:
    """The cell's scheduling from the facts (the rule in the module docstring);
    ``messages_per_s`` is what all workers send plus what they receive, per second."""
    base = RealtimeDecision(
        mode,
        None,
        "",
        broker_cpus=broker.cpus,
        generator_cores=generator_cores,
        throttle_share=machine.throttle_share,
    )
    if mode == "off":
        return replace(base, reason="generator.realtime is off")
    wanted = settings or RealtimeSettings()
    if not machine.dma_latency and wanted.dma_latency_us is not None:
        wanted = replace(wanted, dma_latency_us=None)
    if machine.permission is not None:
        return _off(base, f"no permission for SCHED_FIFO ({machine.permission})")
    if mode == "auto" and connections_per_worker > RT_CONNECTIONS_PER_WORKER:
        return _off(
            base,
            f"{connections_per_worker:,} connections per worker (more than "
            f"{RT_CONNECTIONS_PER_WORKER:,}): the kernel's network work for them would wait "
            "behind a real-time worker (ksoftirqd)",
        )
    broker_cpus = set(broker.cpus or machine.cpus) if broker.local else set()
    free = tuple(c for c in machine.cpus if c not in broker_cpus)
    per_cpu = messages_per_s / max(1, len(free or machine.cpus))
    if mode == "auto" and per_cpu > RT_MESSAGES_PER_CPU:
        return _off(
            base,
            f"{per_cpu:,.0f} messages a second sent and received per worker CPU (more than "
            f"{RT_MESSAGES_PER_CPU:,}): a real-time worker that busy keeps the normal tasks on "
            "its CPU waiting, the kernel's network work (ksoftirqd) among them",
        )
    if not broker.local:
        return replace(base, settings=wanted, reason="real time: the broker is not on this machine")
    if free:
        return replace(
            base,
            settings=replace(wanted, cpus=free),
            reason=f"real time: the broker runs on CPU {cpu_text(broker_cpus)}, "
            f"the workers on CPU {cpu_text(free)}",
        )
    if generator_cores <= SMALL_SHARE_CORES:
        return replace(
            base,
            settings=wanted,
            reason=f"real time beside a broker on every CPU: this cell's generator needs "
            f"~{generator_cores:.2f} core (at most {SMALL_SHARE_CORES:g})",
        )
    return _off(
        base,
        f"the broker may use every CPU and this cell's generator needs ~{generator_cores:.2f} "
        f"core (more than {SMALL_SHARE_CORES:g}): real time would take CPU from the broker "
        "(a resources profile gives the broker CPUs of its own)",
    )


def _off(base: RealtimeDecision, why: str) -> RealtimeDecision:
    if base.mode == "on":
        return replace(base, reason=why, refused=f"generator.realtime on: {why}")
    return replace(base, reason=f"auto: off, {why}")


# -- facts from this machine -----------------------------------------------------------


def probe_permission() -> str | None:
    """None when this process may use SCHED_FIFO; else why not. Switches the calling
    thread to SCHED_FIFO at the lowest priority and straight back."""
    if not hasattr(os, "sched_setscheduler"):
        return "this platform has no SCHED_FIFO"
    policy = os.sched_getscheduler(0)
    param = os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
    except OSError as exc:
        return f"{(exc.strerror or str(exc)).lower()}: needs root or CAP_SYS_NICE"
    os.sched_setscheduler(0, policy, param)
    return None


def read_throttle_share(proc: Path = Path("/proc/sys/kernel")) -> float | None:
    """``sched_rt_runtime_us / sched_rt_period_us`` (None when unlimited or unreadable)."""
    try:
        runtime = int((proc / "sched_rt_runtime_us").read_text())
        period = int((proc / "sched_rt_period_us").read_text())
    except (OSError, ValueError):
        return None
    if runtime < 0 or period <= 0:
        return None
    return round(runtime / period, 4)


def machine_facts() -> MachineFacts:
    """This machine's facts (probes the permission)."""
    return MachineFacts(
        cpus=tuple(sorted(os.sched_getaffinity(0))),
        permission=probe_permission(),
        throttle_share=read_throttle_share(),
        dma_latency=os.access(DMA_LATENCY_PATH, os.W_OK),
    )


def process_cpus(pids: Iterable[int]) -> tuple[int, ...]:
    """The union of the CPUs ``pids`` may run on (empty when none can be read)."""
    cpus: set[int] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            cpus |= os.sched_getaffinity(pid)
    return tuple(sorted(cpus))


# -- inside a worker -------------------------------------------------------------------


def current_policy() -> SchedPolicy:
    """The calling thread's policy as the kernel has it."""
    fifo = hasattr(os, "sched_getscheduler") and os.sched_getscheduler(0) == os.SCHED_FIFO
    return "fifo" if fifo else "other"


@dataclass
class Applied:
    """What a worker process applied to itself, and what failed."""

    policy: SchedPolicy = "other"
    errors: list[str] = field(default_factory=list)


_held: list[BinaryIO] = []
"""``/dev/cpu_dma_latency`` stays held while its file is open: for the process's life."""


def apply_realtime(settings: RealtimeSettings | None) -> Applied:
    """Apply ``settings`` to this process: CPUs, timer slack, the DMA-latency hold, then
    SCHED_FIFO (last, so the set-up itself runs at normal priority). Never raises."""
    applied = Applied()
    if settings is None:
        return applied
    if settings.cpus:
        try:
            os.sched_setaffinity(0, settings.cpus)
        except OSError as exc:
            applied.errors.append(f"CPU affinity {cpu_text(settings.cpus)}: {exc.strerror}")
    if settings.timer_slack_ns is not None:
        error = _set_timer_slack(settings.timer_slack_ns)
        if error:
            applied.errors.append(error)
    if settings.dma_latency_us is not None:
        error = hold_dma_latency(settings.dma_latency_us)
        if error:
            applied.errors.append(error)
    if settings.policy == "fifo":
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(settings.priority))
            applied.policy = "fifo"
        except OSError as exc:
            applied.errors.append(f"SCHED_FIFO: {exc.strerror}")
    return applied


def hold_dma_latency(value_us: int, path: Path = DMA_LATENCY_PATH) -> str | None:
    """Hold ``path`` at ``value_us`` until this process exits; None or the error."""
    try:
        handle = path.open("wb", buffering=0)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    try:
        handle.write(struct.pack("i", value_us))
    except OSError as exc:
        handle.close()  # a value the device refused holds nothing
        return f"{path}: {exc.strerror}"
    _held.append(handle)
    return None


def release_dma_latency() -> None:
    """Close the holds of this process (tests and the probe; a worker just exits)."""
    while _held:
        _held.pop().close()


def _set_timer_slack(slack_ns: int) -> str | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        if libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(slack_ns), 0, 0, 0) != 0:
            return f"timer slack: {os.strerror(ctypes.get_errno())}"
    except (OSError, AttributeError) as exc:
        return f"timer slack: {exc}"
    return None
