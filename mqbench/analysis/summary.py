"""The versioned per-cell summary: ``summary.json`` per cell, ``summary.parquet`` per run.

Percentiles are nearest-rank: ``pq`` is the smallest value ``v`` such that at least a
fraction ``q`` of the values are ``<= v`` (rank ``ceil(q * N)``, computed with integers).
All latency statistics are computed from values floored to 100 ns (the resolution of the
``lat`` field); percentiles commute with flooring, so each reported percentile is the exact
percentile floored to 100 ns. Mean and (population) standard deviation use the same values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from mqbench.analysis.aggregate import CellAggregate
from mqbench.analysis.kernel import Hist, approx_rel_error
from mqbench.analysis.latency_check import judge_latency
from mqbench.analysis.plan import CellPlan
from mqbench.analysis.resources import resource_stats
from mqbench.analysis.verdict import (
    InvalidReason,
    broker_exit_reason,
    generator_reason,
    interrupted_reason,
    truncation_reason,
    unsent_reason,
)
from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import GeneratorVerdict
from mqbench.records.cell_params import CellParams
from mqbench.records.worker_stats import WorkerStats

SUMMARY_SCHEMA_VERSION: Final = 6
READABLE_SUMMARY_VERSIONS: Final = (1, 2, 3, 4, 5, 6)
"""Versions :meth:`CellSummary.from_dict` reads; older ones lack the fields added later."""
SUMMARY_JSON: Final = "summary.json"
SUMMARY_PARQUET: Final = "summary.parquet"


def nearest_rank(n: int, num: int, den: int) -> int:
    """1-based nearest rank of quantile ``num/den`` among ``n`` values: ``ceil(n*num/den)``."""
    return max(1, -(-n * num // den))


@dataclass(frozen=True)
class LatencyStats:
    """Distribution of a latency-like quantity, in microseconds."""

    count: int
    min_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    p999_us: float
    max_us: float
    mean_us: float
    stddev_us: float

    @classmethod
    def from_hist(cls, hist: Hist, unit_ns: int = 100) -> LatencyStats | None:
        """Exact statistics from a histogram of integer values in ``unit_ns`` units."""
        values, counts = hist
        if values.size == 0:
            return None
        cum = np.cumsum(counts)
        n = int(cum[-1])
        scale = unit_ns / 1000.0

        def pct(num: int, den: int) -> float:
            idx = int(np.searchsorted(cum, nearest_rank(n, num, den), side="left"))
            return float(values[idx]) * scale

        vmax = int(np.abs(values).max())
        if vmax * n < 2**62:
            total = int(np.dot(values, counts))
        else:
            total = sum(int(v) * int(c) for v, c in zip(values, counts, strict=True))
        mean = total / n
        dev = values.astype(np.float64) - mean
        var = float(np.dot(counts.astype(np.float64), dev * dev)) / n
        return cls(
            count=n,
            min_us=float(values[0]) * scale,
            p50_us=pct(50, 100),
            p90_us=pct(90, 100),
            p95_us=pct(95, 100),
            p99_us=pct(99, 100),
            p999_us=pct(999, 1000),
            max_us=float(values[-1]) * scale,
            mean_us=mean * scale,
            stddev_us=math.sqrt(var) * scale,
        )


_STATS_GROUPS: Final = ("latency", "latency_from_send", "send_lag", "ack_latency")


@dataclass(frozen=True)
class CellSummary:
    """Results of one cell (schema ``SUMMARY_SCHEMA_VERSION``); see docs/results.md."""

    schema_version: int
    cell_id: str
    index: int
    repeat: int
    status: str
    params: dict[str, Any]
    window_start_ns: int
    window_end_ns: int
    window_s: float
    window_clipped: bool
    offered_rate: float | None
    scheduled: int
    sent: int
    send_failed: int
    send_rate: float | None
    expected: int
    received: int
    duplicates: int
    lost: int
    loss_pct: float | None
    reordered: int
    unrouted: int
    delivery_records: int
    send_records: int
    deliveries_in_window: int
    throughput_msg_s: float | None
    latency: LatencyStats | None
    latency_from_send: LatencyStats | None
    send_lag: LatencyStats | None
    ack_latency: LatencyStats | None
    broker_cpu_cores_mean: float | None
    broker_cpu_cores_max: float | None
    broker_rss_mb_mean: float | None
    broker_rss_mb_max: float | None
    generator_cpu_cores_mean: float | None
    generator_cpu_cores_max: float | None
    generator_rss_mb_mean: float | None
    generator_rss_mb_max: float | None
    generator_saturated: bool
    generator_reason: str | None
    valid: bool
    # Added in schema version 2 (defaults are what a version-1 summary implies).
    window_source: str = "manifest"
    deliveries_per_s: list[int] = dataclasses.field(default_factory=list)
    throughput_min_msg_s: float | None = None
    throughput_max_msg_s: float | None = None
    approx_rel_error: float | None = None
    # Added in schema version 3 (None: not known for an older summary).
    unsent: int | None = None
    expected_scheduled: int | None = None
    loss_sent_pct: float | None = None
    loss_unsent_pct: float | None = None
    invalid_reasons: list[InvalidReason] = dataclasses.field(default_factory=list)
    record_issues: list[str] = dataclasses.field(default_factory=list)
    latency_verdict: str = "n/a"
    latency_reason: str | None = None
    # Added in schema version 4.
    latency_error_ms: float | None = None
    """Clock error bound (ms) on every latency of the cell when routes crossed the clocks
    of two load tasks (distributed load); None when every latency used one clock."""
    # Added in schema version 5 (None / False: not known for an older summary).
    last_delivery_s: float | None = None
    """Seconds from the window's end to the last delivery of any record (None: none)."""
    backlog_at_drain_end: bool = False
    """Deliveries were still arriving at the end of the drain while messages were missing:
    the broker was behind, so part of the loss is messages not yet delivered, not dropped."""
    # Added in schema version 6 (0: an older summary, whose manifest may not have counted).
    unmatched_deliveries: int = 0
    """Deliveries that matched no subscription of the client that received them: dropped
    by the client, so in no record, and counted as lost (the workers' ``ClientStats.unrouted``,
    manifest ``generator.workers``); unlike ``unrouted``, which counts records on no route."""

    @property
    def latency_generator_bound(self) -> bool:
        """True when send lag, not the broker, shaped the latency (``latency_check``)."""
        return self.latency_verdict == "generator-bound"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready nested dict (the content of ``summary.json``)."""
        data = dataclasses.asdict(self)
        data["invalid_reasons"] = [r.to_dict() for r in self.invalid_reasons]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellSummary:
        """Inverse of :meth:`to_dict`; reads versions 1 to 6 (AnalysisError otherwise).

        An older summary gets the defaults of the fields added since and the current
        ``schema_version``; an invalid one without typed reasons gets its generator reason;
        one older than version 3 has ``latency_verdict`` ``n/a`` (it was never judged).
        """
        if data.get("schema_version") not in READABLE_SUMMARY_VERSIONS:
            raise AnalysisError(
                f"summary schema version {data.get('schema_version')!r}; this mqbench reads "
                f"versions {', '.join(map(str, READABLE_SUMMARY_VERSIONS))} "
                "(re-run `mqbench analyze` on the result folder)"
            )
        fields = dict(data)
        fields["schema_version"] = SUMMARY_SCHEMA_VERSION
        fields["deliveries_per_s"] = [int(v) for v in fields.get("deliveries_per_s") or []]
        reasons = fields.get("invalid_reasons")
        if reasons is None and not fields.get("valid", True):
            fields["invalid_reasons"] = generator_reason(
                [str(fields.get("generator_reason") or "generator saturated")]
            )
        else:
            try:
                fields["invalid_reasons"] = [InvalidReason.from_dict(r) for r in reasons or []]
            except (KeyError, TypeError, ValueError) as exc:
                raise AnalysisError(f"malformed invalid_reasons ({exc})") from None
        for group in _STATS_GROUPS:
            if fields.get(group) is not None:
                fields[group] = LatencyStats(**fields[group])
        return cls(**fields)

    @property
    def cell_params(self) -> CellParams:
        """The parameters read by name with their types."""
        return CellParams(self.params, self.cell_id)

    def flat_row(self) -> dict[str, Any]:
        """One flat row for ``summary.parquet``: stats as ``<group>_<stat>``, params as
        ``param_<name>`` (non-scalar params as JSON text)."""
        row: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "params":
                continue
            if f.name in _STATS_GROUPS:
                for sf in dataclasses.fields(LatencyStats):
                    row[f"{f.name}_{sf.name}"] = None if value is None else getattr(value, sf.name)
                continue
            if f.name == "invalid_reasons":
                row["invalid_kinds"] = [r.kind.value for r in self.invalid_reasons]
                row["invalid_reason"] = "; ".join(r.message for r in self.invalid_reasons) or None
                continue
            row[f.name] = value
        for key, value in sorted(self.params.items()):
            scalar = value is None or isinstance(value, str | int | float | bool)
            row[f"param_{key}"] = value if scalar else json.dumps(value, sort_keys=True)
        return row


MIN_ACHIEVED_FRACTION: Final = 0.99
"""Fewer handed-out sends than this fraction of the schedule marks the generator saturated."""
DEFAULT_LATE_THRESHOLD_MS: Final = 5.0


def generator_reasons(
    generator: GeneratorVerdict, scheduled: int, handed_out: int, send_lag: LatencyStats | None
) -> list[str]:
    """Why the generator, not the broker, limited the cell (empty when it did not).

    Combines what the workers observed (manifest ``generator.reasons``) with what the
    records show exactly: sends handed out vs scheduled in the window, and send-lag p99.
    """
    reasons = list(generator.reasons)
    if generator.saturated and not reasons:
        reasons.append("marked saturated by the generator")
    if scheduled and handed_out / scheduled < MIN_ACHIEVED_FRACTION:
        reasons.append(
            f"handed out {handed_out} of {scheduled} scheduled sends "
            f"({100 * handed_out / scheduled:.1f}%)"
        )
    threshold_ms = generator.late_threshold_ms or DEFAULT_LATE_THRESHOLD_MS
    if send_lag is not None and send_lag.p99_us / 1000 > threshold_ms:
        reasons.append(f"send lag p99 {send_lag.p99_us / 1000:.1f} ms > {threshold_ms:g} ms")
    return reasons


def cell_invalid_reasons(
    plan: CellPlan, agg: CellAggregate, generator: list[str], unsent: int
) -> list[InvalidReason]:
    """Every reason the cell's numbers cannot be trusted (docs/results.md, "Validity")."""
    refused = WorkerStats.total(plan.generator.workers).send_refused
    return [
        *generator_reason(generator),
        *broker_exit_reason(plan.broker_exit, plan.win_start),
        *unsent_reason(
            plan.scheduled, unsent, agg.send_failed, refused, plan.send_failures_expected
        ),
        *truncation_reason(plan.record_checks, plan.record_shortfalls),
        *interrupted_reason(plan.status, plan.error, plan.window_ns / 1e9, plan.planned_s),
    ]


