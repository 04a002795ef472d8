"""Eclipse Mosquitto 2 as a native process (Debian package ``mosquitto``).

Decisions (see docs/brokers.md):

- Mosquitto started as root drops privileges to user ``mosquitto``; files it opens after
  that (log file, persistence database) must be reachable by that user, which fails in
  root-only temporary directories such as pytest's. mqbench therefore writes
  ``user <current user>`` into the config, so the broker keeps the identity of whoever runs
  mqbench and can use its work directory (as root, mosquitto prints a warning, which is
  harmless). ``options["user"]`` restores the stock behaviour (e.g. ``"mosquitto"``).
- Logging goes to stderr (unbuffered, unlike stdout), which the runtime redirects into
  ``<workdir>/mosquitto.log``; mqbench opens that file before the broker starts, so no
  ownership question arises.
- ``max_queued_messages`` defaults to 100000 (stock: 1000) so QoS 1/2 bursts and offline
  persistent sessions are not silently trimmed at benchmark rates; ``max_inflight_messages``
  keeps the stock 20 but is written explicitly so it lands in the manifest.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.docker.security import SecuredContainer, mosquitto_healthcheck
from mqbench.brokers.runtime.mounts import NATIVE, Mounts
from mqbench.brokers.runtime.native_spec import (
    ConfiguredSpec,
    LaunchPlan,
    first_match,
    run_for_output,
)
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import mqtt_probe
from mqbench.brokers.runtime.settings import BrokerSettings
from mqbench.brokers.security.secured import private_file, tls_probe_context


class MosquittoOptions(BrokerOptionsModel):
    """The mosquitto options mqbench writes into ``mosquitto.conf``."""

    max_queued_messages: int = Field(
        100000, description="QoS 1/2 messages queued per client (stock: 1000)"
    )
    max_queued_bytes: int = Field(0, description="bytes queued per client (0: no limit)")
    max_inflight_messages: int = Field(20, description="QoS 1/2 messages in flight per client")
    max_connections: int = Field(-1, description="client connections accepted (-1: no limit)")
    persistence: bool = Field(False, description="persist to data/ in the work directory")
    user: str | None = Field(None, description="user the broker runs as (null: current user)")
    extra_config: str = Field("", description="mosquitto.conf lines appended verbatim")


def password_line(username: str, password: str, iterations: int = 101) -> str:
    """One ``password_file`` line in mosquitto 2's ``$7$`` format (PBKDF2-SHA512), as
    ``mosquitto_passwd`` writes it, without putting the password on a command line."""
    salt = secrets.token_bytes(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations)
    b64 = base64.b64encode
    return f"{username}:$7${iterations}${b64(salt).decode()}${b64(digest).decode()}"


def _security_lines(security: BrokerSecurity | None, mounts: Mounts) -> list[str]:
    """Listener TLS settings and the password file (written into the private directory)."""
    if security is None:
        return []
    lines: list[str] = []
    if security.tls is not None:
        lines += [
            f"cafile {mounts.seen(security.tls.ca_cert)}",
            f"certfile {mounts.seen(security.tls.server_cert)}",
            f"keyfile {mounts.seen(security.tls.server_key)}",
            f"require_certificate {'true' if security.require_client_cert else 'false'}",
        ]
    if security.auth:
        assert security.username is not None and security.password is not None
        path = private_file(security, "mosquitto.passwd")
        path.write_text(password_line(security.username, security.password) + "\n", "utf-8")
        lines.append(f"password_file {mounts.seen(path)}")
    return lines


def _current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root" if os.geteuid() == 0 else str(os.geteuid())


class MosquittoSpec(ConfiguredSpec):
    """Mosquitto: config file with one loopback listener, anonymous access, no persistence."""

    options_model = MosquittoOptions
    name = "mosquitto"
    executable = "mosquitto"
    install_hint = "apt-get install mosquitto"

    def candidate_paths(self) -> Iterable[Path]:
        """``/usr/sbin`` is not on a non-root user's PATH on Debian."""
        return (Path("/usr/sbin/mosquitto"),)

    def version(self, binary: Path) -> str:
        """Parse ``mosquitto -h`` ("mosquitto version 2.0.11")."""
        return first_match(r"mosquitto version (\S+)", run_for_output([str(binary), "-h"]))

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
        """Plain: write ``mosquitto.conf`` and return ``mosquitto -c mosquitto.conf``. Secured:
        The listener with ``cafile``/``certfile``/``keyfile`` and/or a password file
        (PBKDF2-SHA512, mosquitto's ``$7$`` format) in the private directory."""
        opts = parse_options("mosquitto", MosquittoOptions, options)
        user = opts.user or _current_user()
        auth = security is not None and security.auth
        lines = [
            "# written by mqbench (mqbench/brokers/definitions/mosquitto.py)",
            f"user {user}",
            f"listener {port} {host}",
            *_security_lines(security, mounts),
            f"allow_anonymous {'false' if auth else 'true'}",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "log_timestamp true",
            "log_timestamp_format %Y-%m-%dT%H:%M:%S",
            "set_tcp_nodelay true",
            f"max_queued_messages {opts.max_queued_messages}",
            f"max_queued_bytes {opts.max_queued_bytes}",
            f"max_inflight_messages {opts.max_inflight_messages}",
            f"max_connections {opts.max_connections}",
        ]
        if opts.persistence:
            data_dir = workdir / "data"
            data_dir.mkdir(parents=True, exist_ok=True)
            lines += ["persistence true", f"persistence_location {mounts.seen(data_dir)}/"]
        else:
            lines.append("persistence false")
        extra = opts.extra_config.strip()
        if extra:
            lines += ["# extra_config from the scenario", extra]
        text = "\n".join(lines) + "\n"
        config_path = workdir / "mosquitto.conf"
        config_path.write_text(text, encoding="utf-8")
        settings: BrokerSettings = opts.model_dump(
            include={
                "max_queued_messages",
                "max_queued_bytes",
                "max_inflight_messages",
                "max_connections",
                "persistence",
            }
        )
        settings.update(user=user, set_tcp_nodelay=True, allow_anonymous=not auth)
        if extra:
            settings["extra_config"] = extra
        ready = None
        if security is not None and security.tls is not None:
            context = tls_probe_context(security)
            settings["tls"] = True

            def ready(host: str, port: int, timeout_s: float) -> bool:
                return mqtt_probe(host, port, timeout_s, context)

        return LaunchPlan(
            argv=[str(binary), "-c", mounts.seen(config_path)],
            config_path=config_path,
            config_text=text,
            settings=settings,
            ready_check=ready,
        )

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """Send an MQTT 3.1.1 CONNECT and expect a CONNACK (``20 02 ..``).

        A CONNACK that refuses the probe (e.g. "not authorized" when the scenario's config
        disables anonymous access) still proves the broker is up and speaking MQTT.
        """
        return mqtt_probe(host, port, timeout_s)


DEFINITION = BrokerDefinition(
    "mosquitto",
    (
        TargetDefinition(
            "mosquitto",
            "Eclipse Mosquitto 2",
            "mqtt",
            "Eclipse Mosquitto 2 over MQTT",
            1883,
            native=MosquittoSpec,
            native_source="Debian package mosquitto",
            compose=ComposeEntry("mosquitto.yaml", "mosquitto", host_network=True),
            secured_container=SecuredContainer(
                binary=PurePosixPath("/usr/sbin/mosquitto"),
                # eclipse-mosquitto's Dockerfile creates user and group mosquitto as 1883.
                uid=1883,
                gid=1883,
                port=1883,
                healthcheck=mosquitto_healthcheck,
                healthcheck_logs_in=True,
                # The plain compose file's limits, so plain and secured runs compare.
                options={"user": "mosquitto", "max_inflight_messages": 0},
            ),
        ),
    ),
)
"""Mosquitto: single-threaded, so a native profile sets no knob."""
