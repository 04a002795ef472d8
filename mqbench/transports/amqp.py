"""Lean AMQP 0-9-1 client transport (QoS 0 and 1) on a plain ``asyncio.Protocol``.

Routing layout (docs/transports.md, "AMQP"): one direct exchange (``mqbench``, not durable,
declared by every client), routing key = topic; each subscription gets its own exclusive,
auto-delete, client-named queue bound with that key and one consumer on it.

Guarantees:

* QoS 0 publishes go on channel 1 without publisher confirms; QoS 0 subscriptions consume
  with ``no_ack`` (the broker forgets a message once written to the socket).
* QoS 1 publishes go on channel 2, put in confirm mode at connect: each publish gets the
  next confirm sequence number, mapped to the sender's ``tag``; ``Basic.Ack`` (also with
  ``multiple``) calls the ack handler once per tag. ``Basic.Nack`` drops the tag without an
  ack and counts it in ``nacked``. QoS 1 subscriptions consume with manual acks (prefetch
  ``prefetch``, default 1000); one ``Basic.Ack(multiple=True)`` per read acknowledges every
  delivery handled in it.
* Messages are transient (no delivery mode) and published without ``mandatory``: a message
  routed to no queue is dropped by the broker (and still confirmed).

Hot paths as in the MQTT transport: a sender is a closure that hands the cached
method+header+body-frame prefix, the payload and the end octet to the ``StreamConnection``
(one write per loop iteration) without awaiting; each read is stamped once
(``StreamConnection.receive_ns``) and the :class:`~mqbench.wire.amqp.FrameParser` calls the
subscriber per delivery.

Heartbeats: the client asks for ``keepalive_s`` (0 disables them), sends a heartbeat frame
every half interval and drops the connection (``disconnected``) when nothing arrived from
the broker for two intervals.

``ClientOptions.username``/``password`` are the PLAIN login (default ``guest``/``guest``);
``ClientOptions.tls`` makes it AMQPS. Options understood in ``ClientOptions.extra``:

``vhost``
    Virtual host (default ``/``).
``exchange``
    The direct exchange to publish to and bind queues on (default ``mqbench``).
``prefetch``
    Unacknowledged deliveries the broker may send to a QoS 1 subscriber (default 1000).
``max_inflight``
    Unconfirmed QoS 1 publishes before the sender returns False (default 65535).
``frame_max``
    Largest frame the client proposes (default 131072; the broker may lower it).
``request_timeout_s``
    How long ``subscribe`` waits for the broker (default: ``connect_timeout_s``).
``close_timeout_s``
    How long ``close`` waits for ``Connection.Close-Ok``, and then for the socket to go
    (default 5).

and the socket options of ``mqbench.transports.stream`` (``write_buffer_high_bytes``,
``coalesce_writes``).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Any, Final

from pamqp import commands
from pamqp.base import Frame
from pamqp.heartbeat import Heartbeat

from mqbench import __version__
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    ClientStats,
    MessageHandler,
    Sender,
    TransportCapabilities,
    require_qos,
)
from mqbench.transports.events import Blocked, Connected, ProtocolError, Subscribed, Unblocked
from mqbench.transports.stream import StreamConnection
from mqbench.wire.amqp import (
    DEFAULT_FRAME_MAX,
    FRAME_END,
    HEARTBEAT_FRAME,
    MIN_FRAME_MAX,
    PROTOCOL_HEADER,
    AmqpCodecError,
    FrameParser,
    basic_ack,
    method_frame,
    publish_frames,
    publish_prefix,
)

DEFAULT_EXCHANGE: Final = "mqbench"
DEFAULT_PREFETCH: Final = 1000
DEFAULT_MAX_INFLIGHT: Final = 65535
CHANNEL: Final = 1
"""Channel for QoS 0 publishes, the exchange, queues and consumers."""
CONFIRM_CHANNEL: Final = 2
"""Channel in confirm mode for QoS 1 publishes."""
_UNSUPPORTED = TransportErrorKind.UNSUPPORTED

CAPABILITIES = TransportCapabilities(
    max_qos=1, persistent_sessions=False, wildcard_filters=False, tls=None, auth=None
)
"""What the amqp client can do."""


class AmqpProtocolError(TransportError):
    """The broker said or did something this client cannot continue after."""

    def __init__(self, message: str) -> None:
        super().__init__(message, TransportErrorKind.PROTOCOL)


class AmqpTransport:
    """The ``amqp`` transport: AMQP 0-9-1 clients (RabbitMQ), QoS 0 and 1."""

    name: str = "amqp"
    protocol: str = "amqp"
    capabilities = CAPABILITIES

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> AmqpClient:
        """Return a new, unconnected client."""
        return AmqpClient(endpoint, options)


class AmqpClient:
    """One AMQP connection implementing :class:`mqbench.transports.base.Client`."""

    def __init__(self, endpoint: Endpoint, options: ClientOptions) -> None:
        self._endpoint = endpoint
        self._options = options
        extra = options.extra
        self._exchange = str(extra.get("exchange", DEFAULT_EXCHANGE))
        self._prefetch = int(extra.get("prefetch", DEFAULT_PREFETCH))
        self._max_inflight = int(extra.get("max_inflight", DEFAULT_MAX_INFLIGHT))
        self._frame_max = int(extra.get("frame_max", DEFAULT_FRAME_MAX))
        self._stream = StreamConnection(
            f"amqp broker at {endpoint.host}:{endpoint.port}", options, self._on_data, self._on_lost
        )
        self._now = 0
        self._parser = FrameParser(self._on_deliver, self._on_confirm, self._on_frame)
        self._rpcs: dict[int, deque[tuple[tuple[type[Frame], ...], asyncio.Future[Frame]]]] = {}
        self._handshake: asyncio.Future[Frame] | None = None
        self._close_ok: asyncio.Future[None] | None = None
        self._heartbeat_s = 0
        self._rx_activity = False
        self._silent_ticks = 0
        self._consumers: dict[bytes, tuple[MessageHandler, bool]] = {}
        self._ack_upto = 0
        self._qos_set = False
        self._sub_lock: asyncio.Lock | None = None
        self._next_consumer = 1
        self._queue_prefix = f"mqbench.{options.client_id}.{os.urandom(4).hex()}"
        self._confirm_seq = 0
        self._lowest_unconfirmed = 1
        self._unconfirmed: dict[int, int] = {}
        self._ack_handler: AckHandler | None = None
        self.server_properties: dict[str, Any] = {}
        """The broker's ``Connection.Start`` properties (product, version, capabilities)."""
        self.nacked = 0
        """QoS 1 publishes the broker rejected with ``Basic.Nack``."""
        self.unrouted = 0
        """Deliveries for a consumer tag this client does not know (dropped)."""

    # ------------------------------------------------------------------ Client API

    @property
    def connected(self) -> bool:
        """True between a completed handshake and the loss or close of the connection."""
        return self._stream.connected

    def stats(self) -> ClientStats:
        """Sends refused because the output buffer was full (``Sender``); deliveries for an
        unknown consumer; publishes the broker rejected."""
        return ClientStats(
            sends_refused=self._stream.sends_refused,
            unrouted=self.unrouted,
            nacked=self.nacked,
            kernel_stamped_reads=self._stream.kernel_stamped_reads,
            user_stamped_reads=self._stream.user_stamped_reads,
        )

    @property
    def inflight(self) -> int:
        """QoS 1 publishes sent and not yet confirmed."""
        return len(self._unconfirmed)

    @property
    def frame_max(self) -> int:
        """The negotiated maximum frame size (0 before connecting)."""
        return self._parser.frame_max

    async def connect(self) -> None:
        """Open TCP, run the AMQP handshake, open both channels; all within the timeout."""
        stream = self._stream
        try:
            await stream.connect(self._endpoint, self._run_handshake, tls=self._options.tls)
        finally:
            self._handshake = None
        if not stream.writable:
            raise TransportError(
                f"cannot connect to {stream.where}: connection closed",
                TransportErrorKind.CONNECT_FAILED,
            )
        stream.established(self._heartbeat_s / 2, self._heartbeat_tick)
        product = self.server_properties.get("product", "")
        version = self.server_properties.get("version", "")
        stream.emit(
            Connected(
                self._options.client_id,
                stream.where,
                server=f"{_text(product)} {_text(version)}".strip(),
            )
        )

    async def _run_handshake(self) -> None:
        """Protocol header, Start/StartOk (PLAIN), Tune/TuneOk, Open, both channels."""
        stream = self._stream
        self._handshake = asyncio.get_running_loop().create_future()
        self._parser = FrameParser(self._on_deliver, self._on_confirm, self._on_frame)
        self._rpcs.clear()
        self._consumers.clear()
        self._unconfirmed.clear()
        self._confirm_seq = 0
        self._lowest_unconfirmed = 1
        self._qos_set = False
        user = self._options.username or "guest"
        try:
            stream.stage = "no Connection.Start (is this an AMQP 0-9-1 port?)"
            stream.write(PROTOCOL_HEADER)
            start = await self._next_handshake()
            if not isinstance(start, commands.Connection.Start):
                raise AmqpProtocolError(f"expected Connection.Start, got {start.name}")
            self.server_properties = dict(start.server_properties or {})
            mechanisms = str(start.mechanisms).split()
            if "PLAIN" not in mechanisms:
                raise AmqpProtocolError(f"broker offers no PLAIN login ({mechanisms})")
            stream.stage = "no Connection.Tune after the login"
            self._send_method(0, self._start_ok(user))
            tune = await self._next_handshake()
            if not isinstance(tune, commands.Connection.Tune):
                raise AmqpProtocolError(f"expected Connection.Tune, got {tune.name}")
            frame_max = _negotiate(self._frame_max, tune.frame_max)
            frame_max = max(frame_max, MIN_FRAME_MAX) if frame_max else 0
            heartbeat = max(0, int(self._options.keepalive_s))
            if heartbeat and tune.heartbeat:
                heartbeat = min(heartbeat, tune.heartbeat)
            self._parser.frame_max = frame_max
            self._heartbeat_s = heartbeat
            self._send_method(0, commands.Connection.TuneOk(tune.channel_max, frame_max, heartbeat))
            stream.stage = "no Connection.Open-Ok"
            vhost = str(self._options.extra.get("vhost", "/"))
            self._send_method(0, commands.Connection.Open(vhost))
            opened = await self._next_handshake()
            if not isinstance(opened, commands.Connection.OpenOk):
                raise AmqpProtocolError(f"expected Connection.OpenOk, got {opened.name}")
            self._handshake = None
            stream.stage = "channels not opened"
            waits = [
                self._rpc(CHANNEL, commands.Channel.Open(), commands.Channel.OpenOk),
                self._rpc(
                    CHANNEL,
                    commands.Exchange.Declare(exchange=self._exchange, exchange_type="direct"),
                    commands.Exchange.DeclareOk,
                ),
                self._rpc(CONFIRM_CHANNEL, commands.Channel.Open(), commands.Channel.OpenOk),
                self._rpc(CONFIRM_CHANNEL, commands.Confirm.Select(), commands.Confirm.SelectOk),
            ]
            await _gather(waits)
        except _BrokerClosed as exc:
            if exc.code == 403 and exc.channel is None:
                raise TransportError(
                    f"refused the login of user {user!r}: {exc.text}",
                    TransportErrorKind.CONNECT_FAILED,
                ) from None
            raise TransportError(
                f"refused the connection: {exc.text}", TransportErrorKind.CONNECT_FAILED
            ) from None

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        """Declare a queue, bind it with ``topic``, consume; return once the broker confirmed."""
        require_qos(qos, "amqp", CAPABILITIES)
        _check_topic(topic)
        stream = self._stream
        stream.require_connected(f"subscribe to {topic!r}")
        if self._sub_lock is None:
            self._sub_lock = asyncio.Lock()
        timeout = float(
            self._options.extra.get("request_timeout_s", self._options.connect_timeout_s)
        )
        async with self._sub_lock:
            number = self._next_consumer
            self._next_consumer += 1
            queue = f"{self._queue_prefix}.{number}"
            ctag = f"c{number}"
            manual = qos == 1
            # Register first: deliveries may arrive in the same read as the Consume-Ok.
            self._consumers[ctag.encode()] = (on_message, manual)
            waits = [
                self._rpc(
                    CHANNEL,
                    commands.Queue.Declare(queue=queue, exclusive=True, auto_delete=True),
                    commands.Queue.DeclareOk,
                ),
                self._rpc(
                    CHANNEL,
                    commands.Queue.Bind(queue=queue, exchange=self._exchange, routing_key=topic),
                    commands.Queue.BindOk,
                ),
            ]
            if manual and not self._qos_set:
                self._qos_set = True
                waits.append(
                    self._rpc(
                        CHANNEL,
                        commands.Basic.Qos(prefetch_count=self._prefetch),
                        commands.Basic.QosOk,
                    )
                )
            waits.append(
                self._rpc(
                    CHANNEL,
                    commands.Basic.Consume(queue=queue, consumer_tag=ctag, no_ack=not manual),
                    commands.Basic.ConsumeOk,
                )
            )
            ok = False
            try:
                async with asyncio.timeout(timeout):
                    await _gather(waits)
                ok = True
            except TimeoutError:
                raise TransportError(
                    f"subscribe to {topic!r}: no answer from {stream.where} within {timeout:g} s"
                ) from None
            except TransportError as exc:
                raise TransportError(f"subscribe to {topic!r} failed: {exc}", exc.kind) from None
            except _BrokerClosed as exc:
                raise TransportError(
                    f"subscribe to {topic!r} failed: {exc}", TransportErrorKind.REJECTED
                ) from None
            finally:
                if not ok:
                    self._consumers.pop(ctag.encode(), None)
                    for wait in waits:
                        if wait.done() and not wait.cancelled():
                            wait.exception()  # mark retrieved
                        else:
                            wait.cancel()
        stream.emit(Subscribed(topic, qos, queue=queue))

    def sender(self, topic: str, qos: int) -> Sender:
        """Return ``send(payload, tag) -> bool`` publishing to ``topic`` (the routing key).

        QoS 1: the next confirm sequence number maps to ``tag``; the ack handler gets it on
        the broker's ``Basic.Ack``. Returns False when not connected, when the output is
        full or (QoS 1) when ``max_inflight`` publishes are unconfirmed.
        """
        require_qos(qos, "amqp", CAPABILITIES)
        _check_topic(topic)
        routing_key = topic.encode("utf-8")
        exchange = self._exchange.encode("utf-8")
        channel = CONFIRM_CHANNEL if qos else CHANNEL
        client = self
        send_frame = self._stream.send
        size = -1
        prefix: bytes | None = b""
        end = FRAME_END

        def send_resized(payload: bytes) -> bool:
            """A payload size other than the last: new prefix (None: several body frames)."""
            nonlocal size, prefix
            size = len(payload)
            prefix = publish_prefix(channel, exchange, routing_key, size, client.frame_max)
            if prefix is None:
                frames = publish_frames(channel, exchange, routing_key, payload, client.frame_max)
                return send_frame(frames)
            return send_frame(prefix, payload, end)

        if qos == 0:

            def send_qos0(payload: bytes, tag: int) -> bool:
                if len(payload) == size and prefix is not None:
                    return send_frame(prefix, payload, end)
                return send_resized(payload)

            return send_qos0

        unconfirmed = self._unconfirmed
        limit = self._max_inflight

        def send_qos1(payload: bytes, tag: int) -> bool:
            if len(unconfirmed) >= limit:
                return False
            if len(payload) == size and prefix is not None:
                sent = send_frame(prefix, payload, end)
            else:
                sent = send_resized(payload)
            if not sent:
                return False
            seq = client._confirm_seq + 1
            client._confirm_seq = seq
            unconfirmed[seq] = tag
            return True

        return send_qos1

    def set_ack_handler(self, handler: AckHandler) -> None:
        """Call ``handler(tag, t_ack_ns)`` for every confirmed QoS 1 publish."""
        self._ack_handler = handler

    def pending_write_bytes(self) -> int:
        """Bytes queued in the client and in the transport's write buffer."""
        return self._stream.pending_bytes()

    async def flush(self, timeout_s: float) -> None:
        """Wait for the write buffer to drain and all QoS 1 confirms, at most ``timeout_s``."""
        await self._stream.flush(timeout_s, unsettled=lambda: bool(self._unconfirmed))

    async def close(self) -> None:
        """Send ``Connection.Close``, await Close-Ok (bounded), close the socket; never raises."""
        await self._stream.close(farewell=self._close_handshake)

    async def _close_handshake(self) -> None:
        close_ok: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._close_ok = close_ok
        self._send_method(0, commands.Connection.Close(200, "bye", 0, 0))
        await asyncio.shield(close_ok)

    # ------------------------------------------------------------------ stream callbacks

    def _on_data(self, data: bytes) -> None:
        """Parse a read: deliver messages, handle confirms and replies, batch consumer acks."""
        self._now = self._stream.receive_ns()
        self._rx_activity = True
        try:
            if self._handshake is not None and data[:4] == b"AMQP":
                raise AmqpProtocolError(
                    f"the broker does not speak AMQP 0-9-1 (it answered {bytes(data[:8])!r})"
                )
            self._parser.feed(data)
        except AmqpCodecError as exc:
            self._protocol_failure(f"malformed frame from broker: {exc}")
        except AmqpProtocolError as exc:
            self._protocol_failure(str(exc))
        finally:
            if self._ack_upto:
                self._stream.write(basic_ack(CHANNEL, self._ack_upto, True))
                self._ack_upto = 0

    def _on_lost(self, failure: TransportError) -> int | None:
        """Fail the pending calls; the disconnect event counts unconfirmed publishes."""
        for pending in self._rpcs.values():
            for _expected, future in pending:
                if not future.done():
                    future.set_exception(failure)
        self._rpcs.clear()
        close_ok = self._close_ok
        if close_ok is not None and not close_ok.done():
            close_ok.set_result(None)
        return len(self._unconfirmed)

    # ------------------------------------------------------------------ parser callbacks

    def _on_deliver(self, channel: int, ctag: bytes, delivery_tag: int, body: memoryview) -> None:
        consumer = self._consumers.get(ctag)
        if consumer is None:
            self.unrouted += 1
            return
        handler, manual = consumer
        if manual:
            self._ack_upto = delivery_tag
        handler(body, self._now)

    def _on_confirm(self, channel: int, delivery_tag: int, multiple: bool, nack: bool) -> None:
        if channel != CONFIRM_CHANNEL:
            raise AmqpProtocolError(f"unexpected publisher confirm on channel {channel}")
        unconfirmed = self._unconfirmed
        handler = None if nack else self._ack_handler
        now = self._now
        if multiple:
            upto = delivery_tag
            seq = self._lowest_unconfirmed
            self._lowest_unconfirmed = max(seq, upto + 1)
        else:
            seq = upto = delivery_tag
        pop = unconfirmed.pop
        while seq <= upto:
            tag = pop(seq, None)
            if tag is not None:
                if nack:
                    self.nacked += 1
                elif handler is not None:
                    handler(tag, now)
            seq += 1
        if not multiple and delivery_tag == self._lowest_unconfirmed:
            lowest = delivery_tag + 1
            top = self._confirm_seq
            while lowest <= top and lowest not in unconfirmed:
                lowest += 1
            self._lowest_unconfirmed = lowest
        if not unconfirmed:
            self._lowest_unconfirmed = self._confirm_seq + 1
            self._stream.settled()

    def _on_frame(self, channel: int, frame: Frame | Heartbeat) -> None:
        if isinstance(frame, Heartbeat):
            return
        stream = self._stream
        if isinstance(frame, commands.Connection.Close):
            self._send_method(0, commands.Connection.CloseOk())
            closed = _BrokerClosed(frame.reply_code or 0, frame.reply_text, None)
            if stream.loss_reason is None:
                stream.loss_reason = f"the broker closed the connection: {closed.text}"
            handshake = self._handshake
            if handshake is not None and not handshake.done():
                handshake.set_exception(closed)
            self._fail_rpcs(None, closed)
            stream.shutdown()
            return
        if isinstance(frame, commands.Connection.CloseOk):
            if self._close_ok is not None and not self._close_ok.done():
                self._close_ok.set_result(None)
            stream.shutdown()
            return
        if isinstance(frame, commands.Connection.Blocked):
            stream.emit(Blocked(str(frame.reason)))
            return
        if isinstance(frame, commands.Connection.Unblocked):
            stream.emit(Unblocked())
            return
        if isinstance(frame, commands.Channel.Close):
            self._send_method(channel, commands.Channel.CloseOk())
            closed = _BrokerClosed(frame.reply_code or 0, frame.reply_text, channel)
            self._fail_rpcs(channel, closed)
            # Both channels are needed for the whole life of the client: give up cleanly.
            self._protocol_failure(f"the broker closed channel {channel}: {closed.text}")
            return
        if isinstance(frame, commands.Basic.Cancel):
            # The broker cancelled a consumer (e.g. its queue was deleted).
            self._consumers.pop((frame.consumer_tag or "").encode(), None)
            stream.emit(
                ProtocolError(
                    f"consumer {frame.consumer_tag} cancelled",
                    stream.where,
                    self._options.client_id,
                )
            )
            return
        if channel == 0:
            handshake = self._handshake
            if handshake is not None and not handshake.done():
                handshake.set_result(frame)
                return
            raise AmqpProtocolError(f"unexpected {frame.name} on channel 0")
        pending = self._rpcs.get(channel)
        if pending:
            expected, future = pending[0]
            if isinstance(frame, expected):
                pending.popleft()
                if not future.done():
                    future.set_result(frame)
                return
        raise AmqpProtocolError(f"unexpected {frame.name} on channel {channel}")

    # ------------------------------------------------------------------ helpers

    async def _next_handshake(self) -> Frame:
        handshake = self._handshake
        assert handshake is not None
        frame = await handshake
        self._handshake = asyncio.get_running_loop().create_future()
        return frame

    def _rpc(self, channel: int, method: Frame, *expected: type[Frame]) -> asyncio.Future[Frame]:
        """Send a synchronous method; the future gets the broker's reply (in channel order)."""
        future: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        stream = self._stream
        if not stream.writable:
            future.set_exception(
                TransportError(f"{stream.where}: not connected", TransportErrorKind.DISCONNECTED)
            )
            return future
        self._rpcs.setdefault(channel, deque()).append((expected, future))
        stream.write(method_frame(channel, method))
        return future

    def _fail_rpcs(self, channel: int | None, exc: BaseException) -> None:
        channels = list(self._rpcs) if channel is None else [channel]
        for number in channels:
            for _expected, future in self._rpcs.pop(number, ()):
                if not future.done():
                    future.set_exception(exc)

    def _send_method(self, channel: int, method: Frame) -> None:
        self._stream.write(method_frame(channel, method))

    def _start_ok(self, user: str) -> commands.Connection.StartOk:
        password = self._options.password if self._options.password is not None else "guest"
        properties: dict[str, Any] = {
            "product": "mqbench",
            "version": __version__,
            "platform": "Python asyncio",
            "connection_name": self._options.client_id,
            "capabilities": {
                "publisher_confirms": True,
                "consumer_cancel_notify": True,
                "basic.nack": True,
                "connection.blocked": True,
                "authentication_failure_close": True,
            },
        }
        return commands.Connection.StartOk(
            client_properties=properties,
            mechanism="PLAIN",
            response=f"\0{user}\0{password}",
            locale="en_US",
        )

    def _protocol_failure(self, reason: str) -> None:
        handshake = self._handshake
        if handshake is not None and not handshake.done():
            handshake.set_exception(AmqpProtocolError(reason))
        self._stream.fail(reason)

    def _heartbeat_tick(self) -> None:
        if self._rx_activity:
            self._rx_activity = False
            self._silent_ticks = 0
        else:
            self._silent_ticks += 1
            if self._silent_ticks >= 4:  # two heartbeat intervals without a byte
                self._protocol_failure("missed heartbeats from the broker")
                return
        self._stream.write(HEARTBEAT_FRAME)


class _BrokerClosed(Exception):
    """The broker closed the connection (``channel`` None) or a channel, with its reason."""

    def __init__(self, code: int, text: str, channel: int | None) -> None:
        where = "" if channel is None else f"channel {channel} closed: "
        super().__init__(f"{where}{code} {text}")
        self.code = code
        self.channel = channel
        self.text = f"{where}{code} {text}"


async def _gather(waits: list[asyncio.Future[Frame]]) -> None:
    """Await every reply; raise the first failure after all settled (none left unretrieved)."""
    results = await asyncio.gather(*waits, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def _negotiate(client: int, server: int) -> int:
    """AMQP limit negotiation: 0 means "no limit", else the smaller value wins."""
    if not client or not server:
        return client or server
    return min(client, server)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _check_topic(topic: str) -> None:
    raw = topic.encode("utf-8")
    if not raw or len(raw) > 255:
        raise TransportError(f"invalid AMQP routing key {topic!r} (1 to 255 bytes)")
    if "+" in topic or "#" in topic or "*" in topic:
        raise TransportError(
            f"topic {topic!r} has wildcards; the amqp transport routes exact topics "
            "(direct exchange, routing key = topic)"
        )
