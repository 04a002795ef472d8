import asyncio
import contextlib
import time
from typing import Any, cast

import pytest

from mqbench.errors import ScenarioError
from mqbench.records.worker_stats import WorkerStats
from mqbench.scenario.matrix import Cell
from mqbench.workload.coordinator import drained
from mqbench.workload.plan import (
    SPLIT_ABOVE_MSG_S,
    WorkerPlan,
    build_worker_plans,
    process_count,
    resolve_layout,
    split_range,
    worker_count,
)
from mqbench.workload.reporting import WorkerReport
from mqbench.workload.selfcheck import generator_verdict
from mqbench.workload.topology import build_topology


def cell(pairs: int) -> Cell:
    return Cell(0, 0, "nats", "pairs", pairs, 10.0, 64, 0, 10.0, 1.0, 1.0)


def test_ranges_cover_everything_once_with_sizes_within_one() -> None:
    ranges = split_range(10, 3)
    assert ranges == [(0, 4), (4, 7), (7, 10)]
    assert split_range(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_auto_workers_scale_with_connections_and_respect_the_fd_cap() -> None:
    assert worker_count("auto", 40, cpus=2) == 1
    assert worker_count("auto", 6000, cpus=2) == 2
    # 18000 connections fit one process below the 20000-file cap
    assert worker_count(1, 18000, cpus=2) == 1
    assert worker_count("auto", 40000, cpus=2) == 3


def test_the_compiled_core_gets_a_worker_per_half_as_many_connections_for_its_socket_copies() -> (
    None
):
    # The paper topology at 8,000 pairs on one generator CPU: one worker held 32,000 files
    # (each lent socket twice) and the run died with "Too many open files".
    assert worker_count("auto", 16_000, cpus=1) == 1
    assert worker_count("auto", 16_000, cpus=1, files_per_connection=2) == 2
    with pytest.raises(ScenarioError, match="compiled core holds 2 per connection"):
        worker_count(1, 16_000, cpus=1, files_per_connection=2)


def test_too_few_explicit_workers_for_the_connections_is_rejected() -> None:
    with pytest.raises(ScenarioError, match="need at least 3 worker processes"):
        worker_count(1, 40000, cpus=2)


def plans_for(cell: Cell, workers: int, layout: str = "shared") -> list[WorkerPlan]:
    return build_worker_plans(
        cell,
        build_topology(cell, "abc"),
        cell_dir="/tmp/x",
        transport="nats",
        host="127.0.0.1",
        port=4222,
        workers=workers,
        connect_timeout_s=5,
        spin_ns=0,
        late_threshold_ns=1,
        layout=layout,
    )


def test_pairs_plans_keep_each_publisher_with_its_subscriber() -> None:
    plans = plans_for(cell(5), 2)
    assert [p.pub_range for p in plans] == [(0, 3), (3, 5)]
    for plan in plans:
        assert [s.index for s in plan.subscribers] == list(range(*plan.pub_range))
        for pub, sub in zip(plan.publishers, plan.subscribers, strict=True):
            assert pub.topic == sub.topic_filter
    assert all(p.publishers_total == 5 for p in plans)


def test_the_split_layout_runs_publishers_and_subscribers_in_separate_processes() -> None:
    plans = plans_for(cell(5), 1, layout="split")
    assert [(p.worker, p.role) for p in plans] == [(0, "publishers"), (1, "subscribers")]
    assert [len(p.publishers) for p in plans] == [5, 0]
    assert [len(p.subscribers) for p in plans] == [0, 5]
    assert plans[1].pub_range == (0, 0)
    four = plans_for(cell(9), 4, layout="split")
    assert [p.role for p in four] == ["publishers"] * 2 + ["subscribers"] * 2
    assert [p.pub_range for p in four[:2]] == [(0, 5), (5, 9)]
    assert [[s.index for s in p.subscribers] for p in four[2:]] == [[0, 1, 2, 3, 4], [5, 6, 7, 8]]
    assert process_count("split", 4, 9, 9) == 4 == len(four)
    assert process_count("shared", 3, 9, 9) == 3


def test_the_split_layout_adds_processes_where_the_open_files_cap_needs_them() -> None:
    assert process_count("split", 1, 30_000, 30_000) == 4
    assert process_count("split", 1, 1, 30_000) == 3


def test_auto_layout_splits_only_busy_cells() -> None:
    quiet = Cell(0, 0, "nats", "pairs", 10, 10.0, 64, 0, 10.0, 1.0, 1.0)
    busy = Cell(0, 0, "nats", "pairs", 10, SPLIT_ABOVE_MSG_S, 64, 0, 10.0, 1.0, 1.0)
    assert resolve_layout("auto", quiet) == "shared"
    assert resolve_layout("auto", busy) == "split"
    assert resolve_layout("shared", busy) == "shared"
    assert resolve_layout("split", quiet) == "split"


def test_fanout_shards_subscribers_and_leaves_other_workers_without_publishers() -> None:
    fan = Cell(0, 0, "nats", "fanout", 1, 10.0, 64, 0, 10.0, 1.0, 1.0, fanout_subscribers=5)
    plans = plans_for(fan, 2)
    assert [p.pub_range for p in plans] == [(0, 1), (0, 0)]
    assert [len(p.subscribers) for p in plans] == [3, 2]


def test_generator_is_flagged_when_sends_are_late() -> None:
    verdict = generator_verdict(
        [WorkerStats(worker=0, due=1000, late=50, max_send_lag_ns=40_000_000)],
        late_threshold_ms=5,
    )
    assert verdict.saturated
    assert "5.0% of sends were over 5 ms late (max 40.0 ms)" in list(verdict.reasons)


def test_generator_is_flagged_when_a_worker_uses_a_whole_core() -> None:
    verdict = generator_verdict(
        [WorkerStats(worker=1, due=10, late=0, publish_cpu_fraction=0.97)], late_threshold_ms=5
    )
    assert list(verdict.reasons) == ["worker 1 used 97% of a core"]


def test_generator_is_flagged_on_event_loop_stalls() -> None:
    verdict = generator_verdict(
        [WorkerStats(worker=0, due=10, late=0, max_loop_lag_ns=120_000_000)], late_threshold_ms=5
    )
    assert list(verdict.reasons) == ["worker 0 event loop stalled 120 ms"]


def test_one_short_stall_in_a_long_run_is_a_visible_warning_not_a_saturated_generator() -> None:
    # the 30-minute soak: one 73 ms stall of worker 1 in 31 minutes
    soak = WorkerStats(
        worker=1, due=4_650_000, late=0, max_loop_lag_ns=73_000_000, loop_stalls=1,
        loop_stall_ns=73_000_000, loop_probe_ns=1_860 * 10**9,
    )  # fmt: skip
    verdict = generator_verdict([soak], late_threshold_ms=5)
    assert not verdict.saturated and not verdict.reasons
    assert list(verdict.warnings) == [
        "worker 1 event loop stalled once over 50 ms (longest 73 ms, 0.0039 % of its time): "
        "too rare to move the percentiles"
    ]


def test_stalls_adding_up_to_more_than_one_percent_of_the_time_mark_the_generator() -> None:
    busy = WorkerStats(
        worker=0, due=1000, late=0, max_loop_lag_ns=351_000_000, loop_stalls=3,
        loop_stall_ns=480_000_000, loop_probe_ns=12 * 10**9,
    )  # fmt: skip
    verdict = generator_verdict([busy], late_threshold_ms=5)
    assert verdict.saturated
    assert list(verdict.reasons) == [
        "worker 0 event loop stalled 3 times over 50 ms (longest 351 ms, 4.0 % of its time)"
    ]


def test_the_lag_probe_counts_a_stall_and_how_long_it_held_the_loop() -> None:
    report = WorkerReport(cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, (0, 0)))

    async def scenario() -> None:
        probe = asyncio.get_running_loop().create_task(report.probe_loop_lag())
        await asyncio.sleep(0.12)
        time.sleep(0.2)  # block the loop: one stall of ~150-200 ms
        await asyncio.sleep(0.12)
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probe

    asyncio.run(scenario())
    assert report.loop_stalls >= 1  # more only if the machine stalled it too
    assert 100_000_000 < report.loop_stall_ns <= report.max_loop_lag_ns < 2 * 10**9
    assert report.loop_probe_ns >= 300_000_000


