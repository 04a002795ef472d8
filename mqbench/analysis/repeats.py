"""Repeats of a cell aggregated as mean and 95 % Student-t confidence interval.

Cells that differ only by ``repeat`` share a *base id*: the cell id without its ``-r<n>``
suffix (repeat 0 has none). For each metric the aggregate holds the number of repeats with a
value ``n``, the mean, the sample standard deviation ``s`` (``n - 1`` in the denominator) and
the half-width ``t(0.975, n - 1) * s / sqrt(n)`` of the 95 % confidence interval of the mean
(null when ``n < 2``). See docs/results.md, "summary_agg.parquet".
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mqbench.analysis.summary import CellSummary, LatencyStats
from mqbench.records.cell_params import CellParams

SUMMARY_AGG_PARQUET: Final = "summary_agg.parquet"
CONFIDENCE: Final = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
    front = math.exp(ln + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Cumulative distribution function of Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t (``0.5 <= p < 1``), by bisection on :func:`t_cdf` (~1e-12)."""
    if df < 1:
        raise ValueError("t_quantile needs df >= 1")
    if not 0.5 <= p < 1.0:
        raise ValueError("t_quantile needs 0.5 <= p < 1")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class MeanCI:
    """Mean of ``n`` repeats with sample standard deviation and 95 % CI half-width."""

    n: int
    mean: float | None
    std: float | None
    ci95: float | None

    @property
    def low(self) -> float | None:
        """Lower end of the confidence interval (the mean when there is no interval)."""
        if self.mean is None:
            return None
        return self.mean - (self.ci95 or 0.0)

    @property
    def high(self) -> float | None:
        """Upper end of the confidence interval (the mean when there is no interval)."""
        if self.mean is None:
            return None
        return self.mean + (self.ci95 or 0.0)


def mean_ci(values: Sequence[float | None], confidence: float = CONFIDENCE) -> MeanCI:
    """Mean, sample std and Student-t half-width of the non-null ``values``."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(xs)
    if n == 0:
        return MeanCI(0, None, None, None)
    mean = math.fsum(xs) / n
    if n == 1:
        return MeanCI(1, mean, None, None)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    return MeanCI(n, mean, std, half)


def _lat(group: str, stat: str) -> Callable[[CellSummary], float | None]:
    def get(s: CellSummary) -> float | None:
        value: LatencyStats | None = getattr(s, group)
        return None if value is None else float(getattr(value, stat))

    return get


def _field(name: str) -> Callable[[CellSummary], float | None]:
    def get(s: CellSummary) -> float | None:
        value = getattr(s, name)
        return None if value is None else float(value)

    return get


def _expected_rate(s: CellSummary) -> float | None:
    """Deliveries per second the schedule asked for in the window (offered x fan-out)."""
    if not s.window_s or s.expected_scheduled is None:
        return None
    return s.expected_scheduled / s.window_s


METRICS: Final[dict[str, Callable[[CellSummary], float | None]]] = {
    "offered_rate": _field("offered_rate"),
    "expected_rate": _expected_rate,
    "throughput_msg_s": _field("throughput_msg_s"),
    "send_rate": _field("send_rate"),
    "loss_pct": _field("loss_pct"),
    "duplicates": _field("duplicates"),
    "reordered": _field("reordered"),
    "latency_min_us": _lat("latency", "min_us"),
    "latency_p50_us": _lat("latency", "p50_us"),
    "latency_p95_us": _lat("latency", "p95_us"),
    "latency_p99_us": _lat("latency", "p99_us"),
    "latency_p999_us": _lat("latency", "p999_us"),
    "latency_max_us": _lat("latency", "max_us"),
    "latency_mean_us": _lat("latency", "mean_us"),
    "latency_from_send_p50_us": _lat("latency_from_send", "p50_us"),
    "latency_from_send_p95_us": _lat("latency_from_send", "p95_us"),
    "latency_from_send_p99_us": _lat("latency_from_send", "p99_us"),
    "send_lag_p50_us": _lat("send_lag", "p50_us"),
    "send_lag_p95_us": _lat("send_lag", "p95_us"),
    "send_lag_p99_us": _lat("send_lag", "p99_us"),
    "send_lag_p999_us": _lat("send_lag", "p999_us"),
    "send_lag_max_us": _lat("send_lag", "max_us"),
    "ack_latency_p50_us": _lat("ack_latency", "p50_us"),
    "ack_latency_p95_us": _lat("ack_latency", "p95_us"),
    "ack_latency_p99_us": _lat("ack_latency", "p99_us"),
    "broker_cpu_cores_mean": _field("broker_cpu_cores_mean"),
    "broker_rss_mb_mean": _field("broker_rss_mb_mean"),
    "broker_rss_mb_max": _field("broker_rss_mb_max"),
    "generator_cpu_cores_mean": _field("generator_cpu_cores_mean"),
}
"""Aggregated metrics: name -> how to read it from a summary."""


def base_id(cell_id: str, repeat: int) -> str:
    """The cell id without its ``-r<repeat>`` suffix."""
    suffix = f"-r{repeat}"
    if repeat and cell_id.endswith(suffix):
        return cell_id[: -len(suffix)]
    return cell_id


def comparable_params(params: dict[str, Any]) -> dict[str, Any]:
    """Cell parameters without ``index`` and ``repeat`` (what repeats share)."""
    return {k: v for k, v in params.items() if k not in ("index", "repeat")}


@dataclass(frozen=True)
class RepeatAggregate:
    """All repeats of one cell: shared parameters and a :class:`MeanCI` per metric."""

    base_id: str
    index: int
    params: dict[str, Any]
    repeats: list[int]
    cell_ids: list[str]
    metrics: dict[str, MeanCI]
    any_saturated: bool
    all_valid: bool
    any_latency_bound: bool = False
    """Some repeat's latency was shaped by the generator (``latency_verdict``)."""
    invalid_kinds: tuple[str, ...] = ()
    """Kinds of invalidity found in any repeat (``mqbench/analysis/verdict.py``), sorted."""
    any_backlog: bool = False
    """Some repeat's loss includes a backlog at the drain's end (``backlog_at_drain_end``)."""
    unmatched_deliveries: int = 0
    """Deliveries of all repeats that matched no subscription of their client (dropped, in
    no record, counted as lost: ``CellSummary.unmatched_deliveries``)."""

    @property
    def n(self) -> int:
        """Number of repeats."""
        return len(self.repeats)

    @property
    def cell_params(self) -> CellParams:
        """The shared parameters read by name with their types."""
        return CellParams(self.params, self.base_id)

    def flat_row(self) -> dict[str, Any]:
        """One row of ``summary_agg.parquet``."""
        row: dict[str, Any] = {
            "base_id": self.base_id,
            "index": self.index,
            "n_repeats": self.n,
            "cell_ids": ",".join(self.cell_ids),
            "any_generator_saturated": self.any_saturated,
            "all_valid": self.all_valid,
            "any_latency_generator_bound": self.any_latency_bound,
            "invalid_kinds": ",".join(self.invalid_kinds) or None,
            "any_backlog_at_drain_end": self.any_backlog,
            "unmatched_deliveries": self.unmatched_deliveries,
        }
        for name, m in self.metrics.items():
            row[f"{name}_n"] = m.n
            row[f"{name}_mean"] = m.mean
            row[f"{name}_std"] = m.std
            row[f"{name}_ci95"] = m.ci95
        for key, value in sorted(self.params.items()):
            scalar = value is None or isinstance(value, str | int | float | bool)
            row[f"param_{key}"] = value if scalar else repr(value)
        return row


