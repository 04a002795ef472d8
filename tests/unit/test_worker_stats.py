"""Worker stats: one typed record per worker, combined with ``plus``, stored as before."""

import pickle

import pytest

from mqbench.records.worker_stats import WorkerStats

MANIFEST_KEYS = [
    "worker", "pid", "sent", "send_failed", "send_refused", "acked", "received", "role",
    "records_written", "due", "late", "max_send_lag_ns", "timer", "timer_wakeups", "spin_s",
    "wake_margin_us", "publish_yields", "max_loop_lag_ns", "loop_stalls", "loop_stall_ns",
    "loop_probe_ns", "connected", "connect_failed",
    "first_connect_error", "connected_ns", "disconnects", "reconnects", "qos_downgraded",
    "publish_qos2_acked_as_qos1", "qos2_id_reused", "qos2_redelivered", "duplicate_deliveries",
    "unmatched_deliveries",
    "granted_qos_min",
    "outage_total_s", "outage_max_s",
    "pending_write_bytes", "cpu_s", "publish_cpu_fraction", "kernel_stamped_reads",
    "user_stamped_reads", "sched_policy", "t_ns",
]  # fmt: skip


def test_the_manifest_form_keeps_the_documented_keys_in_order() -> None:
    assert list(WorkerStats().to_dict()) == MANIFEST_KEYS


def test_plus_sums_counters_takes_maxima_and_minima_and_keeps_only_shared_identity() -> None:
    a = WorkerStats(
        worker=0, role="both", timer="timerfd", sent=10, received=7, max_send_lag_ns=5,
        granted_qos_min=1, connected_ns=100, publish_cpu_fraction=0.2, first_connect_error=None,
    )  # fmt: skip
    b = WorkerStats(
        worker=1, role="both", timer="timerfd", sent=3, received=2, max_send_lag_ns=9,
        granted_qos_min=None, connected_ns=50, publish_cpu_fraction=None,
        first_connect_error="refused",
    )  # fmt: skip
    total = a.plus(b)
    assert (total.sent, total.received) == (13, 9)
    assert total.max_send_lag_ns == 9 and total.connected_ns == 100
    assert total.granted_qos_min == 1 and total.publish_cpu_fraction == 0.2
    assert total.first_connect_error == "refused"
    assert total.worker is None and total.role == "both" and total.timer == "timerfd"


def test_total_of_no_workers_is_all_zero_and_of_one_is_that_worker() -> None:
    assert WorkerStats.total([]) == WorkerStats()
    one = WorkerStats(worker=3, sent=5)
    assert WorkerStats.total([one]) == one


def test_the_manifest_form_round_trips_and_survives_the_pipe() -> None:
    stats = WorkerStats(worker=2, pid=99, sent=5, spin_s=0.25, timer="loop", granted_qos_min=0)
    assert WorkerStats.from_dict(stats.to_dict()) == stats
    assert pickle.loads(pickle.dumps(stats)) == stats


def test_an_older_manifest_entry_with_missing_and_unknown_keys_reads_with_defaults() -> None:
    stats = WorkerStats.from_dict({"worker": 0, "sent": "12", "retired_counter": 4})
    assert stats.sent == 12 and stats.received == 0 and stats.publish_cpu_fraction is None


def test_a_value_of_the_wrong_type_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match="sent"):
        WorkerStats.from_dict({"sent": [1, 2]})
