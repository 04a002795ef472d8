"""MQTT 5 shared subscriptions (``$share/{group}/{filter}``): groups and member choice.

Every message matching a group's filter goes to one member of the group, chosen round
robin over the members whose client is connected; when none is connected, round robin
over the members with a persistent session (their store keeps the message until the
client returns); when there is none of those either, the message is dropped for that
group (MQTT has nobody to give it to). Choice is per message, not per publisher.
"""

from __future__ import annotations

from typing import Final

from mqbench.builtin_broker.session import MEMORY, Session, Subscription
from mqbench.wire.topics import valid_filter

SHARE_PREFIX: Final = "$share/"


def is_shared(topic_filter: str) -> bool:
    """True when ``topic_filter`` names a shared subscription (``$share/...``)."""
    return topic_filter.startswith(SHARE_PREFIX)


def parse_shared(topic_filter: str) -> tuple[str, str] | None:
    """``(share name, topic filter)`` of a ``$share/{name}/{filter}``; None when malformed.

    The share name must be non-empty without ``/``, ``+`` or ``#``; the filter must be a
    valid topic filter (MQTT 5.0, 4.8.2).
    """
    rest = topic_filter[len(SHARE_PREFIX) :]
    name, sep, inner = rest.partition("/")
    if not sep or not name or "+" in name or "#" in name or not valid_filter(inner):
        return None
    return name, inner


class SharedGroup:
    """The members of one ``$share/{name}/{filter}`` and the round-robin position."""

    __slots__ = ("_next", "filter", "key", "members", "name", "order")

    def __init__(self, name: str, topic_filter: str) -> None:
        """An empty group; members join with :meth:`join`."""
        self.name = name
        self.filter = topic_filter
        self.key = f"{SHARE_PREFIX}{name}/{topic_filter}"
        """The full ``$share/{name}/{filter}``, as clients subscribe to it."""
        self.members: dict[Session, Subscription] = {}
        self.order: list[Session] = []
        self._next = 0

    def join(self, session: Session, sub: Subscription) -> bool:
        """Add ``session`` (or replace its options); True when it is a new member."""
        new = session not in self.members
        self.members[session] = sub
        if new:
            self.order.append(session)
        return new

    def leave(self, session: Session) -> bool:
        """Remove ``session``; True when it was a member."""
        if self.members.pop(session, None) is None:
            return False
        index = self.order.index(session)
        del self.order[index]
        if index < self._next:
            self._next -= 1
        if self._next >= len(self.order):
            self._next = 0
        return True

    def pick(self, exclude: Session | None = None) -> tuple[Session, Subscription] | None:
        """The member that gets the next message (see the module docstring), or None.

        ``exclude`` is skipped (a member whose connection just broke).
        """
        order = self.order
        n = len(order)
        if not n:
            return None
        start = self._next
        fallback = -1
        for step in range(n):
            index = (start + step) % n
            session = order[index]
            if session is exclude:
                continue
            if session.conn is not None:
                self._next = (index + 1) % n
                return session, self.members[session]
            if fallback < 0 and session.mode != MEMORY:
                fallback = index
        if fallback < 0:
            return None
        self._next = (fallback + 1) % n
        session = order[fallback]
        return session, self.members[session]
