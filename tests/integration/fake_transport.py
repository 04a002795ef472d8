"""An in-process fake broker with deterministic drops, loaded as the plugin client
``fake_transport:DroppingTransport`` by worker processes (tests only).

Every client of one worker process shares one routing table, so scenarios using it keep
publishers and subscribers in one process (``generator.layout: shared``). A message from
publisher ``pub`` with sequence ``seq`` is dropped for subscriber ``sub`` when
``(seq + pub) % DROP_MODULUS == sub % DROP_MODULUS``, so tests know every drop exactly.
"""

from __future__ import annotations

import time
from typing import Any

from mqbench.endpoint import Endpoint
from mqbench.records.format import HEADER
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    ClientStats,
    MessageHandler,
    Sender,
    TransportCapabilities,
)
from mqbench.wire.topics import topic_matches

DROP_MODULUS = 7

_SUBSCRIPTIONS: list[tuple[str, int, MessageHandler]] = []


def sub_index(client_id: str) -> int:
    """Subscriber index from mqbench's client ids (``...s<index>``)."""
    return int(client_id.rsplit("s", 1)[1])


def dropped(pub: int, seq: int, sub: int) -> bool:
    """Whether the fake broker drops ``(pub, seq)`` on its way to ``sub``."""
    return (seq + pub) % DROP_MODULUS == sub % DROP_MODULUS


class FakeClient:
    """A client of the in-process fake broker."""

    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self._connected = False

    @property
    def connected(self) -> bool:
        return self._connected

    async def connect(self) -> None:
        self._connected = True

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        _SUBSCRIPTIONS.append((topic, sub_index(self.options.client_id), on_message))

    def sender(self, topic: str, qos: int) -> Sender:
        targets = [(s, h) for f, s, h in _SUBSCRIPTIONS if topic_matches(f, topic)]

        def send(payload: bytes, tag: int) -> bool:
            if not self._connected:
                return False
            pub, seq, _, _ = HEADER.unpack_from(payload)
            now = time.time_ns()
            for sub, handler in targets:
                if not dropped(pub, seq, sub):
                    handler(payload, now)
            return True

        return send

    def set_ack_handler(self, handler: AckHandler) -> None:
        pass

    def pending_write_bytes(self) -> int:
        return 0

    async def flush(self, timeout_s: float) -> None:
        pass

    async def close(self) -> None:
        self._connected = False

    def stats(self) -> ClientStats:
        return ClientStats()


class DroppingTransport:
    """Transport factory for the fake broker."""

    name = "fake"
    protocol = "mqtt"
    capabilities = TransportCapabilities(
        max_qos=0, persistent_sessions=False, wildcard_filters=True
    )

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> Any:
        return FakeClient(options)
