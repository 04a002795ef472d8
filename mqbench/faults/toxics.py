"""Toxic types, their attributes and validation, and the per-connection shaping logic.

This module is pure (no sockets, no event loop): the proxy (``mqbench.faults.tcp``) and the
client (``mqbench.faults.client``) both validate toxics with it, and the engine calls
``validate_toxic`` before load starts so a typo fails the scenario, not the run.

Toxic semantics follow Toxiproxy 2.x (see ``docs/faults.md`` for the differences):

``latency``     ``latency`` ms + uniform(-``jitter``, +``jitter``) ms per chunk, counted from
                the chunk's arrival at the proxy; chunk order is preserved.
``bandwidth``   at most ``rate`` KB/s (1 KB = 1000 bytes); 0 = unlimited.
``timeout``     drops all data of its stream and closes the connection ``timeout`` ms after
                the toxic reaches it; 0 = hold (drop data) until the toxic is removed.
``reset_peer``  closes the connection with a TCP RST ``timeout`` ms after the toxic reaches
                it (0 = at once): existing connections when it is added, new ones on accept.
``limit_data``  lets ``bytes`` bytes of its stream through, then closes the connection.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mqbench.errors import ScenarioError

UPSTREAM = "upstream"
"""Client -> server data."""
DOWNSTREAM = "downstream"
"""Server -> client data (Toxiproxy's default stream)."""
STREAMS = (UPSTREAM, DOWNSTREAM)
"""The two streams of a proxied connection."""

MAX_ATTRIBUTE = 2**53
"""Largest attribute value accepted (exactly representable in JSON numbers)."""


class ToxicError(ScenarioError):
    """A toxic is malformed: unknown type, unknown or bad attribute, bad stream or toxicity."""


@dataclass(frozen=True)
class AttributeSpec:
    """One integer attribute of a toxic type."""

    name: str
    unit: str
    default: int
    doc: str


@dataclass(frozen=True)
class ToxicType:
    """A toxic type: its name, attributes and one-line meaning."""

    name: str
    attributes: tuple[AttributeSpec, ...]
    doc: str
    connection_level: bool = False
    """True for toxics that act on the connection by a timer (``timeout``, ``reset_peer``)."""

    def attribute(self, name: str) -> AttributeSpec | None:
        """The attribute called ``name`` (None when the type has no such attribute)."""
        for spec in self.attributes:
            if spec.name == name:
                return spec
        return None

    @property
    def attribute_names(self) -> tuple[str, ...]:
        """Names of the attributes, in declaration order."""
        return tuple(spec.name for spec in self.attributes)


TOXIC_TYPES: Mapping[str, ToxicType] = {
    t.name: t
    for t in (
        ToxicType(
            "latency",
            (
                AttributeSpec("latency", "ms", 0, "delay added to every chunk"),
                AttributeSpec("jitter", "ms", 0, "uniform +/- spread around the delay"),
            ),
            "delays data by latency +/- jitter ms, order preserved",
        ),
        ToxicType(
            "bandwidth",
            (AttributeSpec("rate", "KB/s", 0, "rate limit, 1 KB = 1000 bytes; 0 = unlimited"),),
            "limits the stream to rate KB/s",
        ),
        ToxicType(
            "timeout",
            (AttributeSpec("timeout", "ms", 0, "close after this long; 0 = never"),),
            "drops all data, closes the connection after timeout ms (0 = hold)",
            connection_level=True,
        ),
        ToxicType(
            "reset_peer",
            (AttributeSpec("timeout", "ms", 0, "reset after this long; 0 = at once"),),
            "closes the connection with a TCP RST after timeout ms",
            connection_level=True,
        ),
        ToxicType(
            "limit_data",
            (AttributeSpec("bytes", "bytes", 0, "bytes let through before closing"),),
            "closes the connection after bytes bytes of the stream",
        ),
    )
}
"""Every toxic type mqbench knows, by name."""


def known_toxic_types() -> tuple[str, ...]:
    """Names of the supported toxic types, sorted."""
    return tuple(sorted(TOXIC_TYPES))


@dataclass(frozen=True)
class Toxic:
    """A validated toxic as the Toxiproxy API describes it."""

    name: str
    type: str
    stream: str = DOWNSTREAM
    toxicity: float = 1.0
    attributes: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The API's JSON shape: ``{name, type, stream, toxicity, attributes}``."""
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }

    def attr(self, name: str) -> int:
        """An attribute's value (its default when it was not given)."""
        if name in self.attributes:
            return self.attributes[name]
        spec = TOXIC_TYPES[self.type].attribute(name)
        if spec is None:
            raise KeyError(name)
        return spec.default


