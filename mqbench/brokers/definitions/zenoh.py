"""The Zenoh router as a native process, hosted by the PyPI package ``eclipse-zenoh``.

There is no ``zenohd`` binary here: ``python -m mqbench.brokers.services.zenoh_router`` opens a
session in ``router`` mode (see that module). The "binary" is therefore the running Python
interpreter, available when ``import zenoh`` works in it.

Settings written explicitly and recorded: the listen endpoint, multicast scouting and gossip
off, ``transport/unicast/max_sessions`` (default 10000; zenoh's own default of 1000 would
refuse the clients of larger pairs topologies), admin space and timestamping off.
Readiness: a TCP connect, then a zenoh ``client``-mode session (scouting off) must open
against the router within the probe's time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.docker.compose import ComposeEntry
from mqbench.brokers.runtime.mounts import NATIVE, Mounts
from mqbench.brokers.runtime.native_spec import ConfiguredSpec, LaunchPlan
from mqbench.brokers.runtime.net import tcp_connect
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.settings import BrokerSettings
from mqbench.brokers.services.zenoh_router import MAX_SESSIONS, router_settings, zenoh_version


class ZenohOptions(BrokerOptionsModel):
    """The zenoh router's options (passed on its command line)."""

    max_sessions: int = Field(MAX_SESSIONS, description="sessions the router accepts")
    extra_config: dict[str, Any] = Field(
        default_factory=dict,
        description="zenoh config keys (like transport/unicast/lowlatency) mapped to JSON values",
    )


class ZenohSpec(ConfiguredSpec):
    """A zenoh router in router mode on one loopback TCP endpoint."""

    options_model = ZenohOptions
    name = "zenoh"
    executable = "eclipse-zenoh (python module zenoh)"
    install_hint = "pip install eclipse-zenoh"

    def find_binary(self) -> Path | None:
        """The current interpreter when it can import ``zenoh``, else None."""
        if importlib.util.find_spec("zenoh") is None:
            return None
        return Path(sys.executable)

    def version(self, binary: Path) -> str:
        """The installed ``eclipse-zenoh`` version (the router runs in this interpreter)."""
        return zenoh_version()

    no_auth = "mqbench does not configure zenoh's user/password authentication (usrpwd)"

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
        """Plain: ``python -m mqbench.brokers.services.zenoh_router --listen tcp/HOST:PORT ...``.
        The effective settings are also written to ``zenoh-router.json5`` for the record.
        Secured: A ``tls/HOST:PORT`` listener with the run's server certificate (and, when
        client certificates are required, mTLS with the run's CA); users are refused."""
        opts = parse_options("zenoh", ZenohOptions, options)
        tls = security.tls if security is not None else None
        extra = opts.extra_config
        listen = f"{'tls' if tls is not None else 'tcp'}/{host}:{port}"
        settings: BrokerSettings = router_settings(listen, opts.max_sessions)
        argv = [
            str(binary),
            "-m",
            "mqbench.brokers.services.zenoh_router",
            "--listen",
            listen,
            "--max-sessions",
            str(opts.max_sessions),
        ]
        secured: dict[str, Any] = {}
        if security is not None and tls is not None:
            secured = {
                "transport/link/tls/listen_certificate": mounts.seen(tls.server_cert),
                "transport/link/tls/listen_private_key": mounts.seen(tls.server_key),
            }
            if security.require_client_cert:
                secured["transport/link/tls/root_ca_certificate"] = mounts.seen(tls.ca_cert)
                secured["transport/link/tls/enable_mtls"] = True
        for key, value in {**secured, **extra}.items():
            argv += ["--config", f"{key}={json.dumps(value)}"]
            settings[str(key)] = value
        text = json.dumps(settings, indent=2) + "\n"
        config_path = workdir / "zenoh-router.json5"
        config_path.write_text(text, encoding="utf-8")
        ready = None
        if security is not None and tls is not None:
            client: list[tuple[str, Any]] = [
                ("transport/link/tls/root_ca_certificate", str(tls.ca_cert))
            ]
            if security.require_client_cert and tls.client_cert and tls.client_key:
                client += [
                    ("transport/link/tls/enable_mtls", True),
                    ("transport/link/tls/connect_certificate", str(tls.client_cert)),
                    ("transport/link/tls/connect_private_key", str(tls.client_key)),
                ]

            def ready(host: str, port: int, timeout_s: float) -> bool:
                return zenoh_ready(host, port, timeout_s, "tls", client)

        return LaunchPlan(
            argv=argv,
            config_path=config_path,
            config_text=text,
            settings=settings,
            ready_check=ready,
        )

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """TCP connect, then open (and close) a zenoh client session to the router."""
        return zenoh_ready(host, port, timeout_s, "tcp", [])


def zenoh_ready(
    host: str, port: int, timeout_s: float, scheme: str, settings: list[tuple[str, Any]]
) -> bool:
    """TCP connect, then open (and close) a zenoh client session over ``scheme``."""
    sock = tcp_connect(host, port, timeout_s)
    if sock is None:
        return False
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
    try:
        import zenoh

        config = zenoh.Config()
        config.insert_json5("mode", '"client"')
        config.insert_json5("connect/endpoints", json.dumps([f"{scheme}/{host}:{port}"]))
        for key, value in settings:
            config.insert_json5(key, json.dumps(value))
        config.insert_json5("scouting/multicast/enabled", "false")
        config.insert_json5("connect/timeout_ms", str(max(int(timeout_s * 1000), 100)))
        session: Any = zenoh.open(config)
    except Exception:
        return False
    try:
        return bool(session.info.routers_zid())
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            session.close()


DEFINITION = BrokerDefinition(
    "zenoh",
    (
        TargetDefinition(
            "zenoh",
            "Zenoh router",
            "zenoh",
            "Zenoh router, clients in client mode",
            7447,
            native=ZenohSpec,
            native_source="router mode of the PyPI package eclipse-zenoh",
            compose=ComposeEntry("zenoh.yaml", "zenoh"),
            docker_security_gap=(
                "the zenoh image runs zenohd, not the router mqbench configures natively "
                "(mqbench/brokers/services/zenoh_router.py), so the native TLS config does "
                "not apply"
            ),
        ),
    ),
)
"""The Zenoh router (``mqbench/brokers/services/zenoh_router.py`` hosts it natively)."""