def _pct(part: int, whole: int) -> float | None:
    return 100.0 * part / whole if whole else None


BACKLOG_TAIL_NS: Final = 1_000_000_000
"""A delivery in the drain's last second (or its last third, if shorter) means backlog."""


def backlog_at_drain_end(plan: CellPlan, last_recv_ns: int, missing: int) -> bool:
    """True when messages are missing and deliveries still arrived as the drain ended."""
    if missing <= 0 or last_recv_ns <= 0 or plan.window_clipped:
        return False
    drain_end = (
        plan.drain_end_ns if plan.drain_end_ns is not None else (plan.win_end + plan.drain_ns)
    )
    tail = min(BACKLOG_TAIL_NS, (drain_end - plan.win_end) // 3)
    return last_recv_ns >= drain_end - tail


def build_summary(plan: CellPlan, agg: CellAggregate) -> CellSummary:
    """Turn exact aggregates into the summary (shared by the Spark and numpy engines)."""
    window_s = plan.window_ns / 1e9
    received = agg.distinct
    lost = agg.expected - received
    unsent = max(0, plan.scheduled - agg.sent)
    scheduled_deliveries = max(plan.scheduled_deliveries, agg.expected)
    unsent_deliveries = scheduled_deliveries - agg.expected
    res = resource_stats(plan.folder / "resources.csv", plan.win_start, plan.win_end)
    send_lag = LatencyStats.from_hist(agg.hist_lag)
    latency = LatencyStats.from_hist(agg.hist_intended)
    latency_verdict = judge_latency(latency, send_lag, plan.wakeup_floor)
    reasons = generator_reasons(
        plan.generator, plan.scheduled, agg.sent + agg.send_failed, send_lag
    )
    saturated = bool(reasons)
    reason = "; ".join(reasons)
    invalid = cell_invalid_reasons(plan, agg, reasons, unsent)
    full = full_second_range(plan, agg.per_second)
    return CellSummary(
        schema_version=SUMMARY_SCHEMA_VERSION,
        cell_id=plan.cell_id,
        index=plan.index,
        repeat=plan.repeat,
        status=plan.status,
        params=dict(plan.params.data),
        window_start_ns=plan.win_start,
        window_end_ns=plan.win_end,
        window_s=window_s,
        window_clipped=plan.window_clipped,
        offered_rate=plan.offered_rate,
        scheduled=plan.scheduled,
        sent=agg.sent,
        send_failed=agg.send_failed,
        send_rate=agg.sent / window_s if window_s > 0 else None,
        expected=agg.expected,
        received=received,
        duplicates=agg.routed - received,
        lost=lost,
        loss_pct=_pct(scheduled_deliveries - received, scheduled_deliveries),
        reordered=agg.reordered,
        unrouted=agg.unrouted,
        delivery_records=agg.delivery_records,
        send_records=agg.send_records,
        deliveries_in_window=agg.recv_in_window,
        throughput_msg_s=agg.recv_in_window / window_s if window_s > 0 else None,
        latency=latency,
        latency_from_send=LatencyStats.from_hist(agg.hist_sent),
        send_lag=send_lag,
        ack_latency=LatencyStats.from_hist(agg.hist_ack),
        broker_cpu_cores_mean=res["broker_cpu_cores_mean"],
        broker_cpu_cores_max=res["broker_cpu_cores_max"],
        broker_rss_mb_mean=res["broker_rss_mb_mean"],
        broker_rss_mb_max=res["broker_rss_mb_max"],
        generator_cpu_cores_mean=res["generator_cpu_cores_mean"],
        generator_cpu_cores_max=res["generator_cpu_cores_max"],
        generator_rss_mb_mean=res["generator_rss_mb_mean"],
        generator_rss_mb_max=res["generator_rss_mb_max"],
        generator_saturated=saturated,
        generator_reason=str(reason) if reason else None,
        valid=not invalid,
        window_source=plan.window_source,
        deliveries_per_s=list(agg.per_second),
        throughput_min_msg_s=full[0],
        throughput_max_msg_s=full[1],
        approx_rel_error=approx_rel_error(plan.approx_bits),
        latency_verdict=latency_verdict.kind,
        latency_reason=latency_verdict.reason,
        latency_error_ms=plan.latency_error_ms,
        last_delivery_s=(agg.last_recv_ns - plan.win_end) / 1e9 if agg.last_recv_ns else None,
        backlog_at_drain_end=backlog_at_drain_end(plan, agg.last_recv_ns, lost),
        unmatched_deliveries=WorkerStats.total(plan.generator.workers).unmatched_deliveries,
        unsent=unsent,
        expected_scheduled=scheduled_deliveries,
        loss_sent_pct=_pct(lost, scheduled_deliveries),
        loss_unsent_pct=_pct(unsent_deliveries, scheduled_deliveries),
        invalid_reasons=invalid,
        record_issues=[c.describe() for c in plan.record_checks if c.truncated]
        + plan.record_shortfalls,
    )


def full_second_range(plan: CellPlan, per_second: list[int]) -> tuple[float | None, float | None]:
    """Min and max of the per-second series over whole seconds (a shorter last bin is left out)."""
    whole = plan.window_ns // 1_000_000_000
    values = per_second[:whole]
    if not values:
        return None, None
    return float(min(values)), float(max(values))


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise AnalysisError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_summary_json(folder: Path, summary: CellSummary) -> Path:
    """Write ``summary.json`` into the cell folder (atomically); return its path."""
    path = folder / SUMMARY_JSON
    text = json.dumps(summary.to_dict(), indent=2) + "\n"
    _atomic_write(path, text.encode("utf-8"))
    return path


def read_summary_json(path: Path) -> CellSummary:
    """Read a ``summary.json``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AnalysisError(f"{path}: unreadable summary ({exc})") from None
    try:
        return CellSummary.from_dict(data)
    except (TypeError, AnalysisError) as exc:
        raise AnalysisError(f"{path}: {exc}") from None


def _arrow_type(annotation: str) -> Any:
    import pyarrow as pa

    if annotation.startswith("list[int]"):
        return pa.list_(pa.int64())
    if annotation.startswith("list[str]"):
        return pa.list_(pa.string())
    if annotation.startswith("int"):
        return pa.int64()
    if annotation.startswith("float"):
        return pa.float64()
    if annotation.startswith("bool"):
        return pa.bool_()
    return pa.string()


def write_summary_parquet(result_dir: Path, summaries: list[CellSummary]) -> Path:
    """Write ``summary.parquet`` (one row per cell, ordered by index and repeat)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [s.flat_row() for s in sorted(summaries, key=lambda s: (s.index, s.repeat))]
    fixed: list[Any] = []
    for f in dataclasses.fields(CellSummary):
        if f.name == "params":
            continue
        if f.name in _STATS_GROUPS:
            for sf in dataclasses.fields(LatencyStats):
                fixed.append(pa.field(f"{f.name}_{sf.name}", _arrow_type(str(sf.type))))
            continue
        if f.name == "invalid_reasons":
            fixed.append(pa.field("invalid_kinds", pa.list_(pa.string())))
            fixed.append(pa.field("invalid_reason", pa.string()))
            continue
        fixed.append(pa.field(f.name, _arrow_type(str(f.type))))
    names = {fl.name for fl in fixed}
    param_names = sorted({k for r in rows for k in r if k not in names})
    inferred = pa.Table.from_pylist([{k: r.get(k) for k in param_names} for r in rows])
    schema = pa.schema(fixed + [inferred.schema.field(k) for k in param_names])
    table = pa.Table.from_pylist(rows, schema=schema)
    path = result_dir / SUMMARY_PARQUET
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path
