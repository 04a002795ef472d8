"""Analysis of result folders: records -> per-cell summaries (JSON) and a run table (Parquet).

Importing this package does not import PySpark; a JVM starts only when :func:`analyze_run`
runs with the Spark engine.
"""

from mqbench.analysis.api import analyze_run, read_manifest
from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.analysis.summary import SUMMARY_SCHEMA_VERSION, CellSummary, LatencyStats

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "CellSummary",
    "LatencyStats",
    "analyze_cell_numpy",
    "analyze_run",
    "read_manifest",
]
