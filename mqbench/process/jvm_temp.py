"""The temporary folder of the JVMs this process starts (Spark's driver and local executors).

A JVM writes into ``java.io.tmpdir`` (``/tmp`` by default) and does not always clean up:
lz4-java unpacks ``liblz4-java-*.so`` there on every start and leaves it behind, and
Spark's scratch folders (``spark.local.dir`` defaults to ``java.io.tmpdir``) outlive a
killed JVM. mqbench points ``java.io.tmpdir`` of the JVMs it starts at one folder per
process, created on first use and removed when the process exits.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

TMPDIR_OPTION = "-Djava.io.tmpdir="
"""The JVM option that names the temporary folder."""

_folder: Path | None = None


def jvm_temp_dir() -> Path:
    """This process's folder for its JVMs' temporary files (removed at exit)."""
    global _folder
    if _folder is None or not _folder.is_dir():
        _folder = Path(tempfile.mkdtemp(prefix="mqbench-jvm-"))
        atexit.register(shutil.rmtree, _folder, True)
    return _folder


def with_jvm_temp_dir(java_options: str) -> str:
    """``java_options`` with ``java.io.tmpdir`` pointed at :func:`jvm_temp_dir`, unless
    the options already choose a folder (the user's choice stands)."""
    if TMPDIR_OPTION in java_options:
        return java_options
    return f"{java_options} {TMPDIR_OPTION}{jvm_temp_dir()}".strip()


def spark_temp_conf(settings: dict[str, str], master: str) -> dict[str, str]:
    """``settings`` with the driver's (and, for a master on this machine, the executors')
    ``extraJavaOptions`` pointed at :func:`jvm_temp_dir`; an executor on another host
    keeps its own temporary folder (this one does not exist there)."""
    out = dict(settings)
    keys = ["spark.driver.extraJavaOptions"]
    if master == "local" or master.startswith(("local[", "local-cluster[")):
        keys.append("spark.executor.extraJavaOptions")
    for key in keys:
        out[key] = with_jvm_temp_dir(out.get(key, ""))
    return out
