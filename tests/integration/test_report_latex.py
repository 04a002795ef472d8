"""The report's LaTeX compiles into a two-column paper without overfull boxes (pdflatex from
Debian's TeX Live, installed by scripts/install.sh --dev)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report_aggs import paper_aggs

from mqbench.report.axes import ReportAxes
from mqbench.report.render import render
from mqbench.report.tables import build_tables

pytestmark = pytest.mark.integration

PAPER = r"""\documentclass[twocolumn]{article}
\usepackage[T1]{fontenc}
\usepackage{booktabs,graphicx}
\usepackage{lipsum}
\begin{document}
Text before the tables.
\input{tables}
\end{document}
"""


def _compile(folder: Path, latex: str) -> str:
    (folder / "tables.tex").write_text(latex, encoding="utf-8")
    (folder / "paper.tex").write_text(PAPER.replace("\\usepackage{lipsum}\n", ""))
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = (folder / "paper.log").read_text(encoding="latin-1")
    assert proc.returncode == 0, log[-3000:]
    return log


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="needs pdflatex (install.sh --dev)")
@pytest.mark.parametrize("fmt", ["latex", "latex-wide"])
def test_latex_of_a_twelve_cell_run_compiles_in_two_columns_without_overfull_boxes(
    tmp_path: Path, fmt: str
) -> None:
    aggs = paper_aggs()
    assert len(aggs) == 12
    tables = build_tables(aggs, ReportAxes.inferred())
    log = _compile(tmp_path, render(tables, fmt, "mqbench report\nRun x: 12 cells."))
    assert not re.findall(r"Overfull \\[hv]box", log)
    assert (tmp_path / "paper.pdf").stat().st_size > 0
    labels = re.findall(r"\\label\{(tab:[^}]*)\}", render(tables, fmt))
    assert len(labels) == len(set(labels)) == len(tables)
