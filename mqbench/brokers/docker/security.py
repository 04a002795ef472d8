"""A secured broker in a container: the native spec's own config, staged for bind mounts.

The docker runtime does not keep a second, hand-written TLS/users config per broker. It
calls the target's native ``configure(..., security, mounts)`` (the code that configures
the native broker) with the container's listen address and port and with ``Mounts`` that
name every file at its mount point, so the config names ``/mqbench/work/...`` and
``/mqbench/private/...``:

- ``<stage>/work`` (mounted read-write at ``/mqbench/work``): the config files the spec
  writes into its work directory, and whatever the broker writes there (RabbitMQ's
  Mnesia and Erlang cookie). No secret goes here (the specs' rule for ``workdir``).
- ``<stage>/private`` (mounted read-only at ``/mqbench/private``): a copy of the run's CA,
  server certificate and key (and the client pair when client certificates are required,
  for the healthcheck), the spec's secret files (mosquitto's PBKDF2 password file, NATS's
  authorization block, Redis's ACL file, RabbitMQ's ``advanced.config`` -- the last three
  hold the password in clear, as the brokers need it) and ``probe.password`` for the
  healthchecks that log in (mosquitto's, Redis's).

``<stage>`` lies in the run's private directory (``BrokerSecurity.private_dir``, 0700,
outside the result folder, removed after the run). Every file and directory in it is
handed to the image's broker user (``SecuredContainer.uid``/``gid``), keys and password
files stay 0600 and directories 0700: readable by that user only, never world-readable.
Changing the owner needs root (or mqbench running as that uid); otherwise ``BrokerError``.

``secured_service`` turns the target's compose service into the secured one: the spec's
command line as ``entrypoint``, ``user: uid:gid``, the two bind mounts and a healthcheck
that names only paths (a password is read from ``probe.password`` inside the container).
Nothing secret is written into the compose document or its variables.
"""

from __future__ import annotations

import copy
import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.runtime.mounts import Mounts
from mqbench.brokers.runtime.native_spec import ConfiguredSpec, LaunchPlan
from mqbench.brokers.runtime.settings import SettingValue, int_setting, str_setting
from mqbench.errors import BrokerError

if TYPE_CHECKING:
    from mqbench.brokers.definition import TargetDefinition
    from mqbench.brokers.runtime.native_spec import NativeSpec

MOUNT_WORK = PurePosixPath("/mqbench/work")
"""Where ``<stage>/work`` appears inside the container."""
MOUNT_PRIVATE = PurePosixPath("/mqbench/private")
"""Where ``<stage>/private`` appears inside the container (read-only)."""
PROBE_PASSWORD = "probe.password"
"""The file (in ``<stage>/private``) a healthcheck reads the password from."""


@dataclass(frozen=True)
class HealthcheckInput:
    """What a secured container's healthcheck may use: container paths, no secret."""

    port: int
    """The container port of the target's listener."""
    tls: bool
    ca: str | None
    client_cert: str | None
    """Client certificate and key (container paths) when the broker requires one."""
    client_key: str | None
    username: str | None
    password_file: str | None
    """Container path of the file holding the password (auth on), else None."""
    settings: Mapping[str, SettingValue]
    """The launch plan's settings (RabbitMQ: node name, epmd and listener ports)."""


@dataclass(frozen=True)
class SecuredContainer:
    """How the docker runtime runs a target's secured native config in its image."""

    binary: PurePosixPath
    """The broker executable inside the image (``argv[0]`` of the spec's command)."""
    uid: int
    """The image's broker user: the staged files are handed to it."""
    gid: int
    port: int
    """The container port of the target's listener (the compose file publishes it)."""
    healthcheck: Callable[[HealthcheckInput], list[str]]
    """The compose ``healthcheck.test`` (unescaped; ``secured_service`` escapes ``$``)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Broker options the container needs: fixed ports, the plain compose file's limits."""
    healthcheck_logs_in: bool = False
    """The healthcheck logs in: with auth on, ``probe.password`` is written for it."""
    profile_in_argv: bool = True
    """Apply the profile's knobs to the command line as natively; False when the compose
    service's environment already carries them (NATS: ``GOMAXPROCS``), so the image needs
    no ``/usr/bin/env``."""

    @property
    def user(self) -> str:
        """Compose ``user``: ``uid:gid``."""
        return f"{self.uid}:{self.gid}"


