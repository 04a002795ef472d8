"""RabbitMQ 3.x as a native process (Debian package ``rabbitmq-server``), one node per instance.

One class serves two targets: ``rabbitmq-mqtt`` (the instance's main port is the MQTT
listener of the ``rabbitmq_mqtt`` plugin) and ``rabbitmq-amqp`` (the main port is the AMQP
0-9-1 listener). Every instance also has an AMQP listener; its port is in
``settings["amqp_port"]`` (and the MQTT port, when the plugin is on, in
``settings["mqtt_port"]``).

How it runs without systemd, as root, next to other nodes (see docs/brokers.md):

- The Debian wrapper ``/usr/sbin/rabbitmq-server`` switches to user ``rabbitmq`` and uses
  ``/var/lib/rabbitmq``; mqbench runs the real script ``/usr/lib/rabbitmq/bin/rabbitmq-server``
  instead, with ``HOME`` (Erlang cookie), ``RABBITMQ_CONF_ENV_FILE``, ``RABBITMQ_CONFIG_FILE``,
  ``RABBITMQ_ENABLED_PLUGINS_FILE``, ``RABBITMQ_MNESIA_BASE``, ``RABBITMQ_LOG_BASE`` and
  ``RABBITMQ_PID_FILE`` all inside the work directory, set through ``/usr/bin/env`` in argv
  (so they are recorded in the manifest).
- ``RABBITMQ_NODENAME=mqbench-<port>@localhost`` is unique per instance; ``ERL_EPMD_PORT``
  and ``RABBITMQ_DIST_PORT`` are free ports of their own, ``ERL_EPMD_ADDRESS=127.0.0.1`` and
  ``-kernel inet_dist_use_interface {127,0,0,1}`` keep epmd and distribution on loopback.
- ``RUNNING_UNDER_SYSTEMD=true`` makes the script ``exec`` the Erlang VM, so the process the
  runtime starts *is* ``beam.smp``: SIGTERM stops the node gracefully (about 2 s).
- The VM starts ``epmd -daemon`` on ``ERL_EPMD_PORT``; that daemon is not a child of the
  node and outlives it. :meth:`RabbitMqSpec.companion_pids` finds it by the port this
  instance assigned (and checks its name and environment), so ``stop()`` ends it by PID.
- Plugins are enabled "offline" by writing the ``enabled_plugins`` file of the instance
  (exactly what ``rabbitmq-plugins enable --offline`` writes); no management plugin.
- MQTT: anonymous connections are mapped to ``guest``/``guest`` on vhost ``/``;
  ``loopback_users = none`` (the listeners are loopback-only anyway).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import Field, InstanceOf

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.docker.security import SecuredContainer, rabbitmq_healthcheck
from mqbench.brokers.resources.knobs import ErlangSchedulers
from mqbench.brokers.runtime.mounts import NATIVE, Mounts
from mqbench.brokers.runtime.native_spec import ConfiguredSpec, LaunchPlan, ReadyCheck
from mqbench.brokers.runtime.net import free_port
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import amqp_probe, mqtt_probe
from mqbench.brokers.runtime.settings import BrokerSettings, int_setting
from mqbench.brokers.security.secured import private_file, tls_probe_context
from mqbench.errors import BrokerError
from mqbench.scenario.security import Secret


class RabbitMqOptions(BrokerOptionsModel):
    """The rabbitmq options mqbench writes into ``rabbitmq.conf`` (both targets)."""

    amqp_port: int | None = Field(
        None, description="AMQP listener port (null: a free port; rabbitmq-amqp: its port)"
    )
    mqtt_port: int | None = Field(
        None, description="MQTT listener port (null: a free port; rabbitmq-mqtt: its port)"
    )
    mqtt: bool | None = Field(
        None, description="enable the MQTT plugin (null: only for rabbitmq-mqtt)"
    )
    vm_memory_high_watermark: float = Field(
        0.4, description="vm_memory_high_watermark.relative: memory share that blocks publishers"
    )
    disk_free_limit: str = Field("50MB", description="disk_free_limit.absolute")
    default_user: str = Field("guest", description="the node's default user")
    default_pass: InstanceOf[Secret] | str = Field(
        "guest",
        description="its password (a secret: given as default_pass_env or default_pass_file)",
    )
    extra_config: str = Field("", description="rabbitmq.conf lines appended verbatim")

    @property
    def pass_is_secret(self) -> bool:
        """The password came from ``default_pass_env``/``_file``: it never goes into
        ``rabbitmq.conf`` (the work directory), only into the private ``advanced.config``."""
        return isinstance(self.default_pass, Secret)


@dataclass(frozen=True)
class _NodePorts:
    """The ports of one node: its listeners, its epmd and its distribution port."""

    amqp: int
    mqtt: int | None
    epmd: int
    dist: int


SCRIPT_PATH = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
"""The real start script on Debian (``/usr/sbin/rabbitmq-server`` is a ``su`` wrapper)."""

EPMD_NAME = "epmd"


def find_epmd(port: int) -> list[int]:
    """PIDs of ``epmd`` processes listening on TCP ``port`` whose environment names that port.

    Only a daemon started with ``ERL_EPMD_PORT=<port>`` (i.e. by the node this instance
    started, as that port was picked for it) qualifies; any other epmd is left alone.
    """
    import psutil

    pids: set[int] = set()
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    for conn in conns:
        if conn.pid is None or conn.status != psutil.CONN_LISTEN or not conn.laddr:
            continue
        if conn.laddr.port != port:
            continue
        try:
            proc = psutil.Process(conn.pid)
            if proc.name() != EPMD_NAME:
                continue
            if proc.environ().get("ERL_EPMD_PORT") != str(port):
                continue
        except (psutil.Error, OSError):
            continue
        pids.add(conn.pid)
    return sorted(pids)


def _erlang_binary(text: str) -> str:
    """``text`` as an Erlang binary literal of its UTF-8 bytes (no quoting to get wrong)."""
    return "<<" + ",".join(str(b) for b in text.encode("utf-8")) + ">>"


def _advanced_config(workdir: Path, security: BrokerSecurity | None, opts: RabbitMqOptions) -> Path:
    """Where the node reads ``advanced.config``: the work directory (no such file), or a
    file in the private directory that sets the only user: the scenario's credentials, or
    the ``default_user`` whose ``default_pass`` is a secret option (also the user anonymous
    MQTT clients get)."""
    if security is not None and security.auth:
        assert security.username is not None and security.password is not None
        user = _erlang_binary(security.username)
        password = _erlang_binary(security.password)
        mqtt = "{allow_anonymous, false}"
    elif isinstance(opts.default_pass, Secret):
        if security is None:
            raise BrokerError(
                "rabbitmq option default_pass needs the run's private folder for the file "
                "that holds it: give it in a scenario as default_pass_env or default_pass_file"
            )
        user = _erlang_binary(opts.default_user)
        password = _erlang_binary(opts.default_pass.reveal())
        mqtt = f"{{default_user, {user}}}, {{default_pass, {password}}}"
    else:
        return workdir / "advanced.config"
    path = private_file(security, "rabbitmq-advanced.config")
    path.write_text(
        f"[{{rabbit, [{{default_user, {user}}}, {{default_pass, {password}}}]}},\n"
        f" {{rabbitmq_mqtt, [{mqtt}]}}].\n",
        encoding="utf-8",
    )
    return path


def _user_lines(prefix: str, opts: RabbitMqOptions, in_conf: bool) -> list[str]:
    """``default_user``/``default_pass`` (with ``prefix``, e.g. ``mqtt.``) when the user
    goes into ``rabbitmq.conf``; none when it lives in the private ``advanced.config``."""
    if not in_conf:
        return []
    return [
        f"{prefix}default_user = {opts.default_user}",
        f"{prefix}default_pass = {opts.default_pass}",
    ]


def _tls_lines(security: BrokerSecurity | None, mounts: Mounts) -> list[str]:
    """The listeners' ``ssl_options`` (client certificates checked when required)."""
    if security is None or security.tls is None:
        return []
    tls = security.tls
    verify = security.require_client_cert
    return [
        f"ssl_options.cacertfile = {mounts.seen(tls.ca_cert)}",
        f"ssl_options.certfile = {mounts.seen(tls.server_cert)}",
        f"ssl_options.keyfile = {mounts.seen(tls.server_key)}",
        f"ssl_options.verify = {'verify_peer' if verify else 'verify_none'}",
        f"ssl_options.fail_if_no_peer_cert = {'true' if verify else 'false'}",
    ]


