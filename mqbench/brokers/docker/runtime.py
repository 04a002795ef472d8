"""The docker runtime: each broker as a ``docker compose`` project from ``compose/``.

``DockerRuntime.start``:

1. checks the runtime is usable (docker CLI, compose plugin, an engine answering
   ``docker info``) and explains what is missing otherwise;
2. takes the target's compose entry from its definition (``registry.py``), resolves the
   resource profile (``options["resources"]`` or ``options["profile"]``,
   default ``2cpu-4g``; ``mqbench/brokers/resources/profiles.py``) and picks host ports (the
   request's port, else free ports) bound to the request's loopback address;
3. chooses each service's image (``images.py``: the official image when the engine has it
   or can pull it, else the locally built stand-in, recorded as such; one line naming
   ``mqbench brokers build-images`` when neither exists), passes the choice as the
   service's ``MQBENCH_IMAGE_<SERVICE>`` variable, and runs
   ``docker compose -p mqbench-<target>-<id> -f compose/<file> up -d --wait --wait-timeout <s>``,
   so it returns only when every healthcheck passes (the timeout is the request's, raised
   to a per-target floor for slow first boots);
4. runs the target's docker hooks, if its definition has any (TBMQ waits for
   ``/actuator/health`` and creates MQTT credentials: ``definitions/tbmq.py``);
5. reads the project's containers through the Docker SDK (image digests into ``info``, the
   manifest) and hands back a ``DockerBroker`` whose ``resource_source()`` samples the
   containers' stats at 1 Hz (``docker_stats.py``).

Whatever fails, ``docker compose down -v --remove-orphans`` removes the project's
containers, networks and volumes before ``BrokerError`` is raised; the message says what
failed (no engine, pull failure, unhealthy container with its last log lines, port taken).

``DOCKER_HOST`` is honoured (the CLI and the SDK both read it). With a remote engine the
broker's ports are published on *that* machine, so clients must connect to its address;
mqbench's scenarios only allow loopback hosts, so a remote engine needs an explicit
``bind`` option (e.g. ``0.0.0.0``) and is meant for ``mqbench brokers up`` and external
runs; see docs/docker.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from mqbench.brokers.base import Availability, BrokerSecurity, RuntimeCapabilities, StartRequest
from mqbench.brokers.definition import ComposeStarted, DockerHooks, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry, compose_dir, load_compose, service_images
from mqbench.brokers.docker.engine import (
    CHECK_TIMEOUT_S,
    DockerCli,
    EngineFacts,
    check_engine,
    engine_remote_host,
    last_lines,
)
from mqbench.brokers.docker.fault_proxy import BrokerSite, ContainerToxiproxy, start_toxiproxy
from mqbench.brokers.docker.image_engine import SdkEngine, close_sdk_client
from mqbench.brokers.docker.images import (
    ImageEngine,
    ImageSelector,
    choose_images,
    image_policy,
    image_problem,
)
from mqbench.brokers.docker.network import host_network_document, network_mode
from mqbench.brokers.docker.project import ComposeProject, failed_services
from mqbench.brokers.docker.security import (
    MOUNT_PRIVATE,
    MOUNT_WORK,
    StagedConfig,
    secured_service,
    stage_secured,
)
from mqbench.brokers.docker.stats import (
    ContainerRef,
    ContainerStatsSource,
    ProxyCpu,
    proxy_pids,
    sdk_stats_reader,
)
from mqbench.brokers.docker.verification import verify
from mqbench.brokers.info import DockerInfo
from mqbench.brokers.registry import compose_entry, docker_option_owners, get_definition
from mqbench.brokers.resources.profiles import Profile, get_profile
from mqbench.brokers.runtime.liveness import ContainerExitWatch, ContainerInspector, ExitCallback
from mqbench.brokers.runtime.native_spec import ReadyCheck
from mqbench.brokers.runtime.net import free_port, is_loopback, port_in_use
from mqbench.endpoint import Endpoint
from mqbench.errors import BrokerError, names_in_one_line
from mqbench.process.lifeline import guard_compose, release_compose

PROJECT_PREFIX = "mqbench-"
"""Every compose project mqbench starts is named ``mqbench-<target>-<6 hex digits>``."""
UP_GRACE_S = 60.0
"""Extra time the ``up`` subprocess gets beyond ``--wait-timeout`` (create, network)."""
BUILD_GRACE_S = 900.0
"""Extra time when ``up`` builds an image (a buildable service whose image is nowhere)."""
TAIL_LINES_ON_ERROR = 15
RUNTIME_OPTIONS = frozenset({"resources", "profile", "bind", "network"})
"""Options the docker runtime understands for every target (``StartRequest.options``); a
target's docker hooks may add their own (``DockerHooks.options``)."""


