"""Brokers started by hand (``mqbench brokers up|down|status|logs|fetch``): lifecycle and state.

``start_broker`` starts a target's broker with the native or docker runtime and leaves it
running; what is needed to find it again (PID and its start time, or the compose project)
goes into a state file, one per target and runtime, in ``$MQBENCH_STATE_DIR`` (default
``$XDG_CACHE_HOME/mqbench/brokers`` or ``~/.cache/mqbench/brokers``), next to the broker's
work directory (config and log). ``stop_broker`` stops it (native: SIGTERM to its process
group, SIGKILL after 10 s, through ``native.stop_pid``; docker: ``docker compose down -v``),
``broker_statuses`` says what runs and ``broker_logs`` returns the log tail. A native
broker started with a profile runs in a cgroup of its own (docs/brokers.md), which
``stop_broker`` removes. ``fetch_java_brokers`` downloads the Java brokers' jars from Maven
Central into the cache (``maven.py``).

Every function returns typed results and raises the errors of ``mqbench.errors``; the CLI
(``mqbench/cli/brokers_cmd.py``) only parses, calls one of them and prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mqbench.brokers.base import StartRequest
from mqbench.brokers.docker.engine import DockerCli
from mqbench.brokers.docker.project import ComposeProject
from mqbench.brokers.docker.runtime import DockerBroker
from mqbench.brokers.java import maven
from mqbench.brokers.registry import get_target, maven_distributions, native_specs
from mqbench.brokers.resources.native_profiles import check_native_profile
from mqbench.brokers.resources.profiles import profile_names
from mqbench.brokers.runtime.native import (
    NativeBroker,
    StopOutcome,
    process_alive,
    read_tail,
    stop_pid,
)
from mqbench.brokers.runtime.native_spec import LaunchPlan
from mqbench.brokers.runtime.registry import get_runtime, runtime_capabilities
from mqbench.brokers.runtime.settings import BrokerSettings
from mqbench.errors import BrokerError, UsageError

STATE_DIR_ENV = "MQBENCH_STATE_DIR"
"""Overrides where state files and work directories go."""
MANUAL_RUNTIMES = ("native", "docker")
"""Runtimes that can start a broker by hand."""
STOP_GRACE_S = 10.0
"""Seconds between SIGTERM and SIGKILL when stopping a native broker."""


def state_dir() -> Path:
    """Folder of state files and work directories of brokers started by hand."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mqbench" / "brokers"


@dataclass
class BrokerState:
    """What ``start_broker`` records so the other commands find the broker again."""

    target: str
    runtime: str
    host: str
    port: int
    workdir: str
    started_ns: int
    pid: int | None = None
    pid_create_time: float | None = None
    log_path: str | None = None
    project: str | None = None
    compose_file: str | None = None
    profile: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    companions: list[tuple[int, float]] = field(default_factory=list)
    """Processes the broker started outside its tree (RabbitMQ's ``epmd``): PID and start
    time, so ``down`` stops them too, and only them."""

    @property
    def local_process(self) -> bool:
        """The broker is a process recorded by PID (else a compose project)."""
        return runtime_capabilities(self.runtime).local_process

    @property
    def path(self) -> Path:
        """The state file."""
        return state_path(self.target, self.runtime)

    def save(self) -> None:
        """Write the state file (atomically)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, default=str), encoding="utf-8")
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> BrokerState:
        """Read a state file; ``BrokerError`` when it is unreadable."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**data)
        except (OSError, ValueError, TypeError) as exc:
            raise BrokerError(f"unreadable broker state file {path}: {exc}") from exc

    def project_handle(self) -> ComposeProject:
        """The compose project of a docker broker."""
        if not self.project or not self.compose_file:
            raise BrokerError(f"state file {self.path} has no compose project")
        variables = {str(k): str(v) for k, v in dict(self.info.get("variables") or {}).items()}
        return ComposeProject(self.project, Path(self.compose_file), variables, DockerCli())


@dataclass(frozen=True)
class BrokerStatus:
    """One recorded broker and a short status word (``running``, ``stopped``, ...)."""

    state: BrokerState
    status: str


@dataclass(frozen=True)
class Statuses:
    """Every recorded broker (``brokers``) and the folder their state files are in."""

    folder: Path
    brokers: list[BrokerStatus]


@dataclass(frozen=True)
class Stopped:
    """A recorded broker that ``stop_broker`` stopped, and what happened, in words."""

    state: BrokerState
    outcome: str