@dataclass(frozen=True)
class StagedConfig:
    """A secured container's files, written and handed to the image's user."""

    stage: Path
    plan: LaunchPlan
    """The spec's plan: argv and config name container paths (``mounts``)."""
    spec: NativeSpec
    """The spec that wrote it (its readiness probe is the host's)."""
    mounts: Mounts
    healthcheck: list[str]
    user: str

    @property
    def work(self) -> Path:
        """Mounted read-write at ``MOUNT_WORK``."""
        return self.stage / "work"

    @property
    def private(self) -> Path:
        """Mounted read-only at ``MOUNT_PRIVATE``."""
        return self.stage / "private"


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)


def _copy(source: Path, directory: Path, mode: int) -> Path:
    target = directory / source.name
    shutil.copyfile(source, target)
    os.chmod(target, mode)
    return target


def _container_security(security: BrokerSecurity, private: Path) -> BrokerSecurity:
    """``security`` with its files in ``private``: the copies the container reads."""
    tls = security.tls
    if tls is not None:
        pair = None
        if security.require_client_cert and tls.client_cert and tls.client_key:
            pair = (_copy(tls.client_cert, private, 0o644), _copy(tls.client_key, private, 0o600))
        tls = replace(
            tls,
            directory=private,
            ca_cert=_copy(tls.ca_cert, private, 0o644),
            server_cert=_copy(tls.server_cert, private, 0o644),
            server_key=_copy(tls.server_key, private, 0o600),
            client_cert=pair[0] if pair else None,
            client_key=pair[1] if pair else None,
        )
    return replace(security, private_dir=private, tls=tls)


def _hand_over(stage: Path, uid: int, gid: int) -> None:
    """Give ``stage`` and everything in it to ``uid:gid`` (nothing to do when it is ours)."""
    if uid == os.geteuid() and gid == os.getegid():
        return
    paths = [stage, *stage.rglob("*")]
    try:
        for path in paths:
            os.chown(path, uid, gid, follow_symlinks=False)
    except PermissionError as exc:
        raise BrokerError(
            f"cannot hand the broker's key and password files to the container user "
            f"{uid}:{gid} (changing a file's owner needs root): {exc.strerror}: {exc.filename}"
        ) from None


def stage_secured(
    target: TargetDefinition,
    stage: Path,
    security: BrokerSecurity,
    host: str,
    port: int,
    options: Mapping[str, Any] | None = None,
    owner: tuple[int, int] | None = None,
) -> StagedConfig:
    """Write ``target``'s secured config for its container into ``stage`` (see the module
    docstring): listening on ``host:port`` (the docker runtime: ``0.0.0.0`` and the
    container port), with ``options`` over the container's own, files handed to ``owner``
    (default: the image's user)."""
    container = target.secured_container
    if container is None or target.native is None:
        raise BrokerError(f"{target.name}: no secured container config")
    spec = target.native()
    if not isinstance(spec, ConfiguredSpec):
        raise BrokerError(f"{target.name}: its native spec cannot write a secured config")
    spec.check_security(security.tls is not None, security.auth)
    stage = stage.resolve()
    work, private = stage / "work", stage / "private"
    for directory in (stage, work, private):
        _private_dir(directory)
    inner = _container_security(security, private)
    mounts = Mounts(((work, MOUNT_WORK), (private, MOUNT_PRIVATE)))
    plan = spec.configure(
        Path(str(container.binary)),
        work,
        host,
        port,
        {**container.options, **(options or {})},
        inner,
        mounts,
    )
    password_file = None
    if security.auth and container.healthcheck_logs_in:
        assert security.password is not None
        path = private / PROBE_PASSWORD
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(security.password)
        password_file = mounts.seen(path)
    tls = inner.tls
    health = container.healthcheck(
        HealthcheckInput(
            port=container.port,
            tls=tls is not None,
            ca=mounts.seen(tls.ca_cert) if tls is not None else None,
            client_cert=mounts.seen(tls.client_cert) if tls and tls.client_cert else None,
            client_key=mounts.seen(tls.client_key) if tls and tls.client_key else None,
            username=security.username if security.auth else None,
            password_file=password_file,
            settings=plan.settings,
        )
    )
    uid, gid = owner or (container.uid, container.gid)
    _hand_over(stage, uid, gid)
    return StagedConfig(stage, plan, spec, mounts, health, f"{uid}:{gid}")


