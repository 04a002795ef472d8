"""Redis as a native process (Debian ``redis-server``), configured for Pub/Sub benchmarks.

Config (``redis.conf`` in the work directory): loopback only (``bind`` + ``protected-mode
yes``), no persistence (``save ""``, ``appendonly no``), ``dir`` = the work directory, log
to stdout (``logfile ""``), which the runtime redirects into ``<workdir>/redis.log``.

The setting that decides Pub/Sub loss is ``client-output-buffer-limit pubsub``: Redis
disconnects a subscriber whose unsent output exceeds the hard limit, or stays above the
soft limit for the given seconds. The stock ``32mb 8mb 60`` drops a subscriber that falls
~80K messages (64 B) behind for a minute, which max-rate runs reach within seconds. mqbench
writes ``256mb 64mb 60`` by default: 8x the stock headroom, while a runaway subscriber
still cannot take the machine's memory (``0 0 0`` would be unlimited). It is an option
(``pubsub_buffer_limit``) and is recorded in ``info.settings``. ``maxclients`` defaults
to 19000 (stock 10000) so pairs topologies up to ~9K pairs fit under the 20000 open-file
cap; Redis lowers it itself (and logs it) when the file limit is smaller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field, InstanceOf, field_validator

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.docker.security import SecuredContainer, redis_healthcheck
from mqbench.brokers.runtime.mounts import NATIVE, Mounts
from mqbench.brokers.runtime.native_spec import (
    ConfiguredSpec,
    LaunchPlan,
    ReadyCheck,
    first_match,
    run_for_output,
)
from mqbench.brokers.runtime.net import is_loopback
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import redis_probe
from mqbench.brokers.runtime.settings import BrokerSettings
from mqbench.brokers.security.secured import private_file, tls_probe_context
from mqbench.errors import BrokerError
from mqbench.scenario.security import Secret, secret_text


class RedisOptions(BrokerOptionsModel):
    """The redis options mqbench writes into ``redis.conf``."""

    pubsub_buffer_limit: str = Field(
        "256mb 64mb 60",
        description="client-output-buffer-limit pubsub: 'hard soft seconds'",
    )

    @field_validator("pubsub_buffer_limit")
    @classmethod
    def _three_fields(cls, value: str) -> str:
        limit = " ".join(value.split())
        if len(limit.split()) != 3:
            raise BrokerError(
                f"redis option pubsub_buffer_limit must be '<hard> <soft> <seconds>' "
                f"(e.g. '256mb 64mb 60' or '0 0 0'), got {value!r}"
            )
        return limit

    maxclients: int = Field(19000, description="client connections the server accepts")
    io_threads: int = Field(1, description="redis I/O threads")
    password: InstanceOf[Secret] | str | None = Field(
        None,
        description="requirepass (a secret: given as password_env or password_file)",
    )
    extra_config: str = Field("", description="redis.conf lines appended verbatim")


def _quote(value: str) -> str:
    """A redis.conf string argument in double quotes."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _requirepass_file(security: BrokerSecurity | None, password: Secret | str) -> Path:
    """The ``requirepass`` line in a file of the private folder (never the work directory,
    which lies in the result folder); ``include``d from ``redis.conf``."""
    if security is None:
        raise BrokerError(
            "redis option password needs the run's private folder for the file that holds "
            "it: give it in a scenario as broker.options.password_env or password_file"
        )
    path = private_file(security, "redis-requirepass.conf")
    path.write_text(f"requirepass {_quote(secret_text(password))}\n", encoding="utf-8")
    return path


def _conf_lines(
    host: str,
    port: int,
    workdir: Path,
    opts: RedisOptions,
    limit: str,
    security: BrokerSecurity | None,
    mounts: Mounts,
) -> list[str]:
    """The plain part of ``redis.conf``: listener, no persistence, limits."""
    tls = security is not None and security.tls is not None
    return [
        "# written by mqbench (mqbench/brokers/definitions/redis.py)",
        f"bind {host}",
        *(["port 0", f"tls-port {port}"] if tls else [f"port {port}"]),
        # Protected mode refuses non-loopback peers of a password-less default user;
        # a container listens on 0.0.0.0 behind a port published on loopback only.
        f"protected-mode {'yes' if is_loopback(host) else 'no'}",
        "daemonize no",
        'save ""',
        "appendonly no",
        f"dir {_quote(mounts.seen(workdir))}",
        'logfile ""',
        "loglevel notice",
        "databases 1",
        f"maxclients {opts.maxclients}",
        f"io-threads {opts.io_threads}",
        "timeout 0",
        "tcp-keepalive 300",
        f"client-output-buffer-limit pubsub {limit}",
    ]


