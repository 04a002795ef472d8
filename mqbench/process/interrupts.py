"""SIGINT and SIGTERM stop a run the same way; a second signal only hurries the stop.

While a :class:`StopSignals` is installed (``mqbench run`` installs one around the whole
run), the first SIGINT or SIGTERM raises :class:`StopRequested` (a ``KeyboardInterrupt``,
so every ``except KeyboardInterrupt`` cleanup path handles both signals alike) in the main
thread. Later signals never raise: they set :attr:`StopSignals.hurry` and call the hurry
callbacks, so teardown takes shortcuts (shorter waits, SIGKILL instead of SIGTERM) but is
never itself interrupted, and the manifest it writes last is always complete. Once a stop
began, signals stay swallowed after the block too, so the process exits with 130 / 143
however late a second signal comes.

Code that must not be interrupted half-way (starting a child process and registering it
for cleanup) runs inside :func:`deferred`: a first signal arriving there is raised when
the block ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


class StopRequested(KeyboardInterrupt):
    """The first SIGINT or SIGTERM of a run; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_code_for(signum: int) -> int:
    """The shell convention: 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


class StopSignals:
    """Installs the handlers (main thread only) for the duration of a ``with`` block."""

    def __init__(self) -> None:
        self.signum: int | None = None
        """The first signal received (None: none yet)."""
        self.count = 0
        self.first_ns: int | None = None
        self.hurry = False
        """True once a second signal arrived: stop as fast as possible."""
        self._deferred = 0
        self._pending = False
        self._hurry_callbacks: list[Callable[[], None]] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        global _active
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                self._previous[sig] = signal.signal(sig, self._handle)
        _active = self
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        for sig, previous in self._previous.items():
            # After a stop began the process is on its way out with 130/143: a late second
            # signal must not turn that into a KeyboardInterrupt or a death by signal. Only
            # SIG_IGN survives interpreter shutdown (Python resets its own handlers to the
            # default action there, and a signal in that window would kill the process).
            signal.signal(sig, signal.SIG_IGN if self.stopping else previous)
        self._previous.clear()
        if _active is self:
            _active = None

    @property
    def stopping(self) -> bool:
        """A signal arrived."""
        return self.signum is not None

    def on_hurry(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (in the signal handler) on the second signal; returns a remover."""
        self._hurry_callbacks.append(callback)
        if self.hurry:
            _call_quietly(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._hurry_callbacks.remove(callback)

        return remove

    def request(self, signum: int) -> None:
        """Act as if ``signum`` arrived (tests, and the handler itself)."""
        self.count += 1
        if self.signum is None:
            self.signum = signum
            self.first_ns = time.time_ns()
            if self._deferred:
                self._pending = True
                return
            raise StopRequested(signum)
        if not self.hurry:
            self.hurry = True
            for callback in list(self._hurry_callbacks):
                _call_quietly(callback)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.request(signum)

    @contextlib.contextmanager
    def deferred(self, raise_at_end: bool = True) -> Iterator[None]:
        """Hold back a first signal until the block ends, then raise it (or, with
        ``raise_at_end=False``, at the next :meth:`raise_pending`)."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
        if raise_at_end:
            self.raise_pending()

    def raise_pending(self) -> None:
        """Raise a first signal that arrived while deferred (no-op otherwise)."""
        if not self._deferred and self._pending:
            self._pending = False
            assert self.signum is not None
            raise StopRequested(self.signum)


def _call_quietly(callback: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):
        callback()


_active: StopSignals | None = None


def active() -> StopSignals | None:
    """The installed controller, if a run is going on in this process."""
    return _active


def deferred(raise_at_end: bool = True) -> contextlib.AbstractContextManager[None]:
    """:meth:`StopSignals.deferred` of the active controller, else a no-op."""
    if _active is None:
        return contextlib.nullcontext()
    return _active.deferred(raise_at_end)


def raise_pending() -> None:
    """:meth:`StopSignals.raise_pending` of the active controller (no-op without one)."""
    if _active is not None:
        _active.raise_pending()


def hurrying() -> bool:
    """True when a second signal asked for the fastest stop."""
    return _active is not None and _active.hurry
