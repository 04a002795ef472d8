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
