"""The shape of every topology: which workload keys size it, how many clients it has, how
many deliveries each message round asks for, and its label in cell ids.

One class per topology, registered in :data:`SHAPES`; the scenario model, the matrix
expansion and the engine ask the shape instead of testing topology names. The clients and
routes themselves are built by the engine (``mqbench.workload.topology``, one builder per
shape). Adding a topology: a shape here, a builder there, the name in ``model.Topology``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from mqbench.scenario.matrix import Cell


class TopologyShape:
    """A topology's sizes; the default is one subscriber per publisher (pairs)."""

    name: ClassVar[str]
    size_fields: ClassVar[frozenset[str]]
    """The ``workload`` keys that size this topology (others are refused)."""
    size_axis: ClassVar[str | None] = None
    """The count that is this topology's matrix dimension (a ``workload`` list, the report's
    size axis) and the one a saturation search may step besides ``rate``; the other counts
    are derived from it (``groups`` has none)."""
    persistent_by_default: ClassVar[bool] = False
    """Clients use persistent sessions unless ``workload.persistent`` says otherwise."""

    def publishers(self, cell: Cell) -> int:
        """Publishing clients."""
        return cell.pairs

    def subscribers(self, cell: Cell) -> int:
        """Subscribing clients."""
        return cell.pairs

    def deliveries_per_round(self, cell: Cell) -> int:
        """Deliveries when every publisher sends one message and nothing is lost."""
        return self.publishers(cell)

    def size_label(self, cell: Cell) -> str:
        """The size part of a cell id, e.g. ``20pairs``."""
        raise NotImplementedError


class Pairs(TopologyShape):
    """Publisher i -> its own topic -> subscriber i (the mq-bench paper)."""

    name = "pairs"
    size_fields = frozenset({"pairs"})
    size_axis = "pairs"

    def size_label(self, cell: Cell) -> str:
        """``20pairs``."""
        return f"{cell.pairs}pairs"


class P2P(Pairs):
    """Pairs in TBMQ's point-to-point shape, with persistent sessions by default."""

    name = "p2p"
    persistent_by_default = True

    def size_label(self, cell: Cell) -> str:
        """``20p2p``."""
        return f"{cell.pairs}p2p"


class Fanout(TopologyShape):
    """One publisher -> one topic -> N subscribers."""

    name = "fanout"
    size_fields = frozenset({"subscribers"})
    size_axis = "subscribers"

    def publishers(self, cell: Cell) -> int:
        """One."""
        return 1

    def subscribers(self, cell: Cell) -> int:
        """``workload.subscribers``."""
        return cell.fanout_subscribers

    def deliveries_per_round(self, cell: Cell) -> int:
        """Every subscriber gets the message."""
        return cell.fanout_subscribers

    def size_label(self, cell: Cell) -> str:
        """``1to500``."""
        return f"1to{cell.fanout_subscribers}"


class Fanin(TopologyShape):
    """N publishers in G groups -> one wildcard subscriber per group."""

    name = "fanin"
    size_fields = frozenset({"publishers", "fanin_groups"})
    size_axis = "publishers"

    def publishers(self, cell: Cell) -> int:
        """``workload.publishers``."""
        return cell.fanin_publishers

    def subscribers(self, cell: Cell) -> int:
        """One per group."""
        return cell.fanin_groups

    def size_label(self, cell: Cell) -> str:
        """``500to5``."""
        return f"{cell.fanin_publishers}to{cell.fanin_groups}"


class GroupsShape(TopologyShape):
    """Publisher and subscriber groups with topic prefixes and filters."""

    name = "groups"
    size_fields = frozenset({"groups"})

    def publishers(self, cell: Cell) -> int:
        """All publisher groups together."""
        assert cell.groups is not None
        return sum(g.count for g in cell.groups.publishers)

    def subscribers(self, cell: Cell) -> int:
        """All subscriber groups together."""
        assert cell.groups is not None
        return sum(g.count for g in cell.groups.subscribers)

    def deliveries_per_round(self, cell: Cell) -> int:
        """Each subscriber gets every message of the publisher groups it expects."""
        assert cell.groups is not None
        sizes = {g.id: g.count for g in cell.groups.publishers}
        return sum(
            sizes[p] * g.count for g in cell.groups.subscribers for p in g.expected_publisher_groups
        )

    def size_label(self, cell: Cell) -> str:
        """``groups10x20``."""
        return f"groups{self.publishers(cell)}x{self.subscribers(cell)}"


SHAPES: dict[str, TopologyShape] = {
    shape.name: shape for shape in (Pairs(), P2P(), Fanout(), Fanin(), GroupsShape())
}
"""Every topology by name (the names of ``scenario.model.Topology``)."""

SIZE_FIELDS: tuple[str, ...] = ("pairs", "subscribers", "publishers", "fanin_groups", "groups")
"""Every ``workload`` key that sizes some topology (in the order errors name them)."""
assert set(SIZE_FIELDS) == set().union(*(s.size_fields for s in SHAPES.values()))


def shape_of(topology: str) -> TopologyShape:
    """The shape of ``topology`` (a name the scenario model accepted)."""
    return SHAPES[topology]
