"""Run a protocol relay in its own process (its own event loop, uvloop), started and
stopped by PID from the parent.

``RelayProcess.start(protocol)`` spawns the child, which binds a free port on 127.0.0.1 and
reports it over a pipe; ``stop()`` asks the child to stop over the same pipe and, if it does
not exit in time, terminates and then kills that one child (never anything by name).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import multiprocessing as mp
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Final

from mqbench.brokers.runtime.net import free_port
from mqbench.calibration.relays import RELAY_PROTOCOLS, HopStats, Hub
from mqbench.errors import BrokerError

READY_TIMEOUT_S: Final = 20.0
STOP_TIMEOUT_S: Final = 5.0
ZENOH_PORT_ATTEMPTS: Final = 5

_FACTORIES: Final = {
    "mqtt": "mqbench.calibration.mqtt_relay",
    "nats": "mqbench.calibration.nats_relay",
    "redis": "mqbench.calibration.redis_relay",
    "amqp": "mqbench.calibration.amqp_relay",
}


async def _serve_asyncio(protocol: str, host: str, conn: Connection) -> None:
    module = importlib.import_module(_FACTORIES[protocol])
    hub: Hub
    factory: Callable[[], asyncio.Protocol]
    hub, factory = module.relay_factory()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, host, 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    conn.send(("ready", port))
    await _wait_for_stop(conn)
    server.close()
    stats = hub.hop_stats()
    conn.send(("stats", dataclasses.asdict(stats) if stats is not None else None))


async def _wait_for_stop(conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_reader(conn.fileno(), stop.set)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    loop.remove_reader(conn.fileno())


def _serve_zenoh(host: str, conn: Connection) -> None:
    from mqbench.calibration.zenoh_peer import open_discovery_peer

    session: Any = None
    last_error = ""
    for _ in range(ZENOH_PORT_ATTEMPTS):
        port = free_port(host)
        try:
            session = open_discovery_peer(host, port)
            break
        except Exception as exc:  # zenoh.ZError: port taken between free_port and bind
            last_error = str(exc)
    if session is None:
        conn.send(("error", f"zenoh discovery peer did not start: {last_error}"))
        return
    conn.send(("ready", port))
    try:
        with contextlib.suppress(EOFError, OSError):
            conn.recv()
    finally:
        session.close()


def relay_main(protocol: str, host: str, conn: Connection) -> None:
    """Child process entry point: serve ``protocol`` on ``host`` until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if protocol == "zenoh":
            _serve_zenoh(host, conn)
            return
        try:
            import uvloop

            runner: Any = uvloop.run
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            runner = asyncio.run
        runner(_serve_asyncio(protocol, host, conn))
    except Exception as exc:  # report, never leave the parent waiting
        with contextlib.suppress(OSError):
            conn.send(("error", f"{protocol} relay crashed: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class RelayProcess:
    """A running relay: where it listens and which process it is."""

    def __init__(self, protocol: str, process: Any, conn: Connection, host: str, port: int):
        self.protocol = protocol
        self.host = host
        self.port = port
        self._process = process
        self._conn = conn
        self.hop_stats: HopStats | None = None
        """The relay's own residence times, known after ``stop`` (None for zenoh's
        discovery peer, which forwards nothing)."""

    @property
    def pid(self) -> int:
        """The relay's process id (sampled as the "broker" of calibration cells)."""
        pid: int = self._process.pid
        return pid

    @classmethod
    def start(cls, protocol: str, host: str = "127.0.0.1") -> RelayProcess:
        """Spawn the relay for ``protocol``; return once it listens (BrokerError otherwise)."""
        if protocol not in RELAY_PROTOCOLS:
            raise BrokerError(
                f"no calibration relay for protocol {protocol!r} "
                f"(known: {', '.join(RELAY_PROTOCOLS)})"
            )
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        process = ctx.Process(
            target=relay_main, args=(protocol, host, child), name=f"mqbench-relay-{protocol}"
        )
        process.start()
        child.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        message: Any = None
        while time.monotonic() < deadline and process.is_alive():
            if parent.poll(0.1):
                with contextlib.suppress(EOFError, OSError):
                    message = parent.recv()
                break
        relay = cls(protocol, process, parent, host, 0)
        if not (isinstance(message, tuple) and message[0] == "ready"):
            relay.stop()
            reason = message[1] if isinstance(message, tuple) else "no ready message in time"
            raise BrokerError(f"calibration relay for {protocol} did not start: {reason}")
        relay.port = int(message[1])
        return relay

    def stop(self) -> None:
        """Ask the child to stop (and for its hop statistics); terminate, then kill it (by
        PID) if it does not exit. Idempotent."""
        with contextlib.suppress(OSError, EOFError):
            self._conn.send("stop")
            if self._conn.poll(STOP_TIMEOUT_S):
                message = self._conn.recv()
                if isinstance(message, tuple) and message[0] == "stats" and message[1]:
                    self.hop_stats = HopStats(**message[1])
        process = self._process
        process.join(STOP_TIMEOUT_S)
        if process.is_alive():
            process.terminate()
            process.join(STOP_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join(STOP_TIMEOUT_S)
        with contextlib.suppress(OSError):
            self._conn.close()

    def __enter__(self) -> RelayProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