def test_healthy_generator_is_not_flagged_and_failed_sends_are_only_a_warning() -> None:
    verdict = generator_verdict(
        [WorkerStats(worker=0, due=1000, late=5, send_failed=3, publish_cpu_fraction=0.3)],
        late_threshold_ms=5,
    )
    assert not verdict.saturated
    assert list(verdict.warnings) == ["3 sends were due while their client was disconnected"]


def test_sends_refused_by_a_full_output_buffer_are_told_apart_from_disconnections() -> None:
    verdict = generator_verdict(
        [WorkerStats(worker=0, due=1000, send_failed=10, send_refused=7)], late_threshold_ms=5
    )
    assert verdict.warnings[0] == "3 sends were due while their client was disconnected"
    assert verdict.warnings[1].startswith("7 sends were refused: their connection's output")


def test_subscriptions_granted_a_lower_qos_are_a_warning_naming_the_granted_qos() -> None:
    workers = [
        WorkerStats(worker=0, due=100, qos_downgraded=6, granted_qos_min=1),
        WorkerStats(worker=1, due=100, qos_downgraded=4, granted_qos_min=1),
        WorkerStats(worker=2, due=100, qos_downgraded=0, granted_qos_min=None),
    ]
    verdict = generator_verdict(workers, late_threshold_ms=5)
    assert not verdict.saturated
    (warning,) = list(verdict.warnings)
    assert "granted 10 subscription(s) QoS 1, lower than asked" in warning


