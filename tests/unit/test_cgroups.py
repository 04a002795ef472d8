"""The cgroup module on a fake cgroup filesystem in tmp_path (v1 and v2)."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest
from cgroup_fakes import V1_NO_LIMIT, Machine, v1_machine, v2_machine

from mqbench.brokers.resources.cgroups import (
    CgroupError,
    CgroupManager,
    Limits,
    detect_layout,
    format_cpu_list,
    parse_cpu_list,
    parse_mountinfo,
    parse_proc_cgroup,
    remove_cgroup_dirs,
)

GIB = 1024**3


def manager(machine: Machine, parent: str | None = None) -> CgroupManager:
    return CgroupManager(
        machine.mountinfo, machine.self_cgroup, parent=parent, files=machine.kernel
    )


def test_cpu_lists_round_trip_with_ranges() -> None:
    assert parse_cpu_list("0-2,5,7-8\n") == [0, 1, 2, 5, 7, 8]
    assert parse_cpu_list("") == []
    assert format_cpu_list([5, 0, 1, 2, 8, 7]) == "0-2,5,7-8"
    assert format_cpu_list([3]) == "3"


def test_mountinfo_yields_only_cgroup_mounts_with_their_controllers() -> None:
    text = (
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 /docker/x /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    )
    mounts = parse_mountinfo(text)
    assert [(str(m.mount_point), m.fstype, m.root) for m in mounts] == [
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup", "/"),
        ("/sys/fs/cgroup/unified", "cgroup2", "/docker/x"),
    ]
    assert {"cpu", "cpuacct"} <= mounts[0].options


def test_proc_cgroup_maps_each_controller_and_the_unified_entry() -> None:
    paths = parse_proc_cgroup("4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice\n")
    assert paths == {"memory": "/a/b", "cpu": "/", "cpuacct": "/", "": "/user.slice"}


def test_v1_parents_nest_under_the_cgroup_mqbench_runs_in(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path, own_memory="/session/abc")
    layout = detect_layout(machine.mountinfo, machine.self_cgroup)
    assert layout.version == 1
    assert layout.parents == {
        "cpu": machine.roots["cpu"] / "mqbench",
        "cpuset": machine.roots["cpuset"] / "mqbench",
        "memory": machine.roots["memory"] / "session" / "abc" / "mqbench",
    }


def test_v2_parent_sits_at_the_top_of_the_unified_hierarchy(tmp_path: Path) -> None:
    machine = v2_machine(tmp_path)
    layout = detect_layout(machine.mountinfo, machine.self_cgroup)
    assert layout.version == 2
    assert layout.parents == {"unified": machine.roots["unified"] / "mqbench"}


def test_a_parent_override_is_relative_to_the_hierarchy_root(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    layout = detect_layout(machine.mountinfo, machine.self_cgroup, "delegated/bench")
    assert layout.parents["memory"] == machine.roots["memory"] / "delegated" / "bench"
    with pytest.raises(CgroupError, match="is not a relative cgroup path"):
        detect_layout(machine.mountinfo, machine.self_cgroup, "../escape")


def test_no_hierarchy_with_the_three_controllers_is_one_clear_error(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    only_cpu = "\n".join(
        line
        for line in machine.mountinfo.splitlines()
        if "cpuset" not in line and "memory" not in line
    )
    with pytest.raises(CgroupError) as excinfo:
        detect_layout(only_cpu, machine.self_cgroup)
    message = str(excinfo.value)
    assert message.startswith("no cgroup hierarchy with the cpu, cpuset and memory controllers")
    assert "cgroup v1 controllers found: cpu" in message
    assert "\n" not in message


def test_a_v1_broker_cgroup_gets_quota_cpuset_and_memory_limit(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    group = manager(machine).create("nats-1", Limits(cpus=1, cpuset=(0,), memory_bytes=2 * GIB))
    cpu, cpuset, memory = (group.dirs[k] for k in ("cpu", "cpuset", "memory"))
    assert (cpu / "cpu.cfs_quota_us").read_text() == "100000"
    assert (cpu / "cpu.cfs_period_us").read_text() == "100000"
    assert (cpuset / "cpuset.cpus").read_text() == "0"
    assert (cpuset / "cpuset.mems").read_text() == "0"
    assert (memory / "memory.limit_in_bytes").read_text() == str(2 * GIB)
    # The new mqbench parent cpuset inherited its parent's CPUs (v1 starts it empty).
    assert (machine.roots["cpuset"] / "mqbench" / "cpuset.cpus").read_text() == "0-1"
    facts = group.describe()
    assert facts == {
        "version": 1,
        "paths": {k: str(v) for k, v in group.dirs.items()},
        "cpu_period_us": 100000,
        "cpu_quota_us": 100000,
        "memory_limit_bytes": 2 * GIB,
        "cpuset_cpus": "0",
        "cpuset_mems": "0",
    }


def test_a_v1_cgroup_without_limits_records_none_not_the_kernels_huge_number(
    tmp_path: Path,
) -> None:
    machine = v1_machine(tmp_path)
    group = manager(machine).create("plain", Limits())
    assert (group.dirs["memory"] / "memory.limit_in_bytes").read_text() == V1_NO_LIMIT
    facts = group.describe()
    assert facts["cpu_quota_us"] is None
    assert facts["memory_limit_bytes"] is None
    assert facts["cpuset_cpus"] == "0-1"


def test_a_v2_broker_cgroup_enables_controllers_and_writes_cpu_max(tmp_path: Path) -> None:
    machine = v2_machine(tmp_path)
    group = manager(machine).create("hivemq-1", Limits(cpus=2, cpuset=(0, 1), memory_bytes=GIB))
    root = machine.roots["unified"]
    assert set((root / "cgroup.subtree_control").read_text().split()) >= {"cpu", "cpuset", "memory"}
    assert set((root / "mqbench" / "cgroup.subtree_control").read_text().split()) == {
        "cpu",
        "cpuset",
        "memory",
    }
    unified = group.dirs["unified"]
    assert (unified / "cpu.max").read_text() == "200000 100000"
    assert (unified / "cpuset.cpus").read_text() == "0-1"
    assert (unified / "memory.max").read_text() == str(GIB)
    facts = group.describe()
    assert (facts["version"], facts["cpu_quota_us"], facts["cpu_period_us"]) == (2, 200000, 100000)
    assert (facts["memory_limit_bytes"], facts["cpuset_cpus"], facts["cpuset_mems"]) == (
        GIB,
        "0-1",
        "0",
    )


def test_v2_refusing_controllers_below_a_busy_cgroup_explains_the_rule(tmp_path: Path) -> None:
    machine = v2_machine(tmp_path)
    machine.kernel.fail_write["cgroup.subtree_control"] = errno.EBUSY
    with pytest.raises(CgroupError) as excinfo:
        manager(machine).create("x", Limits(cpus=1))
    message = str(excinfo.value)
    assert "cannot enable cpuset in" in message
    assert "does not enable controllers below a cgroup that has processes" in message
    assert "MQBENCH_CGROUP_PARENT" in message


def test_no_write_access_is_one_line_that_says_what_is_needed(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    machine.kernel.fail_mkdir = errno.EACCES
    with pytest.raises(CgroupError) as excinfo:
        manager(machine).check_writable()
    message = str(excinfo.value)
    assert message.startswith("cannot create cgroup ")
    assert "Permission denied; native resource profiles need write access to cgroup v1" in message
    assert "run mqbench as root" in message
    assert "\n" not in message


def test_a_limit_the_kernel_refuses_removes_the_half_made_cgroup(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    machine.kernel.fail_write["memory.limit_in_bytes"] = errno.EINVAL
    with pytest.raises(CgroupError, match=r"cannot write '1073741824' to .*memory\.limit_in_bytes"):
        manager(machine).create("bad", Limits(memory_bytes=GIB))
    assert not (machine.roots["cpu"] / "mqbench" / "bad").exists()
    assert not (machine.roots["memory"] / "session" / "abc" / "mqbench" / "bad").exists()


def test_check_writable_leaves_no_probe_behind(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    layout = manager(machine).check_writable()
    assert layout.version == 1
    assert [p.name for p in (machine.roots["cpu"] / "mqbench").iterdir() if p.is_dir()] == []


def test_the_wrapper_joins_every_hierarchy_before_the_program_runs_with_the_same_pid(
    tmp_path: Path,
) -> None:
    machine = v1_machine(tmp_path)
    group = manager(machine).create("probe", Limits(cpus=1))
    program = [sys.executable, "-c", "import os; print(os.getpid())"]
    argv = group.wrap(program)
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[-3:] == program
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)
    pid = out.stdout.strip()
    for path in group.procs_files():
        assert path.read_text().strip() == pid
    assert len(group.procs_files()) == 3


def test_the_wrapper_does_not_start_the_program_when_joining_fails(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    group = manager(machine).create("probe", Limits())
    group.dirs["memory"] = tmp_path / "missing"  # cgroup.procs cannot be written there
    marker = tmp_path / "ran"
    argv = group.wrap([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    assert proc.returncode != 0
    assert not marker.exists()


def test_remove_kills_leftovers_retries_while_busy_and_records_oom_kills(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    group = manager(machine).create("left", Limits(memory_bytes=GIB))
    (group.dirs["cpu"] / "cgroup.procs").write_text("4242\n4243")
    (group.dirs["memory"] / "memory.oom_control").write_text("oom_kill_disable 0\noom_kill 2")
    machine.kernel.busy[group.dirs["cpuset"]] = 3
    group.remove()
    assert sorted(machine.kernel.killed) == [4242, 4243]
    assert all(not d.exists() for d in group.dirs.values())
    facts = group.describe()
    assert (facts["removed"], facts["oom_kills"]) == (True, 2)
    assert "remove_error" not in facts


def test_remove_never_raises_and_keeps_the_reason(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    group = manager(machine).create("stuck", Limits())
    machine.kernel.busy[group.dirs["cpu"]] = 10**6
    group.remove(wait_s=0.2)
    facts = group.describe()
    assert facts["removed"] is False
    assert "Device or resource busy" in facts["remove_error"]


def test_removing_dirs_that_are_already_gone_is_fine(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    assert remove_cgroup_dirs([tmp_path / "gone"], machine.kernel) is None