def known_options() -> frozenset[str]:
    """Every docker runtime option: the runtime's own and those of every target's hooks."""
    return RUNTIME_OPTIONS | frozenset(docker_option_owners())


class DockerBroker:
    """A broker running as a compose project (implements ``RunningBroker``)."""

    def __init__(
        self,
        project: ComposeProject,
        endpoint: Endpoint,
        info: DockerInfo,
        containers: list[ContainerRef],
        stats_reader: Callable[[str], Mapping[str, Any]] | None,
        inspect: ContainerInspector | None = None,
        site: BrokerSite | None = None,
        proxy_ports: Sequence[int] = (),
        sdk_client: Any = None,
    ) -> None:
        """Wrap a started project; ``containers`` are sampled through ``stats_reader`` and
        watched for exits through ``inspect`` (``APIClient.inspect_container``); ``site``
        says where the broker is on its network (for a Toxiproxy container next to it);
        ``sdk_client``, the SDK client behind both, is closed by ``stop()``."""
        self.project = project
        self.site = site
        self._proxy_ports = list(proxy_ports)
        self._fault_proxy: ContainerToxiproxy | None = None
        self._endpoint = endpoint
        self._info = info
        self.containers = containers
        self._stats_reader = stats_reader
        self._inspect = inspect
        self._sdk_client = sdk_client
        self._lock = threading.Lock()
        self._stopped = False
        self._watch: ContainerExitWatch | None = None

    def watch_exit(self, on_exit: ExitCallback) -> None:
        """Call ``on_exit`` when a container of the project stops before ``stop()``."""
        if self._inspect is None or not self.containers or self._watch is not None:
            return
        pairs = [(c.id, c.pid) for c in self.containers]
        self._watch = ContainerExitWatch(pairs, self._inspect, on_exit)

    @property
    def endpoint(self) -> Endpoint:
        """Where clients connect."""
        return self._endpoint

    def start_fault_proxy(self) -> ContainerToxiproxy:
        """A Toxiproxy container on this project's network (``fault_proxy.py``)."""
        if self.site is None:
            raise BrokerError(
                "faults.proxy 'container' joins the broker's bridge network; a broker on "
                "the host's network (network: host) has none (use proxy: builtin)"
            )
        if self._fault_proxy is None:
            docker = self.project.cli.binary() or "docker"
            self._fault_proxy = start_toxiproxy(self.site, docker)
        return self._fault_proxy

    @property
    def pids(self) -> list[int]:
        """Empty: containers are sampled through the Docker stats API, not psutil."""
        return []

    @property
    def info(self) -> DockerInfo:
        """Manifest facts: images and digests, profile, ports, project, engine."""
        return replace(self._info)

    def resource_source(self) -> ContainerStatsSource | None:
        """Rows for ``resources.csv``: ``broker`` (summed) and ``broker:<service>``."""
        if self._stats_reader is None or not self.containers:
            return None
        pids = proxy_pids(self._proxy_ports) if self._proxy_ports else []
        proxies = ProxyCpu(pids) if pids else None
        return ContainerStatsSource(self.containers, self._stats_reader, proxies=proxies)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of every service's log."""
        return self.project.logs(lines)

    def stop(self) -> None:
        """``docker compose down -v --remove-orphans``; idempotent; never raises."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            if self._watch is not None:
                self._watch.cancel()
            if self._fault_proxy is not None:
                self._fault_proxy.stop()
            try:
                proc = self.project.down()
                self._info.down_exit_code = proc.returncode
                if proc.returncode != 0:
                    self._info.down_error = last_lines(proc.stderr)
                else:
                    release_compose(self.project.name)
            except Exception as exc:  # stop() must never raise
                self._info.down_error = str(exc)
            close_sdk_client(self._sdk_client)

    def __enter__(self) -> DockerBroker:
        """Use as a context manager that stops the project on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the project."""
        self.stop()


def _sdk_client(env: Mapping[str, str]) -> Any:
    import docker  # the Docker SDK; imported here so the module loads without it

    return docker.from_env(environment=dict(env), timeout=int(CHECK_TIMEOUT_S))


@dataclass
class _Launch:
    """One start in progress: what ``_prepare`` decided, what ``_launch`` found."""

    definition: TargetDefinition
    entry: ComposeEntry
    profile: Profile
    project: ComposeProject
    ports: dict[str, int]
    bind: str
    endpoint_host: str
    facts: EngineFacts
    staged: StagedConfig | None
    resolved: dict[str, Any]
    timeout_s: float
    image_choices: dict[str, Any] = field(default_factory=dict)
    """Per service: the image chosen and whether it is official or local (``images.py``)."""
    hook_facts: dict[str, Any] = field(default_factory=dict)


class DockerRuntime:
    """Runs brokers as compose projects (implements ``Runtime``)."""

    name = "docker"
    capabilities = RuntimeCapabilities(
        starts_broker=True, inherits_open_files=False, cgroup_profiles=False, local_process=False
    )

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        client_factory: Callable[[Mapping[str, str]], Any] = _sdk_client,
        compose_folder: Path | None = None,
        wait_ready: ReadyWait | None = None,
        image_engine: Callable[[Any], ImageEngine] | None = None,
    ) -> None:
        """``env`` (default ``os.environ``), the SDK client factory, the compose folder,
        the host-side readiness wait of secured brokers and the image engine (made from the
        SDK client) are injectable so tests can use a fake CLI and a fake SDK."""
        self.cli = DockerCli(env)
        self._client_factory = client_factory
        self._image_engine = image_engine or self._sdk_images
        self._compose_folder = compose_folder
        self._wait_ready = wait_ready or wait_until_ready
        self._engine: EngineFacts | str | None = None

    def _sdk_images(self, sdk: Any) -> ImageEngine:
        return SdkEngine(self.cli.env, client=sdk, cli=self.cli.run)

    @property
    def folder(self) -> Path:
        """The folder holding the compose files."""
        return self._compose_folder or compose_dir()

    def engine(self) -> EngineFacts | str:
        """The engine's facts, or one line on what is missing (checked once, then cached)."""
        if self._engine is None:
            self._engine = check_engine(self.cli)
        return self._engine

    def engine_problem(self) -> str | None:
        """None when CLI, compose plugin and engine work; otherwise what is missing."""
        engine = self.engine()
        return engine if isinstance(engine, str) else None

    def _facts(self) -> EngineFacts:
        engine = self.engine()
        if isinstance(engine, str):
            raise BrokerError(engine)
        return engine

    def availability(self, target: str) -> Availability:
        """Available when the target has a compose file and the engine works; else why not.
        Images that are not here do not make a target unavailable (``start`` pulls them, or
        runs a local stand-in), but the reason then names them and how to get each.

        An unknown target raises ``ScenarioError``.
        """
        get_definition(target)
        try:
            ct = compose_entry(target)
        except BrokerError as exc:
            return Availability(False, str(exc))
        path = ct.path(self.folder)
        if not path.is_file():
            return Availability(
                False, f"compose file {path} not found (set MQBENCH_COMPOSE_DIR to the folder)"
            )
        problem = self.engine_problem()
        if problem is not None:
            return Availability(False, problem)
        document = load_compose(path, {**self.cli.env})
        buildable = frozenset(
            name
            for name, spec in document["services"].items()
            if isinstance(spec, Mapping) and "build" in spec
        )
        try:
            sdk = self._sdk()
            try:
                missing = image_problem(
                    service_images(document), self._image_engine(sdk), buildable
                )
            finally:
                close_sdk_client(sdk)
        except BrokerError as exc:
            return Availability(False, str(exc))
        return Availability(True, missing or "")

    def verification(self, target: str) -> str:
        """What was and was not verified of ``target`` in Docker, in one line
        (``verification.py``); empty for a target without a compose entry, whose
        availability already says why Docker cannot run it."""
        if get_definition(target).compose is None:
            return ""
        return verify(target, compose_images(target, self.folder)).describe()

    def check_options(self, target: str, options: Mapping[str, Any]) -> None:
        """Only the docker runtime's own options (``known_options``); a resources profile
        that fits the engine's host (docker refuses more CPUs than the host has)."""
        known = known_options()
        unknown = sorted(set(options) - known)
        if unknown:
            raise BrokerError(
                f"unknown docker runtime option(s) {names_in_one_line(unknown)} "
                f"(known: {', '.join(sorted(known))})"
            )
        network_mode(target, compose_entry(target), options)
        engine = self.engine()
        if not isinstance(engine, str):
            profile = get_profile(options.get("resources") or options.get("profile"))
            engine.limits.check_profile(profile)

    def notes(self) -> list[str]:
        """One line per limit the host cannot give as asked (e.g. ``nofile``)."""
        engine = self.engine()
        if isinstance(engine, str):
            return []
        note = engine.limits.nofile_note()
        return [note] if note else []

    def check_security(self, target: str, tls: bool, auth: bool) -> None:
        """TLS and users need the target's secured container config (its definition's
        ``secured_container``) and an engine on this machine (the run's key and password
        files are bind-mounted from here); otherwise one line saying why."""
        if not (tls or auth):
            return
        definition = get_definition(target)
        container = definition.secured_container
        if container is None:
            raise BrokerError(
                f"the docker runtime does not configure TLS or authentication for {target}: "
                f"{definition.docker_security_gap or 'no secured container config'}; use "
                "runtime: native, or runtime: external with a broker you configured"
            )
        if definition.native is not None:
            definition.native().check_security(tls, auth)
        remote = engine_remote_host(self.cli.env)
        if remote is not None:
            raise BrokerError(
                f"{target}: a secured broker in Docker mounts the run's key and password files "
                f"from this machine, which the engine at {remote} (DOCKER_HOST) cannot see; "
                "run mqbench on that machine"
            )

    def start(self, request: StartRequest) -> DockerBroker:
        """Start the target's compose project and return once it is healthy."""
        security = request.security
        if security is not None:
            self.check_security(request.target, security.tls is not None, security.auth)
        availability = self.availability(request.target)
        if not availability.available:
            raise BrokerError(f"{request.target}: {availability.reason}")
        self.check_options(request.target, request.options)
        launch = self._prepare(request)
        guard_compose(launch.project.name, self.cli.binary() or "docker")
        try:
            client, containers, images = self._launch(launch, request)
        except BaseException:
            with contextlib.suppress(Exception):
                launch.project.down()
            release_compose(launch.project.name)
            raise
        api = getattr(client, "api", None)
        reader = sdk_stats_reader(api) if api is not None else None
        inspect = getattr(api, "inspect_container", None) if api is not None else None
        if request.outlive_mqbench:
            release_compose(launch.project.name)
        info = self._info(launch, request, images)
        endpoint = Endpoint(launch.endpoint_host, launch.ports[launch.entry.port_var])
        return DockerBroker(
            launch.project,
            endpoint,
            info,
            containers,
            reader,
            inspect,
            self._site(launch, request.workdir),
            self._proxied_ports(launch),
            client,
        )

    def _proxied_ports(self, launch: _Launch) -> list[int]:
        """Published ports whose ``docker-proxy`` runs on this machine (none on the host's
        network or with a remote engine): their CPU is sampled as role ``docker-proxy``."""
        service = launch.resolved["services"][launch.entry.service]
        if service.get("network_mode") == "host" or engine_remote_host(self.cli.env):
            return []
        return sorted(launch.ports.values())

    def _site(self, launch: _Launch, workdir: Path) -> BrokerSite | None:
        """Where the broker is on its project's bridge network (None on the host's)."""
        service = launch.resolved["services"][launch.entry.service]
        if service.get("network_mode") == "host":
            return None
        port = launch.ports[launch.entry.port_var]
        return BrokerSite(
            launch.project,
            launch.entry.service,
            _container_port(launch.resolved, launch.entry.service, port),
            launch.bind,
            launch.facts.limits.nofile,
            workdir,
            self.folder,
            self._choose_images,
        )

    def _prepare(self, request: StartRequest) -> _Launch:
        """Ports, variables and files of the project; nothing runs yet."""
        definition = get_definition(request.target)
        ct = compose_entry(request.target)
        opts = request.options
        profile = get_profile(opts.get("resources") or opts.get("profile"))
        hook_variables = _hook_variables(definition, opts)
        remote = engine_remote_host(self.cli.env)
        bind = str(opts.get("bind") or request.host)
        if remote is not None and is_loopback(bind):
            raise BrokerError(
                f"DOCKER_HOST points at another machine ({remote}); ports bound to {bind} there "
                "are unreachable from here. Pass the 'bind' option (e.g. 0.0.0.0) to publish "
                "them on that machine's interfaces, or run the broker there and use the "
                "external runtime through an SSH tunnel (docs/docker.md)"
            )
        ports = self._ports(ct, request, bind, remote)
        facts = self._facts()
        project = ComposeProject(
            f"{PROJECT_PREFIX}{request.target}-{secrets.token_hex(3)}",
            ct.path(self.folder),
            {
                **profile.env(),
                "MQBENCH_BIND": bind,
                "MQBENCH_NOFILE": str(facts.limits.nofile),
                **{var: str(port) for var, port in ports.items()},
                **hook_variables,
            },
            self.cli,
        )
        try:
            request.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BrokerError(
                f"cannot create broker work directory {request.workdir}: {exc}"
            ) from exc
        network = network_mode(request.target, ct, opts)
        staged: StagedConfig | None = None
        if request.security is not None:
            if network == "host":
                raise BrokerError(
                    f"{request.target}: network: host does not take TLS or users (the "
                    "secured config listens on the container's port); use network: bridge"
                )
            staged = self._stage_secured(
                project, definition, ct, request.security, request, profile
            )
        if network == "host":
            self._host_network(project, ct, bind, ports, request.workdir)
        image_choices = self._choose_images(project, request.target)
        resolved = self._record_files(project, request.workdir)
        return _Launch(
            definition,
            ct,
            profile,
            project,
            ports,
            bind,
            remote or request.host,
            facts,
            staged,
            resolved,
            max(request.startup_timeout_s, ct.min_startup_s),
            image_choices,
        )

    def _launch(
        self, launch: _Launch, request: StartRequest
    ) -> tuple[Any, list[ContainerRef], dict[str, Any]]:
        """Images, ``up --wait``, hooks and the secured probe; raises on any failure (the
        SDK client is then closed; otherwise it is the started broker's)."""
        started = time.monotonic()
        self._up(launch, request.target)
        client = self._sdk()
        try:
            containers, images = self._after_launch(launch, request, client, started)
        except BaseException:
            close_sdk_client(client)
            raise
        return client, containers, images

    def _after_launch(
        self, launch: _Launch, request: StartRequest, client: Any, started: float
    ) -> tuple[list[ContainerRef], dict[str, Any]]:
        """The project's containers, then its hooks and the secured probe."""
        ct, project = launch.entry, launch.project
        containers, images = _containers(client, project.name)
        hooks = launch.definition.docker_hooks
        if hooks is not None:
            remaining = max(launch.timeout_s - (time.monotonic() - started), 5.0)
            launch.hook_facts = self._after_up(
                project,
                hooks,
                ct,
                ComposeStarted(
                    request.target,
                    launch.endpoint_host,
                    dict(launch.ports),
                    request.options,
                    remaining,
                ),
            )
        if launch.staged is not None:
            remaining = max(launch.timeout_s - (time.monotonic() - started), 5.0)
            self._secured_ready(
                project,
                request.target,
                ct,
                launch.staged,
                launch.endpoint_host,
                launch.ports,
                remaining,
            )
        return containers, images

    def _info(self, launch: _Launch, request: StartRequest, images: dict[str, Any]) -> DockerInfo:
        """Manifest facts of a started project."""
        ct, project, facts = launch.entry, launch.project, launch.facts
        info = DockerInfo(
            name=ct.service,
            target=request.target,
            runtime=self.name,
            project=project.name,
            compose_file=str(project.file),
            compose_sha256=hashlib.sha256(project.file.read_bytes()).hexdigest(),
            variables=dict(project.variables),
            profile=launch.profile.describe(),
            nofile=facts.limits.nofile,
            network=network_mode(request.target, ct, request.options),
            host=launch.endpoint_host,
            bind=launch.bind,
            port=launch.ports[ct.port_var],
            ports=dict(launch.ports),
            docker_host=self.cli.env.get("DOCKER_HOST") or None,
            engine_version=facts.engine_version,
            compose_version=facts.compose_version,
            cgroup_version=facts.cgroup_version,
            services=images,
            images=launch.image_choices,
            version=images.get(ct.service, {}).get("image"),
            started_ns=time.time_ns(),
            hook_facts=dict(launch.hook_facts),
        )
        staged = launch.staged
        if request.security is None or staged is None:
            return info
        return replace(
            info,
            security=request.security.describe(),
            secured_container={
                "user": staged.user,
                "mounts": {
                    str(MOUNT_WORK): str(staged.work),
                    str(MOUNT_PRIVATE): f"{staged.private} (read-only)",
                },
                "argv": list(staged.plan.argv),
                "healthcheck": list(staged.healthcheck),
            },
            config_path=(
                staged.mounts.seen(staged.plan.config_path) if staged.plan.config_path else None
            ),
            config=staged.plan.config_text,
            settings=dict(staged.plan.settings),
        )

    @staticmethod
    def _after_up(
        project: ComposeProject, hooks: DockerHooks, ct: ComposeEntry, started: ComposeStarted
    ) -> dict[str, Any]:
        try:
            return hooks.after_up(started)
        except BrokerError as exc:
            logs = project.log_line(TAIL_LINES_ON_ERROR, [ct.service])
            raise BrokerError(f"{started.target}: {exc}; last log lines: {logs}") from exc

    def _stage_secured(
        self,
        project: ComposeProject,
        definition: TargetDefinition,
        ct: ComposeEntry,
        security: BrokerSecurity,
        request: StartRequest,
        profile: Profile,
    ) -> StagedConfig:
        """Write the secured config into the run's private directory, and the compose file
        that mounts it into the result folder (``compose.secured.yaml``: no secret); the
        project runs that file from now on."""
        container = definition.secured_container
        assert container is not None
        stage = security.private_dir / f"docker-{project.name}"
        try:
            staged = stage_secured(definition, stage, security, "0.0.0.0", container.port)
        except OSError as exc:
            raise BrokerError(f"{request.target}: cannot write the secured config: {exc}") from exc
        if profile.cpus is not None and container.profile_in_argv:
            tuned, _ = definition.knobs.tune(request.target, staged.plan, profile, {})
            staged = replace(staged, plan=replace(staged.plan, argv=tuned.argv))
        document = secured_service(load_compose(project.file), ct.service, staged)
        path = request.workdir / "compose.secured.yaml"
        path.write_text(
            "# written by mqbench (mqbench/brokers/docker/security.py) from "
            f"{project.file.name}\n" + yaml.safe_dump(document, sort_keys=False),
            encoding="utf-8",
        )
        if staged.plan.config_path is not None:
            (request.workdir / f"container-{staged.plan.config_path.name}").write_text(
                staged.plan.config_text, encoding="utf-8"
            )
        project.file = path
        return staged

    def _secured_ready(
        self,
        project: ComposeProject,
        target: str,
        ct: ComposeEntry,
        staged: StagedConfig,
        host: str,
        ports: Mapping[str, int],
        timeout_s: float,
    ) -> None:
        """The spec's own readiness probe from this machine, with the run's TLS settings,
        on the published port: the healthcheck ran inside the container only."""
        check = staged.plan.ready_check or staged.spec.check_ready
        port = ports[ct.port_var]
        if not self._wait_ready(check, host, port, timeout_s):
            logs = project.log_line(TAIL_LINES_ON_ERROR, [ct.service])
            raise BrokerError(
                f"{target}: healthy in Docker, but the secured listener at {host}:{port} did "
                f"not answer a TLS/login probe from here within {timeout_s:g} s; "
                f"last log lines: {logs}"
            )

    @staticmethod
    def _host_network(
        project: ComposeProject, ct: ComposeEntry, bind: str, ports: dict[str, int], workdir: Path
    ) -> None:
        """The project runs ``compose.hostnet.yaml``: the broker service on the host's
        network, listening on ``bind`` and the chosen port itself (``network.py``)."""
        project.variables["MQBENCH_LISTEN_HOST"] = bind
        project.variables["MQBENCH_LISTEN_PORT"] = str(ports[ct.port_var])
        for var in ct.host_network_ports:
            ports[var] = free_port(bind)
            project.variables[var] = str(ports[var])
        document = host_network_document(load_compose(project.file), ct.service)
        path = workdir / "compose.hostnet.yaml"
        path.write_text(
            "# written by mqbench (mqbench/brokers/docker/network.py) from "
            f"{project.file.name}\n" + yaml.safe_dump(document, sort_keys=False),
            encoding="utf-8",
        )
        project.file = path

    def _ports(
        self, ct: ComposeEntry, request: StartRequest, bind: str, remote: str | None
    ) -> dict[str, int]:
        target = get_definition(request.target)
        ports: dict[str, int] = {}
        if request.port is not None:
            if remote is None and port_in_use(bind, request.port):
                raise BrokerError(f"port {request.port} on {bind} is already in use")
            ports[ct.port_var] = request.port
        else:
            ports[ct.port_var] = target.default_port if remote else free_port(bind)
        for var, container_port in ct.extra_ports.items():
            ports[var] = container_port if remote else free_port(bind)
        return ports

    @staticmethod
    def _record_files(project: ComposeProject, workdir: Path) -> dict[str, Any]:
        env = {**os.environ, **project.variables}
        resolved = load_compose(project.file, env)
        (workdir / "compose.env").write_text(
            f"COMPOSE_PROJECT_NAME={project.name}\n"
            + "".join(f"{k}={v}\n" for k, v in sorted(project.variables.items())),
            encoding="utf-8",
        )
        (workdir / "compose.resolved.yaml").write_text(
            yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8"
        )
        return resolved

    def _choose_images(self, project: ComposeProject, target: str) -> dict[str, Any]:
        """Pick every service's image (``images.py``), set its ``MQBENCH_IMAGE_*`` variable
        and return the manifest facts; a service with a ``build`` section whose image is
        nowhere is left to ``compose up`` to build."""
        document = load_compose(project.file, {**self.cli.env, **project.variables})
        wanted = service_images(document)
        buildable = {
            name
            for name, spec in document["services"].items()
            if isinstance(spec, Mapping) and "build" in spec
        }
        sdk = self._sdk()
        try:
            selector = ImageSelector(self._image_engine(sdk), image_policy(self.cli.env))
            variables, facts = _chosen(selector, wanted, buildable, target)
        finally:
            close_sdk_client(sdk)
        project.variables.update(variables)
        return facts

    def _up(self, launch: _Launch, target: str) -> None:
        """``up -d --wait``; on failure one line: a port someone else holds, the services
        that never became healthy, or compose's own error, each with the last log lines."""
        project, timeout_s = launch.project, launch.timeout_s
        builds = any(f.get("kind") == "compose-build" for f in launch.image_choices.values())
        args = ["up", "-d", "--wait", "--wait-timeout", str(round(timeout_s))]
        try:
            proc = project.run(args, timeout_s + UP_GRACE_S + (BUILD_GRACE_S if builds else 0.0))
        except BrokerError as exc:
            logs = project.log_line(TAIL_LINES_ON_ERROR)
            raise BrokerError(f"{target}: {exc}; last log lines: {logs}") from exc
        if proc.returncode == 0:
            return
        docker_says = last_lines(proc.stderr, 1) or f"exit {proc.returncode}"
        bad = failed_services(project.ps())
        logs = project.log_line(TAIL_LINES_ON_ERROR, bad or None)
        project.down()  # frees our own ports: what still listens belongs to someone else
        taken = [port for port in launch.ports.values() if port_in_use(launch.bind, port)]
        if taken:
            raise BrokerError(
                f"{target}: port {', '.join(map(str, taken))} on {launch.bind} is already in "
                f"use by another program (docker: {docker_says}); last log lines: {logs}"
            )
        if bad:
            raise BrokerError(
                f"{target}: service(s) {', '.join(bad)} not healthy within {timeout_s:g} s "
                f"(docker: {docker_says}); last log lines: {logs}"
            )
        raise BrokerError(
            f"{target}: `docker compose up` failed: {last_lines(proc.stderr) or docker_says}; "
            f"last log lines: {logs}"
        )

    def _sdk(self) -> Any:
        try:
            return self._client_factory(self.cli.env)
        except Exception as exc:
            raise BrokerError(
                f"the Docker SDK cannot reach the engine (needed for container stats): {exc}"
            ) from exc


