"""Spark engine: all cells of a run in one mapInArrow job over chunk descriptors.

Each task reads one chunk with numpy and returns a pickled partial (counts, 100-ns
histograms, a delivery bitmap, per-route first/max seq). The driver merges the partials;
chunks whose reordering depends on earlier chunks are re-scanned in a second, usually
empty, job.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np

from mqbench.analysis.aggregate import CellAggregate, ReorderFix, merge_partials
from mqbench.analysis.kernel import DeliveryPartial, SendPartial
from mqbench.analysis.plan import DEFAULT_CHUNK_RECORDS, CellPlan, Chunk, chunks_of
from mqbench.analysis.spark_records import descriptor_frame
from mqbench.errors import AnalysisError

SCAN_SCHEMA = (
    "task long, cell int, kind string, file int, chunk int, path string, offset long, count long"
)


def _chunk_from_row(row: dict[str, Any]) -> Chunk:
    return Chunk(
        row["cell"],
        row["kind"],
        row["file"],
        row["chunk"],
        row["path"],
        row["offset"],
        row["count"],
    )


def _balanced_rows(spark: Any, chunks: list[Chunk]) -> tuple[list[tuple[Any, ...]], int]:
    """Descriptor rows ordered so that contiguous slices have similar cost.

    Each Spark task costs ~0.1-0.2 s of Python worker overhead on this machine, so a task
    handles several chunks: 2 partitions per core, chunks dealt round-robin by cost.
    """
    slots = max(1, min(len(chunks), 2 * int(spark.sparkContext.defaultParallelism)))
    weight = {"deliveries": 5, "sends": 1}  # measured kernel cost per record, roughly
    order = sorted(range(len(chunks)), key=lambda t: -chunks[t].count * weight[chunks[t].kind])
    rows: list[tuple[Any, ...]] = []
    for slot in range(slots):
        for t in order[slot::slots]:
            c = chunks[t]
            rows.append((t, c.cell, c.kind, c.file, c.index, c.path, c.offset, c.count))
    return rows, slots


def _scan_task(plans: list[CellPlan]) -> Any:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from mqbench.analysis.kernel import scan_chunk

        for batch in batches:
            for row in batch.to_pylist():
                part = scan_chunk(plans[row["cell"]], _chunk_from_row(row))
                blob = pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([row["task"]], pa.int64()), pa.array([blob], pa.binary())],
                    names=["task", "payload"],
                )

    return run


def _fix_task(plans: list[CellPlan], fixes: dict[int, ReorderFix]) -> Any:
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from mqbench.analysis.kernel import read_chunk, reorder_chunk

        for batch in batches:
            for row in batch.to_pylist():
                fix = fixes[row["task"]]
                plan = plans[fix.chunk.cell]
                m_prev = np.full(plan.n_routes, -1, dtype=np.int64)
                m_prev[fix.routes] = fix.m_prev
                rec = read_chunk(fix.chunk.path, fix.chunk.offset, fix.chunk.count)
                count = reorder_chunk(plan, rec, m_prev)
                yield pa.RecordBatch.from_arrays(
                    [pa.array([row["task"]], pa.int64()), pa.array([count], pa.int64())],
                    names=["task", "count"],
                )

    return run


def aggregate_cells_spark(
    spark: Any, plans: list[CellPlan], chunk_records: int = DEFAULT_CHUNK_RECORDS
) -> list[CellAggregate]:
    """Exact aggregates of every plan, computed by Spark tasks (one job for all cells)."""
    chunks = [c for i, plan in enumerate(plans) for c in chunks_of(i, plan, chunk_records)]
    rows, slots = _balanced_rows(spark, chunks)
    parts: dict[int, DeliveryPartial | SendPartial] = {}
    if rows:
        frame = descriptor_frame(spark, rows, SCAN_SCHEMA, slots)
        try:
            result = frame.mapInArrow(_scan_task(plans), "task long, payload binary").collect()
        except Exception as exc:
            raise _spark_error(exc) from None
        for r in result:
            parts[int(r["task"])] = pickle.loads(r["payload"])
    by_cell: list[list[tuple[Chunk, DeliveryPartial | SendPartial]]] = [[] for _ in plans]
    for t, chunk in enumerate(chunks):
        by_cell[chunk.cell].append((chunk, parts[t]))
    aggs: list[CellAggregate] = []
    fixes: dict[int, ReorderFix] = {}
    for i, plan in enumerate(plans):
        agg, cell_fixes = merge_partials(plan, by_cell[i])
        aggs.append(agg)
        for fix in cell_fixes:
            fixes[len(fixes)] = fix
    if fixes:
        fix_rows = [
            (
                t,
                f.chunk.cell,
                f.chunk.kind,
                f.chunk.file,
                f.chunk.index,
                f.chunk.path,
                f.chunk.offset,
                f.chunk.count,
            )
            for t, f in fixes.items()
        ]
        frame = descriptor_frame(spark, fix_rows, SCAN_SCHEMA)
        try:
            result = frame.mapInArrow(_fix_task(plans, fixes), "task long, count long").collect()
        except Exception as exc:
            raise _spark_error(exc) from None
        for r in result:
            fix = fixes[int(r["task"])]
            aggs[fix.chunk.cell].reordered += int(r["count"]) - fix.local_count
    return aggs


def aggregate_cells_serial(
    plans: list[CellPlan], chunk_records: int = DEFAULT_CHUNK_RECORDS
) -> list[CellAggregate]:
    """The Spark engine's chunk-and-merge algorithm run in this process (tests, debugging)."""
    from mqbench.analysis.kernel import read_chunk, reorder_chunk, scan_chunk

    aggs: list[CellAggregate] = []
    for i, plan in enumerate(plans):
        parts = [(c, scan_chunk(plan, c)) for c in chunks_of(i, plan, chunk_records)]
        agg, fixes = merge_partials(plan, parts)
        for fix in fixes:
            m_prev = np.full(plan.n_routes, -1, dtype=np.int64)
            m_prev[fix.routes] = fix.m_prev
            rec = read_chunk(fix.chunk.path, fix.chunk.offset, fix.chunk.count)
            agg.reordered += reorder_chunk(plan, rec, m_prev) - fix.local_count
        aggs.append(agg)
    return aggs


def _spark_error(exc: Exception) -> AnalysisError:
    """Turn a Spark failure into AnalysisError, keeping an AnalysisError raised in a task."""
    text = str(exc)
    marker = "mqbench.errors.AnalysisError: "
    if marker in text:
        line = text.split(marker, 1)[1].splitlines()[0]
        return AnalysisError(line)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return AnalysisError(f"Spark job failed: {first}")
