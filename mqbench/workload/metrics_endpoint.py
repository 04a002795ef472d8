"""The HTTP side of ``run --metrics``: an OpenMetrics endpoint and the reporter that feeds it.

:class:`MetricsEndpoint` serves ``/metrics`` from a background thread (prometheus_client's
WSGI server: OpenMetrics when the scraper asks for it, as Prometheus does, else the
Prometheus text format); :class:`MetricsReporter` wraps the run's reporter and forwards
every call after updating :class:`~mqbench.workload.live_metrics.LiveMetrics`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mqbench.brokers.runtime.liveness import BrokerExit
from mqbench.errors import UsageError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.scenario.matrix import Cell
from mqbench.workload.coordinator import Progress
from mqbench.workload.live_metrics import LiveMetrics
from mqbench.workload.run import RunReporter


class MetricsReporter:
    """A ``RunReporter`` that keeps :class:`LiveMetrics` current, then calls ``inner``."""

    def __init__(self, inner: RunReporter, live: LiveMetrics) -> None:
        self.inner = inner
        self.live = live

    def run_started(self, result_dir: Path | RemoteRoot, cells: list[Cell]) -> None:
        """Remember the run folder (records are read from it; not from a URI)."""
        if isinstance(result_dir, Path):
            self.live.result_dir = result_dir
        self.inner.run_started(result_dir, cells)

    def cell_started(self, cell: Cell) -> None:
        """Start the cell's series."""
        self.live.cell_started(cell.id, cell.target)
        self.inner.cell_started(cell)

    def phase(self, cell: Cell, text: str) -> None:
        """Forwarded."""
        self.inner.phase(cell, text)

    def progress(self, cell: Cell, progress: Progress) -> None:
        """Counters from the coordinator."""
        self.live.progress(cell.id, progress)
        self.inner.progress(cell, progress)

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        """Final values from the manifest entry."""
        self.live.cell_finished(cell.id, detail)
        self.inner.cell_finished(cell, status, detail)

    def broker_exited(self, cell: Cell, exit: BrokerExit) -> None:
        """Forwarded."""
        self.inner.broker_exited(cell, exit)


class MetricsEndpoint:
    """``http://HOST:PORT/metrics`` for the life of a run (a context manager)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.live = LiveMetrics()
        self._server: Any = None
        self._thread: Any = None

    def start(self) -> MetricsEndpoint:
        """Listen (UsageError when the address cannot be bound)."""
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.live)
        try:
            self._server, self._thread = start_http_server(self.port, self.host, registry)
        except OSError as exc:
            raise UsageError(
                f"--metrics {self.host}:{self.port}: cannot listen ({exc.strerror or exc})"
            ) from None
        self.port = int(self._server.server_address[1])
        return self

    @property
    def url(self) -> str:
        """Where Prometheus scrapes."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def reporter(self, inner: RunReporter) -> MetricsReporter:
        """``inner`` wrapped so the endpoint follows the run."""
        return MetricsReporter(inner, self.live)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> MetricsEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
