"""Zenoh pub/sub through a router, with ``eclipse-zenoh`` sessions in ``client`` mode.

Each ``ZenohClient`` is one zenoh session connected to one router endpoint
(``tcp/<host>:<port>``), with multicast scouting off and no other discovery. zenoh's API is
synchronous and runs its I/O on its own Rust threads; this module bridges it to asyncio:

* connect: a plain asyncio TCP connect first (so a closed port fails at once with
  "connection refused"), then ``zenoh.open`` in a worker thread with zenoh's
  ``connect/timeout_ms`` set to the connect timeout; a failure is one ``TransportError``.
  Router loss and return are tracked with zenoh's transport-events listener: ``connected``
  follows them and ``disconnected``/``connected`` events are emitted (zenoh reconnects by
  itself in client mode).
* publish: ``sender(topic, 0)`` declares one zenoh publisher for the key and returns a
  closure that calls ``Publisher.put(payload)`` directly (no await, no thread hop). With the
  default ``congestion_control: block`` a ``put`` can block the calling thread, and thus the
  event loop, while zenoh's transmission queue is full: that back-pressure then shows up as
  send lag, never as silent loss. ``drop`` drops instead of blocking.
* receive: zenoh calls the subscriber callback on one of its threads. The callback takes
  ``time.time_ns()`` **first** (the receive time is the moment zenoh hands the sample to
  Python, after zenoh's own decoding and the GIL hand-over, before any asyncio scheduling),
  copies the payload to ``bytes`` and appends ``(handler, payload, t_recv_ns)`` to one
  thread-safe deque per client. Only the append that finds no drain pending schedules one
  (``call_soon_threadsafe``), so a burst of samples costs one loop wake-up; the drain calls
  the handlers on the loop thread in arrival order.
* subscribe/flush confirmation: zenoh does not acknowledge declarations. After declaring,
  the client sends a query for a key nobody serves (``@mqbench/barrier/<zid>``) and waits
  for its final reply: the router answers only after it processed everything this session
  sent before, so the subscription is in place (and, for ``flush``, earlier puts have
  reached the router) when the reply arrives.

Delivery is at most once (``max_qos`` 0): no acknowledgements and no redelivery. What
zenoh guarantees on top of that is chosen with ``ClientOptions.extra``:

* ``reliability``: ``"reliable"`` (default) or ``"best_effort"`` (zenoh's publisher
  reliability; over TCP both are loss-free on the wire, but only reliable traffic is
  retransmitted/kept across zenoh's own queues),
* ``congestion_control``: ``"block"`` (default; never drop, block the publisher) or
  ``"drop"`` (drop samples when a queue is full),
* ``express``: bool, default False (True sends each sample at once instead of batching),
* ``priority``: 1-7 (zenoh priorities, 5 = data, the default),
* ``shared_memory``: bool, default False (``transport/shared_memory/enabled``). eclipse-zenoh
  turns it on by default, and then copies every payload above 3 KiB into a pool in
  ``/dev/shm`` and sends only a reference when the session at the other end of a link is on
  the same host: the router forwards references, not payloads. Off, every payload crosses
  the router's sockets, the path every other broker is measured on (docs/findings.md,
  experiment 1). A run sets it from the scenario key ``zenoh.shared_memory`` as
  ``ClientOptions.protocol``, a ``ZenohSettings``, which wins over ``extra``.

``ClientOptions.tls`` connects to a ``tls/<host>:<port>`` locator, verifying the router
with ``transport/link/tls/root_ca_certificate`` (and mTLS with a client certificate).
User/password authentication is not configured (the capabilities say so).

``mode``: ``"client"`` (default) or ``"peer"``. In peer mode the session does not need a
router: it listens on an ephemeral port of the endpoint's host, connects to the endpoint as
a *discovery peer* and has gossip scouting on, so the sessions of a run find each other
and publishers send straight to subscribers (peer to peer, over TCP on loopback). A peer
forwards nothing for others, so the discovery peer carries no data. ``mqbench calibrate``
uses this as zenoh's broker-less path (docs/calibration.md); in peer mode ``connected``
means the session is open and knows at least one peer.

Topics are zenoh key expressions; mqbench topics (``mqbench/<tag>/<cell>/<i>``) are valid
as they are. Keys with empty chunks, leading/trailing ``/`` or (for publishing) wildcards
``*``/``**`` are refused with ``TransportError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from typing import Any

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    ClientStats,
    ClientTls,
    MessageHandler,
    Sender,
    TransportCapabilities,
    ZenohSettings,
    require_qos,
)
from mqbench.transports.events import ClientEvent, Connected, Disconnected
from mqbench.transports.stream import probe_tcp
from mqbench.wire.topics import to_zenoh_key

_time_ns = time.time_ns

CLOSE_TIMEOUT_S = 5.0
"""How long ``close`` waits for zenoh to close the session."""

BARRIER_KEY = "@mqbench/barrier"
"""Prefix of the keys queried as a round-trip barrier (nothing serves them)."""

RELIABILITY = ("reliable", "best_effort")
PRIORITIES = (
    "REAL_TIME",
    "INTERACTIVE_HIGH",
    "INTERACTIVE_LOW",
    "DATA_HIGH",
    "DATA",
    "DATA_LOW",
    "BACKGROUND",
)
"""zenoh priorities by number (1 = highest)."""
CONGESTION = ("block", "drop")
MODES = ("client", "peer")

CAPABILITIES = TransportCapabilities(
    max_qos=0,
    persistent_sessions=False,
    wildcard_filters=True,
    tls=None,
    auth="mqbench does not configure zenoh's user/password authentication (usrpwd)",
)
"""What the zenoh client can do."""


def _with_scenario(options: ClientOptions) -> dict[str, Any]:
    """``options.extra`` with the scenario's zenoh settings (``options.protocol``) over it."""
    settings = options.protocol
    if isinstance(settings, ZenohSettings):
        return {**options.extra, "shared_memory": settings.shared_memory}
    return options.extra