def _conf_lines(
    host: str,
    ports: _NodePorts,
    opts: RabbitMqOptions,
    security: BrokerSecurity | None,
    mounts: Mounts,
) -> list[str]:
    """The lines of ``rabbitmq.conf``: the AMQP listener, the user, limits, TLS, the MQTT
    plugin's listener (when ``ports.mqtt``) and the scenario's ``extra_config``."""
    tls = security is not None and security.tls is not None
    auth = security is not None and security.auth
    # The user goes into the private advanced.config when it has a password to hide.
    in_conf = not auth and not opts.pass_is_secret
    listen = "ssl" if tls else "tcp"
    lines = [
        "# written by mqbench (mqbench/brokers/definitions/rabbitmq.py)",
        *(["listeners.tcp = none"] if tls else []),
        f"listeners.{listen}.1 = {host}:{ports.amqp}",
        "loopback_users = none",
        *_user_lines("", opts, in_conf),
        "log.console = true",
        "log.console.level = info",
        "log.file = false",
        f"vm_memory_high_watermark.relative = {opts.vm_memory_high_watermark}",
        f"disk_free_limit.absolute = {opts.disk_free_limit}",
        "tcp_listen_options.nodelay = true",
        *_tls_lines(security, mounts),
    ]
    if ports.mqtt is not None:
        lines += [
            *(["mqtt.listeners.tcp = none"] if tls else []),
            f"mqtt.listeners.{listen}.1 = {host}:{ports.mqtt}",
            f"mqtt.allow_anonymous = {'false' if auth else 'true'}",
            *_user_lines("mqtt.", opts, in_conf),
            "mqtt.vhost = /",
            "mqtt.exchange = amq.topic",
            "mqtt.tcp_listen_options.nodelay = true",
        ]
    extra = opts.extra_config.strip()
    if extra:
        lines += ["# extra_config from the scenario", extra]
    return lines


