"""Reports from analysed result folders: the paper's tables and figures.

Depends on :mod:`mqbench.analysis` (the scenario matrix comes from the manifests);
matplotlib is imported only when figures are drawn. The package's names load lazily, so
``mqbench.report.labels`` stays cheap to import for the CLI's results table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqbench.report.build import Report, build_report
    from mqbench.report.render import FORMATS, Table, render
    from mqbench.report.tables import build_tables

__all__ = ["FORMATS", "Report", "Table", "build_report", "build_tables", "render"]

_HOME = {
    "FORMATS": "mqbench.report.render",
    "Table": "mqbench.report.render",
    "render": "mqbench.report.render",
    "Report": "mqbench.report.build",
    "build_report": "mqbench.report.build",
    "build_tables": "mqbench.report.tables",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use."""
    import importlib

    if name not in _HOME:
        raise AttributeError(f"module 'mqbench.report' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)
