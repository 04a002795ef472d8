"""The built-in proxy's process handle (a ``sleep`` stands in for the proxy process)."""

from __future__ import annotations

import signal
import subprocess
import sys

from mqbench.faults.proxy import OUTPUT_TAIL_LINES, ProxyProcess


def test_a_stopped_proxy_process_leaves_neither_of_its_output_pipes_open() -> None:
    process = subprocess.Popen(
        ["sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    code = ProxyProcess(process, "http://127.0.0.1:1").stop()
    assert code == -signal.SIGTERM
    assert process.stdout is not None and process.stdout.closed
    assert process.stderr is not None and process.stderr.closed


def test_a_proxy_writing_more_than_a_pipe_holds_runs_on_and_its_last_lines_are_kept() -> None:
    # 2,000 lines of 100 bytes on stderr: three times what a Linux pipe holds. Unread,
    # the child would block in its write and never exit.
    writer = (
        "import sys\n"
        "for n in range(2000): sys.stderr.write(f'warning {n:04d} ' + 'x' * 87 + '\\n')\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", writer], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    proxy = ProxyProcess(process, "http://127.0.0.1:1")
    try:
        assert process.wait(timeout=20) == 0
    finally:
        code = proxy.stop()
    assert code == 0
    assert len(proxy.output_tail) == OUTPUT_TAIL_LINES
    assert proxy.output_tail[-1].startswith("warning 1999 ")
    assert process.stdout is not None and process.stdout.closed
    assert process.stderr is not None and process.stderr.closed
