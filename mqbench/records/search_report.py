"""The manifest's ``search`` entry: a saturation search's steps and its best step per
combination (docs/results.md). Written by ``workload.search``, stored with the run's
manifest (``records.run_manifest``, versioned there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class SearchLimits:
    """The limits whose first crossing stops a combination (the scenario's
    ``search.stop``)."""

    loss_pct: float | None
    p99_ms: float | None
    generator_saturated: bool

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``search.stop`` form."""
        return {
            "loss_pct": self.loss_pct,
            "p99_ms": self.p99_ms,
            "generator_saturated": self.generator_saturated,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchLimits:
        """Read ``search.stop``."""
        return cls(
            _float_or_none(data.get("loss_pct")),
            _float_or_none(data.get("p99_ms")),
            bool(data.get("generator_saturated")),
        )


@dataclass(frozen=True)
class SearchStep:
    """One finished step of a search: its cell, its value on the axis, and the limits it
    crossed (none: sustainable)."""

    cell: str
    value: float
    crossed: tuple[str, ...]
    throughput_msg_s: float | None

    @property
    def sustainable(self) -> bool:
        """No limit was crossed."""
        return not self.crossed

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``search.steps[]`` form."""
        return {
            "cell": self.cell,
            "value": self.value,
            "sustainable": self.sustainable,
            "crossed": list(self.crossed),
            "throughput_msg_s": self.throughput_msg_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchStep:
        """Read one ``search.steps[]`` entry (``sustainable`` follows from ``crossed``)."""
        return cls(
            str(data["cell"]),
            float(data["value"]),
            tuple(str(c) for c in data.get("crossed") or ()),
            _float_or_none(data.get("throughput_msg_s")),
        )


@dataclass(frozen=True)
class BestStep:
    """The highest sustainable step of one combination, and what stopped the next one
    (None: the search ran out of values first)."""

    cell: str
    value: float
    throughput_msg_s: float | None
    stopped_by: str | None

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``search.highest_sustainable[]`` form."""
        return {
            "cell": self.cell,
            "value": self.value,
            "throughput_msg_s": self.throughput_msg_s,
            "stopped_by": self.stopped_by,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BestStep:
        """Read one ``search.highest_sustainable[]`` entry."""
        return cls(
            str(data["cell"]),
            float(data["value"]),
            _float_or_none(data.get("throughput_msg_s")),
            _text_or_none(data.get("stopped_by")),
        )


@dataclass(frozen=True)
class SearchReport:
    """A saturation search's outcome: every step and the best step per combination."""

    axis: str
    values: tuple[float, ...]
    stop: SearchLimits
    steps: tuple[SearchStep, ...] = ()
    highest_sustainable: tuple[BestStep, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The manifest's ``search`` form."""
        return {
            "axis": self.axis,
            "values": list(self.values),
            "stop": self.stop.to_dict(),
            "steps": [step.to_dict() for step in self.steps],
            "highest_sustainable": [best.to_dict() for best in self.highest_sustainable],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchReport:
        """Read the manifest's ``search`` (KeyError, TypeError or ValueError when malformed)."""
        stop = data.get("stop") or {}
        if not isinstance(stop, Mapping):
            raise ValueError("search.stop is not an object")
        return cls(
            str(data["axis"]),
            tuple(float(v) for v in data.get("values") or ()),
            SearchLimits.from_dict(stop),
            tuple(SearchStep.from_dict(s) for s in data.get("steps") or ()),
            tuple(BestStep.from_dict(b) for b in data.get("highest_sustainable") or ()),
        )
