"""Fast loading of 24-byte record files into Spark: numpy.fromfile inside mapInArrow.

Every file is split into chunks of about ``chunk_records`` records; a small DataFrame of
chunk descriptors (path, offset, count), one per partition, is mapped with ``mapInArrow``
and each task reads its slice with ``numpy.fromfile``. No ``binaryRecords`` + ``struct``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from mqbench.analysis.plan import DEFAULT_CHUNK_RECORDS
from mqbench.records.format import RECORD_SIZE

DESCRIPTOR_SCHEMA = "task long, file int, chunk int, path string, offset long, count long"
RECORD_SCHEMA = "file int, t_sent long, lat int, pub long, sub long, seq long"
BATCH_RECORDS = 262_144


def check_record_file(path: str) -> int:
    """Whole records in ``path`` (bytes of a torn last record are left out)."""
    return os.path.getsize(path) // RECORD_SIZE


def chunk_descriptors(
    paths: list[str], chunk_records: int = DEFAULT_CHUNK_RECORDS
) -> list[tuple[int, int, int, str, int, int]]:
    """(task, file, chunk, path, offset, count) for every chunk of every file."""
    out: list[tuple[int, int, int, str, int, int]] = []
    for f, path in enumerate(paths):
        total = check_record_file(path)
        for i, offset in enumerate(range(0, total, chunk_records)):
            out.append((len(out), f, i, path, offset, min(chunk_records, total - offset)))
    return out


def descriptor_frame(
    spark: Any, rows: list[tuple[Any, ...]], schema: str, partitions: int | None = None
) -> Any:
    """A DataFrame holding ``rows`` in ``partitions`` contiguous slices (default: one each)."""
    rdd = spark.sparkContext.parallelize(rows, max(1, partitions or len(rows)))
    return spark.createDataFrame(rdd, schema)


def _read_batches(batches: Iterator[Any]) -> Iterator[Any]:
    import numpy as np
    import pyarrow as pa

    from mqbench.analysis.kernel import read_chunk

    for batch in batches:
        for d in batch.to_pylist():
            rec = read_chunk(d["path"], d["offset"], d["count"])
            for lo in range(0, rec.size, BATCH_RECORDS):
                part = rec[lo : lo + BATCH_RECORDS]
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array(np.full(part.size, d["file"], dtype=np.int32)),
                        pa.array(part["t_sent"]),
                        pa.array(part["lat"]),
                        pa.array(part["pub"].astype("int64")),
                        pa.array(part["sub"].astype("int64")),
                        pa.array(part["seq"].astype("int64")),
                    ],
                    names=["file", "t_sent", "lat", "pub", "sub", "seq"],
                )


def load_records(spark: Any, paths: list[str], chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Any:
    """DataFrame of all records of ``paths``: file, t_sent, lat, pub, sub, seq.

    ``file`` is the index in ``paths``. Use it for ad-hoc queries; the cell analysis
    aggregates inside the reading task instead (see docs/performance.md).
    """
    rows = chunk_descriptors(paths, chunk_records)
    partitions = min(len(rows), 2 * int(spark.sparkContext.defaultParallelism))
    frame = descriptor_frame(spark, rows, DESCRIPTOR_SCHEMA, partitions)
    return frame.mapInArrow(_read_batches, RECORD_SCHEMA)
