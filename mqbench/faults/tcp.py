"""The TCP side of mqbench's Toxiproxy-compatible proxy: named proxies, links, event log.

A ``ToxicProxy`` listens on one address and forwards every accepted connection (a *link*)
to its upstream. Each link runs two streams: ``upstream`` (client -> server) and
``downstream`` (server -> client). Per stream a reader task stamps chunks with their arrival
time and a writer task applies the proxy's toxics in the order they were added, so latency
counts from arrival and chunk order is kept. ``timeout`` and ``reset_peer`` act on links by
timers started when the toxic reaches the link (added to an existing link, or a new link
accepted while the toxic is present). Every toxic is rolled once per link against its
``toxicity``.

``ProxyRegistry`` holds the proxies of one server and one ``EventLog`` of what happened
(proxy created/enabled/disabled/deleted, toxic added/updated/removed, connection opened,
closed or reset), each event stamped with ``time.time_ns()`` — the clock of the records —
so a run's fault timeline can be checked against it. Nothing here speaks HTTP
(``mqbench.faults.api`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
import struct
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from mqbench.errors import MqbenchError
from mqbench.faults.toxics import (
    DOWNSTREAM,
    STREAMS,
    UPSTREAM,
    BandwidthPacer,
    LatencyShaper,
    LimitCounter,
    Toxic,
    rolls_affected,
)

READ_CHUNK: Final = 65536
"""Bytes read per socket read."""
QUEUE_CHUNKS: Final = 256
"""Chunks buffered per stream between reader and writer (back-pressure beyond)."""
UPSTREAM_CONNECT_TIMEOUT_S: Final = 5.0
"""How long a link waits for its upstream to accept."""
EVENT_LOG_SIZE: Final = 200_000
"""Events kept per server (oldest dropped first; ``EventLog.dropped`` counts them)."""

_EOF: Final = object()


class ApiError(MqbenchError):
    """A proxy operation failed; ``status`` is the HTTP status the API answers with."""

    def __init__(self, status: int, message: str) -> None:
        """Fail with HTTP ``status`` and a one-line ``message``."""
        super().__init__(message)
        self.status = status


def split_hostport(address: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) as ``(host, port)``; ``ApiError`` 400 otherwise."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ApiError(400, f"address must be host:port, got {address!r}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port_text)


def _join_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class EventLog:
    """Timestamped events of every proxy of a server (bounded; oldest dropped first)."""

    def __init__(self, maxlen: int = EVENT_LOG_SIZE) -> None:
        """Keep at most ``maxlen`` events."""
        self._events: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self._seq = itertools.count(1)
        self.dropped = 0

    def record(self, proxy: str, event: str, **fields: Any) -> dict[str, Any]:
        """Append ``{seq, t_ns, proxy, event, **fields}`` and return it."""
        if self._events.maxlen is not None and len(self._events) == self._events.maxlen:
            self.dropped += 1
        entry = {"seq": next(self._seq), "t_ns": time.time_ns(), "proxy": proxy, "event": event}
        entry.update(fields)
        self._events.append(entry)
        return entry

    def events(self, proxy: str | None = None, since_seq: int = 0) -> list[dict[str, Any]]:
        """Events with ``seq > since_seq``, of one proxy or all, oldest first."""
        return [
            dict(e)
            for e in self._events
            if e["seq"] > since_seq and (proxy is None or e["proxy"] == proxy)
        ]


@dataclass
class _ToxicState:
    """One toxic as it applies to one link."""

    toxic: Toxic
    affected: bool
    shaper: LatencyShaper | None = None
    pacer: BandwidthPacer | None = None
    counter: LimitCounter | None = None
    timer: asyncio.Task[None] | None = None


@dataclass
class _Side:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    eof_sent: bool = False


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    """Close a connection so the peer sees a TCP RST (SO_LINGER on, 0 s)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass
class Link:
    """One proxied connection: the client side, the upstream side, its toxic states."""

    proxy: ToxicProxy
    conn_id: int
    client: _Side
    client_addr: str
    upstream: _Side | None = None
    states: dict[str, _ToxicState] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=lambda: {UPSTREAM: 0, DOWNSTREAM: 0})
    closed: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    # -- toxics -------------------------------------------------------------------------

    def activate(self, toxic: Toxic) -> bool:
        """Apply ``toxic`` to this link from now on; return whether the link is affected."""
        self.deactivate(toxic.name)
        state = _ToxicState(toxic, rolls_affected(toxic.toxicity, self.proxy.rng))
        self.states[toxic.name] = state
        if not state.affected:
            return False
        if toxic.type == "latency":
            state.shaper = LatencyShaper(
                toxic.attr("latency"), toxic.attr("jitter"), self.proxy.rng
            )
        elif toxic.type == "bandwidth":
            state.pacer = BandwidthPacer(toxic.attr("rate"))
        elif toxic.type == "limit_data":
            state.counter = LimitCounter(toxic.attr("bytes"))
        elif toxic.type == "reset_peer" or (toxic.type == "timeout" and toxic.attr("timeout") > 0):
            delay = toxic.attr("timeout") / 1000.0
            state.timer = asyncio.get_running_loop().create_task(self._fire(toxic, delay))
        return True

    def deactivate(self, name: str) -> None:
        """Stop applying the toxic called ``name`` to this link (its timer is cancelled)."""
        state = self.states.pop(name, None)
        if state is not None and state.timer is not None:
            state.timer.cancel()

    async def _fire(self, toxic: Toxic, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        state = self.states.get(toxic.name)
        if self.closed or state is None or state.toxic is not toxic:
            return
        if toxic.type == "reset_peer":
            self.finish("reset_peer", rst_stream=toxic.stream, toxic=toxic.name)
        else:
            self.finish("timeout", toxic=toxic.name)

    def _active(self, stream: str) -> list[_ToxicState]:
        return [
            s
            for s in self.states.values()
            if s.affected
            and s.toxic.stream == stream
            and self.proxy.toxics.get(s.toxic.name) is s.toxic
        ]

    # -- data path ----------------------------------------------------------------------

    def start(self, upstream: _Side) -> None:
        """Attach the upstream connection and start the four pump tasks."""
        self.upstream = upstream
        loop = asyncio.get_running_loop()
        for stream, src, dst in (
            (UPSTREAM, self.client, upstream),
            (DOWNSTREAM, upstream, self.client),
        ):
            queue: asyncio.Queue[object] = asyncio.Queue(QUEUE_CHUNKS)
            self.tasks.append(loop.create_task(self._read(stream, src, queue)))
            self.tasks.append(loop.create_task(self._write(stream, queue, dst)))

    async def _read(self, stream: str, src: _Side, queue: asyncio.Queue[object]) -> None:
        try:
            while True:
                data = await src.reader.read(READ_CHUNK)
                if not data:
                    break
                await queue.put((time.monotonic(), data))
        except (ConnectionError, OSError) as exc:
            side = "client" if stream == UPSTREAM else "upstream"
            self.finish(f"{side}_error", detail=f"{type(exc).__name__}: {exc}")
            return
        await queue.put(_EOF)

    async def _write(self, stream: str, queue: asyncio.Queue[object], dst: _Side) -> None:
        try:
            while True:
                item = await queue.get()
                if item is _EOF:
                    self._half_close(stream, dst)
                    return
                assert isinstance(item, tuple)
                arrival, data = item
                if not await self._pass(stream, arrival, data, dst):
                    return
        except (ConnectionError, OSError) as exc:
            side = "upstream" if stream == UPSTREAM else "client"
            self.finish(f"{side}_error", detail=f"{type(exc).__name__}: {exc}")

    async def _pass(self, stream: str, arrival: float, data: bytes, dst: _Side) -> bool:
        """Send one chunk through the stream's toxics; False when the link was closed."""
        pacers: list[BandwidthPacer] = []
        limit_hit: str | None = None
        for state in self._active(stream):
            kind = state.toxic.type
            if kind == "timeout":
                return True  # the chunk is dropped
            if state.shaper is not None:
                wait = state.shaper.release_at(arrival) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            elif state.counter is not None:
                data, reached = state.counter.take(data)
                if reached:
                    limit_hit = state.toxic.name
            elif state.pacer is not None and not state.pacer.unlimited:
                pacers.append(state.pacer)
        if self.closed:
            return False
        if pacers:
            pacer = min(pacers, key=lambda p: p.bytes_per_s)
            for piece in pacer.pieces(data):
                wait = pacer.slot(len(piece), time.monotonic()) - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.writer.write(piece)
                self.sent[stream] += len(piece)
                await dst.writer.drain()
        elif data:
            dst.writer.write(data)
            self.sent[stream] += len(data)
            await dst.writer.drain()
        if limit_hit is not None:
            self.finish("limit_data", toxic=limit_hit)
            return False
        return True

    def _half_close(self, stream: str, dst: _Side) -> None:
        """The stream's source sent EOF: pass it on; when both have, close the link."""
        if dst.writer.can_write_eof():
            with contextlib.suppress(OSError):
                dst.writer.write_eof()
        dst.eof_sent = True
        assert self.upstream is not None
        if self.client.eof_sent and self.upstream.eof_sent:
            self.finish("closed", first_eof="client" if stream == UPSTREAM else "upstream")

    # -- teardown -----------------------------------------------------------------------

    def finish(self, reason: str, *, rst_stream: str | None = None, **fields: Any) -> None:
        """Close the link once (idempotent) and log it.

        ``rst_stream`` (reset_peer) resets the socket that stream writes to — the client for
        ``downstream``, the upstream server for ``upstream`` — with a TCP RST; the other side
        is closed normally. Without it both sides are closed normally.
        """
        if self.closed:
            return
        self.closed = True
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        for state in self.states.values():
            if state.timer is not None and state.timer is not current:
                state.timer.cancel()
        rst_side = None
        if rst_stream is not None:
            rst_side = self.client if rst_stream == DOWNSTREAM else self.upstream
        for side in (self.client, self.upstream):
            if side is None:
                continue
            if side is rst_side:
                _abort_with_rst(side.writer)
            else:
                side.writer.close()
        event = "connection_reset" if rst_stream is not None else "connection_closed"
        if rst_stream is not None:
            fields["reset_side"] = "client" if rst_stream == DOWNSTREAM else "upstream"
        self.proxy.log.record(
            self.proxy.name,
            event,
            conn=self.conn_id,
            client=self.client_addr,
            reason=reason,
            bytes_up=self.sent[UPSTREAM],
            bytes_down=self.sent[DOWNSTREAM],
            **fields,
        )
        self.proxy.links.pop(self.conn_id, None)
        self.done.set()


class ToxicProxy:
    """One named proxy: a listener, its upstream, its toxics and its live links."""

    def __init__(
        self,
        name: str,
        listen: str,
        upstream: str,
        *,
        enabled: bool,
        log: EventLog,
        rng: random.Random,
    ) -> None:
        """Describe a proxy; nothing listens until ``start``."""
        split_hostport(listen)
        split_hostport(upstream)
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = enabled
        self.log = log
        self.rng = rng
        self.toxics: dict[str, Toxic] = {}
        self.links: dict[int, Link] = {}
        self._ids = itertools.count(1)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    def to_json(self) -> dict[str, Any]:
        """The API's JSON shape: ``{name, listen, upstream, enabled, toxics}``."""
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.to_json() for t in self.toxics.values()],
        }

    @property
    def connections(self) -> list[dict[str, Any]]:
        """Live links: ``{conn, client, bytes_up, bytes_down}`` each."""
        return [
            {
                "conn": link.conn_id,
                "client": link.client_addr,
                "bytes_up": link.sent[UPSTREAM],
                "bytes_down": link.sent[DOWNSTREAM],
            }
            for link in list(self.links.values())
        ]

    async def start(self) -> None:
        """Listen (when enabled); the listen address then shows the bound port."""
        if not self.enabled or self._server is not None:
            return
        host, port = split_hostport(self.listen)
        try:
            server = await asyncio.start_server(self._on_client, host, port, reuse_address=True)
        except OSError as exc:
            self.enabled = False
            raise ApiError(
                500, f"proxy {self.name!r}: cannot listen on {self.listen}: {exc}"
            ) from None
        self._server = server
        bound = server.sockets[0].getsockname()
        self.listen = _join_hostport(str(bound[0]), int(bound[1]))

    async def _stop_listening(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()

    def _close_links(self, reason: str) -> None:
        for link in list(self.links.values()):
            link.finish(reason)

    async def set_enabled(self, enabled: bool) -> None:
        """Enable (listen again on the same address) or disable (stop listening, drop links)."""
        if enabled == self.enabled:
            return
        if enabled:
            self.enabled = True
            await self.start()
            self.log.record(self.name, "proxy_enabled", listen=self.listen)
        else:
            self.enabled = False
            await self._stop_listening()
            self.log.record(self.name, "proxy_disabled")
            self._close_links("proxy_disabled")

    async def update(
        self, *, listen: str | None = None, upstream: str | None = None, enabled: bool | None = None
    ) -> None:
        """Change listen address, upstream or enabled (fields left None are kept)."""
        if upstream is not None and upstream != self.upstream:
            split_hostport(upstream)
            self.upstream = upstream
            self.log.record(self.name, "proxy_updated", upstream=upstream)
        if listen is not None and listen != self.listen:
            split_hostport(listen)
            self.listen = listen
            if self._server is not None:
                await self._stop_listening()
                self._close_links("proxy_updated")
                await self.start()
            self.log.record(self.name, "proxy_updated", listen=self.listen)
        if enabled is not None:
            await self.set_enabled(enabled)

    async def close(self) -> None:
        """Stop listening and close every link (the proxy is being deleted)."""
        await self._stop_listening()
        self._close_links("proxy_deleted")
        for task in list(self._handlers):
            task.cancel()

    # -- toxics -------------------------------------------------------------------------

    def add_toxic(self, toxic: Toxic) -> Toxic:
        """Add a toxic (``ApiError`` 409 when the name is taken); it hits live links now."""
        if toxic.name in self.toxics:
            raise ApiError(409, f"toxic {toxic.name!r} already exists on proxy {self.name!r}")
        self.toxics[toxic.name] = toxic
        self._announce("toxic_added", toxic, self._activate_all(toxic))
        return toxic

    def update_toxic(self, name: str, toxic: Toxic) -> Toxic:
        """Replace toxic ``name`` (same name and type); live links restart its state."""
        old = self.get_toxic(name)
        if toxic.type != old.type or toxic.name != name:
            raise ApiError(400, f"toxic {name!r}: the name and type of a toxic cannot change")
        self.toxics[name] = toxic
        self._announce("toxic_updated", toxic, self._activate_all(toxic))
        return toxic

    def remove_toxic(self, name: str) -> None:
        """Remove toxic ``name`` (``ApiError`` 404 when missing); links stop applying it."""
        toxic = self.get_toxic(name)
        del self.toxics[name]
        for link in list(self.links.values()):
            link.deactivate(name)
        self.log.record(
            self.name, "toxic_removed", toxic=name, type=toxic.type, stream=toxic.stream
        )

    def get_toxic(self, name: str) -> Toxic:
        """Toxic ``name`` (``ApiError`` 404 when missing)."""
        try:
            return self.toxics[name]
        except KeyError:
            raise ApiError(404, f"toxic {name!r} not found on proxy {self.name!r}") from None

    def _activate_all(self, toxic: Toxic) -> list[Link]:
        return [link for link in list(self.links.values()) if link.activate(toxic)]

    def _announce(self, event: str, toxic: Toxic, affected: Iterable[Link]) -> None:
        hit = list(affected)
        self.log.record(
            self.name,
            event,
            toxic=toxic.name,
            type=toxic.type,
            stream=toxic.stream,
            toxicity=toxic.toxicity,
            attributes=dict(toxic.attributes),
            conns=[link.conn_id for link in hit],
            clients=[link.client_addr for link in hit],
        )

    # -- connections --------------------------------------------------------------------

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve_link(reader, writer)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _serve_link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.enabled:
            writer.transport.abort()
            return
        peer = writer.get_extra_info("peername")
        client_addr = _join_hostport(str(peer[0]), int(peer[1])) if peer else "?"
        link = Link(self, next(self._ids), _Side(reader, writer), client_addr)
        self.links[link.conn_id] = link
        self.log.record(self.name, "connection_opened", conn=link.conn_id, client=client_addr)
        host, port = split_hostport(self.upstream)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), UPSTREAM_CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            link.finish("upstream_unreachable", detail=f"{type(exc).__name__}: {exc}")
            return
        if link.closed:
            up_writer.close()
            return
        link.start(_Side(up_reader, up_writer))
        for toxic in list(self.toxics.values()):
            link.activate(toxic)
        try:
            await link.done.wait()
        finally:
            link.finish("proxy_stopped")


