"""Report figures checked from their plotting data and the drawn axes (no golden images)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import Traits, scenario_run

from mqbench.analysis.run_summaries import load_run
from mqbench.cli.tables import results_view, wide_columns
from mqbench.records.run_manifest import RunManifest
from mqbench.report import Report, build_report
from mqbench.report.axes import Matrix
from mqbench.report.draw import draw, legend_columns, plain_number, thin_ticks
from mqbench.report.labels import label
from mqbench.report.marks import LEGEND, Mark
from mqbench.report.plotdata import FigureData

PAIRS_SCENARIO: dict[str, Any] = {
    "name": "exp2",
    "targets": ["mosquitto", "nats"],
    "workload": {"topology": "pairs", "pairs": [2, 10], "payload": "1KiB"},
}
MESSAGES = 40


def pairs_traits(cell: Any) -> Traits:
    """mosquitto faster than nats; CPU grows with pairs; one cell per mark."""
    where = (cell.target, cell.pairs)
    return Traits(
        latency_us=200.0 if cell.target == "mosquitto" else 400.0,
        cpu_cores=0.01 * cell.pairs,
        rss_mb=8.0 if cell.target == "mosquitto" else 18.0,
        saturated=where == ("nats", 10),
        send_lag_us=150.0 if where == ("mosquitto", 10) else 0.0,
        broker_exited=where == ("nats", 2),
    )


@pytest.fixture(scope="module")
def pairs_report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    root = tmp_path_factory.mktemp("pairs")
    run = scenario_run(root / "run", PAIRS_SCENARIO, pairs_traits, MESSAGES)
    return build_report([run], "md", root / "figs")


def figure(report: Report, name: str) -> FigureData:
    return next(f.data for f in report.figures if f.name == name)


def drawn(report: Report, name: str) -> Any:
    fig = next(f.figure for f in report.figures if f.name == name)
    fig.canvas.draw()
    return fig


def test_a_pairs_run_over_two_targets_has_one_scaling_figure_and_no_fanout(
    pairs_report: Report,
) -> None:
    names = [f.name for f in pairs_report.figures]
    assert [n for n in names if not n.startswith("timeseries-")] == [
        "latency-payload",
        "scaling-pairs",
        "latency-load",
        "delivered-offered",
        "latency-cdf",
    ]
    assert len([n for n in names if n.startswith("timeseries-")]) == 4  # one per cell
    assert [t.key for t in pairs_report.tables] == [
        "latency-pairs",
        "throughput-pairs",
        "cpu-pairs",
        "rss-pairs",
        "cells",
    ]
    for path in pairs_report.figure_files:
        assert path.stat().st_size > 5000, path


def test_scaling_figure_draws_a_line_per_target_with_a_point_per_pairs_value(
    pairs_report: Report,
) -> None:
    data = figure(pairs_report, "scaling-pairs")
    assert (data.rows, data.cols) == (1, 3)
    assert [p.ylabel for p in data.panels] == [
        "throughput (msg/s)",
        "broker CPU mean (cores)",
        "broker RSS max (MB)",
    ]
    for panel in data.panels:
        assert panel.kind == "lines" and panel.xlabel == "publisher-subscriber pairs"
        assert [s.label for s in panel.series] == ["mosquitto", "nats"]
        assert [s.xs for s in panel.series] == [[2.0, 10.0], [2.0, 10.0]]
    cpu = data.panel(0, 1)
    assert cpu.series[0].ys == pytest.approx([0.02, 0.1])
    assert [p.marks for p in cpu.series[1].points] == [(Mark.INVALID,), (Mark.SATURATED,)]
    assert data.marks == (Mark.SATURATED, Mark.INVALID)


def test_scaling_ticks_are_the_pairs_values(pairs_report: Report) -> None:
    fig = drawn(pairs_report, "scaling-pairs")
    for ax in fig.axes:
        assert ax.get_xscale() == "linear"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "10"]
        assert ax.get_ylim()[0] == 0


def test_latency_points_put_pairs_side_by_side_per_target_with_p50_and_p99(
    pairs_report: Report,
) -> None:
    data = figure(pairs_report, "latency-payload")
    (panel,) = data.panels
    assert (panel.kind, panel.title, panel.yscale) == ("points", "1 KiB", "log")
    assert panel.categories == ("mosquitto", "nats")
    assert [(s.label, s.stat) for s in panel.series] == [
        ("pairs 2", "p50"),
        ("pairs 2", "p99"),
        ("pairs 10", "p50"),
        ("pairs 10", "p99"),
    ]
    marks = {(s.label, p.x): p.marks for s in panel.series if s.stat == "p50" for p in s.points}
    assert marks == {
        ("pairs 2", "mosquitto"): (),
        ("pairs 2", "nats"): (Mark.INVALID,),
        ("pairs 10", "mosquitto"): (Mark.LATENCY_BOUND,),
        ("pairs 10", "nats"): (Mark.SATURATED,),
    }
    assert data.title == "Latency p50 and p99 by target and pairs"
    for p50, p99 in zip(panel.series[0].points, panel.series[1].points, strict=True):
        assert p50.y <= p99.y
        assert p50.low is None and p50.high is None  # one repeat: no interval is drawn
    assert data.note.startswith("One repeat per cell: no confidence intervals")
    assert data.sharey and data.width in (3.5, 7.0)
    fig = drawn(pairs_report, "latency-payload")
    assert not fig.axes[0].patches  # points, not bars


def test_cdf_sits_beside_its_tail_on_log_axes_computed_from_the_records(
    pairs_report: Report,
) -> None:
    data = figure(pairs_report, "latency-cdf")
    body, tail = data.panel(0, 0), data.panel(0, 1)
    assert (body.xscale, body.yscale, tail.xscale, tail.yscale) == ("log", "linear", "log", "log")
    assert [s.label for s in body.series] == [
        "mosquitto, pairs 2",
        "mosquitto, pairs 10 ‡",
        "nats, pairs 2 §",
        "nats, pairs 10 †",
    ]
    for b, t, deliveries in zip(body.series, tail.series, (80, 400, 80, 400), strict=True):
        assert b.ys[-1] == 1.0 and t.ys[0] == 1.0
        assert t.ys[-1] == pytest.approx(1 / deliveries)  # the slowest delivery stays visible
        assert b.xs == t.xs and b.xs == sorted(b.xs)
    # latency from the intended send time includes the 150 µs send lag of mosquitto at 10
    prompt, lagged = ([float(x) for x in s.xs] for s in body.series[:2])
    assert min(lagged) >= 0.35 > max(prompt)
    fig = drawn(pairs_report, "latency-cdf")
    styles = [ln.get_linestyle() for ln in fig.axes[0].lines]
    assert styles == ["-", ":", "-.", "--"]


def _plain_ms(text: str) -> bool:
    return re.fullmatch(r"\d+(\.\d+)?|\d{1,3}(,\d{3})+", text) is not None


@pytest.mark.parametrize(("name", "axis"), [("latency-payload", "y"), ("latency-cdf", "x")])
def test_log_axes_read_in_plain_milliseconds(pairs_report: Report, name: str, axis: str) -> None:
    fig = drawn(pairs_report, name)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    ticks = ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()
    shown = [t.get_text() for t in ticks if lo <= t.get_position()[axis == "y"] <= hi]
    assert len(shown) >= 2 and all(_plain_ms(t) for t in shown), shown
    assert {"0.2", "0.3", "0.5"} <= set(shown)


def test_tail_axis_reads_as_plain_fractions(pairs_report: Report) -> None:
    fig = drawn(pairs_report, "latency-cdf")
    tail = fig.axes[1]
    lo, hi = tail.get_ylim()
    shown = [t.get_text() for t in tail.get_yticklabels() if lo <= t.get_position()[1] <= hi]
    assert shown == ["0.01", "0.1", "1"]


@pytest.mark.parametrize("name", ["latency-payload", "scaling-pairs", "latency-cdf"])
def test_the_legend_sits_below_the_panels_and_covers_no_title_or_data(
    pairs_report: Report, name: str
) -> None:
    fig = drawn(pairs_report, name)
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    title = fig.get_suptitle()
    assert title and not box.overlaps(fig._suptitle.get_window_extent(renderer))
    for ax in fig.axes:
        assert ax.get_legend() is None
        assert not box.overlaps(ax.get_tightbbox(renderer)), ax.get_title()
        assert box.y1 < ax.get_window_extent(renderer).y0
    assert fig._suptitle.get_window_extent(renderer).x0 >= 0  # the title fits the width


@pytest.mark.parametrize(
    ("name", "marks"),
    [
        ("latency-payload", [Mark.SATURATED, Mark.LATENCY_BOUND, Mark.INVALID]),
        ("latency-cdf", [Mark.SATURATED, Mark.LATENCY_BOUND, Mark.INVALID]),
        ("scaling-pairs", [Mark.SATURATED, Mark.INVALID]),
    ],
)
def test_every_mark_drawn_has_a_legend_entry(
    pairs_report: Report, name: str, marks: list[Mark]
) -> None:
    fig = drawn(pairs_report, name)
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [t for t in texts if t[0] in "†‡§"] == [LEGEND[m] for m in marks]


def test_cli_table_report_and_figures_label_aggregates_identically(
    pairs_report: Report,
) -> None:
    cpu, rss = label("broker_cpu_cores_mean"), label("broker_rss_mb_max")
    assert (cpu, rss) == ("broker CPU mean (cores)", "broker RSS max (MB)")
    run = next(iter({f.parent for f in pairs_report.figure_files})).parent / "run"
    summaries = load_run(run).summaries
    headers = [c.header.replace("\n", " ") for c in wide_columns()]
    cells = next(t for t in pairs_report.tables if t.key == "cells")
    for name in (cpu, rss, label("throughput_msg_s"), label("latency_p99_us")):
        assert name in headers and name in cells.header
    scaling_labels = [p.ylabel for p in figure(pairs_report, "scaling-pairs").panels]
    assert scaling_labels[1:] == [cpu, rss]
    rows = results_view(summaries, 1000, wide=True).table.lines[-len(summaries) :]
    column = [row.plain.split()[headers.index(rss)] for row in rows]
    assert column == [f"{s.broker_rss_mb_max:.1f}" for s in summaries]


def test_no_figure_or_table_for_an_axis_that_does_not_vary(tmp_path: Path) -> None:
    one = {**PAIRS_SCENARIO, "targets": ["mosquitto"], "workload": {"pairs": [2]}}
    rep = build_report([scenario_run(tmp_path / "one", one, messages=5)], "md", tmp_path / "f")
    names = [f.name for f in rep.figures]
    assert names == ["latency-cdf", "timeseries-mosquitto-1KiB-2pairs-1000hz-qos0"]
    assert [t.key for t in rep.tables] == ["cells"]
    assert rep.tables[0].header[:3] == ["cell", "target", "n"]
    grow = {**one, "workload": {"pairs": [2, 10]}}
    rep = build_report([scenario_run(tmp_path / "grow", grow, messages=5)], "md", tmp_path / "g")
    assert [f.name for f in rep.figures if not f.name.startswith("timeseries")] == [
        "scaling-pairs",
        "latency-load",
        "delivered-offered",
        "latency-cdf",
    ]


def test_each_resource_profile_gets_a_row_of_panels(tmp_path: Path) -> None:
    scenario = {**PAIRS_SCENARIO, "resources": ["1cpu-2g", "2cpu-4g"]}
    run = scenario_run(tmp_path / "run", scenario, pairs_traits, messages=5)
    rep = build_report([run], "md", tmp_path / "figs")
    data = figure(rep, "scaling-pairs")
    assert (data.rows, data.cols, len(data.panels)) == (2, 3, 6)
    assert [p.title for p in data.panels] == ["resources 1cpu-2g"] * 3 + ["resources 2cpu-4g"] * 3
    assert all(s.xs == [2.0, 10.0] for p in data.panels for s in p.series)
    titles = [t.title for t in rep.tables if t.key.startswith("throughput-pairs")]
    assert titles == [
        "Throughput (msg/s) by target and pairs (resources 1cpu-2g)",
        "Throughput (msg/s) by target and pairs (resources 2cpu-4g)",
    ]
    assert len(drawn(rep, "scaling-pairs").axes) == 6


def test_runs_of_one_scenario_with_different_pairs_pool_into_one_line(tmp_path: Path) -> None:
    runs = [
        scenario_run(tmp_path / f"p{n}", {**PAIRS_SCENARIO, "workload": {"pairs": [n]}}, messages=5)
        for n in (2, 10)
    ]
    data = figure(build_report(runs, "md", tmp_path / "figs"), "scaling-pairs")
    assert [s.xs for s in data.panels[0].series] == [[2.0, 10.0], [2.0, 10.0]]


def test_a_fanout_run_draws_throughput_against_subscribers(tmp_path: Path) -> None:
    scenario = {
        "name": "fanout",
        "targets": ["nats"],
        "workload": {"topology": "fanout", "subscribers": [1, 4]},
    }
    rep = build_report([scenario_run(tmp_path / "run", scenario, messages=5)], "md", tmp_path / "f")
    assert [f.name for f in rep.figures][:2] == ["fanout-subscribers", "latency-cdf"]
    throughput = figure(rep, "fanout-subscribers").panel(0, 0)
    assert throughput.xlabel == "subscribers of the one publisher"
    assert throughput.series[0].xs == [1.0, 4.0]
    assert throughput.series[0].ys[1] > 3 * throughput.series[0].ys[0]  # deliveries fan out
    assert [t.key for t in rep.tables][:1] == ["throughput-subscribers"]


def test_a_wide_size_axis_is_drawn_on_a_log_axis_labelled_with_its_values(
    tmp_path: Path,
) -> None:
    scenario = {**PAIRS_SCENARIO, "workload": {"pairs": [1, 10, 100]}}
    rep = build_report([scenario_run(tmp_path / "run", scenario, messages=3)], "md", tmp_path / "f")
    assert figure(rep, "scaling-pairs").panels[0].xscale == "log"
    fig = drawn(rep, "scaling-pairs")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "10", "100"]


def test_a_manifest_without_the_resolved_scenario_takes_the_size_axis_from_its_cells() -> None:
    manifest = RunManifest.from_dict(
        {
            "schema_version": 1,
            "scenario": {"name": "hand-written"},
            "cells": [
                {"id": "1", "params": {"topology": "pairs", "target": "b"}},
                {"id": "2", "params": {"target": "a"}},
            ],
        }
    )
    matrix = Matrix.from_manifest(manifest)
    assert "pairs" in matrix.axes
    assert "publishers" not in matrix.axes and "subscribers" not in matrix.axes
    assert matrix.order["target"] == ("b", "a")


def test_tick_labels_are_plain_numbers() -> None:
    values = (0.1, 0.2, 0.5, 1.0, 2.0, 0.0005, 2000.0, 0.30000000000000004)
    assert [plain_number(v) for v in values] == [
        "0.1",
        "0.2",
        "0.5",
        "1",
        "2",
        "0.0005",
        "2,000",
        "0.3",
    ]


def test_crowded_matrix_ticks_are_thinned_but_the_largest_stays() -> None:
    assert thin_ticks([100, 110, 1000], log=False) == [100, 1000]
    assert thin_ticks([1, 2, 5, 10, 20, 50, 100], log=True) == [1, 2, 5, 10, 20, 50, 100]
    assert thin_ticks([500, 1000, 1010], log=False) == [500, 1010]


def test_legend_columns_fit_the_figure_width() -> None:
    long = [LEGEND[Mark.INVALID], LEGEND[Mark.SATURATED]]
    assert legend_columns(long, 5.5) == 1
    assert legend_columns(["a", "b", "c", "d", "e"], 11.0) == 4


def test_figures_draw_without_a_display(pairs_report: Report) -> None:
    fig = draw(figure(pairs_report, "scaling-pairs"))
    assert fig.get_size_inches()[0] == 7.0
