"""Analyse a run folder on a Hadoop-compatible URI and publish the outputs back.

``mqbench analyze hdfs://.../<run>`` fetches the folder through the Hadoop FileSystem of
the analysis's own Spark JVM into a private temporary folder, analyses it exactly like a
local folder, and publishes the outputs that were not there (``summary.json`` per cell,
``summary.parquet``, ...); a file that was already there is never overwritten
(``records.hadoop_fs``, docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqbench.analysis.api import RunAnalysis, analyze_results
from mqbench.analysis.progress import ProgressFn
from mqbench.records.hadoop_fs import HadoopFs, RemoteRoot, fetch_folder, local_files, publish_new


@dataclass
class RemoteAnalysis:
    """What the analysis of a run folder on a URI wrote there."""

    analysis: RunAnalysis
    folder: RemoteRoot
    published: list[str] = field(default_factory=list)
    """Outputs copied to the URI (paths relative to the run folder)."""
    kept: list[str] = field(default_factory=list)
    """Outputs that were already there: the URI keeps its version (never overwritten)."""


def analyze_remote(
    folder: RemoteRoot,
    *,
    local: Path | None = None,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    approx: bool = False,
    on_progress: ProgressFn | None = None,
    spark: Any | None = None,
) -> RemoteAnalysis:
    """Analyse the run folder ``folder`` and publish its new outputs there.

    ``local`` is a local copy that is already identical to ``folder`` (a run's own staging
    folder, just published); without it the folder is fetched into a temporary folder,
    removed at the end. ``spark`` reuses a running session (not stopped); otherwise one is
    started with ``master`` and ``conf`` and stopped at the end.
    """
    from mqbench.analysis.spark import spark_session

    with (
        contextlib.nullcontext(spark)
        if spark is not None
        else spark_session(master, conf) as session
    ):
        fs = HadoopFs(session.sparkContext, folder)
        work: Path | None = None
        try:
            if local is None:
                work = local = Path(tempfile.mkdtemp(prefix="mqbench-analyze-"))
                state = fetch_folder(fs, folder, local)
            else:
                state = local_files(local)
            analysis = analyze_results(local, spark=session, approx=approx, on_progress=on_progress)
            published, kept = publish_new(fs, local, folder, state)
        finally:
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)
    return RemoteAnalysis(analysis, folder, published, kept)
