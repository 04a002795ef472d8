"""Which messages a subscriber has already received: a broker's second delivery of a
message (QoS 1 after a reset, QoS 2 after a session takeover) told from a first one.

The drain ends when every delivery due for what was sent has arrived
(``coordinator.drained``). Counted as an arrival, each second delivery ended it one
message early, and a message still on its way was then counted lost (docs/findings.md,
experiment 3). The records keep every delivery, duplicates included; this only counts.

Per publisher, a subscriber remembers the highest sequence number it has seen and the
numbers below it not yet seen, within the last ``WINDOW``: memory stays bounded however
many messages are lost or go to other subscribers (shared subscriptions). A message that
arrives more than ``WINDOW`` numbers behind the newest is taken as seen before; the drain
then waits for its timeout rather than ending early.
"""

from __future__ import annotations

from typing import Final

WINDOW: Final = 4096
"""How far behind a publisher's newest message a first arrival is still recognised."""


class FirstDeliveries:
    """One subscriber's view of which ``(publisher, seq)`` it has received."""

    __slots__ = ("_missing", "_top")

    def __init__(self) -> None:
        self._top: dict[int, int] = {}
        self._missing: dict[int, set[int]] = {}

    def first(self, pub: int, seq: int) -> bool:
        """Note a delivery; False when this message was received before."""
        top = self._top.get(pub, -1)
        if seq > top:
            self._top[pub] = seq
            if seq > top + 1:
                self._note_gap(pub, max(top + 1, seq - WINDOW), seq)
            return True
        missing = self._missing.get(pub)
        if missing is not None and seq in missing:
            missing.remove(seq)
            return True
        return False

    def _note_gap(self, pub: int, start: int, stop: int) -> None:
        missing = self._missing.setdefault(pub, set())
        missing.update(range(start, stop))
        if len(missing) > 2 * WINDOW:
            oldest = stop - WINDOW
            self._missing[pub] = {seq for seq in missing if seq >= oldest}
