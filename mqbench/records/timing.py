"""How a cell's generator was timed, as the manifest keeps it (``cells[].timing``).

A cell records which scheduling policy its worker processes ran under (``generator.realtime``,
docs/performance.md), why, on which CPUs the workers and the broker ran, which receive
stamp its deliveries carry, and the machine's wake-up floor under that policy (from
``mqbench calibrate``, docs/calibration.md): the self-check judges send lag against that
floor. Versioned on its own (``TIMING_VERSION``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

TIMING_VERSION: Final = 2
"""2: ``wakeup_during`` and ``wakeup_during_reason`` (version 1 has neither)."""

SchedPolicy = Literal["other", "fifo"]
"""``other``: the kernel's normal time-sharing (SCHED_OTHER); ``fifo``: SCHED_FIFO."""
RealtimeMode = Literal["auto", "on", "off"]
ReceiveStamp = Literal["user", "kernel", "mixed"]
"""``user``: the worker's clock read when the read reached the client (after the wake-up);
``kernel``: the socket's kernel receive time (SO_TIMESTAMPNS); ``mixed``: some clients'
reads one way, some the other (e.g. a TLS connection among plain ones)."""


@dataclass(frozen=True)
class WakeupFloor:
    """The machine's wake-up latency under one policy: how late a sleeping worker-like
    process runs after its timer expired (``mqbench calibrate``)."""

    policy: str
    """The probe's policy name (``other``, ``fifo+dma``, ... see docs/calibration.md)."""
    p50_us: float
    p99_us: float
    p999_us: float
    max_us: float
    samples: int
    measured_utc: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return {
            "policy": self.policy,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "p999_us": self.p999_us,
            "max_us": self.max_us,
            "samples": self.samples,
            "measured_utc": self.measured_utc,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WakeupFloor:
        """Read the manifest form (``ValueError``/``KeyError`` naming the key)."""
        return cls(
            policy=str(data["policy"]),
            p50_us=float(data["p50_us"]),
            p99_us=float(data["p99_us"]),
            p999_us=float(data["p999_us"]),
            max_us=float(data["max_us"]),
            samples=int(data["samples"]),
            measured_utc=str(data.get("measured_utc", "")),
        )


@dataclass(frozen=True)
class TimingEntry:
    """A cell's timing facts (``cells[].timing`` in ``manifest.json``)."""

    mode: RealtimeMode
    """What the scenario asked for (``generator.realtime``)."""
    policy: SchedPolicy
    """What the workers ran under."""
    reason: str
    """Why: real time granted, or why not (``auto`` falling back to off says so here)."""
    priority: int | None = None
    """The SCHED_FIFO priority (1 = the lowest real-time priority)."""
    dma_latency_us: int | None = None
    """``/dev/cpu_dma_latency`` held at this value for the cell (None: not held)."""
    timer_slack_ns: int | None = None
    """The workers' timer slack (None: the kernel's default, 50 µs)."""
    worker_cpus: tuple[int, ...] = ()
    """CPUs the workers were pinned to (empty: not pinned)."""
    broker_cpus: tuple[int, ...] = ()
    """CPUs the broker's processes may run on, read from the kernel (empty: unknown)."""
    generator_cores: float | None = None
    """The estimate of the generator's CPU need the decision used (cores)."""
    receive_stamp: ReceiveStamp = "user"
    wakeup_floor: WakeupFloor | None = None
    """The calibrated wake-up floor under ``policy`` (None: no calibration)."""
    wakeup_during: WakeupFloor | None = None
    """The wake-up latency a probe one real-time priority above the workers, on their CPUs,
    measured during the cell's window (``workload.wakeup_probe``; None: not measured)."""
    wakeup_during_reason: str | None = None
    """Why ``wakeup_during`` is missing (None when it was measured, or not attempted)."""
    throttle_share: float | None = None
    """The kernel's real-time limit as a share of a core (``sched_rt_runtime_us`` /
    ``sched_rt_period_us``); None when it is off or not real time."""
    version: int = field(default=TIMING_VERSION)

    @property
    def machine_floor(self) -> WakeupFloor | None:
        """The machine's wake-up latency the latency verdict allows for: at each percentile
        the larger of the calibrated floor and the one measured during the cell (None when
        neither was measured)."""
        return combined_floor(self.wakeup_floor, self.wakeup_during)

    @property
    def realtime(self) -> bool:
        """True when the workers ran SCHED_FIFO."""
        return self.policy == "fifo"

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return {
            "version": self.version,
            "mode": self.mode,
            "policy": self.policy,
            "reason": self.reason,
            "priority": self.priority,
            "dma_latency_us": self.dma_latency_us,
            "timer_slack_ns": self.timer_slack_ns,
            "worker_cpus": list(self.worker_cpus),
            "broker_cpus": list(self.broker_cpus),
            "generator_cores": self.generator_cores,
            "receive_stamp": self.receive_stamp,
            "wakeup_floor": None if self.wakeup_floor is None else self.wakeup_floor.to_dict(),
            "wakeup_during": None if self.wakeup_during is None else self.wakeup_during.to_dict(),
            "wakeup_during_reason": self.wakeup_during_reason,
            "throttle_share": self.throttle_share,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimingEntry:
        """Read the manifest form (``ValueError``/``KeyError`` naming the key)."""
        mode, policy = data["mode"], data["policy"]
        stamp = data.get("receive_stamp", "user")
        for key, value, allowed in (
            ("mode", mode, get_args(RealtimeMode)),
            ("policy", policy, get_args(SchedPolicy)),
            ("receive_stamp", stamp, get_args(ReceiveStamp)),
        ):
            if value not in allowed:
                raise ValueError(f"timing.{key} {value!r} is not one of {', '.join(allowed)}")
        floor, during = data.get("wakeup_floor"), data.get("wakeup_during")
        return cls(
            mode=mode,
            policy=policy,
            reason=str(data.get("reason", "")),
            priority=_opt_int(data.get("priority")),
            dma_latency_us=_opt_int(data.get("dma_latency_us")),
            timer_slack_ns=_opt_int(data.get("timer_slack_ns")),
            worker_cpus=tuple(int(c) for c in data.get("worker_cpus") or ()),
            broker_cpus=tuple(int(c) for c in data.get("broker_cpus") or ()),
            generator_cores=_opt_float(data.get("generator_cores")),
            receive_stamp=stamp,
            wakeup_floor=None if floor is None else WakeupFloor.from_dict(floor),
            wakeup_during=None if during is None else WakeupFloor.from_dict(during),
            wakeup_during_reason=_opt_str(data.get("wakeup_during_reason")),
            throttle_share=_opt_float(data.get("throttle_share")),
            version=int(data.get("version", TIMING_VERSION)),
        )


def combined_floor(a: WakeupFloor | None, b: WakeupFloor | None) -> WakeupFloor | None:
    """The larger of two floors at each percentile (the other when one is None); its
    ``policy`` names both, ``samples`` is the larger of the two counts."""
    if a is None or b is None:
        return a or b
    return WakeupFloor(
        policy=a.policy if a.policy == b.policy else f"{a.policy} | {b.policy}",
        p50_us=max(a.p50_us, b.p50_us),
        p99_us=max(a.p99_us, b.p99_us),
        p999_us=max(a.p999_us, b.p999_us),
        max_us=max(a.max_us, b.max_us),
        samples=max(a.samples, b.samples),
        measured_utc=max(a.measured_utc, b.measured_utc),
    )


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
