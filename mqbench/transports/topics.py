"""Topic names and filters in MQTT syntax, the lingua franca of scenarios.

Scenarios and the engine speak MQTT syntax ("/" between levels, "+" one level, "#" the
rest); each transport translates to its protocol (NATS subjects, Redis patterns, Zenoh key
expressions) with the helpers here.
"""

from __future__ import annotations


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
