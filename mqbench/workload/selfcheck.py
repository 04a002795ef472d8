"""The generator polices itself (DESIGN.md rule 5): was the generator the bottleneck?"""

from __future__ import annotations

from typing import Any

MAX_LATE_FRACTION = 0.01
"""More than 1% of sends later than the lag threshold marks the cell."""
MAX_WORKER_CPU = 0.90
"""A worker busier than 90% of a core while publishing cannot keep its schedule reliably."""
MAX_LOOP_LAG_MS = 50.0
"""An event-loop stall this long delays sends and receive timestamps alike."""


def generator_verdict(workers: list[dict[str, Any]], *, late_threshold_ms: float) -> dict[str, Any]:
    """Combine worker stats into ``{"saturated", "reasons", "warnings", "workers"}``.

    ``reasons`` say why the generator, not the broker, limited the cell; ``warnings`` are
    facts worth seeing that do not invalidate it (e.g. sends skipped while disconnected).
    """
    reasons: list[str] = []
    warnings: list[str] = []
    due = sum(int(w.get("due", 0)) for w in workers)
    late = sum(int(w.get("late", 0)) for w in workers)
    failed = sum(int(w.get("send_failed", 0)) for w in workers)
    if due and late / due > MAX_LATE_FRACTION:
        max_lag = max(int(w.get("max_send_lag_ns", 0)) for w in workers) / 1e6
        reasons.append(
            f"{100 * late / due:.1f}% of sends were over {late_threshold_ms:g} ms late "
            f"(max {max_lag:.1f} ms)"
        )
    refused = sum(int(w.get("send_refused") or 0) for w in workers)
    if failed > refused:
        warnings.append(f"{failed - refused} sends were due while their client was disconnected")
    if refused:
        warnings.append(
            f"{refused} sends were refused: their connection's output buffer was full "
            "(the broker did not keep up; generator.buffer_memory bounds it)"
        )
    downgraded = sum(int(w.get("qos_downgraded") or 0) for w in workers)
    if downgraded:
        granted = min(
            int(w["granted_qos_min"]) for w in workers if w.get("granted_qos_min") is not None
        )
        warnings.append(
            f"the broker granted {downgraded} subscription(s) QoS {granted}, lower than asked: "
            f"deliveries follow QoS {granted} semantics (QoS 1 may duplicate)"
        )
    puback = sum(int(w.get("publish_qos2_acked_as_qos1") or 0) for w in workers)
    if puback:
        warnings.append(
            f"the broker answered {puback} QoS 2 publish(es) with PUBACK: it treats "
            "QoS 2 as QoS 1 (at least once, duplicates possible)"
        )
    for w in workers:
        cpu = w.get("publish_cpu_fraction")
        if cpu is not None and cpu > MAX_WORKER_CPU:
            reasons.append(f"worker {w.get('worker')} used {100 * cpu:.0f}% of a core")
        lag_ms = int(w.get("max_loop_lag_ns", 0)) / 1e6
        if lag_ms > MAX_LOOP_LAG_MS:
            reasons.append(f"worker {w.get('worker')} event loop stalled {lag_ms:.0f} ms")
    return {
        "saturated": bool(reasons),
        "late_threshold_ms": late_threshold_ms,
        "reasons": reasons,
        "warnings": warnings,
        "workers": workers,
    }
