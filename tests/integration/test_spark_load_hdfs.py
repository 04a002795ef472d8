"""A distributed run whose run folder is on a real HDFS (Hadoop's MiniDFSCluster on
127.0.0.1): executors ship records to the driver, the driver publishes the run folder through
the Hadoop FileSystem API, ``analyze`` reads it from HDFS and publishes its outputs there."""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hdfs_minicluster
from spark_load_helpers import run, small_scenario

from mqbench.analysis.api import analyze_results
from mqbench.analysis.remote import analyze_remote
from mqbench.cli.app import app
from mqbench.errors import ResultsError
from mqbench.records.hadoop_fs import HadoopFs, RemoteRoot, fetch_folder
from mqbench.records.integrity import check_record_file
from mqbench.workload.run import discard_staging
from mqbench.workload.spark_engine import spark_context, stop_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

MASTER = "local-cluster[2,1,1024]"


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One MiniDFSCluster for the module, stopped by PID; yields ``hdfs://127.0.0.1:PORT``."""
    why = hdfs_minicluster.missing()
    if why is not None:
        pytest.skip(why)
    cluster = hdfs_minicluster.start(tmp_path_factory.mktemp("minihdfs"))
    try:
        yield cluster.wait()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local cluster (separate executor JVMs and Pythons) and its session."""
    if shutil.which("java") is None:
        pytest.skip("local-cluster needs a Java runtime on PATH")
    from pyspark.sql import SparkSession

    spark_context(MASTER, {"spark.executor.memory": "512m"}, "127.0.0.1")
    try:
        yield SparkSession.builder.getOrCreate()
    finally:
        stop_spark()


def test_a_run_to_hdfs_counts_what_a_local_run_does_and_analyze_reads_it_there(
    hdfs: str, spark: Any, tmp_path: Path
) -> None:
    local = run(small_scenario("nats", {"engine": "local"}), tmp_path / "local")
    root = RemoteRoot(f"{hdfs}/results")
    remote = run(small_scenario("nats", {"engine": "spark", "master": MASTER}), root)
    assert remote.published is not None and remote.staging is not None
    discard_staging(remote.staging)
    assert local.status == remote.status == "completed"
    local_totals, remote_totals = local.cells[0].totals, remote.cells[0].totals
    assert local_totals is not None and remote_totals is not None
    assert remote_totals.sent == local_totals.sent == 4 * 20 * 4
    assert remote_totals.received == remote_totals.sent  # 0 loss

    fs = HadoopFs(spark.sparkContext, root)
    folder = remote.published
    assert folder.uri.startswith(f"{hdfs}/results/spark-nats/")
    files = fs.files(folder)
    cell = remote.cells[0].id
    for name in ("manifest.json", f"cells/{cell}/events.jsonl", f"cells/{cell}/resources.csv"):
        assert name in files
    for task in (0, 1):
        assert files[f"cells/{cell}/sends-{task}.bin"] > 0
        assert f"cells/{cell}/deliveries-{task}.bin.count" in files

    copy = tmp_path / "copy"
    fetch_folder(fs, folder, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    for task in (0, 1):
        check = check_record_file(copy / "cells" / cell / f"deliveries-{task}.bin")
        assert check.closed and not check.truncated and check.records > 0

    analysed = analyze_remote(folder, spark=spark)
    assert f"cells/{cell}/summary.json" in analysed.published and analysed.kept == []
    back = tmp_path / "back"
    fetch_folder(fs, folder, back)
    on_hdfs = json.loads((back / "cells" / cell / "summary.json").read_text())
    analyze_results(copy, spark=spark)
    on_disk = json.loads((copy / "cells" / cell / "summary.json").read_text())
    assert on_hdfs == on_disk
    assert on_hdfs["loss_pct"] == 0.0 and on_hdfs["received"] == on_hdfs["sent"]

    # a second analysis publishes nothing over what is there
    again = analyze_remote(folder, spark=spark)
    assert again.published == [] and f"cells/{cell}/summary.json" in again.kept

    # the run folder is never reserved (so never written) twice
    with pytest.raises(ResultsError, match="never overwritten"):
        fs.reserve(folder)


def test_the_cli_runs_to_hdfs_analyses_there_and_never_overwrites(
    hdfs: str, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Last in the module: the CLI's analysis stops the Spark session it finds running.
    monkeypatch.delenv("MQBENCH_DEBUG", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's staging goes here
    data = small_scenario("nats", {"engine": "spark", "master": MASTER})
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(data))
    root = RemoteRoot(f"{hdfs}/cli")
    fs = HadoopFs(spark.sparkContext, root)
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", root.uri])
    assert result.exit_code == 0, result.output
    shown = re.search(r"results: (hdfs://\S+)", result.output)
    assert shown is not None
    folder = RemoteRoot(shown.group(1))
    files = fs.files(folder)
    assert "summary.parquet" in files
    assert any(name.endswith("/summary.json") for name in files)
    assert not list(tmp_path.glob("mqbench-run-*"))  # the staging folder is gone
    again = CliRunner().invoke(app, ["analyze", folder.uri])
    assert again.exit_code == 0, again.output
    assert "existed: not overwritten" in again.output
    assert fs.files(folder) == files