def _int_attribute(toxic_type: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToxicError(
            f"toxic {toxic_type!r}: attribute {name!r} must be a whole number, got {value!r}"
        )
    if isinstance(value, float):
        if not value.is_integer():
            raise ToxicError(
                f"toxic {toxic_type!r}: attribute {name!r} must be a whole number, got {value!r}"
            )
        value = int(value)
    if value < 0 or value > MAX_ATTRIBUTE:
        raise ToxicError(
            f"toxic {toxic_type!r}: attribute {name!r} must be between 0 and {MAX_ATTRIBUTE},"
            f" got {value}"
        )
    return value


def validate_toxic(
    toxic_type: object,
    attributes: Mapping[str, object] | None = None,
    *,
    stream: object = DOWNSTREAM,
    toxicity: object = 1.0,
    name: object = None,
) -> Toxic:
    """Check a toxic's type, stream, toxicity and attributes; return it normalised.

    Attributes not given take their defaults only when the toxic runs (they are not added
    here, so the API echoes what was sent, like Toxiproxy). ``name`` defaults to
    ``<type>_<stream>``. Raises ``ToxicError`` naming the bad type, attribute or value.
    """
    if not isinstance(toxic_type, str) or toxic_type not in TOXIC_TYPES:
        raise ToxicError(
            f"unknown toxic type {toxic_type!r}; known types: {', '.join(known_toxic_types())}"
        )
    spec = TOXIC_TYPES[toxic_type]
    if stream not in STREAMS:
        raise ToxicError(
            f"toxic {toxic_type!r}: stream must be 'upstream' or 'downstream', got {stream!r}"
        )
    assert isinstance(stream, str)
    if (
        isinstance(toxicity, bool)
        or not isinstance(toxicity, int | float)
        or not 0.0 <= float(toxicity) <= 1.0
    ):
        raise ToxicError(
            f"toxic {toxic_type!r}: toxicity must be a number from 0 to 1, got {toxicity!r}"
        )
    clean: dict[str, int] = {}
    for key, value in (attributes or {}).items():
        if spec.attribute(key) is None:
            known = ", ".join(spec.attribute_names)
            raise ToxicError(
                f"toxic {toxic_type!r} has no attribute {key!r}; its attributes: {known}"
            )
        clean[key] = _int_attribute(toxic_type, key, value)
    if name is None or name == "":
        name = f"{toxic_type}_{stream}"
    if not isinstance(name, str) or "/" in name or len(name) > 200:
        raise ToxicError(f"toxic name must be a string without '/', got {name!r}")
    return Toxic(name, toxic_type, stream, float(toxicity), clean)


def toxic_from_json(data: object) -> Toxic:
    """Validate a toxic given as API JSON (``{name?, type, stream?, toxicity?, attributes?}``)."""
    if not isinstance(data, Mapping):
        raise ToxicError(f"a toxic must be a JSON object, got {type(data).__name__}")
    unknown = set(data) - {"name", "type", "stream", "toxicity", "attributes"}
    if unknown:
        raise ToxicError(f"toxic has unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    attributes = data.get("attributes", {})
    if attributes is None:
        attributes = {}
    if not isinstance(attributes, Mapping):
        raise ToxicError("toxic attributes must be a JSON object")
    return validate_toxic(
        data.get("type"),
        attributes,
        stream=data.get("stream", DOWNSTREAM),
        toxicity=data.get("toxicity", 1.0),
        name=data.get("name"),
    )


def rolls_affected(toxicity: float, rng: random.Random) -> bool:
    """Whether a connection is affected by a toxic of this ``toxicity`` (one draw)."""
    if toxicity >= 1.0:
        return True
    if toxicity <= 0.0:
        return False
    return rng.random() < toxicity


class LatencyShaper:
    """Release times for chunks under a latency toxic, order preserved.

    A chunk arriving at ``t`` is released at ``t + latency + U(-jitter, +jitter)`` (never
    before its arrival), and never before the previous chunk's release.
    """

    def __init__(self, latency_ms: int, jitter_ms: int, rng: random.Random) -> None:
        """Delay by ``latency_ms`` +/- ``jitter_ms`` using ``rng`` for the jitter."""
        self.latency_s = latency_ms / 1000.0
        self.jitter_s = jitter_ms / 1000.0
        self._rng = rng
        self._last_release = float("-inf")

    def release_at(self, arrival: float) -> float:
        """When a chunk that arrived at ``arrival`` (monotonic seconds) may be written."""
        delay = self.latency_s
        if self.jitter_s > 0:
            delay += self._rng.uniform(-self.jitter_s, self.jitter_s)
        release = max(arrival + max(delay, 0.0), self._last_release)
        self._last_release = release
        return release


class BandwidthPacer:
    """Paces writes to ``rate`` KB/s without banking idle time (no bursts after a pause).

    Data is cut into pieces of at most 20 ms at the rate; ``slot(n, now)`` says when a piece
    of ``n`` bytes may be written.
    """

    PIECE_S = 0.02
    """Largest piece, in seconds of transfer at the rate."""

    def __init__(self, rate_kbps: int) -> None:
        """Limit to ``rate_kbps`` * 1000 bytes per second (0 = unlimited)."""
        self.bytes_per_s = rate_kbps * 1000.0
        self._next = float("-inf")

    @property
    def unlimited(self) -> bool:
        """True when the rate is 0 (Toxiproxy: no limit)."""
        return self.bytes_per_s <= 0

    def pieces(self, data: bytes) -> list[bytes]:
        """``data`` cut into pieces of at most ``PIECE_S`` seconds each."""
        if self.unlimited:
            return [data]
        size = max(1, int(self.bytes_per_s * self.PIECE_S))
        return [data[i : i + size] for i in range(0, len(data), size)]

    def slot(self, nbytes: int, now: float) -> float:
        """The time at which ``nbytes`` may be written (and book the link until it is sent)."""
        if self.unlimited:
            return now
        start = max(now, self._next)
        self._next = start + nbytes / self.bytes_per_s
        return start


class LimitCounter:
    """Counts a stream's bytes under ``limit_data`` and says when to close."""

    def __init__(self, limit: int) -> None:
        """Let ``limit`` bytes through."""
        self.limit = limit
        self.passed = 0

    def take(self, data: bytes) -> tuple[bytes, bool]:
        """The part of ``data`` still allowed, and whether the connection must now close."""
        remaining = max(0, self.limit - self.passed)
        allowed = data[:remaining]
        self.passed += len(allowed)
        return allowed, self.passed >= self.limit
