"""``mqbench history``: chosen metrics of the same cells across runs, in time order, with the
step changes flagged (the basis of a benchmark trend page in a broker's CI).

Runs are ordered by their manifest's ``created_utc``. For each cell (base id, repeats
pooled) and metric, a run's value is compared with the previous run's that has one: a
*step* is a change larger than ``threshold`` (relative) whose 95 % intervals do not
overlap when both runs have intervals (so noise between repeats is not a step).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from mqbench.analysis.repeats import MeanCI, aggregate_repeats
from mqbench.analysis.run_summaries import LoadedRun, load_run
from mqbench.errors import UsageError
from mqbench.report.labels import label
from mqbench.report.numbers import fmt_ci
from mqbench.report.plotdata import PAGE_WIDTH, FigureData, Panel, Point, Series

HISTORY_METRICS: Final[dict[str, tuple[str, float]]] = {
    "throughput": ("throughput_msg_s", 1.0),
    "p50": ("latency_p50_us", 1e-3),
    "p95": ("latency_p95_us", 1e-3),
    "p99": ("latency_p99_us", 1e-3),
    "p999": ("latency_p999_us", 1e-3),
    "max": ("latency_max_us", 1e-3),
    "loss": ("loss_pct", 1.0),
    "cpu": ("broker_cpu_cores_mean", 1.0),
    "rss": ("broker_rss_mb_max", 1.0),
}
"""``--metric`` names: (aggregate metric, scale to the label's unit)."""
DEFAULT_METRICS: Final = ("throughput", "p50", "p99")
DEFAULT_THRESHOLD: Final = 0.10


@dataclass(frozen=True)
class RunValue:
    """One run's value of one cell's metric."""

    run: str
    created_utc: str
    commit: str
    cell: str
    metric: str
    mean: float | None
    ci95: float | None
    n: int
    change_pct: float | None
    """Change from the previous run with a value, in % of that value."""
    step: bool


@dataclass(frozen=True)
class History:
    """Every (run, cell, metric) value in time order."""

    runs: list[LoadedRun]
    metrics: list[str]
    points: list[RunValue]

    @property
    def steps(self) -> list[RunValue]:
        """The values flagged as step changes."""
        return [p for p in self.points if p.step]


def parse_metrics(text: str | None) -> list[str]:
    """``--metric a,b``: known names, in order (UsageError naming an unknown one)."""
    names = [m.strip() for m in (text or ",".join(DEFAULT_METRICS)).split(",") if m.strip()]
    for name in names:
        if name not in HISTORY_METRICS:
            known = ", ".join(HISTORY_METRICS)
            raise UsageError(f"--metric {name!r}: choose from {known}")
    return names


def _created(run: LoadedRun) -> str:
    return str(run.manifest.created_utc or run.path.name)


def _commit(run: LoadedRun) -> str:
    return str(run.manifest.tool.get("git_commit") or "-")[:10]


def is_step(prev: MeanCI, cur: MeanCI, threshold: float) -> tuple[float | None, bool]:
    """The relative change from ``prev`` to ``cur`` (%) and whether it is a step."""
    if prev.mean is None or cur.mean is None or prev.mean == 0:
        return None, False
    change = (cur.mean - prev.mean) / abs(prev.mean)
    step = abs(change) > threshold
    if step and prev.ci95 is not None and cur.ci95 is not None:
        step = prev.high < cur.low or cur.high < prev.low  # type: ignore[operator]
    return 100.0 * change, step


def build_history(
    paths: Sequence[Path], metrics: Sequence[str], threshold: float = DEFAULT_THRESHOLD
) -> History:
    """Load the runs, order them in time and compare each cell's metrics run to run."""
    if len(paths) < 2:
        raise UsageError("history: give at least two result folders")
    runs = sorted((load_run(Path(p)) for p in paths), key=_created)
    previous: dict[tuple[str, str], MeanCI] = {}
    points: list[RunValue] = []
    for run in runs:
        for agg in aggregate_repeats(run.summaries):
            for name in metrics:
                key, scale = HISTORY_METRICS[name]
                m = agg.metrics[key]
                cur = MeanCI(
                    m.n, *(None if v is None else v * scale for v in (m.mean, m.std, m.ci95))
                )
                change, step = (None, False)
                if (agg.base_id, name) in previous:
                    change, step = is_step(previous[(agg.base_id, name)], cur, threshold)
                if cur.mean is not None:
                    previous[(agg.base_id, name)] = cur
                points.append(
                    RunValue(
                        run.path.name,
                        _created(run),
                        _commit(run),
                        agg.base_id,
                        name,
                        cur.mean,
                        cur.ci95,
                        cur.n,
                        change,
                        step,
                    )
                )
    return History(runs, list(metrics), points)


def unit_label(metric: str) -> str:
    """The shared label of a history metric (``p99 (ms)``)."""
    return label(HISTORY_METRICS[metric][0])


def render_text(history: History) -> str:
    """One line per run and cell: the metrics' values, steps flagged with their change."""
    lines = [f"{len(history.runs)} runs in time order; a step is flagged STEP"]
    cells = list(dict.fromkeys(p.cell for p in history.points))
    for cell in cells:
        lines.append("")
        lines.append(f"{cell}")
        header = ["run", "created (UTC)", "commit", *(unit_label(m) for m in history.metrics)]
        rows = [header]
        for run in history.runs:
            mine = {
                p.metric: p for p in history.points if p.cell == cell and p.run == run.path.name
            }
            if not mine:
                continue
            row = [run.path.name, _created(run), _commit(run)]
            for metric in history.metrics:
                row.append(_cell_text(mine.get(metric)))
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows
        ]
    steps = history.steps
    lines.append("")
    lines.append(f"{len(steps)} step change(s)" + (":" if steps else ""))
    lines += [
        f"  {p.cell} {p.metric}: {p.change_pct:+.1f} % at {p.run} (commit {p.commit})"
        for p in steps
    ]
    return "\n".join(lines) + "\n"


