"""Deliveries that matched no subscription of the client that received them: the client
drops them, so they are in no record and would show only as unexplained loss. Their count
travels from the clients (``ClientStats.unrouted``) through the worker stats and the
manifest into the summary, the repeats, the CLI's table and the report."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from analysis_fixtures import intended, make_cell, records, sends_ok

from mqbench.analysis import analyze_cell_numpy
from mqbench.analysis.plan import plan_cell
from mqbench.analysis.repeats import METRICS, RepeatAggregate, aggregate_repeats, mean_ci
from mqbench.analysis.spark_job import aggregate_cells_serial
from mqbench.analysis.summary import CellSummary, build_summary, read_summary_json
from mqbench.cli.tables import results_view
from mqbench.endpoint import Endpoint
from mqbench.records.cell_entry import CellEntry, GeneratorVerdict
from mqbench.records.worker_stats import WorkerStats
from mqbench.report.marks import Mark, marks_of
from mqbench.report.render import latex_escape
from mqbench.report.tables import build_tables
from mqbench.transports.base import ClientOptions, ClientStats
from mqbench.transports.nats import NatsTransport
from mqbench.transports.redis import RedisTransport
from mqbench.workload import spark_engine
from mqbench.workload.messages import Done, Progress
from mqbench.workload.reporting import CLIENT_STATS_SLICE, WorkerReport, count_clients
from mqbench.workload.selfcheck import generator_verdict

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report"


class FakeClient:
    """A connected client whose stats say how many deliveries matched no subscription."""

    def __init__(self, unrouted: int) -> None:
        self.connected = True
        self._stats = ClientStats(unrouted=unrouted)

    def pending_write_bytes(self) -> int:
        return 0

    def stats(self) -> ClientStats:
        return self._stats


def worker_report(clients: list[FakeClient]) -> WorkerReport:
    pool = SimpleNamespace(
        all=lambda: clients, connect_failed=0, first_connect_error=None, connected_ns=0,
        disconnects=0, reconnects=0, qos_downgraded=0, duplicate_deliveries=0, granted_qos_min=None,
        outage_total_s=0.0, outage_max_s=0.0,
    )  # fmt: skip
    publishing = SimpleNamespace(
        sent_ok=0, send_failed=0, acked=0, stats=None, cpu_fraction=lambda: None
    )
    writer = SimpleNamespace(count=0, written=0)
    plan = SimpleNamespace(worker=0, role="both")
    writers = cast(Any, (writer, writer))
    return WorkerReport(cast(Any, plan), cast(Any, pool), cast(Any, publishing), writers)


def test_the_lean_nats_and_redis_clients_count_messages_no_subscription_of_theirs_takes() -> None:
    # Frames the server sends for a subscription id / channel without a handler (one that
    # was in flight when its subscription ended): dropped, and now counted.
    endpoint, options = Endpoint("127.0.0.1", 1), ClientOptions(client_id="c")
    nats = cast(Any, NatsTransport().create_client(endpoint, options))
    nats._parser.feed(b"MSG bench.a 7 3\r\nabc\r\n", 0)
    redis = cast(Any, RedisTransport().create_client(endpoint, options))
    redis._parser.feed(b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nabc\r\n", 0)
    assert (nats.stats().unrouted, redis.stats().unrouted) == (1, 1)


def test_the_clients_unmatched_deliveries_reach_the_workers_stats() -> None:
    clients = [FakeClient(2), FakeClient(0), FakeClient(1)]
    assert count_clients(cast(Any, clients)).unmatched == 3
    assert worker_report(clients).stats().unmatched_deliveries == 3


def test_the_sliced_recount_of_many_clients_carries_them_to_the_periodic_report() -> None:
    clients = [FakeClient(1) for _ in range(CLIENT_STATS_SLICE + 10)]
    report = worker_report(clients)
    asyncio.run(report._refresh_client_totals())
    stats = report.stats(fresh=False)
    assert stats.unmatched_deliveries == CLIENT_STATS_SLICE + 10
    assert stats.connected == CLIENT_STATS_SLICE + 10


def test_workers_add_them_up_and_the_verdict_warns_that_they_count_as_lost() -> None:
    workers = [WorkerStats(worker=0, unmatched_deliveries=3), WorkerStats(worker=1)]
    assert WorkerStats.total(workers).unmatched_deliveries == 3
    verdict = generator_verdict(workers, late_threshold_ms=5)
    assert not verdict.saturated
    (warning,) = verdict.warnings
    assert warning.startswith("3 deliveries matched no subscription (not in the records)")


def test_the_manifest_keeps_them_and_an_older_manifest_without_them_reads_0() -> None:
    verdict = GeneratorVerdict(workers=(WorkerStats(worker=0, unmatched_deliveries=5),))
    stored = verdict.to_dict()
    assert stored["workers"][0]["unmatched_deliveries"] == 5
    assert GeneratorVerdict.from_dict("c0", stored).workers[0].unmatched_deliveries == 5
    del stored["workers"][0]["unmatched_deliveries"]
    assert GeneratorVerdict.from_dict("c0", stored).workers[0].unmatched_deliveries == 0


def _cell(tmp_path: Path, unmatched: tuple[int, ...]) -> dict[str, Any]:
    workers = [
        WorkerStats(worker=w, unmatched_deliveries=n).to_dict() for w, n in enumerate(unmatched)
    ]
    rows = [(intended(0, s), 10, 0, 0, s) for s in range(90)]
    cell = make_cell(
        tmp_path,
        deliveries=[records(rows)],
        sends=[sends_ok(1, range(100))],
        generator={"workers": workers},
    )
    cell["schedule"]["messages_per_publisher"] = 100
    return cell


def test_both_analysis_engines_put_the_workers_count_in_the_summary(tmp_path: Path) -> None:
    cell = _cell(tmp_path, (4, 3))
    folder = tmp_path / "cells" / "c0"
    whole = analyze_cell_numpy(cell, folder)
    plan = plan_cell(CellEntry.from_dict(cell), folder)
    (chunked,) = aggregate_cells_serial([plan], 7)
    for summary in (whole, build_summary(plan, chunked)):
        assert summary.unmatched_deliveries == 7
        assert summary.lost == 10
        assert summary.unrouted == 0  # the records' own count: records on no route
        assert CellSummary.from_dict(summary.to_dict()).unmatched_deliveries == 7


def test_a_summary_written_before_the_count_existed_reads_as_0(tmp_path: Path) -> None:
    path = next(FIXTURE.glob("*/cells/alpha-64B-1pairs-1000hz-qos0/summary.json"))
    assert '"unmatched_deliveries"' not in path.read_text()
    assert read_summary_json(path).unmatched_deliveries == 0


def _summary(cell_id: str, repeat: int, unmatched: int, lost: int) -> CellSummary:
    path = next(FIXTURE.glob("*/cells/alpha-64B-1pairs-1000hz-qos0/summary.json"))
    return dataclasses.replace(
        read_summary_json(path),
        cell_id=cell_id,
        repeat=repeat,
        latency_verdict="ok",
        unmatched_deliveries=unmatched,
        lost=lost,
    )


def test_the_results_table_marks_the_cell_and_says_how_many_in_a_footnote() -> None:
    cells = [_summary("c1", 0, 12, 40), _summary("c2", 0, 0, 40), _summary("c3", 0, 2, 0)]
    lines = [line.plain for line in results_view(cells, 200).lines(200)]
    assert next(line for line in lines if line.startswith("c1 ")).endswith("‖1")
    assert next(line for line in lines if line.startswith("c2 ")).endswith("ok")
    notes = [line for line in lines if line.startswith("‖")]
    assert notes[0].startswith(
        "‖1 c1: 12 deliveries matched no subscription (not in the records): the clients that "
        "received them dropped them; up to 12 of the 40 lost deliveries may have arrived"
    )
    assert "nothing is missing" in notes[1] and notes[1].startswith("‖2 c3: 2 deliveries")


def test_repeats_add_them_up_and_the_report_marks_loss_values_only() -> None:
    (agg,) = aggregate_repeats([_summary("c", 0, 1, 5), _summary("c-r1", 1, 2, 5)])
    assert agg.unmatched_deliveries == 3 and agg.flat_row()["unmatched_deliveries"] == 3
    assert Mark.UNMATCHED in marks_of(agg, loss=True)
    assert Mark.UNMATCHED not in marks_of(agg, latency=True)
    metrics = {name: mean_ci([1.0]) for name in METRICS}
    aggs = [
        RepeatAggregate("a", 0, {"target": "t", "qos": 0}, [0], ["a"], metrics, False, True,
                        unmatched_deliveries=4),
        RepeatAggregate("b", 1, {"target": "t", "qos": 1}, [0], ["b"], metrics, False, True),
    ]  # fmt: skip
    cells = next(t for t in build_tables(aggs) if t.key == "cells")
    loss = cells.header.index("loss (%)")
    assert cells.rows[0][loss].endswith("‖") and not cells.rows[1][loss].endswith("‖")
    assert not cells.rows[0][0].endswith("‖")  # the cell id: its other numbers stand
    assert any(n.startswith("‖ deliveries matched no subscription") for n in cells.notes)
    assert latex_escape("1.0 ‖") == r"1.0 $^{\|}$"


def test_a_spark_load_task_relays_the_count_to_the_driver_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stats = WorkerStats(worker=0, unmatched_deliveries=2)

    def fake_worker(plan: object, conn: Connection) -> WorkerStats:
        conn.send(Progress(stats))
        conn.send(Done(stats))
        conn.close()
        return stats

    monkeypatch.setattr(spark_engine, "run_worker", fake_worker)
    to_driver: list[object] = []
    driver, driver_peer = multiprocessing.Pipe(duplex=True)
    shipper = SimpleNamespace(start=lambda: None, finish=lambda: None)
    try:
        final, _ = spark_engine._relay(
            cast(Any, None), driver, to_driver.append, cast(Any, shipper), lambda: None, lambda: 0
        )
    finally:
        driver_peer.close()  # the relay's driver-side reader ends on it: join it, then close
        for thread in threading.enumerate():
            if thread.name == "mqbench-relay-down":
                thread.join(10)
        driver.close()
    assert final is not None and final.unmatched_deliveries == 2
    assert [m.stats.unmatched_deliveries for m in cast(list[Any], to_driver)] == [2, 2]
