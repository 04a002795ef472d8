"""Toxic types, their attributes and validation, and the per-connection shaping logic.

This module is pure (no sockets, no event loop): the proxy (``mqbench.faults.tcp`` and
``mqbench.faults.pipeline``) and the client (``mqbench.faults.client``) both validate toxics
with it, and the engine calls ``validate_toxic`` before load starts so a typo fails the
scenario, not the run.

Toxic semantics follow Toxiproxy 2.12.0 (see ``docs/faults.md`` for the differences). Each
toxic is one stage of its stream's pipeline, in the order the toxics were added:

``latency``     sleeps ``latency`` ms + a whole-ms jitter in ``[-jitter, jitter)`` minus the
                time since the chunk's timestamp, then advances the timestamp by that sleep
                (``latency_step``); two latency toxics on a stream add up.
``bandwidth``   at most ``rate`` KB/s (1 KB = 1000 bytes); 0 = unlimited.
``slow_close``  passes data; when its stream ends, passes the end on ``delay`` ms later.
``noop``        passes everything unchanged.
``timeout``     drops all data of its stream and closes the connection ``timeout`` ms after
                the toxic reaches it; 0 = hold (drop data) until the toxic is removed.
``reset_peer``  closes the connection with a TCP RST ``timeout`` ms after the toxic reaches
                it (0 = at once): existing connections when it is added, new ones on accept.
``limit_data``  lets ``bytes`` bytes of its stream through, then closes the connection.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mqbench.errors import ScenarioError

UPSTREAM = "upstream"
"""Client -> server data."""
DOWNSTREAM = "downstream"
"""Server -> client data (Toxiproxy's default stream)."""
STREAMS = (UPSTREAM, DOWNSTREAM)
"""The two streams of a proxied connection, in the order Toxiproxy lists their toxics."""

MAX_ATTRIBUTE = 2**53
"""Largest attribute value accepted (exactly representable in JSON numbers)."""

ToxicProblem = Literal["type", "stream", "toxicity", "name", "attribute", "body"]
"""What is wrong with a rejected toxic (``ToxicError.problem``)."""


class ToxicError(ScenarioError):
    """A toxic is malformed; ``problem`` says which part (the API maps it to its answer)."""

    def __init__(self, message: str, problem: ToxicProblem = "body") -> None:
        """Reject a toxic with a one-line ``message``."""
        super().__init__(message)
        self.problem: ToxicProblem = problem


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
        """Names of the attributes, in declaration order (Toxiproxy's JSON order)."""
        return tuple(spec.name for spec in self.attributes)


TOXIC_TYPES: Mapping[str, ToxicType] = {
    t.name: t
    for t in (
        ToxicType(
            "latency",
            (
                AttributeSpec("latency", "ms", 0, "delay added to every chunk"),
                AttributeSpec("jitter", "ms", 0, "whole-ms spread in [-jitter, jitter)"),
            ),
            "delays every chunk by latency +/- jitter ms, order preserved",
        ),
        ToxicType(
            "bandwidth",
            (AttributeSpec("rate", "KB/s", 0, "rate limit, 1 KB = 1000 bytes; 0 = unlimited"),),
            "limits the stream to rate KB/s",
        ),
        ToxicType(
            "slow_close",
            (AttributeSpec("delay", "ms", 0, "how long the end of the stream is held"),),
            "passes data; the end of the stream (the close) goes on delay ms later",
        ),
        ToxicType("noop", (), "passes everything unchanged"),
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


def go_float32(value: float) -> float | int:
    """``value`` as Go's JSON encoder writes a ``float32``: shortest digits, ``1`` not ``1.0``.

    Toxiproxy keeps ``toxicity`` as a float32, so 0.1 is stored as 0.100000001 and written
    back as ``0.1``; the returned number serialises (``json.dumps``) to the same text.
    """
    single: float = struct.unpack("f", struct.pack("f", value))[0]
    if single.is_integer():
        return int(single)
    for digits in range(1, 10):
        text = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            return float(text)
    return single


@dataclass(frozen=True)
class Toxic:
    """A validated toxic as the Toxiproxy API describes it (every attribute present)."""

    name: str
    type: str
    stream: str = DOWNSTREAM
    toxicity: float = 1.0
    attributes: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Toxiproxy's JSON shape and key order: ``{attributes, name, type, stream, toxicity}``.

        Attributes a type does not define (a toxic read back from a real Toxiproxy with a
        type mqbench does not know) are written as they were read.
        """
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": go_float32(self.toxicity),
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
            f"toxic {toxic_type!r}: attribute {name!r} must be a whole number, got {value!r}",
            "attribute",
        )
    if isinstance(value, float):
        if not value.is_integer():
            raise ToxicError(
                f"toxic {toxic_type!r}: attribute {name!r} must be a whole number, got {value!r}",
                "attribute",
            )
        value = int(value)
    if value < 0 or value > MAX_ATTRIBUTE:
        raise ToxicError(
            f"toxic {toxic_type!r}: attribute {name!r} must be between 0 and {MAX_ATTRIBUTE},"
            f" got {value}",
            "attribute",
        )
    return value


def check_stream(stream: object, toxic_type: object = None) -> str:
    """``stream`` if it is ``upstream`` or ``downstream``; ``ToxicError`` (stream) if not."""
    if stream not in STREAMS:
        what = f"toxic {toxic_type!r}: " if toxic_type is not None else ""
        raise ToxicError(
            f"{what}stream must be 'upstream' or 'downstream', got {stream!r}", "stream"
        )
    assert isinstance(stream, str)
    return stream


def check_type(toxic_type: object) -> ToxicType:
    """The ``ToxicType`` called ``toxic_type``; ``ToxicError`` (type) naming the known ones."""
    if not isinstance(toxic_type, str) or toxic_type not in TOXIC_TYPES:
        raise ToxicError(
            f"unknown toxic type {toxic_type!r}; known types: {', '.join(known_toxic_types())}",
            "type",
        )
    return TOXIC_TYPES[toxic_type]


def validate_toxic(
    toxic_type: object,
    attributes: Mapping[str, object] | None = None,
    *,
    stream: object = DOWNSTREAM,
    toxicity: object = 1.0,
    name: object = None,
) -> Toxic:
    """Check a toxic's type, stream, toxicity and attributes; return it normalised.

    Every attribute of the type is present in the result, those not given at their
    defaults (as Toxiproxy answers a toxic creation). ``name`` defaults to
    ``<type>_<stream>``. Raises ``ToxicError`` naming the bad type, attribute or value.
    """
    spec = check_type(toxic_type)
    stream = check_stream(stream, toxic_type)
    if (
        isinstance(toxicity, bool)
        or not isinstance(toxicity, int | float)
        or not 0.0 <= float(toxicity) <= 1.0
    ):
        raise ToxicError(
            f"toxic {toxic_type!r}: toxicity must be a number from 0 to 1, got {toxicity!r}",
            "toxicity",
        )
    given = dict(attributes or {})
    for key in given:
        if spec.attribute(key) is None:
            known = ", ".join(spec.attribute_names) or "none"
            raise ToxicError(
                f"toxic {spec.name!r} has no attribute {key!r}; its attributes: {known}",
                "attribute",
            )
    clean = {
        a.name: _int_attribute(spec.name, a.name, given[a.name]) if a.name in given else a.default
        for a in spec.attributes
    }
    if name is None or name == "":
        name = f"{spec.name}_{stream}"
    if not isinstance(name, str) or "/" in name or len(name) > 200:
        raise ToxicError(f"toxic name must be a string without '/', got {name!r}", "name")
    return Toxic(name, spec.name, stream, float(toxicity), clean)


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
        raise ToxicError("toxic attributes must be a JSON object", "attribute")
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


class LatencyDraw:
    """Toxiproxy's per-chunk delay: ``latency`` ms plus a jitter drawn in whole ms.

    The jitter term is ``randrange(2 * jitter) - jitter``, i.e. uniform over the integers
    ``-jitter .. jitter - 1`` (Toxiproxy's ``rand.Int63n(jitter*2) - jitter``), so a delay
    can be negative when ``jitter > latency``; it is then no delay at all.
    """

    def __init__(self, latency_ms: int, jitter_ms: int, rng: random.Random) -> None:
        """Draw delays of ``latency_ms`` +/- ``jitter_ms`` with ``rng``."""
        self.latency_ms = latency_ms
        self.jitter_ms = jitter_ms
        self._rng = rng

    def delay_s(self) -> float:
        """One chunk's delay, in seconds."""
        delay = self.latency_ms
        if self.jitter_ms > 0:
            delay += self._rng.randrange(2 * self.jitter_ms) - self.jitter_ms
        return delay / 1000.0


def latency_step(delay_s: float, stamp: float, now: float) -> tuple[float, float]:
    """One latency stage on one chunk: ``(sleep, new_stamp)``, as Toxiproxy computes them.

    ``stamp`` is the chunk's timestamp (set when it was read from the socket, advanced by
    every latency stage before this one). The stage sleeps ``delay - (now - stamp)`` (not at
    all when that is negative: time the chunk already waited counts) and advances the stamp
    by exactly that amount, negative or not. For a lone chunk the delays of a chain add up;
    a chunk that queued behind others in an earlier stage carries less of the wait forward.
    """
    sleep = delay_s - (now - stamp)
    return sleep, stamp + sleep


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
