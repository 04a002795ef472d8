"""Clock offsets of load tasks to the driver: min-RTT probes against a skewed time service."""

from __future__ import annotations

import socket
import time

import pytest

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError
from mqbench.records.clocks import ClockOffset, GeneratorClocks, TaskClock
from mqbench.workload.clock import Probe, TimeService, estimate, measure_offset

SKEW_NS = 250_000_000


def test_the_probe_with_the_smallest_round_trip_gives_the_offset_and_half_of_it_bounds_it() -> None:
    probes = [
        Probe(sent_ns=0, server_ns=900, received_ns=2_000),  # rtt 2000, offset 100
        Probe(sent_ns=10_000, server_ns=10_030, received_ns=10_100),  # rtt 100, offset 20
        Probe(sent_ns=20_000, server_ns=19_000, received_ns=24_000),  # rtt 4000, offset 3000
    ]
    best = estimate(probes)
    assert best == ClockOffset(offset_ns=20, error_ns=50, rtt_ns=100, probes=3)


def test_no_probes_give_no_estimate() -> None:
    with pytest.raises(ValueError):
        estimate([])


def test_a_driver_clock_behind_the_task_is_measured_within_the_error_bound() -> None:
    service = TimeService("127.0.0.1", clock=lambda: time.time_ns() - SKEW_NS)
    try:
        offset = measure_offset(service.endpoint, probes=8)
    finally:
        service.close()
    assert offset.probes == 8
    assert abs(offset.offset_ns - SKEW_NS) <= offset.error_ns
    assert offset.error_ns * 2 == offset.rtt_ns or offset.error_ns * 2 == offset.rtt_ns + 1


def test_a_task_clock_behind_the_driver_has_a_negative_offset() -> None:
    service = TimeService("127.0.0.1")
    try:
        offset = measure_offset(service.endpoint, probes=8, clock=lambda: time.time_ns() - SKEW_NS)
    finally:
        service.close()
    assert abs(offset.offset_ns + SKEW_NS) <= offset.error_ns


def test_an_unreachable_time_service_is_a_transport_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
    with pytest.raises(TransportError, match="clock probe to the driver"):
        measure_offset(Endpoint("127.0.0.1", port), timeout_s=1.0)


def test_task_clocks_round_trip_through_their_manifest_form_with_the_start_spread() -> None:
    before = ClockOffset(offset_ns=5, error_ns=10, rtt_ns=20, probes=16)
    after = ClockOffset(offset_ns=-15, error_ns=12, rtt_ns=24, probes=16)
    clocks = GeneratorClocks(
        engine="spark",
        master="local-cluster[2,1,1024]",
        tasks=(
            TaskClock(0, "h", 1, before, after, 1_000),
            TaskClock(1, "h", 2, before, None, 4_000),
        ),
        cross_task_routes=0,
        latency_error_ns=0,
    )
    data = clocks.to_dict()
    assert data["start_spread_ns"] == 3_000
    assert GeneratorClocks.from_dict(data) == clocks
    # the after-run drift widens a task's bound
    assert clocks.tasks[0].error_ns == 12 + 20
    assert clocks.tasks[1].error_ns == 10


def test_clocks_of_another_version_are_refused() -> None:
    with pytest.raises(ValueError, match="version 99"):
        GeneratorClocks.from_dict({"version": 99, "tasks": []})
