"""Typed reads of a cell's parameters.

A cell's ``params`` (docs/results.md, ``cells[].params``) are stored as the engine wrote
them: ``Cell.params()`` plus the protocol, transport, runtime, worker count, layout and
fault type of the run. The manifest entry, the summary and the repeat aggregate keep that
mapping as it is (the compare gate and the summary tables list every key); code that needs
one parameter reads it through :class:`CellParams`, never by key: a value of the wrong type
is one :class:`CellParamsError` naming the cell and the key, an absent one is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqbench.errors import ResultsError


class CellParamsError(ResultsError):
    """A cell parameter of the wrong type (names the cell and the key)."""


@dataclass(frozen=True)
class CellParams:
    """The parameters of one cell, read by name with their types."""

    data: Mapping[str, Any]
    """The stored mapping (``cells[].params``)."""
    cell: str = "?"
    """The cell's id, named in errors."""

    # -- the matrix ---------------------------------------------------------------------

    @property
    def scenario(self) -> str | None:
        """The scenario's name (set only where runs of several scenarios are pooled)."""
        return self._text("scenario")

    @property
    def target(self) -> str | None:
        """The broker target (``nats``, ``docker:emqx``)."""
        return self._text("target")

    @property
    def topology(self) -> str | None:
        """The topology's name (``pairs``, ``fanout``, ...)."""
        return self._text("topology")

    @property
    def client(self) -> str | None:
        """The client implementation chosen by the scenario (None: the lean client)."""
        return self._text("client")

    @property
    def resources(self) -> str | None:
        """The resource profile's name."""
        return self._text("resources")

    @property
    def broker_options(self) -> Mapping[str, Any] | None:
        """The broker option variant of this cell (secrets redacted)."""
        value = self.data.get("broker_options")
        if value is None or isinstance(value, Mapping):
            return value
        raise CellParamsError(f"cell {self.cell}: params.broker_options is not an object")

    @property
    def faults(self) -> Any:
        """The run's fault schedule as recorded: its type, or an older manifest's object."""
        return self.data.get("faults")

    @property
    def rate(self) -> float | None:
        """Messages per second of each publisher."""
        return self._float("rate")

    @property
    def payload_bytes(self) -> int | None:
        """Payload size in bytes."""
        return self._int("payload_bytes")

    @property
    def qos(self) -> int | None:
        """The QoS level."""
        return self._int("qos")

    @property
    def pairs(self) -> int | None:
        """Publisher-subscriber pairs (``pairs``/``p2p``; other topologies record 1)."""
        return self._int("pairs")

    @property
    def publishers(self) -> int | None:
        """Publishing clients."""
        return self._int("publishers")

    @property
    def subscribers(self) -> int | None:
        """Subscribing clients."""
        return self._int("subscribers")

    # -- time and the engine ------------------------------------------------------------

    @property
    def warmup_s(self) -> float | None:
        """Warm-up before the measured window, in seconds."""
        return self._float("warmup_s")

    @property
    def duration_s(self) -> float | None:
        """The measured duration, in seconds."""
        return self._float("duration_s")

    @property
    def drain_s(self) -> float | None:
        """How long subscribers kept receiving after publishing stopped, in seconds."""
        return self._float("drain_s")

    @property
    def workers(self) -> int | None:
        """Worker processes of the load generator."""
        return self._int("workers")

    # -- readers ------------------------------------------------------------------------

    def _text(self, key: str) -> str | None:
        value = self.data.get(key)
        return None if value is None else str(value)

    def _float(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise self._not_a_number(key, value)
        try:
            return float(value)
        except ValueError:
            raise self._not_a_number(key, value) from None

    def _int(self, key: str) -> int | None:
        number = self._float(key)
        if number is None:
            return None
        if not number.is_integer():
            raise CellParamsError(
                f"cell {self.cell}: params.{key} {self.data[key]!r} is not a whole number"
            )
        return int(number)

    def _not_a_number(self, key: str, value: Any) -> CellParamsError:
        return CellParamsError(f"cell {self.cell}: params.{key} {value!r} is not a number")
