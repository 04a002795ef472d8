"""The TCP side of mqbench's Toxiproxy-compatible proxy: named proxies, links, event log.

A ``ToxicProxy`` listens on one address and forwards every accepted connection (a *link*)
to its upstream. Each link runs two streams: ``upstream`` (client -> server) and
``downstream`` (server -> client). Per stream a reader task stamps chunks with the time they
were read and puts them into the stream's pipeline (``mqbench.faults.pipeline``): one stage
per toxic, in the order the toxics were added, as Toxiproxy chains them; a writer task
drains the pipeline into the other socket. ``timeout`` and ``reset_peer`` act on links by
timers started when the toxic reaches the link (added to an existing link, or a new link
accepted while the toxic is present). Every toxic is rolled once per link against its
``toxicity`` (again when it is updated).

``ProxyRegistry`` holds the proxies of one server and one ``EventLog`` of what happened
(proxy created/enabled/disabled/deleted, toxic added/updated/removed, connection opened,
closed or reset), each event stamped with ``time.time_ns()`` — the clock of the records —
so a run's fault timeline can be checked against it. Nothing here speaks HTTP
(``mqbench.faults.api`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
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
from mqbench.faults.pipeline import EOF, Chunk, End, Pipeline, Stage, make_stage
from mqbench.faults.toxics import DOWNSTREAM, STREAMS, UPSTREAM, Toxic, rolls_affected

READ_CHUNK: Final = 65536
"""Bytes read per socket read."""
UPSTREAM_CONNECT_TIMEOUT_S: Final = 5.0
"""How long a link waits for its upstream to accept."""
EVENT_LOG_SIZE: Final = 200_000
"""Events kept per server (oldest dropped first; ``EventLog.dropped`` counts them)."""


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


def resolve_listen(address: str) -> str:
    """``address`` as a bound listener would show it: IPs normalised, ``localhost`` = 127.0.0.1.

    Other host names are kept as written (resolving them would need DNS).
    """
    host, port = split_hostport(address)
    if host == "localhost":
        host = "127.0.0.1"
    with contextlib.suppress(ValueError):
        host = str(ipaddress.ip_address(host))
    return _join_hostport(host, port)


@dataclass(frozen=True)
class ProxySpec:
    """One proxy of a ``/populate`` request, validated."""

    name: str
    listen: str
    upstream: str
    enabled: bool = True


class PopulateError(ApiError):
    """``/populate`` stopped at a proxy that could not start; ``proxies`` were done before."""

    def __init__(self, status: int, message: str, proxies: list[ToxicProxy]) -> None:
        """Fail with ``status`` after ``proxies`` were created or kept."""
        super().__init__(status, message)
        self.proxies = proxies


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
    """One toxic as it applies to one link: its pipeline stage and, for timers, the timer."""

    toxic: Toxic
    stage: Stage
    timer: asyncio.Task[None] | None = None

    @property
    def affected(self) -> bool:
        """Whether the toxicity roll made this toxic act on the link."""
        return self.stage.affected


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
    """One proxied connection: the client side, the upstream side, one pipeline per stream."""

    proxy: ToxicProxy
    conn_id: int
    client: _Side
    client_addr: str
    upstream: _Side | None = None
    pipelines: dict[str, Pipeline] = field(
        default_factory=lambda: {s: Pipeline(s) for s in STREAMS}
    )
    states: dict[str, _ToxicState] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=lambda: {UPSTREAM: 0, DOWNSTREAM: 0})
    closed: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    # -- toxics -------------------------------------------------------------------------

    def add_toxic(self, toxic: Toxic) -> bool:
        """Put ``toxic`` at the end of its stream's pipeline; return whether it is affected."""
        affected = rolls_affected(toxic.toxicity, self.proxy.rng)
        pipeline = self.pipelines[toxic.stream]
        state = _ToxicState(toxic, make_stage(pipeline, toxic, affected, self.proxy.rng))
        self.states[toxic.name] = state
        pipeline.append(state.stage)
        self._start_timer(state)
        return affected

    def update_toxic(self, toxic: Toxic) -> bool:
        """Replace toxic ``toxic.name`` in place (toxicity rolled again, timers restarted)."""
        old = self.states.get(toxic.name)
        if old is None:
            return self.add_toxic(toxic)
        if old.timer is not None:
            old.timer.cancel()
        affected = rolls_affected(toxic.toxicity, self.proxy.rng)
        pipeline = self.pipelines[toxic.stream]
        stage = make_stage(pipeline, toxic, affected, self.proxy.rng, replaces=old.stage)
        state = _ToxicState(toxic, stage)
        self.states[toxic.name] = state
        pipeline.replace(old.stage, stage)
        self._start_timer(state)
        return affected

    def remove_toxic(self, name: str) -> None:
        """Take toxic ``name`` out of its pipeline (what it holds goes on; timer cancelled)."""
        state = self.states.pop(name, None)
        if state is None:
            return
        if state.timer is not None:
            state.timer.cancel()
        self.pipelines[state.toxic.stream].remove(state.stage)

    def _start_timer(self, state: _ToxicState) -> None:
        toxic = state.toxic
        if not state.affected:
            return
        if toxic.type == "reset_peer" or (toxic.type == "timeout" and toxic.attr("timeout") > 0):
            delay = toxic.attr("timeout") / 1000.0
            state.timer = asyncio.get_running_loop().create_task(self._fire(state, delay))

    async def _fire(self, state: _ToxicState, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        toxic = state.toxic
        if self.closed or self.states.get(toxic.name) is not state:
            return
        if toxic.type == "reset_peer":
            self.finish("reset_peer", rst_stream=toxic.stream, toxic=toxic.name)
        else:
            self.finish("timeout", toxic=toxic.name)

    # -- data path ----------------------------------------------------------------------

    def start(self, upstream: _Side) -> None:
        """Attach the upstream connection and start the reader and writer of each stream."""
        self.upstream = upstream
        loop = asyncio.get_running_loop()
        for stream, src, dst in (
            (UPSTREAM, self.client, upstream),
            (DOWNSTREAM, upstream, self.client),
        ):
            pipeline = self.pipelines[stream]
            self.tasks.append(loop.create_task(self._read(stream, src, pipeline)))
            self.tasks.append(loop.create_task(self._write(stream, pipeline, dst)))

    async def _read(self, stream: str, src: _Side, pipeline: Pipeline) -> None:
        budget = pipeline.budget
        try:
            while True:
                await budget.wait()
                data = await src.reader.read(READ_CHUNK)
                if not data:
                    break
                budget.take(len(data))
                pipeline.entry().put_nowait(Chunk(data, time.monotonic()))
        except (ConnectionError, OSError) as exc:
            side = "client" if stream == UPSTREAM else "upstream"
            self.finish(f"{side}_error", detail=f"{type(exc).__name__}: {exc}")
            return
        pipeline.entry().put_nowait(EOF)

    async def _write(self, stream: str, pipeline: Pipeline, dst: _Side) -> None:
        try:
            while True:
                item = await pipeline.sink.get()
                if isinstance(item, End):
                    if item.reason == EOF.reason:
                        self._half_close(stream, dst)
                    else:
                        self.finish(item.reason, toxic=item.toxic)
                    return
                dst.writer.write(item.data)
                self.sent[stream] += len(item.data)
                await dst.writer.drain()
                pipeline.budget.give(len(item.data))
        except (ConnectionError, OSError) as exc:
            side = "upstream" if stream == UPSTREAM else "client"
            self.finish(f"{side}_error", detail=f"{type(exc).__name__}: {exc}")

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
        for pipeline in self.pipelines.values():
            pipeline.stop()
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
        """Toxiproxy 2.12.0's JSON shape and key order for a proxy.

        ``{name, listen, upstream, enabled, Logger, toxics}``: ``"Logger": {}`` is what
        Toxiproxy 2.12.0 writes for its (untagged) logger field, kept so the bodies match.
        """
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "Logger": {},
            "toxics": [t.to_json() for t in self.ordered_toxics()],
        }

    def ordered_toxics(self) -> list[Toxic]:
        """The toxics as Toxiproxy lists them: upstream ones first, each stream in chain order."""
        return [t for stream in STREAMS for t in self.toxics.values() if t.stream == stream]

    def differs(self, listen: str, upstream: str) -> bool:
        """Whether ``listen``/``upstream`` name another proxy than this one (Toxiproxy's test).

        ``listen`` is compared after resolution (``localhost`` is 127.0.0.1), so a port 0
        never matches a proxy that has bound a port.
        """
        return resolve_listen(listen) != self.listen or upstream != self.upstream

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
        """Add a toxic at the end of its stream's chain (409 when the name is taken).

        It reaches every live link at once.
        """
        if toxic.name in self.toxics:
            raise ApiError(409, "toxic already exists")
        self.toxics[toxic.name] = toxic
        hit = [link for link in self._started_links() if link.add_toxic(toxic)]
        self._announce("toxic_added", toxic, hit)
        return toxic

    def update_toxic(self, name: str, toxic: Toxic) -> Toxic:
        """Replace toxic ``name`` in place (same name, type and stream) on every live link."""
        old = self.get_toxic(name)
        if toxic.type != old.type or toxic.name != name or toxic.stream != old.stream:
            raise ApiError(400, f"toxic {name!r}: its name, type and stream cannot change")
        self.toxics[name] = toxic
        hit = [link for link in self._started_links() if link.update_toxic(toxic)]
        self._announce("toxic_updated", toxic, hit)
        return toxic

    def remove_toxic(self, name: str) -> None:
        """Remove toxic ``name`` (``ApiError`` 404 when missing); links stop applying it."""
        toxic = self.get_toxic(name)
        del self.toxics[name]
        for link in self._started_links():
            link.remove_toxic(name)
        self.log.record(
            self.name, "toxic_removed", toxic=name, type=toxic.type, stream=toxic.stream
        )

    def get_toxic(self, name: str) -> Toxic:
        """Toxic ``name`` (``ApiError`` 404 when missing)."""
        try:
            return self.toxics[name]
        except KeyError:
            raise ApiError(404, "toxic not found") from None

    def _started_links(self) -> list[Link]:
        # A link still connecting upstream gets every toxic present when it starts.
        return [link for link in list(self.links.values()) if link.upstream is not None]

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
            link.add_toxic(toxic)
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
            raise ApiError(404, "proxy not found") from None

    async def create(
        self, name: str, listen: str, upstream: str, *, enabled: bool = True
    ) -> ToxicProxy:
        """Create and start a proxy (``ApiError`` 409 when the name is taken, 400 if bad)."""
        if not name or "/" in name:
            raise ApiError(400, f"proxy name must be non-empty without '/', got {name!r}")
        if name in self.proxies:
            raise ApiError(409, "proxy already exists")
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

    async def populate(self, specs: Iterable[ProxySpec]) -> list[ToxicProxy]:
        """Toxiproxy's ``/populate`` for entries the caller has already validated.

        An existing proxy that does not ``differ`` is kept as it is, toxics, connections
        and enabled flag included; one that differs is stopped and replaced by a new proxy
        without toxics. When a new proxy cannot listen, ``PopulateError`` carries the
        proxies done so far (as Toxiproxy answers), and the proxy it replaced stays,
        disabled.
        """
        done: list[ToxicProxy] = []
        for spec in specs:
            existing = self.proxies.get(spec.name)
            if existing is not None and not existing.differs(spec.listen, spec.upstream):
                done.append(existing)
                continue
            if existing is not None:
                await existing.set_enabled(False)
            proxy = ToxicProxy(
                spec.name,
                spec.listen,
                spec.upstream,
                enabled=spec.enabled,
                log=self.log,
                rng=self.rng,
            )
            try:
                await proxy.start()
            except ApiError as exc:
                raise PopulateError(exc.status, str(exc), done) from None
            if existing is not None:
                await existing.close()
                self.log.record(spec.name, "proxy_deleted", replaced=True)
            self.proxies[spec.name] = proxy
            self.log.record(
                spec.name,
                "proxy_created",
                listen=proxy.listen,
                upstream=proxy.upstream,
                enabled=proxy.enabled,
            )
            done.append(proxy)
        return done

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
    "PopulateError",
    "ProxyRegistry",
    "ProxySpec",
    "ToxicProxy",
    "split_hostport",
]
