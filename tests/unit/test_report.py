"""Report tables (golden files), figures and bad-input handling."""

from __future__ import annotations

import html
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import intended, make_cell, records, rich_run, sends_ok, write_manifest

from mqbench.analysis.plan import plan_cell
from mqbench.analysis.repeats import METRICS, MeanCI, RepeatAggregate, mean_ci
from mqbench.cli.report_cmd import compare, report
from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import CellEntry
from mqbench.report import build_report
from mqbench.report.axes import ReportAxes
from mqbench.report.cdf import latency_hist_from_records
from mqbench.report.figures import latency_by_qos, scaling
from mqbench.report.render import latex_escape, render
from mqbench.report.tables import build_tables

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "report"
FIXTURE = HERE / "20260101T000000Z-fixture"


@pytest.mark.parametrize(("fmt", "ext"), [("md", "md"), ("latex", "tex"), ("csv", "csv")])
def test_tables_of_the_fixture_run_match_the_golden_files(fmt: str, ext: str) -> None:
    text = build_report([FIXTURE], fmt).text
    assert text == (HERE / f"golden.{ext}").read_text()


def test_html_report_is_one_self_contained_page_with_figures_and_run_metadata() -> None:
    rep = build_report([FIXTURE], "html")
    page = rep.text
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<table") == len(rep.tables) == 5
    assert rep.figures and page.count("<svg") == len(rep.figures)
    for fig in rep.figures:
        assert f'id="fig-{fig.name}"' in page
    assert "<script" not in page and "src=" not in page and "<link" not in page
    assert "http://" not in page.replace("http://www.w3.org", "")
    manifest = json.loads((FIXTURE / "manifest.json").read_text())
    assert "Run 20260101T000000Z-fixture" in page and "resolved scenario" in page
    assert html.escape(str(manifest["scenario"]["name"])) in page
    assert "fewer than 3 repeats" in page


def test_fixture_report_has_ci_and_all_three_marks() -> None:
    rep = build_report([FIXTURE], "md")
    titles = [t.title for t in rep.tables]
    assert titles == [
        "Latency p50 / p95 (ms) by target and pairs",
        "Throughput (msg/s) by target and pairs",
        "Broker CPU mean (cores) by target and pairs",
        "Broker RSS max (MB) by target and pairs",
        "All cells",
    ]
    thr = next(t for t in rep.tables if t.key == "throughput-pairs")
    assert thr.rows == [["alpha", "1,000 ± 0", "2,000 ± 0"], ["beta", "1,000 ± 0 §", "1,950 ± 0 †"]]
    assert [n[0] for n in thr.notes] == ["†", "§"]
    lat = next(t for t in rep.tables if t.key == "latency-pairs")
    assert lat.rows[0][2].endswith("‡") and [n[0] for n in lat.notes[1:]] == ["†", "‡", "§"]


def test_derived_counts_of_a_pairs_run_split_no_table() -> None:
    rep = build_report([FIXTURE], "md")
    text = " ".join(t.title + " ".join(t.header) for t in rep.tables)
    assert "publishers" not in text and "subscribers" not in text
    assert rep.axes.varying(rep.aggregates) == ["target", "pairs"]


def _qos_aggs(faults: object = None, fanout: bool = False) -> list[RepeatAggregate]:
    """Targets a, b x QoS 0, 1 (or, with ``fanout``, x 10, 20 subscribers); b's second
    cell is saturated."""
    out = []
    for i, (target, qos, p50) in enumerate(
        [("a", 0, 100.0), ("a", 1, 300.0), ("b", 0, 200.0), ("b", 1, 900.0)]
    ):
        metrics = {name: MeanCI(0, None, None, None) for name in METRICS}
        metrics["latency_min_us"] = mean_ci([p50 / 2])
        metrics["latency_p50_us"] = mean_ci([p50])
        metrics["latency_p95_us"] = mean_ci([p50 * 3])
        metrics["loss_pct"] = mean_ci([5.0 if qos == 0 else 0.0])
        metrics["throughput_msg_s"] = mean_ci([100.0 * (i + 1)])
        params: dict[str, object] = {"target": target, "qos": qos, "faults": faults}
        if fanout:
            subscribers = 10 * (qos + 1)
            params = {"target": target, "topology": "fanout", "subscribers": subscribers}
            params |= {"pairs": 1, "publishers": 1}
        out.append(RepeatAggregate(f"c{i}", i, params, [0], [f"c{i}"], metrics, i == 3, i != 3))
    return out


