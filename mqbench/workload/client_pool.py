"""A worker's clients: connected at a ramp, kept connected, churned on purpose, closed.

The worker (``workload.worker``) owns the lifecycle; this part owns the connections. A
client that loses its connection is reconnected with bounded exponential backoff and the
same client id; a client churn closes on purpose stays away until churn brings it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.records.events import EventKind, EventSink
from mqbench.records.format import HEADER
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import Client, ClientOptions, MessageHandler, Transport
from mqbench.transports.events import ClientEvent, Disconnected, Subscribed
from mqbench.workload.first_deliveries import FirstDeliveries
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.topology import PubSpec, SubSpec

RECONNECT_FIRST_S = 0.02
"""Reconnect backoff: 20 ms doubling to ``plan.reconnect_max_s`` (generator.reconnect_max),
until the worker stops. The cap bounds how long after a repaired fault a client stays away,
which otherwise shows up as extra QoS 0 loss charged to the broker."""

Role = Literal["sub", "pub"]
ClientKey = tuple[Role, int]
"""A client of the worker: its role and its cell-wide index."""
DeliverySink = Callable[[int, int, int, int, int], None]
"""Records one delivery: ``(t_sent, t_recv, pub, sub, seq)``."""


class ClientPool:
    """The subscribers and publishers of one worker, and what happened to their links."""

    def __init__(
        self,
        plan: WorkerPlan,
        transport: Transport,
        deliveries: RecordWriter,
        event: EventSink,
    ) -> None:
        self.plan = plan
        self.transport = transport
        self.deliveries = deliveries
        self.event = event
        self.endpoint = Endpoint(plan.host, plan.port)
        self.subscribers: list[Client | None] = [None] * len(plan.subscribers)
        self.publishers: list[Client | None] = [None] * len(plan.publishers)
        self.disconnects = 0
        self.reconnects = 0
        self.connect_failed = 0
        self.first_connect_error: str | None = None
        self.connected_ns = 0
        self.qos_downgraded = 0
        self.duplicate_deliveries = 0
        """Deliveries of a message this subscriber had received before (recorded too)."""
        self._first_deliveries: dict[int, FirstDeliveries] = {}
        """By subscriber index: kept across reconnects, where second deliveries happen."""
        self.granted_qos_min: int | None = None
        self.outage_total_s = 0.0
        self.outage_max_s = 0.0
        self.closing = False
        self._held_down: set[ClientKey] = set()
        """Clients closed on purpose (churn); they are not reconnected automatically."""
        self._reconnecting: set[ClientKey] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_reconnected: Callable[[ClientKey, Client], None] | None = None
        """Called with a client this pool reconnected (the compiled core takes it back)."""
        self._record_delivery: DeliverySink = deliveries.append_delivery

    def all(self) -> list[Client | None]:
        """Publishers then subscribers (None: never connected)."""
        return self.publishers + self.subscribers

    def client(self, key: ClientKey) -> Client | None:
        """The client of ``key`` (None: never connected)."""
        role, index = key
        specs, clients = self._slot(role)
        return clients[index - specs[0].index] if specs else None

    def divert_deliveries(self, sink: DeliverySink) -> None:
        """Subscriptions made from now on record their deliveries with ``sink``
        (``sink(t_sent, t_recv, pub, sub, seq)``) instead of the deliveries writer, which
        the compiled core borrowed."""
        self._record_delivery = sink

    # -- connecting ------------------------------------------------------------------

    async def connect_all(self) -> None:
        """Connect subscribers (subscribed before anyone publishes), then publishers.

        Connections start at ``connect_rate`` per second when a ramp is asked for. A
        client that cannot connect is counted, not fatal: a broker that refuses more
        connections shows as a plateau (and as loss or failed sends), as in mq-bench.
        Only when no client at all connects is it an error.
        """
        plan = self.plan
        self._loop = loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(plan.connect_concurrency)
        interval = 1.0 / plan.connect_rate if plan.connect_rate > 0 else 0.0
        t0 = loop.time()

        async def attempt(k: int, opener: Callable[[], Awaitable[Client]]) -> Client | None:
            if interval:
                await asyncio.sleep(max(0.0, t0 + k * interval - loop.time()))
            async with gate:
                try:
                    client = await opener()
                except TransportError as exc:
                    self.connect_failed += 1
                    self.first_connect_error = self.first_connect_error or str(exc)
                    return None
            self.connected_ns = time.time_ns()
            return client

        subs = [
            attempt(k, functools.partial(self._open_subscriber, spec))
            for k, spec in enumerate(plan.subscribers)
        ]
        self.subscribers = list(await asyncio.gather(*subs))
        first = len(plan.subscribers)
        pubs = [
            attempt(first + k, functools.partial(self._open_publisher, spec))
            for k, spec in enumerate(plan.publishers)
        ]
        self.publishers = list(await asyncio.gather(*pubs))
        total = len(plan.subscribers) + len(plan.publishers)
        if total and self.connect_failed == total:
            raise TransportError(f"no client could connect: {self.first_connect_error}")

    def _options(self, client_id: str, persistent: bool, key: ClientKey) -> ClientOptions:
        security = self.plan.security

        def on_event(event: ClientEvent) -> None:
            match event:
                case Subscribed(requested_qos=requested, granted_qos=granted):
                    self._note_granted_qos(requested, granted)
                case Disconnected():
                    self._on_disconnected(key)

        return ClientOptions(
            client_id=client_id,
            clean_session=not persistent,
            connect_timeout_s=self.plan.connect_timeout_s,
            on_event=on_event,
            protocol=self.plan.protocol_settings,
            max_pending_bytes=self.plan.max_pending_bytes,
            receive_stamp=self.plan.receive_stamp,
            username=security.username if security is not None else None,
            password=security.password if security is not None else None,
            tls=security.tls if security is not None else None,
        )

    def _note_granted_qos(self, requested: int, granted: int | None) -> None:
        """Count subscriptions the broker granted at a lower QoS than asked (SUBACK)."""
        if granted is None:
            return
        if granted < requested:
            self.qos_downgraded += 1
        low = self.granted_qos_min
        self.granted_qos_min = granted if low is None else min(low, granted)

    def _delivery_handler(self, sub: int) -> MessageHandler:
        unpack = HEADER.unpack_from
        append = self._record_delivery
        first = self._first_deliveries.setdefault(sub, FirstDeliveries()).first

        def on_message(payload: memoryview | bytes, t_recv: int) -> None:
            pub, seq, t_sent, _ = unpack(payload)
            append(t_sent, t_recv, pub, sub, seq)
            if not first(pub, seq):
                self.duplicate_deliveries += 1

        return on_message

    async def _open_subscriber(self, spec: SubSpec, client: Client | None = None) -> Client:
        if client is None:
            client = self.transport.create_client(
                self._endpoint_of("sub", spec.index),
                self._options(spec.client_id, spec.persistent, ("sub", spec.index)),
            )
        await client.connect()
        await client.subscribe(spec.topic_filter, self.plan.qos, self._delivery_handler(spec.index))
        return client

    async def _open_publisher(self, spec: PubSpec, client: Client | None = None) -> Client:
        if client is None:
            client = self.transport.create_client(
                self._endpoint_of("pub", spec.index),
                self._options(spec.client_id, self.plan.persistent, ("pub", spec.index)),
            )
        await client.connect()
        return client

    def _endpoint_of(self, role: Role, index: int) -> Endpoint:
        """Clients a fault targets connect through the fault proxy, the others directly."""
        plan = self.plan
        proxied = plan.proxied_subs if role == "sub" else plan.proxied_pubs
        if plan.proxy_port and index in proxied:
            return Endpoint(plan.host, plan.proxy_port)
        return self.endpoint

    async def reopen(self, spec: PubSpec | SubSpec, client: Client | None) -> Client:
        """Reconnect with the same client id, reusing the client object when it can."""

        async def opener(client: Client | None = None) -> Client:
            if isinstance(spec, SubSpec):
                return await self._open_subscriber(spec, client)
            return await self._open_publisher(spec, client)

        if client is not None:
            try:
                return await opener(client)
            except TransportError as exc:
                if exc.kind is not TransportErrorKind.NOT_REUSABLE:
                    raise
        return await opener()

    # -- keeping them connected ------------------------------------------------------

    def _on_disconnected(self, key: ClientKey) -> None:
        """A lost client is reconnected (unless the worker closes it or churn holds it)."""
        if self.closing or key in self._held_down:
            return
        self.disconnects += 1
        loop = self._loop
        if loop is not None and key not in self._reconnecting:
            self._reconnecting.add(key)
            loop.call_soon_threadsafe(
                lambda: loop.create_task(self._reconnect(key, time.monotonic()))
            )

    def _slot(self, role: Role) -> tuple[Sequence[PubSpec | SubSpec], list[Client | None]]:
        if role == "sub":
            return self.plan.subscribers, self.subscribers
        return self.plan.publishers, self.publishers

    async def _reconnect(self, key: ClientKey, lost_at: float) -> None:
        """Bring a lost client back with bounded exponential backoff (same client id)."""
        role, index = key
        specs, clients = self._slot(role)
        k = index - (specs[0].index if specs else 0)
        delay = RECONNECT_FIRST_S
        attempts = 0
        try:
            while not self.closing and key not in self._held_down:
                await asyncio.sleep(delay)
                if self.closing or key in self._held_down:
                    return
                attempts += 1
                try:
                    client = clients[k] = await self.reopen(specs[k], clients[k])
                except TransportError:
                    delay = min(delay * 2, self.plan.reconnect_max_s)
                    continue
                outage = time.monotonic() - lost_at
                if self.on_reconnected is not None:
                    self.on_reconnected(key, client)
                self.reconnects += 1
                self.outage_total_s += outage
                self.outage_max_s = max(self.outage_max_s, outage)
                self.event(
                    EventKind.CLIENT_RECONNECTED,
                    role=role,
                    client=specs[k].client_id,
                    outage_ms=round(outage * 1000, 3),
                    attempts=attempts,
                )
                return
        finally:
            self._reconnecting.discard(key)

    # -- churn and closing -----------------------------------------------------------

    async def churn(self, start_ns: int, end_ns: int) -> None:
        """Disconnect a share of clients every ``every`` seconds and bring them back."""
        churn = self.plan.churn
        assert churn is not None
        role: Role = "sub" if churn.who == "subscribers" else "pub"
        specs, clients = self._slot(role)
        if not specs:
            return
        count = max(1, math.ceil(churn.fraction * len(specs)))
        offset = 0
        t = start_ns + int(churn.first_after_s * 1e9)
        while t + int(churn.downtime_s * 1e9) < end_ns:
            await asyncio.sleep(max(0.0, (t - time.time_ns()) / 1e9))
            chosen = [(offset + k) % len(specs) for k in range(count)]
            offset = (offset + count) % len(specs)
            ids = [specs[k].client_id for k in chosen]
            held: set[ClientKey] = {(role, specs[k].index) for k in chosen}
            self._held_down |= held
            await asyncio.gather(
                *(c.close() for k in chosen if (c := clients[k]) is not None),
                return_exceptions=True,
            )
            self.event(EventKind.CHURN_DISCONNECTED, who=churn.who, clients=ids)
            await asyncio.sleep(churn.downtime_s)
            failed = 0
            for k in chosen:
                try:
                    clients[k] = await self.reopen(specs[k], clients[k])
                    self.reconnects += 1
                except TransportError as exc:
                    failed += 1
                    self.event(EventKind.ERROR, message=f"reconnect of {specs[k].client_id}: {exc}")
            self._held_down -= held
            self.event(EventKind.CHURN_RECONNECTED, who=churn.who, clients=ids, failed=failed)
            t += int(churn.every_s * 1e9)

    async def close_all(self, fast: Callable[[], bool]) -> None:
        """Flush publishers (until ``fast()``: acks are not waited for), then close all."""
        self.closing = True
        publishers = [c for c in self.publishers if c is not None]
        for client in publishers:
            if fast():
                break
            with contextlib.suppress(Exception):
                await client.flush(1.0)
        clients = publishers + [c for c in self.subscribers if c is not None]
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
