"""Helpers for the TBMQ-style broker's integration tests: an in-process broker thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mqbench.builtin_broker import Broker, BrokerConfig


class BrokerThread:
    """A broker on 127.0.0.1:<free port> in its own thread and event loop."""

    def __init__(self, **config: Any) -> None:
        self.config = BrokerConfig(port=0, **config)
        self.broker: Broker | None = None
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.broker = Broker(self.config)
            self.loop.run_until_complete(self.broker.start())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    @property
    def port(self) -> int:
        """The bound port."""
        assert self.broker is not None
        return self.broker.port

    def start(self) -> BrokerThread:
        """Start and wait (bounded) until it listens."""
        self._thread.start()
        if not self._ready.wait(30):
            raise TimeoutError("broker did not start")
        if self._error is not None:
            raise self._error
        return self

    def call(self, coro: Any, timeout_s: float = 30.0) -> Any:
        """Run a coroutine in the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        """Stop the broker and the thread."""
        if self.broker is not None and self.loop.is_running():
            self.call(self.broker.stop())
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@contextmanager
def running_broker(**config: Any) -> Iterator[BrokerThread]:
    """A started :class:`BrokerThread`, stopped on exit."""
    thread = BrokerThread(**config).start()
    try:
        yield thread
    finally:
        thread.stop()
