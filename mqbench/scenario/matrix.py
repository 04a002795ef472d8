"""Expand a scenario's list-valued fields into cells: one run of one configuration."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields
from typing import Any

from mqbench.scenario.model import Churn, Groups, Scenario
from mqbench.scenario.security import options_label, redact
from mqbench.scenario.topologies import TopologyShape, shape_of
from mqbench.scenario.units import format_number, format_size

AXIS_FIELDS: dict[str, str] = {
    "rate": "rate",
    "pairs": "pairs",
    "subscribers": "fanout_subscribers",
    "publishers": "fanin_publishers",
}
"""The ``Cell`` field each ``workload`` list (and saturation-search axis) becomes."""


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
    client: str | None = None
    resources: str | None = None
    fanout_subscribers: int = 1
    fanin_publishers: int = 1
    fanin_groups: int = 1
    groups: Groups | None = None
    persistent: bool = False
    connect_rate: float = 0.0
    churn: Churn | None = None
    search_step: int | None = None
    """Position in a saturation search (None outside searches)."""
    broker_options: tuple[tuple[str, Any], ...] = ()
    """Broker-specific settings of this cell (``broker.options``), as sorted items."""

    @property
    def broker_label(self) -> str | None:
        """The variant's label for cell ids (:func:`options_label`): no secret in it."""
        return options_label(dict(self.broker_options))

    @property
    def shape(self) -> TopologyShape:
        """The topology's shape: its sizes and label."""
        return shape_of(self.topology)

    def axis_value(self, axis: str) -> float:
        """This cell's value on a ``workload`` list axis (``rate``, ``pairs``,
        ``subscribers``, ``publishers``: the saturation search's and the size's)."""
        value: float = getattr(self, AXIS_FIELDS[axis])
        return value

    @property
    def publishers(self) -> int:
        """Number of publishing clients."""
        return self.shape.publishers(self)

    @property
    def subscribers(self) -> int:
        """Number of subscribing clients."""
        return self.shape.subscribers(self)

    @property
    def connections(self) -> int:
        """Client connections the generator opens."""
        return self.publishers + self.subscribers

    @property
    def offered_rate(self) -> float:
        """Messages per second offered by all publishers together."""
        return self.rate * self.publishers

    @property
    def expected_delivery_rate(self) -> float:
        """Deliveries per second when nothing is lost (fanout multiplies)."""
        return self.rate * self.shape.deliveries_per_round(self)

    @property
    def offered_bytes_per_s(self) -> float:
        """Payload bytes per second offered by all publishers together."""
        return self.offered_rate * self.payload_bytes

    @property
    def messages_per_publisher(self) -> int:
        """Scheduled messages per publisher over warm-up plus measured duration."""
        return max(1, round((self.warmup_s + self.duration_s) * self.rate))

    @property
    def size_label(self) -> str:
        """The topology's size, e.g. ``20pairs``, ``1to500``, ``500to1``."""
        return self.shape.size_label(self)

    @property
    def id(self) -> str:
        """Stable, readable identifier used as the cell's folder name."""
        parts = [
            self.target,
            format_size(self.payload_bytes),
            self.size_label,
            f"{format_number(self.rate)}hz",
            f"qos{self.qos}",
        ]
        if self.client:
            parts.append(self.client)
        if self.resources:
            parts.append(self.resources)
        if self.broker_label:
            parts.append(self.broker_label)
        if self.repeat:
            parts.append(f"r{self.repeat}")
        return "-".join(parts)

    @property
    def base_id(self) -> str:
        """The id without the repeat suffix (the same configuration across repeats)."""
        return self.id if not self.repeat else self.id.rsplit("-r", 1)[0]

    def params(self) -> dict[str, Any]:
        """The cell's parameters for the manifest (JSON-ready)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Groups | Churn):
                value = value.model_dump(mode="json")
            elif f.name == "broker_options":
                value = redact(dict(value))
            out[f.name] = value
        out["publishers"] = self.publishers
        out["subscribers"] = self.subscribers
        return out


def expand(scenario: Scenario) -> list[Cell]:
    """All cells in run order; repeats are interleaved (every cell once, then again).

    With a ``search``, the searched axis takes the search's values in increasing order
    (``run`` stops stepping a combination once a step crosses a limit).
    """
    w = scenario.workload
    shape = shape_of(w.topology)
    axes: dict[str, list[float]] = {
        "rate": list(w.rate),
        "pairs": list(w.pairs),
        "subscribers": list(w.subscribers),
        "publishers": list(w.publishers),
    }
    search = scenario.search
    if search is not None:
        axes[search.axis] = list(search.values)
    for axis in ("pairs", "subscribers", "publishers"):
        if axis not in shape.size_fields:
            axes[axis] = [1]  # a size this topology does not have: one value, unused
    rates = axes["rate"]
    pairs, subs, pubs = ([int(v) for v in axes[a]] for a in ("pairs", "subscribers", "publishers"))
    combos = list(
        itertools.product(
            scenario.targets,
            scenario.client,
            scenario.resources,
            [tuple(sorted(o.items())) for o in scenario.broker.options],
            w.payload,
            w.qos,
            pairs,
            subs,
            pubs,
            rates,
        )
    )
    cells: list[Cell] = []
    for repeat in range(scenario.repeat):
        for combo in combos:
            target, client, resources, options, payload, qos, n_pairs, n_subs, n_pubs, rate = combo
            sizes = {
                "rate": rate,
                "pairs": n_pairs,
                "fanout_subscribers": n_subs,
                "fanin_publishers": n_pubs,
            }
            step = None
            if search is not None:
                step = search.values.index(sizes[AXIS_FIELDS[search.axis]])
            cells.append(
                Cell(
                    index=len(cells),
                    repeat=repeat,
                    target=target,
                    topology=w.topology,
                    pairs=n_pairs,
                    rate=rate,
                    payload_bytes=payload,
                    qos=qos,
                    duration_s=w.duration,
                    warmup_s=w.warmup,
                    drain_s=w.drain,
                    client=client,
                    resources=resources,
                    fanout_subscribers=n_subs,
                    fanin_publishers=n_pubs,
                    fanin_groups=w.fanin_groups,
                    groups=w.groups,
                    persistent=w.is_persistent,
                    connect_rate=w.connect_rate,
                    churn=w.churn,
                    search_step=step,
                    broker_options=options,
                )
            )
    return cells


def broker_options(scenario: Scenario, cell: Cell) -> dict[str, Any]:
    """What the runtime gets as ``StartRequest.options`` for ``cell``: the cell's
    ``broker.options`` (without ``label``), ``broker.pid`` and the resources profile."""
    options: dict[str, Any] = {k: v for k, v in cell.broker_options if k != "label"}
    if scenario.broker.pid:
        options["pid"] = scenario.broker.pid
    if cell.resources:
        options["resources"] = cell.resources
    return options