def test_qos2_messages_the_broker_resent_after_release_or_on_a_held_id_are_warnings() -> None:
    workers = [
        WorkerStats(worker=0, due=100, qos2_redelivered=1),
        WorkerStats(worker=1, due=100, qos2_redelivered=1, qos2_id_reused=3),
    ]
    verdict = generator_verdict(workers, late_threshold_ms=5)
    assert not verdict.saturated
    assert list(verdict.warnings) == [
        "the broker sent 2 QoS 2 message(s) again after releasing them (PUBREL): delivered "
        "twice, exactly-once broken by the broker",
        "the broker sent 3 QoS 2 message(s) on a packet id still awaiting PUBREL: dropped as "
        "MQTT 3.1.1 requires, lost by the broker's fault",
    ]


def test_qos2_publishes_answered_with_puback_are_a_warning() -> None:
    verdict = generator_verdict(
        [WorkerStats(worker=0, due=100, publish_qos2_acked_as_qos1=100)], late_threshold_ms=5
    )
    assert list(verdict.warnings) == [
        "the broker answered 100 QoS 2 publish(es) with PUBACK: it treats QoS 2 as QoS 1 "
        "(at least once, duplicates possible)"
    ]


def test_a_message_the_broker_delivered_twice_does_not_end_the_drain_one_message_early() -> None:
    # 100 sent, 100 delivery records of which one is the broker's second delivery of a
    # message (counted by the subscriber, any QoS): one message is still on its way.
    waiting = WorkerStats(sent=100, received=100, duplicate_deliveries=1)
    assert not drained(waiting, 1.0)
    assert drained(WorkerStats(sent=100, received=101, duplicate_deliveries=1), 1.0)
    assert drained(WorkerStats(sent=100, received=300), 3.0)  # fanout: 3 deliveries each
