"""Typed errors. Every layer raises these; only ``mqbench.cli`` turns them into exit codes."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


def names_in_one_line(names: Iterable[str]) -> str:
    """``names`` joined by commas for an error line; a name a user wrote with a newline or
    another unprintable character is shown quoted and escaped, so the error stays one line."""
    return ", ".join(name if name.isprintable() else repr(name) for name in names)


class MqbenchError(Exception):
    """Base of all expected failures: the message is shown to the user as one line."""

    exit_code = 1


class UsageError(MqbenchError):
    """The command line itself is wrong (exit code 2)."""

    exit_code = 2


class ScenarioError(MqbenchError):
    """A scenario file is malformed or asks for something impossible."""


class BrokerError(MqbenchError):
    """A broker could not be found, started, reached or stopped."""


class TransportErrorKind(Enum):
    """What kind of client failure a ``TransportError`` is: the field code decides on."""

    CONNECT_FAILED = "connect_failed"
    """No connection or handshake: refused, unreachable, timed out, login refused."""
    NOT_REUSABLE = "not_reusable"
    """This client object cannot connect (again): it is connected, or it is single-use and
    was connected once. Create a new client to connect."""
    UNSUPPORTED = "unsupported"
    """The client or its protocol cannot do what was asked (a QoS above its maximum, a
    wildcard filter, a payload above the protocol's limit, mixing roles)."""
    REJECTED = "rejected"
    """The broker refused a request (a subscription, a publish)."""
    PROTOCOL = "protocol"
    """The peer broke the protocol (malformed or unexpected data)."""
    DISCONNECTED = "disconnected"
    """The connection is down, or went down while the request waited."""
    OTHER = "other"
    """Anything else."""


class TransportError(MqbenchError):
    """A client could not connect, subscribe or publish; ``kind`` says which way."""

    def __init__(self, message: str, kind: TransportErrorKind = TransportErrorKind.OTHER):
        super().__init__(message)
        self.kind = kind


class ResultsError(MqbenchError):
    """A result folder cannot be created, read or trusted."""


class AnalysisError(MqbenchError):
    """Records could not be analysed (truncated files, wrong schema, Spark failure)."""


class ResultsWriteError(ResultsError):
    """A result file could not be written (e.g. the disk is full): the whole run stops."""

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None):
        super().__init__(message)
        self.path = path
        self.errno = errno


class CapacityError(ScenarioError):
    """The scenario asks for load that cannot fit on this machine (refused up front)."""


class ClockError(MqbenchError):
    """Load tasks' clocks are too far apart (or unmeasured) for what the cell needs."""


class LoadTaskLost(MqbenchError):
    """A distributed load task died or lost the driver mid-run (its executor died, say).

    The records it wrote so far stay; the cell and the run are marked ``interrupted``.
    """

    def __init__(self, message: str, task: int) -> None:
        super().__init__(message)
        self.task = task
