"""Analyse a result folder: one SparkSession for the whole run, outputs written in place."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mqbench.analysis.aggregate import CellAggregate
from mqbench.analysis.faults import write_fault_metrics
from mqbench.analysis.kernel import APPROX_BITS
from mqbench.analysis.numpy_ref import aggregate_cell_numpy, analyze_cell_numpy
from mqbench.analysis.plan import DEFAULT_CHUNK_RECORDS, CellPlan, plan_cell
from mqbench.analysis.progress import ProgressFn, ProgressTracker
from mqbench.analysis.repeats import aggregate_repeats, write_summary_agg_parquet
from mqbench.analysis.series import write_cell_series
from mqbench.analysis.summary import (
    SUMMARY_JSON,
    CellSummary,
    build_summary,
    read_summary_json,
    write_summary_json,
    write_summary_parquet,
)
from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import ANALYSABLE, CellEntry
from mqbench.records.fault_metrics import FaultMetrics
from mqbench.records.run_manifest import (
    ManifestError,
    RunManifest,
    open_run_manifest,
    read_run_manifest,
)


def is_analysable(entry: CellEntry) -> bool:
    """Completed, or interrupted after publishing began (a cell stopped before its first
    message has no schedule and nothing to analyse)."""
    return entry.analysable


__all__ = [
    "RunAnalysis",
    "analyze_cell_numpy",
    "analyze_results",
    "analyze_run",
    "open_manifest",
    "read_manifest",
]


def read_manifest(result_dir: Path) -> RunManifest:
    """Read ``manifest.json``; AnalysisError (one line naming the path) when it is missing,
    unreadable, not JSON, malformed, or of another schema version."""
    try:
        return read_run_manifest(result_dir)
    except ManifestError as exc:
        raise AnalysisError(str(exc)) from None


def open_manifest(result_dir: Path) -> tuple[RunManifest, str | None]:
    """:func:`read_manifest`, recovering a run whose mqbench process was killed
    (``records.run_manifest.open_run_manifest``); the second value is the one line that
    says so (None when there was nothing to recover)."""
    try:
        manifest, recovery = open_run_manifest(result_dir)
    except ManifestError as exc:
        raise AnalysisError(str(exc)) from None
    if recovery is None:
        return manifest, None
    note = (
        f"{result_dir}: run interrupted: {recovery.reason}; "
        "cells that were running are analysed as interrupted"
    )
    return manifest, note


def _select_cells(entries: list[CellEntry], cells: list[str] | None) -> list[CellEntry]:
    if cells is None:
        chosen = [c for c in entries if c.analysable]
        if not chosen:
            raise AnalysisError("no completed or interrupted cells to analyse")
        return chosen
    by_id = {c.id: c for c in entries}
    chosen = []
    for cid in cells:
        if cid not in by_id:
            raise AnalysisError(f"cell {cid!r} is not in the manifest")
        status = by_id[cid].status
        if status not in ANALYSABLE:
            raise AnalysisError(
                f"cell {cid!r} has status {status!r}; only completed or interrupted cells "
                "can be analysed"
            )
        chosen.append(by_id[cid])
    return chosen


@dataclass(frozen=True)
class RunAnalysis:
    """What an analysis wrote: a summary per analysed cell and fault metrics by cell id."""

    summaries: list[CellSummary]
    faults: dict[str, FaultMetrics] = field(default_factory=dict)
    """``faults.json`` of the analysed cells that injected faults (docs/results.md)."""
    recovered: str | None = None
    """One line when the run's mqbench process was found gone although the manifest said
    running: the run was treated as interrupted (``open_manifest``)."""


def analyze_run(
    result_dir: Path,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    cells: list[str] | None = None,
    *,
    engine: Literal["spark", "numpy"] = "spark",
    spark: Any | None = None,
    chunk_records: int = DEFAULT_CHUNK_RECORDS,
    approx: bool = False,
    on_progress: ProgressFn | None = None,
) -> list[CellSummary]:
    """The summaries of :func:`analyze_results` (which see)."""
    return analyze_results(
        result_dir,
        master,
        conf,
        cells,
        engine=engine,
        spark=spark,
        chunk_records=chunk_records,
        approx=approx,
        on_progress=on_progress,
    ).summaries


def analyze_results(
    result_dir: Path,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    cells: list[str] | None = None,
    *,
    engine: Literal["spark", "numpy"] = "spark",
    spark: Any | None = None,
    chunk_records: int = DEFAULT_CHUNK_RECORDS,
    approx: bool = False,
    on_progress: ProgressFn | None = None,
) -> RunAnalysis:
    """Analyse the completed/interrupted cells of a run and write their results.

    Writes ``cells/<id>/summary.json`` for every analysed cell, ``faults.json`` for those
    that injected faults, and ``summary.parquet`` with one row per cell that has a summary.
    ``cells`` restricts the analysis to those ids. ``engine="numpy"`` uses the
    single-process reference instead of Spark. ``spark`` reuses an existing session (it is
    then not stopped); otherwise one session is started for the whole run with ``master``
    (default ``local[*]``) and ``conf`` and stopped at the end. ``approx=True`` computes
    latency percentiles from log-linear buckets (relative error < 2**-7; docs/results.md)
    instead of exact 100-ns histograms. Also writes ``summary_agg.parquet``: repeats of a
    cell as mean and 95 % confidence interval. ``on_progress`` receives an
    :class:`AnalysisProgress` at every step and about once a second in between.
    """
    result_dir = Path(result_dir)
    manifest, recovered = open_manifest(result_dir)
    entries = list(manifest.cells)
    chosen = _select_cells(entries, cells)
    progress = ProgressTracker(on_progress, len(chosen))
    try:
        plans: list[CellPlan] = []
        for k, cell in enumerate(chosen, 1):
            progress.step("planning", k, cell.id)
            folder = result_dir / "cells" / cell.id
            if not folder.is_dir():
                raise AnalysisError(f"cell {cell.id!r}: folder {folder} is missing")
            plans.append(plan_cell(cell, folder, APPROX_BITS if approx else None))
        aggs: list[CellAggregate]
        if engine == "numpy":
            aggs = []
            for k, plan in enumerate(plans, 1):
                progress.step("scanning", k, plan.cell_id)
                aggs.append(aggregate_cell_numpy(plan))
        elif spark is not None:
            aggs = _spark_aggregates(spark, plans, chunk_records, progress)
        else:
            from mqbench.analysis.spark import spark_session

            progress.step("starting Spark")
            with spark_session(master, conf) as session:
                aggs = _spark_aggregates(session, plans, chunk_records, progress)
        summaries = []
        for k, (plan, agg) in enumerate(zip(plans, aggs, strict=True), 1):
            progress.step("summarising", k, plan.cell_id)
            summary = build_summary(plan, agg)
            write_summary_json(plan.folder, summary)
            summaries.append(summary)
            write_cell_series(plan)
        faults: dict[str, FaultMetrics] = {}
        for k, cell in enumerate(chosen, 1):
            if cell.schedule is None or cell.window is None:
                continue
            progress.step("fault metrics", k, cell.id)
            metrics = write_fault_metrics(cell, result_dir / "cells" / cell.id)
            if metrics is not None:
                faults[cell.id] = metrics
    finally:
        progress.close()
    fresh = {s.cell_id for s in summaries}
    everything = list(summaries)
    for entry in entries:
        cid = entry.id
        path = result_dir / "cells" / cid / SUMMARY_JSON
        if cid not in fresh and path.exists():
            everything.append(read_summary_json(path))
    write_summary_parquet(result_dir, everything)
    write_summary_agg_parquet(result_dir, aggregate_repeats(everything))
    return RunAnalysis(summaries, faults, recovered)


def _spark_aggregates(
    spark: Any, plans: list[CellPlan], chunk_records: int, progress: ProgressTracker
) -> list[CellAggregate]:
    from mqbench.analysis.spark_job import aggregate_cells_spark

    progress.step("scanning")
    progress.watch_spark(spark)
    try:
        return aggregate_cells_spark(spark, plans, chunk_records)
    finally:
        progress.watch_spark(None)
