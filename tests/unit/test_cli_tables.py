"""The results table people read: it fits the terminal by moving and leaving out, never by
cutting; its marks point to numbered footnotes; JSON and CSV for programs; one printing
path for every analysis."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest

from mqbench.analysis.api import RunAnalysis
from mqbench.analysis.summary import CellSummary, LatencyStats, read_summary_json
from mqbench.analysis.verdict import InvalidKind, InvalidReason
from mqbench.cli.columns import Column, layout, wrap
from mqbench.cli.output import View, print_analysis
from mqbench.cli.tables import results_view, wide_columns

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report"


def base() -> CellSummary:
    path = next(FIXTURE.glob("*/cells/alpha-64B-1pairs-1000hz-qos0/summary.json"))
    return dataclasses.replace(read_summary_json(path), latency_verdict="ok")


def lat(p50_ms: float, p99_ms: float) -> LatencyStats:
    us = p50_ms * 1000
    return LatencyStats(100, us / 2, us, us, us, p99_ms * 1000, p99_ms * 1000, us * 5, us, 1.0)


def quickstart() -> list[CellSummary]:
    s = base()
    return [
        dataclasses.replace(s, cell_id="nats-1KiB-20pairs-10hz-qos0", latency=lat(0.512, 1.23)),
        dataclasses.replace(s, cell_id="zenoh-1KiB-20pairs-10hz-qos0", latency=lat(0.61, 2.5)),
    ]


def big() -> list[CellSummary]:
    """Long ids and wide numbers: what a paper run at scale prints."""
    s = base()
    return [
        dataclasses.replace(
            s,
            cell_id=f"tbmq-standalone-1KiB-{n}pairs-10hz-qos1",
            sent=12_345_678,
            received=12_345_001,
            loss_pct=0.00548,
            throughput_msg_s=102_880.5,
            latency=lat(123.456, 4567.8),
            broker_cpu_cores_mean=1.97,
            broker_rss_mb_max=12_345.6,
            invalid_reasons=[InvalidReason(InvalidKind.BROKER_EXITED, "the broker exited")],
            valid=False,
        )
        for n in (10_000, 20_000)
    ]


def plain(summaries: list[CellSummary], width: int, wide: bool = False) -> list[str]:
    return [line.plain for line in results_view(summaries, width, wide).lines(width)]


def test_the_quickstart_table_fits_100_columns_with_every_compact_column() -> None:
    view = results_view(quickstart(), 100)
    assert view.table.width <= 100
    assert not view.table.stacked and not view.table.dropped
    header = " ".join(line.plain for line in view.table.lines[:2])
    for word in ("cell", "sent", "recv", "loss", "throughput", "p50", "p99", "CPU", "RSS"):
        assert word in header
    assert view.table.lines[-1].plain.startswith("zenoh-1KiB-20pairs-10hz-qos0 ")


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("width", [40, 60, 80, 100, 120, 200])
def test_no_width_cuts_a_cell_id_or_a_number(width: int, wide: bool) -> None:
    lines = plain(big(), width, wide)
    text = "\n".join(lines)
    assert "…" not in text
    for cell_id in ("tbmq-standalone-1KiB-10000pairs-10hz-qos1", "-20000pairs-"):
        assert any(cell_id in line for line in lines)
    numbers = {"12,345,678", "12,345,001", "0.005", "102,880", "123", "4,568"}
    for number in numbers:
        assert number in text, (number, width)


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_compact_table_fits_the_width_when_the_cell_ids_do(width: int) -> None:
    view = results_view(big(), width)
    assert view.table.width <= width
    assert all(line.cell_len <= width for line in view.lines(width))


def test_a_table_too_wide_puts_the_cell_id_on_a_line_of_its_own() -> None:
    view = results_view(big(), 90)
    assert view.table.stacked and not view.table.dropped
    lines = [line.plain for line in view.table.lines]
    row = lines.index("tbmq-standalone-1KiB-10000pairs-10hz-qos1")
    assert lines[row + 1].startswith("  ") and "12,345,678" in lines[row + 1]


def test_optional_columns_are_left_out_and_named_before_a_value_would_be_cut() -> None:
    view = results_view(big(), 60)
    assert view.table.dropped == ["RSS (MB)", "CPU (cores)"]
    note = "not shown at this width: RSS (MB), CPU (cores)"
    assert any(note in line for line in plain(big(), 60))


def test_a_layout_that_cannot_fit_prints_long_lines_rather_than_cutting() -> None:
    rows = [["a-very-long-cell-identifier-that-is-longer-than-the-terminal", "1,234,567"]]
    out = layout([Column("cell", "left"), Column("sent")], rows, 20)
    text = [line.plain for line in out.lines]
    assert rows[0][0] in text and any("1,234,567" in line for line in text)
    assert out.width > 20


def test_prose_wraps_at_spaces_and_never_splits_a_word() -> None:
    from rich.text import Text

    lines = wrap(Text("one two three a-cell-id-longer-than-a-line four"), 12, 2)
    assert [line.plain for line in lines] == [
        "one two",
        "  three",
        "  a-cell-id-longer-than-a-line",
        "  four",
    ]


def test_every_mark_is_a_numbered_footnote_under_the_table() -> None:
    s = base()
    marked = dataclasses.replace(
        s,
        cell_id="c1",
        generator_saturated=True,
        invalid_reasons=[
            InvalidReason(InvalidKind.GENERATOR_SATURATED, "30% of sends late"),
            InvalidReason(InvalidKind.BROKER_EXITED, "the broker exited (code 1)"),
        ],
        valid=False,
        latency_verdict="generator-bound",
        latency_reason="send lag p99 1 ms is 40% of latency p99",
        backlog_at_drain_end=True,
        last_delivery_s=2.5,
        params={**s.params, "drain_s": 3},
    )
    clean = dataclasses.replace(s, cell_id="c2")
    lines = plain([marked, clean], 200)
    assert next(line for line in lines if line.startswith("c1 ")).endswith("†1 ‡2 §3 ¶4")
    assert next(line for line in lines if line.startswith("c2 ")).endswith("ok")
    notes = [line for line in lines if line[:1] in "†‡§¶"]
    assert notes == [
        "†1 c1: generator saturated: 30% of sends late",
        "‡2 c1: latency generator-bound: send lag p99 1 ms is 40% of latency p99",
        "§3 c1: invalid (broker_exited): the broker exited (code 1)",
        notes[3],
    ]
    assert notes[3].startswith("¶4 c1: deliveries were still arriving when the 3 s drain ended")


def test_the_wide_table_has_every_column_with_the_reports_labels() -> None:
    headers = [c.header.replace("\n", " ") for c in wide_columns()]
    for name in ("unsent", "dup", "p95 (ms)", "max (ms)", "send lag p99 (ms)"):
        assert name in headers
    assert "broker CPU mean (cores)" in headers and "generator CPU mean (cores)" in headers


def test_json_and_csv_give_programs_every_summary(capsys: pytest.CaptureFixture[str]) -> None:
    analysis = RunAnalysis(quickstart())
    print_analysis(analysis, "results/x", View("json"))
    data = json.loads(capsys.readouterr().out)
    assert data["results"] == "results/x"
    assert [c["cell_id"] for c in data["cells"]] == [s.cell_id for s in quickstart()]
    assert data["cells"][0]["latency"]["p50_us"] == pytest.approx(512.0)
    print_analysis(analysis, "results/x", View("csv"))
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["cell_id"] for r in rows] == [s.cell_id for s in quickstart()]
    assert float(rows[0]["latency_p50_us"]) == pytest.approx(512.0)


def test_a_local_and_a_remote_analysis_print_the_same_table_and_notes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mqbench.analysis import api, remote
    from mqbench.cli import app
    from mqbench.records.hadoop_fs import parse_location

    backlog = dataclasses.replace(
        base(), cell_id="c1", backlog_at_drain_end=True, last_delivery_s=1.0
    )
    analysis = RunAnalysis([backlog])
    monkeypatch.setattr(api, "analyze_results", lambda *a, **k: analysis)
    monkeypatch.setattr(
        remote,
        "analyze_remote",
        lambda folder, **k: remote.RemoteAnalysis(analysis, folder, kept=["summary.parquet"]),
    )
    app._analyze(Path("/tmp/run"), "/tmp/run", None, {}, View())
    local = capsys.readouterr().out
    uri = parse_location("hdfs://nn:8020/runs/x")
    app._analyze(uri, str(uri), None, {}, View())
    far = capsys.readouterr().out
    assert "¶1 c1: deliveries were still arriving" in local
    assert far.startswith(local)  # the same table and footnotes, plus the URI's note
    assert "summary.parquet existed: not overwritten" in far


def _fake_run(tmp_path: Path, saturated: bool) -> object:
    from mqbench.records.cell_entry import CellEntry, GeneratorVerdict
    from mqbench.workload.run import RunResult

    verdict = GeneratorVerdict(saturated=saturated, reasons=("late",) if saturated else ())
    cell = CellEntry(id="nats-1KiB-2pairs-10hz-qos0", status="completed", generator=verdict)
    return RunResult(tmp_path / "run", "completed", [cell])


@pytest.mark.parametrize(("saturated", "code"), [(True, 4), (False, 0)])
def test_run_strict_exits_4_when_a_cell_is_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saturated: bool, code: int
) -> None:
    from typer.testing import CliRunner

    from mqbench.cli.app import app
    from mqbench.workload import run

    monkeypatch.setattr(run, "run_scenario", lambda *a, **k: _fake_run(tmp_path, saturated))
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ntargets: [nats]\nworkload: {pairs: 2}\n")
    args = ["run", str(scenario), "--no-analyze", "--out", str(tmp_path)]
    assert CliRunner().invoke(app, args).exit_code == 0  # without --strict: the results count
    result = CliRunner().invoke(app, [*args, "--strict"])
    assert result.exit_code == code, result.output
    if saturated:
        assert "--strict: cell 'nats-1KiB-2pairs-10hz-qos0' is invalid" in result.output


def test_run_format_json_keeps_stdout_for_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from mqbench.cli.app import app
    from mqbench.workload import run

    monkeypatch.setattr(run, "run_scenario", lambda *a, **k: _fake_run(tmp_path, False))
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ntargets: [nats]\nworkload: {pairs: 2}\n")
    args = ["run", str(scenario), "--no-analyze", "--format", "json", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["status"] == "completed"
    assert data["states"] == [
        {"cell_id": "nats-1KiB-2pairs-10hz-qos0", "status": "completed", "error": None}
    ]
    assert "results: " in result.stderr


def test_an_interrupted_cell_is_marked_once() -> None:
    reason = InvalidReason(InvalidKind.INTERRUPTED, "stopped by SIGTERM 3.2 s into the window")
    now = dataclasses.replace(
        base(), cell_id="c1", status="interrupted", valid=False, invalid_reasons=[reason]
    )
    older = dataclasses.replace(base(), cell_id="c2", status="interrupted")
    lines = plain([now, older], 200)
    assert next(line for line in lines if line.startswith("c1 ")).endswith("§1")
    assert next(line for line in lines if line.startswith("c2 ")).endswith("!2")
    assert "§1 c1: invalid (interrupted): stopped by SIGTERM 3.2 s into the window" in lines
