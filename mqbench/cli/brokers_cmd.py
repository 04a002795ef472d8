"""``mqbench brokers up|down|status|logs|fetch``: work with a broker by hand.

``up`` starts a target's broker with the native or docker runtime and leaves it running;
what is needed to find it again (PID and its start time, or the compose project) goes into
a state file, one per target and runtime, in ``$MQBENCH_STATE_DIR`` (default
``$XDG_CACHE_HOME/mqbench/brokers`` or ``~/.cache/mqbench/brokers``), next to the broker's
work directory (config and log). ``down`` stops it (native: SIGTERM to its process group,
SIGKILL after 10 s; docker: ``docker compose down -v``), ``status`` shows what runs and
``logs`` prints the log tail. ``up --profile`` with the native runtime puts the broker into a
cgroup of its own (docs/brokers.md), which ``down`` removes. ``fetch`` downloads the Java
brokers' jars from Maven Central into the cache (``mqbench/brokers/maven.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import psutil
import typer
from rich.console import Console
from rich.table import Table

from mqbench.brokers.base import StartRequest
from mqbench.brokers.docker import ComposeProject, DockerBroker, DockerCli
from mqbench.brokers.native import NativeBroker, read_tail
from mqbench.brokers.native_profiles import check_native_profile
from mqbench.brokers.profiles import profile_names
from mqbench.brokers.registry import get_target
from mqbench.brokers.runtimes import get_runtime
from mqbench.cli.errors import guarded
from mqbench.errors import BrokerError, UsageError

console = Console(highlight=False, soft_wrap=True)

brokers_app = typer.Typer(
    help=(
        "Start, stop and inspect brokers by hand.\n\n"
        "Examples:\n\n"
        "  mqbench brokers up mosquitto\n\n"
        "  mqbench brokers up emqx --runtime docker --profile 1cpu-2g\n\n"
        "  mqbench brokers status\n\n"
        "  mqbench brokers logs emqx --runtime docker\n\n"
        "  mqbench brokers down emqx"
    ),
    no_args_is_help=True,
)

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
    """What ``up`` records so ``down``, ``status`` and ``logs`` find the broker again."""

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
        return ComposeProject(self.project, Path(self.compose_file), cli=DockerCli())


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
    if state.pid is None:
        return False
    try:
        proc = psutil.Process(state.pid)
        if (
            state.pid_create_time is not None
            and abs(proc.create_time() - state.pid_create_time) > 1.0
        ):
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


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
    """A short status word for ``status``."""
    if state.runtime == "native":
        return "running" if native_alive(state) else "stopped"
    return docker_status(state)


def stop_native(state: BrokerState, grace_s: float = STOP_GRACE_S) -> str:
    """SIGTERM the broker's process group, SIGKILL after ``grace_s``; what happened."""
    if not native_alive(state):
        return "was not running"
    assert state.pid is not None
    pid = state.pid
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return "was not running"
    sender = os.killpg if pgid == pid else os.kill
    with contextlib.suppress(ProcessLookupError):
        sender(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not native_alive(state):
            return "stopped"
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        sender(pid, signal.SIGKILL)
    for _ in range(100):
        if not native_alive(state):
            break
        time.sleep(0.05)
    return "killed after SIGTERM timed out"


def remove_native_cgroup(state: BrokerState) -> str:
    """Remove the cgroup a native profile created for the broker ('' or what happened)."""
    from mqbench.brokers.cgroups import remove_cgroup_dirs

    cgroup = (state.info.get("resources") or {}).get("cgroup") or {}
    paths = [Path(p) for p in (cgroup.get("paths") or {}).values()]
    if not paths:
        return ""
    error = remove_cgroup_dirs(paths)
    return f"; {error}" if error else "; its cgroup removed"


def _check_runtime(runtime: str) -> None:
    if runtime not in MANUAL_RUNTIMES:
        raise UsageError(f"--runtime must be one of {', '.join(MANUAL_RUNTIMES)}, not {runtime!r}")


RuntimeOption = Annotated[
    str, typer.Option("--runtime", help="native (local process) or docker (compose project).")
]
TargetArg = Annotated[str, typer.Argument(metavar="TARGET", help="A target, e.g. mosquitto.")]


def start_broker(
    target: str, runtime: str, profile: str | None, port: int | None, timeout_s: float
) -> BrokerState:
    """Start ``target`` with ``runtime``, leave it running and record its state."""
    _check_runtime(runtime)
    get_target(target)
    if profile is not None and profile not in profile_names():
        raise UsageError(f"unknown profile {profile!r} (known: {', '.join(profile_names())})")
    if profile is not None and runtime == "native":
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
        info=broker.info,
    )
    if isinstance(broker, NativeBroker):
        pid = broker.pids[0]
        state.pid = pid
        with contextlib.suppress(psutil.Error):
            state.pid_create_time = psutil.Process(pid).create_time()
        state.log_path = str(broker.log_path)
        state.profile = profile
    elif isinstance(broker, DockerBroker):
        state.project = broker.project.name
        state.compose_file = str(broker.project.file)
        state.profile = str(broker.info.get("profile", {}).get("name"))
    try:
        state.save()
    except OSError as exc:
        broker.stop()
        raise BrokerError(f"cannot write broker state {state.path}: {exc}") from exc
    return state


