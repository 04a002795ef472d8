"""The Spark engine agrees with the numpy reference and writes readable outputs."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import (
    intended,
    make_cell,
    records,
    rich_run,
    sends_ok,
    write_manifest,
)

from mqbench.analysis import analyze_run
from mqbench.analysis.spark_records import load_records
from mqbench.analysis.summary import CellSummary

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from mqbench.analysis.spark import spark_session

    with spark_session("local[2]") as session:
        yield session


def test_a_started_spark_session_leaves_no_start_up_log_in_the_temporary_folder(
    spark: Any,
) -> None:
    assert spark.sparkContext is not None
    assert not (Path(tempfile.gettempdir()) / f"mqbench-spark-{os.getpid()}.log").exists()


def test_the_spark_jvm_keeps_its_temporary_files_in_the_folder_of_this_process(
    spark: Any,
) -> None:
    from mqbench.process.jvm_temp import jvm_temp_dir

    system = spark.sparkContext._jvm.java.lang.System
    assert system.getProperty("java.io.tmpdir") == str(jvm_temp_dir())


def test_an_analysis_with_spark_leaves_nothing_in_its_temporary_folder(tmp_path: Path) -> None:
    root = rich_run(tmp_path / "run")
    own_tmp = tmp_path / "tmp"  # the command's temporary folder, and so its JVM's
    own_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(own_tmp)}
    command = [sys.executable, "-m", "mqbench", "analyze", str(root), "--master", "local[1]"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert list(own_tmp.iterdir()) == []


def test_spark_summaries_equal_the_numpy_reference_field_by_field(
    spark: Any, tmp_path: Path
) -> None:
    root = rich_run(tmp_path)
    # 7-record chunks: many tasks, routes straddling chunks, the reorder re-scan runs.
    from_spark = analyze_run(root, spark=spark, chunk_records=7)
    from_numpy = analyze_run(root, engine="numpy")
    assert [s.cell_id for s in from_spark] == ["pairs", "fanout"]
    for a, b in zip(from_spark, from_numpy, strict=True):
        for f in dataclasses.fields(CellSummary):
            assert getattr(a, f.name) == getattr(b, f.name), (a.cell_id, f.name)
    assert from_spark[0].reordered > 0 and from_spark[0].duplicates > 0


def test_spark_reports_exact_percentiles_and_writes_json_and_parquet(
    spark: Any, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    rows = [(intended(0, s), (s + 1) * 10, 0, 0, s) for s in range(1000)]
    cell = make_cell(
        tmp_path,
        window=(0, 1000 * 1_000_000),
        deliveries=[records(rows)],
        sends=[sends_ok(1, range(1000))],
    )
    write_manifest(tmp_path, [cell])
    (summary,) = analyze_run(tmp_path, spark=spark, chunk_records=64)
    lat = summary.latency
    assert lat is not None
    assert (lat.p50_us, lat.p90_us, lat.p99_us, lat.p999_us, lat.max_us) == (
        500.0,
        900.0,
        990.0,
        999.0,
        1000.0,
    )
    data = json.loads((tmp_path / "cells" / "c0" / "summary.json").read_text())
    assert CellSummary.from_dict(data) == summary
    (row,) = pq.read_table(tmp_path / "summary.parquet").to_pylist()
    assert row["cell_id"] == "c0" and row["latency_p999_us"] == 999.0
    assert row["received"] == 1000 and row["lost"] == 0


def test_load_records_yields_every_record_with_int64_columns(spark: Any, tmp_path: Path) -> None:
    rows = [(10 + i, -i, 2**32 - 1, 7, i) for i in range(100)]
    path = tmp_path / "d.bin"
    records(rows).tofile(path)
    frame = load_records(spark, [str(path), str(path)], chunk_records=30)
    assert dict(frame.dtypes)["pub"] == "bigint"
    agg = frame.groupBy().agg({"seq": "sum", "pub": "max", "lat": "min", "*": "count"}).first()
    assert agg["count(1)"] == 200 and agg["sum(seq)"] == 2 * sum(range(100))
    assert agg["max(pub)"] == 2**32 - 1 and agg["min(lat)"] == -99


def test_spark_approximate_percentiles_equal_the_numpy_approximation(
    spark: Any, tmp_path: Path
) -> None:
    root = rich_run(tmp_path)
    from_spark = analyze_run(root, spark=spark, chunk_records=50, approx=True)
    from_numpy = analyze_run(root, engine="numpy", approx=True)
    assert from_spark == from_numpy
    assert from_spark[0].approx_rel_error == 2**-7 and from_spark[0].deliveries_per_s
