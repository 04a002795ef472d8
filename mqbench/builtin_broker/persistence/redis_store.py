"""The Redis device stores: the TBMQ key scheme and Lua scripts, called by SHA.

Both load the five scripts once (``SCRIPT LOAD``) and call them with ``EVALSHA``; a
``NOSCRIPT`` reply (Redis restarted or ``SCRIPT FLUSH``) reloads them and retries.

What "async" and "sync" mean here (the TBMQ papers' Lettuce vs Jedis):

:class:`AsyncRedisDeviceStore` (``redis-async``)
    redis-py's asyncio client (``redis.asyncio``). The broker's operation queue hands it a
    batch of everything submitted since the last batch left; the batch goes out as one
    pipeline (one write, one round trip, no MULTI) while the event loop keeps serving
    MQTT connections. Consecutive SAVEs of one client in a batch become one EVALSHA.
:class:`SyncRedisDeviceStore` (``redis-sync``)
    redis-py's synchronous client (``redis.Redis``) on one connection in one worker
    thread: every script call is a blocking request/response; the next command is sent
    only after the previous reply arrived (no pipelining, no merging). The event loop
    waits for the thread only through a future, so MQTT I/O continues, but persistence
    throughput is bounded by one round trip (plus the script's run time) per operation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

from mqbench.builtin_broker.persistence.base import (
    Clear,
    DeviceStore,
    Fetch,
    MarkPubrel,
    Op,
    Remove,
    Save,
    allocated_ids,
    validate_limit,
)
from mqbench.builtin_broker.persistence.lua import (
    SCRIPTS,
    last_packet_id_key,
    messages_key,
)
from mqbench.errors import BrokerError

Call = tuple[str, list[str], list[Any]]
"""(script name, keys, args) of one EVALSHA."""


def _pid_of(key: bytes) -> int:
    return int(key.rsplit(b"_", 1)[1])


def plan_calls(ops: Sequence[Op], limit: int, merge: bool) -> tuple[list[Call], list[list[int]]]:
    """Script calls for ``ops`` and, per op, which calls hold its part.

    With ``merge``, consecutive SAVEs of one client become one call (same order of packet
    ids, so the same result). Returns ``(calls, parts)``: ``parts[i]`` lists the indices of
    the calls of ``ops[i]``.
    """
    calls: list[Call] = []
    parts: list[list[int]] = []
    last_save: dict[str, int] = {}
    for op in ops:
        cid = op.client_id
        if isinstance(op, Save):
            k = last_save.get(cid) if merge else None
            if k is not None:
                args = calls[k][2]
            else:
                k = len(calls)
                args = [limit]
                calls.append(("SAVE", [messages_key(cid), last_packet_id_key(cid)], args))
                if merge:
                    last_save[cid] = k
            for value, ttl in zip(op.messages, op.ttls, strict=True):
                args.append(ttl)
                args.append(value)
            parts.append([k])
            continue
        # Any other operation of the client ends its run of SAVEs.
        last_save.pop(cid, None)
        if isinstance(op, MarkPubrel):
            calls.append(("MARK_PUBREL", [messages_key(cid)], list(op.packet_ids)))
        elif isinstance(op, Remove):
            calls.append(("REMOVE", [messages_key(cid)], list(op.packet_ids)))
        elif isinstance(op, Fetch):
            calls.append(("FETCH", [messages_key(cid)], []))
        elif isinstance(op, Clear):
            calls.append(("CLEAR", [messages_key(cid), last_packet_id_key(cid)], []))
        else:
            raise TypeError(f"redis device store cannot {op.kind}")
        parts.append([len(calls) - 1])
    return calls, parts


def collect_results(
    ops: Sequence[Op], calls: list[Call], parts: list[list[int]], replies: list[Any]
) -> list[Any]:
    """Turn script replies into one result per operation (see :class:`Backend`)."""
    out: list[Any] = []
    # Where the next allocated id of a merged SAVE call starts.
    used: dict[int, int] = {}
    for op, idx in zip(ops, parts, strict=True):
        k = idx[0]
        reply = replies[k]
        if isinstance(reply, BaseException):
            out.append(reply)
            continue
        if isinstance(op, Save):
            offset = used.get(k, 0)
            used[k] = offset + len(op.messages)
            out.append(allocated_ids(int(reply) + offset, len(op.messages)))
        elif isinstance(op, Fetch):
            items = list(reply)
            out.append([(_pid_of(items[i]), bytes(items[i + 1])) for i in range(0, len(items), 2)])
        else:
            out.append(int(reply))
    return out


class _RedisStore(DeviceStore):
    def __init__(self, url: str, messages_limit: int) -> None:
        self.url = url
        self.limit = validate_limit(messages_limit)
        self.shas: dict[str, str] = {}
        self.reloads = 0

    def describe(self) -> dict[str, Any]:
        """Facts for logs and manifests."""
        return {"name": self.name, "url": self.url, "messages_limit": self.limit}


class AsyncRedisDeviceStore(_RedisStore):
    """``redis-async``: pipelined batches on ``redis.asyncio`` (see the module docstring)."""

    name = "redis-async"

    def __init__(self, url: str, messages_limit: int = 10_000) -> None:
        """``url``: e.g. ``redis://127.0.0.1:6379/0``."""
        super().__init__(url, messages_limit)
        self._client: Any = None

    async def start(self) -> None:
        """Connect and load the scripts."""
        import redis.asyncio as aioredis
        from redis.exceptions import RedisError

        self._client = aioredis.Redis.from_url(self.url, single_connection_client=True)
        try:
            await self._load()
        except (RedisError, OSError) as exc:
            await self.close()
            raise BrokerError(f"cannot use Redis at {self.url}: {exc}") from None

    async def _load(self) -> None:
        for name, source in SCRIPTS.items():
            self.shas[name] = str(await self._client.script_load(source))

    async def close(self) -> None:
        """Close the connection."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """One pipeline for the whole batch; NOSCRIPT reloads the scripts and retries."""
        from redis.exceptions import NoScriptError

        calls, parts = plan_calls(ops, self.limit, merge=True)
        replies = await self._run(calls)
        if any(isinstance(r, NoScriptError) for r in replies):
            self.reloads += 1
            await self._load()
            redo = [k for k, r in enumerate(replies) if isinstance(r, NoScriptError)]
            again = await self._run([calls[k] for k in redo])
            for k, reply in zip(redo, again, strict=True):
                replies[k] = reply
        return collect_results(ops, calls, parts, replies)

    async def _run(self, calls: list[Call]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        shas = self.shas
        for name, keys, args in calls:
            pipe.evalsha(shas[name], len(keys), *keys, *args)
        return list(await pipe.execute(raise_on_error=False))


class SyncRedisDeviceStore(_RedisStore):
    """``redis-sync``: one blocking command at a time in one thread (module docstring)."""

    name = "redis-sync"

    def __init__(self, url: str, messages_limit: int = 10_000) -> None:
        """``url``: e.g. ``redis://127.0.0.1:6379/0``."""
        super().__init__(url, messages_limit)
        self._client: Any = None
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="redis-sync"
        )

    async def start(self) -> None:
        """Connect (in the worker thread) and load the scripts."""
        import redis
        from redis.exceptions import RedisError

        def connect() -> None:
            self._client = redis.Redis.from_url(self.url, single_connection_client=True)
            self._load()

        try:
            await asyncio.get_running_loop().run_in_executor(self._thread, connect)
        except (RedisError, OSError) as exc:
            await self.close()
            raise BrokerError(f"cannot use Redis at {self.url}: {exc}") from None

    def _load(self) -> None:
        for name, source in SCRIPTS.items():
            self.shas[name] = str(self._client.script_load(source))

    async def close(self) -> None:
        """Close the connection and stop the thread."""
        client, self._client = self._client, None
        loop = asyncio.get_running_loop()
        if client is not None:
            await loop.run_in_executor(self._thread, client.close)
        self._thread.shutdown(wait=False)

    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Run the batch in the worker thread, one EVALSHA round trip per operation."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._execute_blocking, ops)

    def _execute_blocking(self, ops: Sequence[Op]) -> list[Any]:
        from redis.exceptions import NoScriptError, RedisError

        calls, parts = plan_calls(ops, self.limit, merge=False)
        replies: list[Any] = []
        client = self._client
        for name, keys, args in calls:
            try:
                try:
                    reply = client.evalsha(self.shas[name], len(keys), *keys, *args)
                except NoScriptError:
                    self.reloads += 1
                    self._load()
                    reply = client.evalsha(self.shas[name], len(keys), *keys, *args)
            except (RedisError, OSError) as exc:
                reply = exc
            replies.append(reply)
        return collect_results(ops, calls, parts, replies)
