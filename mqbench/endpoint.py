"""Where a broker listens: one leaf type shared by transports, brokers, faults and the engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    """A host and TCP port on this machine's loopback (or a test host's address)."""

    host: str
    port: int
