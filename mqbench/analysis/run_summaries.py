"""Read the summaries of a result folder (for report and compare), analysing when needed.

A cell that has records but no ``summary.json`` yet is analysed in this process with the
numpy engine, provided its record files total at most ``AUTO_ANALYSE_MAX_BYTES``; bigger
cells need ``mqbench analyze`` (Spark) first and the error says so. Summary files written
by an older mqbench (summary schema 1) are read with the version-2 defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from mqbench.analysis.api import analyze_run, open_manifest
from mqbench.analysis.summary import SUMMARY_JSON, CellSummary, read_summary_json
from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.run_manifest import RunManifest

AUTO_ANALYSE_MAX_BYTES: Final = 1 << 30
"""Record bytes of not-yet-analysed cells that report/compare analyse on the fly (1 GiB)."""


@dataclass
class LoadedRun:
    """One result folder: its manifest, its cells' summaries and where they live."""

    path: Path
    manifest: RunManifest
    summaries: list[CellSummary]
    cells: dict[str, CellEntry] = field(default_factory=dict)
    """The analysable cells' manifest entries, by cell id."""
    analysed_now: list[str] = field(default_factory=list)
    recovered: str | None = None
    """One line when the run's mqbench process was found killed and the run was treated as
    interrupted (``analysis.api.open_manifest``)."""

    @property
    def scenario(self) -> str:
        """The scenario name from the manifest (``?`` when absent)."""
        return self.manifest.scenario_name

    def cell_folder(self, cell_id: str) -> Path:
        """Folder of a cell of this run."""
        return self.path / "cells" / cell_id


def _record_bytes(folder: Path) -> int:
    return sum(os.path.getsize(p) for p in folder.glob("*.bin"))


def load_run(result_dir: Path, analyse_missing: bool = True) -> LoadedRun:
    """Manifest and summaries of every completed/interrupted cell of ``result_dir``.

    Raises AnalysisError when the folder is not a result folder, has another schema version,
    has no analysable cell, or has unanalysed cells too big to analyse here.
    """
    path = Path(result_dir)
    manifest, recovered = open_manifest(path)
    entries = {c.id: c for c in manifest.cells if c.analysable}
    if not entries:
        raise AnalysisError(f"{path}: no completed or interrupted cells")
    missing = [cid for cid in entries if not (path / "cells" / cid / SUMMARY_JSON).exists()]
    analysed: list[str] = []
    if missing:
        if not analyse_missing:
            raise AnalysisError(
                f"{path}: cell {missing[0]!r} has no summary; run `mqbench analyze {path}` first"
            )
        size = sum(_record_bytes(path / "cells" / cid) for cid in missing)
        if size > AUTO_ANALYSE_MAX_BYTES:
            raise AnalysisError(
                f"{path}: {len(missing)} cell(s) are not analysed yet and hold "
                f"{size / 2**30:.1f} GiB of records; run `mqbench analyze {path}` (Spark) first"
            )
        analyze_run(path, engine="numpy", cells=missing)
        analysed = missing
    summaries = [read_summary_json(path / "cells" / cid / SUMMARY_JSON) for cid in entries]
    return LoadedRun(path, manifest, summaries, entries, analysed, recovered)
