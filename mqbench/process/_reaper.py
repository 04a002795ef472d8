"""The orphan reaper (see ``mqbench/process/lifeline.py``); run as ``python -I -S _reaper.py``.

Standard library only, no mqbench imports: it starts in a few milliseconds and keeps
working whatever state mqbench is in. Protocol on stdin, one line per message::

    add <pid> <start time>     guard the process group led by <pid>
    del <pid>                  forget it (mqbench stopped it)
    compose <project> <docker> guard a Docker Compose project (<docker>: the CLI's path)
    uncompose <project>        forget it (mqbench took it down)
    dir <path>                 remove folder <path> (absolute) at the end: a private folder
    undir <path>               forget it (mqbench removed it)

At end-of-file (mqbench exited, however it exited) every guarded group still present gets
SIGTERM, and SIGKILL after ``GRACE_S``; then every guarded compose project is taken down,
newest first (``docker compose -p <project> down -v --remove-orphans``: its containers,
networks and volumes, found by the project label Compose puts on them); then every guarded
folder is removed (after the processes and containers that read it); then the reaper
exits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

GRACE_S = 3.0
POLL_S = 0.05
COMPOSE_DOWN_TIMEOUT_S = 120.0


def start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def signal_group(pid: int, started: int, signum: int) -> bool:
    """Signal the group led by pid unless pid now names another process (PID reuse)."""
    now = start_time(pid)
    if now is not None and now != started:
        return False
    try:
        os.killpg(pid, signum)
        return True
    except ProcessLookupError:
        pass
    except PermissionError:
        return False
    try:
        os.kill(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_alive(pgid: int) -> bool:
    """Some process of group ``pgid`` still runs (zombies waiting for init do not count)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    if not entries:  # no /proc: ask the kernel (zombies count as alive here)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def compose_down(project: str, docker: str) -> None:
    """Remove a compose project's containers, networks and volumes (bounded in time)."""
    argv = [docker, "compose", "-p", project, "down", "-v", "--remove-orphans", "-t", "2"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=COMPOSE_DOWN_TIMEOUT_S,
            check=False,
        )


def main() -> int:
    for name in ("SIGINT", "SIGHUP", "SIGPIPE"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    os.chdir("/")
    guarded: dict[int, int] = {}
    projects: dict[str, str] = {}
    folders: set[str] = set()
    for raw in sys.stdin.buffer:
        line = raw.decode("utf-8", "surrogateescape").rstrip("\n")
        command, _, path = line.partition(" ")
        if command in ("dir", "undir") and path.startswith("/"):
            (folders.add if command == "dir" else folders.discard)(path)
            continue
        parts = line.split()
        try:
            if parts[0] == "add" and len(parts) == 3:
                guarded[int(parts[1])] = int(parts[2])
            elif parts[0] == "del" and len(parts) == 2:
                guarded.pop(int(parts[1]), None)
            elif parts[0] == "compose" and len(parts) == 3:
                projects[parts[1]] = parts[2]
            elif parts[0] == "uncompose" and len(parts) == 2:
                projects.pop(parts[1], None)
        except (IndexError, ValueError):
            continue
    reap_groups(guarded)
    for project, docker in reversed(projects.items()):  # newest first: a proxy joined to a
        compose_down(project, docker)  # broker's network goes before that network
    for folder in sorted(folders):
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def reap_groups(guarded: dict[int, int]) -> None:
    """SIGTERM every guarded group still there, SIGKILL what remains after ``GRACE_S``."""
    targets = {pid: t for pid, t in guarded.items() if signal_group(pid, t, signal.SIGTERM)}
    deadline = time.monotonic() + GRACE_S
    while targets and time.monotonic() < deadline:
        targets = {pid: t for pid, t in targets.items() if group_alive(pid)}
        time.sleep(POLL_S)
    for pid, started in targets.items():
        signal_group(pid, started, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
