"""Whether a cell's numbers can be trusted: ``valid`` plus typed reasons when they cannot.

Each reason has a kind (:class:`InvalidKind`, stable strings stored in ``summary.json`` and
``summary.parquet``) and a one-line message for people. A cell is valid when it has no
reason. New kinds are added here and in docs/results.md; readers decide by ``kind``,
never by the message text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from mqbench.records.cell_entry import BrokerExitEntry
from mqbench.records.integrity import RecordFileCheck

MAX_UNSENT_FRACTION: Final = 0.001
"""More than 0.1 % of the scheduled messages never sent marks the cell invalid (unless the
scenario makes publishers fail on purpose: faults on publishers, publisher churn)."""


class InvalidKind(StrEnum):
    """Why a cell is invalid."""

    GENERATOR_SATURATED = "generator_saturated"
    """The load generator, not the broker, limited the cell."""
    BROKER_EXITED = "broker_exited"
    """The broker process (or container) exited during the cell."""
    SENDS_FAILED = "sends_failed"
    """Too many scheduled messages were never handed to a connected client."""
    RECORDS_TRUNCATED = "records_truncated"
    """Record files lost data inside the measured window, or are missing or shorter than
    their sidecars, the manifest or their writers say."""
    INTERRUPTED = "interrupted"
    """The run was stopped during the cell (a signal, a lost load task, a killed mqbench):
    its window ends at the stop, so it is not the measurement the scenario planned."""


@dataclass(frozen=True)
class InvalidReason:
    """One reason a cell is invalid."""

    kind: InvalidKind
    message: str

    def to_dict(self) -> dict[str, str]:
        """``{"kind": ..., "message": ...}`` as stored in ``summary.json``."""
        return {"kind": self.kind.value, "message": self.message}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InvalidReason:
        """Inverse of :meth:`to_dict` (an unknown kind raises ``ValueError``)."""
        return cls(InvalidKind(str(data["kind"])), str(data["message"]))


def generator_reason(reasons: list[str]) -> list[InvalidReason]:
    """The generator's saturation reasons as one invalid reason (none when empty)."""
    if not reasons:
        return []
    return [InvalidReason(InvalidKind.GENERATOR_SATURATED, "; ".join(reasons))]


def broker_exit_reason(
    broker_exit: BrokerExitEntry | None, window_start_ns: int
) -> list[InvalidReason]:
    """A reason when the manifest cell records a ``broker_exit``."""
    if broker_exit is None:
        return []
    what = broker_exit.reason or "exited"
    when = ""
    if broker_exit.t_ns is not None:
        offset = (broker_exit.t_ns - window_start_ns) / 1e9
        when = f" {offset:+.1f} s from the window start"
    return [
        InvalidReason(
            InvalidKind.BROKER_EXITED,
            f"the broker (pid {broker_exit.pid}) {what} (exit code {broker_exit.exit_code}){when}",
        )
    ]


def unsent_reason(
    scheduled: int, unsent: int, send_failed: int, refused: int, expected_by_design: bool
) -> list[InvalidReason]:
    """A reason when more than ``MAX_UNSENT_FRACTION`` of the schedule was never sent."""
    if expected_by_design or scheduled <= 0 or unsent / scheduled <= MAX_UNSENT_FRACTION:
        return []
    detail = f"{send_failed:,} due while the client was disconnected or its buffer full"
    if refused:
        detail += f" ({refused:,} refused by a full output buffer in the whole cell)"
    other = unsent - send_failed
    if other > 0:
        detail += f", {other:,} without any send record"
    return [
        InvalidReason(
            InvalidKind.SENDS_FAILED,
            f"{unsent:,} of {scheduled:,} scheduled messages ({100 * unsent / scheduled:.1f}%) "
            f"were never sent: {detail}",
        )
    ]


def truncation_reason(
    checks: list[RecordFileCheck], shortfalls: list[str] | None = None
) -> list[InvalidReason]:
    """A reason when record files lost data the window could not be clipped around.

    Unclosed files whose last checkpoint is known are handled by clipping the window
    (:func:`mqbench.analysis.plan.plan_cell`); a file that is missing although its sidecar
    or the manifest says it was written, missing counted records, torn records without a
    sidecar, an unclosed file without a checkpoint time, or a worker whose files hold less
    than it wrote (``shortfalls``) make it invalid: lost records are never read as loss.
    """
    bad = [
        c.describe()
        for c in checks
        if c.absent
        or c.missing
        or (c.torn_bytes and c.closed is None)
        or (c.closed is False and c.checkpoint_ns is None)
    ]
    bad += shortfalls or []
    if not bad:
        return []
    names = "; ".join(bad)
    return [InvalidReason(InvalidKind.RECORDS_TRUNCATED, f"record files truncated: {names}")]


def interrupted_reason(
    status: str, error: str | None, window_s: float, planned_s: float | None
) -> list[InvalidReason]:
    """A reason when the cell was interrupted (the window ends at the stop)."""
    if status != "interrupted":
        return []
    measured = f"{window_s:.3g} s measured"
    if planned_s is not None:
        measured += f" of the planned {planned_s:g} s"
    why = f" ({error})" if error else ""
    return [
        InvalidReason(
            InvalidKind.INTERRUPTED, f"the run was stopped during the cell{why}: {measured}"
        )
    ]