def _options(extra: dict[str, Any]) -> dict[str, Any]:
    """Validate and normalise the zenoh keys of ``ClientOptions.extra``."""
    reliability = str(extra.get("reliability", "reliable")).lower()
    if reliability not in RELIABILITY:
        raise TransportError(
            f"zenoh reliability must be one of {', '.join(RELIABILITY)}, got {reliability!r}"
        )
    congestion = str(extra.get("congestion_control", "block")).lower()
    if congestion not in CONGESTION:
        raise TransportError(
            f"zenoh congestion_control must be one of {', '.join(CONGESTION)}, got {congestion!r}"
        )
    mode = str(extra.get("mode", "client")).lower()
    if mode not in MODES:
        raise TransportError(f"zenoh mode must be one of {', '.join(MODES)}, got {mode!r}")
    priority = extra.get("priority")
    if priority is not None and not (isinstance(priority, int) and 1 <= priority <= 7):
        raise TransportError(f"zenoh priority must be an integer from 1 to 7, got {priority!r}")
    shared_memory = extra.get("shared_memory", False)
    if not isinstance(shared_memory, bool):
        raise TransportError(f"zenoh shared_memory must be true or false, got {shared_memory!r}")
    return {
        "reliability": reliability,
        "congestion_control": congestion,
        "express": bool(extra.get("express", False)),
        "priority": priority,
        "mode": mode,
        "shared_memory": shared_memory,
    }


def tls_settings(tls: ClientTls | None) -> list[tuple[str, Any]]:
    """zenoh config entries for a TLS client link (``tls/<host>:<port>`` locator)."""
    if tls is None:
        return []
    out: list[tuple[str, Any]] = []
    if tls.ca_file is not None:
        out.append(("transport/link/tls/root_ca_certificate", tls.ca_file))
    if tls.cert_file is not None and tls.key_file is not None:
        out += [
            ("transport/link/tls/enable_mtls", True),
            ("transport/link/tls/connect_certificate", tls.cert_file),
            ("transport/link/tls/connect_private_key", tls.key_file),
        ]
    return out