def _cell_text(p: RunValue | None) -> str:
    if p is None or p.mean is None:
        return "-"
    text = fmt_ci(MeanCI(p.n, p.mean, None, p.ci95))
    return f"{text} STEP {p.change_pct:+.0f}%" if p.step and p.change_pct is not None else text


def render_csv(history: History) -> str:
    """Long format: one row per run, cell and metric."""
    buf = io.StringIO()
    fields = list(RunValue.__dataclass_fields__)
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for p in history.points:
        writer.writerow({k: ("" if v is None else v) for k, v in asdict(p).items()})
    return buf.getvalue()


def render_json(history: History) -> str:
    """The points and the steps as JSON."""
    data = {
        "runs": [
            {"run": r.path.name, "created_utc": _created(r), "commit": _commit(r)}
            for r in history.runs
        ],
        "metrics": history.metrics,
        "points": [asdict(p) for p in history.points],
        "steps": [asdict(p) for p in history.steps],
    }
    return json.dumps(data, indent=2) + "\n"


def history_figure(history: History) -> FigureData:
    """A panel per metric: a line per cell along the runs in time order; steps marked."""
    runs = [r.path.name for r in history.runs]
    panels = []
    for col, metric in enumerate(history.metrics):
        series = []
        for cell in dict.fromkeys(p.cell for p in history.points):
            pts = tuple(
                Point(float(runs.index(p.run)), p.mean, *_interval(p))
                for p in history.points
                if p.cell == cell and p.metric == metric and p.mean is not None
            )
            series.append(Series(cell, pts))
        panels.append(
            Panel(
                "lines",
                "",
                "run (time order)",
                unit_label(metric),
                tuple(series),
                row=col,
                xticks="values",
                marked_x=tuple(
                    float(runs.index(p.run)) for p in history.steps if p.metric == metric
                ),
            )
        )
    return FigureData(
        "history",
        f"History of {len(runs)} runs: {', '.join(history.metrics)} (dotted: step changes)",
        tuple(panels),
        rows=len(panels),
        width=PAGE_WIDTH,
        panel_height=1.6,
        note="Runs in time order: " + ", ".join(f"{i} {r}" for i, r in enumerate(runs)),
    )


def _interval(p: RunValue) -> tuple[float | None, float | None]:
    if p.mean is None or p.ci95 is None:
        return None, None
    return p.mean - p.ci95, p.mean + p.ci95
