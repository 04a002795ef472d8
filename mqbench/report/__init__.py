"""Reports from analysed result folders: the paper's tables and figures.

Depends on :mod:`mqbench.analysis` only; matplotlib is imported when figures are drawn.
"""

from mqbench.report.build import Report, build_report
from mqbench.report.tables import FORMATS, Table, build_tables, render

__all__ = ["FORMATS", "Report", "Table", "build_report", "build_tables", "render"]
