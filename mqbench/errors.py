"""Typed errors. Every layer raises these; only ``mqbench.cli`` turns them into exit codes."""

from __future__ import annotations


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


class TransportError(MqbenchError):
    """A client could not connect, subscribe or publish."""


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
