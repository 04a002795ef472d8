"""Waiting for an asyncio transport's write buffer to empty (the MQTT and AMQP clients)."""

from __future__ import annotations

import asyncio
import contextlib


async def drain_write_buffer(
    transport: asyncio.Transport, waiter: asyncio.Future[None], high: int
) -> None:
    """Return once ``transport`` has written everything it buffered.

    With a zero high-water mark the transport pauses the protocol at once and calls its
    ``resume_writing()`` when the buffer is empty; the protocol resolves ``waiter`` there.
    The buffer size is re-checked every 50 ms for a transport that never paused. The
    caller bounds the wait (``asyncio.timeout``); ``high`` is restored afterwards.
    """
    try:
        transport.set_write_buffer_limits(high=0, low=0)
        while not waiter.done() and transport.get_write_buffer_size() > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), 0.05)
    finally:
        if not transport.is_closing():
            transport.set_write_buffer_limits(high=high)
