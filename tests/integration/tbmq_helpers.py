"""Helpers for the TBMQ-style broker's integration tests: an in-process broker thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mqbench.builtin_broker import Broker, BrokerConfig


class BrokerThread:
    """A broker on 127.0.0.1:<free port> in its own thread and event loop.

    The thread owns the loop: it closes it when the loop stops or the broker fails to
    start, so a stopped ``BrokerThread`` leaves no event loop or self-pipe sockets behind.
    """

    def __init__(self, **config: Any) -> None:
        self.config = BrokerConfig(port=0, **config)
        self.broker: Broker | None = None
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # The Runner closes the loop as the thread ends, after cancelling what still runs
        # on it and shutting down its executor, whether or not the broker started.
        with asyncio.Runner(loop_factory=lambda: self.loop) as runner:
            asyncio.set_event_loop(self.loop)
            try:
                self.broker = Broker(self.config)
                runner.run(self.broker.start())
                started = True
            except BaseException as exc:
                self._error = exc
                started = False
            finally:
                self._ready.set()
            try:
                if started:
                    self.loop.run_forever()
            finally:
                asyncio.set_event_loop(None)

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
            self._thread.join(10)
            raise self._error
        return self

    def call(self, coro: Any, timeout_s: float = 30.0) -> Any:
        """Run a coroutine in the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        """Stop the broker, then the loop; the thread closes the loop as it ends."""
        if self.broker is not None and self._error is None and self._thread.is_alive():
            try:  # scheduled even before run_forever() began: it runs them once it does
                self.call(self.broker.stop())
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive() and not self.loop.is_closed():
            self.loop.close()  # never started: no thread to close it


@contextmanager
def running_broker(**config: Any) -> Iterator[BrokerThread]:
    """A started :class:`BrokerThread`, stopped on exit."""
    thread = BrokerThread(**config)
    try:
        yield thread.start()
    finally:
        thread.stop()