ReadyWait = Callable[[ReadyCheck, str, int, float], bool]
"""``(check, host, port, timeout_s) -> ready``: polls a readiness probe until a deadline."""

READY_POLL_S = 0.5


def wait_until_ready(check: ReadyCheck, host: str, port: int, timeout_s: float) -> bool:
    """Call ``check`` until it answers True or ``timeout_s`` passes (bounded probes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if check(host, port, min(remaining, 2.0)):
            return True
        time.sleep(min(READY_POLL_S, max(deadline - time.monotonic(), 0.0)))


def _hook_variables(definition: TargetDefinition, options: Mapping[str, Any]) -> dict[str, str]:
    """Refuse another target's hook options; the target's own hooks check theirs."""
    own = definition.docker_hooks.options if definition.docker_hooks is not None else frozenset()
    for option, owner in docker_option_owners().items():
        if option not in own and options.get(option) is not None:
            raise BrokerError(f"option {option!r} only applies to target {owner}")
    if definition.docker_hooks is None:
        return {}
    return definition.docker_hooks.variables(options)


def _chosen(
    selector: ImageSelector, wanted: Mapping[str, str], buildable: set[str], target: str
) -> tuple[dict[str, str], dict[str, Any]]:
    """The image variables and manifest facts of every service (``images.py``)."""
    try:
        variables, choices = choose_images(
            {s: ref for s, ref in wanted.items() if s not in buildable}, selector
        )
    except BrokerError as exc:
        raise BrokerError(f"{target}: {exc}") from exc
    facts: dict[str, Any] = {service: choice.describe() for service, choice in choices.items()}
    for service in sorted(buildable):
        try:
            choice = selector.choose(service, wanted[service])
        except BrokerError:
            facts[service] = {"requested": wanted[service], "kind": "compose-build"}
            continue
        variables[choice.variable] = choice.ref
        facts[service] = choice.describe()
    return variables, facts


def _containers(client: Any, project: str) -> tuple[list[ContainerRef], dict[str, Any]]:
    """The project's containers (for stats) and per-service image facts (for the manifest)."""
    try:
        found = client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"}
        )
    except Exception as exc:
        raise BrokerError(f"cannot list the containers of {project}: {exc}") from exc
    refs: list[ContainerRef] = []
    images: dict[str, Any] = {}
    for container in found:
        attrs: Mapping[str, Any] = container.attrs
        labels: Mapping[str, str] = attrs.get("Config", {}).get("Labels") or {}
        service = labels.get("com.docker.compose.service", str(attrs.get("Name", "?")))
        pid = int(attrs.get("State", {}).get("Pid") or 0)
        refs.append(ContainerRef(str(container.id), service, pid))
        image_id = str(attrs.get("Image", ""))
        digests: list[str] = []
        with contextlib.suppress(Exception):
            digests = list(client.images.get(image_id).attrs.get("RepoDigests") or [])
        images[service] = {
            "image": attrs.get("Config", {}).get("Image"),
            "image_id": image_id,
            "repo_digests": digests,
            "container_id": str(container.id),
        }
    refs.sort(key=lambda r: r.service)
    return refs, dict(sorted(images.items()))


def _container_port(resolved: Mapping[str, Any], service: str, host_port: int) -> int:
    """The container port that ``host_port`` publishes (``bind:host:container`` entries)."""
    for entry in resolved["services"][service].get("ports", []):
        parts = str(entry).rsplit(":", 2)
        if len(parts) >= 2 and parts[-2] == str(host_port):
            return int(parts[-1].partition("/")[0])
    raise BrokerError(f"service {service} publishes no port as {host_port}")


def compose_images(target: str, folder: Path | None = None) -> dict[str, str]:
    """Service -> image reference of ``target``'s compose file with default variables."""
    ct = compose_entry(target)
    return service_images(load_compose(ct.path(folder), {}))
