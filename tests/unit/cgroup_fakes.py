"""A fake cgroup kernel on a plain directory in tmp_path, for v1 and v2 layouts.

``FakeKernel`` fills a new cgroup with the control files the kernel would show (and their
defaults), refuses ``rmdir`` while told to be busy, records kills, can fail chosen writes,
and never sleeps. ``v1_machine``/``v2_machine`` build the mounts and return the
``/proc/self/mountinfo`` and ``/proc/self/cgroup`` texts that point at them.
"""

from __future__ import annotations

import errno
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mqbench.brokers.resources.cgroups import CgroupFiles

V1_NO_LIMIT = "9223372036854771712"


@dataclass
class FakeKernel(CgroupFiles):
    """Emulates what the tests need of cgroupfs (see the module docstring)."""

    version: int = 1
    killed: list[int] = field(default_factory=list)
    busy: dict[Path, int] = field(default_factory=dict)
    """rmdir of this path fails with EBUSY this many more times."""
    fail_write: dict[str, int] = field(default_factory=dict)
    """File name -> errno raised when it is written."""
    fail_mkdir: int | None = None
    """errno raised by every mkdir (e.g. EACCES)."""
    roots: list[Path] = field(default_factory=list)
    """Hierarchy roots (where ``kill`` looks for the killed PID)."""

    def mkdir(self, path: Path) -> None:
        if self.fail_mkdir is not None:
            raise OSError(self.fail_mkdir, "Permission denied", str(path))
        path.mkdir(exist_ok=True)
        parent = path.parent
        if self.version == 1:
            defaults = {
                "cgroup.procs": "",
                "cpu.cfs_period_us": "100000",
                "cpu.cfs_quota_us": "-1",
                "cpuset.cpus": "",
                "cpuset.mems": "",
                "cpuset.effective_cpus": "",
                "memory.limit_in_bytes": V1_NO_LIMIT,
                "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0",
            }
        else:
            defaults = {
                "cgroup.procs": "",
                "cgroup.subtree_control": "",
                "cpu.max": "max 100000",
                "cpuset.cpus": "",
                "cpuset.mems": "",
                "cpuset.cpus.effective": _read(parent / "cpuset.cpus.effective"),
                "cpuset.mems.effective": _read(parent / "cpuset.mems.effective"),
                "memory.max": "max",
                "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0",
            }
        for name, value in defaults.items():
            (path / name).write_text(value)

    def rmdir(self, path: Path) -> None:
        if not path.is_dir():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        if self.busy.get(path, 0) > 0:
            self.busy[path] -= 1
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        if _read(path / "cgroup.procs"):
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        if any(p.is_dir() for p in path.iterdir()):
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        shutil.rmtree(path)

    def write(self, path: Path, value: str) -> None:
        code = self.fail_write.get(path.name)
        if code is not None:
            raise OSError(code, errno.errorcode.get(code, "error"), str(path))
        if path.name == "cgroup.subtree_control":
            enabled = set(_read(path).split())
            for token in value.split():
                (enabled.add if token.startswith("+") else enabled.discard)(token[1:])
            path.write_text(" ".join(sorted(enabled)))
            return
        path.write_text(value)
        if self.version == 2 and path.name in ("cpuset.cpus", "cpuset.mems") and value:
            (path.parent / f"{path.name}.effective").write_text(value)

    def kill(self, pid: int) -> None:
        self.killed.append(pid)
        for procs in self._all_procs():
            pids = [p for p in _read(procs).split() if p != str(pid)]
            procs.write_text("\n".join(pids))

    def sleep(self, seconds: float) -> None:
        pass

    def _all_procs(self) -> list[Path]:
        return [p for root in self.roots for p in root.rglob("cgroup.procs")]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


@dataclass
class Machine:
    """A fake machine: where the hierarchies are and what /proc says about this process."""

    kernel: FakeKernel
    mountinfo: str
    self_cgroup: str
    roots: dict[str, Path]


def v1_machine(tmp_path: Path, own_memory: str = "/session/abc", cpus: str = "0-1") -> Machine:
    """cgroup v1 like this project's machine: cpu, cpuacct, cpuset, memory hierarchies plus an
    empty unified v2 mount; this process sits in ``own_memory`` of the memory hierarchy."""
    base = tmp_path / "sys" / "fs" / "cgroup"
    roots: dict[str, Path] = {}
    lines = [f"31 23 0:28 / {base} rw,relatime - tmpfs tmpfs rw,mode=755"]
    for i, controller in enumerate(("cpu", "cpuacct", "cpuset", "memory")):
        root = base / controller
        root.mkdir(parents=True)
        roots[controller] = root
        lines.append(f"{32 + i} 31 0:{29 + i} / {root} rw,relatime - cgroup cgroup rw,{controller}")
    unified = base / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("hugetlb\n")
    lines.append(f"41 31 0:38 / {unified} rw,relatime - cgroup2 cgroup2 rw")
    cpuset = roots["cpuset"]
    (cpuset / "cpuset.cpus").write_text(cpus)
    (cpuset / "cpuset.effective_cpus").write_text(cpus)
    (cpuset / "cpuset.mems").write_text("0")
    (roots["cpu"] / "cpu.cfs_period_us").write_text("100000")
    memory_own = roots["memory"] / own_memory.strip("/")
    memory_own.mkdir(parents=True)
    kernel = FakeKernel(version=1, roots=list(roots.values()))
    own = f"4:memory:{own_memory}\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n"
    return Machine(kernel, "\n".join(lines) + "\n", own, roots)


def v2_machine(tmp_path: Path, own: str = "/user.slice/session-1.scope") -> Machine:
    """A unified cgroup v2 hierarchy offering cpu, cpuset and memory; this process in ``own``."""
    root = tmp_path / "sys" / "fs" / "cgroup"
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("cpu memory pids")
    (root / "cpuset.cpus.effective").write_text("0-3")
    (root / "cpuset.mems.effective").write_text("0")
    (root / own.strip("/")).mkdir(parents=True)
    mountinfo = f"30 23 0:26 / {root} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"
    kernel = FakeKernel(version=2, roots=[root])
    return Machine(kernel, mountinfo, f"0::{own}\n", {"unified": root})
