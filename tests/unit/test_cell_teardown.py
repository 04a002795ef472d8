"""A cell stops everything it started, even when one part fails to stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbench.brokers.resources.sampler import ResourceSampler
from mqbench.records.events import EventKind, EventLog, read_events
from mqbench.workload.cell_run import CellRun


class FaultsThatCannotStop:
    def stop(self, save_log_to: Path | None = None) -> None:
        raise OSError(28, "No space left on device")


class Probe:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Broker:
    def __init__(self) -> None:
        self.pids: list[int] = []
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_faults_that_cannot_stop_still_leave_the_sampler_probe_broker_and_event_log_stopped(
    tmp_path: Path,
) -> None:
    run = object.__new__(CellRun)  # only the parts the teardown stops
    run.cell_dir = tmp_path
    run.events = EventLog(tmp_path / "events.jsonl")
    run.sampler = ResourceSampler(tmp_path / "resources.csv", interval_s=60)
    run.sampler.start()
    broker = Broker()
    run.broker = broker  # type: ignore[assignment]
    run.faults = FaultsThatCannotStop()  # type: ignore[assignment]
    probe = Probe()
    run.probe = probe  # type: ignore[assignment]
    with pytest.raises(OSError, match="No space left"):
        run._teardown()
    assert not run.sampler.running and broker.stopped and probe.closed
    run.events.write(EventKind.WARNING, message="after close: ignored")
    assert [e.kind for e in read_events(tmp_path)] == [EventKind.BROKER_STOPPED]
