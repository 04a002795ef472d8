"""MQTT topic names and filters, the lingua franca of scenarios: validity, matching,
the topic trie, and translations to the other protocols' subject syntax.

Scenarios and the engine speak MQTT syntax ("/" between levels, "+" one level, "#" the
rest). :func:`topic_matches` is the one definition of a match; :class:`TopicTrie` is an
index over many filters that gives the same answers (the unit tests check it against
:func:`topic_matches`) at a cost that depends on the topic's depth, not on the number of
subscriptions. Topics starting with ``$`` are not matched by filters whose first level is
a wildcard (MQTT 3.1.1 section 4.7.2). Each transport translates to its protocol (NATS
subjects, Redis patterns, Zenoh key expressions) with the helpers here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def topic_matches(topic_filter: str, topic: str) -> bool:
    """True when ``topic`` matches ``topic_filter`` (``+`` one level, ``#`` the rest).

    Topics starting with ``$`` are not matched by filters starting with a wildcard.
    """
    if topic_filter == topic:
        return True
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    for k, level in enumerate(f_levels):
        if level == "#":
            return True
        if k >= len(t_levels):
            return False
        if level not in ("+", t_levels[k]):
            return False
    return len(f_levels) == len(t_levels)


def is_filter(topic: str) -> bool:
    """True when ``topic`` contains a wildcard level."""
    return any(level in ("+", "#") for level in topic.split("/"))


def to_nats_subject(topic: str) -> str:
    """MQTT topic or filter -> NATS subject: ``a/+/c`` -> ``a.*.c``, ``a/#`` -> ``a.>``.

    Dots inside a level would create extra NATS tokens, so they become underscores.
    """
    levels = []
    for level in topic.split("/"):
        if level == "+":
            levels.append("*")
        elif level == "#":
            levels.append(">")
        else:
            levels.append(level.replace(".", "_") or "_")
    return ".".join(levels)


def to_redis_pattern(topic: str) -> str:
    """MQTT filter -> Redis PSUBSCRIBE glob (approximate: ``+`` becomes ``*``, ``#`` too).

    A Redis ``*`` also matches ``/``, so ``a/+`` would match ``a/b/c``; mqbench's
    topologies never publish where that difference matters.
    """
    out = []
    for level in topic.split("/"):
        if level in ("+", "#"):
            out.append("*")
        else:
            out.append(
                level.replace("\\", "\\\\")
                .replace("*", "\\*")
                .replace("?", "\\?")
                .replace("[", "\\[")
            )
    return "/".join(out)


def to_zenoh_key(topic: str) -> str:
    """MQTT topic or filter -> Zenoh key expression: ``+`` -> ``*``, ``#`` -> ``**``."""
    return "/".join({"+": "*", "#": "**"}.get(level, level) for level in topic.split("/"))


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
