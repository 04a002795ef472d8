"""Load from an executor on another host: a Spark worker in a network namespace of its own
(its own address, reached over a veth pair) and a mount namespace of its own (a private
``/tmp``: it cannot see the driver's result folder). The broker, the driver's control and
time services bind to the driver's veth address (``broker.host``); the run must still
deliver every message and leave every record in the driver's result folder."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_load_helpers import manifest, run, small_scenario
from test_spark_load_standalone import SPARK_HOME, Cluster, _free_port

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.records.format import RECORD_SIZE
from mqbench.workload.spark_engine import spark_context, stop_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

# What the executor runs from (the interpreter's environment, Spark, the mqbench source):
# on a real other host these are installed at the same paths (docs/distributed.md).
CHECKOUT = (Path(sys.prefix), SPARK_HOME, Path(__file__).resolve().parents[2])
CONF = {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2"}


class OtherHost:
    """A network namespace joined to this one by a veth pair: ``driver`` and ``executor``
    are the two ends' addresses. Created and removed by this test only."""

    def __init__(self) -> None:
        tag = os.getpid() % 100_000
        self.netns = f"mqb{tag}"
        self.veth = f"mqbd{tag}"
        self.peer = f"mqbe{tag}"
        subnet = 64 + tag % 128
        self.driver = f"10.213.{subnet}.1"
        self.executor = f"10.213.{subnet}.2"

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    def create(self) -> None:
        self._ip("netns", "add", self.netns)
        self._ip("link", "add", self.veth, "type", "veth", "peer", "name", self.peer)
        self._ip("link", "set", self.peer, "netns", self.netns)
        self._ip("addr", "add", f"{self.driver}/24", "dev", self.veth)
        self._ip("link", "set", self.veth, "up")
        inside = ("netns", "exec", self.netns, "ip")
        self._ip(*inside, "addr", "add", f"{self.executor}/24", "dev", self.peer)
        self._ip(*inside, "link", "set", self.peer, "up")
        self._ip(*inside, "link", "set", "lo", "up")

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=10)

    def command(self, argv: list[str], keep: Sequence[Path] = ()) -> list[str]:
        """``argv`` run on the other host with a private ``/tmp`` (same PID: every step
        execs the next). The private ``/tmp`` is empty except for the ``keep`` folders that
        lie under ``/tmp`` (the checkout and its ``.venv`` when cloned there): each is
        opened before the tmpfs hides it and bind-mounted back through its descriptor."""
        return [
            "ip", "netns", "exec", self.netns,
            "unshare", "--mount", "--propagation", "private",
            "sh", "-c", private_tmp_script(keep), "sh", *argv,
        ]  # fmt: skip


def private_tmp_script(keep: Sequence[Path]) -> str:
    """The shell that mounts an empty tmpfs on ``/tmp``, carries the ``keep`` folders under
    ``/tmp`` over into it, then execs its arguments."""
    under_tmp = sorted({p.resolve() for p in keep if p.resolve().is_relative_to("/tmp")})
    under_tmp = [p for p in under_tmp if not any(p.is_relative_to(q) and p != q for q in under_tmp)]
    opens = [f"exec {3 + i}<{shlex.quote(str(p))}" for i, p in enumerate(under_tmp)]
    binds = [
        f"mkdir -p {shlex.quote(str(p))} && "
        f"mount --no-canonicalize --bind /proc/self/fd/{3 + i} {shlex.quote(str(p))} && "
        f"exec {3 + i}<&-"
        for i, p in enumerate(under_tmp)
    ]
    steps = [*opens, "mount -t tmpfs mqbench-private /tmp", *binds, 'exec "$@"']
    return " && ".join(steps)


