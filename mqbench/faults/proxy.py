"""mqbench's built-in Toxiproxy: many named TCP proxies with toxics, behind the Toxiproxy API.

Three ways to run it:

* in a running event loop: ``server = ProxyServer(); url = await server.start()`` ...
  ``await server.stop()``. Do not call the *synchronous* ``ToxiproxyClient`` from that same
  loop's thread (it would block the loop that has to answer it); use
  ``AsyncToxiproxyClient`` or ``server.registry`` directly;
* in a thread of its own: ``with ProxyServerThread() as server: server.url`` ...;
* as a process: ``python -m mqbench.faults.proxy --api-port 8474`` prints one ready line

      mqbench-proxy ready url=http://127.0.0.1:8474 version=mqbench-proxy/0.1.0 toxiproxy=2.12.0 ...

  (flushed) and serves until SIGTERM or SIGINT, then closes every proxy and exits 0.
  ``start_proxy_process`` starts it and waits for that line.

See ``docs/faults.md`` for the API, the toxic semantics and how a real Toxiproxy is used
instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from types import TracebackType
from typing import IO, Final

from mqbench.errors import MqbenchError
from mqbench.faults.api import TOXIPROXY_VERSION, ToxiproxyApi, version_text
from mqbench.faults.api_server import HttpApiServer
from mqbench.faults.tcp import ProxyRegistry
from mqbench.process import interrupts, lifeline

READY_PREFIX: Final = "mqbench-proxy ready"
"""Start of the line the process prints once the API listens."""
DEFAULT_API_HOST: Final = "127.0.0.1"
"""Address the API listens on unless told otherwise."""
STOP_GRACE_S: Final = 5.0
"""How long stopping waits for the process or thread before giving up / killing."""


class ProxyStartError(MqbenchError):
    """The built-in proxy server could not be started."""


class ProxyServer:
    """The proxy registry plus its HTTP API, in the current event loop."""

    def __init__(self, *, seed: int | None = None) -> None:
        """Create an empty server; ``seed`` fixes toxicity rolls and jitter."""
        self.registry = ProxyRegistry(seed=seed)
        self._http = HttpApiServer(ToxiproxyApi(self.registry))
        self.url = ""

    async def start(self, api_host: str = DEFAULT_API_HOST, api_port: int = 0) -> str:
        """Serve the API on ``api_host:api_port`` (0: a free port); return its base URL."""
        try:
            await self._http.start(api_host, api_port)
        except OSError as exc:
            raise ProxyStartError(
                f"built-in proxy: cannot listen on {api_host}:{api_port}: {exc}"
            ) from exc
        self.url = f"http://{self._http.host}:{self._http.port}"
        return self.url

    async def stop(self) -> None:
        """Stop the API and delete every proxy (their connections are closed)."""
        await self._http.stop()
        await self.registry.close()


class ProxyServerThread:
    """A ``ProxyServer`` on its own event loop in a daemon thread (a context manager)."""

    def __init__(
        self, *, api_host: str = DEFAULT_API_HOST, api_port: int = 0, seed: int | None = None
    ) -> None:
        """Prepare; ``start`` (or ``with``) runs it."""
        self._host = api_host
        self._port = api_port
        self.server = ProxyServer(seed=seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        """The API's base URL (set once started)."""
        return self.server.url

    def start(self, timeout_s: float = 10.0) -> str:
        """Start the thread and wait until the API listens; return its URL."""
        self._thread = threading.Thread(target=self._run, name="mqbench-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise ProxyStartError(f"built-in proxy did not start within {timeout_s:g} s")
        if self._error is not None:
            if isinstance(self._error, MqbenchError):
                raise self._error
            raise ProxyStartError(f"built-in proxy failed to start: {self._error}")
        return self.url

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.server.start(self._host, self._port)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.server.stop()

    def stop(self) -> None:
        """Stop the server and join the thread (bounded by ``STOP_GRACE_S``)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(STOP_GRACE_S)

    def __enter__(self) -> ProxyServerThread:
        """Start and return self."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop."""
        self.stop()


OUTPUT_TAIL_LINES: Final = 50
"""Lines of the proxy process's output kept for diagnostics (the rest is read and dropped)."""


class _OutputTail:
    """Reads a child's output pipe to its end on a daemon thread, keeping the last lines.

    A pipe nobody reads fills (64 KiB on Linux) and then blocks the child's next write: a
    proxy whose event loop logs a warning per failing connection during a long fault run
    would freeze mid-write, and with it every connection it carries.
    """

    def __init__(self, pipe: IO[str], name: str) -> None:
        self._pipe = pipe
        self._lines: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self._thread = threading.Thread(target=self._read, name=name, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        # The thread owns the pipe: closing it from another thread while this one is
        # blocked in a read would wait for that read to return.
        with self._pipe, contextlib.suppress(OSError, ValueError):
            for line in self._pipe:
                self._lines.append(line.rstrip("\n"))

    def finish(self, timeout_s: float) -> list[str]:
        """Wait (bounded) for the end of the output (the pipe is then closed); the last lines."""
        self._thread.join(timeout_s)
        return list(self._lines)


class ProxyProcess:
    """A ``python -m mqbench.faults.proxy`` child process (see ``start_proxy_process``)."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        """Wrap a started process whose API answers at ``url``; its output is read from now on."""
        self.process = process
        self.url = url
        self._tails = [
            _OutputTail(pipe, f"mqbench-proxy-{name}-{process.pid}")
            for name, pipe in (("stdout", process.stdout), ("stderr", process.stderr))
            if pipe is not None
        ]
        self.output_tail: list[str] = []
        """The last lines the process wrote (stdout, then stderr), once it was stopped."""

    @property
    def pid(self) -> int:
        """The process id (for resource sampling)."""
        return self.process.pid

    def stop(self) -> int:
        """SIGTERM, wait up to ``STOP_GRACE_S``, then SIGKILL; return the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_GRACE_S)
        lifeline.release(self.process.pid)
        self.output_tail = [line for tail in self._tails for line in tail.finish(STOP_GRACE_S)]
        return int(self.process.returncode)


def start_proxy_process(
    api_port: int = 0,
    *,
    api_host: str = DEFAULT_API_HOST,
    seed: int | None = None,
    timeout_s: float = 15.0,
) -> ProxyProcess:
    """Start the proxy as a child process and wait for its ready line (bounded)."""
    argv = [sys.executable, "-m", "mqbench.faults.proxy", "--api-host", api_host]
    argv += ["--api-port", str(api_port)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    with interrupts.deferred():  # registered for cleanup before a Ctrl-C can land
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=lifeline.preexec_die_with_parent,
        )
        lifeline.guard(process.pid)
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                continue
            line = process.stdout.readline()
            if line.startswith(READY_PREFIX):
                url = line.split("url=", 1)[1].split()[0]
                return ProxyProcess(process, url)
            if not line:  # EOF: the process exited
                break
    err = ""
    if process.poll() is None:
        process.kill()
        process.wait(STOP_GRACE_S)
    lifeline.release(process.pid)
    process.stdout.close()
    if process.stderr is not None:
        lines = process.stderr.read().strip().splitlines()
        err = lines[-1] if lines else ""
        process.stderr.close()
    raise ProxyStartError(
        f"built-in proxy process did not become ready within {timeout_s:g} s"
        f" (exit code {process.returncode}){': ' + err if err else ''}"
    )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mqbench.faults.proxy",
        description="mqbench's built-in Toxiproxy-API proxy server.",
    )
    parser.add_argument("--api-host", default=DEFAULT_API_HOST)
    parser.add_argument("--api-port", type=int, default=8474, help="0 = any free port")
    parser.add_argument("--seed", type=int, default=None, help="fix toxicity rolls and jitter")
    parser.add_argument("--no-uvloop", action="store_true", help="use asyncio's default loop")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> int:
    server = ProxyServer(seed=args.seed)
    try:
        url = await server.start(args.api_host, args.api_port)
    except ProxyStartError as exc:
        print(f"mqbench-proxy: {exc}", file=sys.stderr, flush=True)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(
        f"{READY_PREFIX} url={url} version={version_text()} toxiproxy={TOXIPROXY_VERSION}"
        f" pid={os.getpid()}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await server.stop()
    print("mqbench-proxy stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the proxy server until SIGTERM/SIGINT; return the exit code."""
    args = _parse_args(argv)
    if not args.no_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            return int(uvloop.run(_serve(args)))
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
