"""Native resource profiles on real brokers: cgroup limits read back, thread knobs, CPU cap.

Needs write access to the cgroup controllers (root here); without it the tests skip with
the reason (and ``tests/unit/test_native_profiles.py`` checks that runs then refuse).
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqbench.brokers.base import RunningBroker
from mqbench.brokers.resources.cgroups import CgroupError, CgroupManager
from mqbench.cli.app import app

pytestmark = pytest.mark.integration

NativeBrokerFactory = Callable[..., RunningBroker]
GIB = 1024**3


@pytest.fixture(scope="module")
def cgroup_version() -> int:
    try:
        return CgroupManager().check_writable().version
    except CgroupError as exc:
        pytest.skip(f"cgroups not writable here: {exc}")


def memory_limit_file(cgroup: dict[str, object]) -> Path:
    paths = cgroup["paths"]
    assert isinstance(paths, dict)
    if cgroup["version"] == 1:
        return Path(paths["memory"]) / "memory.limit_in_bytes"
    return Path(paths["unified"]) / "memory.max"


def test_a_broker_under_a_profile_runs_in_its_cgroup_with_the_limits_read_back(
    native_broker: NativeBrokerFactory, cgroup_version: int
) -> None:
    broker = native_broker("mosquitto", resources="1cpu-2g")
    pid = broker.pids[0]
    facts = broker.info.resources
    assert (facts["profile"], facts["cpus"], facts["mem_mb"]) == ("1cpu-2g", 1, 2048)
    cgroup = facts["cgroup"]
    assert cgroup["version"] == cgroup_version
    # The memory limit as the kernel holds it, read back from the cgroup file.
    assert int(memory_limit_file(cgroup).read_text()) == 2 * GIB
    assert cgroup["memory_limit_bytes"] == 2 * GIB
    assert (cgroup["cpu_quota_us"], cgroup["cpu_period_us"]) == (100000, 100000)
    # The broker process itself (not only the wrapper) is in every hierarchy's cgroup.
    own = Path(f"/proc/{pid}/cgroup").read_text()
    name = Path(next(iter(cgroup["paths"].values()))).name
    assert own.count(name) == (3 if cgroup_version == 1 else 1)
    assert os.sched_getaffinity(pid) == {int(cgroup["cpuset_cpus"].split(",")[0].split("-")[0])}
    assert facts["knobs"] == {}  # mosquitto is single-threaded: nothing to tune
    broker.stop()
    for path in cgroup["paths"].values():
        assert not Path(path).exists()
    assert broker.info.resources["cgroup"]["removed"] is True


def test_a_jvm_under_a_profile_takes_its_heap_and_processor_count(
    native_broker: NativeBrokerFactory, cgroup_version: int
) -> None:
    broker = native_broker("artemis", resources="1cpu-2g", startup_timeout_s=60.0)
    facts = broker.info.resources
    assert facts["knobs"]["jvm_flags"] == ["-XX:ActiveProcessorCount=1", "-Xms1024m", "-Xmx1024m"]
    assert broker.info.settings["heap_max"] == "1024m"
    flags = Path(broker.info.log_path).read_text().splitlines()[0]
    assert "-XX:ActiveProcessorCount=1" in flags
    assert "-XX:MaxHeapSize=1073741824" in flags
    assert int(memory_limit_file(facts["cgroup"]).read_text()) == 2 * GIB


def test_nats_under_a_profile_gets_gomaxprocs(
    native_broker: NativeBrokerFactory, cgroup_version: int
) -> None:
    broker = native_broker("nats", resources="1cpu-2g")
    environ = Path(f"/proc/{broker.pids[0]}/environ").read_bytes().split(b"\0")
    assert b"GOMAXPROCS=1" in environ
    assert broker.info.resources["knobs"] == {"GOMAXPROCS": 1}


@pytest.mark.slow
def test_rabbitmq_under_a_profile_runs_one_scheduler_per_cpu(
    native_broker: NativeBrokerFactory, cgroup_version: int
) -> None:
    broker = native_broker("rabbitmq-mqtt", resources="1cpu-2g", startup_timeout_s=120.0)
    pid = broker.pids[0]
    names = [
        Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        for tid in os.listdir(f"/proc/{pid}/task")
    ]
    assert sorted(n for n in names if n.endswith("_scheduler")) == ["1_scheduler"]
    assert broker.info.resources["knobs"] == {"erl_flags": "+S 1:1"}


LOAD = """\
name: cpu-cap
targets: [hivemq]
runtime: native
resources: 1cpu-2g
workload:
  topology: pairs
  pairs: 20
  rate: 1000
  payload: 256
  qos: 0
  warmup: 2s
  duration: 8s
  drain: 2s
