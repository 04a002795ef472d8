"""A real HDFS for the tests: Hadoop's MiniDFSCluster on 127.0.0.1, started by PID.

The jars (``org.apache.hadoop:hadoop-client-minicluster``, the version of PySpark's own
``hadoop-client-api`` jars) come from Maven Central through the same fetch as the Java
brokers (``mqbench.brokers.java.maven``); ``scripts/install.sh --dev`` runs
``python tests/integration/hdfs_minicluster.py fetch``. The launcher
(``tests/integration/java/MiniHdfs.java``) is compiled once into the cache.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mqbench.brokers.java.maven import (
    Artifact,
    Installed,
    JavaDistribution,
    fetch,
    find_tool,
    installed,
)

HADOOP_VERSION = "3.5.0"
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TestJavaDistribution(JavaDistribution):
    """A Java program for tests: its launcher source lives next to the tests."""

    __test__ = False  # not a pytest test class

    @property
    def launcher_source(self) -> Path:
        """The launcher's Java source file (under ``tests/integration/java``)."""
        return Path(__file__).parent / "java" / f"{self.launcher}.java"


MINI_HDFS = TestJavaDistribution(
    name="hdfs-minicluster",
    version=HADOOP_VERSION,
    artifacts=(Artifact("org.apache.hadoop", "hadoop-client-minicluster", HADOOP_VERSION),),
    launcher="MiniHdfs",
)


def missing() -> str | None:
    """Why the minicluster cannot start here (None: it can)."""
    found = installed(MINI_HDFS)
    if find_tool("java") is None:
        return "java is not installed"
    if found is None or not found.launcher_compiled():
        return (
            f"the HDFS minicluster jars are not fetched; run scripts/install.sh --dev "
            f"(or: {sys.executable} {__file__} fetch)"
        )
    return None


class MiniHdfs:
    """One MiniDFSCluster process (a name node and a data node), ours to stop by PID."""

    def __init__(self, found: Installed, base: Path) -> None:
        self.base = base
        self.uri_file = base / "namenode.uri"
        java = find_tool("java")
        assert java is not None
        log = (base / "minihdfs.log").open("wb")
        # Jetty unpacks its web apps into java.io.tmpdir: into the test's folder, not /tmp.
        (base / "tmp").mkdir(exist_ok=True)
        self.process = subprocess.Popen(
            [
                str(java),
                "-Xmx512m",
                f"-Djava.io.tmpdir={base / 'tmp'}",
                "-cp",
                found.classpath(),
                MINI_HDFS.launcher,
                str(base / "data"),
                str(self.uri_file),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=base,
        )
        log.close()

    def wait(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The name node's URI (``hdfs://127.0.0.1:PORT``) once the cluster is up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.uri_file.exists():
                return self.uri_file.read_text().strip()
            if self.process.poll() is not None:
                tail = (self.base / "minihdfs.log").read_text(errors="replace")[-500:]
                raise RuntimeError(f"MiniHdfs exited with {self.process.returncode}: {tail}")
            time.sleep(0.3)
        raise RuntimeError(f"MiniHdfs did not come up within {timeout_s:.0f} s")

    def stop(self) -> None:
        """SIGTERM (the shutdown hook stops the cluster), SIGKILL after 20 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start(base: Path) -> MiniHdfs:
    """Start a minicluster with its files under ``base`` (the caller stops it)."""
    found = installed(MINI_HDFS)
    assert found is not None, missing()
    return MiniHdfs(found, base)


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        raise SystemExit(f"usage: {sys.argv[0]} fetch")
    done = fetch(MINI_HDFS)
    print(f"hdfs-minicluster {HADOOP_VERSION}: {done.directory}")