@dataclass(frozen=True)
class Fetched:
    """A Java broker whose jars are in the cache after ``fetch_java_brokers``."""

    target: str
    version: str
    already_cached: bool
    jars: int
    directory: Path


def state_path(target: str, runtime: str) -> Path:
    """State file of ``target`` started with ``runtime``."""
    return state_dir() / f"{target}-{runtime}.json"


def find_states(target: str | None = None, runtime: str | None = None) -> list[BrokerState]:
    """Recorded brokers, optionally only one target and/or runtime."""
    folder = state_dir()
    if not folder.is_dir():
        return []
    states = [BrokerState.load(path) for path in sorted(folder.glob("*.json"))]
    return [
        s
        for s in states
        if (target is None or s.target == target) and (runtime is None or s.runtime == runtime)
    ]


def native_alive(state: BrokerState) -> bool:
    """True when the recorded PID still runs *and* is the process ``up`` started."""
    return state.pid is not None and process_alive(state.pid, state.pid_create_time)


def docker_status(state: BrokerState) -> str:
    """``running``, ``stopped`` or the containers' states from ``docker compose ps``."""
    rows = state.project_handle().ps()
    if not rows:
        return "stopped"
    states = {str(r.get("State", "?")).lower() for r in rows}
    health = {str(r.get("Health", "")).lower() for r in rows} - {""}
    if states == {"running"} and health <= {"healthy"}:
        return "running"
    return ",".join(sorted(states | health))


def state_status(state: BrokerState) -> str:
    """A short status word."""
    if state.local_process:
        return "running" if native_alive(state) else "stopped"
    return docker_status(state)


def stop_native(state: BrokerState, grace_s: float = STOP_GRACE_S) -> str:
    """Stop a recorded native broker (its process group) by PID, then the processes it
    started outside its tree (``companions``, as ``run`` does); what happened, in words."""
    if state.pid is None:
        return StopOutcome.NOT_RUNNING.value
    outcome = stop_pid(state.pid, grace_s, started_at=state.pid_create_time, process_group=True)
    recorded: list[tuple[int, float | None]] = [(int(p), t) for p, t in state.companions]
    known = {pid for pid, _ in recorded}
    recorded += [(pid, None) for pid in _find_companions(state) if pid not in known]
    stopped = [
        pid
        for pid, started in recorded
        if stop_pid(pid, grace_s, started_at=started) is not StopOutcome.NOT_RUNNING
    ]
    text = outcome.value
    if stopped:
        text += f"; {', '.join(map(str, stopped))} it started (e.g. epmd) stopped too"
    return text


def _find_companions(state: BrokerState) -> list[int]:
    """Companions the target's spec finds now from the recorded settings (a state file
    written before companions were recorded, or one that appeared after ``up``)."""
    spec = native_specs().get(state.target)
    if spec is None:
        return []
    settings: BrokerSettings = dict(state.info.get("settings") or {})
    plan = LaunchPlan(argv=[], config_path=None, config_text="", settings=settings)
    try:
        return spec.companion_pids(plan)
    except Exception:  # a lookup, never a reason to fail the stop
        return []


def _companions(broker: NativeBroker) -> list[tuple[int, float]]:
    """The broker's companion processes with their start times (gone ones left out)."""
    found = []
    for pid in broker.companion_pids():
        with contextlib.suppress(psutil.Error):
            found.append((pid, psutil.Process(pid).create_time()))
    return found


def remove_native_cgroup(state: BrokerState) -> str:
    """Remove the cgroup a native profile created for the broker ('' or what happened)."""
    from mqbench.brokers.resources.cgroups import remove_cgroup_dirs

    cgroup = (state.info.get("resources") or {}).get("cgroup") or {}
    paths = [Path(p) for p in (cgroup.get("paths") or {}).values()]
    if not paths:
        return ""
    error = remove_cgroup_dirs(paths)
    return f"; {error}" if error else "; its cgroup removed"


def check_runtime(runtime: str) -> None:
    """``UsageError`` unless ``runtime`` can start a broker by hand."""
    if runtime not in MANUAL_RUNTIMES:
        raise UsageError(f"--runtime must be one of {', '.join(MANUAL_RUNTIMES)}, not {runtime!r}")


