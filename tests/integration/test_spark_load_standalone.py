"""Load as a Spark barrier stage on a real standalone cluster: one master and two workers
started from PySpark's own launcher (``spark-class``) on 127.0.0.1 by the fixture, stopped
by PID. A run works end to end; an executor killed mid-run fails the stage with one line,
keeps the records written so far and leaves an ``interrupted`` manifest."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_load_helpers import manifest, run, small_scenario

from mqbench.errors import LoadTaskLost
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.records.integrity import check_record_file
from mqbench.workload.spark_engine import spark_context, stop_spark

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).parent
CONF = {"spark.executor.memory": "512m", "spark.cores.max": "2"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Spark master exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the Spark master did not listen on {port} within {timeout_s:.0f} s")


class Cluster:
    """A standalone master and its workers; every process is ours, stopped by PID."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("wb")
        process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.root,
        )
        log.close()
        self.processes.append(process)
        return process

    def start(self, workers: int) -> None:
        master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(_free_port()),
        )
        _wait_for_port(self.port, master, 90)
        for i in range(workers):
            work = self.root / f"work-{i}"
            work.mkdir()
            self.workers.append(
                self._start(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(work),
                    self.url,
                )
            )

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def children_of(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == pid:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two one-core workers on 127.0.0.1, and this process's SparkContext."""
    if shutil.which("java") is None:
        pytest.skip("a standalone Spark cluster needs a Java runtime on PATH")
    spark = Cluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        spark.start(workers=2)
        spark_context(spark.url, CONF, "127.0.0.1")
        yield spark
    finally:
        stop_spark()
        spark.stop()


def test_a_standalone_cluster_runs_a_scenario_end_to_end(cluster: Cluster, tmp_path: Path) -> None:
    generator = {"engine": "spark", "master": cluster.url, "spark_conf": CONF}
    result = run(small_scenario("mosquitto", generator), tmp_path)
    assert result.status == "completed"
    totals = result.cells[0].totals
    assert totals is not None and totals.sent == totals.received == 4 * 20 * 4
    clocks = manifest(result.result_dir)["cells"][0]["clocks"]
    assert clocks["master"] == cluster.url and len(clocks["tasks"]) == 2


def test_an_executor_that_dies_mid_run_interrupts_the_run_and_keeps_its_records(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run folder goes to a file:// URI through the Hadoop FileSystem code path: the
    # interrupted manifest and the records shipped so far must be published there.
    staging, out = tmp_path / "staging", tmp_path / "out"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    generator = {"engine": "spark", "master": cluster.url, "spark_conf": CONF}
    data = small_scenario("mosquitto", generator, duration="30s")
    killed: list[int] = []

    def kill_an_executor_once_publishing() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            events = list(staging.glob("mqbench-run-*/*/*/cells/*/events.jsonl"))
            if events and "publishing_started" in events[0].read_text():
                time.sleep(2.5)  # records are shipped at least once a second
                executors = children_of(cluster.workers[1].pid)
                for pid in executors:
                    os.kill(pid, signal.SIGKILL)  # the executor our worker started
                killed.extend(executors)
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_an_executor_once_publishing, daemon=True)
    killer.start()
    with pytest.raises(LoadTaskLost) as lost:
        run(data, RemoteRoot(out.as_uri()))
    killer.join(5)
    assert killed, "no executor was found to kill"
    message = str(lost.value)
    assert "\n" not in message and "lost its connection before it finished" in message
    assert out.as_uri() in message
    assert not list(staging.glob("mqbench-run-*"))  # the driver's staging folder is gone
    result_dir = next(out.glob("*/*/manifest.json")).parent
    data_out = manifest(result_dir)
    assert data_out["status"] == "interrupted"
    cell = data_out["cells"][0]
    assert cell["status"] == "interrupted" and cell["schedule"] is not None
    cell_dir = result_dir / "cells" / cell["id"]
    unclosed = []
    for task in (0, 1):
        # every record reached the driver over the control connection (no shared disk)
        sends = check_record_file(cell_dir / f"sends-{task}.bin")
        assert sends.records >= 40  # 2 pairs x 20 msg/s x >= 1 s, shipped before the kill
        assert sends.counted is not None and sends.missing == 0 and not sends.torn_bytes
        if not sends.closed:
            unclosed.append(task)
    assert len(unclosed) == 1  # the dead task's copy holds what it shipped, never closed
    assert {t["task"] for t in cell["clocks"]["tasks"]} == {0, 1}
