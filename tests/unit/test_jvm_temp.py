"""The JVMs mqbench starts keep their temporary files in a folder of the process, removed at
exit (``mqbench.process.jvm_temp``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mqbench.process.jvm_temp import TMPDIR_OPTION, jvm_temp_dir, spark_temp_conf

DRIVER, EXECUTOR = "spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"


def test_a_local_master_points_the_driver_and_its_executors_at_the_process_folder() -> None:
    settings = spark_temp_conf({DRIVER: "-XX:TieredStopAtLevel=1"}, "local-cluster[2,1,1024]")
    folder = jvm_temp_dir()
    assert settings[DRIVER] == f"-XX:TieredStopAtLevel=1 {TMPDIR_OPTION}{folder}"
    assert settings[EXECUTOR] == f"{TMPDIR_OPTION}{folder}"
    assert folder.is_dir()


def test_executors_on_other_hosts_and_a_folder_the_user_chose_are_left_alone() -> None:
    mine = f"{TMPDIR_OPTION}/scratch"
    settings = spark_temp_conf({DRIVER: mine}, "spark://10.0.0.1:7077")
    assert settings == {DRIVER: mine}


def test_the_folder_goes_when_the_process_exits() -> None:
    code = (
        "from mqbench.process.jvm_temp import jvm_temp_dir; d = jvm_temp_dir(); "
        "(d / 'liblz4-java-1.so').write_bytes(b'x'); print(d)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("mqbench-jvm-")
    assert not folder.exists()
