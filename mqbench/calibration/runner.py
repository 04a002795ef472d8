"""The whole calibration: floors through relays, the same cell per broker, ceilings.

Order: for each protocol its floor (the lean client through the broker-less relay) and then
every selected broker of that protocol at the same low rate, so floor and broker are
measured close together; then the ceiling of each protocol's lean client. Every cell is a
real mqbench cell (``measure.run_cell``) in a temporary result folder that is removed at the
end. A cell that fails is recorded with its reason; only Ctrl-C stops the calibration.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mqbench.brokers.registry import get_target
from mqbench.calibration.ceiling import SearchOutcome, SearchPlan, judge_figures, search_ceiling
from mqbench.calibration.measure import CellOutcome, CellRequest, run_cell
from mqbench.calibration.model import (
    BrokerResult,
    Calibration,
    CeilingBounds,
    CeilingResult,
    CeilingStep,
    FloorResult,
    RelayHop,
    Settings,
    current_host,
)
from mqbench.calibration.relay_process import RelayProcess
from mqbench.calibration.relays import RELAY_PROTOCOLS
from mqbench.calibration.wakeup import wakeup_results
from mqbench.calibration.zenoh_peer import CLIENT as ZENOH_PEER_CLIENT
from mqbench.errors import MqbenchError
from mqbench.workload.run import RunInterrupted

Progress = Callable[[str], None]
"""Receives one line per calibration step (for the CLI to show)."""

RELAY_TARGET: dict[str, str] = {
    "mqtt": "mosquitto",
    "nats": "nats",
    "redis": "redis",
    "amqp": "rabbitmq-amqp",
    "zenoh": "zenoh",
}
"""A target of each protocol for relay cells (the external runtime needs one; only its
protocol matters: the relay is what listens)."""

PATHS: dict[str, str] = {
    "zenoh": "zenoh peer to peer (lean client in peer mode, discovery peer)",
}
DEFAULT_PATH = "relay process on 127.0.0.1"
WAKEUP_PROBE_MAX_S = 3.0
"""The wake-up floor is probed for ``--duration`` per policy, at most this long."""


@dataclass(frozen=True)
class CalibrationRequest:
    """What to calibrate and how."""

    protocols: list[str]
    """Protocols whose floor and ceiling are measured."""
    targets: list[str]
    """Broker targets (native runtime) measured at the floor's rate."""
    settings: Settings
    search: SearchPlan = field(default_factory=SearchPlan)
    bounds: CeilingBounds = field(default_factory=CeilingBounds)


