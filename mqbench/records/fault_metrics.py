"""A cell's fault metrics as ``cells/<id>/faults.json`` keeps them: one frozen, versioned type.

The analysis computes them (``mqbench.analysis.faults``) and writes them here; the fault
table of the CLI, ``analyze --format json`` and the report's time series read them through
:class:`FaultMetrics`, never by key. The JSON keys are the documented ones
(docs/results.md, "faults.json"); ``to_dict`` writes exactly those. Versioned on its own
(``FAULT_METRICS_VERSION``): a file written before the ``version`` key existed has the
version-1 layout and reads as version 1; any other version is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mqbench.errors import ResultsError

FAULT_METRICS_VERSION: Final = 1
FAULTS_JSON: Final = "faults.json"


class FaultMetricsError(ResultsError):
    """A ``faults.json`` that cannot be read (names the file and the key)."""


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultMetricsError(f"{key} {value!r} is not a number")
    return float(value)


def _count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FaultMetricsError(f"{key} {value!r} is not an integer")
    return value


def _opt_number(key: str, value: Any) -> float | None:
    return None if value is None else _number(key, value)


def _list(key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise FaultMetricsError(f"{key} {value!r} is not a list")
    return value


def _object(key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FaultMetricsError(f"{key} is not an object")
    return value


@dataclass(frozen=True)
class FaultSpan:
    """One fault as events.jsonl recorded it: injected at ``injected_ns``, recovered at
    ``recovered_ns`` (an unrecovered fault ends at the last event). JSON: ``[inject, recover]``."""

    injected_ns: int
    recovered_ns: int

    def to_json(self) -> list[int]:
        """The stored form, an ``[inject_ns, recover_ns]`` pair."""
        return [self.injected_ns, self.recovered_ns]

    @classmethod
    def from_json(cls, key: str, value: Any) -> FaultSpan:
        """Read one ``[inject_ns, recover_ns]`` pair."""
        pair = _list(key, value)
        if len(pair) != 2:
            raise FaultMetricsError(f"{key} {value!r} is not an [inject_ns, recover_ns] pair")
        return cls(_count(f"{key}[0]", pair[0]), _count(f"{key}[1]", pair[1]))


@dataclass(frozen=True)
class FaultLatency:
    """Latency from the intended send time of one group of deliveries, in microseconds
    (nearest-rank percentiles)."""

    count: int
    p50_us: float
    p95_us: float
    p99_us: float
    max_us: float
    mean_us: float

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "count": self.count,
            "p50_us": self.p50_us,
            "p95_us": self.p95_us,
            "p99_us": self.p99_us,
            "max_us": self.max_us,
            "mean_us": self.mean_us,
        }

    @classmethod
    def from_dict(cls, key: str, value: Any) -> FaultLatency | None:
        """Read one latency block (None: no delivery fell into the group)."""
        if value is None:
            return None
        data = _object(key, value)

        def us(name: str) -> float:
            return _number(f"{key}.{name}", data.get(name))

        return cls(
            count=_count(f"{key}.count", data.get("count")),
            p50_us=us("p50_us"),
            p95_us=us("p95_us"),
            p99_us=us("p99_us"),
            max_us=us("max_us"),
            mean_us=us("mean_us"),
        )


@dataclass(frozen=True)
class Recovery:
    """How the system came back from one fault."""

    injected_ns: int
    recovered_ns: int
    duration_ms: float
    first_delivery_ms: float | None
    """From the recovery to the first delivery to a faulted subscriber (None: none came)."""
    drain_ms: float | None
    """From the recovery to the last delivery of a message intended during the fault: how
    long the backlog took to drain (None: no such message was delivered)."""
    deliveries_of_fault_messages: int

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "injected_ns": self.injected_ns,
            "recovered_ns": self.recovered_ns,
            "duration_ms": self.duration_ms,
            "first_delivery_ms": self.first_delivery_ms,
            "drain_ms": self.drain_ms,
            "deliveries_of_fault_messages": self.deliveries_of_fault_messages,
        }

    @classmethod
    def from_dict(cls, key: str, value: Any) -> Recovery:
        """Read one ``recoveries[]`` object."""
        data = _object(key, value)
        return cls(
            injected_ns=_count(f"{key}.injected_ns", data.get("injected_ns")),
            recovered_ns=_count(f"{key}.recovered_ns", data.get("recovered_ns")),
            duration_ms=_number(f"{key}.duration_ms", data.get("duration_ms")),
            first_delivery_ms=_opt_number(
                f"{key}.first_delivery_ms", data.get("first_delivery_ms")
            ),
            drain_ms=_opt_number(f"{key}.drain_ms", data.get("drain_ms")),
            deliveries_of_fault_messages=_count(
                f"{key}.deliveries_of_fault_messages", data.get("deliveries_of_fault_messages")
            ),
        )


@dataclass(frozen=True)
class FaultMetrics:
    """The fault metrics of one cell (docs/results.md, "faults.json")."""

    windows: tuple[FaultSpan, ...]
    downtime_fraction: float | None
    """Time inside fault windows over the measured window (None: an empty window)."""
    subscriber_outage_fraction: float | None
    """The faulted subscribers' time away as the clients saw it, over the window (None:
    no faulted subscriber)."""
    latency_in_faults: FaultLatency | None
    """Deliveries of messages intended inside a fault window."""
    latency_outside: FaultLatency | None
    """Deliveries of messages intended outside every fault window."""
    recoveries: tuple[Recovery, ...]
    reconnects: int
    """Client reconnects (``client_reconnected`` events)."""
    outage_ms_p50: float | None
    outage_ms_max: float | None
    duplicates: int
    """Deliveries of a (publisher, sequence, subscriber) already delivered in the window."""
    version: int = FAULT_METRICS_VERSION

    @property
    def faults(self) -> int:
        """How many faults were injected."""
        return len(self.windows)

    def to_dict(self) -> dict[str, Any]:
        """The stored form: the documented keys, in the order faults.json has always had,
        after ``version``."""
        return {
            "version": self.version,
            "faults": self.faults,
            "windows": [w.to_json() for w in self.windows],
            "downtime_fraction": self.downtime_fraction,
            "subscriber_outage_fraction": self.subscriber_outage_fraction,
            "latency_in_faults": _stats_dict(self.latency_in_faults),
            "latency_outside": _stats_dict(self.latency_outside),
            "recoveries": [r.to_dict() for r in self.recoveries],
            "reconnects": self.reconnects,
            "outage_ms_p50": self.outage_ms_p50,
            "outage_ms_max": self.outage_ms_max,
            "duplicates": self.duplicates,
        }

    @classmethod
    def from_dict(cls, data: Any) -> FaultMetrics:
        """Read the stored form; FaultMetricsError naming the key on another version or a
        malformed value."""
        data = _object("faults.json", data)
        version = data.get("version", FAULT_METRICS_VERSION)
        if version != FAULT_METRICS_VERSION or isinstance(version, bool):
            raise FaultMetricsError(
                f"version {version!r}; this mqbench reads version {FAULT_METRICS_VERSION}"
            )
        raw_windows = _list("windows", data.get("windows"))
        windows = tuple(FaultSpan.from_json(f"windows[{i}]", w) for i, w in enumerate(raw_windows))
        faults = _count("faults", data.get("faults"))
        if faults != len(windows):
            raise FaultMetricsError(f"faults {faults} but {len(windows)} windows")
        recoveries = _list("recoveries", data.get("recoveries"))
        return cls(
            windows=windows,
            downtime_fraction=_opt_number("downtime_fraction", data.get("downtime_fraction")),
            subscriber_outage_fraction=_opt_number(
                "subscriber_outage_fraction", data.get("subscriber_outage_fraction")
            ),
            latency_in_faults=FaultLatency.from_dict(
                "latency_in_faults", data.get("latency_in_faults")
            ),
            latency_outside=FaultLatency.from_dict("latency_outside", data.get("latency_outside")),
            recoveries=tuple(
                Recovery.from_dict(f"recoveries[{i}]", r) for i, r in enumerate(recoveries)
            ),
            reconnects=_count("reconnects", data.get("reconnects")),
            outage_ms_p50=_opt_number("outage_ms_p50", data.get("outage_ms_p50")),
            outage_ms_max=_opt_number("outage_ms_max", data.get("outage_ms_max")),
            duplicates=_count("duplicates", data.get("duplicates")),
        )


def _stats_dict(stats: FaultLatency | None) -> dict[str, Any] | None:
    return None if stats is None else stats.to_dict()


def write_fault_metrics_json(folder: Path, metrics: FaultMetrics) -> None:
    """Write ``<folder>/faults.json``."""
    (folder / FAULTS_JSON).write_text(json.dumps(metrics.to_dict(), indent=2) + "\n")


def read_fault_metrics_json(folder: Path) -> FaultMetrics | None:
    """``<folder>/faults.json`` (None when the cell has none); FaultMetricsError naming the
    file and the key when it cannot be read or holds another version."""
    path = Path(folder) / FAULTS_JSON
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FaultMetricsError(f"{path}: {exc.strerror or exc}") from None
    try:
        return FaultMetrics.from_dict(json.loads(text))
    except ValueError as exc:
        raise FaultMetricsError(f"{path}: not JSON ({exc})") from None
    except FaultMetricsError as exc:
        raise FaultMetricsError(f"{path}: {exc}") from None
