"""A gate that cannot pass on nothing: no match, other scenarios, missing cells and
differing settings; every exit writes the requested output; JUnit and Markdown; the
scenario's own thresholds."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from mqbench.analysis.compare import Options, compare_aggregates, compare_runs, parse_thresholds
from mqbench.analysis.compare_settings import differences
from mqbench.analysis.repeats import METRICS, MeanCI, RepeatAggregate, mean_ci
from mqbench.cli.report_cmd import compare

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "20260101T000000Z-fixture"
ALLOW = ["--allow-invalid", "--allow-generator-bound"]  # the fixture has †, ‡ and § cells


def agg(cell: str, params: dict[str, Any] | None = None, **values: list[float]) -> RepeatAggregate:
    metrics = {name: MeanCI(0, None, None, None) for name in METRICS}
    for name, xs in values.items():
        metrics[name] = mean_ci(xs)
    return RepeatAggregate(cell, 0, params or {"target": "t"}, [0], [cell], metrics, False, True)


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(compare)
    app.command("noop")(lambda: None)  # two commands: `compare` stays a subcommand
    return app


def run(*args: str) -> Any:
    return CliRunner().invoke(cli(), ["compare", *args])


def copy(tmp_path: Path, name: str, edit: Any = None, cells: Any = None) -> Path:
    """The fixture run under another folder; ``edit`` changes its manifest, ``cells``
    each summary."""
    folder = tmp_path / name
    shutil.copytree(FIXTURE, folder)
    if edit is not None:
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text())
        edit(manifest)
        path.write_text(json.dumps(manifest))
    for summary in folder.glob("cells/*/summary.json") if cells is not None else ():
        data = json.loads(summary.read_text())
        cells(data)
        summary.write_text(json.dumps(data))
    return folder


def renamed(new: str) -> Any:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["scenario"]["name"] = new

    return edit


def unrelated(manifest: dict[str, Any]) -> None:
    """Another scenario whose cells have other ids (e.g. the payload changed)."""
    manifest["scenario"]["name"] = "other"
    for cell in manifest["cells"]:
        cell["id"] = cell["id"].replace("64B", "1KiB")


def test_no_matching_cell_is_a_refusal_not_a_pass() -> None:
    res = compare_aggregates([agg("a")], [agg("b")], parse_thresholds(None))
    assert res.matched == 0 and res.exit_code == 4 and res.verdict == "refused"
    assert [p.kind for p in res.problems] == ["no_match"]
    assert "baseline: a; current: b" in res.problems[0].message


def test_two_unrelated_runs_never_exit_0_and_the_json_is_written(tmp_path: Path) -> None:
    def one_kib(data: dict[str, Any]) -> None:
        data["cell_id"] = data["cell_id"].replace("64B", "1KiB")

    other = copy(tmp_path, "other", unrelated, cells=one_kib)
    for cell in (FIXTURE / "cells").iterdir():
        shutil.move(other / "cells" / cell.name, other / "cells" / cell.name.replace("64B", "1KiB"))
    out = tmp_path / "compare.json"
    result = run(
        str(FIXTURE), str(other), *ALLOW, "--allow-mixed", "--format", "json", "--out", str(out)
    )
    assert result.exit_code == 4, result.output
    data = json.loads(out.read_text())
    assert data["verdict"] == "refused" and data["exit_code"] == 4
    assert [p["kind"] for p in data["problems"]] == ["no_match"]
    assert result.stdout.splitlines()[-1].startswith("REFUSED:")  # the text verdict too


def test_runs_of_different_scenarios_are_refused_unless_mixing_is_allowed(tmp_path: Path) -> None:
    other = copy(tmp_path, "renamed", renamed("other-scenario"))
    res = compare_runs(FIXTURE, other, options=Options(True, True))
    assert [p.kind for p in res.problems] == ["scenario_differs"] and res.exit_code == 4
    assert res.scenarios == ("report-fixture", "other-scenario")
    allowed = compare_runs(FIXTURE, other, options=Options(True, True, allow_mixed=True))
    assert allowed.problems == [] and allowed.exit_code == 0


def test_a_missing_cell_fails_only_when_asked() -> None:
    base = [agg("a", throughput_msg_s=[100.0]), agg("gone", throughput_msg_s=[100.0])]
    cur = [agg("a", throughput_msg_s=[100.0])]
    thresholds = parse_thresholds("throughput=-5%")
    assert compare_aggregates(base, cur, thresholds).exit_code == 0
    strict = compare_aggregates(base, cur, thresholds, fail_on_missing=True)
    assert strict.exit_code == 4 and [p.kind for p in strict.problems] == ["missing"]
    assert "1 cell(s) in one run only (gone)" in strict.problems[0].message


def test_a_metric_without_a_value_fails_with_fail_on_missing() -> None:
    res = compare_aggregates(
        [agg("a", ack_latency_p95_us=[100.0])],
        [agg("a")],
        parse_thresholds("ack_p95=+10%"),
        fail_on_missing=True,
    )
    assert (
        res.exit_code == 4 and "1 metric(s) without a value (a ack_p95)" in res.problems[0].message
    )


def test_tls_on_against_off_with_the_same_cell_ids_is_noted(tmp_path: Path) -> None:
    def tls(on: bool) -> Any:
        def edit(manifest: dict[str, Any]) -> None:
            manifest["scenario"]["security"] = {"tls": on, "auth": None}

        return edit

    plain, secured = copy(tmp_path, "plain", tls(False)), copy(tmp_path, "tls", tls(True))
    res = compare_runs(plain, secured, options=Options(True, True))
    assert res.matched == 4
    for cell in res.cells:
        assert [str(d) for d in cell.differences] == ["security.tls off -> on"]
        assert "parameters differ: security.tls off -> on" in cell.notes
    assert res.exit_code == 0  # noted, not failed: the thresholds decide


def test_every_differing_setting_is_named_with_both_values() -> None:
    found = differences(
        {"qos": 0, "generator.workers": "auto", "broker.version": "2.10"},
        {"qos": 1, "generator.workers": 2, "broker.version": "2.10", "host.cpus": 4},
    )
    assert [str(d) for d in found] == [
        "generator.workers auto -> 2",
        "host.cpus unset -> 4",
        "qos 0 -> 1",
    ]


def test_a_refusal_for_invalid_cells_still_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "ci" / "compare.json"
    result = run(str(FIXTURE), str(FIXTURE), "--format", "json", "--out", str(out))
    assert result.exit_code == 4
    data = json.loads(out.read_text())
    assert data["verdict"] == "refused" and data["problems"][0]["kind"] == "invalid_cells"
    assert data["cells"]  # every cell is judged all the same


def test_a_folder_that_cannot_be_read_still_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    result = run(str(tmp_path / "nope"), str(FIXTURE), "--format", "json", "--out", str(out))
    assert result.exit_code == 1
    data = json.loads(out.read_text())
    assert data["verdict"] == "error" and data["exit_code"] == 1 and "nope" in data["error"]


def test_junit_has_one_test_case_per_cell_and_metric(tmp_path: Path) -> None:
    def slower(data: dict[str, Any]) -> None:
        if data["cell_id"].startswith("alpha-64B-1pairs"):
            data["throughput_msg_s"] *= 0.5

    current = copy(tmp_path, "slow", cells=slower)
    result = run(str(FIXTURE), str(current), *ALLOW, "--format", "junit")
    assert result.exit_code == 3
    root = ET.fromstring(result.stdout)
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 4 * 3  # 4 cells x the 3 default metrics
    assert {(c.get("classname"), c.get("name")) for c in cases} >= {
        ("alpha-64B-1pairs-1000hz-qos0", "throughput"),
        ("beta-64B-2pairs-1000hz-qos0", "loss"),
    }
    failed = [c for c in cases if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [
        ("alpha-64B-1pairs-1000hz-qos0", "throughput")
    ]
    assert root.get("tests") == "12" and root.get("failures") == "1"
    message = failed[0].find("failure").get("message")  # type: ignore[union-attr]
    assert message.startswith("regression: throughput: baseline ")


def test_junit_shows_a_refusal_of_the_whole_comparison_as_a_failing_case() -> None:
    res = compare_aggregates([agg("a")], [agg("b")], parse_thresholds("throughput=-5%"))
    root = ET.fromstring(res.to_junit())
    (problem,) = [c for c in root.iter("testcase") if c.get("classname") == "mqbench.compare"]
    assert problem.get("name") == "no_match" and problem.find("failure") is not None
    assert int(root.get("failures") or 0) >= 1


def test_markdown_is_a_job_summary_with_the_verdict_first() -> None:
    res = compare_aggregates(
        [agg("a", throughput_msg_s=[100.0]), agg("b", throughput_msg_s=[100.0])],
        [agg("a", throughput_msg_s=[50.0]), agg("b", throughput_msg_s=[100.0])],
        parse_thresholds("throughput=-5%"),
    )
    lines = res.to_markdown().splitlines()
    assert lines[0] == "### ❌ mqbench compare: REGRESSION"
    header = lines.index(
        "| cell | metric | baseline | current | change | noise ± | floor | limit | verdict |"
    )
    assert lines[header + 1] == "|---|---|--:|--:|--:|--:|--:|--:|--:|"
    assert lines[header + 2].startswith(
        "| a | throughput | 100.0 msg/s | 50.0 msg/s | -50.0 (-50.0%)"
    )
    assert lines[header + 2].endswith("| **REGRESSION** |")
    assert lines[header + 3].endswith("| ok |")


def _gate(thresholds: dict[str, Any], **extra: Any) -> Any:
    def edit(manifest: dict[str, Any]) -> None:
        manifest["scenario"]["gate"] = {"thresholds": thresholds, **extra}

    return edit


def test_thresholds_kept_in_the_scenario_judge_and_the_command_line_overrides(
    tmp_path: Path,
) -> None:
    def slower(data: dict[str, Any]) -> None:
        if data["cell_id"].startswith("alpha-64B-1pairs"):
            data["throughput_msg_s"] *= 0.8

    current = copy(tmp_path, "gated", _gate({"throughput": "-50%"}), cells=slower)
    res = compare_runs(FIXTURE, current, options=Options(True, True))
    assert res.threshold_source == "gate" and list(res.thresholds) == ["throughput"]
    assert res.exit_code == 0  # a 20 % drop is within the scenario's 50 %
    tight = compare_runs(FIXTURE, current, "throughput=-5%", options=Options(True, True))
    assert tight.threshold_source == "--threshold" and tight.exit_code == 3
    result = run(str(FIXTURE), str(current), *ALLOW)
    assert "thresholds from the scenario's gate: throughput=-50%" in result.stdout


def test_the_scenarios_gate_can_fail_on_missing(tmp_path: Path) -> None:
    current = copy(tmp_path, "strict", _gate({"throughput": "-5%"}, fail_on_missing=True))
    shutil.rmtree(current / "cells" / "beta-64B-2pairs-1000hz-qos0")
    shutil.rmtree(current / "cells" / "beta-64B-2pairs-1000hz-qos0-r1")

    def drop_beta2(manifest: dict[str, Any]) -> None:
        manifest["cells"] = [c for c in manifest["cells"] if "beta-64B-2pairs" not in c["id"]]

    path = current / "manifest.json"
    manifest = json.loads(path.read_text())
    drop_beta2(manifest)
    path.write_text(json.dumps(manifest))
    res = compare_runs(FIXTURE, current, options=Options(True, True))
    assert [p.kind for p in res.problems] == ["missing"] and res.exit_code == 4


def test_a_bad_threshold_in_json_mode_writes_an_error_document(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    args = ["--threshold", "throughput=+5%", "--format", "json", "--out", str(out)]
    result = run(str(FIXTURE), str(FIXTURE), *args)
    assert result.exit_code == 2
    assert json.loads(out.read_text())["verdict"] == "error"


@pytest.mark.parametrize("fmt", ["yaml", "csv"])
def test_an_unknown_format_is_a_usage_error(fmt: str) -> None:
    assert run(str(FIXTURE), str(FIXTURE), "--format", fmt).exit_code == 2
