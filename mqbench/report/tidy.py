"""The report as CSV for plotting: one row per cell, one number per column.

Columns: ``cell``, the cell's parameters on the report's axes (raw values: ``payload_bytes``
64, ``qos`` 1), ``repeats``, ``offered_msg_s``, then for each metric ``<metric>_mean``,
``<metric>_ci95`` (the 95 % Student-t half-width, empty with one repeat) and ``<metric>_n``
(repeats with a value), and last the marks: ``marks`` (the symbols, as in the tables) and
``mark_notes`` (what they mean). Numbers are rounded as in :mod:`mqbench.report.numbers`
and carry no thousands separators or units: the unit is in the column name.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Final

from mqbench.analysis.repeats import RepeatAggregate
from mqbench.report.axes import AXES, ReportAxes, axis_value
from mqbench.report.marks import LEGEND, marks_of, ordered
from mqbench.report.numbers import csv_pair

CSV_METRICS: Final[tuple[tuple[str, str, float], ...]] = (
    ("throughput_msg_s", "throughput_msg_s", 1.0),
    ("expected_rate", "expected_msg_s", 1.0),
    ("loss_pct", "loss_pct", 1.0),
    ("duplicates", "duplicates", 1.0),
    ("reordered", "reordered", 1.0),
    ("latency_p50_us", "p50_ms", 1e-3),
    ("latency_p95_us", "p95_ms", 1e-3),
    ("latency_p99_us", "p99_ms", 1e-3),
    ("latency_p999_us", "p999_ms", 1e-3),
    ("latency_max_us", "max_ms", 1e-3),
    ("send_lag_p99_us", "send_lag_p99_ms", 1e-3),
    ("broker_cpu_cores_mean", "broker_cpu_cores_mean", 1.0),
    ("broker_rss_mb_max", "broker_rss_mb_max", 1.0),
    ("generator_cpu_cores_mean", "generator_cpu_cores_mean", 1.0),
)
"""(aggregate metric, CSV column stem, scale to the column's unit)."""


def header(axes: Sequence[str]) -> list[str]:
    """The CSV header for a report over ``axes``."""
    cols = ["cell", *(AXES[a].param for a in axes), "repeats", "offered_msg_s"]
    for _, stem, _ in CSV_METRICS:
        cols += [f"{stem}_mean", f"{stem}_ci95", f"{stem}_n"]
    return [*cols, "marks", "mark_notes"]


def _raw(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def row(agg: RepeatAggregate, axes: Sequence[str]) -> list[str]:
    """One cell's row (see :func:`header`)."""
    out = [agg.base_id, *(_raw(axis_value(agg, a)) for a in axes), str(agg.n)]
    out += list(csv_pair(agg.metrics["offered_rate"]))[:1]
    for metric, _, scale in CSV_METRICS:
        m = agg.metrics[metric]
        out += [*csv_pair(m, scale), str(m.n)]
    marks = ordered([*marks_of(agg, latency=True, loss=True)])
    out += [" ".join(m.value for m in marks), "; ".join(LEGEND[m] for m in marks)]
    return out


def render_tidy_csv(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> str:
    """Every cell of the report as CSV (one number per column)."""
    shown = [a for a in axes.dimensions if a == "target" or a in axes.varying(aggs)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header(shown))
    writer.writerows(row(a, shown) for a in aggs)
    return buf.getvalue()
