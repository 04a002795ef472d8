"""The orphan reaper: what a process registers dies with it, even after SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = pytest.mark.integration

HELPER = """
import subprocess, sys, time
from mqbench.process import lifeline
guarded = subprocess.Popen(["sleep", "600"], start_new_session=True)
released = subprocess.Popen(["sleep", "600"], start_new_session=True)
lifeline.guard(guarded.pid)
lifeline.guard(released.pid)
lifeline.release(released.pid)
print(guarded.pid, released.pid, lifeline.reaper_pid(), flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_guarded_process_group_dies_when_its_owner_is_killed_and_a_released_one_lives() -> None:
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    released = 0
    try:
        assert helper.stdout is not None
        guarded, released, reaper = (int(x) for x in helper.stdout.readline().split())
        assert running(guarded) and running(released) and running(reaper)
        os.kill(helper.pid, signal.SIGKILL)
        helper.wait(10)
        deadline = time.monotonic() + 5
        while (running(guarded) or running(reaper)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(guarded) and not running(reaper)
        assert running(released)
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait(10)
        if helper.stdout is not None:
            helper.stdout.close()
        if released:
            with contextlib.suppress(ProcessLookupError):
                os.kill(released, signal.SIGKILL)