def _escaped(text: str) -> str:
    """``text`` with ``$`` doubled: Compose would otherwise interpolate it."""
    return text.replace("$", "$$")


def secured_service(
    compose: Mapping[str, Any], service: str, staged: StagedConfig
) -> dict[str, Any]:
    """A copy of the compose document whose ``service`` runs ``staged`` (module docstring)."""
    doc: dict[str, Any] = copy.deepcopy(dict(compose))
    spec: dict[str, Any] = doc["services"][service]
    spec.pop("command", None)
    spec["entrypoint"] = [_escaped(arg) for arg in staged.plan.argv]
    spec["user"] = staged.user
    spec["volumes"] = [
        *spec.get("volumes", []),
        {"type": "bind", "source": _escaped(str(staged.work)), "target": str(MOUNT_WORK)},
        {
            "type": "bind",
            "source": _escaped(str(staged.private)),
            "target": str(MOUNT_PRIVATE),
            "read_only": True,
        },
    ]
    health = dict(spec.get("healthcheck", {}))
    health["test"] = [_escaped(part) for part in staged.healthcheck]
    spec["healthcheck"] = health
    return doc


def _tls_args(h: HealthcheckInput, ca: str, cert: str, key: str) -> list[str]:
    if not h.tls or h.ca is None:
        return []
    args = [ca, h.ca]
    if h.client_cert and h.client_key:
        args += [cert, h.client_cert, key, h.client_key]
    return args


def mosquitto_healthcheck(h: HealthcheckInput) -> list[str]:
    """``mosquitto_sub`` reads ``$SYS/broker/version`` over TLS and/or with the login."""
    args = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(h.port)]
    args += _tls_args(h, "--cafile", "--cert", "--key")
    login = ""
    if h.username is not None and h.password_file is not None:
        args += ["-u", h.username]
        login = f' -P "$(cat {shlex.quote(h.password_file)})"'
    args += ["-t", "$SYS/broker/version", "-C", "1", "-W", "3"]
    return ["CMD-SHELL", shlex.join(args) + login]


def redis_healthcheck(h: HealthcheckInput) -> list[str]:
    """``redis-cli ping`` over TLS and/or as the ACL user; the password comes through
    ``REDISCLI_AUTH`` read from the password file (never on the command line)."""
    args = ["redis-cli", "-h", "127.0.0.1", "-p", str(h.port)]
    if h.tls:
        args.append("--tls")
    args += _tls_args(h, "--cacert", "--cert", "--key")
    prefix = ""
    if h.username is not None and h.password_file is not None:
        args += ["--user", h.username]
        prefix = f'REDISCLI_AUTH="$(cat {shlex.quote(h.password_file)})" '
    return ["CMD-SHELL", f"{prefix}{shlex.join([*args, 'ping'])} | grep -q PONG"]


NATS_MONITOR = 'http: "127.0.0.1:8222"'
"""A monitor listener inside the container only (not published) for the healthcheck."""


def nats_healthcheck(h: HealthcheckInput) -> list[str]:
    """``/healthz`` on the in-container monitor port (``NATS_MONITOR``): no login needed."""
    return ["CMD", "wget", "-q", "-O", "-", "http://127.0.0.1:8222/healthz"]


def rabbitmq_healthcheck(h: HealthcheckInput) -> list[str]:
    """``rabbitmq-diagnostics check_port_listener`` for every listener of the node, through
    Erlang distribution (the node's name, epmd port and cookie in ``MOUNT_WORK``)."""
    settings = h.settings
    epmd, nodename = int_setting(settings, "epmd_port"), str_setting(settings, "nodename")
    if epmd is None or nodename is None:
        raise BrokerError("rabbitmq: the launch plan records no epmd_port or nodename")
    env = f"HOME={MOUNT_WORK} ERL_EPMD_PORT={epmd}"
    node = shlex.quote(nodename)
    ports = [int_setting(settings, "mqtt_port"), int_setting(settings, "amqp_port")]
    checks = [
        f"{env} rabbitmq-diagnostics -q -n {node} check_port_listener {p}"
        for p in ports
        if p is not None
    ]
    return ["CMD-SHELL", " && ".join(checks)]