def aggregate_repeats(summaries: Sequence[CellSummary]) -> list[RepeatAggregate]:
    """Group summaries by base id (and equal parameters) and aggregate every metric.

    Raises AnalysisError when two summaries share a base id but differ in a parameter other
    than ``repeat``/``index`` (not repeats of one configuration).
    """
    from mqbench.errors import AnalysisError

    groups: dict[str, list[CellSummary]] = {}
    for s in sorted(summaries, key=lambda s: (s.index, s.repeat)):
        groups.setdefault(base_id(s.cell_id, s.repeat), []).append(s)
    out: list[RepeatAggregate] = []
    for bid, members in groups.items():
        params = comparable_params(members[0].params)
        for other in members[1:]:
            if comparable_params(other.params) != params:
                raise AnalysisError(
                    f"cells {members[0].cell_id!r} and {other.cell_id!r} share the base id "
                    f"{bid!r} but differ in more than the repeat number"
                )
        metrics = {name: mean_ci([get(s) for s in members]) for name, get in METRICS.items()}
        out.append(
            RepeatAggregate(
                base_id=bid,
                index=min(s.index for s in members),
                params=params,
                repeats=[s.repeat for s in members],
                cell_ids=[s.cell_id for s in members],
                metrics=metrics,
                any_saturated=any(s.generator_saturated for s in members),
                all_valid=all(s.valid for s in members),
                any_latency_bound=any(s.latency_generator_bound for s in members),
                invalid_kinds=tuple(
                    sorted({r.kind.value for s in members for r in s.invalid_reasons})
                ),
                any_backlog=any(s.backlog_at_drain_end for s in members),
                unmatched_deliveries=sum(s.unmatched_deliveries for s in members),
            )
        )
    return sorted(out, key=lambda a: a.index)


def write_summary_agg_parquet(result_dir: Path, aggregates: Sequence[RepeatAggregate]) -> Path:
    """Write ``summary_agg.parquet``: one row per base id (see docs/results.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [a.flat_row() for a in aggregates]
    fixed = [
        pa.field("base_id", pa.string()),
        pa.field("index", pa.int64()),
        pa.field("n_repeats", pa.int64()),
        pa.field("cell_ids", pa.string()),
        pa.field("any_generator_saturated", pa.bool_()),
        pa.field("all_valid", pa.bool_()),
        pa.field("any_latency_generator_bound", pa.bool_()),
        pa.field("invalid_kinds", pa.string()),
    ]
    for name in METRICS:
        fixed.append(pa.field(f"{name}_n", pa.int64()))
        for stat in ("mean", "std", "ci95"):
            fixed.append(pa.field(f"{name}_{stat}", pa.float64()))
    names = {f.name for f in fixed}
    param_names = sorted({k for r in rows for k in r if k not in names})
    inferred = pa.Table.from_pylist([{k: r.get(k) for k in param_names} for r in rows])
    schema = pa.schema(fixed + [inferred.schema.field(k) for k in param_names])
    table = pa.Table.from_pylist(rows, schema=schema)
    path = Path(result_dir) / SUMMARY_AGG_PARQUET
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path
