"""``timeseries-<cell>``: a cell's throughput and latency second by second, faults shaded.

Drawn from the ``series.csv`` the analysis writes per cell (:mod:`mqbench.analysis.series`)
and the fault windows of its ``faults.json``: throughput per second on top, p50 and p99 of
the deliveries received in each second below, along seconds since the window start. The
first repeat of each cell is drawn (repeats are runs of their own; time does not pool).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mqbench.analysis.plan import CellPlan
from mqbench.analysis.repeats import RepeatAggregate
from mqbench.analysis.series import read_series
from mqbench.records.fault_metrics import read_fault_metrics_json
from mqbench.report.labels import LATENCY_MS
from mqbench.report.marks import marks_of, with_marks
from mqbench.report.plotdata import PAGE_WIDTH, FigureData, Panel, Point, Series


def fault_windows(folder: Path, win_start_ns: int) -> tuple[tuple[float, float], ...]:
    """Fault windows of a cell in seconds since its window start (none without faults)."""
    metrics = read_fault_metrics_json(folder)
    if metrics is None:
        return ()
    return tuple(
        ((w.injected_ns - win_start_ns) / 1e9, (w.recovered_ns - win_start_ns) / 1e9)
        for w in metrics.windows
    )


def _figure(agg: RepeatAggregate, plan: CellPlan) -> FigureData | None:
    rows = read_series(plan.folder)
    if not rows:
        return None
    shaded = fault_windows(plan.folder, plan.win_start)
    xs = [r.second + r.seconds / 2 for r in rows]
    throughput = Series(
        "throughput", tuple(Point(x, r.throughput_msg_s) for x, r in zip(xs, rows, strict=True))
    )
    latency = tuple(
        Series(
            stat,
            tuple(
                Point(x, value)
                for x, r in zip(xs, rows, strict=True)
                if (value := getattr(r, f"{stat}_ms")) is not None and value > 0
            ),
            stat=stat,
        )
        for stat in ("p50", "p99")
    )
    xlabel = "seconds since the window start"
    panels = (
        Panel("lines", "", xlabel, "throughput (msg/s)", (throughput,), ymin=0.0, shaded=shaded),
        Panel(
            "lines",
            "",
            xlabel,
            LATENCY_MS,
            latency,
            row=1,
            yscale="log",
            yticks="ms",
            shaded=shaded,
        ),
    )
    title = with_marks(f"Per second: {agg.base_id}", marks_of(agg, latency=True))
    note = "Shaded: fault windows. " if shaded else ""
    note += "Latency of the deliveries received in each second, from the intended send time."
    return FigureData(
        f"timeseries-{agg.base_id}",
        title,
        panels,
        rows=2,
        width=PAGE_WIDTH,
        panel_height=1.6,
        legend_series=False,
        note=note,
    )


def timeseries(cells: Sequence[tuple[RepeatAggregate, list[CellPlan]]]) -> list[FigureData]:
    """One figure per cell that has a ``series.csv`` (its first repeat)."""
    out = []
    for agg, plans in cells:
        if plans and (fig := _figure(agg, plans[0])) is not None:
            out.append(fig)
    return out