def start_broker(
    target: str, runtime: str, profile: str | None, port: int | None, timeout_s: float
) -> BrokerState:
    """Start ``target`` with ``runtime``, leave it running and record its state."""
    check_runtime(runtime)
    get_target(target)
    if profile is not None and profile not in profile_names():
        raise UsageError(f"unknown profile {profile!r} (known: {', '.join(profile_names())})")
    if profile is not None and runtime_capabilities(runtime).cgroup_profiles:
        check_native_profile(profile)
    for old in find_states(target, runtime):
        if state_status(old) != "stopped":
            raise BrokerError(
                f"{target} ({runtime}) already runs on {old.host}:{old.port}; "
                f"stop it first: mqbench brokers down {target} --runtime {runtime}"
            )
    rt = get_runtime(runtime)
    availability = rt.availability(target)
    if not availability.available:
        raise BrokerError(f"{target} ({runtime}): {availability.reason}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    workdir = state_dir() / f"{target}-{runtime}-{stamp}"
    options: dict[str, Any] = {"profile": profile} if profile else {}
    broker = rt.start(
        StartRequest(
            target=target,
            workdir=workdir,
            port=port,
            options=options,
            startup_timeout_s=timeout_s,
            outlive_mqbench=True,
        )
    )
    state = BrokerState(
        target=target,
        runtime=runtime,
        host=broker.endpoint.host,
        port=broker.endpoint.port,
        workdir=str(workdir),
        started_ns=time.time_ns(),
        info=broker.info.to_dict(),
    )
    if isinstance(broker, NativeBroker):
        pid = broker.pids[0]
        state.pid = pid
        with contextlib.suppress(psutil.Error):
            state.pid_create_time = psutil.Process(pid).create_time()
        state.log_path = str(broker.log_path)
        state.profile = profile
        state.companions = _companions(broker)
    elif isinstance(broker, DockerBroker):
        state.project = broker.project.name
        state.compose_file = str(broker.project.file)
        state.profile = str(broker.info.profile.get("name"))
    try:
        state.save()
    except OSError as exc:
        broker.stop()
        raise BrokerError(f"cannot write broker state {state.path}: {exc}") from exc
    return state


def stop_broker(target: str, runtime: str | None) -> list[Stopped]:
    """Stop every recorded broker of ``target`` (one runtime or all); remove their state."""
    if runtime is not None:
        check_runtime(runtime)
    get_target(target)
    states = find_states(target, runtime)
    if not states:
        raise BrokerError(
            f"no {target} broker started with `mqbench brokers up` is recorded in {state_dir()}"
        )
    done: list[Stopped] = []
    for state in states:
        if state.local_process:
            outcome = stop_native(state)
            outcome += remove_native_cgroup(state)
        else:
            proc = state.project_handle().down()
            if proc.returncode != 0:
                detail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
                raise BrokerError(f"`docker compose down` of {state.project} failed: {detail[0]}")
            outcome = "containers, networks and volumes removed"
        state.path.unlink(missing_ok=True)
        done.append(Stopped(state, outcome))
    return done


def broker_statuses(target: str | None = None) -> Statuses:
    """Every recorded broker (or those of ``target``) with its status."""
    if target is not None:
        get_target(target)
    rows = [BrokerStatus(s, state_status(s)) for s in find_states(target)]
    return Statuses(state_dir(), rows)


def broker_logs(target: str, runtime: str | None, lines: int) -> str:
    """The log tail of a recorded broker."""
    get_target(target)
    states = find_states(target, runtime)
    if not states:
        raise BrokerError(f"no {target} broker started with `mqbench brokers up` is recorded")
    if len(states) > 1:
        raise UsageError(f"{target} runs in several runtimes; pick one with --runtime")
    state = states[0]
    if state.local_process:
        return read_tail(Path(state.log_path or ""), lines)
    return state.project_handle().logs(lines)


def fetch_java_brokers(targets: list[str] | None = None) -> Iterator[Fetched]:
    """Fetch the jars of the given Java brokers (default: all), one result as each is done.

    Every name is checked before anything is fetched: an unknown target is a
    ``ScenarioError`` listing the known ones, a target that is not a Java broker a
    ``UsageError``.
    """
    dists = maven_distributions()
    names = targets or list(dists)
    for name in names:
        if name not in dists:
            get_target(name)
            raise UsageError(f"{name} is not fetched from Maven (Java brokers: {', '.join(dists)})")
    return _fetch(names, dists)


def _fetch(names: list[str], dists: dict[str, maven.JavaDistribution]) -> Iterator[Fetched]:
    for name in names:
        dist = dists[name]
        already = maven.installed(dist) is not None
        found = maven.fetch(dist)
        yield Fetched(name, dist.version, already, len(found.jars), found.directory)
