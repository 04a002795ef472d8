"""What the engine's host can give a container: open files, CPUs, memory.

Every compose file asks for ``nofile`` 300000 (the mq-bench paper's setting). A container's
rlimits are set by the engine's runtime (runc, a child of the daemon), which can raise a
hard limit only up to its own unless it holds ``CAP_SYS_RESOURCE``; with the capability
the kernel's ceiling is ``fs.nr_open``. In a sandbox that drops the capability (this
project's CI machine: hard limit 20,000) asking for more fails every container with
"error setting rlimits". So the runtime asks for ``min(300000, ceiling)`` and says so
in one line when that is less than the compose files' request.

The ceiling is read from the engine's own process when it runs on this machine (its PID
from the daemon's pid file, else a process named ``dockerd``; ``/proc/<pid>/limits`` and
the ``CapEff`` mask of ``/proc/<pid>/status``), else from this process; ``None`` when the
engine is on another machine (``DOCKER_HOST``): the request then stays as it is.
CPUs and memory come from ``docker info`` (``NCPU``, ``MemTotal``), which also holds for a
remote engine.
"""

from __future__ import annotations

import contextlib
import resource
from dataclasses import dataclass
from pathlib import Path

from mqbench.brokers.resources.profiles import Profile
from mqbench.errors import BrokerError

NOFILE_REQUEST = 300000
"""The compose files' ``nofile`` (soft = hard), the paper's setting."""
CAP_SYS_RESOURCE = 24
"""Bit of ``CAP_SYS_RESOURCE`` in a capability mask (linux/capability.h)."""
PID_FILES = (Path("/var/run/docker.pid"), Path("/run/docker.pid"))


@dataclass(frozen=True)
class ProcessLimits:
    """The open-files hard limit of one process and whether it may raise it."""

    nofile_hard: int
    can_raise: bool
    """The process holds ``CAP_SYS_RESOURCE``: it may go up to ``fs.nr_open``."""


def read_process_limits(proc: Path) -> ProcessLimits | None:
    """Parse ``<proc>/limits`` and ``<proc>/status``; None when unreadable."""
    try:
        limits = (proc / "limits").read_text(encoding="ascii")
        status = (proc / "status").read_text(encoding="ascii")
    except OSError:
        return None
    hard: int | None = None
    for line in limits.splitlines():
        if line.startswith("Max open files"):
            fields = line.split()
            value = fields[4]
            hard = 1 << 62 if value == "unlimited" else int(value)
    mask = 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            mask = int(line.split()[1], 16)
    if hard is None:
        return None
    return ProcessLimits(hard, bool(mask >> CAP_SYS_RESOURCE & 1))


def _engine_pid(proc_root: Path) -> int | None:
    for pid_file in PID_FILES:
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().strip())
            if (proc_root / str(pid)).is_dir():
                return pid
    with contextlib.suppress(OSError):
        for entry in proc_root.iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if (entry / "comm").read_text().strip() == "dockerd":
                        return int(entry.name)
    return None


def nofile_ceiling(proc_root: Path = Path("/proc")) -> int | None:
    """The highest ``nofile`` a container of the local engine can get; None if unknown."""
    pid = _engine_pid(proc_root)
    limits = read_process_limits(proc_root / str(pid)) if pid is not None else None
    if limits is None:
        limits = read_process_limits(proc_root / "self")
    if limits is None:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if limits.can_raise:
        with contextlib.suppress(OSError, ValueError):
            return int((proc_root / "sys" / "fs" / "nr_open").read_text().strip())
    return limits.nofile_hard


@dataclass(frozen=True)
class HostLimits:
    """What the engine's host has: CPUs and memory (``docker info``), the nofile ceiling."""

    cpus: int | None
    mem_bytes: int | None
    nofile_ceiling: int | None
    """None: unknown (remote engine); the compose request is used as it is."""

    @property
    def nofile(self) -> int:
        """The ``nofile`` containers get: the request, capped at the ceiling."""
        if self.nofile_ceiling is None:
            return NOFILE_REQUEST
        return min(NOFILE_REQUEST, self.nofile_ceiling)

    def nofile_note(self) -> str | None:
        """One line when containers get less than the compose files ask for, else None."""
        if self.nofile >= NOFILE_REQUEST:
            return None
        return (
            f"containers get nofile {self.nofile}: the compose files ask for {NOFILE_REQUEST}, "
            f"above this host's hard limit of {self.nofile_ceiling} (the engine cannot raise it)"
        )

    def check_profile(self, profile: Profile) -> None:
        """``BrokerError`` in one line when ``profile`` asks for more than the host has."""
        if profile.cpus is not None and self.cpus is not None and profile.cpus > self.cpus:
            raise BrokerError(
                f"resources profile {profile.name!r} asks for {profile.cpus} CPUs but the "
                f"Docker engine's host has {self.cpus} (docker refuses cpus above that)"
            )
        if profile.mem_mb is not None and self.mem_bytes is not None:
            host_mb = self.mem_bytes // (1024 * 1024)
            if profile.mem_mb > host_mb:
                raise BrokerError(
                    f"resources profile {profile.name!r} asks for {profile.mem_mb} MiB of "
                    f"memory but the Docker engine's host has {host_mb} MiB"
                )


def local_nofile_ceiling(remote: bool) -> int | None:
    """``nofile_ceiling()`` for a local engine; None for a remote one."""
    return None if remote else nofile_ceiling()
