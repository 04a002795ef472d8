"""Linux control groups for native brokers: CPU quota, cpuset and memory limit (v1 and v2).

A native resource profile puts the broker's whole process tree into a cgroup of its own,
created for one broker start under a parent that mqbench owns and removed when the broker
stops. What is mounted decides the flavour:

- **v1** (separate ``cpu``, ``cpuset`` and ``memory`` hierarchies): one directory per
  hierarchy, ``<mount>/<mqbench's own cgroup>/mqbench/<instance>``. Nesting under the cgroup
  mqbench itself runs in keeps the broker inside whatever limits and accounting the caller
  is subject to. Files: ``cpu.cfs_period_us`` + ``cpu.cfs_quota_us``, ``cpuset.cpus`` +
  ``cpuset.mems`` (both must be set before a process may join), ``memory.limit_in_bytes``.
- **v2** (one unified hierarchy offering ``cpu cpuset memory``): ``<mount>/mqbench/<instance>``
  at the top of the hierarchy, because v2 forbids enabling controllers for the children of
  a cgroup that has processes (mqbench's own cgroup always has). The controllers are enabled
  in ``cgroup.subtree_control`` from the root down. Files: ``cpu.max``, ``cpuset.cpus``,
  ``cpuset.mems``, ``memory.max``.

``MQBENCH_CGROUP_PARENT`` replaces the parent (a path relative to the hierarchy's root,
e.g. a cgroup delegated to a non-root user).

The broker joins its cgroup before its first instruction: ``BrokerCgroup.wrap`` prefixes the
command line with ``/bin/sh -c 'echo $$ > <dir>/cgroup.procs ...; exec "$@"'``, so the shell
moves itself in and then *becomes* the broker (same PID); every child inherits the cgroup.
What was applied is read back from the files (the kernel may round) for the manifest.
Swap is not limited (``memory.memsw``/``memory.swap.max`` are left alone).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mqbench.errors import BrokerError

CONTROLLERS = ("cpu", "cpuset", "memory")
"""Controllers a profile needs."""
PARENT_ENV = "MQBENCH_CGROUP_PARENT"
DEFAULT_PARENT = "mqbench"
CFS_PERIOD_US = 100_000
"""CPU quota period (the kernel's and Docker's default, 100 ms)."""
REMOVE_WAIT_S = 5.0
"""How long ``remove`` waits for leftover processes to die and the directory to go."""
SHELL = "/bin/sh"


class CgroupError(BrokerError):
    """A cgroup could not be found, created, written or removed."""


@dataclass(frozen=True)
class Mount:
    """One cgroup mount from ``/proc/self/mountinfo``."""

    mount_point: Path
    root: str
    """The path inside the hierarchy that is mounted at ``mount_point`` (usually ``/``)."""
    fstype: str
    """``cgroup`` (v1) or ``cgroup2``."""
    options: frozenset[str]
    """Super options: for v1 the controllers of this hierarchy, e.g. {"rw", "cpu"}."""


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts in a ``/proc/<pid>/mountinfo`` text."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        tail = right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        mounts.append(Mount(Path(point), fields[3], tail[0], frozenset(tail[2].split(","))))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` as controller -> path; the v2 entry (``0::/x``) under ``""``."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            paths[""] = path
            continue
        for controller in controllers.split(","):
            paths[controller] = path
    return paths


def parse_cpu_list(text: str) -> list[int]:
    """A kernel CPU list (``0-3,6``) as sorted CPU numbers; '' is no CPU."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        if sep:
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(low))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """CPU numbers as a kernel CPU list with ranges (``[0, 1, 2, 5]`` -> ``0-2,5``)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in [*ordered, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None and prev is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


@dataclass(frozen=True)
class Layout:
    """Where the parent cgroup lives: one directory per hierarchy (v1) or one (v2)."""

    version: Literal[1, 2]
    roots: dict[str, Path]
    """Key (controller for v1, ``unified`` for v2) -> the hierarchy's mount point."""
    parents: dict[str, Path]
    """Key -> the mqbench-owned parent directory in that hierarchy."""

    def key_for(self, controller: str) -> str:
        """The key whose hierarchy holds ``controller``."""
        return "unified" if self.version == 2 else controller


