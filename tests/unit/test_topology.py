from typing import get_args

import pytest

from mqbench.errors import ScenarioError
from mqbench.records.cell_entry import Route
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import Cell, expand
from mqbench.scenario.model import Topology as TopologyName
from mqbench.scenario.topologies import SHAPES
from mqbench.wire.topics import to_nats_subject, to_redis_pattern, to_zenoh_key, topic_matches
from mqbench.workload.topology import BUILDERS, build_topology


def only_cell(workload: dict, **top: object) -> Cell:
    scenario = validate_scenario(
        {"name": "t", "targets": ["mosquitto"], "workload": workload, **top}, "t.yaml"
    )
    (cell,) = expand(scenario)
    return cell


def test_pairs_route_publisher_i_to_subscriber_i_on_unique_topics() -> None:
    topology = build_topology(only_cell({"pairs": 3}), "r1")
    assert [p.topic for p in topology.publishers] == [s.topic_filter for s in topology.subscribers]
    assert len({p.topic for p in topology.publishers}) == 3
    assert topology.routes == [Route("pairs", (0, 3), (0, 3))]
    assert not topology.persistent


def test_p2p_uses_tbmq_topics_wildcard_filters_and_persistent_sessions() -> None:
    cell = only_cell({"topology": "p2p", "pairs": 2, "qos": 1, "payload": 62})
    topology = build_topology(cell, "r1")
    assert topology.persistent and all(s.persistent for s in topology.subscribers)
    for pub, sub in zip(topology.publishers, topology.subscribers, strict=True):
        assert pub.topic.startswith("europe/ua/kyiv/")
        assert sub.topic_filter.endswith("/+")
        assert topic_matches(sub.topic_filter, pub.topic)
    assert not topic_matches(topology.subscribers[0].topic_filter, topology.publishers[1].topic)


def test_fanout_sends_one_topic_to_every_subscriber() -> None:
    cell = only_cell({"topology": "fanout", "subscribers": 500, "rate": 100})
    topology = build_topology(cell, "r1")
    assert len(topology.publishers) == 1 and len(topology.subscribers) == 500
    assert topology.routes == [Route("all", (0, 1), (0, 500))]
    assert cell.expected_delivery_rate == 50_000
    assert cell.id == "mosquitto-1KiB-1to500-100hz-qos0"


def test_fanin_groups_follow_country_random_group_client_shape() -> None:
    cell = only_cell({"topology": "fanin", "publishers": 7, "fanin_groups": 2})
    topology = build_topology(cell, "r1")
    assert [len(range(*r.pubs)) for r in topology.routes] == [4, 3]
    for route in topology.routes:
        sub = topology.subscribers[route.subs[0]]
        for pub in topology.publishers[slice(*route.pubs)]:
            levels = pub.topic.split("/")
            assert len(levels) == 4 and levels[3] == pub.client_id
            assert topic_matches(sub.topic_filter, pub.topic)
    other = topology.subscribers[1].topic_filter
    assert not topic_matches(other, topology.publishers[0].topic)


GROUPS = {
    "publishers": [
        {"id": "pg1", "count": 3, "topic_prefix": "usa/ydwvv/1/"},
        {"id": "pg2", "count": 2, "topic_prefix": "usa/ydwvv/2/"},
    ],
    "subscribers": [
        {
            "id": "sg1",
            "count": 2,
            "topic_filter": "usa/ydwvv/1/+",
            "expected_publisher_groups": ["pg1"],
        },
        {
            "id": "sg2",
            "count": 1,
            "topic_filter": "usa/ydwvv/#",
            "expected_publisher_groups": ["pg1", "pg2"],
        },
    ],
}


def test_groups_route_each_subscriber_group_to_its_expected_publisher_groups() -> None:
    cell = only_cell({"topology": "groups", "groups": GROUPS, "rate": 1})
    topology = build_topology(cell, "r1")
    assert topology.routes == [
        Route("all", (0, 3), (0, 2)),
        Route("all", (0, 3), (2, 3)),
        Route("all", (3, 5), (2, 3)),
    ]
    assert cell.expected_delivery_rate == 3 * 2 + 3 + 2


def test_groups_reject_a_filter_that_misses_an_expected_group() -> None:
    bad = {
        **GROUPS,
        "subscribers": [
            {"id": "sg1", "count": 1, "topic_filter": "eu/+", "expected_publisher_groups": ["pg1"]}
        ],
    }
    with pytest.raises(ScenarioError, match="does not match publisher group 'pg1'"):
        build_topology(only_cell({"topology": "groups", "groups": bad}), "r1")


def test_groups_reject_a_filter_that_catches_an_unexpected_group() -> None:
    bad = {
        **GROUPS,
        "subscribers": [
            {"id": "sg1", "count": 1, "topic_filter": "usa/#", "expected_publisher_groups": ["pg1"]}
        ],
    }
    with pytest.raises(ScenarioError, match="also matches publisher group 'pg2'"):
        build_topology(only_cell({"topology": "groups", "groups": bad}), "r1")


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"topology": "fanout", "pairs": 5}, "'pairs' does not apply to topology 'fanout'"),
        ({"topology": "groups"}, "needs a 'groups' section"),
        ({"topology": "fanin", "publishers": 2, "fanin_groups": 3}, "fanin_groups"),
        ({"churn": {"every": "5s", "downtime": "6s"}}, "downtime must be shorter"),
    ],
)
def test_impossible_topology_combinations_are_rejected(workload: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        only_cell(workload)


def test_topics_translate_to_each_protocols_wildcards() -> None:
    assert to_nats_subject("a/+/c.d/#") == "a.*.c_d.>"
    assert to_zenoh_key("a/+/#") == "a/*/**"
    assert to_redis_pattern("a/+/x*") == r"a/*/x\*"


SHAPED = [
    {"pairs": 3},
    {"topology": "p2p", "pairs": 2},
    {"topology": "fanout", "subscribers": 5},
    {"topology": "fanin", "publishers": 7, "fanin_groups": 2},
    {"topology": "groups", "groups": GROUPS},
]


def test_every_topology_has_one_shape_and_one_builder() -> None:
    assert set(SHAPES) == set(BUILDERS) == set(get_args(TopologyName))
    assert {w.get("topology", "pairs") for w in SHAPED} == set(SHAPES)


@pytest.mark.parametrize("workload", SHAPED, ids=lambda w: str(w.get("topology", "pairs")))
def test_the_built_clients_and_routes_match_the_shape_sizes(workload: dict) -> None:
    cell = only_cell(workload)
    topology = build_topology(cell, "r1")
    assert (len(topology.publishers), len(topology.subscribers)) == (
        cell.publishers,
        cell.subscribers,
    )
    routed = sum(
        (r.pubs[1] - r.pubs[0]) * (1 if r.kind == "pairs" else r.subs[1] - r.subs[0])
        for r in topology.routes
    )
    assert cell.expected_delivery_rate == routed * cell.rate
    assert cell.shape.size_label(cell) in cell.id
