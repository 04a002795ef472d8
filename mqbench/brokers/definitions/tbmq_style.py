"""mqbench's own TBMQ-style broker as a native process (target ``tbmq-style``).

The broker runs as ``<python> -m mqbench.builtin_broker --port <port> ...`` (the interpreter that
runs mqbench, so it is always "installed"); readiness is an MQTT CONNACK. Options select
the persistence (``persistence``: memory, redis-async, redis-sync, postgres; ``app_queue``:
memory, redis-streams) and the broker settings that change results.

When the options ask for Redis or PostgreSQL and give no ``redis_url`` / ``postgres_dsn``,
the spec starts a throwaway server (``mqbench/brokers/services/backing.py``) before the
broker, and the runtime stops it after the broker (``companion_pids``), by PID.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mqbench import __version__
from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.runtime.native_spec import LaunchPlan, NativeSpec
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import mqtt_probe
from mqbench.brokers.runtime.settings import BrokerSettings
from mqbench.brokers.security.secured import private_file, tls_probe_context
from mqbench.brokers.services.backing import PostgresService, RedisService


class TbmqStyleOptions(BrokerOptionsModel):
    """The built-in broker's options (passed on its command line; docs/brokers.md)."""

    persistence: Literal["memory", "redis-async", "redis-sync", "postgres"] = Field(
        "memory", description="where DEVICE sessions live"
    )
    app_queue: Literal["memory", "redis-streams"] = Field(
        "memory", description="where the APPLICATION queue lives"
    )
    redis_url: str | None = Field(None, description="a Redis to use (null: start one if needed)")
    postgres_dsn: str | None = Field(
        None, description="a PostgreSQL to use (null: start one if needed)"
    )
    messages_limit: int = Field(
        10_000, description="persisted messages per DEVICE client (<= 65535)"
    )
    message_ttl: int = Field(600, description="seconds a persisted message lives (0: forever)")
    max_inflight: int = Field(1000, description="unacknowledged QoS 1/2 messages per client")
    max_packet_size: int = Field(16 * 1024 * 1024, description="largest MQTT packet, bytes")
    device_pattern: str | None = Field(None, description="regex (full match) of DEVICE client ids")
    app_pattern: str | None = Field(
        None, description="regex (full match) of APPLICATION client ids"
    )
    session_expiry: int = Field(
        0, description="expiry of MQTT 3.1.1 persistent sessions in s (0: never)"
    )
    uvloop: bool = Field(True, description="run the event loop on uvloop")
    log_level: str = Field("info", description="the broker's log level")
    postgres_synchronous_commit: str = Field(
        "on", description="synchronous_commit of the PostgreSQL mqbench starts"
    )


