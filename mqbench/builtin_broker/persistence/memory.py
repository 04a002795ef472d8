"""The embedded (default) backends: the Redis design's semantics in process memory.

:class:`MemoryDeviceStore` mirrors the Lua scripts exactly: packet ids 1..65535 allocated
after ``last_packet_id``, an ordering score that keeps growing across the wrap, trimming of
the oldest messages past the limit, per-message TTL checked on fetch, a PUBREL marker. It is
inline: a batch is applied synchronously in the event loop, without a task.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from mqbench.builtin_broker.message import PUBREL_MARKER
from mqbench.builtin_broker.persistence.base import (
    Clear,
    DeviceStore,
    Fetch,
    MarkPubrel,
    Op,
    Remove,
    Save,
    validate_limit,
)


class _Client:
    __slots__ = ("last_packet_id", "messages", "score")

    def __init__(self) -> None:
        self.last_packet_id = 0
        self.score = 0
        # packet id -> [score, expires_at (monotonic s, 0: never), value]; insertion order is
        # score order because scores only grow (a re-used packet id moves to the end).
        self.messages: dict[int, list[Any]] = {}


class MemoryDeviceStore(DeviceStore):
    """DEVICE sessions in a dict (see the module docstring)."""

    name = "memory"
    inline = True

    def __init__(self, messages_limit: int = 10_000) -> None:
        """``messages_limit``: messages kept per client (1..65535)."""
        self.limit = validate_limit(messages_limit)
        self._clients: dict[str, _Client] = {}

    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Same as :meth:`execute_now`."""
        return self.execute_now(ops)

    def execute_now(self, ops: Sequence[Op]) -> list[Any]:
        """Apply the operations in order."""
        out: list[Any] = []
        for op in ops:
            if isinstance(op, Save):
                out.append(self._save(op))
            elif isinstance(op, MarkPubrel):
                out.append(self._mark_pubrel(op))
            elif isinstance(op, Remove):
                client = self._clients.get(op.client_id)
                if client is not None:
                    for pid in op.packet_ids:
                        client.messages.pop(pid, None)
                out.append(len(op.packet_ids))
            elif isinstance(op, Fetch):
                out.append(self._fetch(op.client_id))
            elif isinstance(op, Clear):
                client = self._clients.pop(op.client_id, None)
                out.append(len(client.messages) if client else 0)
            else:
                out.append(TypeError(f"device store cannot {op.kind}"))
        return out

    def _save(self, op: Save) -> list[int]:
        client = self._clients.get(op.client_id)
        if client is None:
            client = self._clients[op.client_id] = _Client()
        messages = client.messages
        now = time.monotonic()
        pids: list[int] = []
        pid = client.last_packet_id
        score = client.score if messages else 0
        for value, ttl in zip(op.messages, op.ttls, strict=True):
            pid = pid + 1 if pid < 0xFFFF else 1
            score = score + 1 if score else pid
            messages.pop(pid, None)
            messages[pid] = [score, now + ttl if ttl > 0 else 0.0, value]
            pids.append(pid)
        client.last_packet_id = pid
        client.score = score
        excess = len(messages) - self.limit
        if excess > 0:
            for old in list(messages)[:excess]:
                del messages[old]
        return pids

    def _mark_pubrel(self, op: MarkPubrel) -> int:
        client = self._clients.get(op.client_id)
        n = 0
        if client is not None:
            for pid in op.packet_ids:
                entry = client.messages.get(pid)
                if entry is not None:
                    entry[2] = PUBREL_MARKER
                    n += 1
        return n

    def _fetch(self, client_id: str) -> list[tuple[int, bytes]]:
        client = self._clients.get(client_id)
        if client is None:
            return []
        now = time.monotonic()
        out: list[tuple[int, bytes]] = []
        for pid, (_, expires, value) in list(client.messages.items()):
            if expires and now >= expires:
                del client.messages[pid]
            else:
                out.append((pid, value))
        return out

    def stored(self, client_id: str) -> int:
        """Messages currently stored for ``client_id`` (expired ones included)."""
        client = self._clients.get(client_id)
        return len(client.messages) if client else 0
