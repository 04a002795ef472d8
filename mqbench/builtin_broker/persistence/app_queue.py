"""APPLICATION client queues: one ordered queue per client, delivered on (re)connect.

TBMQ gives every persistent APPLICATION client its own Kafka topic. Here:

:class:`MemoryAppQueue`
    an insertion-ordered dict per client (inline, like the memory device store).
:class:`RedisStreamsAppQueue`
    one Redis stream per client, key ``{id}_app_queue`` (same hash-tag scheme as the
    device store): APPEND is ``XADD ... MAXLEN ~ limit``, READ ``XRANGE - +``, ACK ``XDEL``,
    CLEAR ``DEL``; a batch is one pipeline on ``redis.asyncio``.

Entries stay until acknowledged (PUBACK, or PUBREC for QoS 2), so a client that goes away
gets them again, in order, when it reconnects.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from mqbench.builtin_broker.persistence.base import Ack, Append, AppQueue, Clear, Op, Read
from mqbench.errors import BrokerError


def stream_key(client_id: str) -> str:
    """``{id}_app_queue``: the client's stream."""
    return "{" + client_id + "}_app_queue"


class MemoryAppQueue(AppQueue):
    """Per-client ordered dicts (see the module docstring)."""

    name = "memory"
    inline = True

    def __init__(self, limit: int = 100_000) -> None:
        """``limit``: entries kept per client (oldest dropped past it)."""
        self.limit = limit
        self._queues: dict[str, dict[str, bytes]] = {}
        self._ids = itertools.count(1)

    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Same as :meth:`execute_now`."""
        return self.execute_now(ops)

    def execute_now(self, ops: Sequence[Op]) -> list[Any]:
        """Apply the operations in order."""
        out: list[Any] = []
        for op in ops:
            queue = self._queues.get(op.client_id)
            if isinstance(op, Append):
                if queue is None:
                    queue = self._queues[op.client_id] = {}
                entry = f"{next(self._ids)}-0"
                queue[entry] = op.message
                if len(queue) > self.limit:
                    del queue[next(iter(queue))]
                out.append(entry)
            elif isinstance(op, Read):
                out.append(list(queue.items()) if queue else [])
            elif isinstance(op, Ack):
                if queue is not None:
                    for entry in op.entry_ids:
                        queue.pop(entry, None)
                out.append(len(op.entry_ids))
            elif isinstance(op, Clear):
                self._queues.pop(op.client_id, None)
                out.append(1)
            else:
                out.append(TypeError(f"app queue cannot {op.kind}"))
        return out


class RedisStreamsAppQueue(AppQueue):
    """Redis Streams, pipelined (see the module docstring)."""

    name = "redis-streams"

    def __init__(self, url: str, limit: int = 100_000) -> None:
        """``url``: e.g. ``redis://127.0.0.1:6379/0``."""
        self.url = url
        self.limit = limit
        self._client: Any = None

    def describe(self) -> dict[str, Any]:
        """Facts for logs and manifests."""
        return {"name": self.name, "url": self.url, "limit": self.limit}

    async def start(self) -> None:
        """Connect."""
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        self._client = aioredis.Redis.from_url(self.url, single_connection_client=True)
        try:
            await self._client.ping()
        except (RedisError, OSError) as exc:
            await self.close()
            raise BrokerError(f"cannot use Redis at {self.url}: {exc}") from None

    async def close(self) -> None:
        """Close the connection."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """One pipeline for the batch."""
        pipe = self._client.pipeline(transaction=False)
        for op in ops:
            key = stream_key(op.client_id)
            if isinstance(op, Append):
                pipe.xadd(key, {"m": op.message}, maxlen=self.limit, approximate=True)
            elif isinstance(op, Read):
                pipe.xrange(key, "-", "+")
            elif isinstance(op, Ack):
                if op.entry_ids:
                    pipe.xdel(key, *op.entry_ids)
                else:
                    pipe.exists(key)
            elif isinstance(op, Clear):
                pipe.delete(key)
            else:
                raise TypeError(f"app queue cannot {op.kind}")
        replies = await pipe.execute(raise_on_error=False)
        out: list[Any] = []
        for op, reply in zip(ops, replies, strict=True):
            if isinstance(reply, BaseException):
                out.append(reply)
            elif isinstance(op, Append):
                out.append(reply.decode() if isinstance(reply, bytes) else str(reply))
            elif isinstance(op, Read):
                out.append(
                    [
                        (eid.decode() if isinstance(eid, bytes) else str(eid), bytes(f[b"m"]))
                        for eid, f in reply
                    ]
                )
            else:
                out.append(int(reply))
        return out
