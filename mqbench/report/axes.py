"""The report's axes: the dimensions of the scenarios' matrices and each cell's place on them.

A result folder's manifest holds the resolved scenario; its list-valued fields span the
matrix (docs/scenarios.md): targets, client, resources, broker option variants, payload,
QoS, rate, and the size of the topology: pairs for ``pairs``/``p2p``, subscribers for
``fanout``, publishers for ``fanin``. Those are the report's axes. Counts a topology
*derives* from its size are not: every ``pairs`` cell also records ``publishers`` and
``subscribers`` (both equal to ``pairs``), and a run over 2 and 10 pairs varies along one
axis, not three. Which tables and figures appear depends on the axes with at least two
values among the reported cells.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mqbench.analysis.repeats import RepeatAggregate
from mqbench.records.cell_params import CellParams
from mqbench.records.run_manifest import RunManifest
from mqbench.scenario.topologies import SHAPES


@dataclass(frozen=True)
class AxisInfo:
    """How an axis is named: ``heading`` in tables, ``label`` on figure axes and in titles."""

    heading: str
    label: str
    param: str
    """The cell parameter (manifest ``params``) that holds the value (the CSV column)."""
    read: Callable[[CellParams], Any]
    """The value of a cell on this axis, read from its typed parameters."""


AXES: Final[dict[str, AxisInfo]] = {
    "scenario": AxisInfo("scenario", "scenario", "scenario", lambda p: p.scenario),
    "target": AxisInfo("target", "target", "target", lambda p: p.target),
    "topology": AxisInfo("topology", "topology", "topology", lambda p: p.topology),
    "resources": AxisInfo("resources", "resources", "resources", lambda p: p.resources),
    "client": AxisInfo("client", "client", "client", lambda p: p.client),
    "options": AxisInfo(
        "broker options", "broker options", "broker_options", lambda p: p.broker_options
    ),
    "faults": AxisInfo("faults", "faults", "faults", lambda p: p.faults),
    "rate": AxisInfo(
        "rate (msg/s per publisher)", "rate per publisher (msg/s)", "rate", lambda p: p.rate
    ),
    "payload": AxisInfo("payload", "payload", "payload_bytes", lambda p: p.payload_bytes),
    "pairs": AxisInfo("pairs", "publisher-subscriber pairs", "pairs", lambda p: p.pairs),
    "subscribers": AxisInfo(
        "subscribers", "subscribers of the one publisher", "subscribers", lambda p: p.subscribers
    ),
    "publishers": AxisInfo(
        "publishers", "publishers into one subscriber", "publishers", lambda p: p.publishers
    ),
    "qos": AxisInfo("QoS", "QoS", "qos", lambda p: p.qos),
}
"""Every axis the report knows, in facet order."""


def size_axis(topology: str | None) -> str | None:
    """The count that is a matrix dimension of ``topology`` (its shape's ``size_axis``);
    None for ``groups``, an unknown topology, or none."""
    shape = SHAPES.get(topology) if topology is not None else None
    return shape.size_axis if shape is not None else None


COUNT_AXES: Final = ("pairs", "subscribers", "publishers")
CELL_AXES: Final = ("target", "resources", "client", "options", "rate", "payload", "qos")
"""Dimensions every scenario has (besides its topology's size)."""
RUN_AXES: Final = ("topology", "faults")
"""Scenario-wide settings: an axis only when runs of one scenario name differ in them."""


def heading(axis: str) -> str:
    """Table heading of ``axis`` without its unit: ``rate``, ``pairs``, ``QoS``."""
    return AXES[axis].heading.split(" (")[0]


def format_bytes(n: Any) -> str:
    """``1024`` -> ``1 KiB``; ``64`` -> ``64 B``."""
    try:
        value = int(n)
    except (TypeError, ValueError):
        return str(n)
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} B"


def fault_label(value: Any) -> str | None:
    """A short label of a cell's ``faults`` parameter (None when there are none)."""
    if value in (None, False, "", [], {}):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        kind = value.get("type") or value.get("kind") or "faults"
        extra = [f"{k} {value[k]}" for k in ("mttf", "mttr") if value.get(k) is not None]
        return " ".join([str(kind), *extra])
    if isinstance(value, list):
        labels = [fault_label(v) for v in value]
        return ", ".join(x for x in labels if x)
    return json.dumps(value, sort_keys=True, default=str)


def options_label(value: Any) -> str | None:
    """A broker-option variant's name: its ``label``, or the values joined (as in cell ids)."""
    if not isinstance(value, Mapping) or not value:
        return None
    if "label" in value:
        return str(value["label"])
    return "-".join(str(v) for _, v in sorted(value.items()))


def axis_value(agg: RepeatAggregate, axis: str) -> Any:
    """The value of ``axis`` for a cell; None when the parameter is absent, and for a count
    its topology derives (a ``pairs`` cell's publishers and subscribers)."""
    params = agg.cell_params
    if axis in COUNT_AXES:
        topology = params.topology
        if topology is not None and size_axis(topology) != axis:
            return None
    value = AXES[axis].read(params)
    if axis == "faults":
        return fault_label(value)
    if axis == "options":
        return options_label(value)
    return _hashable(value)


def axis_text(axis: str, value: Any) -> str:
    """How a value of ``axis`` is printed."""
    if value is None:
        return "-"
    if axis == "payload":
        return format_bytes(value)
    if axis == "qos":
        return f"QoS {value}"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def value_label(axis: str, value: Any) -> str:
    """An axis and its value as words: ``pairs 10``, ``QoS 1``, ``1 KiB``, ``nats``."""
    if axis in ("qos", "payload", "target", "scenario"):
        return axis_text(axis, value)
    return f"{heading(axis)} {axis_text(axis, value)}"


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, int | float):
        return (1, value)
    return (2, 0)


