"""The paper's tables from aggregated summaries (rendered by :mod:`mqbench.report.render`).

Every value is the mean over a cell's repeats; ``± h`` follows when there are >= 2 repeats
(``h`` = 95 % Student-t half-width). The marks of :mod:`mqbench.report.marks` follow values
the report cannot vouch for, with a footnote per mark used. Which tables appear depends on
the scenario axes that vary (:func:`build_tables`); metric names are the shared labels of
:mod:`mqbench.report.labels`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from mqbench.analysis.repeats import RepeatAggregate
from mqbench.report.axes import COUNT_AXES, ReportAxes, axis_text, axis_value, heading
from mqbench.report.labels import RESOURCE_METRICS, label, sentence
from mqbench.report.marks import LOSS_MARKS, NOTES, Mark, marks_of, ordered, with_marks
from mqbench.report.numbers import fmt_ci, fmt_value
from mqbench.report.render import Table, slug

LATENCY_NOTE: Final = "Latency from the intended send time (corrected for coordinated omission)."
SHORT: Final = {"throughput_msg_s": "throughput", "broker_cpu_cores_mean": "cpu"}
SHORT_RSS: Final = "rss"


MIN_REPEATS: Final = 3
"""Fewer repeats than this get a note: their intervals are missing or too wide to mean much."""


def repeats_note(aggs: Sequence[RepeatAggregate]) -> str | None:
    """A sentence when repeats are too few for the intervals to mean anything (else None)."""
    counts = [a.n for a in aggs]
    if not counts or min(counts) >= MIN_REPEATS:
        return None
    if max(counts) < 2:
        return (
            "Each cell ran once: there are no confidence intervals, and a single run says "
            f"nothing about run-to-run spread (set repeat: {MIN_REPEATS} or more)."
        )
    return (
        f"Some cells have fewer than {MIN_REPEATS} repeats: with 2 repeats the 95 % interval "
        f"is 12.7 standard errors wide each side, too wide to mean much (set repeat: "
        f"{MIN_REPEATS} or more; 5 or more for tight intervals)."
    )


def notes_for(marks: set[Mark], first: Sequence[str] = ()) -> list[str]:
    """``first`` and then the footnote of every mark used, in mark order."""
    return [*first, *(NOTES[m] for m in ordered(marks))]


def pivot(
    key: str,
    title: str,
    aggs: Sequence[RepeatAggregate],
    axes: ReportAxes,
    row_axis: str,
    col_axis: str,
    value: Callable[[RepeatAggregate], str],
    *,
    always: Sequence[str] = (),
    note: str | None = None,
    latency: bool = False,
    loss: bool = False,
) -> list[Table]:
    """One table per facet: rows = values of ``row_axis``, columns = ``col_axis``.

    ``latency``: the values include latency, so latency-bound cells get ``‡``; ``loss``:
    they include loss, so cells with a backlog at the drain's end get ``¶`` and cells with
    deliveries that matched no subscription ``‖``.
    """
    tables: list[Table] = []
    for facet, members in axes.facets(aggs, (row_axis, col_axis), always):
        cols_v = axes.values(members, col_axis)
        header = [heading(row_axis)] + [axis_text(col_axis, c) for c in cols_v]
        rows: list[list[str]] = []
        used: set[Mark] = set()
        for r in axes.values(members, row_axis):
            row = [axis_text(row_axis, r)]
            for c in cols_v:
                hits = [
                    m
                    for m in members
                    if axis_value(m, row_axis) == r and axis_value(m, col_axis) == c
                ]
                texts = []
                for h in hits:
                    marks = marks_of(h, latency, loss)
                    used.update(marks)
                    texts.append(with_marks(value(h), marks))
                row.append("; ".join(texts) if texts else "-")
            rows.append(row)
        suffix = f" ({facet})" if facet else ""
        notes = notes_for(used, [note] if note else [])
        tables.append(Table(slug(key, facet), title + suffix, header, rows, notes))
    return tables


def _lat_pair(agg: RepeatAggregate) -> str:
    p50, p95 = agg.metrics["latency_p50_us"], agg.metrics["latency_p95_us"]
    if p50.mean is None:
        return "-"
    return f"{fmt_ci(p50, 1e-3)} / {fmt_ci(p95, 1e-3)}"


def _loss_lat(agg: RepeatAggregate) -> str:
    loss = agg.metrics["loss_pct"]
    loss_text = "-" if loss.mean is None else f"{fmt_ci(loss)} %"
    return f"{loss_text}; {_lat_pair(agg)}"


SERIES_PREFERENCE: Final[tuple[str, ...]] = (
    "pairs",
    "subscribers",
    "publishers",
    "qos",
    "rate",
    "payload",
)
"""Which further varying axis a latency table or figure spreads across columns (bars)."""
MAX_COLUMNS: Final = 6


def spread_axis(
    aggs: Sequence[RepeatAggregate], axes: ReportAxes, taken: Sequence[str]
) -> str | None:
    """The varying axis (not in ``taken``) to spread side by side: the first of
    SERIES_PREFERENCE, then of the other dimensions, that has few enough values."""
    varying = [a for a in axes.varying(aggs) if a not in taken]
    ranked = [a for a in SERIES_PREFERENCE if a in varying]
    ranked += [a for a in varying if a not in ranked]
    for axis in ranked:
        if len(axes.values(aggs, axis)) <= MAX_COLUMNS:
            return axis
    return None


def latency_by_payload(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[Table]:
    """Target x payload: p50 / p95 latency in ms (the paper's experiment 1). With a single
    payload, the columns are another varying axis (e.g. pairs) rather than one table each."""
    col = "payload"
    if "payload" not in axes.varying(aggs):
        col = spread_axis(aggs, axes, ("target", "payload")) or "payload"
    return pivot(
        f"latency-{col}",
        f"Latency p50 / p95 (ms) by target and {heading(col)}",
        aggs,
        axes,
        "target",
        col,
        _lat_pair,
        note=LATENCY_NOTE,
        latency=True,
    )


def scaling_by_size(
    aggs: Sequence[RepeatAggregate], axes: ReportAxes, size_axis: str
) -> list[Table]:
    """Target x the topology's size (pairs, subscribers or publishers): throughput, broker
    CPU mean and RSS max, one table per resource profile (the paper's experiment 2)."""
    out: list[Table] = []
    note = None
    if size_axis == "subscribers":
        note = "Fanout: throughput counts deliveries (each message once per subscriber)."
    for metric in RESOURCE_METRICS:
        short = SHORT.get(metric, SHORT_RSS)
        out += pivot(
            f"{short}-{size_axis}",
            f"{sentence(label(metric))} by target and {heading(size_axis)}",
            aggs,
            axes,
            "target",
            size_axis,
            lambda a, m=metric: fmt_ci(a.metrics[m]),  # type: ignore[misc]
            always=("resources",),
            note=note,
        )
    return out


def qos_table(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> list[Table]:
    """Target x QoS: loss % and p50 / p95 latency (experiment 3, under faults if any)."""
    faults = [v for v in axes.values(aggs, "faults") if v]
    title = "Loss (%) and latency p50 / p95 (ms) by target and QoS"
    if faults:
        title += " under faults"
    return pivot("qos", title, aggs, axes, "target", "qos", _loss_lat, latency=True, loss=True)


def _offered(agg: RepeatAggregate) -> str:
    """The offered load the manifest recorded (``cells[].offered_rate``, all publishers)."""
    return fmt_value(agg.metrics["offered_rate"].mean)


CELL_METRICS: Final = (
    "throughput_msg_s",
    "loss_pct",
    "duplicates",
    "reordered",
    "latency_p50_us",
    "latency_p95_us",
    "latency_p99_us",
    "latency_max_us",
    "send_lag_p99_us",
    "broker_cpu_cores_mean",
    "broker_rss_mb_max",
)
"""The columns of the cell table after the cell's axes, in order."""


def cells_table(aggs: Sequence[RepeatAggregate], axes: ReportAxes) -> Table:
    """One row per cell (repeats pooled): every headline metric."""
    shown = [a for a in axes.varying(aggs) if a != "target"]
    header = ["cell", "target", *(heading(a) for a in shown), "n", "offered (msg/s)"]
    header += [label(m) for m in CELL_METRICS]
    rows: list[list[str]] = []
    used: set[Mark] = set()
    for a in aggs:
        marks, lat_marks = marks_of(a), marks_of(a, latency=True)
        loss_marks = marks_of(a, loss=True)
        used.update(lat_marks)
        used.update(loss_marks)
        row = [with_marks(a.base_id, marks), axis_text("target", axis_value(a, "target"))]
        row += [axis_text(x, axis_value(a, x)) for x in shown]
        row += [str(a.n), _offered(a)]
        for metric in CELL_METRICS:
            m = a.metrics[metric]
            if metric.startswith(("latency_", "send_lag_")):
                text = fmt_ci(m, 1e-3)
                if metric.startswith("latency_") and Mark.LATENCY_BOUND in lat_marks:
                    text = with_marks(text, [Mark.LATENCY_BOUND])
                row.append(text)
            elif metric == "loss_pct":
                row.append(with_marks(fmt_ci(m), [k for k in loss_marks if k in LOSS_MARKS]))
            else:
                row.append(fmt_ci(m))
        rows.append(row)
    first = ["offered = rate x publishers. " + LATENCY_NOTE]
    return Table("cells", "All cells", header, rows, notes_for(used, first))


def size_axes(varying: Sequence[str]) -> list[str]:
    """The topology sizes (pairs, subscribers, publishers) among the varying axes."""
    return [a for a in COUNT_AXES if a in varying]


def build_tables(aggs: Sequence[RepeatAggregate], axes: ReportAxes | None = None) -> list[Table]:
    """The tables that fit the results: a paper table for each varying axis, then all cells.

    payload varies or several targets -> latency by payload; a topology size (pairs,
    subscribers, publishers) varies -> throughput, broker CPU and RSS by it; QoS varies ->
    loss and latency by QoS. The per-cell table is always last. ``axes``: the scenario
    axes (default: inferred from the cells' parameters).
    """
    axes = axes or ReportAxes.inferred()
    varying = axes.varying(aggs)
    tables: list[Table] = []
    if "payload" in varying or "target" in varying:
        tables += latency_by_payload(aggs, axes)
    for size in size_axes(varying):
        tables += scaling_by_size(aggs, axes, size)
    if "qos" in varying:
        tables += qos_table(aggs, axes)
    tables.append(cells_table(aggs, axes))
    return tables
