"""Child processes die with mqbench, even when mqbench itself is killed with SIGKILL.

Two mechanisms, because neither covers every case alone (docs/results.md, "Failures"):

- The parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``): the kernel signals a child
  when the thread that started it dies. Worker processes set it on themselves
  (:func:`die_with_parent`); broker and proxy children get it between fork and exec
  (:func:`preexec_die_with_parent`). The kernel clears it when a child changes its user or
  group or executes a set-uid binary, and a child's own children do not inherit it (a
  broker's helper processes, a shell script that starts a JVM).
- The orphan reaper (``mqbench/process/_reaper.py``): one small stdlib-only process per mqbench
  process, in its own session, reading a pipe whose only writer is mqbench. Processes that
  must not outlive mqbench are registered with it (:func:`guard`) and unregistered once
  stopped (:func:`release`). When mqbench exits in any way the pipe reaches end-of-file and
  the reaper sends SIGTERM to every registered process group that is still there, then
  SIGKILL after a grace period, and exits. Registered processes must lead their own
  process group (``start_new_session=True``), so a broker's helpers go with it. Folders
  registered with :func:`guard_dir` (a run's private folder: keys, password files) are
  removed by the same reaper after those processes, so a SIGKILL leaves no secret behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

PR_SET_PDEATHSIG = 1
REAPER_SCRIPT = Path(__file__).with_name("_reaper.py")
"""Run by path with ``python -I -S``: it imports nothing but the standard library."""

_lock = threading.Lock()
_reaper: subprocess.Popen[bytes] | None = None
_pipe: IO[bytes] | None = None
_reaper_owner = 0
"""PID that started ``_reaper``; a forked child must not reuse its parent's reaper pipe."""


def _prctl() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):  # not Linux
        return None


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux only).

    Returns False where the call is not available.
    """
    prctl = _prctl()
    if prctl is None:
        return False
    return bool(prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0)


def die_with_parent(signum: int, parent_pid: int) -> bool:
    """Set the parent-death signal and close the race with a parent that already died.

    Returns False when ``parent_pid`` is no longer this process's parent (it died before the
    signal was armed): the caller should stop now.
    """
    set_parent_death_signal(signum)
    return os.getppid() == parent_pid


def preexec_die_with_parent() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGKILL the child when mqbench dies.

    Runs in the forked child before exec; it only calls ``prctl``.
    """
    set_parent_death_signal(signal.SIGKILL)


def _start_reaper() -> IO[bytes] | None:
    global _reaper, _pipe, _reaper_owner
    if _pipe is not None and _reaper_owner == os.getpid():
        return _pipe
    try:
        _reaper = subprocess.Popen(
            [sys.executable, "-I", "-S", str(REAPER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return None
    _pipe = _reaper.stdin
    _reaper_owner = os.getpid()
    return _pipe


def _send(line: str) -> bool:
    with _lock:
        pipe = _start_reaper()
        if pipe is None:
            return False
        try:
            pipe.write(line.encode("utf-8", "surrogateescape"))
            pipe.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22).

    Identifies a process across PID reuse; None when it does not exist.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def guard(pid: int) -> bool:
    """Register the process group led by ``pid`` with the reaper; False if unavailable."""
    started = start_time(pid)
    if started is None:
        return False
    return _send(f"add {pid} {started}\n")


def release(pid: int) -> None:
    """Unregister ``pid`` (it was stopped on purpose)."""
    if _pipe is None or _reaper_owner != os.getpid():
        return
    _send(f"del {pid}\n")


def guard_compose(project: str, docker: str) -> bool:
    """Register a Docker Compose project: the reaper takes it down if mqbench dies first.

    ``project`` and ``docker`` (the CLI's path) must not contain white space.
    """
    if any(ch.isspace() for ch in project + docker):
        return False
    return _send(f"compose {project} {docker}\n")


def release_compose(project: str) -> None:
    """Unregister ``project`` (mqbench took it down)."""
    if _pipe is None or _reaper_owner != os.getpid():
        return
    _send(f"uncompose {project}\n")


def guard_dir(path: Path) -> bool:
    """Have the reaper remove folder ``path`` if mqbench exits without removing it (a
    run's private folder of keys and password files); False if that cannot be arranged
    (no reaper, or a path with a line break)."""
    text = str(path.resolve())
    if "\n" in text:
        return False
    return _send(f"dir {text}\n")


def release_dir(path: Path) -> None:
    """Unregister folder ``path`` (mqbench removed it)."""
    text = str(path.resolve())
    if _pipe is None or _reaper_owner != os.getpid() or "\n" in text:
        return
    _send(f"undir {text}\n")


def reaper_pid() -> int | None:
    """PID of this process's reaper (None before the first :func:`guard`)."""
    if _reaper is None or _reaper_owner != os.getpid():
        return None
    return _reaper.pid


def stop_reaper() -> None:
    """Close the pipe so the reaper exits now (tests; mqbench normally just exits)."""
    global _reaper, _pipe
    with _lock:
        pipe, proc = _pipe, _reaper
        _pipe = _reaper = None
    if pipe is not None:
        with contextlib.suppress(OSError):
            pipe.close()
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
