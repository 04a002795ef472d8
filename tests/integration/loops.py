"""Event-loop helpers shared by the transport tests: run on asyncio or uvloop, poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

LOOPS = ["asyncio", "uvloop"]


def run(loop_kind: str, coro: Coroutine[Any, Any, Any], timeout_s: float = 60) -> Any:
    """Run ``coro`` on a fresh event loop of the given kind, bounded to ``timeout_s``."""
    if loop_kind == "uvloop":
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(asyncio.wait_for(coro, timeout_s))


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` every 10 ms; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.01)