def _security_lines(security: BrokerSecurity | None, mounts: Mounts) -> list[str]:
    """TLS on the only port, and the scenario's user as the only ACL user (the
    ``default`` user off) in a file of the private folder, ``include``d."""
    if security is None:
        return []
    lines: list[str] = []
    tls = security.tls
    if tls is not None:
        lines += [
            f"tls-cert-file {_quote(mounts.seen(tls.server_cert))}",
            f"tls-key-file {_quote(mounts.seen(tls.server_key))}",
            f"tls-ca-cert-file {_quote(mounts.seen(tls.ca_cert))}",
            f"tls-auth-clients {'yes' if security.require_client_cert else 'no'}",
        ]
    if security.auth:
        assert security.username is not None and security.password is not None
        users = private_file(security, "redis-users.conf")
        users.write_text(
            "user default off\n"
            f"user {_quote(security.username)} on {_quote('>' + security.password)} "
            "~* &* +@all\n",
            encoding="utf-8",
        )
        lines.append(f"include {_quote(mounts.seen(users))}")
    return lines


def _settings(
    host: str, opts: RedisOptions, limit: str, security: BrokerSecurity | None
) -> BrokerSettings:
    """What the manifest records of the server (no secret)."""
    settings: BrokerSettings = {
        "client_output_buffer_limit_pubsub": limit,
        "maxclients": opts.maxclients,
        "io_threads": opts.io_threads,
        "save": "",
        "appendonly": False,
        "protected_mode": is_loopback(host),
        "requirepass": bool(opts.password),
    }
    if security is not None:
        settings.update(tls=security.tls is not None, acl_user=security.auth)
    extra = opts.extra_config.strip()
    if extra:
        settings["extra_config"] = extra
    return settings


def _tls_ready(security: BrokerSecurity | None) -> ReadyCheck | None:
    """A TLS ``PING`` probe for a TLS server (null: ``check_ready``)."""
    if security is None or security.tls is None:
        return None
    context = tls_probe_context(security)

    def ready(host: str, port: int, timeout_s: float) -> bool:
        return redis_probe(host, port, timeout_s, context)

    return ready


class RedisSpec(ConfiguredSpec):
    """redis-server with a generated config file, Pub/Sub limits written explicitly."""

    options_model = RedisOptions
    name = "redis"
    executable = "redis-server"
    install_hint = "apt-get install redis-server"

    def candidate_paths(self) -> Iterable[Path]:
        """Debian installs it in ``/usr/bin``."""
        return (Path("/usr/bin/redis-server"),)

    def version(self, binary: Path) -> str:
        """Parse ``redis-server --version`` ("Redis server v=7.0.15 sha=...")."""
        return first_match(r"v=(\S+)", run_for_output([str(binary), "--version"]))

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
        """Plain: write ``redis.conf`` and return ``redis-server redis.conf``. Secured: TLS on
        the only port (``port 0`` + ``tls-port``; the Debian build links OpenSSL) and/or an
        ACL user (the ``default`` user off) in an ``include``d file in the private
        directory."""
        opts = parse_options("redis", RedisOptions, options)
        limit = opts.pubsub_buffer_limit
        lines = [
            *_conf_lines(host, port, workdir, opts, limit, security, mounts),
            *_security_lines(security, mounts),
        ]
        if opts.password:
            path = _requirepass_file(security, opts.password)
            lines.append(f"include {_quote(mounts.seen(path))}")
        extra = opts.extra_config.strip()
        if extra:
            lines += ["# extra_config from the scenario", extra]
        text = "\n".join(lines) + "\n"
        config_path = workdir / "redis.conf"
        config_path.write_text(text, encoding="utf-8")
        config_path.chmod(0o600)
        return LaunchPlan(
            argv=[str(binary), mounts.seen(config_path)],
            config_path=config_path,
            config_text=text,
            settings=_settings(host, opts, limit, security),
            ready_check=_tls_ready(security),
        )

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """``PING`` answered by ``+PONG`` or ``-NOAUTH`` (``probes.redis_probe``)."""
        return redis_probe(host, port, timeout_s)


DEFINITION = BrokerDefinition(
    "redis",
    (
        TargetDefinition(
            "redis",
            "Redis 7",
            "redis",
            "Redis 7 Pub/Sub over RESP",
            6379,
            native=RedisSpec,
            native_source="Debian package redis-server",
            compose=ComposeEntry("redis.yaml", "redis", host_network=True),
            secured_container=SecuredContainer(
                binary=PurePosixPath("/usr/local/bin/redis-server"),
                # The redis image's Dockerfile creates user and group redis as 999.
                uid=999,
                gid=999,
                port=6379,
                healthcheck=redis_healthcheck,
                healthcheck_logs_in=True,
                options={"pubsub_buffer_limit": "0 0 0", "maxclients": 100000},
            ),
            secret_options=frozenset({"password"}),
        ),
    ),
)
"""Redis: its I/O threads are an option (``io_threads``), not a profile knob."""
