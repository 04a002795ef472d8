"""Who publishes where and who subscribes to what, for every topology of a cell.

Every topology is expressed as indexed publishers and subscribers (cell-local indices,
which are also the ``pub``/``sub`` fields of the records) and *routes* saying which
subscribers must receive each publisher's messages (docs/results.md).

- ``pairs``: publisher i -> ``<prefix>/<i>`` -> subscriber i (the mq-bench paper).
- ``p2p``: like pairs with TBMQ's P2P shape: publisher i -> ``europe/ua/kyiv/<i>/data``,
  subscriber i filters ``europe/ua/kyiv/<i>/+``; persistent sessions by default.
- ``fanout``: one publisher -> one topic -> N subscribers.
- ``fanin``: N publishers in G groups -> ``<CC>/<random>/<group>/<client id>`` -> one
  subscriber per group with the filter ``<CC>/<random>/<group>/+`` (TBMQ's fan-in shape).
- ``groups``: publisher and subscriber groups with topic prefixes and filters and the
  publisher groups each subscriber group expects (tb-mqtt-perf-tests' config).

The sizes of each topology (client counts, labels, which keys size it) are its shape in
``mqbench.scenario.topologies``; this module holds one builder per shape (``BUILDERS``).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from mqbench.errors import ScenarioError
from mqbench.records.cell_entry import Route
from mqbench.scenario.matrix import Cell
from mqbench.wire.topics import is_filter, topic_matches

COUNTRY_CODES = ("ua", "us", "de", "fr", "pl", "gb", "it", "es", "nl", "se")


@dataclass(frozen=True)
class PubSpec:
    """One publisher: record index, client id, topic."""

    index: int
    client_id: str
    topic: str
    group: str | None = None


@dataclass(frozen=True)
class SubSpec:
    """One subscriber: record index, client id, topic filter, persistence."""

    index: int
    client_id: str
    topic_filter: str
    persistent: bool
    group: str | None = None


@dataclass(frozen=True)
class Topology:
    """All clients of a cell and the routes between them."""

    publishers: list[PubSpec]
    subscribers: list[SubSpec]
    routes: list[Route]
    """Who must receive whose messages (the manifest's ``routes``)."""
    persistent: bool


Builder = Callable[[Cell, str, str, int, bool], Topology]
"""``(cell, ids, run_tag, seed, persistent) -> Topology``: the clients of one topology."""


def build_topology(cell: Cell, run_tag: str, seed: int = 1) -> Topology:
    """Build the clients and routes of ``cell``; client ids are unique per run."""
    ids = f"mqb{run_tag}c{cell.index}"
    return BUILDERS[cell.shape.name](cell, ids, run_tag, seed, cell.persistent)


def _pairs(cell: Cell, ids: str, run_tag: str, seed: int, persistent: bool) -> Topology:
    n = cell.pairs
    topics = [f"mqbench/{run_tag}/{cell.index}/{i}" for i in range(n)]
    return _paired(ids, topics, topics, persistent)


def _p2p(cell: Cell, ids: str, run_tag: str, seed: int, persistent: bool) -> Topology:
    n = cell.pairs
    topics = [f"europe/ua/kyiv/{run_tag}{i}/data" for i in range(n)]
    filters = [f"europe/ua/kyiv/{run_tag}{i}/+" for i in range(n)]
    return _paired(ids, topics, filters, persistent)


def _paired(ids: str, topics: list[str], filters: list[str], persistent: bool) -> Topology:
    n = len(topics)
    pubs = [PubSpec(i, f"{ids}p{i}", topics[i]) for i in range(n)]
    subs = [SubSpec(i, f"{ids}s{i}", filters[i], persistent) for i in range(n)]
    return Topology(pubs, subs, [Route("pairs", (0, n), (0, n))], persistent)


def _fanout(cell: Cell, ids: str, run_tag: str, seed: int, persistent: bool) -> Topology:
    topic = f"mqbench/{run_tag}/{cell.index}/fanout"
    n = cell.fanout_subscribers
    pubs = [PubSpec(0, f"{ids}p0", topic)]
    subs = [SubSpec(j, f"{ids}s{j}", topic, persistent) for j in range(n)]
    return Topology(pubs, subs, [Route("all", (0, 1), (0, n))], persistent)


def _fanin(cell: Cell, ids: str, run_tag: str, seed: int, persistent: bool) -> Topology:
    rng = random.Random(f"{seed}-{cell.index}")
    groups = cell.fanin_groups
    prefixes = [
        f"{rng.choice(COUNTRY_CODES)}/"
        f"{run_tag}{''.join(rng.choices(string.ascii_lowercase, k=5))}/{g}"
        for g in range(groups)
    ]
    pubs: list[PubSpec] = []
    routes: list[Route] = []
    sizes = [
        cell.fanin_publishers // groups + (g < cell.fanin_publishers % groups)
        for g in range(groups)
    ]
    for g, size in enumerate(sizes):
        first = len(pubs)
        for _ in range(size):
            client_id = f"{ids}p{len(pubs)}"
            pubs.append(PubSpec(len(pubs), client_id, f"{prefixes[g]}/{client_id}"))
        routes.append(Route("all", (first, len(pubs)), (g, g + 1)))
    subs = [SubSpec(g, f"{ids}s{g}", f"{prefixes[g]}/+", persistent) for g in range(groups)]
    return Topology(pubs, subs, routes, persistent)


def _groups(cell: Cell, ids: str, run_tag: str, seed: int, persistent: bool) -> Topology:
    assert cell.groups is not None
    pubs: list[PubSpec] = []
    ranges: dict[str, tuple[int, int]] = {}
    for pgroup in cell.groups.publishers:
        prefix = pgroup.client_id_prefix or f"{ids}{pgroup.id}-"
        first = len(pubs)
        for j in range(pgroup.count):
            pubs.append(PubSpec(len(pubs), f"{prefix}{j}", f"{pgroup.topic_prefix}{j}", pgroup.id))
        ranges[pgroup.id] = (first, len(pubs))
    subs: list[SubSpec] = []
    routes: list[Route] = []
    for group in cell.groups.subscribers:
        prefix = group.client_id_prefix or f"{ids}{group.id}-"
        keep = group.persistent if group.persistent is not None else persistent
        first = len(subs)
        for j in range(group.count):
            subs.append(SubSpec(len(subs), f"{prefix}{j}", group.topic_filter, keep, group.id))
        for pub_group in cell.groups.publishers:
            a, b = ranges[pub_group.id]
            sample = [pubs[a].topic, pubs[b - 1].topic]
            matches = [topic_matches(group.topic_filter, t) for t in sample]
            expected = pub_group.id in group.expected_publisher_groups
            if expected and not all(matches):
                raise ScenarioError(
                    f"subscriber group {group.id!r}: filter {group.topic_filter!r} does not "
                    f"match publisher group {pub_group.id!r}'s topics (e.g. {sample[0]!r})"
                )
            if not expected and any(matches):
                raise ScenarioError(
                    f"subscriber group {group.id!r}: filter {group.topic_filter!r} also "
                    f"matches publisher group {pub_group.id!r}, which it does not expect; "
                    f"add it to expected_publisher_groups or narrow the filter"
                )
            if expected:
                routes.append(Route("all", (a, b), (first, len(subs))))
    for pub in pubs:
        if is_filter(pub.topic):
            raise ScenarioError(f"publisher topic {pub.topic!r} contains a wildcard")
    return Topology(pubs, subs, routes, persistent)


BUILDERS: dict[str, Builder] = {
    "pairs": _pairs,
    "p2p": _p2p,
    "fanout": _fanout,
    "fanin": _fanin,
    "groups": _groups,
}
"""One builder per topology shape (``mqbench.scenario.topologies.SHAPES``)."""


def fault_targets(topology: Topology, target: str) -> dict[str, list[int]]:
    """Indices of the clients a fault's ``target`` names (subscribers, publishers, all, a group)."""
    subs = [s.index for s in topology.subscribers]
    pubs = [p.index for p in topology.publishers]
    if target == "subscribers":
        return {"subscribers": subs, "publishers": []}
    if target == "publishers":
        return {"subscribers": [], "publishers": pubs}
    if target == "all":
        return {"subscribers": subs, "publishers": pubs}
    chosen = {
        "subscribers": [s.index for s in topology.subscribers if s.group == target],
        "publishers": [p.index for p in topology.publishers if p.group == target],
    }
    if not chosen["subscribers"] and not chosen["publishers"]:
        raise ScenarioError(f"faults.target {target!r}: no client group of that name")
    return chosen
