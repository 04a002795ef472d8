"""Expand a scenario's list-valued fields into cells: one run of one configuration."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from mqbench.scenario.model import Scenario
from mqbench.scenario.units import format_number, format_size


@dataclass(frozen=True)
class Cell:
    """One point of the matrix (one broker start, one measured run)."""

    index: int
    repeat: int
    target: str
    topology: str
    pairs: int
    rate: float
    payload_bytes: int
    qos: int
    duration_s: float
    warmup_s: float
    drain_s: float

    @property
    def publishers(self) -> int:
        """Number of publishing clients."""
        return self.pairs

    @property
    def subscribers(self) -> int:
        """Number of subscribing clients."""
        return self.pairs

    @property
    def connections(self) -> int:
        """Client connections the generator opens."""
        return self.publishers + self.subscribers

    @property
    def offered_rate(self) -> float:
        """Messages per second offered by all publishers together."""
        return self.rate * self.publishers

    @property
    def offered_bytes_per_s(self) -> float:
        """Payload bytes per second offered by all publishers together."""
        return self.offered_rate * self.payload_bytes

    @property
    def messages_per_publisher(self) -> int:
        """Scheduled messages per publisher over warm-up plus measured duration."""
        return max(1, round((self.warmup_s + self.duration_s) * self.rate))

    @property
    def id(self) -> str:
        """Stable, readable identifier used as the cell's folder name."""
        base = (
            f"{self.target}-{format_size(self.payload_bytes)}-{self.pairs}pairs-"
            f"{format_number(self.rate)}hz-qos{self.qos}"
        )
        return f"{base}-r{self.repeat}" if self.repeat else base

    def params(self) -> dict[str, Any]:
        """The cell's parameters for the manifest."""
        return asdict(self)


def expand(scenario: Scenario) -> list[Cell]:
    """All cells in run order; repeats are interleaved (every cell once, then again)."""
    w = scenario.workload
    axes = itertools.product(scenario.targets, w.payload, w.pairs, w.rate, w.qos)
    combos = list(axes)
    cells: list[Cell] = []
    for repeat in range(scenario.repeat):
        for target, payload, pairs, rate, qos in combos:
            cells.append(
                Cell(
                    index=len(cells),
                    repeat=repeat,
                    target=target,
                    topology=w.topology,
                    pairs=pairs,
                    rate=rate,
                    payload_bytes=payload,
                    qos=qos,
                    duration_s=w.duration,
                    warmup_s=w.warmup,
                    drain_s=w.drain,
                )
            )
    return cells