@dataclass(frozen=True)
class Matrix:
    """The dimensions of one run's scenario matrix, read from its manifest."""

    scenario: str
    topology: str | None
    faults: str | None
    axes: tuple[str, ...]
    """Per-cell dimensions in :data:`AXES` order (a single declared value still counts)."""
    order: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    """Declared order of the named axes' values (targets as the scenario lists them)."""

    @classmethod
    def from_manifest(cls, manifest: RunManifest) -> Matrix:
        """The matrix of the resolved scenario in ``manifest``; for a manifest without one
        (written by hand, or trimmed), the topology of its cells decides the size axis."""
        scenario = manifest.scenario
        name = str(scenario.get("name") or "?")
        workload = scenario.get("workload")
        order: dict[str, tuple[Any, ...]] = {}
        topology: str | None
        if isinstance(workload, Mapping) and "targets" in scenario:
            topology = str(workload.get("topology") or "pairs")
            faults = scenario.get("faults")
            fault = str(faults.get("type")) if isinstance(faults, Mapping) else None
            for axis, key in (("target", "targets"), ("client", "client")):
                order[axis] = tuple(_as_list(scenario.get(key)))
            order["resources"] = tuple(_as_list(scenario.get("resources")))
            broker = scenario.get("broker")
            if isinstance(broker, Mapping):
                order["options"] = tuple(options_label(o) for o in _as_list(broker.get("options")))
        else:
            params = [c.cell_params for c in manifest.cells]
            topologies = {p.topology for p in params if p.topology}
            topology = topologies.pop() if len(topologies) == 1 else None
            fault = next((fault_label(p.faults) for p in params), None)
            targets = [p.target for p in params]
            order["target"] = tuple(dict.fromkeys(t for t in targets if t is not None))
        size = size_axis(topology)
        counts = (size,) if size else (() if topology else COUNT_AXES)
        wanted = set(CELL_AXES) | set(counts)
        axes = tuple(a for a in AXES if a in wanted)
        return cls(name, topology, fault, axes, order)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return [None]
    return list(value) if isinstance(value, list | tuple) else [value]


@dataclass(frozen=True)
class ReportAxes:
    """The axes of one report: the dimensions of its runs' matrices, pooled."""

    dimensions: tuple[str, ...]
    order: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, matrices: Sequence[Matrix]) -> ReportAxes:
        """Pool the matrices of the reported runs. Runs of several scenarios add the
        ``scenario`` axis; runs of one scenario name that differ in topology or faults (set
        with ``--set``) add that axis."""
        wanted = {a for m in matrices for a in m.axes}
        names = {m.scenario for m in matrices}
        if len(names) > 1:
            wanted.add("scenario")
        for axis in RUN_AXES:
            for name in names:
                found = {getattr(m, axis) for m in matrices if m.scenario == name}
                if len(found) > 1:
                    wanted.add(axis)
        order: dict[str, tuple[Any, ...]] = {}
        for m in matrices:
            for axis, values in m.order.items():
                order[axis] = tuple(dict.fromkeys([*order.get(axis, ()), *values]))
        return cls(tuple(a for a in AXES if a in wanted), order)

    @classmethod
    def inferred(cls) -> ReportAxes:
        """Every known axis (for cells without manifests): only values tell what varies,
        and the topology still hides derived counts (:func:`axis_value`)."""
        return cls(tuple(AXES))

    def values(self, aggs: Sequence[RepeatAggregate], axis: str) -> list[Any]:
        """Distinct values of ``axis``: in declared order (targets as the scenario lists
        them), numbers ascending, other values as first seen; None first."""
        seen = list(dict.fromkeys(axis_value(a, axis) for a in aggs))
        declared = self.order.get(axis, ())
        if declared:
            rank = {v: i for i, v in enumerate(declared)}
            return sorted(seen, key=lambda v: (v is not None, rank.get(v, len(rank))))
        return sorted(seen, key=_sort_key)

    def varying(self, aggs: Sequence[RepeatAggregate]) -> list[str]:
        """Dimensions with at least two distinct values among ``aggs``."""
        return [a for a in self.dimensions if len(self.values(aggs, a)) > 1]

    def facets(
        self,
        aggs: Sequence[RepeatAggregate],
        exclude: Sequence[str],
        always: Sequence[str] = (),
    ) -> list[tuple[str, list[RepeatAggregate]]]:
        """Split ``aggs`` by every varying axis not in ``exclude`` (plus the ``always``
        axes that have a value); returns (label, members), labels like ``pairs 10, QoS 1``."""
        varying = self.varying(aggs)
        axes = [
            a
            for a in self.dimensions
            if a not in exclude
            and (a in varying or (a in always and any(axis_value(x, a) is not None for x in aggs)))
        ]
        if not axes:
            return [("", list(aggs))]
        out = []
        for combo in itertools.product(*(self.values(aggs, a) for a in axes)):
            members = [
                x
                for x in aggs
                if all(axis_value(x, a) == v for a, v in zip(axes, combo, strict=True))
            ]
            if members:
                label = ", ".join(value_label(a, v) for a, v in zip(axes, combo, strict=True))
                out.append((label, members))
        return out

    def describe(self, agg: RepeatAggregate, aggs: Sequence[RepeatAggregate]) -> str:
        """A cell named by its values on the axes that vary among ``aggs``
        (``nats, pairs 10``); its base id when none varies."""
        parts = [value_label(a, axis_value(agg, a)) for a in self.varying(aggs)]
        return ", ".join(parts) or agg.base_id


def _hashable(value: Any) -> Any:
    """Values of unusual parameters (lists, mappings) as JSON text, so they can be grouped."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return value
