"""The built-in proxy's process handle (a ``sleep`` stands in for the proxy process)."""

from __future__ import annotations

import signal
import subprocess

from mqbench.faults.proxy import ProxyProcess


def test_a_stopped_proxy_process_leaves_neither_of_its_output_pipes_open() -> None:
    process = subprocess.Popen(
        ["sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    code = ProxyProcess(process, "http://127.0.0.1:1").stop()
    assert code == -signal.SIGTERM
    assert process.stdout is not None and process.stdout.closed
    assert process.stderr is not None and process.stderr.closed