class SplitCluster(Cluster):
    """The standalone master on the driver's address, one worker on the other host."""

    def __init__(self, root: Path, host: OtherHost) -> None:
        super().__init__(root)
        self.host = host
        self.env["SPARK_LOCAL_IP"] = host.driver
        self.url = f"spark://{host.driver}:{self.port}"

    def start(self, workers: int) -> None:
        master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", self.host.driver,
            "--port", str(self.port),
            "--webui-port", str(_free_port()),
        )  # fmt: skip
        self._wait(master)
        env = {**self.env, "SPARK_LOCAL_IP": self.host.executor}
        argv = [
            str(SPARK_HOME / "bin" / "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            "--host", self.host.executor,
            "--cores", str(workers),
            "--memory", "2g",
            "--work-dir", "/tmp/spark-work",
            self.url,
        ]  # fmt: skip
        log = (self.root / "worker.log").open("wb")
        process = subprocess.Popen(
            self.host.command(argv, keep=CHECKOUT),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd="/",
        )
        log.close()
        self.processes.append(process)
        self.workers.append(process)

    def _wait(self, master: subprocess.Popen[bytes]) -> None:
        import socket
        import time

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if master.poll() is not None:
                raise RuntimeError(f"the Spark master exited with {master.returncode}")
            try:
                with socket.create_connection((self.host.driver, self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("the Spark master did not listen within 90 s")


@pytest.fixture(scope="module")
def split_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SplitCluster]:
    """A master here and a two-core worker on another (namespaced) host."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("network namespaces need root, iproute2 and unshare")
    if shutil.which("java") is None:
        pytest.skip("a standalone Spark cluster needs a Java runtime on PATH")
    host = OtherHost()
    cluster = SplitCluster(tmp_path_factory.mktemp("spark-other-host"), host)
    try:
        host.create()
        cluster.start(workers=2)
        spark_context(cluster.url, CONF, host.driver)
        yield cluster
    finally:
        stop_spark()
        cluster.stop()
        host.remove()


def test_an_executor_on_another_host_without_the_drivers_disk_delivers_every_record(
    split_cluster: SplitCluster, tmp_path: Path
) -> None:
    generator = {"engine": "spark", "master": split_cluster.url, "spark_conf": CONF}
    data = small_scenario("nats", generator)
    data["broker"] = {"host": split_cluster.host.driver}
    result = run(data, tmp_path)
    assert result.status == "completed", result.cells[0].error
    totals = result.cells[0].totals
    assert totals is not None and totals.sent == totals.received == 4 * 20 * 4
    cell = manifest(result.result_dir)["cells"][0]
    assert len(cell["clocks"]["tasks"]) == 2
    cell_dir = result.result_dir / "cells" / cell["id"]
    sends = sum(p.stat().st_size for p in cell_dir.glob("sends-*.bin")) // RECORD_SIZE
    deliveries = sum(p.stat().st_size for p in cell_dir.glob("deliveries-*.bin")) // RECORD_SIZE
    assert sends >= totals.sent and deliveries >= totals.received
    summary = analyze_cell_numpy(result.cells[0], cell_dir)
    assert summary.received == 4 * 20 * 3 and summary.lost == 0 and summary.valid, (
        summary.invalid_reasons
    )
    roles = {
        line.split(",")[1] for line in (cell_dir / "resources.csv").read_text().splitlines()[1:]
    }
    # the executor's own CPU/RSS samples crossed over with its records
    assert {"generator", "generator:task-0@" + os.uname().nodename} <= roles


def test_the_other_hosts_private_tmp_shows_the_checkout_and_hides_the_drivers_files(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a mount namespace needs root and unshare")
    checkout = tmp_path / "clone"
    (checkout / ".venv").mkdir(parents=True)
    (checkout / ".venv" / "python").write_text("interpreter\n")
    (tmp_path / "result.bin").write_text("the driver's")
    look = f"cat {checkout}/.venv/python; test ! -e {tmp_path}/result.bin && echo hidden"
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    argv += [private_tmp_script([checkout / ".venv", checkout]), "sh", "sh", "-c", look]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["interpreter", "hidden"], done.stderr
