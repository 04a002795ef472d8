"""Repeat aggregates for the gate's unit tests (tests/unit/test_compare*.py)."""

from __future__ import annotations

from mqbench.analysis.repeats import METRICS, MeanCI, RepeatAggregate, mean_ci


def agg(cell: str = "c", saturated: bool = False, **values: list[float]) -> RepeatAggregate:
    """An aggregate whose metrics are ``mean_ci`` of the given per-repeat values."""
    metrics = {name: MeanCI(0, None, None, None) for name in METRICS}
    n = 1
    for name, xs in values.items():
        metrics[name] = mean_ci(xs)
        n = len(xs)
    return RepeatAggregate(
        cell, 0, {"target": "t"}, list(range(n)), [cell] * n, metrics, saturated, not saturated
    )
