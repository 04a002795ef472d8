"""The broker's topic trie agrees with the reference matcher and prunes what it no longer needs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbench.wire.topics import TopicTrie, topic_matches, valid_filter, valid_topic

levels = st.sampled_from(["a", "b", "c", "", "$SYS"])
topics = st.lists(levels, min_size=1, max_size=4).map("/".join).filter(valid_topic)
filter_levels = st.sampled_from(["a", "b", "c", "", "+", "$SYS"])
filters = st.builds(
    lambda parts, hash_end: "/".join(parts + (["#"] if hash_end else [])),
    st.lists(filter_levels, min_size=0, max_size=4),
    st.booleans(),
).filter(valid_filter)


@settings(max_examples=200)
@given(st.lists(filters, min_size=1, max_size=12, unique=True), topics)
def test_trie_matches_exactly_the_filters_the_reference_matcher_accepts(
    subs: list[str], topic: str
) -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    for k, topic_filter in enumerate(subs):
        trie.subscribe(topic_filter, topic_filter, k)
    got = sorted(key for key, _ in trie.match(topic))
    assert got == sorted(f for f in subs if topic_matches(f, topic))


def test_hash_matches_the_parent_level_and_plus_matches_one_level() -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    trie.subscribe("a/#", "hash", 1)
    trie.subscribe("a/+", "plus", 2)
    assert sorted(k for k, _ in trie.match("a")) == ["hash"]
    assert sorted(k for k, _ in trie.match("a/b")) == ["hash", "plus"]
    assert sorted(k for k, _ in trie.match("a/b/c")) == ["hash"]


def test_wildcards_at_the_first_level_do_not_match_dollar_topics() -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    trie.subscribe("#", "all", 1)
    trie.subscribe("+/x", "plus", 1)
    trie.subscribe("$SYS/#", "sys", 1)
    assert [k for k, _ in trie.match("$SYS/x")] == ["sys"]


def test_resubscribing_replaces_the_value_and_unsubscribe_prunes_empty_nodes() -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    assert trie.subscribe("a/b/c", "s", 0) is True
    assert trie.subscribe("a/b/c", "s", 2) is False
    assert trie.match("a/b/c") == [("s", 2)]
    assert len(trie) == 1
    assert trie.unsubscribe("a/b/c", "s") is True
    assert trie.unsubscribe("a/b/c", "s") is False
    assert len(trie) == 0
    assert list(trie.filters()) == []
    assert trie._root.children == {}


def test_filters_lists_every_subscription_with_its_filter() -> None:
    trie: TopicTrie[str, int] = TopicTrie()
    trie.subscribe("a/+/c", "x", 1)
    trie.subscribe("/a", "y", 2)
    assert sorted(trie.filters()) == [("/a", "y", 2), ("a/+/c", "x", 1)]


def test_filter_and_topic_validation_follow_the_spec() -> None:
    assert valid_filter("a/#") and valid_filter("+/+") and valid_filter("#")
    assert not valid_filter("a/#/b") and not valid_filter("a+") and not valid_filter("")
    assert not valid_filter("a/b#")
    assert valid_topic("a/b") and not valid_topic("a/+") and not valid_topic("")