"""


def broker_cpu(cell: Path) -> list[float]:
    with (cell / "resources.csv").open() as fh:
        return [float(r["cpu_cores"]) for r in csv.DictReader(fh) if r["role"] == "broker"]


@pytest.mark.slow
def test_a_broker_under_the_one_cpu_profile_never_exceeds_one_core_under_load(
    tmp_path: Path, cgroup_version: int
) -> None:
    # HiveMQ at 20000 msg/s (20 pairs x 1000 msg/s, 256 B) took 1.2 cores on average (1.5
    # at peak) of this 2-core machine without limits; under 1cpu-2g the sampler must never
    # see more than one.
    scenario = tmp_path / "load.yaml"
    scenario.write_text(LOAD)
    result = CliRunner().invoke(
        app, ["run", str(scenario), "--out", str(tmp_path / "r"), "--no-analyze"]
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "r" / "cpu-cap").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (cell,) = manifest["cells"]
    assert cell["status"] == "completed"
    cgroup = cell["broker"]["resources"]["cgroup"]
    assert (cgroup["cpu_quota_us"], cgroup["cpu_period_us"]) == (100000, 100000)
    capped = broker_cpu(run_dir / "cells" / cell["id"])
    assert len(capped) >= 8
    assert max(capped) <= 1.1, capped
    assert sum(capped) / len(capped) >= 0.25, capped  # the broker was working, not idle


BURNERS = 3
BURN = "while :; do :; done"


def test_the_cpu_quota_throttles_a_group_that_wants_more_than_one_core(
    tmp_path: Path, cgroup_version: int
) -> None:
    # The quota alone (no cpuset): three busy loops in one cgroup with a 1-CPU quota. The
    # kernel's own counter (nr_throttled) proves the group asked for more than its quota
    # and was held to it; the sampler must never see more than one core.
    import subprocess

    from mqbench.brokers.resources.cgroups import Limits
    from mqbench.brokers.resources.sampler import ResourceSampler

    group = CgroupManager().create(f"burn-{os.getpid()}", Limits(cpus=1))
    starts = " ".join(f"sh -c '{BURN}' & p{i}=$!;" for i in range(BURNERS))
    script = f"{starts} sleep 4; kill {' '.join(f'$p{i}' for i in range(BURNERS))}"
    proc = subprocess.Popen(group.wrap(["sh", "-c", script]), start_new_session=True)
    try:
        sampler = ResourceSampler(tmp_path / "resources.csv", {"burn": [proc.pid]})
        time.sleep(0.3)
        sampler.start()
        time.sleep(3.2)
        sampler.stop()
        key = "cpu" if cgroup_version == 1 else "unified"
        stat = dict(
            line.split() for line in (group.dirs[key] / "cpu.stat").read_text().splitlines()
        )
    finally:
        proc.wait(timeout=10)
        group.remove()
    assert group.removed
    with (tmp_path / "resources.csv").open() as fh:
        cores = [float(r["cpu_cores"]) for r in csv.DictReader(fh)]
    assert len(cores) >= 2
    assert max(cores) <= 1.1, cores
    assert int(stat["nr_throttled"]) > 0, stat