def test_qos_table_appears_when_qos_varies_and_names_faults() -> None:
    tables = build_tables(_qos_aggs({"type": "reset_peer", "mttf": "10s", "mttr": "2s"}))
    qos = next(t for t in tables if t.key == "qos")
    assert qos.title.endswith("under faults")
    assert qos.header == ["target", "QoS 0", "QoS 1"]
    assert qos.rows[0] == ["a", "5.00 %; 0.100 / 0.300", "0 %; 0.300 / 0.900"]
    assert qos.rows[1][2].endswith("†")


def test_latex_escapes_specials_and_maps_plus_minus_and_dagger() -> None:
    assert latex_escape("a_b & 5% ± 1 †") == r"a\_b \& 5\% $\pm$ 1 \textsuperscript{\dag}"
    out = render(build_tables(_qos_aggs()), "latex")
    assert out.count("\\begin{table}") == out.count("\\end{table}") >= 2


def test_qos_and_fanout_figures_have_paper_axes_and_mark_saturation() -> None:
    axes = ReportAxes.inferred()
    (qos_fig,) = latency_by_qos(_qos_aggs(), axes)
    (panel,) = qos_fig.panels
    assert (panel.kind, panel.xlabel, panel.ylabel, panel.yscale) == (
        "points",
        "target",
        "latency (ms)",
        "log",
    )
    assert panel.categories == ("a", "b")
    assert [(s.label, s.stat) for s in panel.series] == [
        ("QoS 0", "p50"),
        ("QoS 0", "p99"),
        ("QoS 1", "p50"),
        ("QoS 1", "p99"),
    ]
    assert [p.marks for s in panel.series[:3:2] for p in s.points] == [(), (), (), ("†",)]
    (fan,) = scaling(_qos_aggs(fanout=True), axes, "subscribers")
    assert fan.name == "fanout-subscribers"
    throughput = fan.panel(0, 0)
    assert (throughput.xlabel, throughput.ylabel) == (
        "subscribers of the one publisher",
        "throughput (msg/s)",
    )
    line_b = throughput.series[1]
    assert line_b.xs == [10.0, 20.0] and [p.marks for p in line_b.points] == [(), ("†",)]


def test_report_writes_png_and_pdf_figures_with_expected_axes(tmp_path: Path) -> None:
    root = rich_run(tmp_path / "run")
    rep = build_report([root], "md", tmp_path / "figs")
    names = [f.name for f in rep.figures if not f.name.startswith("timeseries-")]
    assert names == ["scaling-pairs", "latency-load", "delivered-offered", "latency-cdf"]
    drawn = [f.name for f in rep.figures]
    assert sorted(p.name for p in rep.figure_files) == sorted(
        f"{n}.{ext}" for n in drawn for ext in ("png", "pdf")
    )
    for path in rep.figure_files:
        data = path.read_bytes()
        magic = b"\x89PNG" if path.suffix == ".png" else b"%PDF"
        assert data.startswith(magic) and len(data) > 5000, path
    scaling_fig = rep.figures[0].figure
    assert [ax.get_ylabel() for ax in scaling_fig.axes] == [
        "throughput (msg/s)",
        "broker CPU mean (cores)",
        "broker RSS max (MB)",
    ]
    assert {ax.get_xlabel() for ax in scaling_fig.axes} == {"publisher-subscriber pairs"}
    cdf, tail = rep.figures[names.index("latency-cdf")].figure.axes
    assert cdf.get_xlabel() == "latency from intended send time (ms)"
    assert (cdf.get_ylabel(), cdf.get_xscale()) == ("fraction of deliveries ≤ latency", "log")
    assert (tail.get_yscale(), tail.get_xscale()) == ("log", "log")
    labels = [ln.get_label() for ln in cdf.lines]
    assert labels == ["pairs 4 †", "pairs 2"]
    assert cdf.lines[0].get_linestyle() == "--"
    from matplotlib.image import imread

    assert imread(rep.figure_files[0]).shape[0] > 100


