"""The generator polices itself (docs/architecture.md, measurement rule 5): was the generator
the bottleneck?"""

from __future__ import annotations

from mqbench.records.cell_entry import GeneratorVerdict
from mqbench.records.worker_stats import WorkerStats

MAX_LATE_FRACTION = 0.01
"""More than 1% of sends later than the lag threshold marks the cell."""
MAX_WORKER_CPU = 0.90
"""A worker busier than 90% of a core while publishing cannot keep its schedule reliably."""
MAX_LOOP_LAG_MS = 50.0
"""An event-loop stall this long delays sends and receive timestamps alike."""


def generator_verdict(
    workers: list[WorkerStats],
    *,
    late_threshold_ms: float,
    rt_throttle_share: float | None = None,
    expected_policy: str | None = None,
) -> GeneratorVerdict:
    """Combine worker stats into the manifest's ``generator`` verdict.

    ``reasons`` say why the generator, not the broker, limited the cell; ``warnings`` are
    facts worth seeing that do not invalidate it (e.g. sends skipped while disconnected).
    ``rt_throttle_share``: the kernel's real-time limit, named when a real-time worker was
    too busy; ``expected_policy``: the policy decided for the workers (a worker that ran
    another one is named).
    """
    reasons: list[str] = []
    warnings: list[str] = []
    total = WorkerStats.total(workers)
    if total.due and total.late / total.due > MAX_LATE_FRACTION:
        reasons.append(
            f"{100 * total.late / total.due:.1f}% of sends were over {late_threshold_ms:g} ms "
            f"late (max {total.max_send_lag_ns / 1e6:.1f} ms)"
        )
    refused = total.send_refused
    if total.send_failed > refused:
        warnings.append(
            f"{total.send_failed - refused} sends were due while their client was disconnected"
        )
    if refused:
        warnings.append(
            f"{refused} sends were refused: their connection's output buffer was full "
            "(the broker did not keep up; generator.buffer_memory bounds it)"
        )
    if total.qos_downgraded:
        granted = total.granted_qos_min
        warnings.append(
            f"the broker granted {total.qos_downgraded} subscription(s) QoS {granted}, lower "
            f"than asked: deliveries follow QoS {granted} semantics (QoS 1 may duplicate)"
        )
    if total.publish_qos2_acked_as_qos1:
        warnings.append(
            f"the broker answered {total.publish_qos2_acked_as_qos1} QoS 2 publish(es) with "
            "PUBACK: it treats QoS 2 as QoS 1 (at least once, duplicates possible)"
        )
    for w in workers:
        cpu = w.publish_cpu_fraction
        if cpu is not None and cpu > MAX_WORKER_CPU:
            reasons.append(f"worker {w.worker} used {100 * cpu:.0f}% of a core")
            if w.sched_policy == "fifo" and rt_throttle_share is not None:
                limit = f"{100 * rt_throttle_share:.0f}% of a core"
                reasons[-1] += (
                    f" under SCHED_FIFO: the kernel's real-time limit ({limit}) throttles it"
                )
        if expected_policy and w.sched_policy and w.sched_policy != expected_policy:
            warnings.append(
                f"worker {w.worker} ran {w.sched_policy}, not {expected_policy} as decided"
            )
        lag_ms = w.max_loop_lag_ns / 1e6
        if lag_ms > MAX_LOOP_LAG_MS:
            reasons.append(f"worker {w.worker} event loop stalled {lag_ms:.0f} ms")
    return GeneratorVerdict(
        saturated=bool(reasons),
        late_threshold_ms=late_threshold_ms,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        workers=tuple(workers),
    )