class TbmqStyleSpec(NativeSpec):
    """``python -m mqbench.builtin_broker`` plus the Redis/PostgreSQL it needs (see module)."""

    options_model = TbmqStyleOptions
    name = "tbmq-style"
    executable = "python"
    install_hint = "built into mqbench (pip install -e .)"

    def __init__(self) -> None:
        """Services started by ``prepare``, by the config path of their broker instance."""
        self._services: dict[str, list[RedisService | PostgresService]] = {}

    no_tls = ""
    no_auth = ""

    def prepare_secured(
        self,
        binary: Path,
        workdir: Path,
        host: str,
        port: int,
        options: Mapping[str, Any],
        security: BrokerSecurity,
    ) -> LaunchPlan:
        """``--tls-cert``/``--tls-key`` (``--tls-client-ca`` when client certificates are
        required) and ``--username``/``--password-file`` (the file in the private
        directory)."""
        plan = self.prepare(binary, workdir, host, port, options)
        argv = list(plan.argv)
        settings: BrokerSettings = dict(plan.settings)
        tls = security.tls
        if tls is not None:
            argv += ["--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key)]
            if security.require_client_cert:
                argv += ["--tls-client-ca", str(tls.ca_cert)]
        if security.auth:
            assert security.username is not None and security.password is not None
            path = private_file(security, "tbmq-style.password")
            path.write_text(security.password + "\n", encoding="utf-8")
            argv += ["--username", security.username, "--password-file", str(path)]
        settings.update(tls=tls is not None, auth=security.auth)
        ready = None
        if tls is not None:
            context = tls_probe_context(security)

            def ready(host: str, port: int, timeout_s: float) -> bool:
                return mqtt_probe(host, port, timeout_s, context)

        return replace(
            plan, argv=argv, config_text=" ".join(argv), settings=settings, ready_check=ready
        )

    def find_binary(self) -> Path | None:
        """The interpreter running mqbench."""
        return Path(sys.executable)

    def version(self, binary: Path) -> str:
        """mqbench's version (the broker is part of it)."""
        return __version__

    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """Start Redis/PostgreSQL when needed; return the broker's command line."""
        opts = parse_options("tbmq-style", TbmqStyleOptions, options)
        persistence = opts.persistence
        app_queue = opts.app_queue
        services: list[RedisService | PostgresService] = []
        redis_url = opts.redis_url
        postgres_dsn = opts.postgres_dsn
        try:
            if redis_url is None and (
                persistence.startswith("redis") or app_queue == "redis-streams"
            ):
                redis = RedisService(workdir, host).start()
                services.append(redis)
                redis_url = redis.url
            if postgres_dsn is None and persistence == "postgres":
                pg = PostgresService(
                    workdir, host, synchronous_commit=opts.postgres_synchronous_commit
                ).start()
                services.append(pg)
                postgres_dsn = pg.dsn
        except BaseException:
            for service in reversed(services):
                service.stop()
            raise
        argv = [
            str(binary), "-m", "mqbench.builtin_broker", "--host", host, "--port", str(port),
            "--persistence", persistence, "--app-queue", app_queue,
            "--messages-limit", str(opts.messages_limit),
            "--message-ttl", str(opts.message_ttl),
            "--max-inflight", str(opts.max_inflight),
            "--max-packet-size", str(opts.max_packet_size),
            "--session-expiry", str(opts.session_expiry),
            "--log-level", opts.log_level,
        ]  # fmt: skip
        if redis_url:
            argv += ["--redis-url", str(redis_url)]
        if postgres_dsn:
            argv += ["--postgres-dsn", str(postgres_dsn)]
        for pattern, flag in (
            (opts.device_pattern, "--device-pattern"),
            (opts.app_pattern, "--app-pattern"),
        ):
            if pattern is not None:
                argv += [flag, pattern]
        if not opts.uvloop:
            argv.append("--no-uvloop")
        key = f"{workdir}:{port}"
        self._services[key] = services
        settings: BrokerSettings = opts.model_dump(exclude={"redis_url", "postgres_dsn"})
        settings.update(
            redis_url=redis_url,
            postgres_dsn=postgres_dsn,
            started_services=[type(s).__name__ for s in services],
            service_pids=[s.pid for s in services],
        )
        return LaunchPlan(
            argv=argv, config_path=None, config_text=" ".join(argv), settings=settings
        )

    def companion_pids(self, plan: LaunchPlan) -> list[int]:
        """Stop the services started for this broker (after the broker) and list their PIDs."""
        pids: list[int] = []
        for key in [k for k in self._services if k.endswith(":" + _port_of(plan.argv))]:
            for service in reversed(self._services.pop(key)):
                if service.pid is not None:
                    pids.append(service.pid)
                service.stop()
        return pids

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """An MQTT CONNECT answered by a CONNACK."""
        return mqtt_probe(host, port, timeout_s)


def _port_of(argv: list[str]) -> str:
    return argv[argv.index("--port") + 1] if "--port" in argv else ""


DEFINITION = BrokerDefinition(
    "tbmq-style",
    (
        TargetDefinition(
            "tbmq-style",
            "mqbench TBMQ-style broker",
            "mqtt",
            "mqbench's built-in TBMQ-style MQTT broker (mqbench/broker)",
            1883,
            native=TbmqStyleSpec,
            native_source="built into mqbench",
            compose=ComposeEntry("tbmq-style.yaml", "broker", min_startup_s=120.0),
            docker_security_gap=(
                "its image is built from compose/tbmq-style and runs with the compose file's own "
                "command; no secured container config is written for it yet (the native runtime "
                "secures the built-in broker)"
            ),
        ),
    ),
)
"""mqbench's own broker (docs/broker.md): one asyncio process, no profile knob."""
