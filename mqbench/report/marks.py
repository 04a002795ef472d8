"""The marks a report puts on numbers it cannot vouch for, with their footnotes.

- ``†`` the generator saturated in some repeat: the load generator, not the broker, limited
  the cell;
- ``‡`` the latency was generator-bound in some repeat (``latency_verdict``): only latency
  values carry it;
- ``§`` the cell was invalid in some repeat for another reason (the broker exited, sends
  failed, records were truncated, the run was interrupted);
- ``¶`` the loss includes a backlog in some repeat (``backlog_at_drain_end``): the broker
  was still delivering when the drain ended; only loss values carry it;
- ``‖`` some deliveries matched no subscription of the client that received them
  (``unmatched_deliveries``): dropped by the client, in no record, so counted as lost;
  only loss values carry it.

Tables append the symbols to the value; figures draw marked bars hatched, marked points
hollow or crossed and marked CDF lines dashed or dotted, each with a legend entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final

from mqbench.analysis.repeats import RepeatAggregate


class Mark(StrEnum):
    """A mark and its symbol (the value)."""

    SATURATED = "†"
    LATENCY_BOUND = "‡"
    INVALID = "§"
    BACKLOG = "¶"
    UNMATCHED = "‖"


ORDER: Final = (Mark.SATURATED, Mark.LATENCY_BOUND, Mark.INVALID, Mark.BACKLOG, Mark.UNMATCHED)
"""The order marks are appended and explained in (``0.3 † ‡``, ``1.2 † §``)."""

LOSS_MARKS: Final = (Mark.BACKLOG, Mark.UNMATCHED)
"""The marks only loss values carry (what explains a loss figure)."""

NOTES: Final[dict[Mark, str]] = {
    Mark.SATURATED: "† generator saturated in at least one repeat: the load generator, not "
    "the broker, limited this cell (numbers are not broker capacity).",
    Mark.LATENCY_BOUND: "‡ latency generator-bound in at least one repeat: the generator's "
    "send lag was over 10 % of the latency p50 or over 25 % of its p99, so the latency "
    "describes the load generator, not the broker.",
    Mark.INVALID: "§ invalid in at least one repeat for a reason other than the generator "
    "(the broker exited, sends failed, records were truncated, or the run was interrupted): "
    "the numbers do not measure the broker.",
    Mark.BACKLOG: "¶ the broker was still delivering when the drain ended in at least one "
    "repeat (backlog_at_drain_end): the loss counts messages not delivered by then, which "
    "may include messages it still held, not only drops; a longer workload.drain tells them "
    "apart.",
    Mark.UNMATCHED: "‖ deliveries matched no subscription in at least one repeat "
    "(unmatched_deliveries): the clients that received them dropped them, so they are not in "
    "the records and count as lost (a broker delivering on a topic nobody subscribed to, or a "
    "resumed session's messages before its subscription was registered again).",
}
"""The footnote under a table that uses the mark."""

LEGEND: Final[dict[Mark, str]] = {
    Mark.SATURATED: "† generator saturated",
    Mark.LATENCY_BOUND: "‡ latency generator-bound",
    Mark.INVALID: "§ invalid (broker exited, sends failed, truncated, interrupted)",
    Mark.BACKLOG: "¶ loss includes a backlog at the drain's end",
    Mark.UNMATCHED: "‖ loss includes deliveries that matched no subscription",
}
"""The legend entry of a figure that draws the mark."""


def invalid_beyond_generator(agg: RepeatAggregate) -> bool:
    """Invalid for a reason the saturation mark does not already say."""
    return any(kind != "generator_saturated" for kind in agg.invalid_kinds)


def marks_of(agg: RepeatAggregate, latency: bool = False, loss: bool = False) -> tuple[Mark, ...]:
    """The marks of a cell's value; ``latency``: the value is a latency (‡ applies);
    ``loss``: the value is a loss (¶ and ‖ apply)."""
    found = {
        Mark.SATURATED: agg.any_saturated,
        Mark.INVALID: invalid_beyond_generator(agg),
        Mark.LATENCY_BOUND: latency and agg.any_latency_bound,
        Mark.BACKLOG: loss and agg.any_backlog,
        Mark.UNMATCHED: loss and agg.unmatched_deliveries > 0,
    }
    return tuple(m for m in ORDER if found[m])


def ordered(marks: Iterable[Mark]) -> tuple[Mark, ...]:
    """``marks`` without repeats, in :data:`ORDER`."""
    present = set(marks)
    return tuple(m for m in ORDER if m in present)


def with_marks(text: str, marks: Iterable[Mark]) -> str:
    """``text`` followed by the symbols (``-`` for a missing value stays unmarked)."""
    if text == "-":
        return text
    return " ".join([text, *(m.value for m in ordered(marks))])
