"""The native runtime: brokers as local processes on 127.0.0.1, one spec per target.

``NativeRuntime.start`` picks a port (or checks the requested one), lets the target's spec
write its config into the request's work directory, starts the broker in its own session
with stdout and stderr in ``<workdir>/<spec>.log``, and waits until a protocol-level probe
succeeds, the process exits, or ``startup_timeout_s`` passes. Whatever fails, nothing it
started is left running. ``NativeBroker.stop`` sends SIGTERM to the broker's PID, waits up
to 10 s, then SIGKILLs it.

The runtime knows no broker by name: the target's definition (``registry.py``) gives the
spec, and for a ``resources`` option (a profile) the thread knobs that
``native_profiles.NativeLimiter`` applies to the plan; the broker then starts inside a
cgroup of its own, removed after the broker stopped (``info.resources`` records what was
applied).
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from mqbench.brokers.base import Availability, RuntimeCapabilities, StartRequest
from mqbench.brokers.info import NativeInfo
from mqbench.brokers.registry import Target, get_definition, get_target, native_specs
from mqbench.brokers.resources.native_profiles import NativeLimiter, split_profile
from mqbench.brokers.runtime.liveness import ExitCallback, ProcessExitWatch
from mqbench.brokers.runtime.native_spec import NativeSpec, ReadyCheck
from mqbench.brokers.runtime.net import free_port, port_in_use
from mqbench.endpoint import Endpoint
from mqbench.errors import BrokerError
from mqbench.process import interrupts, lifeline

STOP_GRACE_S = 10.0
"""How long ``stop`` waits after SIGTERM before it sends SIGKILL."""
KILL_WAIT_S = 5.0
"""How long ``stop`` waits for the process to disappear after SIGKILL."""
POLL_INTERVAL_S = 0.05
"""Pause between readiness probes during start-up."""
AUTO_PORT_ATTEMPTS = 3
"""Start attempts when mqbench picked the port itself and lost the free-port race."""
TAIL_LINES_ON_ERROR = 15


def read_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ('' when it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").rstrip("\n")
    if not text:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class NativeBroker:
    """A broker process started by ``NativeRuntime`` (implements ``RunningBroker``)."""

    def __init__(
        self,
        name: str,
        process: subprocess.Popen[bytes],
        endpoint: Endpoint,
        info: NativeInfo,
        log_path: Path,
        companions: Callable[[], list[int]] | None = None,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        """Wrap a started process; ``name`` is used in messages (e.g. ``mosquitto``).

        ``companions`` lists, when called, processes outside the broker's tree to stop after
        it (``NativeSpec.companion_pids``); ``on_stopped`` runs last (cgroup removal).
        """
        self._companions = companions
        self._on_stopped = on_stopped
        self.name = name
        self._process = process
        self._endpoint = endpoint
        self._info = info
        self._log_path = log_path
        self._lock = threading.Lock()
        self._stopped = False
        self._watch: ProcessExitWatch | None = None

    def watch_exit(self, on_exit: ExitCallback) -> None:
        """Call ``on_exit`` (from a watcher thread) if the broker exits before ``stop()``."""
        if self._watch is None and not self._stopped:
            self._watch = ProcessExitWatch(self._process, on_exit)

    @property
    def endpoint(self) -> Endpoint:
        """Where clients connect."""
        return self._endpoint

    @property
    def pids(self) -> list[int]:
        """The broker's PID (its children are found by the sampler)."""
        return [self._process.pid]

    @property
    def info(self) -> NativeInfo:
        """Manifest facts: name, version, binary, argv, config, port, runtime, settings."""
        return replace(self._info)

    @property
    def log_path(self) -> Path:
        """The file holding the broker's stdout and stderr."""
        return self._log_path

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has exited, else None."""
        return self._process.poll()

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the broker's log."""
        return read_tail(self._log_path, lines)

    def companion_pids(self) -> list[int]:
        """Processes the broker started outside its own tree (``NativeSpec.companion_pids``,
        e.g. RabbitMQ's ``epmd``), found now."""
        if self._companions is None:
            return []
        try:
            return self._companions()
        except Exception:  # a lookup, never a reason to fail
            return []

    def stop(self) -> None:
        """SIGTERM the broker's PID, wait up to 10 s, then SIGKILL; idempotent; never raises."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            if self._watch is not None:
                self._watch.cancel()
            try:
                self._terminate()
            except Exception:  # stop() must never raise
                with contextlib.suppress(Exception):
                    self._process.kill()
                    self._process.wait(timeout=KILL_WAIT_S)
            self._info.exit_code = self._process.poll()
            lifeline.release(self._process.pid)
            if self._companions is not None:
                with contextlib.suppress(Exception):
                    pids = self._companions()
                    self._info.companion_pids = pids
                    for pid in pids:
                        stop_pid(pid)
            if self._on_stopped is not None:
                with contextlib.suppress(Exception):
                    self._on_stopped()

    def _terminate(self) -> None:
        proc = self._process
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=KILL_WAIT_S)

    def __enter__(self) -> NativeBroker:
        """Use as a context manager that stops the broker on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the broker."""
        self.stop()


SAME_PROCESS_TOLERANCE_S = 1.0
"""How far a PID's start time may be from the recorded one and still be the same process."""