def test_cdf_latencies_come_from_the_records_via_the_schedule(tmp_path: Path) -> None:
    rows = [(intended(0, s) + 2_550, (s + 1) * 10, 0, 0, s) for s in range(100)]
    cell = make_cell(tmp_path, deliveries=[records(rows)], sends=[sends_ok(1, range(100))])
    plan = plan_cell(CellEntry.from_dict(cell), tmp_path / "cells" / "c0")
    values, counts = latency_hist_from_records(plan, chunk_records=7)
    # floor((2550 + 100 * (s+1) * 10) / 100) = 25 + 10 * (s + 1)
    assert values.tolist() == [25 + 10 * (s + 1) for s in range(100)]
    assert np.all(counts == 1)


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(report)
    app.command()(compare)
    return app


def test_unanalysed_run_is_analysed_with_numpy_and_noted(tmp_path: Path) -> None:
    root = rich_run(tmp_path / "run")
    out = tmp_path / "report.md"
    result = CliRunner().invoke(_cli(), ["report", str(root), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "analysed 2 cell(s) with the numpy engine" in result.stderr
    assert (root / "cells" / "pairs" / "summary.json").exists()
    assert out.read_text().startswith("# mqbench report")


def test_mixed_scenarios_are_refused_unless_allowed(tmp_path: Path) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    shutil.copytree(FIXTURE, a)
    shutil.copytree(FIXTURE, b)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["scenario"]["name"] = "other"
    (b / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(AnalysisError, match=r"different scenarios \(other, report-fixture\)"):
        build_report([a, b])
    rep = build_report([a, b], allow_mixed=True)
    cells = next(t for t in rep.tables if t.key == "cells")
    assert cells.header[2] == "scenario"
    assert cells.rows[0][0].startswith("report-fixture/")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("no-manifest", "no manifest.json"),
        ("version", "schema version 7"),
        ("bad-summary", "unreadable summary"),
    ],
)
def test_bad_result_folders_are_explained_without_traceback(
    tmp_path: Path, setup: str, message: str
) -> None:
    root = tmp_path / "run"
    root.mkdir()
    if setup == "version":
        write_manifest(root, [], version=7)
    elif setup == "bad-summary":
        cell = make_cell(root, deliveries=[], sends=[])
        write_manifest(root, [cell])
        (root / "cells" / "c0" / "summary.json").write_text('{"schema_version": 2, "cell')
    result = CliRunner().invoke(_cli(), ["report", str(root)])
    assert result.exit_code == 1
    assert "error:" in result.stderr and "Traceback" not in result.output
    import re

    assert re.search(message, result.stderr.replace("\n", "")), result.stderr


def test_unknown_format_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["report", str(FIXTURE), "--format", "docx"])
    assert result.exit_code == 2
    assert "choose one of md, latex, latex-wide, csv, html" in result.stderr


def test_latency_bound_cells_are_marked_in_latency_tables_only() -> None:
    aggs = _qos_aggs()
    aggs[0] = RepeatAggregate(**{**aggs[0].__dict__, "any_latency_bound": True})
    tables = build_tables(aggs)
    qos = next(t for t in tables if t.key == "qos")
    assert qos.rows[0][1] == "5.00 %; 0.100 / 0.300 ‡"
    assert not qos.rows[0][2].endswith("‡")
    assert any(n.startswith("‡ latency generator-bound") for n in qos.notes)
    cells = next(t for t in tables if t.key == "cells")
    row = cells.rows[0]
    assert row[cells.header.index("p50 (ms)")].endswith("‡")
    assert not row[cells.header.index("throughput (msg/s)")].endswith("‡")
    assert latex_escape("1 ‡") == r"1 \textsuperscript{\ddag}"


def test_loss_with_a_backlog_at_the_drain_end_is_marked_on_loss_values_only() -> None:
    aggs = _qos_aggs()
    aggs[0] = RepeatAggregate(**{**aggs[0].__dict__, "any_backlog": True})
    tables = build_tables(aggs)
    qos = next(t for t in tables if t.key == "qos")
    assert qos.rows[0][1].endswith("¶")
    assert not qos.rows[0][2].endswith("¶")
    assert any(n.startswith("¶ the broker was still delivering") for n in qos.notes)
    cells = next(t for t in tables if t.key == "cells")
    row = cells.rows[0]
    assert row[cells.header.index("loss (%)")].endswith("¶")
    assert not row[cells.header.index("p50 (ms)")].endswith("¶")
    assert not row[0].endswith("¶")  # the cell id: the other numbers are not in question
    assert latex_escape("99.9 ¶") == r"99.9 \textsuperscript{\P}"
