"""Real-time scheduling of the workers, decided from injected machine facts (issue 21)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from mqbench.errors import ScenarioError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.timing import TimingEntry, WakeupFloor
from mqbench.records.worker_stats import WorkerStats
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import expand
from mqbench.scenario.model import Scenario
from mqbench.workload.cell_timing import RunTiming, TimingHints
from mqbench.workload.realtime import (
    RT_CONNECTIONS_PER_WORKER,
    RT_MESSAGES_PER_CPU,
    SMALL_SHARE_CORES,
    BrokerPlacement,
    MachineFacts,
    RealtimeDecision,
    RealtimeSettings,
    apply_realtime,
    decide,
    estimate_generator_cores,
    hold_dma_latency,
    policy_name,
    read_throttle_share,
    release_dma_latency,
)
from mqbench.workload.selfcheck import generator_verdict

TWO_CORES = MachineFacts(cpus=(0, 1), permission=None)
LOCAL_ON_ALL = BrokerPlacement(local=True, cpus=(0, 1))
LOCAL_ON_CPU0 = BrokerPlacement(local=True, cpus=(0,))


def test_a_broker_limited_to_one_of_two_cores_leaves_the_other_to_real_time_workers() -> None:
    decision = decide("auto", TWO_CORES, LOCAL_ON_CPU0, generator_cores=1.0)
    assert decision.policy == "fifo" and decision.refused is None
    assert decision.settings is not None and decision.settings.cpus == (1,)
    assert decision.broker_cpus == (0,)
    assert "broker runs on CPU 0, the workers on CPU 1" in decision.reason


def test_a_broker_on_every_cpu_keeps_them_when_the_generator_needs_much() -> None:
    decision = decide("auto", TWO_CORES, LOCAL_ON_ALL, generator_cores=0.8)
    assert decision.policy == "other" and decision.settings is None
    assert decision.refused is None
    assert decision.reason.startswith("auto: off, the broker may use every CPU")
    assert "~0.80 core" in decision.reason


def test_a_generator_that_needs_a_small_share_runs_real_time_beside_an_unlimited_broker() -> None:
    decision = decide("auto", TWO_CORES, LOCAL_ON_ALL, generator_cores=SMALL_SHARE_CORES)
    assert decision.policy == "fifo"
    assert decision.settings is not None and decision.settings.cpus == ()


def test_a_generator_estimated_at_a_fifth_of_a_core_stays_normal_beside_an_unlimited_broker() -> (
    None
):
    # Measured: at 11,314 msg/s (estimated 0.22 core) real time quadrupled mosquitto's own
    # subscriber's p99; at 22,627 msg/s (0.45) the broker fell a second behind.
    decision = decide("auto", TWO_CORES, LOCAL_ON_ALL, generator_cores=0.2)
    assert decision.policy == "other" and decision.settings is None
    assert "more than 0.1" in decision.reason


def test_an_unknown_broker_placement_counts_as_every_cpu() -> None:
    unknown = BrokerPlacement(local=True, cpus=())
    assert decide("auto", TWO_CORES, unknown, generator_cores=0.9).policy == "other"


def test_on_without_room_is_refused_in_one_line_and_auto_never_refuses() -> None:
    on = decide("on", TWO_CORES, LOCAL_ON_ALL, generator_cores=0.9)
    assert on.refused is not None and "\n" not in on.refused
    assert on.refused.startswith("generator.realtime on: the broker may use every CPU")
    assert decide("auto", TWO_CORES, LOCAL_ON_ALL, generator_cores=0.9).refused is None


def test_no_permission_turns_real_time_off_and_refuses_on() -> None:
    machine = MachineFacts(cpus=(0, 1), permission="operation not permitted")
    auto = decide("auto", machine, LOCAL_ON_CPU0, generator_cores=0.1)
    assert auto.policy == "other" and "no permission for SCHED_FIFO" in auto.reason
    on = decide("on", machine, LOCAL_ON_CPU0, generator_cores=0.1)
    assert on.refused == (
        "generator.realtime on: no permission for SCHED_FIFO (operation not permitted)"
    )


def test_off_is_off_whatever_the_machine_allows() -> None:
    decision = decide("off", TWO_CORES, LOCAL_ON_CPU0, generator_cores=0.1)
    assert decision.policy == "other" and decision.reason == "generator.realtime is off"


def test_a_broker_elsewhere_needs_no_isolation() -> None:
    decision = decide("on", TWO_CORES, BrokerPlacement(local=False), generator_cores=2.0)
    assert decision.policy == "fifo" and decision.settings is not None
    assert decision.settings.cpus == ()


def test_the_dma_latency_hold_is_dropped_where_the_device_cannot_be_written() -> None:
    machine = MachineFacts(cpus=(0, 1), permission=None, dma_latency=False)
    decision = decide("auto", machine, LOCAL_ON_CPU0, generator_cores=0.1)
    assert decision.settings is not None and decision.settings.dma_latency_us is None


def test_the_generator_estimate_uses_the_calibrated_ceiling_when_there_is_one() -> None:
    assert estimate_generator_cores(1000.0, 1000.0, 1) == pytest.approx(0.1)
    assert estimate_generator_cores(1000.0, 1000.0, 1, ceiling_per_worker=9000.0) == (
        pytest.approx(0.1)
    )
    assert estimate_generator_cores(50_000.0, 50_000.0, 2) == 2.0  # at most a core per worker


def test_policy_names_key_the_wakeup_floors() -> None:
    assert policy_name(None) == "other"
    assert policy_name(RealtimeSettings(dma_latency_us=0, timer_slack_ns=None)) == "fifo+dma"
    assert policy_name(RealtimeSettings(policy="other", dma_latency_us=None, timer_slack_ns=1)) == (
        "other+slack"
    )


def test_the_throttle_share_is_read_from_the_kernel_settings(tmp_path: Path) -> None:
    (tmp_path / "sched_rt_runtime_us").write_text("950000\n")
    (tmp_path / "sched_rt_period_us").write_text("1000000\n")
    assert read_throttle_share(tmp_path) == 0.95
    (tmp_path / "sched_rt_runtime_us").write_text("-1\n")
    assert read_throttle_share(tmp_path) is None


def test_the_dma_latency_hold_writes_the_value_and_keeps_the_file_open(tmp_path: Path) -> None:
    device = tmp_path / "cpu_dma_latency"
    assert hold_dma_latency(0, device) is None
    assert device.read_bytes() == b"\x00\x00\x00\x00"
    release_dma_latency()
    missing = hold_dma_latency(0, tmp_path / "absent" / "dev")
    assert missing is not None and "No such file" in missing


def test_a_dma_latency_value_the_device_refuses_holds_nothing_open() -> None:
    refused = hold_dma_latency(0, Path("/dev/full"))  # opens, and every write fails
    assert refused is not None and "No space left" in refused
    gc.collect()  # an unclosed handle would be reported (an error in this suite) here
    release_dma_latency()  # nothing is held: nothing to close


def test_applying_no_settings_changes_nothing() -> None:
    applied = apply_realtime(None)
    assert applied.policy == "other" and applied.errors == []


def test_the_manifest_records_the_policy_the_cpus_and_the_floor() -> None:
    floor = WakeupFloor("fifo+dma", 16.0, 26.0, 59.0, 120.0, 3000, "2026-01-01T00:00:00+00:00")
    decision = decide("auto", TWO_CORES, LOCAL_ON_CPU0, generator_cores=0.3)
    entry = decision.entry(floor)
    data = entry.to_dict()
    assert data["policy"] == "fifo" and data["priority"] == 1
    assert data["worker_cpus"] == [1] and data["broker_cpus"] == [0]
    assert data["dma_latency_us"] == 0 and data["receive_stamp"] == "user"
    assert data["wakeup_floor"]["p99_us"] == 26.0
    assert TimingEntry.from_dict(data) == entry
    cell = CellEntry(id="c", timing=entry)
    assert CellEntry.from_dict(cell.to_dict()).timing == entry


def test_a_malformed_timing_record_names_the_cell_and_the_key() -> None:
    from mqbench.records.cell_entry import CellEntryError

    bad = {"id": "c", "timing": {"mode": "auto", "policy": "rr", "reason": ""}}
    with pytest.raises(CellEntryError, match=r"cell c: timing: timing\.policy 'rr'"):
        CellEntry.from_dict(bad)


def _scenario(runtime: str = "native", realtime: str = "on", **extra: object) -> Scenario:
    data: dict[str, object] = {
        "name": "t",
        "targets": ["mosquitto"],
        "runtime": runtime,
        "workload": {"pairs": 10, "rate": 10, "payload": "64B", "duration": "2s"},
        "generator": {"realtime": realtime},
        **extra,
    }
    if runtime == "external":
        data["broker"] = {"port": 1883}
    return validate_scenario(data, "t.yaml")


def _timing(scenario: Scenario, permission: str | None = None) -> RunTiming:
    return RunTiming(scenario, machine=MachineFacts(cpus=(0, 1), permission=permission))


def test_a_native_profile_predicts_the_broker_on_the_first_cpus() -> None:
    scenario = _scenario(resources=["1cpu-2g"])
    timing = _timing(scenario)
    cell = expand(scenario)[0]
    assert timing.predicted_placement(cell) == BrokerPlacement(True, (0,))
    timing.check(expand(scenario))  # room on CPU 1: accepted


def test_a_docker_profile_sets_a_quota_not_a_cpuset_so_the_broker_may_use_every_cpu() -> None:
    scenario = _scenario(runtime="docker", resources=["1cpu-2g"])
    cell = expand(scenario)[0]
    assert _timing(scenario).predicted_placement(cell) == BrokerPlacement(True, (0, 1))


def test_an_external_broker_on_loopback_counts_as_local() -> None:
    scenario = _scenario(runtime="external")
    placement = _timing(scenario).predicted_placement(expand(scenario)[0])
    assert placement.local and placement.cpus == ()


def test_the_run_refuses_realtime_on_for_a_cell_without_permission_in_one_line() -> None:
    scenario = _scenario(resources=["1cpu-2g"])
    with pytest.raises(ScenarioError) as caught:
        _timing(scenario, permission="operation not permitted").check(expand(scenario))
    assert str(caught.value) == (
        "mosquitto-64B-10pairs-10hz-qos0-1cpu-2g: generator.realtime on: no permission for "
        "SCHED_FIFO (operation not permitted)"
    )


def test_the_calibrated_floor_of_the_decided_policy_goes_to_the_cell() -> None:
    floor = WakeupFloor("fifo+dma", 16.0, 26.0, 59.0, 120.0, 3000)
    scenario = _scenario(resources=["1cpu-2g"])
    timing = RunTiming(
        scenario,
        TimingHints(wakeup={"fifo+dma": floor}),
        MachineFacts(cpus=(0, 1), permission=None),
    )
    decision = timing.decide(expand(scenario)[0], BrokerPlacement(True, (0,)))
    assert timing.floor(decision) == floor
    off = _scenario(realtime="off")
    decision = RunTiming(off, timing.hints, timing.machine).decide(
        expand(off)[0], BrokerPlacement(True, (0,))
    )
    assert decision.policy == "other" and timing.floor(decision) is None


def test_yaml_on_and_off_read_as_booleans_are_taken_as_the_words() -> None:
    assert _scenario(realtime=True).generator.realtime == "on"  # type: ignore[arg-type]
    assert _scenario(realtime=False).generator.realtime == "off"  # type: ignore[arg-type]


def test_a_real_time_worker_at_the_throttle_is_reported_with_the_kernels_limit() -> None:
    busy = WorkerStats(worker=0, publish_cpu_fraction=0.97, sched_policy="fifo")
    verdict = generator_verdict([busy], late_threshold_ms=5.0, rt_throttle_share=0.95)
    assert verdict.saturated
    assert verdict.reasons == (
        "worker 0 used 97% of a core under SCHED_FIFO: the kernel's real-time limit "
        "(95% of a core) throttles it",
    )


def test_a_worker_that_did_not_get_the_decided_policy_is_named() -> None:
    worker = WorkerStats(worker=1, publish_cpu_fraction=0.1, sched_policy="other")
    verdict = generator_verdict([worker], late_threshold_ms=5.0, expected_policy="fifo")
    assert not verdict.saturated
    assert verdict.warnings == ("worker 1 ran other, not fifo as decided",)


def test_auto_keeps_real_time_off_for_a_worker_with_more_connections_than_it_should_hold() -> None:
    many = decide(
        "auto",
        TWO_CORES,
        LOCAL_ON_CPU0,
        generator_cores=0.5,
        connections_per_worker=RT_CONNECTIONS_PER_WORKER + 1,
    )
    assert many.policy == "other" and many.refused is None
    assert "1,001 connections per worker" in many.reason and "ksoftirqd" in many.reason
    few = decide(
        "auto",
        TWO_CORES,
        LOCAL_ON_CPU0,
        generator_cores=0.5,
        connections_per_worker=RT_CONNECTIONS_PER_WORKER,
    )
    assert few.policy == "fifo"
    asked = decide("on", TWO_CORES, LOCAL_ON_CPU0, generator_cores=0.5, connections_per_worker=2000)
    assert asked.policy == "fifo" and asked.refused is None


def _auto_beside_a_one_cpu_mosquitto(workload: dict[str, object]) -> RealtimeDecision:
    """``auto``'s decision for a one-worker cell of ``workload`` with mosquitto on CPU 0."""
    scenario = validate_scenario(
        {
            "name": "t",
            "targets": ["mosquitto"],
            "resources": ["1cpu-2g"],
            "workload": {**workload, "duration": "2s"},
            "generator": {"realtime": "auto", "workers": 1},
        },
        "t.yaml",
    )
    timing = _timing(scenario)
    cell = expand(scenario)[0]
    return timing.decide(cell, timing.predicted_placement(cell))


