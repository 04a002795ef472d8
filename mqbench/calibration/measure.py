"""One calibration cell: a programmatically built scenario through the normal run machinery
(``run_scenario``), analysed with the numpy engine (no Spark), reduced to ``CellFigures``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from mqbench.analysis.api import analyze_run
from mqbench.analysis.summary import CellSummary
from mqbench.brokers.runtime.registry import runtime_capabilities
from mqbench.calibration.model import CellFigures
from mqbench.errors import MqbenchError, ScenarioError
from mqbench.records.cell_entry import CellEntry
from mqbench.scenario.loader import ScenarioSource, describe_validation_error
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import BrokerOptions, Generator, Scenario, Workload
from mqbench.workload.run import SilentReporter, run_scenario

RELAY_VERSION = "mqbench calibration relay"
"""What the manifest of a relay cell records as the broker version."""


@dataclass(frozen=True)
class CellRequest:
    """What to run: one target over one client, ``pairs`` x ``rate_per_publisher`` msg/s."""

    name: str
    """Scenario name (letters, digits, ``-``)."""
    target: str
    runtime: Literal["native", "external"]
    pairs: int
    rate_per_publisher: float
    payload_bytes: int
    warmup_s: float
    duration_s: float
    drain_s: float
    client: str | None = None
    port: int | None = None
    """External runtime: where the relay listens."""
    pid: int | None = None
    """External runtime: the relay process, sampled as the cell's "broker"."""


@dataclass(frozen=True)
class CellOutcome:
    """The figures of a completed cell, or why there are none."""

    figures: CellFigures | None
    error: str | None = None
    broker_version: str | None = None


def calibration_scenario(request: CellRequest) -> Scenario:
    """The one-cell scenario for ``request``: pairs at QoS 0, one worker; an external
    relay's port, PID and version line (ScenarioError when the request is out of range)."""
    broker = BrokerOptions()
    if not runtime_capabilities(request.runtime).starts_broker:  # the relay runs already
        broker = BrokerOptions(
            port=request.port,
            pid=request.pid,
            startup_timeout=10.0,
            options=[{"version": RELAY_VERSION, "label": "relay"}],
        )
    try:
        return Scenario(
            name=request.name,
            description="built by mqbench calibrate",
            targets=[request.target],
            runtime=request.runtime,
            client=[request.client],
            workload=Workload(
                topology="pairs",
                pairs=[request.pairs],
                rate=[request.rate_per_publisher],
                payload=[request.payload_bytes],
                qos=[0],
                warmup=request.warmup_s,
                duration=request.duration_s,
                drain=request.drain_s,
            ),
            generator=Generator(workers=1),
            broker=broker,
        )
    except ValidationError as exc:
        raise ScenarioError(f"mqbench calibrate: {describe_validation_error(exc)}") from None


class _Reporter(SilentReporter):
    """A ``RunReporter`` that passes phase lines on and shows nothing else."""

    def __init__(self, on_phase: Callable[[str], None] | None) -> None:
        self._on_phase = on_phase

    def phase(self, cell: Cell, text: str) -> None:
        """Pass the phase line on (e.g. "starting mosquitto (native)")."""
        if self._on_phase is not None:
            self._on_phase(text)


def figures_from(summary: CellSummary, cell: CellEntry, request: CellRequest) -> CellFigures:
    """The figures calibration keeps from a cell's summary and manifest entry."""
    workers = cell.generator.workers if cell.generator is not None else ()
    fractions = [w.publish_cpu_fraction for w in workers if w.publish_cpu_fraction is not None]
    lat, sent_lat, lag = summary.latency, summary.latency_from_send, summary.send_lag
    return CellFigures(
        offered_msg_s=summary.offered_rate or request.pairs * request.rate_per_publisher,
        pairs=request.pairs,
        rate_per_publisher=request.rate_per_publisher,
        payload_bytes=request.payload_bytes,
        window_s=summary.window_s,
        sent=summary.sent,
        received=summary.received,
        lost=summary.lost,
        latency_p50_us=lat.p50_us if lat else None,
        latency_p99_us=lat.p99_us if lat else None,
        from_send_p50_us=sent_lat.p50_us if sent_lat else None,
        from_send_p99_us=sent_lat.p99_us if sent_lat else None,
        send_lag_p50_us=lag.p50_us if lag else None,
        send_lag_p99_us=lag.p99_us if lag else None,
        generator_cpu_cores=summary.generator_cpu_cores_mean,
        worker_cpu_fraction=max(fractions) if fractions else None,
        peer_cpu_cores=summary.broker_cpu_cores_mean,
        generator_saturated=summary.generator_saturated,
        generator_reason=summary.generator_reason,
    )


def run_cell(
    request: CellRequest, out_root: Path, on_phase: Callable[[str], None] | None = None
) -> CellOutcome:
    """Run ``request`` as a one-cell scenario under ``out_root`` and analyse it with numpy.

    A cell that fails (broker not starting, no client connecting, ...) is an outcome with
    ``error`` set, not an exception; bad requests still raise ``MqbenchError``.
    """
    scenario = calibration_scenario(request)
    result = run_scenario(
        scenario,
        source=ScenarioSource(
            "mqbench calibrate", scenario.model_dump(mode="json", exclude_unset=True)
        ),
        out_root=out_root,
        argv=["mqbench", "calibrate"],
        reporter=_Reporter(on_phase),
    )
    (cell,) = result.cells
    raw_version = (cell.broker or {}).get("version")
    version = None if raw_version is None else str(raw_version)
    if cell.status != "completed":
        return CellOutcome(None, cell.error or cell.status, version)
    try:
        (summary,) = analyze_run(result.result_dir, engine="numpy")
    except MqbenchError as exc:
        return CellOutcome(None, f"analysis failed: {exc}", version)
    return CellOutcome(figures_from(summary, cell, request), None, version)
