"""What ``mqbench run`` does with a calibration: warn about cells above the ceiling and say
in the manifest which calibration it used.

A cell's load per worker is the larger of its offered msg/s and its expected deliveries/s,
divided by its worker processes: the ceiling was measured with pairs, where one worker sends
and receives the same rate, so a fan-out cell (few sends, many deliveries) is judged by
what its workers receive. Only the lean clients have ceilings (named after their protocol);
cells with another client are not checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from mqbench.brokers.registry import get_target
from mqbench.calibration.store import LoadedCalibration, default_path, load
from mqbench.calibration.wakeup import as_floor
from mqbench.records.calibration_entry import (
    CalibrationEntry,
    CalibrationFigures,
    CeilingWarningEntry,
)
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Scenario
from mqbench.transports.registry import resolve_client
from mqbench.workload.cell_timing import TimingHints
from mqbench.workload.plan import resolve_layout, split_workers, worker_count


@dataclass(frozen=True)
class CeilingWarning:
    """A cell whose load per worker is above its client's calibrated ceiling."""

    cell_id: str
    client: str
    workers: int
    offered_per_worker: float
    delivered_per_worker: float
    ceiling: float

    @property
    def load_per_worker(self) -> float:
        """What is compared with the ceiling."""
        return max(self.offered_per_worker, self.delivered_per_worker)

    def text(self) -> str:
        """One line for the terminal."""
        what = (
            f"{self.offered_per_worker:,.0f} msg/s offered"
            if self.offered_per_worker >= self.delivered_per_worker
            else f"{self.delivered_per_worker:,.0f} deliveries/s"
        )
        return (
            f"{self.cell_id}: {what} per worker ({self.workers} worker(s)) is above the "
            f"calibrated {self.client} ceiling of {self.ceiling:,.0f} msg/s per worker; "
            "send lag may dominate its latency"
        )

    def record(self) -> CeilingWarningEntry:
        """The manifest's record of it (figures rounded to 3 decimals)."""
        return CeilingWarningEntry(
            cell=self.cell_id,
            client=self.client,
            workers=self.workers,
            offered_per_worker=round(self.offered_per_worker, 3),
            delivered_per_worker=round(self.delivered_per_worker, 3),
            ceiling_per_worker=round(self.ceiling, 3),
        )


@dataclass(frozen=True)
class CalibrationCheck:
    """The calibration found for a run and the cells it warns about."""

    loaded: LoadedCalibration
    warnings: list[CeilingWarning] = field(default_factory=list)
    figures: CalibrationFigures = field(default_factory=CalibrationFigures)
    """The ceilings and floors of the run's clients/protocols that were used."""

    def timing_hints(self) -> TimingHints:
        """The wake-up floors and ceilings ``run`` decides and judges timing with."""
        calibration = self.loaded.usable
        if calibration is None:
            return TimingHints()
        floors = {name: as_floor(result) for name, result in calibration.wakeup.items()}
        ceilings = {
            client: c.msg_s_per_worker
            for client, c in calibration.ceilings.items()
            if c.msg_s_per_worker is not None
        }
        return TimingHints(
            wakeup={k: v for k, v in floors.items() if v is not None}, ceilings=ceilings
        )

    def notes(self) -> list[str]:
        """Lines to show before the run: a stale/unusable file, then one per warned cell."""
        lines = []
        if self.loaded.status in ("stale", "unreadable"):
            lines.append(self.loaded.describe())
        lines += [w.text() for w in self.warnings]
        return lines

    def manifest_record(self) -> CalibrationEntry:
        """The manifest's ``calibration`` entry (docs/results.md)."""
        loaded = self.loaded
        record = CalibrationEntry(
            path=str(loaded.path),
            status=loaded.status,
            used=loaded.status == "valid",
            reasons=tuple(loaded.reasons),
        )
        if loaded.calibration is not None:
            record = replace(
                record,
                created_utc=loaded.calibration.created_utc,
                updated_utc=loaded.calibration.updated_utc,
                host=loaded.calibration.host.model_dump(mode="json"),
            )
        if loaded.status == "valid":
            record = replace(
                record, figures=self.figures, warnings=tuple(w.record() for w in self.warnings)
            )
        return record


def check_cells(
    scenario: Scenario, cells: list[Cell], loaded: LoadedCalibration, cpus: int
) -> CalibrationCheck:
    """Compare every cell's load per worker with its client's ceiling (when valid)."""
    calibration = loaded.usable
    if calibration is None:
        return CalibrationCheck(loaded)
    warnings: list[CeilingWarning] = []
    ceilings: dict[str, Any] = {}
    floors: dict[str, Any] = {}
    for cell in cells:
        protocol = get_target(cell.target).transport
        client = resolve_client(protocol, cell.client)
        floor = calibration.floors.get(protocol)
        if floor is not None and floor.figures is not None and protocol not in floors:
            floors[protocol] = {
                "latency_p50_us": floor.figures.latency_p50_us,
                "latency_p99_us": floor.figures.latency_p99_us,
                "send_lag_p99_us": floor.figures.send_lag_p99_us,
                "measured_utc": floor.measured_utc,
            }
        ceiling = calibration.ceilings.get(client)
        if ceiling is None or ceiling.msg_s_per_worker is None:
            continue
        ceilings[client] = {
            "msg_s_per_worker": ceiling.msg_s_per_worker,
            "limited_by": ceiling.limited_by,
            "bounds": ceiling.bounds.model_dump(mode="json"),
            "measured_utc": ceiling.measured_utc,
        }
        workers = worker_count(scenario.generator.workers, cell.connections, cpus)
        if resolve_layout(scenario.generator.layout, cell) == "split":
            pub_workers, sub_workers = split_workers(workers, cell.publishers, cell.subscribers)
            offered = cell.offered_rate / pub_workers
            delivered = cell.expected_delivery_rate / sub_workers
            workers = pub_workers + sub_workers
        else:
            offered = cell.offered_rate / workers
            delivered = cell.expected_delivery_rate / workers
        if max(offered, delivered) > ceiling.msg_s_per_worker:
            warnings.append(
                CeilingWarning(
                    cell.id, client, workers, offered, delivered, ceiling.msg_s_per_worker
                )
            )
    wakeup = {
        name: result.figures.model_dump(mode="json") | {"measured_utc": result.measured_utc}
        for name, result in calibration.wakeup.items()
        if result.figures is not None
    }
    return CalibrationCheck(
        loaded, warnings, CalibrationFigures(ceilings=ceilings, floors=floors, wakeup=wakeup)
    )


def check_run(scenario: Scenario, cells: list[Cell]) -> CalibrationCheck:
    """The calibration ``run`` finds (docs/calibration.md, "What `run` does with it")
    checked against ``cells`` on this machine."""
    return check_cells(scenario, cells, load(default_path()), os.cpu_count() or 1)