def test_a_paper_topology_cell_of_a_thousand_pairs_on_one_worker_runs_without_real_time() -> None:
    decision = _auto_beside_a_one_cpu_mosquitto({"pairs": 1000, "rate": 10, "payload": "1KiB"})
    assert decision.policy == "other"
    assert decision.reason.startswith("auto: off, 2,000 connections per worker")


def test_auto_keeps_a_busy_worker_normal_even_on_a_cpu_of_its_own() -> None:
    busy = decide(
        "auto",
        TWO_CORES,
        LOCAL_ON_CPU0,
        generator_cores=0.45,
        messages_per_s=2 * 32_000,
    )
    assert busy.policy == "other" and busy.refused is None
    assert "64,000 messages a second sent and received per worker CPU" in busy.reason
    assert "ksoftirqd" in busy.reason
    quiet = decide(
        "auto", TWO_CORES, LOCAL_ON_CPU0, generator_cores=0.1, messages_per_s=RT_MESSAGES_PER_CPU
    )
    assert quiet.policy == "fifo" and quiet.settings is not None
    assert quiet.settings.cpus == (1,)
    asked = decide("on", TWO_CORES, LOCAL_ON_CPU0, generator_cores=0.45, messages_per_s=64_000)
    assert asked.policy == "fifo" and asked.refused is None


def test_the_message_bound_counts_every_cpu_the_workers_may_use() -> None:
    four = MachineFacts(cpus=(0, 1, 2, 3), permission=None)
    on_cpu0 = decide(
        "auto", four, LOCAL_ON_CPU0, generator_cores=0.3, messages_per_s=3 * RT_MESSAGES_PER_CPU
    )
    assert on_cpu0.policy == "fifo"  # three worker CPUs, each at the bound
    remote = decide(
        "auto",
        TWO_CORES,
        BrokerPlacement(local=False),
        generator_cores=0.3,
        messages_per_s=2 * RT_MESSAGES_PER_CPU + 2,
    )
    assert remote.policy == "other"
    assert "8,001 messages a second" in remote.reason


def test_a_broker_saturating_cell_with_a_one_cpu_broker_runs_its_workers_normal() -> None:
    decision = _auto_beside_a_one_cpu_mosquitto({"pairs": 20, "rate": 1600, "payload": 64})
    assert decision.policy == "other"
    assert decision.reason.startswith("auto: off, 64,000 messages a second")