def key_expr(topic: str, *, wildcards: bool) -> str:
    """Return ``topic`` as a zenoh key expression; raise ``TransportError`` if invalid.

    Scenario filters are MQTT syntax: ``+`` becomes ``*`` and ``#`` becomes ``**``.
    """
    import zenoh

    topic = to_zenoh_key(topic)
    if not topic:
        raise TransportError("zenoh key expression is empty")
    if not wildcards and any(chunk in ("*", "**") or "*" in chunk for chunk in topic.split("/")):
        raise TransportError(f"cannot publish to {topic!r}: wildcards are not allowed in a put")
    try:
        return str(zenoh.KeyExpr(topic))
    except zenoh.ZError as exc:
        first = str(exc).split(" at /", 1)[0]
        raise TransportError(f"invalid zenoh key expression {topic!r}: {first}") from None


class ZenohClient:
    """One zenoh client-mode session to a router (implements ``base.Client``)."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        self._where = f"{endpoint.host}:{endpoint.port}"
        scheme = "tls" if options.tls is not None else "tcp"
        self._locator = f"{scheme}/{endpoint.host}:{endpoint.port}"
        self._settings = _options(_with_scenario(options))
        self._session: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected = False
        self._opened = False
        self._closing = False
        self._router_up = False
        self._listener: Any = None
        self._subscribers: dict[str, Any] = {}
        self._publishers: list[Any] = []
        self._inbox: deque[tuple[MessageHandler, bytes, int]] = deque()
        self._drain_scheduled = False
        self._ack_handler: AckHandler | None = None
        self._failure: str | None = None
        self._zid = ""

    # ------------------------------------------------------------------ base.Client

    @property
    def connected(self) -> bool:
        """True while the session is open and zenoh reports the router link as up."""
        return self._connected

    @property
    def settings(self) -> dict[str, Any]:
        """The effective reliability, congestion control, express and priority settings."""
        return dict(self._settings)

    async def connect(self) -> None:
        """Check the TCP port, then open the zenoh session in a thread within the timeout."""
        if self._opened:
            raise TransportError(
                f"zenoh client for {self._where} was already connected once",
                TransportErrorKind.NOT_REUSABLE,
            )
        self._opened = True
        timeout = self._options.connect_timeout_s
        loop = asyncio.get_running_loop()
        self._loop = loop
        try:
            import zenoh
        except ModuleNotFoundError:
            raise TransportError(
                "eclipse-zenoh is not installed (pip install eclipse-zenoh)"
            ) from None
        started = time.monotonic()
        refused = await probe_tcp(self._endpoint.host, self._endpoint.port, timeout)
        if refused is not None:
            raise TransportError(
                f"cannot connect to zenoh at {self._where}: {refused}",
                TransportErrorKind.CONNECT_FAILED,
            )
        remaining = max(timeout - (time.monotonic() - started), 0.1)
        peer = self._settings["mode"] == "peer"
        settings: list[tuple[str, Any]] = [
            ("mode", self._settings["mode"]),
            ("connect/endpoints", [self._locator]),
            ("connect/timeout_ms", max(int(remaining * 1000), 100)),
            ("scouting/multicast/enabled", False),
            ("scouting/gossip/enabled", peer),
            ("transport/shared_memory/enabled", self._settings["shared_memory"]),
        ]
        if peer:
            settings.append(("listen/endpoints", [f"tcp/{self._endpoint.host}:0"]))
        settings += tls_settings(self._options.tls)
        config = zenoh.Config()
        for key, value in settings:
            config.insert_json5(key, json.dumps(value))
        try:
            async with asyncio.timeout(remaining + 1.0):
                session = await asyncio.to_thread(zenoh.open, config)
        except TimeoutError:
            hint = (
                " (TLS: is the broker's certificate signed by the CA?)" if self._options.tls else ""
            )
            raise TransportError(
                f"cannot connect to zenoh at {self._where}: no zenoh session within "
                f"{timeout:g} s{hint}",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        except zenoh.ZError as exc:
            raise TransportError(
                f"cannot connect to zenoh at {self._where}: {_short(exc)} (is it a zenoh router?)",
                TransportErrorKind.CONNECT_FAILED,
            ) from None
        self._session = session
        self._zid = str(session.zid())
        if peer:
            if not session.info.peers_zid():
                await self._close_session()
                raise TransportError(
                    f"cannot connect to zenoh at {self._where}: no discovery peer in session",
                    TransportErrorKind.CONNECT_FAILED,
                )
            self._connected = True
            self._emit(Connected(self._options.client_id, self._where, server=self._zid))
            return
        self._router_up = bool(session.info.routers_zid())
        self._listener = session.info.declare_transport_events_listener(self._on_transport_event)
        if not self._router_up:
            await self._close_session()
            raise TransportError(
                f"cannot connect to zenoh at {self._where}: no router in session",
                TransportErrorKind.CONNECT_FAILED,
            )
        self._connected = True
        self._emit(Connected(self._options.client_id, self._where, server=self._zid))

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Declare a subscriber and return once a query round trip confirmed it."""
        require_qos(qos, "zenoh", CAPABILITIES)
        if not self._connected:
            raise TransportError(
                f"cannot subscribe to {topic!r}: zenoh client is not connected",
                TransportErrorKind.DISCONNECTED,
            )
        key = key_expr(topic, wildcards=True)
        inbox = self._inbox
        append = inbox.append
        client = self

        def on_sample(sample: Any) -> None:
            t_recv_ns = _time_ns()
            append((on_message, sample.payload.to_bytes(), t_recv_ns))
            if not client._drain_scheduled:
                client._drain_scheduled = True
                client._wake()

        try:
            subscriber = self._session.declare_subscriber(key, on_sample)
        except Exception as exc:
            raise TransportError(f"cannot subscribe to {topic!r}: {_short(exc)}") from None
        old = self._subscribers.pop(topic, None)
        if old is not None:
            with contextlib.suppress(Exception):
                old.undeclare()
        self._subscribers[topic] = subscriber
        if not await self._barrier(self._options.connect_timeout_s):
            raise TransportError(
                f"zenoh router at {self._where} did not confirm the subscription to {topic!r} "
                f"within {self._options.connect_timeout_s:g} s"
            )

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` that puts on a publisher declared for ``topic``.

        False when the client is not connected (router link down or session closed).
        """
        require_qos(qos, "zenoh", CAPABILITIES)
        if self._session is None or self._closing:
            raise TransportError(
                f"cannot publish to {topic!r}: zenoh client is not connected",
                TransportErrorKind.DISCONNECTED,
            )
        import zenoh

        key = key_expr(topic, wildcards=False)
        s = self._settings
        kwargs: dict[str, Any] = {
            "reliability": zenoh.Reliability.RELIABLE
            if s["reliability"] == "reliable"
            else zenoh.Reliability.BEST_EFFORT,
            "congestion_control": zenoh.CongestionControl.BLOCK
            if s["congestion_control"] == "block"
            else zenoh.CongestionControl.DROP,
            "express": s["express"],
        }
        if s["priority"] is not None:
            kwargs["priority"] = getattr(zenoh.Priority, PRIORITIES[s["priority"] - 1])
        try:
            publisher = self._session.declare_publisher(key, **kwargs)
        except Exception as exc:
            raise TransportError(f"cannot publish to {topic!r}: {_short(exc)}") from None
        self._publishers.append(publisher)
        put = publisher.put
        error = zenoh.ZError
        client = self

        def send(payload: bytes, tag: int) -> bool:
            if not client._connected:
                return False
            try:
                put(payload)
            except error:
                return False
            return True

        return send

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Accepted for the contract; zenoh pub/sub has no acknowledgements, so never called."""
        self._ack_handler = handler

    def stats(self) -> ClientStats:
        """No counters: zenoh refuses nothing and reports nothing to count."""
        return ClientStats()

    def pending_write_bytes(self) -> int:
        """Always 0: zenoh's queues are not observable from Python."""
        return 0

    async def flush(self, timeout_s: float) -> None:
        """Wait for a query round trip through the router (puts sent before it are routed),
        or until ``timeout_s`` passes; never raises."""
        if not self._connected:
            return
        with contextlib.suppress(Exception):
            await self._barrier(timeout_s)

    async def close(self) -> None:
        """Undeclare everything and close the session (bounded); never raises."""
        if self._session is None or self._closing:
            return
        self._closing = True
        was_connected = self._connected
        self._connected = False
        try:
            self._drain()
            await self._close_session()
        except Exception:
            pass
        if was_connected:
            self._emit(
                Disconnected(
                    self._failure or "closed by client",
                    expected=self._failure is None,
                    client_id=self._options.client_id,
                    endpoint=self._where,
                )
            )

    async def unsubscribe(self, topic: str) -> None:
        """Undeclare a subscriber made with ``subscribe`` (no-op if unknown)."""
        subscriber = self._subscribers.pop(topic, None)
        if subscriber is not None:
            with contextlib.suppress(Exception):
                subscriber.undeclare()

    # ------------------------------------------------------------------ zenoh threads

    def _wake(self) -> None:
        """Schedule a drain on the loop (called from zenoh's thread)."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # loop closed: nothing will read the inbox any more
            self._drain_scheduled = False

    def _drain(self) -> None:
        """Deliver the samples queued so far, in arrival order (on the loop thread)."""
        self._drain_scheduled = False
        inbox = self._inbox
        popleft = inbox.popleft
        for _ in range(len(inbox)):
            handler, payload, t_recv_ns = popleft()
            try:
                handler(payload, t_recv_ns)
            except Exception as exc:
                self._fail_handler(exc)
                return

    def _on_transport_event(self, event: Any) -> None:
        """Router link up/down, from zenoh's thread: forward to the loop."""
        up = "PUT" in str(event.kind)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._set_router_up, up)

    def _set_router_up(self, up: bool) -> None:
        if self._closing or self._session is None or up == self._router_up:
            return
        self._router_up = up
        self._connected = up
        if up:
            self._emit(
                Connected(self._options.client_id, self._where, server=self._zid, again=True)
            )
        else:
            self._emit(
                Disconnected(
                    "router link lost",
                    expected=False,
                    client_id=self._options.client_id,
                    endpoint=self._where,
                )
            )

    # ------------------------------------------------------------------ helpers

    async def _barrier(self, timeout_s: float) -> bool:
        """A query nobody serves; True once the router's final reply arrived in time."""
        session = self._session
        if session is None:
            return False
        selector = f"{BARRIER_KEY}/{self._zid}"
        done = threading.Event()

        def query() -> None:
            for _ in session.get(selector, timeout=timeout_s):
                pass
            done.set()

        try:
            async with asyncio.timeout(timeout_s + 0.5):
                await asyncio.to_thread(query)
        except Exception:
            return False
        return done.is_set()

    def _fail_handler(self, exc: Exception) -> None:
        if self._failure is None:
            self._failure = f"message handler raised {type(exc).__name__}: {exc}"
        self._inbox.clear()
        if self._loop is not None and not self._closing:
            self._loop.create_task(self.close())

    async def _close_session(self) -> None:
        session = self._session
        listener, self._listener = self._listener, None
        subscribers = list(self._subscribers.values())
        publishers = list(self._publishers)
        self._subscribers.clear()
        self._publishers.clear()

        def close_all() -> None:
            for entity in [listener, *subscribers, *publishers]:
                if entity is not None:
                    with contextlib.suppress(Exception):
                        entity.undeclare()
            with contextlib.suppress(Exception):
                session.close()

        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await asyncio.to_thread(close_all)
        self._inbox.clear()

    def _emit(self, event: ClientEvent) -> None:
        handler = self._options.on_event
        if handler is not None:
            handler(event)


def _short(exc: BaseException) -> str:
    """A zenoh error without its Rust source location."""
    return str(exc).split(" at /", 1)[0].strip() or type(exc).__name__


class ZenohTransport:
    """Zenoh pub/sub via eclipse-zenoh sessions in client mode (at-most-once)."""

    name = "zenoh"
    protocol = "zenoh"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> ZenohClient:
        """Return a new, unconnected ``ZenohClient``; bad ``extra`` options raise here."""
        return ZenohClient(endpoint, options)
