"""What a worker process reports about itself: ``WorkerStats``, summed over workers with ``plus``.

A worker sends its cumulative stats to the parent over its pipe (a few times a second and
when it finishes); the coordinator sums them for the live progress and the drain, the
generator's self-check judges them, and the manifest stores each worker's last stats under
``cells[].generator.workers`` (docs/results.md). Every field says how it combines across
workers (``merge`` in its metadata), so a new counter is one field here (docs/extending.md,
"Add a metric").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Merge = Literal["sum", "max", "min", "same", "first"]
"""How ``plus`` combines a field: ``sum``; ``max``/``min`` over the values that are set;
``same`` keeps a value both sides agree on (else None); ``first`` keeps the first set one."""


def _f(default: Any, merge: Merge) -> Any:
    return field(default=default, metadata={"merge": merge})


@dataclass(frozen=True)
class WorkerStats:
    """Cumulative counters of one worker process, or their combination over several.

    Field order is the key order of the manifest's ``generator.workers[]`` objects.
    """

    worker: int | None = _f(None, "same")
    """Worker number within the cell (None in a sum over several workers)."""
    pid: int | None = _f(None, "same")
    sent: int = _f(0, "sum")
    """Messages handed to a connected client (``SEND_OK`` records)."""
    send_failed: int = _f(0, "sum")
    """Sends that were due while the client could not take them (``SEND_FAILED``)."""
    send_refused: int = _f(0, "sum")
    """Of ``send_failed``: refused because the client's output buffer was full."""
    acked: int = _f(0, "sum")
    """QoS >= 1 publishes acknowledged by the broker (``SEND_ACK``)."""
    received: int = _f(0, "sum")
    """Delivery records written."""
    role: str | None = _f(None, "same")
    """``both``, ``publishers`` or ``subscribers`` (the process layout)."""
    records_written: int = _f(0, "sum")
    due: int = _f(0, "sum")
    """Sends whose intended time has come."""
    late: int = _f(0, "sum")
    """Sends later than the lag threshold (``generator.max_send_lag_ms``)."""
    max_send_lag_ns: int = _f(0, "max")
    timer: str | None = _f(None, "same")
    """The publish loop's timer (``timerfd`` or ``loop``)."""
    timer_wakeups: int = _f(0, "sum")
    spin_s: float = _f(0.0, "sum")
    """CPU seconds spent busy-waiting for due times (not counted as load)."""
    wake_margin_us: float | None = _f(None, "max")
    publish_yields: int = _f(0, "sum")
    max_loop_lag_ns: int = _f(0, "max")
    """Longest event-loop stall seen by the lag probe."""
    loop_stalls: int = _f(0, "sum")
    """Probe wake-ups later than the stall limit (``selfcheck.MAX_LOOP_LAG_MS``)."""
    loop_stall_ns: int = _f(0, "sum")
    """Their lateness added up: the time the event loop was stalled."""
    loop_probe_ns: int = _f(0, "sum")
    """How long the lag probe watched the loop (the stalled share's denominator)."""
    connected: int = _f(0, "sum")
    """Clients connected at the time of the report."""
    connect_failed: int = _f(0, "sum")
    first_connect_error: str | None = _f(None, "first")
    connected_ns: int = _f(0, "max")
    """When the last client connected (wall clock, ns)."""
    disconnects: int = _f(0, "sum")
    reconnects: int = _f(0, "sum")
    qos_downgraded: int = _f(0, "sum")
    """Subscriptions the broker granted at a lower QoS than asked."""
    publish_qos2_acked_as_qos1: int = _f(0, "sum")
    qos2_id_reused: int = _f(0, "sum")
    """Inbound QoS 2 messages dropped: a different message on a packet id still awaiting
    PUBREL (the broker reused it; ``ClientStats``)."""
    qos2_redelivered: int = _f(0, "sum")
    """Inbound QoS 2 messages the broker sent again after releasing them (delivered twice)."""
    duplicate_deliveries: int = _f(0, "sum")
    """Deliveries of a message the subscriber had received before (a broker's second
    delivery, any QoS): in the records and in ``received``, not new arrivals for the drain
    (0 in older manifests and on the compiled core, which receives QoS 0 only)."""
    unmatched_deliveries: int = _f(0, "sum")
    """Deliveries a client received that matched none of its subscriptions: dropped by the
    client, so never in the records (``ClientStats.unrouted``; 0 in older manifests)."""
    granted_qos_min: int | None = _f(None, "min")
    outage_total_s: float = _f(0.0, "sum")
    outage_max_s: float = _f(0.0, "max")
    pending_write_bytes: int = _f(0, "sum")
    cpu_s: float = _f(0.0, "sum")
    """Process CPU time (user + system)."""
    publish_cpu_fraction: float | None = _f(None, "max")
    """Share of a core the worker was busy while publishing, busy-waiting excluded."""
    kernel_stamped_reads: int = _f(0, "sum")
    """Client reads stamped with the kernel's receive time (``SO_TIMESTAMPNS``)."""
    user_stamped_reads: int = _f(0, "sum")
    """Client reads stamped with the worker's clock after its wake-up."""
    sched_policy: str | None = _f(None, "same")
    """The scheduling policy the worker ran under: ``other`` or ``fifo`` (real time)."""
    t_ns: int = _f(0, "max")
    """When the stats were taken (wall clock, ns)."""

    @property
    def receive_stamp(self) -> str:
        """Which stamp the deliveries carry: ``kernel``, ``user`` or ``mixed``."""
        if self.kernel_stamped_reads and self.user_stamped_reads:
            return "mixed"
        return "kernel" if self.kernel_stamped_reads else "user"

    def plus(self, other: WorkerStats) -> WorkerStats:
        """These stats combined with ``other`` field by field (see ``Merge``)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            values[f.name] = _merge(f.metadata["merge"], a, b)
        return WorkerStats(**values)

    @classmethod
    def total(cls, stats: Iterable[WorkerStats]) -> WorkerStats:
        """All ``stats`` combined (``WorkerStats()`` when there are none)."""
        out: WorkerStats | None = None
        for item in stats:
            out = item if out is None else out.plus(item)
        return out if out is not None else cls()

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: one JSON key per field, in field order."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerStats:
        """Read the manifest form; missing keys take their defaults, unknown keys are ignored.

        Raises ``ValueError`` naming the key when a value has the wrong type.
        """
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data or data[f.name] is None:
                continue
            raw = data[f.name]
            kind = _KINDS[f.name]
            try:
                if kind is str:
                    values[f.name] = str(raw)
                elif isinstance(raw, bool) or not isinstance(raw, int | float | str):
                    raise ValueError(raw)
                else:
                    values[f.name] = kind(raw)
            except (TypeError, ValueError):
                raise ValueError(f"worker stats: {f.name} {raw!r} is not a number") from None
        return cls(**values)


def _merge(how: Merge, a: Any, b: Any) -> Any:
    if how == "sum":
        return a + b
    if how == "same":
        return a if a == b else None
    if how == "first":
        return a if a is not None else b
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b) if how == "max" else min(a, b)


def _kind(annotation: str) -> type:
    if annotation.startswith("str"):
        return str
    if annotation.startswith("float"):
        return float
    return int


_KINDS: dict[str, type] = {f.name: _kind(str(f.type)) for f in dataclasses.fields(WorkerStats)}
"""The scalar type of each field (from its annotation: ``int``, ``float`` or ``str``)."""