class ProxyRegistry:
    """The proxies of one server, by name, with the server's event log."""

    def __init__(self, *, seed: int | None = None, log_size: int = EVENT_LOG_SIZE) -> None:
        """Start empty; ``seed`` fixes toxicity rolls and jitter (None: random)."""
        self.proxies: dict[str, ToxicProxy] = {}
        self.log = EventLog(log_size)
        self.rng = random.Random(seed)

    def get(self, name: str) -> ToxicProxy:
        """Proxy ``name`` (``ApiError`` 404 when missing)."""
        try:
            return self.proxies[name]
        except KeyError:
            raise ApiError(404, f"proxy {name!r} not found") from None

    async def create(
        self, name: str, listen: str, upstream: str, *, enabled: bool = True
    ) -> ToxicProxy:
        """Create and start a proxy (``ApiError`` 409 when the name is taken, 400 if bad)."""
        if not name or "/" in name:
            raise ApiError(400, f"proxy name must be non-empty without '/', got {name!r}")
        if name in self.proxies:
            raise ApiError(409, f"proxy {name!r} already exists")
        proxy = ToxicProxy(name, listen, upstream, enabled=enabled, log=self.log, rng=self.rng)
        await proxy.start()
        self.proxies[name] = proxy
        self.log.record(
            name, "proxy_created", listen=proxy.listen, upstream=upstream, enabled=enabled
        )
        return proxy

    async def delete(self, name: str) -> None:
        """Delete proxy ``name`` and close its links (``ApiError`` 404 when missing)."""
        proxy = self.get(name)
        del self.proxies[name]
        await proxy.close()
        self.log.record(name, "proxy_deleted")

    async def reset(self) -> None:
        """Toxiproxy's ``/reset``: enable every proxy and remove every toxic."""
        for proxy in list(self.proxies.values()):
            await proxy.set_enabled(True)
            for toxic_name in list(proxy.toxics):
                proxy.remove_toxic(toxic_name)

    async def close(self) -> None:
        """Delete every proxy."""
        for name in list(self.proxies):
            await self.delete(name)


__all__ = [
    "STREAMS",
    "ApiError",
    "EventLog",
    "Link",
    "ProxyRegistry",
    "ToxicProxy",
    "split_hostport",
]
