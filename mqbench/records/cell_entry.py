"""A manifest's cell entries: one frozen, versioned type written and read here only.

``manifest.json`` holds one entry per cell (docs/results.md, "manifest.json"). The engine
writes them through :class:`mqbench.records.manifest.Manifest`; everything that reads a
result folder (the analysis, the saturation search, calibration, the CLI) reads them
through :meth:`CellEntry.from_dict` / :func:`cell_entries`, which also read the entries of
older manifests of the same schema version (keys that did not exist yet take their
defaults). The JSON keys are the documented ones: ``to_dict`` writes exactly those.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast, get_args

from mqbench.errors import ResultsError
from mqbench.records.cell_params import CellParams
from mqbench.records.clocks import GeneratorClocks
from mqbench.records.format import SCHEMA_VERSION
from mqbench.records.hot_path import HotPathEntry
from mqbench.records.intended import measured_window
from mqbench.records.timing import TimingEntry
from mqbench.records.worker_stats import WorkerStats

CELL_ENTRY_VERSION: Final = SCHEMA_VERSION
"""Cell entries are versioned with their manifest (its ``schema_version``)."""

CellStatus = Literal["pending", "running", "completed", "failed", "interrupted", "skipped"]
RouteKind = Literal["pairs", "all"]
ANALYSABLE: Final = ("completed", "interrupted")


class CellEntryError(ResultsError):
    """A manifest cell entry that cannot be read (names the cell and the key)."""


def _int(cid: str, what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise CellEntryError(f"cell {cid}: {what} {value!r} is not a number")
    try:
        return int(value)
    except ValueError:
        raise CellEntryError(f"cell {cid}: {what} {value!r} is not a number") from None


def _float(cid: str, what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise CellEntryError(f"cell {cid}: {what} {value!r} is not a number")
    try:
        return float(value)
    except ValueError:
        raise CellEntryError(f"cell {cid}: {what} {value!r} is not a number") from None


def _opt_int(cid: str, what: str, value: Any) -> int | None:
    return None if value is None else _int(cid, what, value)


def _opt_float(cid: str, what: str, value: Any) -> float | None:
    return None if value is None else _float(cid, what, value)


def _mapping(cid: str, what: str, value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CellEntryError(f"cell {cid}: {what} is not an object")
    return value


@dataclass(frozen=True)
class Route:
    """Who receives whose messages: ``pairs`` maps publisher ``pubs[0]+i`` to subscriber
    ``subs[0]+i``; ``all`` sends every publisher in ``pubs`` to every subscriber in ``subs``
    (half-open ranges of cell-local indices)."""

    kind: RouteKind
    pubs: tuple[int, int]
    subs: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return {"kind": self.kind, "pubs": list(self.pubs), "subs": list(self.subs)}

    @classmethod
    def from_dict(cls, cid: str, data: Any) -> Route:
        """Read one route; CellEntryError when it is malformed."""
        try:
            kind = data.get("kind")
            a, b = (int(x) for x in data["pubs"])
            c, d = (int(x) for x in data["subs"])
        except (AttributeError, KeyError, TypeError, ValueError):
            raise CellEntryError(f"cell {cid}: malformed route {data!r}") from None
        if kind not in get_args(RouteKind):
            raise CellEntryError(f"cell {cid}: unknown route kind {kind!r}")
        if kind == "pairs" and b - a != d - c:
            raise CellEntryError(
                f"cell {cid}: 'pairs' route with {b - a} publishers and {d - c} subscribers"
            )
        return cls(cast(RouteKind, kind), (a, b), (c, d))


@dataclass(frozen=True)
class Schedule:
    """The open-loop schedule: message ``seq`` of publisher ``p`` is intended at
    ``start_ns + (seq·publishers + p) / (rate·publishers)`` (docs/records.md)."""

    start_ns: int
    rate: float
    """Messages per second per publisher."""
    publishers: int
    messages_per_publisher: int | None = None
    kind: str = "interleaved"

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return {
            "kind": self.kind,
            "start_ns": self.start_ns,
            "rate": self.rate,
            "publishers": self.publishers,
            "messages_per_publisher": self.messages_per_publisher,
        }

    @classmethod
    def from_dict(cls, cid: str, data: Mapping[str, Any]) -> Schedule:
        """Read the schedule; CellEntryError naming the missing or bad key."""
        for key in ("start_ns", "rate", "publishers"):
            if data.get(key) is None:
                raise CellEntryError(f"cell {cid}: manifest entry lacks schedule ({key!r})")
        return cls(
            start_ns=_int(cid, "schedule.start_ns", data["start_ns"]),
            rate=_float(cid, "schedule.rate", data["rate"]),
            publishers=_int(cid, "schedule.publishers", data["publishers"]),
            messages_per_publisher=_opt_int(
                cid, "schedule.messages_per_publisher", data.get("messages_per_publisher")
            ),
            kind=str(data.get("kind") or "interleaved"),
        )


@dataclass(frozen=True)
class Window:
    """The measured window ``[start_ns, end_ns)`` and when the last client connected."""

    start_ns: int
    end_ns: int
    connected_ns: int | None = None

    @classmethod
    def planned(
        cls, start_ns: int, connected_ns: int, warmup_s: float, duration_s: float
    ) -> Window:
        """The window a cell plans when its schedule starts at ``start_ns`` (docs/results.md)."""
        start, end = measured_window(start_ns, connected_ns, warmup_s, duration_s)
        return cls(start, end, connected_ns)

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return {"start_ns": self.start_ns, "end_ns": self.end_ns, "connected_ns": self.connected_ns}

    @classmethod
    def from_dict(cls, cid: str, data: Mapping[str, Any]) -> Window | None:
        """Read the window (None when it has no start: the window comes from the events)."""
        if data.get("start_ns") is None:
            return None
        if data.get("end_ns") is None:
            raise CellEntryError(f"cell {cid}: malformed window ('end_ns')")
        return cls(
            _int(cid, "window.start_ns", data["start_ns"]),
            _int(cid, "window.end_ns", data["end_ns"]),
            _opt_int(cid, "window.connected_ns", data.get("connected_ns")),
        )


@dataclass(frozen=True)
class BrokerExitEntry:
    """The broker exited on its own during the cell (``broker_exit``)."""

    pid: int | None
    exit_code: int | None
    """Negative ``-N`` when signal N killed it."""
    t_ns: int | None
    signal: str | None = None
    reason: str | None = None
    """``killed by SIGKILL``, ``exited with code 1``, ``exited``."""

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, cid: str, data: Mapping[str, Any]) -> BrokerExitEntry:
        """Read ``broker_exit``."""
        return cls(
            pid=_opt_int(cid, "broker_exit.pid", data.get("pid")),
            exit_code=_opt_int(cid, "broker_exit.exit_code", data.get("exit_code")),
            t_ns=_opt_int(cid, "broker_exit.t_ns", data.get("t_ns")),
            signal=None if data.get("signal") is None else str(data["signal"]),
            reason=None if data.get("reason") is None else str(data["reason"]),
        )


@dataclass(frozen=True)
class GeneratorVerdict:
    """What the generator said about itself (``generator``; docs/scenarios.md, "Validity")."""

    saturated: bool = False
    late_threshold_ms: float | None = None
    reasons: tuple[str, ...] = ()
    """Why the generator, not the broker, limited the cell (empty when it did not)."""
    warnings: tuple[str, ...] = ()
    workers: tuple[WorkerStats, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The manifest form (``workers`` as ``WorkerStats.to_dict`` objects)."""
        return {
            "saturated": self.saturated,
            "late_threshold_ms": self.late_threshold_ms,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "workers": [w.to_dict() for w in self.workers],
        }

    @classmethod
    def from_dict(cls, cid: str, data: Mapping[str, Any]) -> GeneratorVerdict:
        """Read ``generator``; an older manifest's single ``reason`` becomes ``reasons``."""
        reasons = tuple(str(r) for r in data.get("reasons") or [])
        legacy = data.get("reason") or data.get("saturation_reason")
        if legacy and not reasons:
            reasons = (str(legacy),)
        workers = []
        for raw in data.get("workers") or []:
            if not isinstance(raw, Mapping):
                raise CellEntryError(f"cell {cid}: generator.workers holds a non-object")
            try:
                workers.append(WorkerStats.from_dict(raw))
            except ValueError as exc:
                raise CellEntryError(f"cell {cid}: generator.{exc}") from None
        return cls(
            saturated=bool(data.get("saturated")),
            late_threshold_ms=_opt_float(
                cid, "generator.late_threshold_ms", data.get("late_threshold_ms")
            ),
            reasons=reasons,
            warnings=tuple(str(w) for w in data.get("warnings") or []),
            workers=tuple(workers),
        )


