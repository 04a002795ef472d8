"""The gate's timing floor: without repeats, a latency change within the send lag and
wake-up both runs measured is not judged; a change clearly beyond it still is; with repeats
the Welch interval decides alone. The floor is shown in every output format."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from aggregates import agg

from mqbench.analysis.compare import compare_aggregates, compare_runs, parse_thresholds
from mqbench.analysis.repeats import RepeatAggregate
from mqbench.analysis.timing_floor import SideTiming, timing_floor
from mqbench.cli.tables import compare_view
from mqbench.records.timing import WakeupFloor

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "20260101T000000Z-fixture"
NATS = "nats-1KiB-20pairs-10hz-qos0"


def quickstart(p95_us: float, lag_p999_us: float, **more: list[float]) -> RepeatAggregate:
    """A quickstart NATS cell without repeats (figures of two measured runs, docs/ci.md)."""
    lag = {"send_lag_p50_us": [0.0], "send_lag_p95_us": [11.0], "send_lag_p99_us": [52.0]}
    return agg(
        NATS,
        latency_p95_us=[p95_us],
        send_lag_p999_us=[lag_p999_us],
        throughput_msg_s=[200.0],
        **lag,
        **more,
    )


def row(result: Any, metric: str) -> dict[str, Any]:
    (found,) = [m for c in result.cells for m in c.metrics if m["metric"] == metric]
    return found


def test_two_identical_runs_without_repeats_do_not_regress_within_their_timing_noise() -> None:
    # measured: NATS p95 0.266 -> 0.372 ms (+40 %) on two back-to-back quickstarts,
    # send lag p99.9 0.106 and 0.145 ms
    res = compare_aggregates(
        [quickstart(266.0, 106.0)], [quickstart(372.0, 145.0)], parse_thresholds(None)
    )
    p95 = row(res, "p95")
    assert p95["verdict"] == "ok" and res.exit_code == 0 and res.cells[0].notes == []
    assert p95["floor"] == pytest.approx(0.133) and p95["limit"] == pytest.approx(0.133)
    assert p95["limit_by"] == "floor"  # 0.145 ms, at most half the baseline's 0.266 ms
    assert p95["floor_source"] == (
        "send lag p99.9 of the current run, capped at 50 % of the baseline"
    )


def test_a_doubled_p95_on_a_cell_with_a_small_send_lag_is_still_a_regression() -> None:
    res = compare_aggregates(
        [quickstart(266.0, 106.0)], [quickstart(532.0, 145.0)], parse_thresholds(None)
    )
    p95 = row(res, "p95")
    assert p95["verdict"] == "regression" and res.exit_code == 3
    assert p95["limit_by"] == "floor"  # the floor did not hide a change beyond it


def test_a_small_floor_leaves_the_thresholds_limit_in_force() -> None:
    res = compare_aggregates(
        [quickstart(12_000.0, 106.0)], [quickstart(13_300.0, 145.0)], parse_thresholds(None)
    )
    p95 = row(res, "p95")  # 10 % of 12 ms is 1.2 ms, far above a 0.145 ms floor
    assert p95["verdict"] == "regression" and p95["limit_by"] == "threshold"
    assert p95["limit"] == pytest.approx(1.2) and p95["floor"] == pytest.approx(0.145)
    assert p95["floor_source"] == "send lag p99.9 of the current run"


def test_an_improvement_within_the_floor_is_not_called_one() -> None:
    res = compare_aggregates(
        [quickstart(372.0, 145.0)], [quickstart(266.0, 106.0)], parse_thresholds(None)
    )
    assert row(res, "p95")["verdict"] == "ok"


def test_with_repeats_the_welch_interval_decides_and_no_floor_applies() -> None:
    lag = {"send_lag_p999_us": [500.0, 500.0, 500.0]}
    base = agg(NATS, latency_p95_us=[266.0, 268.0, 270.0], **lag)
    cur = agg(NATS, latency_p95_us=[372.0, 374.0, 376.0], **lag)
    p95 = row(compare_aggregates([base], [cur], parse_thresholds("p95=+10%")), "p95")
    assert p95["floor"] is None and p95["limit_by"] == "threshold"
    assert p95["verdict"] == "regression"  # 106 µs beyond a 2 µs spread is the broker's


def test_throughput_and_loss_have_no_floor() -> None:
    res = compare_aggregates(
        [quickstart(266.0, 106.0, loss_pct=[0.0])],
        [quickstart(266.0, 145.0, loss_pct=[0.5])],
        parse_thresholds(None),
    )
    assert row(res, "throughput")["floor"] is None and row(res, "loss")["floor"] is None
    assert row(res, "loss")["verdict"] == "regression"


def test_a_doubled_p95_is_a_regression_however_large_the_send_lag_tail() -> None:
    # measured: a disturbed run's send lag p99.9 reached 1.04 ms beside a p95 of 0.43 ms;
    # the floor is capped at half the baseline, so a doubling is always judged
    res = compare_aggregates(
        [quickstart(427.0, 1038.0)], [quickstart(860.0, 672.0)], parse_thresholds(None)
    )
    p95 = row(res, "p95")
    assert p95["verdict"] == "regression" and p95["floor"] == pytest.approx(0.2135)
    assert p95["floor_source"] == (
        "send lag p99.9 of the baseline run, capped at 50 % of the baseline"
    )
    assert res.cells[0].notes == [
        "p95: the timing noise both runs measured (send lag p99.9 of the baseline run: "
        "1.04 ms) is more than half the baseline, so this regression may be the machine's; "
        "confirm it with repeats"
    ]


def test_each_latency_percentile_takes_the_tail_of_the_send_lag() -> None:
    side = SideTiming({"p50": 1.0, "p95": 2.0, "p99": 30.0, "p999": 400.0, "max": 5000.0})
    none = SideTiming({})
    floors = {q: timing_floor(q, side, none, 100.0) for q in ("p50", "p95", "p99", "p999")}
    assert {q: f.ms for q, f in floors.items() if f} == {
        "p50": 0.4,
        "p95": 0.4,
        "p99": 0.4,
        "p999": 5.0,
    }
    assert timing_floor("p95", none, none, 1.0) is None
    assert timing_floor("p95", SideTiming({"p999": 0.0}), none, 1.0) is None
    assert timing_floor("p95", side, none, 0.0) is None


def test_a_calibrated_wakeup_floor_sets_the_floor_when_it_is_the_larger() -> None:
    wake = WakeupFloor(
        "fifo+dma", p50_us=44.0, p99_us=177.0, p999_us=1171.0, max_us=3653.0, samples=3000
    )
    res = compare_aggregates(
        [quickstart(400.0, 106.0)],
        [quickstart(560.0, 145.0)],
        parse_thresholds(None),
        wakeups=({NATS: wake}, {}),
    )
    p95 = row(res, "p95")
    assert p95["floor"] == pytest.approx(0.177) and p95["verdict"] == "ok"
    assert p95["floor_source"] == "machine wake-up p99 of the baseline run"


def _floored() -> Any:
    return compare_aggregates(
        [quickstart(266.0, 106.0)], [quickstart(372.0, 145.0)], parse_thresholds(None)
    )


def test_the_floor_and_what_set_the_limit_are_in_the_json() -> None:
    data = json.loads(_floored().to_json())
    (p95,) = [m for m in data["cells"][0]["metrics"] if m["metric"] == "p95"]
    assert (p95["floor"], p95["limit_by"]) == (pytest.approx(0.133), "floor")
    assert data["timing_floor"].startswith("no repeats: latency changes within the timing floor")
    assert "use repeats for a finer gate" in data["timing_floor"]


def test_the_text_markdown_and_junit_show_the_floor() -> None:
    res = _floored()
    text = res.to_text().splitlines()
    assert text[0].split() == [
        "cell", "metric", "baseline", "current", "change", "noise", "±", "floor", "limit", "verdict"
    ]  # fmt: skip
    assert "0.133  0.133  ok" in next(line for line in text if " p95 " in line)
    assert any(line.startswith("no repeats: latency changes within") for line in text)
    markdown = res.to_markdown()
    assert "| noise ± | floor | limit | verdict |" in markdown
    assert "no repeats: latency changes within the timing floor (0.133 ms" in markdown
    root = ET.fromstring(res.to_junit())
    (case,) = [c for c in root.iter("testcase") if c.get("name") == "p95"]
    out = case.findtext("system-out") or ""
    assert "limit 0.133 (timing floor: send lag p99.9 of the current run, capped" in out


def test_the_terminal_table_shows_the_floor_within_100_columns() -> None:
    lines = [line.plain for line in compare_view(_floored(), 100)]
    assert max(len(line) for line in lines) <= 100
    (header,) = [line for line in lines if line.strip().startswith("metric")]
    assert header.split()[-4:] == ["±", "floor", "limit", "verdict"]
    assert "0.133  0.133  ok" in next(line for line in lines if " p95 " in line)
    assert any(line.startswith("no repeats: latency changes within") for line in lines)
    at_80 = [line.plain for line in compare_view(_floored(), 80)]
    assert max(len(line) for line in at_80) <= 80
    assert "not shown at this width: noise ±" in at_80  # the floor outlasts the noise


def _single_repeat_copy(tmp_path: Path, name: str, floor: dict[str, Any] | None) -> Path:
    """The fixture without its repeats; with ``floor``, every cell has that calibrated
    wake-up floor in its manifest entry."""
    folder = tmp_path / name
    shutil.copytree(FIXTURE, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["cells"] = [c for c in manifest["cells"] if not c["id"].endswith("-r1")]
    for cell in manifest["cells"]:
        if floor is not None:
            cell["timing"] = {
                "mode": "auto",
                "policy": "fifo",
                "reason": "t",
                "wakeup_floor": floor,
            }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for extra in folder.glob("cells/*-r1"):
        shutil.rmtree(extra)
    return folder


def test_compare_runs_takes_the_wakeup_floor_from_the_manifests(tmp_path: Path) -> None:
    floor = {
        "policy": "fifo",
        "p50_us": 40,
        "p99_us": 60,
        "p999_us": 1000,
        "max_us": 1500,
        "samples": 3000,
    }
    base = _single_repeat_copy(tmp_path, "base", floor)
    cur = _single_repeat_copy(tmp_path, "cur", None)
    for path in cur.glob("cells/beta-64B-1pairs*/summary.json"):
        data = json.loads(path.read_text())
        data["latency"]["p95_us"] += 50.0  # 0.131 -> 0.181 ms: +38 %, within 0.060 ms
        path.write_text(json.dumps(data))
    res = compare_runs(base, cur, "p95=+10%")
    (cell,) = [c for c in res.cells if c.cell == "beta-64B-1pairs-1000hz-qos0"]
    p95 = cell.metrics[0]
    assert p95["verdict"] == "ok" and p95["floor"] == pytest.approx(0.060)
    assert p95["floor_source"] == "machine wake-up p99 of the baseline run"
    plain = compare_runs(_single_repeat_copy(tmp_path, "plain", None), cur, "p95=+10%")
    (cell,) = [c for c in plain.cells if c.cell == "beta-64B-1pairs-1000hz-qos0"]
    assert cell.metrics[0]["verdict"] == "regression"  # the fixture's send lag is 0
