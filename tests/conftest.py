"""Shared by every test: the user's calibration file is never touched; no child outlives a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_calibration(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point ``MQBENCH_CALIBRATION`` at a file that does not exist (tests may replace it)."""
    path = tmp_path_factory.mktemp("calibration") / "calibration.json"
    monkeypatch.setenv("MQBENCH_CALIBRATION", str(path))
    return path


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """End the run with no child process of the test process still running."""
    _stop_spark_jvm()
    if "mqbench.process.lifeline" in sys.modules:
        # The orphan reaper lives as long as the process that started it, by design; its
        # end of input is the signal to take down anything a test left registered.
        from mqbench.process.lifeline import stop_reaper

        stop_reaper()


def _stop_spark_jvm() -> None:
    """Stop the Spark JVM this test process started, if it started one.

    PySpark keeps its gateway JVM for the life of the process (a later session reuses it)
    and, on Linux, relies on the JVM exiting when its stdin closes at process exit.
    """
    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()  # the JVM exits on end of input
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    SparkContext._gateway = None
    SparkContext._jvm = None
