"""Load as a Spark barrier stage on ``local-cluster[2,1,1024]`` (separate executor JVMs and
Pythons): the same counts and no loss as the local engine, records ``analyze`` reads."""

from __future__ import annotations

import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_load_helpers import manifest, run, small_scenario

from mqbench.analysis import analyze_run
from mqbench.workload.spark_engine import spark_context, stop_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

MASTER = "local-cluster[2,1,1024]"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """One local cluster for the module (its executors start once)."""
    if shutil.which("java") is None:
        pytest.skip("local-cluster needs a Java runtime on PATH")
    spark_context(MASTER, {"spark.executor.memory": "512m"}, "127.0.0.1")
    try:
        yield MASTER
    finally:
        stop_spark()


@pytest.mark.parametrize("target", ["mosquitto", "nats"])
def test_a_local_cluster_run_sends_and_receives_what_a_local_run_does(
    cluster: str, target: str, tmp_path: Path
) -> None:
    local = run(small_scenario(target, {"engine": "local"}), tmp_path / "local")
    spark = run(small_scenario(target, {"engine": "spark", "master": cluster}), tmp_path / "spark")
    assert local.status == spark.status == "completed"
    local_totals, spark_totals = local.cells[0].totals, spark.cells[0].totals
    assert local_totals is not None and spark_totals is not None
    assert spark_totals.sent == local_totals.sent == 4 * 20 * 4
    assert spark_totals.received == local_totals.received == spark_totals.sent  # 0 loss
    cell = manifest(spark.result_dir)["cells"][0]
    clocks = cell["clocks"]
    assert clocks["version"] == 1 and [t["task"] for t in clocks["tasks"]] == [0, 1]
    for task in clocks["tasks"]:
        assert task["after"] is not None and task["barrier_ns"] > 0
        # one machine, one clock: the offset is within its probe's error bound
        assert abs(task["before"]["offset_ns"]) <= task["before"]["error_ns"]
    workers = cell["generator"]["workers"]
    assert sorted(w["worker"] for w in workers) == [0, 1]
    assert sum(w["received"] for w in workers) == spark_totals.received
    # the ordinary analysis reads the result unchanged
    spark_summary = analyze_run(spark.result_dir, engine="numpy")[0]
    local_summary = analyze_run(local.result_dir, engine="numpy")[0]
    assert spark_summary.loss_pct == local_summary.loss_pct == 0.0
    assert spark_summary.sent == local_summary.sent == spark_summary.received
    # every task sampled its own CPU/RSS and shipped it: a row per task and their sum
    resources = spark.result_dir / "cells" / cell["id"] / "resources.csv"
    roles = {line.split(",")[1] for line in resources.read_text().splitlines()[1:]}
    host = socket.gethostname()
    assert {"generator", f"generator:task-0@{host}", f"generator:task-1@{host}"} <= roles
    assert spark_summary.generator_rss_mb_mean is not None
    assert spark_summary.generator_rss_mb_mean > 0
