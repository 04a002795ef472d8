"""``mqbench report``: result folders in, tables (text) and figures (files) out."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mqbench.analysis.plan import CellPlan, plan_cell
from mqbench.analysis.repeats import RepeatAggregate, aggregate_repeats, base_id
from mqbench.analysis.run_summaries import LoadedRun, load_run
from mqbench.analysis.summary import CellSummary
from mqbench.errors import AnalysisError, UsageError
from mqbench.report.axes import Matrix, ReportAxes
from mqbench.report.draw import NamedFigure, render_figures, save_figure
from mqbench.report.figures import build_figures
from mqbench.report.page import render_page
from mqbench.report.render import FORMATS, Table, render
from mqbench.report.tables import build_tables, repeats_note
from mqbench.report.tidy import render_tidy_csv


@dataclass
class Report:
    """What :func:`build_report` produced."""

    text: str
    tables: list[Table]
    aggregates: list[RepeatAggregate]
    axes: ReportAxes
    figures: list[NamedFigure] = field(default_factory=list)
    figure_files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load_runs(paths: Sequence[Path], allow_mixed: bool = False) -> list[LoadedRun]:
    """Load every folder; AnalysisError when they hold different scenarios (unless allowed)."""
    if not paths:
        raise UsageError("report: give at least one result folder")
    runs = [load_run(Path(p)) for p in paths]
    names = sorted({r.scenario for r in runs})
    if len(names) > 1 and not allow_mixed:
        raise AnalysisError(
            f"the result folders hold different scenarios ({', '.join(names)}); report them "
            "separately or pass --allow-mixed to put them in one report"
        )
    return runs


def _pooled(runs: Sequence[LoadedRun]) -> tuple[list[CellSummary], dict[str, list[CellPlan]]]:
    """All summaries (ids prefixed by scenario when mixed) and the record plans per base id."""
    mixed = len({r.scenario for r in runs}) > 1
    summaries: list[CellSummary] = []
    plans: dict[str, list[CellPlan]] = {}
    for run in runs:
        for s in run.summaries:
            if mixed:
                s = dataclasses.replace(
                    s,
                    cell_id=f"{run.scenario}/{s.cell_id}",
                    params={**s.params, "scenario": run.scenario},
                )
            summaries.append(s)
            entry = run.cells.get(s.cell_id.split("/", 1)[1] if mixed else s.cell_id)
            if entry is None:
                continue
            try:
                plan = plan_cell(entry, run.cell_folder(entry.id))
            except AnalysisError:
                continue  # no usable records (e.g. a committed baseline of summaries only)
            plans.setdefault(base_id(s.cell_id, s.repeat), []).append(plan)
    return summaries, plans


def preamble(runs: Sequence[LoadedRun], note: str | None = None) -> str:
    """The lines above the tables: which runs, how to read the numbers (and ``note``)."""
    lines = ["mqbench report"]
    for r in runs:
        lines.append(f"Run {r.path.name}: scenario {r.scenario}, {len(r.summaries)} cell(s).")
    lines.append(
        "Values are means over repeats (± 95 % Student-t half-width when n >= 2); latency in "
        "ms from the intended send time."
    )
    if note:
        lines.append(note)
    return "\n".join(lines)


def check_figures_dir(folder: Path) -> None:
    """``--figures`` must name a folder that exists or can be created (UsageError if not)."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file, not a folder" if probe == folder else f"{probe} is a file"
        raise UsageError(f"--figures {folder}: {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"--figures {folder}: {probe} is not writable")


def build_report(
    paths: Sequence[Path],
    fmt: str = "md",
    figures_dir: Path | None = None,
    allow_mixed: bool = False,
) -> Report:
    """Tables of ``paths`` rendered in ``fmt``; figures written to ``figures_dir`` if given.

    Unanalysed cells are analysed with the numpy engine first (see mqbench.analysis.run_summaries).
    """
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if figures_dir is not None:
        check_figures_dir(Path(figures_dir))
    runs = load_runs(paths, allow_mixed)
    summaries, plans = _pooled(runs)
    aggs = aggregate_repeats(summaries)
    axes = ReportAxes.of([Matrix.from_manifest(r.manifest) for r in runs])
    tables = build_tables(aggs, axes)
    few = repeats_note(aggs)
    pre = preamble(runs, few)
    report = Report("", tables, aggs, axes)
    if few:
        report.notes.append(few)
    for r in runs:
        if r.recovered:
            report.notes.append(r.recovered)
        if r.analysed_now:
            report.notes.append(
                f"{r.path}: analysed {len(r.analysed_now)} cell(s) with the numpy engine"
            )
    if figures_dir is not None or fmt == "html":
        cells = [(a, plans.get(a.base_id, [])) for a in aggs]
        report.figures = render_figures(build_figures(aggs, cells, axes))
        if not any(plans.values()):
            report.notes.append("no record files found: latency CDFs were not drawn")
    if figures_dir is not None:
        for fig in report.figures:
            report.figure_files += save_figure(fig, Path(figures_dir))
    if fmt == "csv":
        report.text = render_tidy_csv(aggs, axes)
    elif fmt == "html":
        metadata = [(r.path.name, r.manifest) for r in runs]
        report.text = render_page(tables, pre, report.figures, metadata)
    else:
        report.text = render(tables, fmt, pre)
    return report
