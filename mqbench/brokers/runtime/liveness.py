"""Watching a broker for an exit nobody asked for.

A runtime that can tell when its broker dies implements :class:`WatchesExit`: the engine
registers a callback once the broker is ready and gets a :class:`BrokerExit` (exit code
and time) when the broker exits before ``stop()``. A stop the engine asked for is never
reported. For processes, :class:`ProcessExitWatch` waits on a pidfd (Linux) in a daemon
thread, so the exit time is exact to the scheduler, not to a polling interval.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

POLL_S = 0.2
"""Polling interval where pidfds are not available."""


@dataclass(frozen=True)
class BrokerExit:
    """A broker process (or container) that exited on its own."""

    pid: int
    exit_code: int | None
    """Exit status; negative ``-N`` when killed by signal N (``subprocess`` convention)."""
    t_ns: int
    """``time.time_ns()`` when the exit was seen."""

    @property
    def signal_name(self) -> str | None:
        """``SIGKILL`` etc. when a signal ended the process."""
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    def describe(self) -> str:
        """``killed by SIGKILL`` / ``exited with code 1`` / ``exited``."""
        if self.signal_name is not None:
            return f"killed by {self.signal_name}"
        if self.exit_code is None:
            return "exited"
        return f"exited with code {self.exit_code}"

    def to_dict(self) -> dict[str, Any]:
        """Manifest form (``broker_exit`` of a cell)."""
        return {**asdict(self), "signal": self.signal_name, "reason": self.describe()}


ExitCallback = Callable[[BrokerExit], None]


@runtime_checkable
class WatchesExit(Protocol):
    """A running broker that reports an unrequested exit."""

    def watch_exit(self, on_exit: ExitCallback) -> None:
        """Call ``on_exit`` once (from another thread) if the broker exits before ``stop()``."""
        ...


class ProcessExitWatch:
    """Reports the exit of a ``Popen`` child unless :meth:`cancel` came first."""

    def __init__(self, process: subprocess.Popen[bytes], on_exit: ExitCallback) -> None:
        self._process = process
        self._on_exit = on_exit
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self.exit: BrokerExit | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"mqbench-exit-watch-{process.pid}", daemon=True
        )
        self._thread.start()

    def cancel(self) -> None:
        """The exit is expected from now on (``stop()`` began); report nothing."""
        with self._lock:
            self._cancelled.set()

    def _wait_exit(self) -> None:
        pid = self._process.pid
        fd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            fd = os.pidfd_open(pid)
        if fd is None:
            while self._process.poll() is None and not self._cancelled.wait(POLL_S):
                pass
            return
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while not self._cancelled.is_set() and not poller.poll(int(POLL_S * 1000)):
                pass
        finally:
            os.close(fd)

    def _run(self) -> None:
        self._wait_exit()
        t_ns = time.time_ns()
        if self._cancelled.is_set():
            return
        code = self._process.poll()
        deadline = time.monotonic() + 2.0
        while code is None and time.monotonic() < deadline:  # another thread holds the reap
            time.sleep(0.01)
            code = self._process.poll()
        with self._lock:
            if self._cancelled.is_set():
                return
            self.exit = BrokerExit(self._process.pid, code, t_ns)
        with contextlib.suppress(Exception):  # a callback must not kill the watch thread
            self._on_exit(self.exit)


ContainerInspector = Callable[[str], Any]
"""``container id -> inspect document`` (``docker.APIClient.inspect_container``)."""
CONTAINER_POLL_S = 1.0


class ContainerExitWatch:
    """Polls containers' state once a second and reports the first one that stopped.

    ``containers`` are ``(id, main pid)`` pairs; the exit code and time come from the
    container's ``State`` (``ExitCode``); an inspect error (engine gone, container removed)
    counts as an exit with an unknown code.
    """

    def __init__(
        self,
        containers: list[tuple[str, int]],
        inspect: ContainerInspector,
        on_exit: ExitCallback,
        interval_s: float = CONTAINER_POLL_S,
    ) -> None:
        self._containers = containers
        self._inspect = inspect
        self._on_exit = on_exit
        self._interval_s = interval_s
        self._cancelled = threading.Event()
        self.exit: BrokerExit | None = None
        self._thread = threading.Thread(target=self._run, name="mqbench-exit-watch", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """The exit is expected from now on; report nothing."""
        self._cancelled.set()

    def check_once(self) -> BrokerExit | None:
        """Inspect every container once; the exit of the first that is not running."""
        for container_id, pid in self._containers:
            try:
                state = (self._inspect(container_id) or {}).get("State") or {}
            except Exception:
                return BrokerExit(pid, None, time.time_ns())
            if not state.get("Running", False):
                code = state.get("ExitCode")
                return BrokerExit(pid, int(code) if code is not None else None, time.time_ns())
        return None

    def _run(self) -> None:
        while not self._cancelled.wait(self._interval_s):
            found = self.check_once()
            if found is None:
                continue
            if not self._cancelled.is_set():
                self.exit = found
                with contextlib.suppress(Exception):
                    self._on_exit(found)
            return
