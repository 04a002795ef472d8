"""The live metrics endpoint's state: addresses, histograms, record tails, exposition."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis_fixtures import MS, intended, records, sends_ok

from mqbench.errors import UsageError
from mqbench.records.cell_entry import CellEntry
from mqbench.workload.coordinator import Progress
from mqbench.workload.live_metrics import FileTail, Histogram, LiveMetrics, parse_address
from mqbench.workload.metrics_endpoint import MetricsEndpoint


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("9464", ("127.0.0.1", 9464)),
        (":9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("[::1]:9464", ("::1", 9464)),
    ],
)
def test_an_address_without_a_host_listens_on_loopback(text: str, address: tuple) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["", "host:", "x:99999", "abc"])
def test_a_bad_address_is_a_usage_error_naming_it(text: str) -> None:
    with pytest.raises(UsageError, match="--metrics"):
        parse_address(text)


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = Histogram()
    h.add(np.array([0.0001, 0.0002, 0.003, 20.0]))
    buckets = dict(h.buckets())
    assert buckets["0.0001"] == 1 and buckets["0.00025"] == 2 and buckets["0.005"] == 3
    assert buckets["10.0"] == 3 and buckets["+Inf"] == 4
    assert h.total_s == pytest.approx(20.0033)


def test_a_tail_reads_only_whole_records_and_each_once(tmp_path: Path) -> None:
    path = tmp_path / "deliveries-0.bin"
    data = records([(i, 10, 0, 0, i) for i in range(3)]).tobytes()
    path.write_bytes(data[:-5])  # the last record half written
    tail = FileTail(path)
    assert tail.read_new()["seq"].tolist() == [0, 1]
    assert tail.read_new().size == 0
    path.write_bytes(data)
    assert tail.read_new()["seq"].tolist() == [2]


def _cell_folder(root: Path) -> Path:
    folder = root / "cells" / "c0"
    folder.mkdir(parents=True)
    deliveries = [(intended(0, s), 2000 * (s + 1), 0, 0, s) for s in range(4)]  # 0.2..0.8 ms
    (folder / "deliveries-0.bin").write_bytes(records(deliveries).tobytes())
    (folder / "sends-0.bin").write_bytes(sends_ok(1, range(4), lag_ns=MS).tobytes())
    (folder / "resources.csv").write_text(
        "t_ns,role,pid,cpu_cores,rss_bytes\n1,broker,7,0.25,1000\n2,generator,8,0.5,2000\n"
    )
    schedule = {"kind": "interleaved", "start_ns": 0, "rate": 1000.0, "publishers": 1}
    cell = {"id": "c0", "index": 0, "repeat": 0, "status": "running", "error": None}
    (root / "manifest.json").write_text(json.dumps({"cells": [{**cell, "schedule": schedule}]}))
    return folder


def _progress(sent: int, received: int) -> Progress:
    return Progress("publishing", 1.0, 2.0, 1000.0, 1000.0, 1000.0, sent, received, 2, 2)


def test_a_scrape_shows_counters_histograms_and_resources_per_cell(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry
    from prometheus_client.openmetrics.exposition import generate_latest

    _cell_folder(tmp_path)
    live = LiveMetrics()
    live.result_dir = tmp_path
    live.cell_started("c0", "nats")
    live.progress("c0", _progress(4, 3))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(live)
    text = generate_latest(registry).decode()
    labels = '{cell="c0",target="nats"}'
    assert f"mqbench_sent_total{labels} 4.0" in text
    assert f"mqbench_received_total{labels} 3.0" in text
    assert 'mqbench_latency_seconds_bucket{cell="c0",le="0.0005",target="nats"} 2.0' in text
    assert f"mqbench_latency_seconds_count{labels} 4.0" in text
    assert 'mqbench_send_lag_seconds_bucket{cell="c0",le="0.001",target="nats"} 4.0' in text
    assert 'mqbench_cpu_cores{cell="c0",role="broker",target="nats"} 0.25' in text
    assert 'mqbench_rss_bytes{cell="c0",role="generator",target="nats"} 2000.0' in text
    assert text.rstrip().endswith("# EOF")
    generate_latest(registry)  # a second scrape reads nothing twice
    assert live.snapshot()[0].latency.buckets()[-1][1] == 4


def test_a_finished_cell_reports_the_manifest_totals_and_stops_running(tmp_path: Path) -> None:
    _cell_folder(tmp_path)
    live = LiveMetrics()
    live.result_dir = tmp_path
    live.cell_started("c0", "nats")
    live.progress("c0", _progress(3, 2))
    entry = CellEntry.from_dict(
        {
            "id": "c0",
            "index": 0,
            "repeat": 0,
            "status": "completed",
            "error": None,
            "totals": {"sent": 4, "received": 4},
        }
    )
    live.cell_finished("c0", entry)
    (cell,) = live.snapshot()
    assert (cell.sent, cell.received, cell.running) == (4, 4, False)


def test_the_endpoint_serves_openmetrics_on_a_loopback_port_and_stops() -> None:
    endpoint = MetricsEndpoint("127.0.0.1", 0).start()
    try:
        assert endpoint.url.startswith("http://127.0.0.1:") and endpoint.port > 0
        request = urllib.request.Request(
            endpoint.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert "openmetrics" in response.headers["Content-Type"]
            assert response.read().decode().endswith("# EOF\n")
    finally:
        endpoint.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(endpoint.url, timeout=2)
