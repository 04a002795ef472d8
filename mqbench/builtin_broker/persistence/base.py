"""Operations, backend interfaces and the ordered batching queue of the persistence layer.

Every persistence call of the broker is an *operation* object put into an :class:`OpQueue`.
The queue hands its backend all operations collected so far as one batch, only one batch at
a time, and calls each operation's callback with its result in submission order. So the
effects (and the callbacks) of the operations of one client happen in the order the broker
issued them, and a backend is free to batch: the async Redis backend pipelines a batch in
one round trip, PostgreSQL runs it in one transaction, the sync Redis backend sends it one
command at a time, the memory backend applies it inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Final

from mqbench.builtin_broker.config import MAX_MESSAGES_LIMIT

log = logging.getLogger("mqbench.builtin_broker")

Callback = Callable[[Any], None]


class Op:
    """A persistence operation; ``callback(result)`` runs when its batch completes."""

    __slots__ = ("callback", "client_id")
    kind: str = ""

    def __init__(self, client_id: str, callback: Callback | None = None) -> None:
        self.client_id = client_id
        self.callback = callback


class Save(Op):
    """SAVE: store messages for a DEVICE client; result: the packet ids allocated."""

    __slots__ = ("messages", "ttls")
    kind = "save"

    def __init__(
        self,
        client_id: str,
        messages: list[bytes],
        ttls: list[int],
        callback: Callback | None = None,
    ) -> None:
        super().__init__(client_id, callback)
        self.messages = messages
        self.ttls = ttls


class Fetch(Op):
    """FETCH: the client's stored messages in order; result: list of (packet id, bytes)."""

    __slots__ = ()
    kind = "fetch"


class Remove(Op):
    """REMOVE: forget delivered messages (PUBACK or PUBCOMP received)."""

    __slots__ = ("packet_ids",)
    kind = "remove"

    def __init__(
        self, client_id: str, packet_ids: list[int], callback: Callback | None = None
    ) -> None:
        super().__init__(client_id, callback)
        self.packet_ids = packet_ids


class MarkPubrel(Remove):
    """MARK_PUBREL: a QoS 2 message got PUBREC; only its PUBREL is left to deliver."""

    __slots__ = ()
    kind = "pubrel"


class Clear(Op):
    """CLEAR: drop everything of the client (clean start, session expiry)."""

    __slots__ = ()
    kind = "clear"


class Append(Op):
    """APPEND to an APPLICATION queue; result: the entry id (str)."""

    __slots__ = ("message",)
    kind = "append"

    def __init__(self, client_id: str, message: bytes, callback: Callback | None = None) -> None:
        super().__init__(client_id, callback)
        self.message = message


class Read(Op):
    """READ an APPLICATION queue from its start; result: list of (entry id, bytes)."""

    __slots__ = ()
    kind = "read"


class Ack(Op):
    """ACK: remove delivered entries from an APPLICATION queue."""

    __slots__ = ("entry_ids",)
    kind = "ack"

    def __init__(
        self, client_id: str, entry_ids: list[str], callback: Callback | None = None
    ) -> None:
        super().__init__(client_id, callback)
        self.entry_ids = entry_ids


def allocated_ids(previous: int, count: int) -> list[int]:
    """Packet ids following ``previous`` (1..65535, wrapping past 65535 to 1)."""
    return [(previous + k) % 0xFFFF + 1 for k in range(count)]


def validate_limit(limit: int) -> int:
    """Return ``limit``; ValueError when outside 1..65535 (the packet-id range)."""
    if not 0 < limit <= MAX_MESSAGES_LIMIT:
        raise ValueError(f"Persisted messages limit can't be greater than 65535! (got {limit})")
    return limit


class Backend(ABC):
    """Something an :class:`OpQueue` can hand batches of operations to."""

    name: str = ""
    inline: bool = False
    """True: ``execute_now`` applies a batch synchronously (no task, no await)."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect; load scripts or create tables."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    @abstractmethod
    async def execute(self, ops: Sequence[Op]) -> list[Any]:
        """Apply ``ops`` in order; return one result per operation.

        A failed operation's result is the exception (the others still run).
        """

    def execute_now(self, ops: Sequence[Op]) -> list[Any]:
        """Synchronous ``execute`` for inline backends."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """Facts for logs and manifests."""
        return {"name": self.name}


class DeviceStore(Backend):
    """Stores DEVICE sessions' undelivered messages (Save, Fetch, Remove, MarkPubrel, Clear)."""


class AppQueue(Backend):
    """Ordered per-client APPLICATION queues (Append, Read, Ack, Clear)."""


MAX_BATCH: Final = 4096
"""Operations handed to a backend at once (bounds a batch's latency and memory)."""


class OpQueue:
    """Ordered, batching front of one backend (see the module docstring)."""

    def __init__(self, backend: Backend, on_batch_done: Callable[[], None] | None = None) -> None:
        """``on_batch_done`` runs after the callbacks of each batch (e.g. flush socket writes)."""
        self.backend = backend
        self._pending: list[Op] = []
        self._on_batch_done = on_batch_done
        self._scheduled = False
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._running = False
        self.batches = 0
        self.operations = 0
        self.errors = 0

    @property
    def pending(self) -> int:
        """Operations submitted and not yet handed to the backend."""
        return len(self._pending)

    def start(self) -> None:
        """Start the worker task (async backends)."""
        if not self.backend.inline and self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._worker())

    def submit(self, op: Op) -> None:
        """Queue ``op``; it runs in the next batch."""
        self._pending.append(op)
        if self.backend.inline:
            if not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._run_inline)
        elif self._wake is not None:
            self._wake.set()

    def _run_inline(self) -> None:
        self._scheduled = False
        while self._pending:
            batch, self._pending = self._pending, []
            self._finish(batch, self.backend.execute_now(batch))

    def _finish(self, batch: Sequence[Op], results: Sequence[Any]) -> None:
        self.batches += 1
        self.operations += len(batch)
        for op, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                self.errors += 1
                log.error(
                    "%s %s for %r failed: %s", self.backend.name, op.kind, op.client_id, result
                )
                result = None
            if op.callback is not None:
                try:
                    op.callback(result)
                except Exception:  # a broken callback must not stop the queue
                    log.exception("persistence callback of %s %r failed", op.kind, op.client_id)
        if self._on_batch_done is not None:
            self._on_batch_done()

    async def _worker(self) -> None:
        assert self._wake is not None
        wake = self._wake
        while True:
            if not self._pending:
                if self._closing:
                    return
                wake.clear()
                await wake.wait()
                continue
            batch = self._pending[:MAX_BATCH]
            del self._pending[:MAX_BATCH]
            self._running = True
            try:
                results = await self.backend.execute(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the whole batch failed (connection lost, ...)
                results = [exc] * len(batch)
            finally:
                self._running = False
            self._finish(batch, results)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Wait until everything submitted so far has been applied (bounded)."""
        if self.backend.inline:
            self._run_inline()
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (self._pending or self._running) and loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Apply what is pending (bounded by ``timeout_s``), stop the worker, close the backend."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
            self._task = None
        elif self.backend.inline:
            self._run_inline()
        await self.backend.close()