def default_settings(duration_s: float = 3.0) -> Settings:
    """10 pairs x 20 msg/s, 64 B, QoS 0, ``duration_s`` measured; ceiling from 250 msg/s."""
    plan = SearchPlan()
    return Settings(
        pairs=10,
        rate_per_publisher=20.0,
        payload_bytes=64,
        warmup_s=1.0,
        duration_s=duration_s,
        drain_s=1.0,
        ceiling_pairs=10,
        ceiling_start_msg_s=plan.start,
        ceiling_max_msg_s=plan.max_rate,
        ceiling_max_steps=plan.max_steps,
        ceiling_budget_s=plan.budget_s,
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def lean_client(protocol: str) -> str:
    """The client a protocol's relay cells use (zenoh: the lean client in peer mode)."""
    return ZENOH_PEER_CLIENT if protocol == "zenoh" else protocol


class _Calibrator:
    def __init__(self, request: CalibrationRequest, work: Path, progress: Progress) -> None:
        self.request = request
        self.settings = request.settings
        self.work = work
        self.progress = progress
        self._cells = 0

    def _run(self, request: CellRequest) -> CellOutcome:
        self._cells += 1
        out = self.work / f"cell-{self._cells:03d}"
        try:
            return run_cell(request, out, on_phase=lambda text: self.progress(f"  {text}"))
        except RunInterrupted:
            raise
        except MqbenchError as exc:
            return CellOutcome(None, str(exc))

    def _request(
        self,
        name: str,
        target: str,
        *,
        relay: RelayProcess | None,
        client: str | None = None,
        pairs: int | None = None,
        rate_per_publisher: float | None = None,
    ) -> CellRequest:
        """A cell of the settings' shape; against ``relay`` (external) or the native broker."""
        s = self.settings
        return CellRequest(
            name=name,
            target=target,
            runtime="external" if relay is not None else "native",
            pairs=pairs or s.pairs,
            rate_per_publisher=rate_per_publisher or s.rate_per_publisher,
            payload_bytes=s.payload_bytes,
            warmup_s=s.warmup_s,
            duration_s=s.duration_s,
            drain_s=s.drain_s,
            client=client,
            port=relay.port if relay is not None else None,
            pid=relay.pid if relay is not None else None,
        )

    def floor(self, protocol: str) -> FloorResult:
        client = lean_client(protocol)
        path = PATHS.get(protocol, DEFAULT_PATH)
        self.progress(f"floor {protocol}: {path}")
        try:
            relay = RelayProcess.start(protocol)
        except MqbenchError as exc:
            return FloorResult(
                protocol=protocol, client=client, path=path, measured_utc=_now(), reason=str(exc)
            )
        with relay:
            outcome = self._run(
                self._request(
                    f"calibration-floor-{protocol}",
                    RELAY_TARGET[protocol],
                    relay=relay,
                    client=client,
                )
            )
        hop = relay.hop_stats
        return FloorResult(
            protocol=protocol,
            client=client,
            path=path,
            measured_utc=_now(),
            figures=outcome.figures,
            relay_hop=RelayHop(**dataclasses.asdict(hop)) if hop is not None else None,
            reason=outcome.error,
        )

    def broker(self, target: str) -> BrokerResult:
        protocol = get_target(target).transport
        self.progress(f"broker {target} ({protocol}, native)")
        outcome = self._run(self._request(f"calibration-broker-{target}", target, relay=None))
        return BrokerResult(
            target=target,
            protocol=protocol,
            runtime="native",
            broker_version=outcome.broker_version,
            measured_utc=_now(),
            figures=outcome.figures,
            reason=outcome.error,
        )

    def ceiling(self, protocol: str) -> CeilingResult:
        client = lean_client(protocol)
        s, bounds = self.settings, self.request.bounds
        self.progress(f"ceiling {protocol}: stepping the offered rate of one worker")

        def result(outcome: SearchOutcome | None, reason: str | None = None) -> CeilingResult:
            return CeilingResult(
                client=protocol,
                protocol=protocol,
                pairs=s.ceiling_pairs,
                payload_bytes=s.payload_bytes,
                bounds=bounds,
                msg_s_per_worker=outcome.ceiling if outcome else None,
                limited_by=outcome.limited_by if outcome else "failed",
                measured_utc=_now(),
                steps=outcome.steps if outcome else [],
                reason=reason,
            )

        try:
            relay = RelayProcess.start(protocol)
        except MqbenchError as exc:
            return result(None, str(exc))

        def measure(rate: float) -> CeilingStep:
            request = self._request(
                f"calibration-ceiling-{protocol}",
                RELAY_TARGET[protocol],
                relay=relay,
                client=client,
                pairs=s.ceiling_pairs,
                rate_per_publisher=rate / s.ceiling_pairs,
            )
            outcome = self._run(request)
            if outcome.figures is None:
                reasons = [outcome.error or "the cell failed"]
                step = CeilingStep(offered_msg_s=rate, passed=False, reasons=reasons)
            else:
                f = outcome.figures
                reasons = judge_figures(f, bounds)
                step = CeilingStep(
                    offered_msg_s=rate, passed=not reasons, reasons=reasons, figures=f
                )
            verdict = "ok" if step.passed else "; ".join(step.reasons)
            self.progress(f"  {rate:,.0f} msg/s: {verdict}")
            return step

        with relay:
            return result(search_ceiling(measure, self.request.search, bounds))


def calibrate(
    request: CalibrationRequest,
    progress: Progress,
    *,
    work_root: Path | None = None,
) -> Calibration:
    """Measure what ``request`` asks for; return the calibration (not yet saved)."""
    unknown = [p for p in request.protocols if p not in RELAY_PROTOCOLS]
    if unknown:
        raise MqbenchError(f"no calibration path for protocol(s) {', '.join(unknown)}")
    started = _now()
    load = [round(x, 2) for x in os.getloadavg()]
    floors: dict[str, FloorResult] = {}
    brokers: dict[str, BrokerResult] = {}
    ceilings: dict[str, CeilingResult] = {}
    t0 = time.monotonic()
    wakeup = wakeup_results(min(request.settings.duration_s, WAKEUP_PROBE_MAX_S), progress)
    with tempfile.TemporaryDirectory(prefix="mqbench-calibrate-", dir=work_root) as tmp:
        calibrator = _Calibrator(request, Path(tmp), progress)
        for protocol in request.protocols:
            floors[protocol] = calibrator.floor(protocol)
            for target in request.targets:
                if get_target(target).transport == protocol:
                    brokers[target] = calibrator.broker(target)
        for target in request.targets:
            if target not in brokers:
                brokers[target] = calibrator.broker(target)
        for protocol in request.protocols:
            ceilings[protocol] = calibrator.ceiling(protocol)
    progress(f"calibration took {time.monotonic() - t0:.0f} s (load average at start {load})")
    return Calibration(
        created_utc=started,
        updated_utc=started,
        host=current_host(),
        load_average=load,
        settings=request.settings,
        floors=floors,
        brokers=brokers,
        ceilings=ceilings,
        wakeup=wakeup,
    )