def process_alive(pid: int, started_at: float | None = None) -> bool:
    """True while ``pid`` runs (a zombie counts as gone).

    With ``started_at`` (the process's start time as ``psutil`` reports it, recorded when
    it was started), a PID the kernel has since given to another process counts as gone:
    mqbench never signals a process it did not start.
    """
    try:
        proc = psutil.Process(pid)
        moved_on = started_at is not None and (
            abs(proc.create_time() - started_at) > SAME_PROCESS_TOLERANCE_S
        )
        if moved_on:
            return False
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return started_at is None


class StopOutcome(enum.Enum):
    """What ``stop_pid`` found and did."""

    NOT_RUNNING = "was not running"
    STOPPED = "stopped"
    KILLED = "killed after SIGTERM timed out"


def stop_pid(
    pid: int,
    grace_s: float = STOP_GRACE_S,
    *,
    started_at: float | None = None,
    process_group: bool = False,
) -> StopOutcome:
    """SIGTERM a process that is not our child, wait up to ``grace_s``, then SIGKILL it.

    ``started_at``: only a process started then is signalled (``process_alive``).
    ``process_group``: when ``pid`` leads its own process group (brokers start in a new
    session), the whole group gets the signals, so helpers it started stop with it.
    """
    if not process_alive(pid, started_at):
        return StopOutcome.NOT_RUNNING
    send = os.kill
    if process_group:
        try:
            if os.getpgid(pid) == pid:
                send = os.killpg
        except ProcessLookupError:
            return StopOutcome.NOT_RUNNING
    outcome = StopOutcome.STOPPED
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        try:
            send(pid, sig)
        except ProcessLookupError:
            return outcome
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not process_alive(pid, started_at):
                return outcome
            time.sleep(POLL_INTERVAL_S)
        outcome = StopOutcome.KILLED
    return outcome


def _releaser(limiter: NativeLimiter, info: NativeInfo) -> Callable[[], None]:
    """Removes the broker's cgroup and records the outcome in its manifest facts."""

    def release() -> None:
        limiter.release()
        info.resources = limiter.describe()

    return release


