"""Figures sized and typeset for papers: widths, fonts, TrueType PDFs, intervals, load charts."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report_aggs import paper_aggs

from mqbench.analysis.repeats import RepeatAggregate
from mqbench.report.axes import ReportAxes
from mqbench.report.draw import MIN_FONT_PT, NamedFigure, draw, save_figure
from mqbench.report.figures import build_figures, ci_note, resources
from mqbench.report.plotdata import FigureData


@pytest.fixture(scope="module")
def figures() -> dict[str, FigureData]:
    aggs = paper_aggs()
    return {f.name: f for f in build_figures(aggs, [(a, []) for a in aggs], ReportAxes.inferred())}


def _texts(fig: Any) -> list[Any]:
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_text().strip() and t.get_visible()]


def test_every_figure_is_one_or_two_columns_wide(figures: dict[str, FigureData]) -> None:
    assert set(figures) >= {"latency-payload", "latency-load-1", "delivered-offered-1"}
    for name, data in figures.items():
        fig = draw(data)
        assert fig.get_size_inches()[0] in (3.5, 7.0), name
        assert fig.get_size_inches()[1] < 9.0, name


def test_text_is_legible_at_print_size(figures: dict[str, FigureData]) -> None:
    for data in figures.values():
        fig = draw(data)
        fig.canvas.draw()
        sizes = [t.get_fontsize() for t in _texts(fig)]
        assert sizes and min(sizes) >= MIN_FONT_PT and max(sizes) <= 10, data.name


def test_pdfs_embed_truetype_fonts_never_type3(
    figures: dict[str, FigureData], tmp_path: Path
) -> None:
    data = figures["latency-payload"]
    (pdf,) = [p for p in save_figure(NamedFigure(data, draw(data)), tmp_path) if p.suffix == ".pdf"]
    raw = pdf.read_bytes()
    assert b"/Type3" not in raw
    assert b"/CIDFontType2" in raw or b"/Subtype /TrueType" in raw  # TrueType outlines


def test_latency_points_carry_the_confidence_interval_over_repeats(
    figures: dict[str, FigureData],
) -> None:
    data = figures["latency-payload"]
    assert data.sharey and len(data.panels) == 2
    for panel in data.panels:
        for series in panel.series:
            for p in series.points:
                assert p.low is not None and p.high is not None and p.low < p.y < p.high
    assert data.note == "Error bars: 95 % confidence interval of the mean over repeats (n = 3)."


def test_load_charts_span_the_offered_load_and_draw_the_ideal_line(
    figures: dict[str, FigureData],
) -> None:
    (latency,) = figures["latency-load-1"].panels
    assert latency.xlabel == "offered load (msg/s)" and latency.yscale == "log"
    assert {s.stat for s in latency.series} == {"p50", "p99"}
    assert all(s.xs == [200.0, 1000.0] for s in latency.series)
    (delivered,) = figures["delivered-offered-1"].panels
    assert delivered.ideal and delivered.ylabel == "delivered (msg/s)"
    assert [s.label for s in delivered.series] == ["mosquitto", "nats", "rabbitmq-mqtt"]


def _only(aggs: list[RepeatAggregate], **fixed: Any) -> list[RepeatAggregate]:
    return [a for a in aggs if all(a.params[k] == v for k, v in fixed.items())]


def test_resources_are_drawn_along_any_axis_not_only_pairs() -> None:
    aggs = _only(paper_aggs(), pairs=2)  # payload and target vary, pairs does not
    names = [f.name for f in build_figures(aggs, [], ReportAxes.inferred())]
    assert "resources-payload" in names and not any(n.startswith("scaling") for n in names)
    (fig,) = resources(aggs, ReportAxes.inferred())
    assert [p.ylabel for p in fig.panels] == [
        "broker CPU mean (cores)",
        "broker RSS max (MB)",
        "generator CPU mean (cores)",
    ]
    assert fig.panels[0].xlabel == "payload" and fig.panels[0].series[0].xs == [64.0, 1024.0]
    (by_target,) = resources(_only(aggs, payload_bytes=64), ReportAxes.inferred())
    assert by_target.name == "resources-target" and by_target.panels[0].kind == "points"


def test_too_few_repeats_are_said_in_the_figure_note() -> None:
    one = [dataclasses.replace(a, repeats=[0]) for a in paper_aggs(repeats=1)]
    assert ci_note(one).startswith("One repeat per cell: no confidence intervals")
    two = paper_aggs(repeats=2)
    assert "Under 3 repeats the intervals are very wide" in ci_note(two)
