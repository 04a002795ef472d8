"""Run a broker until SIGINT/SIGTERM (used by ``mqbench broker serve`` and ``-m``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from mqbench.builtin_broker.config import BrokerConfig
from mqbench.builtin_broker.server import Broker

log = logging.getLogger("mqbench.builtin_broker")


def uvloop_available() -> bool:
    """True when uvloop can be imported."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run_async(main: Callable[[], Coroutine[Any, Any, None]], use_uvloop: bool = True) -> str:
    """Run ``main()`` on uvloop when asked and available, else asyncio; returns the loop name."""
    if use_uvloop and uvloop_available():
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
        return "uvloop"
    asyncio.run(main())
    return "asyncio"


async def serve(config: BrokerConfig, ready: Callable[[Broker], None] | None = None) -> None:
    """Start a broker, call ``ready(broker)``, serve until SIGINT/SIGTERM, stop it."""
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        if ready is not None:
            ready(broker)
        await stop.wait()
    finally:
        log.info("stopping: %s", broker.describe())
        await broker.stop()


def configure_logging(level: str = "info") -> None:
    """Log lines ``time level message`` to stderr."""
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(message)s",
    )


def serve_until_stopped(
    config: BrokerConfig, log_level: str, on_ready: Callable[[str], None]
) -> None:
    """``mqbench broker serve``: check ``config``, log to stderr at ``log_level``, serve
    until SIGINT/SIGTERM. ``on_ready`` gets one line saying where the broker listens."""
    config.validate()
    configure_logging(log_level)
    loop_name = "uvloop" if config.uvloop and uvloop_available() else "asyncio"

    def ready(broker: Broker) -> None:
        on_ready(
            f"mqbench broker listening on {config.host}:{broker.port} "
            f"(persistence {config.persistence}, app queue {config.app_queue}, "
            f"loop {loop_name}{', TLS' if config.tls_cert_file else ''}"
            f"{', login required' if config.username else ''})"
        )

    run_async(lambda: serve(config, ready), config.uvloop)
