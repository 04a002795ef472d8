"""Clock offsets of distributed load tasks to the driver, as the manifest keeps them.

A cell whose clients ran as the tasks of a Spark barrier stage (docs/distributed.md) stores
``cells[].clocks``: per task, its clock offset to the driver measured before and after the
run (min-RTT estimate, error bound = RTT/2), when it left the barrier, and the latency error
bound a route across tasks adds. Versioned on its own (``CLOCKS_VERSION``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

CLOCKS_VERSION: Final = 1


@dataclass(frozen=True)
class ClockOffset:
    """One offset estimate: the task's clock minus the driver's, and its error bound."""

    offset_ns: int
    """Task clock minus driver clock (positive: the task's clock is ahead)."""
    error_ns: int
    """Half the round trip of the chosen probe: the true offset is within ``±error_ns``."""
    rtt_ns: int
    """Round trip of the chosen (fastest) probe."""
    probes: int
    """How many probes the estimate chose from."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClockOffset:
        """Read the manifest form (raises ``ValueError`` naming the key)."""
        return cls(**{f.name: _as_int(data, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class TaskClock:
    """What one load task measured about its clock."""

    task: int
    """The task's partition (its worker number in the cell)."""
    host: str
    pid: int
    before: ClockOffset
    after: ClockOffset | None
    """None when the task did not finish (it died or was stopped)."""
    barrier_ns: int | None
    """When the task left the barrier, on the driver's clock (its own clock - offset);
    None when the task did not report it (it died)."""

    @property
    def error_ns(self) -> int:
        """The larger bound of the two measurements plus their drift."""
        if self.after is None:
            return self.before.error_ns
        drift = abs(self.after.offset_ns - self.before.offset_ns)
        return max(self.before.error_ns, self.after.error_ns) + drift

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskClock:
        """Read the manifest form (raises ``ValueError`` naming the key)."""
        after = data.get("after")
        return cls(
            task=_as_int(data, "task"),
            host=str(data.get("host", "")),
            pid=_as_int(data, "pid"),
            before=ClockOffset.from_dict(data["before"]),
            after=None if after is None else ClockOffset.from_dict(after),
            barrier_ns=None if data.get("barrier_ns") is None else _as_int(data, "barrier_ns"),
        )


@dataclass(frozen=True)
class GeneratorClocks:
    """The clocks of a cell's load tasks (``cells[].clocks``)."""

    engine: str
    """``spark``."""
    master: str
    tasks: tuple[TaskClock, ...]
    cross_task_routes: int
    """Routes whose publisher and subscriber ran in different tasks (two clocks)."""
    latency_error_ns: int
    """Added to every latency of a cross-task route: the stated bound (0 without such
    routes, since publisher and subscribers then share one clock)."""
    version: int = CLOCKS_VERSION

    @property
    def start_spread_ns(self) -> int:
        """Max - min of the tasks' barrier exits on the driver's clock."""
        times = [t.barrier_ns for t in self.tasks if t.barrier_ns is not None]
        return max(times) - min(times) if times else 0

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return {
            "version": self.version,
            "engine": self.engine,
            "master": self.master,
            "tasks": [t.to_dict() for t in self.tasks],
            "cross_task_routes": self.cross_task_routes,
            "latency_error_ns": self.latency_error_ns,
            "start_spread_ns": self.start_spread_ns,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GeneratorClocks:
        """Read the manifest form; raises ``ValueError`` on another version or a bad key."""
        version = data.get("version")
        if version != CLOCKS_VERSION:
            raise ValueError(f"clocks: version {version!r}; this mqbench reads {CLOCKS_VERSION}")
        tasks = data.get("tasks")
        if not isinstance(tasks, list):
            raise ValueError("clocks: tasks is not a list")
        return cls(
            engine=str(data.get("engine", "")),
            master=str(data.get("master", "")),
            tasks=tuple(TaskClock.from_dict(t) for t in tasks),
            cross_task_routes=_as_int(data, "cross_task_routes"),
            latency_error_ns=_as_int(data, "latency_error_ns"),
        )


def _as_int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"clocks: {key} {value!r} is not an integer")
    return value