def detect_layout(mountinfo: str, self_cgroup: str, parent: str | None = None) -> Layout:
    """Which cgroup version offers cpu, cpuset and memory here, and the parent directories.

    v1 wins when every controller has a v1 hierarchy (hybrid systems mount an empty v2
    next to them); otherwise a v2 mount whose ``cgroup.controllers`` lists all three.
    ``CgroupError`` when neither exists.
    """
    mounts = parse_mountinfo(mountinfo)
    own = parse_proc_cgroup(self_cgroup)
    relative = (parent or DEFAULT_PARENT).strip("/")
    if not relative or ".." in relative.split("/"):
        raise CgroupError(f"{PARENT_ENV}={parent!r} is not a relative cgroup path")
    v1 = {c: m for c in CONTROLLERS for m in mounts if m.fstype == "cgroup" and c in m.options}
    if len(v1) == len(CONTROLLERS):
        parents: dict[str, Path] = {}
        for controller, mount in v1.items():
            if parent is not None:
                base = mount.mount_point
            else:
                base = mount.mount_point / _inside(own.get(controller, "/"), mount.root)
            parents[controller] = base / relative
        return Layout(1, {c: m.mount_point for c, m in v1.items()}, parents)
    for mount in mounts:
        if mount.fstype != "cgroup2":
            continue
        try:
            offered = set((mount.mount_point / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if set(CONTROLLERS) <= offered:
            return Layout(
                2, {"unified": mount.mount_point}, {"unified": mount.mount_point / relative}
            )
    found = sorted(v1) or ["none"]
    raise CgroupError(
        "no cgroup hierarchy with the cpu, cpuset and memory controllers is mounted "
        f"(cgroup v1 controllers found: {', '.join(found)}; no cgroup v2 mount offers all three)"
    )


def _inside(path: str, mount_root: str) -> str:
    """``path`` relative to the mounted ``mount_root`` (containers mount a subtree)."""
    root = mount_root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return path.strip("/")


@dataclass(frozen=True)
class Limits:
    """What a cgroup enforces; None = no limit of that kind."""

    cpus: int | None = None
    """CPU quota in whole CPUs (``cpus * period`` per period)."""
    cpuset: tuple[int, ...] | None = None
    """CPUs the broker may run on."""
    memory_bytes: int | None = None


class CgroupFiles:
    """File operations on a cgroup filesystem; tests replace it with a fake kernel that
    works on a plain directory (default files on ``mkdir``, ``rmdir`` of non-empty dirs)."""

    def mkdir(self, path: Path) -> None:
        """Create a cgroup (the kernel fills it with its control files)."""
        path.mkdir(exist_ok=True)

    def rmdir(self, path: Path) -> None:
        """Remove an empty cgroup (EBUSY while processes are in it)."""
        os.rmdir(path)

    def read(self, path: Path) -> str:
        """A control file's text, stripped."""
        return path.read_text(encoding="ascii").strip()

    def write(self, path: Path, value: str) -> None:
        """Write one value (the kernel wants it in one write call)."""
        with path.open("w", encoding="ascii") as fh:
            fh.write(value)

    def kill(self, pid: int) -> None:
        """SIGKILL a process left in a broker's cgroup."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)

    def sleep(self, seconds: float) -> None:
        """Pause between checks."""
        time.sleep(seconds)


@dataclass
class BrokerCgroup:
    """One broker's cgroup: its directories, what was applied, and how to remove it."""

    name: str
    layout: Layout
    dirs: dict[str, Path]
    """Key (controller or ``unified``) -> directory."""
    applied: dict[str, Any]
    files: CgroupFiles = field(default_factory=CgroupFiles)
    removed: bool = False
    remove_error: str | None = None

    def procs_files(self) -> list[Path]:
        """Every distinct ``cgroup.procs`` the broker must join."""
        unique = sorted({str(d) for d in self.dirs.values()})
        return [Path(d) / "cgroup.procs" for d in unique]

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started through a shell that joins the cgroup first, then execs it."""
        files = self.procs_files()
        joins = " && ".join(f'echo $$ > "${i}"' for i in range(1, len(files) + 1))
        script = f'{joins} && shift {len(files)} && exec "$@"'
        return [SHELL, "-c", script, "mqbench-cgroup", *(str(f) for f in files), *argv]

    def pids(self) -> list[int]:
        """Processes in the cgroup now (all hierarchies)."""
        found: set[int] = set()
        for path in self.procs_files():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in self.files.read(path).split())
        return sorted(found)

    def describe(self) -> dict[str, Any]:
        """Manifest facts: version, paths, limits as read back, and removal outcome."""
        info: dict[str, Any] = {
            "version": self.layout.version,
            "paths": {key: str(path) for key, path in self.dirs.items()},
            **self.applied,
        }
        if self.removed or self.remove_error:
            info["removed"] = self.removed
            if self.remove_error:
                info["remove_error"] = self.remove_error
        return info

    def remove(self, wait_s: float = REMOVE_WAIT_S) -> None:
        """Kill what is left in the cgroup (only the broker's own tree can be there), then
        remove its directories. Never raises; a failure is kept in ``remove_error``."""
        if self.removed:
            return
        self._record_oom_kills()
        self.remove_error = remove_cgroup_dirs(self.dirs.values(), self.files, wait_s)
        self.removed = self.remove_error is None

    def _record_oom_kills(self) -> None:
        key = self.layout.key_for("memory")
        directory = self.dirs.get(key)
        if directory is None:
            return
        name = "memory.oom_control" if self.layout.version == 1 else "memory.events"
        with contextlib.suppress(OSError, ValueError):
            for line in self.files.read(directory / name).splitlines():
                label, _, value = line.partition(" ")
                if label == "oom_kill":
                    self.applied["oom_kills"] = int(value)


def remove_cgroup_dirs(
    dirs: Iterable[Path], files: CgroupFiles | None = None, wait_s: float = REMOVE_WAIT_S
) -> str | None:
    """SIGKILL the processes left in these cgroups, then remove them; the error or None.

    Only for cgroups mqbench created for one broker: whatever runs there is that broker's
    own process tree. Directories already gone count as removed.
    """
    ops = files or CgroupFiles()
    unique = sorted({Path(d) for d in dirs})
    deadline = time.monotonic() + wait_s

    def left() -> list[int]:
        pids: set[int] = set()
        for directory in unique:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(x) for x in ops.read(directory / "cgroup.procs").split())
        return sorted(pids)

    pids = left()
    for pid in pids:
        ops.kill(pid)
    while pids and time.monotonic() < deadline:
        ops.sleep(0.05)
        pids = left()
    errors: list[str] = []
    for directory in unique:
        while True:
            try:
                ops.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    errors.append(f"cannot remove {directory}: {exc.strerror or exc}")
                    break
            ops.sleep(0.05)
    return "; ".join(errors) or None


class CgroupManager:
    """Finds the cgroup hierarchy and creates broker cgroups under mqbench's parent."""

    def __init__(
        self,
        mountinfo: str | None = None,
        self_cgroup: str | None = None,
        parent: str | None = None,
        files: CgroupFiles | None = None,
    ) -> None:
        """Read ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` unless given (tests)."""
        self._mountinfo = mountinfo
        self._self_cgroup = self_cgroup
        self._parent = parent if parent is not None else os.environ.get(PARENT_ENV) or None
        self.files = files or CgroupFiles()
        self._layout: Layout | None = None

    def layout(self) -> Layout:
        """The hierarchy and parent directories (``CgroupError`` when none fits)."""
        if self._layout is None:
            try:
                mountinfo = self._mountinfo or Path("/proc/self/mountinfo").read_text()
                own = self._self_cgroup or Path("/proc/self/cgroup").read_text()
            except OSError as exc:
                raise CgroupError(f"cannot read the cgroup mounts: {exc}") from exc
            self._layout = detect_layout(mountinfo, own, self._parent)
        return self._layout

    def effective_cpus(self) -> list[int]:
        """CPUs the parent may use (its cpuset's effective list)."""
        layout = self.layout()
        self.ensure_parent()
        directory = layout.parents[layout.key_for("cpuset")]
        name = "cpuset.effective_cpus" if layout.version == 1 else "cpuset.cpus.effective"
        for candidate in (name, "cpuset.cpus"):
            with contextlib.suppress(OSError):
                cpus = parse_cpu_list(self.files.read(directory / candidate))
                if cpus:
                    return cpus
        return sorted(os.sched_getaffinity(0))

    def ensure_parent(self) -> None:
        """Create the parent cgroup(s) and make the controllers available to its children."""
        layout = self.layout()
        for key, parent in layout.parents.items():
            level = layout.roots[key]
            levels = [level]
            for part in parent.relative_to(level).parts:
                level = level / part
                levels.append(level)
            for above, here in zip([None, *levels], levels, strict=False):
                if above is not None and not here.is_dir():
                    self._mkdir(here)
                    if layout.version == 1 and key == "cpuset":
                        self._inherit_cpuset(above, here)
                if layout.version == 2:
                    self._enable_controllers(here)

    def create(self, name: str, limits: Limits) -> BrokerCgroup:
        """A new cgroup ``<parent>/<name>`` with ``limits`` written (and read back)."""
        layout = self.layout()
        self.ensure_parent()
        dirs = {key: parent / name for key, parent in layout.parents.items()}
        group = BrokerCgroup(name, layout, dirs, {}, files=self.files)
        try:
            for path in sorted(set(dirs.values())):
                self._mkdir(path)
            group.applied.update(self._apply(layout, dirs, limits))
        except CgroupError:
            group.remove(wait_s=1.0)
            raise
        return group

    def check_writable(self) -> Layout:
        """Create and remove an empty probe cgroup; ``CgroupError`` saying why it fails."""
        probe = self.create(f"probe-{os.getpid()}-{time.monotonic_ns()}", Limits())
        probe.remove(wait_s=1.0)
        if probe.remove_error:
            raise CgroupError(probe.remove_error)
        return self.layout()

    def _apply(self, layout: Layout, dirs: dict[str, Path], limits: Limits) -> dict[str, Any]:
        applied: dict[str, Any] = {}
        cpuset_dir = dirs[layout.key_for("cpuset")]
        parent_cpuset = layout.parents[layout.key_for("cpuset")]
        cpus = format_cpu_list(limits.cpuset) if limits.cpuset else None
        if layout.version == 1:
            # A v1 cpuset starts empty, and a process cannot join it until both are set.
            self._write(
                cpuset_dir / "cpuset.cpus", cpus or self._read(parent_cpuset / "cpuset.cpus")
            )
            self._write(cpuset_dir / "cpuset.mems", self._read(parent_cpuset / "cpuset.mems"))
            cpu_dir = dirs["cpu"]
            if limits.cpus is not None:
                self._write(cpu_dir / "cpu.cfs_period_us", str(CFS_PERIOD_US))
                self._write(cpu_dir / "cpu.cfs_quota_us", str(limits.cpus * CFS_PERIOD_US))
            applied["cpu_period_us"] = int(self._read(cpu_dir / "cpu.cfs_period_us"))
            quota = int(self._read(cpu_dir / "cpu.cfs_quota_us"))
            applied["cpu_quota_us"] = quota if quota >= 0 else None
            mem_file = dirs["memory"] / "memory.limit_in_bytes"
            if limits.memory_bytes is not None:
                self._write(mem_file, str(limits.memory_bytes))
            applied["memory_limit_bytes"] = _limit(self._read(mem_file))
        else:
            unified = dirs["unified"]
            if cpus:
                self._write(unified / "cpuset.cpus", cpus)
            if limits.cpus is not None:
                self._write(unified / "cpu.max", f"{limits.cpus * CFS_PERIOD_US} {CFS_PERIOD_US}")
            if limits.memory_bytes is not None:
                self._write(unified / "memory.max", str(limits.memory_bytes))
            quota_text, _, period_text = self._read(unified / "cpu.max").partition(" ")
            applied["cpu_period_us"] = int(period_text or CFS_PERIOD_US)
            applied["cpu_quota_us"] = None if quota_text == "max" else int(quota_text)
            applied["memory_limit_bytes"] = _limit(self._read(unified / "memory.max"))
        suffix = "" if layout.version == 1 else ".effective"
        applied["cpuset_cpus"] = self._read(cpuset_dir / f"cpuset.cpus{suffix}")
        applied["cpuset_mems"] = self._read(cpuset_dir / f"cpuset.mems{suffix}")
        return applied

    def _inherit_cpuset(self, parent: Path, child: Path) -> None:
        for name in ("cpuset.cpus", "cpuset.mems"):
            if not self._read(child / name):
                self._write(child / name, self._read(parent / name))

    def _enable_controllers(self, level: Path) -> None:
        control = level / "cgroup.subtree_control"
        enabled = set(self._read(control).split())
        missing = [c for c in CONTROLLERS if c not in enabled]
        if not missing:
            return
        try:
            self.files.write(control, " ".join(f"+{c}" for c in missing))
        except OSError as exc:
            hint = ""
            if exc.errno == errno.EBUSY:
                hint = (
                    " (cgroup v2 does not enable controllers below a cgroup that has processes; "
                    f"set {PARENT_ENV} to an empty cgroup delegated to mqbench)"
                )
            raise CgroupError(
                f"cannot enable {' '.join(missing)} in {control}: {exc.strerror or exc}{hint}"
            ) from exc

    def _mkdir(self, path: Path) -> None:
        try:
            self.files.mkdir(path)
        except OSError as exc:
            raise CgroupError(_access_message(path, exc, self.layout())) from exc

    def _read(self, path: Path) -> str:
        try:
            return self.files.read(path)
        except OSError as exc:
            raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def _write(self, path: Path, value: str) -> None:
        try:
            self.files.write(path, value)
        except OSError as exc:
            raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror or exc}") from exc


def _limit(text: str) -> int | None:
    """A memory limit file's value; None for "max" or v1's huge "no limit" number."""
    if text == "max":
        return None
    value = int(text)
    return None if value >= 2**62 else value


def _access_message(path: Path, exc: OSError, layout: Layout) -> str:
    what = f"cgroup v{layout.version} ({', '.join(CONTROLLERS)})"
    return (
        f"cannot create cgroup {path}: {exc.strerror or exc}; native resource profiles need "
        f"write access to {what}: run mqbench as root, or set {PARENT_ENV} to a cgroup "
        "delegated to this user"
    )
