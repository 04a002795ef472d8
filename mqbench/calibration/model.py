"""The calibration file: typed, versioned, and keyed by the facts that make it valid.

A calibration holds, per protocol, the tool's own latency *floor* (the lean client through
a broker-less relay), per broker target the same figures at the same low rate, and per
client the generator's *ceiling* (msg/s one worker process keeps within bounds). It is
valid only on the machine and mqbench/Python version that measured it (:class:`HostKey`);
:func:`stale_reasons` says why another one is not.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from mqbench import __version__

CALIBRATION_SCHEMA_VERSION: Final = 1
"""Version of the calibration file layout; another version is reported, never guessed at."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostKey(_Model):
    """The facts a calibration depends on; any difference makes it stale."""

    hostname: str
    cpu_model: str
    cpu_count: int
    mqbench_version: str
    python: str


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what ``platform`` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "Model", "cpu model"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def current_host() -> HostKey:
    """The key of this machine and installation."""
    return HostKey(
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count() or 1,
        mqbench_version=__version__,
        python=platform.python_version(),
    )


def stale_reasons(stored: HostKey, current: HostKey) -> list[str]:
    """Why a calibration measured under ``stored`` does not apply under ``current``."""
    reasons = []
    for name in HostKey.model_fields:
        then, now = getattr(stored, name), getattr(current, name)
        if then != now:
            reasons.append(f"{name} {then!r} != {now!r}")
    return reasons


class CellFigures(_Model):
    """What one calibration cell measured (latencies in µs, from the numpy analysis)."""

    offered_msg_s: float
    pairs: int
    rate_per_publisher: float
    payload_bytes: int
    window_s: float
    sent: int
    received: int
    lost: int
    latency_p50_us: float | None
    """From the intended send time (the headline)."""
    latency_p99_us: float | None
    from_send_p50_us: float | None
    """From the actual send time."""
    from_send_p99_us: float | None
    send_lag_p50_us: float | None
    send_lag_p99_us: float | None
    generator_cpu_cores: float | None
    """Mean CPU of the generator's worker processes in the window (resources.csv)."""
    worker_cpu_fraction: float | None
    """Highest share of a core a worker used while publishing (the self-check's figure)."""
    peer_cpu_cores: float | None
    """Mean CPU of the broker or relay process in the window."""
    generator_saturated: bool
    generator_reason: str | None = None


class RelayHop(_Model):
    """The relay's own share: how long it held each read that it forwarded (µs)."""

    reads: int
    p50_us: float
    p99_us: float
    max_us: float


class FloorResult(_Model):
    """The tool's own latency floor for one protocol (None figures: not measurable)."""

    protocol: str
    client: str
    path: str
    """How the broker-less path works (e.g. "relay process" or "zenoh peer to peer")."""
    measured_utc: str
    figures: CellFigures | None = None
    relay_hop: RelayHop | None = None
    """In-process residence in the relay (None when nothing is relayed, e.g. zenoh)."""
    reason: str | None = None
    """Why there are no figures (the path is unavailable, the cell failed)."""


class BrokerResult(_Model):
    """The same low-rate cell against one broker target."""

    target: str
    protocol: str
    runtime: str
    broker_version: str | None = None
    measured_utc: str
    figures: CellFigures | None = None
    reason: str | None = None


class CeilingBounds(_Model):
    """What "within bounds" means for a ceiling step."""

    lag_p99_us: float = 1000.0
    worker_cpu_fraction: float = 0.90
    relay_cpu_cores: float = 0.90
    """A failing step whose relay used this much CPU is charged to the relay, not the tool."""


class CeilingStep(_Model):
    """One offered rate tried by the ceiling search."""

    offered_msg_s: float
    passed: bool
    reasons: list[str] = Field(default_factory=list)
    figures: CellFigures | None = None


LimitedBy = Literal["generator", "relay", "max_rate", "min_rate", "steps", "budget", "failed"]


class CeilingResult(_Model):
    """The highest offered msg/s one worker process keeps within ``bounds``."""

    client: str
    protocol: str
    workers: int = 1
    pairs: int
    payload_bytes: int
    msg_s_per_worker: float | None
    """None when even the lowest step failed (or nothing could be measured)."""
    limited_by: LimitedBy
    """What ended the search: the first failing step of the generator, the relay's own
    CPU, the top of the ladder, the bottom, or the step/time budget."""
    bounds: CeilingBounds
    measured_utc: str
    steps: list[CeilingStep] = Field(default_factory=list)
    reason: str | None = None


class WakeupFigures(_Model):
    """Wake-up lateness percentiles of one policy (µs), from the floor probe."""

    p50_us: float
    p99_us: float
    p999_us: float
    max_us: float
    samples: int


class WakeupResult(_Model):
    """The machine's wake-up floor under one scheduling policy (``calibration/wakeup.py``)."""

    policy: str
    """``other``, ``other+slack``, ``other+dma``, ``fifo``, ``fifo+dma``, ``fifo+dma+slack``."""
    interval_us: int
    measured_utc: str
    figures: WakeupFigures | None
    reason: str | None = None
    """Why it was not measured (e.g. no permission for SCHED_FIFO)."""


class Settings(_Model):
    """How the calibration cells were run."""

    pairs: int
    rate_per_publisher: float
    payload_bytes: int
    warmup_s: float
    duration_s: float
    drain_s: float
    ceiling_pairs: int
    ceiling_start_msg_s: float
    ceiling_max_msg_s: float
    ceiling_max_steps: int
    ceiling_budget_s: float


class Calibration(_Model):
    """The whole calibration file (see docs/calibration.md)."""

    schema_version: Literal[1] = CALIBRATION_SCHEMA_VERSION
    created_utc: str
    updated_utc: str
    host: HostKey
    load_average: list[float]
    """1/5/15-minute load average when the last calibration started (noise indicator)."""
    settings: Settings
    floors: dict[str, FloorResult] = Field(default_factory=dict)
    """By protocol."""
    brokers: dict[str, BrokerResult] = Field(default_factory=dict)
    """By target."""
    ceilings: dict[str, CeilingResult] = Field(default_factory=dict)
    """By client name (the lean clients are named after their protocol)."""
    wakeup: dict[str, WakeupResult] = Field(default_factory=dict)
    """The machine's wake-up floor, by policy name (empty in files older than the probe)."""

    def merged_into(self, older: Calibration | None) -> Calibration:
        """This calibration plus the entries of ``older`` it did not re-measure.

        ``older`` must be valid here (same host key and settings); ``created_utc`` is kept
        from it.
        """
        if older is None or older.host != self.host or older.settings != self.settings:
            return self
        return self.model_copy(
            update={
                "created_utc": older.created_utc,
                "floors": {**older.floors, **self.floors},
                "brokers": {**older.brokers, **self.brokers},
                "ceilings": {**older.ceilings, **self.ceilings},
                "wakeup": {**older.wakeup, **self.wakeup},
            }
        )
