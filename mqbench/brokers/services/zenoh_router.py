"""A Zenoh router hosted by the ``eclipse-zenoh`` package (no ``zenohd`` binary needed).

Run as ``python -m mqbench.brokers.services.zenoh_router --listen tcp/127.0.0.1:7447``. It opens a
session in ``router`` mode listening on the given endpoint with multicast scouting and
gossip off (nothing leaves loopback, nothing is discovered), prints one ready line

    zenoh-router ready zid=<id> listen=tcp/127.0.0.1:7447 version=<eclipse-zenoh version>

to stdout (flushed), and runs until SIGTERM or SIGINT, then closes the session and exits 0.
``--config`` adds JSON5 settings (``key=value``, e.g. ``transport/unicast/max_sessions=5000``).
The router's routing runs in zenoh's Rust threads: this Python process is only its host.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from importlib import metadata
from typing import Any

from mqbench.brokers.runtime.settings import BrokerSettings

READY_PREFIX = "zenoh-router ready"
"""Start of the line printed once the router listens."""

MAX_SESSIONS = 10000
"""Default ``transport/unicast/max_sessions`` (zenoh's own default of 1000 is too few for
pairs topologies with hundreds of pairs)."""


def router_settings(listen: str, max_sessions: int = MAX_SESSIONS) -> BrokerSettings:
    """The config keys the router sets (JSON values), in the order they are applied."""
    return {
        "mode": "router",
        "listen/endpoints": [listen],
        "connect/endpoints": [],
        "scouting/multicast/enabled": False,
        "scouting/gossip/enabled": False,
        "transport/unicast/max_sessions": max_sessions,
        "adminspace/enabled": False,
        "timestamping/enabled": False,
    }


def zenoh_version() -> str:
    """The installed ``eclipse-zenoh`` version ("unknown" when it cannot be read)."""
    try:
        return metadata.version("eclipse-zenoh")
    except metadata.PackageNotFoundError:
        return "unknown"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mqbench.brokers.services.zenoh_router", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--listen", required=True, help="endpoint, e.g. tcp/127.0.0.1:7447")
    parser.add_argument("--max-sessions", type=int, default=MAX_SESSIONS)
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=JSON5",
        help="extra zenoh config entry (repeatable)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the router until SIGTERM/SIGINT; return the exit code."""
    args = _parse_args(argv)
    import zenoh

    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    config = zenoh.Config()
    try:
        for key, value in router_settings(args.listen, args.max_sessions).items():
            config.insert_json5(key, json.dumps(value))
        for entry in args.config:
            key, sep, value = entry.partition("=")
            if not sep:
                print(f"zenoh-router: --config needs KEY=VALUE, got {entry!r}", file=sys.stderr)
                return 2
            config.insert_json5(key.strip(), value.strip())
        session: Any = zenoh.open(config)
    except Exception as exc:  # zenoh raises ZError (e.g. address in use)
        print(f"zenoh-router: cannot start: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        print(
            f"{READY_PREFIX} zid={session.zid()} listen={args.listen} version={zenoh_version()}",
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    finally:
        session.close()
    print("zenoh-router stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