@dataclass(frozen=True)
class Totals:
    """Messages handed to clients and delivery records written, over the whole cell."""

    sent: int
    received: int


@dataclass(frozen=True)
class CellEntry:
    """One cell of ``manifest.json`` (docs/results.md). ``None``: not recorded (yet)."""

    id: str
    index: int = 0
    repeat: int = 0
    status: CellStatus = "pending"
    error: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    """The cell's parameters (``Cell.params()`` plus protocol, transport, runtime, ...)."""
    skip_reason: str | None = None
    offered_rate: float | None = None
    """Messages per second, all publishers together."""
    publishers: int | None = None
    subscribers: int | None = None
    expected_delivery_rate: float | None = None
    routes: tuple[Route, ...] | None = None
    send_failures_expected: bool | None = None
    """Sends fail by design (faults on publishers, publisher churn)."""
    broker: Mapping[str, Any] | None = None
    """The running broker's facts (version, binary, config, runtime, ...)."""
    schedule: Schedule | None = None
    window: Window | None = None
    broker_exit: BrokerExitEntry | None = None
    generator: GeneratorVerdict | None = None
    totals: Totals | None = None
    finished_ns: int | None = None
    clocks: GeneratorClocks | None = None
    """Clock offsets of the load tasks (distributed load only, docs/distributed.md)."""
    timing: TimingEntry | None = None
    """How the workers were scheduled, on which CPUs, and the wake-up floor they had
    (``generator.realtime``, docs/results.md)."""
    hot_path: HotPathEntry | None = None
    """Which engine ran the publish and receive loop, and why (``generator.hot_path``)."""

    @property
    def analysable(self) -> bool:
        """Completed, or interrupted after publishing began (a cell stopped before its
        first message has no schedule and nothing to analyse)."""
        if self.status == "interrupted":
            return self.schedule is not None
        return self.status in ANALYSABLE

    @property
    def cell_params(self) -> CellParams:
        """The parameters read by name with their types."""
        return CellParams(self.params, self.id)

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: the documented keys; unrecorded (None) ones are left out,
        except ``error``, which is always there."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name != "error":
                continue
            if isinstance(
                value,
                Route
                | Schedule
                | Window
                | BrokerExitEntry
                | GeneratorVerdict
                | GeneratorClocks
                | TimingEntry
                | HotPathEntry,
            ):
                value = value.to_dict()
            elif isinstance(value, Totals):
                value = dataclasses.asdict(value)
            elif f.name == "routes":
                value = [r.to_dict() for r in value]
            elif f.name in ("params", "broker"):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellEntry:
        """Read one entry of a version-``CELL_ENTRY_VERSION`` manifest.

        Raises :class:`CellEntryError` naming the cell and the key when a value is malformed.
        """
        if not isinstance(data, Mapping):
            raise CellEntryError("a manifest cell entry is not an object")
        cid = str(data.get("id"))
        status = data.get("status") or "pending"
        if status not in get_args(CellStatus):
            raise CellEntryError(f"cell {cid}: unknown status {status!r}")
        routes = data.get("routes")
        if routes is not None and not isinstance(routes, list):
            raise CellEntryError(f"cell {cid}: routes is not a list")
        schedule = _mapping(cid, "schedule", data.get("schedule"))
        window = _mapping(cid, "window", data.get("window"))
        broker_exit = _mapping(cid, "broker_exit", data.get("broker_exit"))
        generator = _mapping(cid, "generator", data.get("generator"))
        totals = _mapping(cid, "totals", data.get("totals"))
        sfe = data.get("send_failures_expected")
        clocks = _mapping(cid, "clocks", data.get("clocks"))
        try:
            clock_entry = None if clocks is None else GeneratorClocks.from_dict(clocks)
        except (KeyError, TypeError, ValueError) as exc:
            raise CellEntryError(f"cell {cid}: {exc}") from None
        timing = _mapping(cid, "timing", data.get("timing"))
        try:
            timing_entry = None if timing is None else TimingEntry.from_dict(timing)
        except (KeyError, TypeError, ValueError) as exc:
            raise CellEntryError(f"cell {cid}: timing: {exc}") from None
        hot_path = _mapping(cid, "hot_path", data.get("hot_path"))
        try:
            hot_path_entry = None if hot_path is None else HotPathEntry.from_dict(hot_path)
        except ValueError as exc:
            raise CellEntryError(f"cell {cid}: {exc}") from None
        return cls(
            id=cid,
            index=_int(cid, "index", data.get("index") or 0),
            repeat=_int(cid, "repeat", data.get("repeat") or 0),
            status=cast(CellStatus, status),
            error=None if data.get("error") is None else str(data["error"]),
            params=dict(_mapping(cid, "params", data.get("params")) or {}),
            skip_reason=None if data.get("skip_reason") is None else str(data["skip_reason"]),
            offered_rate=_opt_float(cid, "offered_rate", data.get("offered_rate")),
            publishers=_opt_int(cid, "publishers", data.get("publishers")),
            subscribers=_opt_int(cid, "subscribers", data.get("subscribers")),
            expected_delivery_rate=_opt_float(
                cid, "expected_delivery_rate", data.get("expected_delivery_rate")
            ),
            routes=None if routes is None else tuple(Route.from_dict(cid, r) for r in routes),
            send_failures_expected=None if sfe is None else bool(sfe),
            broker=_mapping(cid, "broker", data.get("broker")),
            schedule=None if schedule is None else Schedule.from_dict(cid, schedule),
            window=None if window is None else Window.from_dict(cid, window),
            broker_exit=None if not broker_exit else BrokerExitEntry.from_dict(cid, broker_exit),
            generator=None if generator is None else GeneratorVerdict.from_dict(cid, generator),
            totals=None
            if totals is None
            else Totals(
                _int(cid, "totals.sent", totals.get("sent") or 0),
                _int(cid, "totals.received", totals.get("received") or 0),
            ),
            finished_ns=_opt_int(cid, "finished_ns", data.get("finished_ns")),
            clocks=clock_entry,
            timing=timing_entry,
            hot_path=hot_path_entry,
        )


def cell_entries(manifest: Mapping[str, Any]) -> list[CellEntry]:
    """Every cell entry of a manifest that was read and version-checked (``read_manifest``)."""
    version = manifest.get("schema_version")
    if version != CELL_ENTRY_VERSION:
        raise CellEntryError(
            f"manifest schema version {version!r}; this mqbench reads version {CELL_ENTRY_VERSION}"
        )
    cells = manifest.get("cells") or []
    if not isinstance(cells, list):
        raise CellEntryError("manifest cells is not a list")
    return [CellEntry.from_dict(c) for c in cells]
