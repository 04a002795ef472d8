"""Paper-ready report output: CSV of one number per column, rounding, LaTeX that fits."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from report_aggs import paper_aggs

from mqbench.analysis.repeats import MeanCI
from mqbench.report.axes import ReportAxes
from mqbench.report.numbers import csv_pair, fmt_ci, fmt_value
from mqbench.report.render import render, slug
from mqbench.report.tables import build_tables
from mqbench.report.tidy import render_tidy_csv


def _rows() -> list[dict[str, str]]:
    text = render_tidy_csv(paper_aggs(), ReportAxes.inferred())
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_has_one_number_per_column_with_mean_half_width_and_n_apart() -> None:
    rows = _rows()
    assert len(rows) == 12
    first = rows[0]
    assert first["target"] == "mosquitto" and first["payload_bytes"] == "64"
    assert first["pairs"] == "2" and first["repeats"] == "3"
    for key, value in first.items():
        if key.endswith(("_mean", "_ci95", "_n")) or key in ("offered_msg_s", "repeats"):
            assert value == "" or float(value) == float(value), key  # a plain number
            assert "±" not in value and "," not in value and " " not in value
    assert first["p50_ms_n"] == "3" and first["p50_ms_ci95"] != ""


def test_csv_marks_stand_in_their_own_column_with_their_meaning() -> None:
    rows = {r["cell"]: r for r in _rows()}
    saturated = rows["rabbitmq-mqtt-1024B-10pairs-100hz-qos0"]
    assert saturated["marks"] == "†" and "generator saturated" in saturated["mark_notes"]
    bound = rows["nats-64B-10pairs-100hz-qos0"]
    assert bound["marks"] == "‡" and "†" not in bound["p50_ms_mean"]
    assert rows["nats-1024B-10pairs-100hz-qos0"]["marks"] == "¶"
    assert rows["mosquitto-64B-2pairs-100hz-qos0"]["marks"] == ""


@pytest.mark.parametrize(
    ("mean", "ci", "text", "pair"),
    [
        (0.0675, 0.20, "0.07 ± 0.20", ("0.07", "0.20")),
        (1950.3, 12.0, "1,950 ± 12", ("1950", "12")),
        (0.0312, 1.6e-17, "0.0312 ± 0", ("0.03120", "0")),
        (0.02667, None, "0.0267", ("0.02667", "")),
        (62.5, 6.4, "62.5 ± 6.4", ("62.5", "6.4")),
        (123456.0, 2345.0, "123,500 ± 2,300", ("123500", "2300")),
    ],
)
def test_numbers_keep_significant_digits_and_never_print_float_noise(
    mean: float, ci: float | None, text: str, pair: tuple[str, str]
) -> None:
    m = MeanCI(2, mean, None, ci)
    assert fmt_ci(m) == text
    assert csv_pair(m) == pair


def test_a_value_without_interval_has_three_significant_digits() -> None:
    assert fmt_value(0.000123456) == "0.000123"
    assert fmt_value(1234.4) == "1,234"
    assert fmt_value(None) == "-"


def test_latex_labels_name_the_facet_parameters_not_positions() -> None:
    tables = build_tables(paper_aggs(), ReportAxes.inferred())
    assert [t.key for t in tables] == [
        "latency-payload-pairs-2",
        "latency-payload-pairs-10",
        "throughput-pairs-64b",
        "throughput-pairs-1kib",
        "cpu-pairs-64b",
        "cpu-pairs-1kib",
        "rss-pairs-64b",
        "rss-pairs-1kib",
        "cells",
    ]
    assert slug("cpu-pairs", "resources 1cpu-2g, 64 B") == "cpu-pairs-resources-1cpu-2g-64b"


def test_latex_tables_scale_to_the_line_and_notes_cite_no_docs() -> None:
    tables = build_tables(paper_aggs(), ReportAxes.inferred())
    narrow, wide = render(tables, "latex"), render(tables, "latex-wide")
    assert narrow.count("\\begin{table}") == len(tables) and "table*" not in narrow
    assert wide.count("\\begin{table*}") == len(tables)
    assert narrow.count("\\mqbfit{\\begin{tabular}") == len(tables)
    assert "docs/" not in narrow and "summary.json" not in narrow
