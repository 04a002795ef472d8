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
MAX_STALLED_FRACTION = 0.01
"""Stalls over ``MAX_LOOP_LAG_MS`` that add up to more than 1 % of a worker's time mark the
cell: then more than 1 % of its sends and receive stamps can have been held up, enough to move
a p99 (the same bound as late sends). Rarer stalls are a warning: one 73 ms stall in a
31-minute soak held up 0.004 % of it (docs/performance.md, "Soak")."""


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
    warnings += qos2_broker_faults(total)
    warnings += unmatched_deliveries(total)
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
        stalls = loop_stalls(w)
        if stalls is not None:
            limiting, text = stalls
            (reasons if limiting else warnings).append(text)
    return GeneratorVerdict(
        saturated=bool(reasons),
        late_threshold_ms=late_threshold_ms,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        workers=tuple(workers),
    )


def qos2_broker_faults(total: WorkerStats) -> list[str]:
    """Warnings for inbound QoS 2 messages the broker broke exactly-once on (MQTT 3.1.1
    section 4.3.3): the loss and the duplicates they explain, counted by the subscribers."""
    out = []
    if total.qos2_redelivered:
        out.append(
            f"the broker sent {total.qos2_redelivered} QoS 2 message(s) again after releasing "
            "them (PUBREL): delivered twice, exactly-once broken by the broker"
        )
    if total.qos2_id_reused:
        out.append(
            f"the broker sent {total.qos2_id_reused} QoS 2 message(s) on a packet id still "
            "awaiting PUBREL: dropped as MQTT 3.1.1 requires, lost by the broker's fault"
        )
    return out


def unmatched_deliveries(total: WorkerStats) -> list[str]:
    """A warning for deliveries that matched no subscription of the client that received
    them: the client dropped them, so they are in no record and count as lost."""
    n = total.unmatched_deliveries
    if not n:
        return []
    return [
        f"{n} deliveries matched no subscription (not in the records): their clients dropped "
        "them, so they count as lost (a broker delivering on a topic nobody subscribed to, "
        "or a resumed session's messages before its subscription was registered again)"
    ]


def loop_stalls(w: WorkerStats) -> tuple[bool, str] | None:
    """Whether ``w``'s event-loop stalls limited the cell, and the sentence that says so
    (None: no stall over ``MAX_LOOP_LAG_MS``). Stats without the probe's time (older
    manifests) judge the longest stall alone, as before."""
    lag_ms = w.max_loop_lag_ns / 1e6
    if lag_ms <= MAX_LOOP_LAG_MS:
        return None
    if not w.loop_probe_ns:
        return True, f"worker {w.worker} event loop stalled {lag_ms:.0f} ms"
    share = w.loop_stall_ns / w.loop_probe_ns
    times = "once" if w.loop_stalls == 1 else f"{w.loop_stalls} times"
    text = (
        f"worker {w.worker} event loop stalled {times} over {MAX_LOOP_LAG_MS:g} ms "
        f"(longest {lag_ms:.0f} ms, {_percent(share)} of its time)"
    )
    if share > MAX_STALLED_FRACTION:
        return True, text
    return False, f"{text}: too rare to move the percentiles"


def _percent(share: float) -> str:
    """``share`` as a percentage with enough digits to show a tiny one."""
    pct = 100 * share
    return f"{pct:.1f} %" if pct >= 0.1 else f"{pct:.2g} %"
