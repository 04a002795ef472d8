"""The Spark engine on a ``local-cluster`` master: executors in separate JVMs and Pythons."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import rich_run

from mqbench.analysis import analyze_run
from mqbench.errors import AnalysisError

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_local_cluster_master_gives_the_numpy_reference_summaries(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("local-cluster needs a Java runtime on PATH")
    root = rich_run(tmp_path)
    try:
        from_cluster = analyze_run(
            root,
            master="local-cluster[2,1,1024]",
            conf={"spark.executor.memory": "512m", "spark.driver.memory": "1g"},
            chunk_records=40,
        )
    except AnalysisError as exc:
        if "cannot start Spark" in str(exc):
            pytest.skip(f"local-cluster[2,1,1024] cannot start here: {exc}")
        raise
    assert from_cluster == analyze_run(root, engine="numpy")
