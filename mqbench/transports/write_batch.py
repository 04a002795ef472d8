"""One event loop's queued writes, handed to the kernel together.

A ``StreamConnection`` queues each message frame instead of writing it, so that several
frames for one connection leave in one system call. The queue must still reach the socket
promptly: the message's send stamp was taken when it was queued, and every microsecond it
waits is counted as the broker's latency. A ``WriteBatch`` holds the connections of one
event loop that have frames queued and writes them all in one go:

* at the end of a publish step (``PublishLoop`` calls ``flush`` before it sleeps or
  yields), so a message leaves before the loop does any other work;
* otherwise at the end of the loop iteration (one ``call_soon`` per iteration, not one per
  connection), for frames queued outside a publish step.

Writing at the end of the step keeps callbacks already due (reads, timers) from running
between a message's stamp and its write; with the publish loop re-arming its timer only
after this flush, the Python engine's send stamp -> wire p50 fell by 24-32 % (201 to 153 µs
at 1 KiB, 10 msg/s per publisher; docs/performance.md, "The Python engine's send path").
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

Flush = Callable[[], None]


class WriteBatch:
    """The connections of one event loop with frames queued, written by ``flush``."""

    __slots__ = ("_call_soon", "_pending", "_scheduled")

    def __init__(self, call_soon: Callable[[Flush], object]) -> None:
        """``call_soon`` runs a callback at the end of the loop iteration."""
        self._call_soon = call_soon
        self._pending: list[Flush] = []
        self._scheduled = False

    def add(self, flush: Flush) -> None:
        """Queue a connection's ``flush`` (once per batch: the caller tracks that it is
        queued) and make sure the batch is written by the end of the loop iteration."""
        self._pending.append(flush)
        if not self._scheduled:
            self._scheduled = True
            self._call_soon(self._flush_later)

    def flush(self) -> None:
        """Write every queued connection now."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        for flush in pending:
            flush()

    def _flush_later(self) -> None:
        self._scheduled = False
        self.flush()


_batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WriteBatch] = (
    weakref.WeakKeyDictionary()
)


def write_batch(loop: asyncio.AbstractEventLoop) -> WriteBatch:
    """The write batch of ``loop`` (made on first use, gone with the loop)."""
    batch = _batches.get(loop)
    if batch is None:
        batch = _batches[loop] = WriteBatch(loop.call_soon)
    return batch