def _spawn(
    name: str,
    binary: Path,
    argv: list[str],
    request: StartRequest,
    log_path: Path,
    limiter: NativeLimiter | None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, its output into ``log_path``; tied to
    mqbench's life unless ``request.outlive_mqbench``. A start that fails releases the
    cgroup; one interrupted right after the start kills the process."""
    process: subprocess.Popen[bytes] | None = None
    try:
        # Deferred: a first Ctrl-C or SIGTERM here waits until the broker is registered.
        with interrupts.deferred(), log_path.open("wb") as log:
            process = subprocess.Popen(
                argv,
                cwd=request.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=(None if request.outlive_mqbench else lifeline.preexec_die_with_parent),
            )
            if request.outlive_mqbench:
                _reap_when_it_exits(process)
            else:
                lifeline.guard(process.pid)
    except OSError as exc:
        if limiter is not None:
            limiter.release()
        raise BrokerError(f"cannot start {name} ({binary}): {exc}") from exc
    except BaseException:  # interrupted right after the start: leave nothing running
        if process is not None:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait(KILL_WAIT_S)
            lifeline.release(process.pid)
        raise
    return process


def _reap_when_it_exits(process: subprocess.Popen[bytes]) -> None:
    """Wait for a broker left running on purpose (``brokers up``) in a daemon thread.

    Whoever stops it later (``brokers down``, by PID) may be this very process: the thread
    reaps it then, so it leaves no zombie, and its handle is never dropped while the broker
    runs (which the interpreter reports as a ``ResourceWarning``: "still running").
    """
    name = f"mqbench-reap-{process.pid}"
    threading.Thread(target=process.wait, name=name, daemon=True).start()


class _PortClash(BrokerError):
    """The broker lost the race for a port mqbench picked itself."""


class NativeRuntime:
    """Runs brokers as local processes (implements ``Runtime``)."""

    name = "native"
    capabilities = RuntimeCapabilities(
        starts_broker=True, inherits_open_files=True, cgroup_profiles=True, local_process=True
    )

    def __init__(self, specs: Mapping[str, NativeSpec] | None = None) -> None:
        """Use the given specs by name (default: a fresh spec of every registered target)."""
        self.specs: dict[str, NativeSpec] = dict(native_specs() if specs is None else specs)

    def spec_for(self, target: str) -> NativeSpec:
        """The spec that runs ``target``; BrokerError saying why when there is none."""
        tgt = get_target(target)
        spec = self.specs.get(tgt.native_spec) if tgt.native_spec else None
        if spec is None:
            raise BrokerError(self._no_spec_reason(tgt))
        return spec

    @staticmethod
    def _no_spec_reason(target: Target) -> str:
        if target.native_source is None:
            why = target.docker_only or "no native package"
            return f"{target.name} runs in Docker only: {why}; use the docker runtime"
        return (
            f"no native runtime for {target.name} in this version "
            f"(it would come from: {target.native_source})"
        )

    def availability(self, target: str) -> Availability:
        """Available when a spec exists and its executable is installed; else how to fix.

        An unknown target raises ``ScenarioError``.
        """
        try:
            spec = self.spec_for(target)
        except BrokerError as exc:
            return Availability(False, str(exc))
        if spec.find_binary() is None:
            return Availability(False, self._missing_binary_reason(spec))
        return Availability(True)

    def check_security(self, target: str, tls: bool, auth: bool) -> None:
        """The target's spec can configure TLS / users (``NativeSpec.check_security``)."""
        self.spec_for(target).check_security(tls, auth)

    def check_options(self, target: str, options: Mapping[str, Any]) -> None:
        """The broker's own options (a resources profile is the runtime's, not the broker's)."""
        _, rest = split_profile(options)
        self.spec_for(target).check_options(rest)

    @staticmethod
    def _missing_binary_reason(spec: NativeSpec) -> str:
        return spec.missing_reason()

    def start(self, request: StartRequest) -> NativeBroker:
        """Start the target's broker and return once it answers the protocol probe."""
        spec = self.spec_for(request.target)
        binary = spec.find_binary()
        if binary is None:
            raise BrokerError(self._missing_binary_reason(spec))
        try:
            request.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BrokerError(
                f"cannot create broker work directory {request.workdir}: {exc}"
            ) from exc
        if request.port is not None:
            if port_in_use(request.host, request.port):
                raise BrokerError(f"port {request.port} on {request.host} is already in use")
            return self._start_once(spec, binary, request, request.port, auto_port=False)
        last: BrokerError | None = None
        for _ in range(AUTO_PORT_ATTEMPTS):
            try:
                port = free_port(request.host)
                return self._start_once(spec, binary, request, port, auto_port=True)
            except _PortClash as exc:
                last = exc
        assert last is not None
        raise BrokerError(str(last))

    def _start_once(
        self, spec: NativeSpec, binary: Path, request: StartRequest, port: int, auto_port: bool
    ) -> NativeBroker:
        """Write the config, apply a resource profile, spawn the broker and wait until it is
        ready; a failure at any step leaves nothing running (and no cgroup)."""
        limiter, options = NativeLimiter.from_options(request.options)
        if request.security is None:
            plan = spec.prepare(binary, request.workdir, request.host, port, options)
        else:
            plan = spec.prepare_secured(
                binary, request.workdir, request.host, port, options, request.security
            )
        version = spec.version(binary)
        argv = plan.argv
        if limiter is not None:
            knobs = get_definition(request.target).knobs
            plan = limiter.tune(knobs, spec.name, plan, options)
            argv = limiter.wrap(plan.argv, f"{spec.name}-{port}")  # creates the cgroup
        log_path = request.workdir / f"{spec.name}.log"
        process = _spawn(spec.name, binary, argv, request, log_path, limiter)
        info = NativeInfo(
            name=spec.name,
            target=request.target,
            version=version,
            binary=str(binary),
            argv=list(plan.argv),
            config_path=str(plan.config_path) if plan.config_path else None,
            config=plan.config_text,
            host=request.host,
            port=port,
            pid=process.pid,
            log_path=str(log_path),
            settings=dict(plan.settings),
            resources=limiter.describe() if limiter is not None else None,
            security=request.security.describe() if request.security is not None else None,
            runtime=self.name,
        )
        broker = NativeBroker(
            spec.name,
            process,
            Endpoint(request.host, port),
            info,
            log_path,
            companions=lambda: spec.companion_pids(plan),
            on_stopped=_releaser(limiter, info) if limiter is not None else None,
        )
        try:
            ready = plan.ready_check or spec.check_ready
            self._wait_ready(ready, spec, broker, process, request, port, auto_port)
        except BaseException:
            broker.stop()
            raise
        info.started_ns = time.time_ns()
        return broker

    def _wait_ready(
        self,
        ready: ReadyCheck,
        spec: NativeSpec,
        broker: NativeBroker,
        process: subprocess.Popen[bytes],
        request: StartRequest,
        port: int,
        auto_port: bool,
    ) -> None:
        deadline = time.monotonic() + request.startup_timeout_s
        while True:
            code = process.poll()
            if code is not None:
                tail = broker.log_tail(TAIL_LINES_ON_ERROR)
                message = f"{spec.name} exited during start-up (code {code}): {tail or '(no log)'}"
                if auto_port and "in use" in tail.lower():
                    raise _PortClash(message)
                raise BrokerError(message)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tail = broker.log_tail(TAIL_LINES_ON_ERROR)
                raise BrokerError(
                    f"{spec.name} did not become ready on {request.host}:{port} within "
                    f"{request.startup_timeout_s:g} s: {tail or '(no log)'}"
                )
            if ready(request.host, port, min(remaining, 1.0)):
                return
            time.sleep(min(POLL_INTERVAL_S, max(deadline - time.monotonic(), 0.0)))
