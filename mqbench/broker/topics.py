"""A topic trie: MQTT subscriptions (``+`` one level, ``#`` the rest) matched per level.

Each node holds the subscribers of the filter that ends there. Matching walks the topic's
levels once, following the literal child, the ``+`` child and collecting ``#`` children on
the way, so its cost depends on the topic's depth and the number of matching filters, not
on the number of subscriptions. Topics that start with ``$`` are not matched by filters
whose first level is a wildcard (MQTT 3.1.1 section 4.7.2).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Node(Generic[K, V]):
    __slots__ = ("children", "subscribers")

    def __init__(self) -> None:
        self.children: dict[str, _Node[K, V]] = {}
        self.subscribers: dict[K, V] = {}


def valid_filter(topic_filter: str) -> bool:
    """True when ``topic_filter`` is a well-formed MQTT topic filter."""
    if not topic_filter or "\x00" in topic_filter:
        return False
    levels = topic_filter.split("/")
    for k, level in enumerate(levels):
        if "#" in level and (level != "#" or k != len(levels) - 1):
            return False
        if "+" in level and level != "+":
            return False
    return True


def valid_topic(topic: str) -> bool:
    """True when ``topic`` is a valid topic name to publish to (no wildcards, not empty)."""
    return bool(topic) and "+" not in topic and "#" not in topic and "\x00" not in topic


class TopicTrie(Generic[K, V]):
    """Subscriptions by topic filter; ``match(topic)`` returns every (key, value) matching.

    A key (e.g. a session) has at most one value per filter; subscribing again replaces it.
    """

    __slots__ = ("_count", "_root")

    def __init__(self) -> None:
        self._root: _Node[K, V] = _Node()
        self._count = 0

    def __len__(self) -> int:
        """Number of (filter, key) subscriptions."""
        return self._count

    def subscribe(self, topic_filter: str, key: K, value: V) -> bool:
        """Add or replace ``key``'s subscription to ``topic_filter``; True when it was new."""
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        new = key not in node.subscribers
        node.subscribers[key] = value
        if new:
            self._count += 1
        return new

    def unsubscribe(self, topic_filter: str, key: K) -> bool:
        """Remove ``key``'s subscription to ``topic_filter``; True when it existed.

        Nodes left without subscribers and children are pruned.
        """
        path: list[tuple[_Node[K, V], str]] = []
        node = self._root
        for level in topic_filter.split("/"):
            child = node.children.get(level)
            if child is None:
                return False
            path.append((node, level))
            node = child
        if key not in node.subscribers:
            return False
        del node.subscribers[key]
        self._count -= 1
        for parent, level in reversed(path):
            child = parent.children[level]
            if child.subscribers or child.children:
                break
            del parent.children[level]
        return True

    def match(self, topic: str) -> list[tuple[K, V]]:
        """Every (key, value) whose filter matches ``topic`` (a key may appear repeatedly)."""
        out: list[tuple[K, V]] = []
        levels = topic.split("/")
        n = len(levels)
        dollar = topic.startswith("$")
        # Depth-first over (node, next level index).
        stack: list[tuple[_Node[K, V], int]] = [(self._root, 0)]
        while stack:
            node, k = stack.pop()
            children = node.children
            if k == n:
                out.extend(node.subscribers.items())
                # "a/#" also matches "a".
                hash_node = children.get("#")
                if hash_node is not None:
                    out.extend(hash_node.subscribers.items())
                continue
            wild_ok = not (dollar and k == 0)
            if wild_ok:
                hash_node = children.get("#")
                if hash_node is not None:
                    out.extend(hash_node.subscribers.items())
                plus = children.get("+")
                if plus is not None:
                    stack.append((plus, k + 1))
            child = children.get(levels[k])
            if child is not None:
                stack.append((child, k + 1))
        return out

    def filters(self) -> Iterator[tuple[str, K, V]]:
        """Every (filter, key, value), depth first."""
        stack: list[tuple[_Node[K, V], str]] = [(self._root, "")]
        while stack:
            node, prefix = stack.pop()
            for key, value in node.subscribers.items():
                yield prefix, key, value
            for level, child in node.children.items():
                stack.append((child, level if node is self._root else f"{prefix}/{level}"))