def _node_env(
    workdir: Path, nodename: str, ports: _NodePorts, files: dict[str, Path], mounts: Mounts
) -> dict[str, str]:
    """The environment that puts every file and port of the node in the work directory
    and on loopback (``files``: the ``RABBITMQ_*_FILE`` variables' paths)."""
    return {
        "HOME": mounts.seen(workdir),
        **{name: mounts.seen(path) for name, path in files.items()},
        "RABBITMQ_NODENAME": nodename,
        "RABBITMQ_USE_LONGNAME": "false",
        "RABBITMQ_MNESIA_BASE": mounts.seen(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": mounts.seen(workdir / "log"),
        "RABBITMQ_PID_FILE": mounts.seen(workdir / "rabbitmq.pid"),
        "RABBITMQ_DIST_PORT": str(ports.dist),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        "ERL_EPMD_PORT": str(ports.epmd),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RUNNING_UNDER_SYSTEMD": "true",
    }


def _node_files(workdir: Path, conf: str, plugins: list[str]) -> tuple[Path, Path, Path]:
    """Create the mnesia and log directories; write an empty env file, ``rabbitmq.conf``
    and ``enabled_plugins`` (the paths, in that order)."""
    for directory in (workdir / "mnesia", workdir / "log"):
        directory.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "rabbitmq.conf"
    config_path.write_text(conf, encoding="utf-8")
    enabled = workdir / "enabled_plugins"
    enabled.write_text(f"[{','.join(plugins)}].\n", encoding="utf-8")
    env_file = workdir / "rabbitmq-env.conf"
    env_file.write_text(
        "# written by mqbench: every setting is passed in the environment (see argv)\n",
        encoding="utf-8",
    )
    return env_file, config_path, enabled


class RabbitMqSpec(ConfiguredSpec):
    """A RabbitMQ node whose main port speaks ``protocol`` (``mqtt`` or ``amqp``)."""

    options_model = RabbitMqOptions
    executable = "rabbitmq-server"
    install_hint = "apt-get install rabbitmq-server"

    def __init__(self, protocol: Literal["mqtt", "amqp"]) -> None:
        """Serve the ``rabbitmq-<protocol>`` target."""
        self.protocol = protocol
        self.name = f"rabbitmq-{protocol}"
        # main (MQTT) port -> AMQP port of the instances this spec prepared (for readiness)
        self._amqp_ports: dict[int, int] = {}

    def candidate_paths(self) -> Iterable[Path]:
        """The real start script (the Debian ``/usr/sbin`` wrapper is not usable here)."""
        return (SCRIPT_PATH,)

    def find_binary(self) -> Path | None:
        """The start script; a script on ``PATH`` counts only next to its ``rabbitmq-env``."""
        path = super().find_binary()
        if path is None:
            return None
        real = path.resolve()
        return path if (real.parent / "rabbitmq-env").is_file() else None

    def version(self, binary: Path) -> str:
        """From the server's directory name (``.../rabbitmq_server-3.10.8/sbin/...``)."""
        real = binary.resolve()
        for directory in real.parents:
            if directory.name.startswith("rabbitmq_server-"):
                return directory.name.removeprefix("rabbitmq_server-")
        with contextlib.suppress(OSError):
            lib = real.parent.parent / "lib"
            names = sorted(p.name for p in lib.glob("rabbitmq_server-*"))
            if names:
                return names[-1].removeprefix("rabbitmq_server-")
        return "unknown"

    def configure(
        self,
        binary: Path,
        workdir: Path,
        host: str,
        port: int,
        options: Mapping[str, Any],
        security: BrokerSecurity | None,
        mounts: Mounts = NATIVE,
    ) -> LaunchPlan:
        """Plain: write ``rabbitmq.conf``, ``enabled_plugins`` and an env file; argv via
        ``env``. Secured: TLS-only AMQP and MQTT listeners (``ssl_options``) and/or the
        scenario's user as the only user (``default_user``/``default_pass`` in an
        ``advanced.config`` in the private directory; anonymous MQTT off)."""
        opts = parse_options("rabbitmq", RabbitMqOptions, options)
        ports = self._node_ports(host, port, opts)
        nodename = f"mqbench-{port}@localhost"
        workdir = workdir.resolve()
        text = "\n".join(_conf_lines(host, ports, opts, security, mounts)) + "\n"
        plugins = ["rabbitmq_mqtt"] if ports.mqtt is not None else []
        env_file, config_path, enabled = _node_files(workdir, text, plugins)
        files = {
            "RABBITMQ_CONF_ENV_FILE": env_file,
            "RABBITMQ_CONFIG_FILE": config_path,
            "RABBITMQ_ADVANCED_CONFIG_FILE": _advanced_config(workdir, security, opts),
            "RABBITMQ_ENABLED_PLUGINS_FILE": enabled,
        }
        env = _node_env(workdir, nodename, ports, files, mounts)
        argv = ["/usr/bin/env", *(f"{key}={value}" for key, value in env.items()), str(binary)]
        return LaunchPlan(
            argv=argv,
            config_path=config_path,
            config_text=text,
            settings=self._settings(nodename, ports, plugins, opts, security),
            ready_check=self._tls_ready(security),
        )

    def _node_ports(self, host: str, port: int, opts: RabbitMqOptions) -> _NodePorts:
        """The target's port for its protocol, the other listener's (when the MQTT plugin is
        on) from the options or free, and free epmd and distribution ports."""
        mqtt = self.protocol == "mqtt" if opts.mqtt is None else opts.mqtt
        if self.protocol == "mqtt" and not mqtt:
            raise BrokerError("rabbitmq-mqtt needs the MQTT plugin (option mqtt: false given)")
        if self.protocol == "mqtt":
            mqtt_port: int | None = port
            amqp_port = opts.amqp_port or free_port(host)
            self._amqp_ports[port] = amqp_port
        else:
            amqp_port = port
            mqtt_port = (opts.mqtt_port or free_port(host)) if mqtt else None
        return _NodePorts(amqp_port, mqtt_port, epmd=free_port(host), dist=free_port(host))

    @staticmethod
    def _settings(
        nodename: str,
        ports: _NodePorts,
        plugins: list[str],
        opts: RabbitMqOptions,
        security: BrokerSecurity | None,
    ) -> BrokerSettings:
        """What the manifest records of this node (no secret)."""
        auth = security is not None and security.auth
        settings: BrokerSettings = {
            "nodename": nodename,
            "amqp_port": ports.amqp,
            "mqtt_port": ports.mqtt,
            "epmd_port": ports.epmd,
            "dist_port": ports.dist,
            "plugins": plugins,
            "default_user": security.username if auth and security else opts.default_user,
            "vm_memory_high_watermark": opts.vm_memory_high_watermark,
            "disk_free_limit": opts.disk_free_limit,
            "mqtt_allow_anonymous": ports.mqtt is not None and not auth,
            "tls": security is not None and security.tls is not None,
        }
        extra = opts.extra_config.strip()
        if extra:
            settings["extra_config"] = extra
        return settings

    def _tls_ready(self, security: BrokerSecurity | None) -> ReadyCheck | None:
        """A TLS readiness probe for a TLS node (null: ``check_ready``)."""
        if security is None or security.tls is None:
            return None
        context = tls_probe_context(security)

        def ready(host: str, port: int, timeout_s: float) -> bool:
            return self._ready(host, port, timeout_s, context)

        return ready

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """``Connection.Start`` on the AMQP port (+ a CONNACK on the MQTT port for mqtt).

        RabbitMQ opens its listeners in the last boot step, MQTT's first and AMQP's a moment
        later ("Ready to start client connection listeners"), so the MQTT target checks both.
        """
        return self._ready(host, port, timeout_s, None)

    def _ready(self, host: str, port: int, timeout_s: float, tls: ssl.SSLContext | None) -> bool:
        if self.protocol == "mqtt":
            amqp_port = self._amqp_ports.get(port)
            if amqp_port is not None and not amqp_probe(host, amqp_port, timeout_s, tls):
                return False
            return mqtt_probe(host, port, timeout_s, tls)
        return amqp_probe(host, port, timeout_s, tls)

    def companion_pids(self, plan: LaunchPlan) -> list[int]:
        """The ``epmd`` daemon the node started on this instance's own epmd port."""
        epmd_port = int_setting(plan.settings, "epmd_port")
        return find_epmd(epmd_port) if epmd_port else []


def _secured_container(port: int, ports: dict[str, Any]) -> SecuredContainer:
    """The image's ``rabbitmq-server`` as user rabbitmq (999 in the rabbitmq image's
    Dockerfile), the listeners on the ports the compose file publishes."""
    return SecuredContainer(
        binary=PurePosixPath("/opt/rabbitmq/sbin/rabbitmq-server"),
        uid=999,
        gid=999,
        port=port,
        healthcheck=rabbitmq_healthcheck,
        options={**ports, "vm_memory_high_watermark": 0.8},
    )


DEFINITION = BrokerDefinition(
    "rabbitmq",
    (
        TargetDefinition(
            "rabbitmq-mqtt",
            "RabbitMQ",
            "mqtt",
            "RabbitMQ with the rabbitmq_mqtt plugin, over MQTT",
            1883,
            native=lambda: RabbitMqSpec("mqtt"),
            native_source="Debian package rabbitmq-server",
            compose=ComposeEntry(
                "rabbitmq.yaml",
                "rabbitmq",
                port_var="MQBENCH_MQTT_PORT",
                extra_ports={"MQBENCH_AMQP_PORT": 5672},
                min_startup_s=120.0,
            ),
            secured_container=_secured_container(1883, {"amqp_port": 5672}),
            knobs=ErlangSchedulers("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"),
        ),
        TargetDefinition(
            "rabbitmq-amqp",
            "RabbitMQ",
            "amqp",
            "RabbitMQ over AMQP 0-9-1",
            5672,
            native=lambda: RabbitMqSpec("amqp"),
            native_source="Debian package rabbitmq-server",
            compose=ComposeEntry(
                "rabbitmq.yaml",
                "rabbitmq",
                port_var="MQBENCH_AMQP_PORT",
                extra_ports={"MQBENCH_MQTT_PORT": 1883},
                min_startup_s=120.0,
            ),
            secured_container=_secured_container(5672, {}),
            knobs=ErlangSchedulers("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"),
        ),
    ),
)
"""RabbitMQ: one compose file and one spec class for two targets; Erlang ``+S N:N``."""
