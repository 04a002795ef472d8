"""``run --metrics ADDRESS``: OpenMetrics of the running cells for Prometheus and friends.

The run's reporter (what the CLI shows) is wrapped by :class:`MetricsReporter`, which keeps
the counters the coordinator already reports (sent, received, send failures, connected
clients) per cell. Everything else is read from the cell's folder only when a scrape
arrives, so the engine has no extra hook and nothing runs between scrapes: the records
written since the last scrape (latency from the intended send time, send lag), and the
latest broker and generator CPU/RSS rows of ``resources.csv``. Record files hold whole
records up to the last flush (at least once a second), so the histograms trail by at most
that. When a cell ends, its counters become the manifest's ``totals`` exactly, and every
cell keeps its final values while the endpoint is up.

Series (each with ``cell`` and ``target`` labels): ``mqbench_sent_total``,
``mqbench_received_total``, ``mqbench_send_failed_total``, ``mqbench_connected_clients``,
``mqbench_cell_running`` (1 while the cell runs), ``mqbench_latency_seconds`` and
``mqbench_send_lag_seconds`` (histograms over the whole cell, warm-up included),
``mqbench_cpu_cores`` and ``mqbench_rss_bytes`` (label ``role``: broker, generator).
"""

from __future__ import annotations

import csv
import io
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from mqbench.errors import UsageError
from mqbench.records.cell_entry import CellEntry, Schedule
from mqbench.records.format import LAT_UNIT_NS, RECORD_DTYPE, RECORD_SIZE, SEND_OK
from mqbench.records.intended import intended_ns_array
from mqbench.workload.coordinator import Progress

BUCKETS_S: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds of the latency and send-lag histogram buckets, in seconds (plus +Inf)."""
DEFAULT_HOST: Final = "127.0.0.1"
ROLES: Final = ("broker", "generator")


def parse_address(text: str) -> tuple[str, int]:
    """``PORT``, ``:PORT`` or ``HOST:PORT`` (``[v6]:PORT``); the host defaults to 127.0.0.1."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(f"--metrics {text!r}: give PORT or HOST:PORT (e.g. 127.0.0.1:9464)")
    return host, port


@dataclass
class Histogram:
    """Cumulative-ready bucket counts and the sum of observations (seconds)."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(BUCKETS_S) + 1, np.int64))
    total_s: float = 0.0

    def add(self, seconds: np.ndarray) -> None:
        """Count ``seconds`` into the buckets (``le`` is inclusive)."""
        if seconds.size == 0:
            return
        idx = np.searchsorted(np.asarray(BUCKETS_S), seconds, side="left")
        self.counts += np.bincount(idx, minlength=len(BUCKETS_S) + 1)
        self.total_s += float(seconds.sum())

    def buckets(self) -> list[tuple[str, float]]:
        """(``le``, cumulative count) pairs, ending with ``+Inf``."""
        cum = np.cumsum(self.counts)
        labels = [repr(b) for b in BUCKETS_S] + ["+Inf"]
        return [(le, float(c)) for le, c in zip(labels, cum, strict=True)]


class FileTail:
    """The whole records appended to a record file since the last read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_new(self) -> np.ndarray:
        """Records between the last read and the last whole record now on disk."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return np.zeros(0, RECORD_DTYPE)
        count = (size - self.offset) // RECORD_SIZE
        if count <= 0:
            return np.zeros(0, RECORD_DTYPE)
        rec = np.fromfile(self.path, dtype=RECORD_DTYPE, count=count, offset=self.offset)
        self.offset += rec.size * RECORD_SIZE
        return rec


@dataclass
class CellLive:
    """What the endpoint knows of one cell."""

    cell_id: str
    target: str
    folder: Path | None
    sent: int = 0
    received: int = 0
    send_failed: int = 0
    connected: int = 0
    running: bool = True
    latency: Histogram = field(default_factory=Histogram)
    send_lag: Histogram = field(default_factory=Histogram)
    cpu: dict[str, float] = field(default_factory=dict)
    rss: dict[str, int] = field(default_factory=dict)
    schedule: Schedule | None = None
    tails: dict[str, FileTail] = field(default_factory=dict)

    def refresh(self) -> None:
        """Read what the cell's folder gained since the last refresh."""
        if self.folder is None:
            return
        if self.schedule is None:
            self.schedule = _schedule(self.folder.parent.parent, self.cell_id)
        if self.schedule is not None:
            for path in sorted(self.folder.glob("*.bin")):
                tail = self.tails.setdefault(path.name, FileTail(path))
                self._count(path.name, tail.read_new(), self.schedule)
        self._resources()

    def _count(self, name: str, rec: np.ndarray, s: Schedule) -> None:
        keep = rec["pub"] < s.publishers
        if name.startswith("sends-"):
            keep &= rec["sub"] == SEND_OK
        rec = rec[keep]
        if rec.size == 0:
            return
        intended = intended_ns_array(s.start_ns, s.rate, s.publishers, rec["pub"], rec["seq"])
        if name.startswith("deliveries-"):
            t_recv = rec["t_sent"] + rec["lat"].astype(np.int64) * LAT_UNIT_NS
            self.latency.add((t_recv - intended) / 1e9)
        elif name.startswith("sends-"):
            self.send_lag.add(np.maximum(rec["t_sent"] - intended, 0) / 1e9)

    def _resources(self) -> None:
        assert self.folder is not None
        try:
            text = (self.folder / "resources.csv").read_text(encoding="utf-8")
        except OSError:
            return
        for row in csv.DictReader(io.StringIO(text)):
            role = row.get("role")
            if role in ROLES:
                try:
                    self.cpu[role] = float(row["cpu_cores"])
                    self.rss[role] = int(row["rss_bytes"])
                except (TypeError, ValueError):
                    continue  # a row being written


