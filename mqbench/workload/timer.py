"""Wake-ups at nanosecond deadlines on the event loop (the publish loop's clock source).

asyncio and uvloop timers resolve to about a millisecond (libuv computes its poll timeout
in whole milliseconds), and ``time.sleep`` adds the kernel's 50 µs timer slack. A Linux
``timerfd`` armed with an absolute ``CLOCK_REALTIME`` deadline has no slack: its expiry makes
the fd readable, which wakes the loop's ``epoll_wait`` at once. Python 3.11 has no
``os.timerfd_create`` (3.13 does), so the two libc calls are made through ``ctypes``.

``LoopTimer`` is the portable fallback (millisecond wake-ups); the manifest records which
one ran, so a coarse timer is never mistaken for a precise one (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import sys
import time
from collections.abc import Callable
from typing import Final, Protocol

CLOCK_REALTIME: Final = 0
TFD_NONBLOCK: Final = os.O_NONBLOCK
TFD_CLOEXEC: Final = os.O_CLOEXEC
TFD_TIMER_ABSTIME: Final = 1


class Timer(Protocol):
    """A one-shot wake-up at an absolute ``time.time_ns()`` deadline, re-armable."""

    kind: str
    """``timerfd`` (ns deadlines) or ``loop`` (event-loop timer, ~1 ms resolution)."""

    def arm(self, deadline_ns: int) -> None:
        """Call the timer's callback once, as soon as possible after ``deadline_ns``."""
        ...

    def close(self) -> None:
        """Cancel any pending wake-up and release resources; safe to call twice."""
        ...


TimerFactory = Callable[[Callable[[], None]], Timer]
"""Builds a timer that calls the given callback on the running loop when it expires."""


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


class _Libc:
    """The two timerfd calls, resolved once per process."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        self.create = lib.timerfd_create
        self.create.argtypes = (ctypes.c_int, ctypes.c_int)
        self.create.restype = ctypes.c_int
        self.settime = lib.timerfd_settime
        self.settime.argtypes = (
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.POINTER(_Itimerspec),
        )
        self.settime.restype = ctypes.c_int


_libc: _Libc | None = None


def _get_libc() -> _Libc:
    global _libc
    if _libc is None:
        _libc = _Libc()
    return _libc


class TimerfdTimer:
    """A ``timerfd`` registered as a reader on the running loop."""

    kind = "timerfd"

    def __init__(self, callback: Callable[[], None], loop: asyncio.AbstractEventLoop) -> None:
        libc = _get_libc()
        fd = libc.create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._settime = libc.settime
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._callback = callback
        self._loop = loop
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # disarmed or re-armed after it fired: nothing to do
            return
        self._callback()

    def arm(self, deadline_ns: int) -> None:
        """Arm at an absolute wall-clock deadline; a past deadline fires at once."""
        if deadline_ns <= 0:
            deadline_ns = 1  # an all-zero it_value would disarm the timer
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if self._settime(self._fd, TFD_TIMER_ABSTIME, self._spec_ref, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def close(self) -> None:
        """Remove the reader and close the fd."""
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1


class LoopTimer:
    """The event loop's own timer (``call_at``): portable, about 1 ms resolution.

    Loop timers round to the millisecond and may run a little before their time; this one
    never calls back before its deadline (it re-arms for the rest plus one tick), so a
    publish loop on it sleeps instead of spinning through the event loop, and the up to
    ~2 ms it wakes late are recorded as send lag.
    """

    kind = "loop"
    TICK_S = 0.001

    def __init__(self, callback: Callable[[], None], loop: asyncio.AbstractEventLoop) -> None:
        self._callback = callback
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._deadline_ns = 0

    def _fire(self) -> None:
        self._handle = None
        remaining = self._deadline_ns - time.time_ns()
        if remaining > 0:
            self._schedule(remaining / 1e9 + self.TICK_S)
            return
        self._callback()

    def _schedule(self, delay_s: float) -> None:
        self._handle = self._loop.call_at(self._loop.time() + delay_s, self._fire)

    def arm(self, deadline_ns: int) -> None:
        """Arm relative to now: the loop clock is monotonic, deadlines are wall-clock."""
        if self._handle is not None:
            self._handle.cancel()
        self._deadline_ns = deadline_ns
        self._schedule(max(0.0, (deadline_ns - time.time_ns()) / 1e9))

    def close(self) -> None:
        """Cancel a pending wake-up."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def timerfd_available() -> bool:
    """True where ``timerfd_create`` exists and works (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = _get_libc()
    except (OSError, AttributeError):
        return False
    fd = libc.create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC)
    if fd < 0:
        return False
    os.close(fd)
    return True


def timer_factory(kind: str, loop: asyncio.AbstractEventLoop) -> TimerFactory:
    """A factory for ``kind``: ``timerfd``, ``loop``, or ``auto`` (timerfd where available).

    Raises ``OSError`` when ``timerfd`` is asked for explicitly and cannot be created.
    """
    if kind == "auto":
        kind = "timerfd" if timerfd_available() else "loop"
    if kind == "timerfd":
        return lambda callback: TimerfdTimer(callback, loop)
    if kind == "loop":
        return lambda callback: LoopTimer(callback, loop)
    raise ValueError(f"unknown timer kind {kind!r} (auto, timerfd or loop)")
