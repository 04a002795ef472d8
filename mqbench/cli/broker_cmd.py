"""``mqbench broker serve``: run the built-in TBMQ-style MQTT broker in the foreground.

Registered in the main app with ``app.add_typer(broker_app, name="broker")``; also runs as
``python -m mqbench.builtin_broker [OPTIONS]`` (same options, no sub-command).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mqbench.cli.errors import guarded

broker_app = typer.Typer(
    help="The built-in TBMQ-style MQTT broker (target tbmq-style).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0: any free port).")] = 1883,
    persistence: Annotated[
        str,
        typer.Option(
            "--persistence",
            help="DEVICE session store: memory, redis-async, redis-sync or postgres.",
        ),
    ] = "memory",
    app_queue: Annotated[
        str, typer.Option("--app-queue", help="APPLICATION queue: memory or redis-streams.")
    ] = "memory",
    redis_url: Annotated[
        str, typer.Option("--redis-url", help="Redis for redis-* stores and redis-streams.")
    ] = "redis://127.0.0.1:6379/0",
    postgres_dsn: Annotated[
        str, typer.Option("--postgres-dsn", help="PostgreSQL for the postgres store.")
    ] = "postgresql://postgres@127.0.0.1:5432/postgres",
    device_pattern: Annotated[
        str | None,
        typer.Option(
            "--device-pattern",
            help="Regex (full match) of DEVICE client ids; others become APPLICATION.",
        ),
    ] = None,
    app_pattern: Annotated[
        str | None,
        typer.Option("--app-pattern", help="Regex (full match) of APPLICATION client ids."),
    ] = None,
    credentials_file: Annotated[
        Path | None,
        typer.Option(
            "--credentials-file",
            help="JSON credentials with client types; enforced when given.",
        ),
    ] = None,
    username: Annotated[
        str | None,
        typer.Option("--username", help="Require this user name (with --password-file)."),
    ] = None,
    password_file: Annotated[
        Path | None,
        typer.Option("--password-file", help="File whose first line is the required password."),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="PEM server certificate: listen with TLS.")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.")
    ] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option("--tls-client-ca", help="PEM CA: require client certificates it signed."),
    ] = None,
    messages_limit: Annotated[
        int,
        typer.Option("--messages-limit", help="Persisted messages per DEVICE client (<= 65535)."),
    ] = 10_000,
    message_ttl: Annotated[
        int, typer.Option("--message-ttl", help="Seconds a persisted message lives (0: forever).")
    ] = 600,
    max_inflight: Annotated[
        int, typer.Option("--max-inflight", help="Unacknowledged QoS 1/2 messages per client.")
    ] = 1000,
    max_packet_size: Annotated[
        int, typer.Option("--max-packet-size", help="Largest accepted packet in bytes.")
    ] = 16 * 1024 * 1024,
    max_keepalive: Annotated[
        int, typer.Option("--max-keepalive", help="Upper bound for keep-alives in s (0: none).")
    ] = 0,
    session_expiry: Annotated[
        int,
        typer.Option(
            "--session-expiry",
            help="Expiry of MQTT 3.1.1 persistent sessions in s (0: never).",
        ),
    ] = 0,
    no_uvloop: Annotated[
        bool, typer.Option("--no-uvloop", help="Use the default asyncio loop.")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning.")] = "info",
) -> None:
    """Serve MQTT 3.1.1 and 5 until SIGINT/SIGTERM.

    Example: mqbench broker serve --port 1883 --persistence redis-async
    """

    def go() -> None:
        from mqbench.builtin_broker.config import BrokerConfig
        from mqbench.builtin_broker.run import serve_until_stopped

        config = BrokerConfig(
            host=host,
            port=port,
            persistence=persistence,
            app_queue=app_queue,
            redis_url=redis_url,
            postgres_dsn=postgres_dsn,
            device_pattern=device_pattern,
            app_pattern=app_pattern,
            credentials_file=credentials_file,
            username=username,
            password_file=password_file,
            tls_cert_file=tls_cert,
            tls_key_file=tls_key,
            tls_client_ca_file=tls_client_ca,
            messages_limit=messages_limit,
            message_ttl_s=message_ttl,
            max_inflight=max_inflight,
            max_packet_size=max_packet_size,
            max_keepalive_s=max_keepalive,
            default_session_expiry_s=session_expiry,
            uvloop=not no_uvloop,
        )
        serve_until_stopped(config, log_level, lambda line: typer.echo(line, err=True))

    guarded(go)


broker_app.command("serve")(serve)

standalone_app = typer.Typer(
    add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None
)
standalone_app.command()(serve)
"""The same command without a sub-command, for ``python -m mqbench.builtin_broker``."""


def main() -> None:
    """Entry point of ``python -m mqbench.builtin_broker``."""
    standalone_app(prog_name="python -m mqbench.builtin_broker")