def _schedule(result_dir: Path, cell_id: str) -> Schedule | None:
    """The cell's schedule from the manifest, once the engine has written it."""
    try:
        manifest = json.loads((result_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for data in manifest.get("cells") or []:
        if isinstance(data, dict) and data.get("id") == cell_id:
            return CellEntry.from_dict(data).schedule
    return None


class LiveMetrics:
    """The state behind the endpoint: one :class:`CellLive` per cell seen, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        """Guards the counters (taken briefly by the coordinator's progress calls)."""
        self._read_lock = threading.Lock()
        """Guards reading the cell folders (a scrape), so progress never waits for it."""
        self._cells: dict[str, CellLive] = {}
        self.result_dir: Path | None = None

    def cell_started(self, cell_id: str, target: str) -> None:
        """A cell begins; its records will be in the run folder's ``cells/<id>``."""
        folder = self.result_dir / "cells" / cell_id if self.result_dir else None
        with self._lock:
            self._cells[cell_id] = CellLive(cell_id, target, folder)

    def progress(self, cell_id: str, p: Progress) -> None:
        """The coordinator's latest counters."""
        with self._lock:
            live = self._cells.get(cell_id)
            if live is not None:
                live.sent, live.received = max(live.sent, p.sent), max(live.received, p.received)
                live.send_failed = max(live.send_failed, p.send_failed)
                live.connected = p.connected

    def cell_finished(self, cell_id: str, entry: CellEntry) -> None:
        """The cell ended: its counters become the manifest's totals, its records are read
        to the end."""
        with self._read_lock:
            live = self._cells.get(cell_id)
            if live is None:
                return
            live.refresh()
            with self._lock:
                if entry.totals is not None:
                    live.sent, live.received = entry.totals.sent, entry.totals.received
                live.running = False
                live.connected = 0

    def snapshot(self) -> list[CellLive]:
        """Every cell, refreshed from its folder (called by a scrape)."""
        with self._read_lock:
            cells = list(self._cells.values())
            for live in cells:
                if live.running:
                    live.refresh()
        return cells

    def collect(self) -> Iterator[Any]:
        """The metric families of a scrape (a prometheus_client collector)."""
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        cells = self.snapshot()
        labels = ["cell", "target"]
        counters: dict[str, tuple[str, Callable[[CellLive], int]]] = {
            "sent": ("messages handed to clients (whole cell)", lambda c: c.sent),
            "received": ("delivery records written (whole cell)", lambda c: c.received),
            "send_failed": ("messages due while a client was away", lambda c: c.send_failed),
        }
        for name, (text, value) in counters.items():
            family = CounterMetricFamily(f"mqbench_{name}", text, labels=labels)
            for c in cells:
                family.add_metric([c.cell_id, c.target], value(c))
            yield family
        gauges: dict[str, tuple[str, Callable[[CellLive], int]]] = {
            "connected_clients": ("clients connected", lambda c: c.connected),
            "cell_running": ("1 while the cell runs", lambda c: int(c.running)),
        }
        for name, (text, value) in gauges.items():
            gauge = GaugeMetricFamily(f"mqbench_{name}", text, labels=labels)
            for c in cells:
                gauge.add_metric([c.cell_id, c.target], value(c))
            yield gauge
        yield from self._histograms(cells, labels, HistogramMetricFamily)
        yield from self._resource_families(cells, labels, GaugeMetricFamily)

    @staticmethod
    def _histograms(cells: list[CellLive], labels: list[str], kind: Any) -> Iterator[Any]:
        for name, text, attr in (
            ("latency_seconds", "latency from the intended send time", "latency"),
            ("send_lag_seconds", "actual minus intended send time", "send_lag"),
        ):
            family = kind(f"mqbench_{name}", text, labels=labels)
            for c in cells:
                hist: Histogram = getattr(c, attr)
                family.add_metric([c.cell_id, c.target], hist.buckets(), hist.total_s)
            yield family

    @staticmethod
    def _resource_families(cells: list[CellLive], labels: list[str], kind: Any) -> Iterator[Any]:
        by_role = [*labels, "role"]
        cpu = kind("mqbench_cpu_cores", "CPU of the role's processes (1: a core)", labels=by_role)
        rss = kind("mqbench_rss_bytes", "resident memory of the role's processes", labels=by_role)
        for c in cells:
            for role in ROLES:
                if role in c.cpu:
                    cpu.add_metric([c.cell_id, c.target, role], c.cpu[role])
                    rss.add_metric([c.cell_id, c.target, role], c.rss[role])
        yield cpu
        yield rss
