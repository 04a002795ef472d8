"""Topologies (docs/scenarios.md), exact loss accounting, persistence with churn, QoS 2.

The cells the compiled core serves (QoS 0 on mosquitto with the lean client: the pairs,
fanout and fanin shapes, the saturation search) run on both engines
(``generator.hot_path``) against one mosquitto shared by the module (``runtime:
external``). The 9,000-pairs scale test starts its own broker (18,000 connections need
the open-files limit ``mqbench run`` gives the brokers it starts) and runs on the engine
``auto`` picks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_transport import DROP_MODULUS, dropped
from typer.testing import CliRunner

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.brokers.base import RunningBroker
from mqbench.cli.app import app
from mqbench.records.cell_entry import CellEntry
from mqbench.records.format import RECORD_DTYPE, SEND_OK
from mqbench.records.intended import intended_ns_array

pytestmark = pytest.mark.integration
runner = CliRunner()


def run(tmp_path: Path, body: str, *extra: str) -> tuple[Path, list[dict]]:
    path = tmp_path / "s.yaml"
    path.write_text(body)
    out = tmp_path / "results"
    result = runner.invoke(app, ["run", str(path), "--out", str(out), "--no-analyze", *extra])
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.glob("*/*") if p.is_dir()]
    cells = json.loads((run_dir / "manifest.json").read_text())["cells"]
    return run_dir, cells


def records(cell_dir: Path, kind: str) -> np.ndarray:
    return np.concatenate(
        [np.fromfile(f, dtype=RECORD_DTYPE) for f in sorted(cell_dir.glob(f"{kind}-*.bin"))]
    )


def in_window_sends(cell: dict, sends: np.ndarray) -> np.ndarray:
    s = cell["schedule"]
    ok = sends[sends["sub"] == SEND_OK]
    intended = intended_ns_array(s["start_ns"], s["rate"], s["publishers"], ok["pub"], ok["seq"])
    w = cell["window"]
    return ok[(intended >= w["start_ns"]) & (intended < w["end_ns"])]


ENGINES = ["python", "compiled"]


@pytest.fixture(scope="module")
def shared_mosquitto(module_broker: Any) -> RunningBroker:
    """One native mosquitto for the module's both-engine tests (they only connect to it)."""
    broker: RunningBroker = module_broker("mosquitto")
    return broker


def on_shared(broker: RunningBroker, engine: str, generator: str = "") -> str:
    """Scenario lines that run on ``broker`` (external runtime) with ``engine``."""
    if engine == "compiled":
        pytest.importorskip("mqbench_core", reason="the compiled core is not installed")
    return (
        f"targets: [mosquitto]\nruntime: external\n"
        f"broker: {{port: {broker.endpoint.port}, pid: {broker.pids[0]}}}\n"
        f"generator: {{hot_path: {engine}{generator}}}\n"
    )


def engine_of(cell: dict) -> str:
    entry = CellEntry.from_dict(cell)
    assert entry.hot_path is not None
    return entry.hot_path.engine


FAKE = (
    "client: fake_transport:DroppingTransport\n"
    "generator: {workers: 1, layout: shared}\n"  # the fake routes within one process
)


def test_fanout_to_500_subscribers_accounts_every_known_drop(tmp_path: Path) -> None:
    run_dir, (cell,) = run(
        tmp_path,
        "name: fan\ntargets: [mosquitto]\n"
        + FAKE
        + "workload: {topology: fanout, subscribers: 500, rate: 50, payload: 64B,"
        " warmup: 1s, duration: 3s, drain: 1s}\n",
    )
    cell_dir = run_dir / "cells" / cell["id"]
    sends = records(cell_dir, "sends")
    deliveries = records(cell_dir, "deliveries")
    counts = np.bincount(deliveries["sub"], minlength=500)
    for sub in (0, 1, 6, 7, 499):
        expected = sum(not dropped(0, int(q), sub) for q in sends["seq"])
        assert counts[sub] == expected
    summary = analyze_cell_numpy(cell, cell_dir)
    window = in_window_sends(cell, sends)
    drops = sum(dropped(0, int(q), sub) for q in window["seq"] for sub in range(500))
    assert summary.expected == len(window) * 500
    assert summary.lost == drops > 0
    assert summary.duplicates == 0


