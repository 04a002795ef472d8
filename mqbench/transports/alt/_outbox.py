"""A send queue for stock clients whose publish is a coroutine.

The transport contract's sender must not await, but redis-py's and nats-py's publish calls
are coroutines. ``Outbox.put`` appends to a deque and wakes one writer task, which hands
everything queued to the library in batches (``write_batch``), in order. What the stock
client costs is then measured as it is used efficiently, without a task per message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

BATCH = 1000
"""Most messages handed to ``write_batch`` at once."""

WriteBatch = Callable[[list[tuple[str, bytes]]], Awaitable[None]]
"""Publishes ``[(topic, payload), ...]`` in order; raises when the connection failed."""


class Outbox:
    """Ordered, unbounded publish queue drained by one writer task."""

    def __init__(self, write_batch: WriteBatch, on_error: Callable[[Exception], None]) -> None:
        self._write_batch = write_batch
        self._on_error = on_error
        self._queue: deque[tuple[str, bytes]] = deque()
        self._bytes = 0
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._failed = False

    @property
    def pending_bytes(self) -> int:
        """Payload bytes queued and not yet handed to the library."""
        return self._bytes

    @property
    def failed(self) -> bool:
        """True once ``write_batch`` raised; later puts are refused."""
        return self._failed

    def start(self) -> None:
        """Start the writer task on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def put(self, topic: str, payload: bytes) -> bool:
        """Queue one publish; False after a write failure."""
        if self._failed:
            return False
        self._queue.append((topic, payload))
        self._bytes += len(payload)
        if self._idle.is_set():
            self._idle.clear()
            self._wake.set()
        return True

    async def drain(self, timeout_s: float) -> bool:
        """Wait until everything queued was handed over; False on timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Cancel the writer task (queued messages are dropped)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._queue.clear()
        self._bytes = 0
        self._idle.set()

    async def _run(self) -> None:
        queue = self._queue
        while True:
            await self._wake.wait()
            self._wake.clear()
            while queue:
                count = min(len(queue), BATCH)
                batch = [queue.popleft() for _ in range(count)]
                self._bytes -= sum(len(p) for _, p in batch)
                try:
                    await self._write_batch(batch)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._failed = True
                    queue.clear()
                    self._bytes = 0
                    self._idle.set()
                    self._on_error(exc)
                    return
            self._idle.set()