def stop_broker(target: str, runtime: str | None) -> list[tuple[BrokerState, str]]:
    """Stop every recorded broker of ``target`` (one runtime or all); remove their state."""
    if runtime is not None:
        _check_runtime(runtime)
    get_target(target)
    states = find_states(target, runtime)
    if not states:
        raise BrokerError(
            f"no {target} broker started with `mqbench brokers up` is recorded in {state_dir()}"
        )
    done: list[tuple[BrokerState, str]] = []
    for state in states:
        if state.runtime == "native":
            outcome = stop_native(state)
            outcome += remove_native_cgroup(state)
        else:
            proc = state.project_handle().down()
            if proc.returncode != 0:
                detail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
                raise BrokerError(f"`docker compose down` of {state.project} failed: {detail[0]}")
            outcome = "containers, networks and volumes removed"
        state.path.unlink(missing_ok=True)
        done.append((state, outcome))
    return done


def broker_logs(target: str, runtime: str | None, lines: int) -> str:
    """The log tail of a recorded broker."""
    get_target(target)
    states = find_states(target, runtime)
    if not states:
        raise BrokerError(f"no {target} broker started with `mqbench brokers up` is recorded")
    if len(states) > 1:
        raise UsageError(f"{target} runs in several runtimes; pick one with --runtime")
    state = states[0]
    if state.runtime == "native":
        return read_tail(Path(state.log_path or ""), lines)
    return state.project_handle().logs(lines)


@brokers_app.command("up")
def up(
    target: TargetArg,
    runtime: RuntimeOption = "native",
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help="resource profile (container limits, or a cgroup for native): "
            + ", ".join(profile_names()),
        ),
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Host port for clients (default: a free one).")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait until the broker is ready.")
    ] = 60.0,
) -> None:
    """Start a broker and leave it running.

    Example: mqbench brokers up emqx --runtime docker --profile 2cpu-4g
    """

    def go() -> None:
        state = start_broker(target, runtime, profile, port, timeout)
        where = f"{state.host}:{state.port}"
        extra = f", project {state.project}" if state.project else f", pid {state.pid}"
        console.print(f"{target} is up ({runtime}{extra}) at {where}")
        console.print(f"stop it with: mqbench brokers down {target} --runtime {runtime}")

    guarded(go)


@brokers_app.command("down")
def down(
    target: TargetArg,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="Only this runtime (default: all).")
    ] = None,
) -> None:
    """Stop a broker started with `mqbench brokers up`.

    Example: mqbench brokers down mosquitto
    """

    def go() -> None:
        for state, outcome in stop_broker(target, runtime):
            console.print(f"{state.target} ({state.runtime}): {outcome}")

    guarded(go)


@brokers_app.command("status")
def status(
    target: Annotated[
        str | None, typer.Argument(metavar="[TARGET]", help="Only this target.")
    ] = None,
) -> None:
    """Show brokers started with `mqbench brokers up`.

    Example: mqbench brokers status
    """

    def go() -> None:
        if target is not None:
            get_target(target)
        states = find_states(target)
        if not states:
            console.print(f"no brokers started by hand (state folder: {state_dir()})")
            return
        table = Table(show_edge=False)
        for column in ("target", "runtime", "status", "endpoint", "pid/project", "profile"):
            table.add_column(column)
        for s in states:
            table.add_row(
                s.target,
                s.runtime,
                state_status(s),
                f"{s.host}:{s.port}",
                str(s.pid) if s.pid is not None else str(s.project),
                s.profile or "-",
            )
        console.print(table)

    guarded(go)


@brokers_app.command("fetch")
def fetch(
    targets: Annotated[
        list[str] | None,
        typer.Argument(metavar="[TARGET]...", help="Java brokers to fetch (default: all)."),
    ] = None,
) -> None:
    """Fetch the Java brokers' jars from Maven Central into the cache (needs mvn and javac).

    Example: mqbench brokers fetch artemis hivemq
    """

    def go() -> None:
        from mqbench.brokers import maven
        from mqbench.brokers.registry import maven_distributions

        dists = maven_distributions()
        names = targets or list(dists)
        for name in names:
            if name not in dists:
                get_target(name)  # an unknown target: ScenarioError listing the known ones
                raise UsageError(
                    f"{name} is not fetched from Maven (Java brokers: {', '.join(dists)})"
                )
        for name in names:
            dist = dists[name]
            already = maven.installed(dist) is not None
            found = maven.fetch(dist)
            what = "already in the cache" if already else f"fetched {len(found.jars)} jars"
            console.print(f"{name} {dist.version}: {what} ({found.directory})")

    guarded(go)


@brokers_app.command("logs")
def logs(
    target: TargetArg,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="Which runtime's broker.")
    ] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many lines.")] = 50,
) -> None:
    """Print the last log lines of a broker started with `mqbench brokers up`.

    Example: mqbench brokers logs rabbitmq-mqtt --runtime docker -n 100
    """

    def go() -> None:
        text = broker_logs(target, runtime, lines)
        console.print(text or "(the log is empty)", markup=False)

    guarded(go)