def test_fanin_from_500_publishers_accounts_every_known_drop(tmp_path: Path) -> None:
    run_dir, (cell,) = run(
        tmp_path,
        "name: fanin\ntargets: [mosquitto]\n"
        + FAKE
        + "workload: {topology: fanin, publishers: 500, rate: 5, payload: 64B,"
        " warmup: 1s, duration: 3s, drain: 1s}\n",
    )
    cell_dir = run_dir / "cells" / cell["id"]
    sends = records(cell_dir, "sends")
    deliveries = records(cell_dir, "deliveries")
    kept = sum(
        not dropped(int(p), int(q), 0) for p, q in zip(sends["pub"], sends["seq"], strict=True)
    )
    assert len(deliveries) == kept
    summary = analyze_cell_numpy(cell, cell_dir)
    window = in_window_sends(cell, sends)
    drops = sum(
        dropped(int(p), int(q), 0) for p, q in zip(window["pub"], window["seq"], strict=True)
    )
    assert summary.lost == drops
    assert abs(summary.loss_pct - 100 / DROP_MODULUS) < 2


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("shape", "clients"),
    [
        pytest.param("pairs", "pairs: 20, rate: 20", id="pairs"),
        pytest.param("fanout", "subscribers: 50, rate: 50", id="fanout"),
        pytest.param("fanin", "publishers: 50, rate: 10", id="fanin"),
    ],
)
def test_each_shape_on_mosquitto_delivers_every_message_on_both_engines(
    tmp_path: Path, shared_mosquitto: RunningBroker, engine: str, shape: str, clients: str
) -> None:
    run_dir, (cell,) = run(
        tmp_path,
        f"name: {shape}\n"
        + on_shared(shared_mosquitto, engine)
        + f"workload: {{topology: {shape}, {clients}, qos: 0, payload: 64B, warmup: 1s,"
        " duration: 2s, drain: 1s}\n",
    )
    assert engine_of(cell) == engine
    cell_dir = run_dir / "cells" / cell["id"]
    sends, deliveries = records(cell_dir, "sends"), records(cell_dir, "deliveries")
    subscribers = {"pairs": 1, "fanout": 50, "fanin": 1}[shape]  # receivers per message
    assert len(deliveries) == len(sends) * subscribers  # every message, every receiver
    summary = analyze_cell_numpy(cell, cell_dir)
    assert summary.expected == len(in_window_sends(cell, sends)) * subscribers > 0
    assert summary.lost == 0 and summary.duplicates == 0
    assert summary.sent == summary.scheduled


def test_p2p_persistent_qos1_loses_nothing_while_subscribers_reconnect(tmp_path: Path) -> None:
    run_dir, (cell,) = run(
        tmp_path,
        "name: p2p\ntargets: [mosquitto]\n"
        "workload: {topology: p2p, pairs: 20, rate: 20, qos: 1, payload: 62B, warmup: 1s,"
        " duration: 9s, drain: 5s, churn: {every: 3s, downtime: 1s, fraction: 0.5}}\n",
    )
    cell_dir = run_dir / "cells" / cell["id"]
    events = [json.loads(line) for line in (cell_dir / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds.count("churn_disconnected") >= 2
    assert kinds.count("churn_reconnected") == kinds.count("churn_disconnected")
    summary = analyze_cell_numpy(cell, cell_dir)
    assert summary.sent > 0
    assert summary.lost == 0
    assert summary.duplicates >= 0  # QoS 1 may redeliver; counted, not hidden
    assert summary.ack_latency is not None


def test_qos2_on_mosquitto_delivers_exactly_once_with_full_handshake_acks(tmp_path: Path) -> None:
    run_dir, (cell,) = run(
        tmp_path,
        "name: q2\ntargets: [mosquitto]\n"
        "workload: {pairs: 5, rate: 50, qos: 2, payload: 128B, warmup: 1s, duration: 4s,"
        " drain: 3s}\n",
    )
    summary = analyze_cell_numpy(cell, run_dir / "cells" / cell["id"])
    assert summary.lost == 0 and summary.duplicates == 0
    assert summary.ack_latency is not None and summary.ack_latency.count == summary.sent


@pytest.mark.parametrize("engine", ENGINES)
def test_saturation_search_stops_at_the_first_unsustainable_step(
    tmp_path: Path, shared_mosquitto: RunningBroker, engine: str
) -> None:
    run_dir, cells = run(
        tmp_path,
        "name: search\n"
        + on_shared(shared_mosquitto, engine)
        + "workload: {pairs: 2, qos: 0, payload: 64B, warmup: 1s, duration: 2s, drain: 1s}\n"
        "search: {axis: rate, values: [20, 400000, 800000]}\n",
    )
    assert [c["status"] for c in cells] == ["completed", "completed", "skipped"]
    assert {engine_of(c) for c in cells[:2]} == {engine}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    search = manifest["search"]
    assert [s["sustainable"] for s in search["steps"]] == [True, False]
    assert search["highest_sustainable"][0]["value"] == 20


@pytest.mark.slow
def test_9000_pairs_on_mosquitto_lose_nothing_without_saturating_the_generator(
    tmp_path: Path,
) -> None:
    # The subject is scale: 18,000 connections and 9,000 msg/s, nothing lost, the schedule
    # kept. Sends a few ms late on two cores shared with the broker are a latency question,
    # not saturation, so the late-send bound is 50 ms here (5 ms by default); a generator
    # that falls behind (sends short of the schedule, lag p99 over 50 ms, a worker over 90 %
    # of a core, stalls holding over 1 % of its loop) still fails the test.
    run_dir, (cell,) = run(
        tmp_path,
        "name: big\ntargets: [mosquitto]\n"
        "workload: {pairs: 9000, rate: 1, payload: 64B, warmup: 5s, duration: 60s,"
        " drain: 10s, connect_rate: 2000}\n"
        "generator: {connect_timeout: 30s, max_send_lag_ms: 50}\n",
    )
    assert cell["params"]["workers"] >= 1
    summary = analyze_cell_numpy(cell, run_dir / "cells" / cell["id"])
    assert summary.lost == 0
    assert not summary.generator_saturated, summary.generator_reason
    assert summary.expected >= 9000 * 59
