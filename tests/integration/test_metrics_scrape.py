"""``run --metrics`` scraped by a real Prometheus during a real run, and the run's
HdrHistogram interval log read back by the HdrHistogram Python package.

Prometheus is Debian's package (scripts/install.sh --dev); the test starts it with its own
config and data folder on a free loopback port and stops it by its PID.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbench.analysis import analyze_run
from mqbench.analysis.series import HDR_LOG, read_series
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.workload.metrics_endpoint import MetricsEndpoint
from mqbench.workload.run import RunResult, SilentReporter, run_scenario

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs prometheus"),
]

SCRAPE = "250ms"
SCENARIO: dict[str, Any] = {
    "name": "live-metrics",
    "targets": ["nats"],
    "workload": {
        "pairs": 2,
        "rate": 50,
        "payload": "64B",
        "warmup": "1s",
        "duration": "6s",
        "drain": "1s",
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


class Prometheus:
    """A Prometheus scraping one target, with its own config and data folder."""

    def __init__(self, folder: Path, target: str) -> None:
        self.port = _free_port()
        config = folder / "prometheus.yml"
        config.write_text(
            f"global: {{scrape_interval: {SCRAPE}, scrape_timeout: {SCRAPE}}}\n"
            "scrape_configs:\n"
            "  - job_name: mqbench\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = (folder / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("prometheus did not start") from None
                time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, expr: str) -> list[Any]:
        q = urllib.parse.urlencode({"query": expr})
        return list(_get(f"{self.url}/api/v1/query?{q}")["data"]["result"])

    def series(self, expr: str, start: float, end: float) -> list[tuple[float, float]]:
        q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": "0.25"})
        (result,) = _get(f"{self.url}/api/v1/query_range?{q}")["data"]["result"]
        return [(float(t), float(v)) for t, v in result["values"]]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()


Scraped = tuple[RunResult, "Prometheus", float, float]
"""The run, the Prometheus that scraped it, and when the run began and ended (epoch s)."""


@pytest.fixture(scope="module")
def scraped(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunResult, Prometheus, float, float]]:
    """One nats run with --metrics scraped by Prometheus; yields after the final scrape."""
    root = tmp_path_factory.mktemp("live")
    endpoint = MetricsEndpoint("127.0.0.1", 0).start()
    prometheus = Prometheus(root, f"127.0.0.1:{endpoint.port}")
    try:
        began = time.time()
        result = run_scenario(
            validate_scenario(SCENARIO, "test"),
            source=ScenarioSource("test", SCENARIO),
            out_root=root / "results",
            argv=["pytest"],
            reporter=endpoint.reporter(SilentReporter()),
        )
        (cell,) = result.cells
        assert cell.totals is not None
        deadline = time.monotonic() + 20  # until a scrape after the cell ended is stored
        while time.monotonic() < deadline:
            running = prometheus.query("mqbench_cell_running")
            if running and running[0]["value"][1] == "0":
                break
            time.sleep(0.25)
        yield result, prometheus, began, time.time()
    finally:
        endpoint.stop()
        prometheus.stop()


def test_prometheus_sees_the_counters_rise_during_the_run_and_end_at_the_totals(
    scraped: Scraped,
) -> None:
    result, prometheus, began, ended = scraped
    (cell,) = result.cells
    assert cell.status == "completed" and cell.totals is not None
    sent = [v for _, v in prometheus.series("mqbench_sent_total", began, ended)]
    rising = [b for a, b in itertools.pairwise(sent) if b > a]
    assert len(rising) >= 5, sent  # counted up while publishing, scrape after scrape
    assert sent == sorted(sent) and sent[0] < cell.totals.sent
    assert sent[-1] == cell.totals.sent
    (received,) = prometheus.query("mqbench_received_total")
    assert float(received["value"][1]) == cell.totals.received
    assert received["metric"]["cell"] == cell.id and received["metric"]["target"] == "nats"
    (count,) = prometheus.query("mqbench_latency_seconds_count")
    assert float(count["value"][1]) == cell.totals.received  # every delivery record read
    (lag,) = prometheus.query("mqbench_send_lag_seconds_count")
    assert float(lag["value"][1]) > 0
    p99 = prometheus.query("histogram_quantile(0.99, mqbench_latency_seconds_bucket)")
    assert 0 < float(p99[0]["value"][1]) < 1.0
    roles = {r["metric"]["role"] for r in prometheus.query("mqbench_rss_bytes")}
    assert roles == {"broker", "generator"}
    cpu = prometheus.query('mqbench_cpu_cores{role="generator"}')
    assert float(cpu[0]["value"][1]) >= 0


def test_the_hdrhistogram_interval_log_of_the_run_reads_back(
    scraped: Scraped,
) -> None:
    from hdrh.histogram import HdrHistogram
    from hdrh.log import HistogramLogReader

    result, *_ = scraped
    (summary,) = analyze_run(result.result_dir, engine="numpy")
    folder = result.result_dir / "cells" / summary.cell_id
    reader = HistogramLogReader(str(folder / HDR_LOG), HdrHistogram(1, 10**12, 3))
    total = HdrHistogram(1, 10**12, 3)
    intervals = 0
    with contextlib.closing(reader):
        while (h := reader.get_next_interval_histogram()) is not None:
            total.add(h)
            intervals += 1
    rows = read_series(folder)
    assert intervals == len(rows) == 6
    assert total.get_total_count() == summary.deliveries_in_window
    assert summary.latency is not None
    p50_ns = total.get_value_at_percentile(50)
    # by receive second vs by intended time: the same deliveries but for the window edges
    assert abs(p50_ns / 1e3 - summary.latency.p50_us) <= 0.05 * summary.latency.p50_us + 5
