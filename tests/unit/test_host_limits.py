"""What a container may get on the engine's host: the nofile ceiling, CPUs and memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbench.brokers.docker.host_limits import (
    NOFILE_REQUEST,
    HostLimits,
    nofile_ceiling,
    read_process_limits,
)
from mqbench.brokers.resources.profiles import get_profile
from mqbench.errors import BrokerError

LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            {soft}                {hard}                files
Max locked memory         8388608              8388608              bytes
"""
WITHOUT_SYS_RESOURCE = "000001fffeffffff"
"""The CapEff of this project's CI sandbox: every capability but CAP_SYS_RESOURCE (bit 24)."""
FULL_ROOT = "000001ffffffffff"


def fake_proc(root: Path, pid: int, hard: str, cap_eff: str, nr_open: int = 1048576) -> Path:
    proc = root / str(pid)
    proc.mkdir(parents=True)
    (proc / "limits").write_text(LIMITS.format(soft=hard, hard=hard), encoding="ascii")
    (proc / "status").write_text(f"Name:\tdockerd\nCapEff:\t{cap_eff}\n", encoding="ascii")
    (proc / "comm").write_text("dockerd\n")
    (root / "sys" / "fs").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "fs" / "nr_open").write_text(f"{nr_open}\n")
    return proc


def test_an_engine_without_cap_sys_resource_is_held_to_its_own_hard_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mqbench.brokers.docker.host_limits.PID_FILES", ())
    fake_proc(tmp_path, 4242, "20000", WITHOUT_SYS_RESOURCE)
    assert nofile_ceiling(tmp_path) == 20000


def test_an_engine_with_cap_sys_resource_may_go_up_to_nr_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mqbench.brokers.docker.host_limits.PID_FILES", ())
    fake_proc(tmp_path, 4242, "524288", FULL_ROOT, nr_open=1048576)
    assert nofile_ceiling(tmp_path) == 1048576


def test_the_engine_is_found_by_its_pid_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "docker.pid"
    pid_file.write_text("77\n")
    monkeypatch.setattr("mqbench.brokers.docker.host_limits.PID_FILES", (pid_file,))
    proc = fake_proc(tmp_path / "proc", 77, "4096", WITHOUT_SYS_RESOURCE)
    (proc / "comm").write_text("something-else\n")
    assert nofile_ceiling(tmp_path / "proc") == 4096


def test_unreadable_limits_are_none() -> None:
    assert read_process_limits(Path("/nonexistent/proc/1")) is None


def test_containers_get_the_request_when_the_host_allows_it_and_no_note() -> None:
    limits = HostLimits(cpus=8, mem_bytes=None, nofile_ceiling=1048576)
    assert limits.nofile == NOFILE_REQUEST == 300000
    assert limits.nofile_note() is None
    assert HostLimits(cpus=None, mem_bytes=None, nofile_ceiling=None).nofile == 300000


def test_containers_get_the_hosts_ceiling_and_one_line_says_so() -> None:
    limits = HostLimits(cpus=2, mem_bytes=None, nofile_ceiling=20000)
    assert limits.nofile == 20000
    assert limits.nofile_note() == (
        "containers get nofile 20000: the compose files ask for 300000, above this host's "
        "hard limit of 20000 (the engine cannot raise it)"
    )


def test_a_profile_above_the_engines_cpus_or_memory_is_refused_in_one_line() -> None:
    host = HostLimits(cpus=2, mem_bytes=6 * 1024**3, nofile_ceiling=None)
    host.check_profile(get_profile("2cpu-4g"))
    host.check_profile(get_profile("unlimited"))
    with pytest.raises(BrokerError) as cpus:
        host.check_profile(get_profile("4cpu-8g"))
    assert str(cpus.value) == (
        "resources profile '4cpu-8g' asks for 4 CPUs but the Docker engine's host has 2 "
        "(docker refuses cpus above that)"
    )
    with pytest.raises(BrokerError, match="asks for 4096 MiB of memory but the Docker"):
        HostLimits(cpus=8, mem_bytes=3 * 1024**3, nofile_ceiling=None).check_profile(
            get_profile("2cpu-4g")
        )
