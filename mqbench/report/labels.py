"""Metric labels shared by ``mqbench run``'s results table, the report's tables and figures.

A label names the statistic, how it was aggregated over the cell's samples (``mean`` or
``max``) and the unit, so one number reads the same wherever it is printed: the column
``broker RSS max (MB)`` of the CLI table is the column ``broker RSS max (MB)`` of the
report's cell table and the y axis ``broker RSS max (MB)`` of the scaling figure. Titles
start with the label capitalised (:func:`sentence`); the words never change.
"""

from __future__ import annotations

from typing import Final

METRIC_LABELS: Final[dict[str, str]] = {
    "throughput_msg_s": "throughput (msg/s)",
    "loss_pct": "loss (%)",
    "duplicates": "dup",
    "reordered": "reord",
    "latency_p50_us": "p50 (ms)",
    "latency_p95_us": "p95 (ms)",
    "latency_p99_us": "p99 (ms)",
    "latency_max_us": "max (ms)",
    "latency_from_send_p99_us": "p99 from send (ms)",
    "send_lag_p99_us": "send lag p99 (ms)",
    "broker_cpu_cores_mean": "broker CPU mean (cores)",
    "broker_rss_mb_max": "broker RSS max (MB)",
    "broker_rss_mb_mean": "broker RSS mean (MB)",
    "generator_cpu_cores_mean": "generator CPU mean (cores)",
}
"""Label of each metric (keys as in :data:`mqbench.analysis.repeats.METRICS`)."""

RESOURCE_METRICS: Final = ("throughput_msg_s", "broker_cpu_cores_mean", "broker_rss_mb_max")
"""What the scaling tables and figures show against the topology's size (the paper's Fig. 6)."""

LATENCY_MS: Final = "latency (ms)"
"""The y axis of the latency bar figures (p50 bars, min-p95 whiskers)."""


def label(metric: str) -> str:
    """The label of ``metric`` (KeyError for a metric without one)."""
    return METRIC_LABELS[metric]


def sentence(text: str) -> str:
    """``text`` with its first letter capitalised (for titles that start with a label)."""
    return text[:1].upper() + text[1:]
