"""The manifest's ``calibration`` entry: which calibration ``run`` checked its cells against,
the figures it used and the cells above their client's ceiling (docs/results.md,
docs/calibration.md "What `run` does with it").

``calibration.use`` builds it; ``workload.run`` hands it to the manifest as it is
(``workload`` never imports ``calibration``); ``records.run_manifest`` stores and reads it.
Keys the entry does not hold are left out of its stored form, so an entry reads back and
writes out as it was stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

FigureSet: TypeAlias = Mapping[str, Mapping[str, Any]]
"""Client or protocol or policy name to the calibration file's figures for it, copied in
the file's own form (``msg_s_per_worker``, ``latency_p50_us``, ``p99_us``, ...)."""


@dataclass(frozen=True)
class CeilingWarningEntry:
    """A cell whose load per worker was above its client's calibrated ceiling."""

    cell: str
    client: str
    workers: int
    offered_per_worker: float
    delivered_per_worker: float
    ceiling_per_worker: float

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``calibration.warnings[]``)."""
        return {
            "cell": self.cell,
            "client": self.client,
            "workers": self.workers,
            "offered_per_worker": self.offered_per_worker,
            "delivered_per_worker": self.delivered_per_worker,
            "ceiling_per_worker": self.ceiling_per_worker,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CeilingWarningEntry:
        """Read one ``calibration.warnings[]`` object."""
        return cls(
            cell=str(data["cell"]),
            client=str(data["client"]),
            workers=int(data["workers"]),
            offered_per_worker=float(data["offered_per_worker"]),
            delivered_per_worker=float(data["delivered_per_worker"]),
            ceiling_per_worker=float(data["ceiling_per_worker"]),
        )


@dataclass(frozen=True)
class CalibrationFigures:
    """The figures of the run's clients and protocols that ``run`` used."""

    ceilings: FigureSet | None = None
    """Per client: its ceiling in msg/s per worker, what limited it, the bounds, when."""
    floors: FigureSet | None = None
    """Per protocol: the tool's own latency floor (p50/p99, send lag p99), when."""
    wakeup: FigureSet | None = None
    """Per scheduling policy: the machine's wake-up floor, when (None: not recorded, as
    in manifests written before the wake-up probe)."""

    def to_dict(self) -> dict[str, Any]:
        """The stored form (``calibration.figures``); unrecorded sets are left out."""
        sets = {"ceilings": self.ceilings, "floors": self.floors, "wakeup": self.wakeup}
        return {k: _copy(v) for k, v in sets.items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationFigures:
        """Read ``calibration.figures``."""
        return cls(
            ceilings=_figure_set(data, "ceilings"),
            floors=_figure_set(data, "floors"),
            wakeup=_figure_set(data, "wakeup"),
        )


@dataclass(frozen=True)
class CalibrationEntry:
    """The manifest's ``calibration`` entry.

    ``status`` is ``valid``, ``missing``, ``stale`` or ``unreadable``; ``used`` is true only
    for ``valid``. The file's dates and host key are there when a calibration was read; the
    figures and warnings when it was used. None: not recorded (left out of the stored form).
    """

    status: str
    path: str | None = None
    used: bool | None = None
    reasons: tuple[str, ...] | None = None
    created_utc: str | None = None
    updated_utc: str | None = None
    host: Mapping[str, Any] | None = None
    """The calibration file's host key (hostname, CPU model, ...), as the file stores it."""
    figures: CalibrationFigures | None = None
    warnings: tuple[CeilingWarningEntry, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored form, its keys in the order the manifest has always had them."""
        values: dict[str, Any] = {
            "path": self.path,
            "status": self.status,
            "used": self.used,
            "reasons": None if self.reasons is None else list(self.reasons),
            "created_utc": self.created_utc,
            "updated_utc": self.updated_utc,
            "host": None if self.host is None else dict(self.host),
            "figures": None if self.figures is None else self.figures.to_dict(),
            "warnings": None if self.warnings is None else [w.to_dict() for w in self.warnings],
        }
        return {k: v for k, v in values.items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationEntry:
        """Read the stored form (ValueError/KeyError/TypeError when malformed)."""
        reasons = data.get("reasons")
        host = data.get("host")
        figures = data.get("figures")
        warnings = data.get("warnings")
        used = data.get("used")
        return cls(
            status=str(data.get("status")),
            path=_text(data.get("path")),
            used=None if used is None else bool(used),
            reasons=None if reasons is None else tuple(str(r) for r in _list(reasons)),
            created_utc=_text(data.get("created_utc")),
            updated_utc=_text(data.get("updated_utc")),
            host=None if host is None else _object("host", host),
            figures=None
            if figures is None
            else CalibrationFigures.from_dict(_object("figures", figures)),
            warnings=None
            if warnings is None
            else tuple(
                CeilingWarningEntry.from_dict(_object("warnings[]", w)) for w in _list(warnings)
            ),
        )


def _copy(figures: FigureSet) -> dict[str, Any]:
    return {name: dict(values) for name, values in figures.items()}


def _figure_set(data: Mapping[str, Any], key: str) -> FigureSet | None:
    if data.get(key) is None:
        return None
    value = _object(key, data[key])
    return {str(name): _object(f"{key}.{name}", v) for name, v in value.items()}


def _object(key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"calibration.{key} is not an object")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("calibration list entry is not a list")
    return value


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
