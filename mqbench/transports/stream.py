"""The socket half of every lean client: one connection, coalesced writes, bounded output.

A protocol client (``mqtt``, ``nats``, ``redis``, ``amqp``) owns one ``StreamConnection``
and keeps only framing and protocol state. The stream is the ``asyncio.Protocol`` of the
connection and does, once for all of them:

* **Setup.** ``connect`` resolves the host, tries its addresses in order, sets
  ``TCP_NODELAY`` and the write-buffer limits, then runs the client's handshake; the whole
  of it is bounded by the connect timeout. With ``ClientOptions.tls`` the connection is TLS
  from the start (``connect(..., tls=...)``) or upgraded mid-handshake (``start_tls``, for
  NATS); one ``SSLContext`` per setting is shared by all clients (``tls_context``).
* **Writes.** ``send`` is the publish hot path: it refuses a message while the client is
  not connected (False) or while the socket is back-pressured with more than
  ``max_pending_bytes`` queued (False, counted in ``sends_refused``), else appends the frame
  to one buffer written by the loop's ``WriteBatch`` at the end of the publish step, or
  else of the loop iteration (one syscall per burst);
  frames of ``COALESCE_MAX`` bytes or more go out at once, and the buffer is written early
  when it passes ``COALESCE_LIMIT``. ``write`` sends control frames now, after whatever is
  queued, so protocol order holds. ``drain`` waits until the socket took everything.
* **Keepalive.** ``start_keepalive`` calls the client's tick at a fixed interval while the
  connection is up; the tick sends its protocol's ping and calls ``fail`` when the peer went
  silent.
* **Failure and loss.** ``fail`` drops the connection with a reason (and emits
  ``protocol_error``); ``abort`` drops it quietly; ``close`` writes what is queued, an
  optional goodbye frame, and waits (bounded) for the socket to go. When the connection is
  lost the client's ``on_lost`` fails its waiting requests, and the stream emits one
  ``disconnected`` event (``endpoint``, ``client_id``, ``reason``, ``expected`` and the
  details the client adds). Socket errors are worded once, by :func:`describe_oserror`.

``ClientOptions`` read here: ``max_pending_bytes`` (set by the engine), ``receive_stamp``
(``kernel``: stamp reads with the kernel's receive time, below), and the ``extra`` keys
``write_buffer_high_bytes`` (transport high-water mark; default 256 MiB, never above
``max_pending_bytes``), ``coalesce_writes`` (default True; False writes every frame at once),
``close_timeout_s`` (how long ``close`` waits for the socket to go; default 5).

**Receive stamps.** A client stamps each read with :meth:`StreamConnection.receive_ns`.
By default that is the clock when the read reaches the client, after the process woke up.
With ``receive_stamp == "kernel"`` a plain TCP connection (not TLS) reads, once
its handshake is done, through ``recvmsg`` with ``SO_TIMESTAMPNS`` on a duplicate of its
socket (uvloop's transport keeps writing and stops reading), and ``receive_ns`` is the
kernel's receive time of the read's last segment: the receiver's wake-up and event loop
are no longer charged to the broker (docs/performance.md, "Receive timestamps").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import ssl as ssl_module
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar, cast

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.base import ClientOptions, ClientTls, Sender, max_pending_bytes
from mqbench.transports.events import ClientEvent, Disconnected, ProtocolError, WritePaused
from mqbench.transports.write_batch import WriteBatch, write_batch

T = TypeVar("T")

COALESCE_MAX: Final = 64 * 1024
"""Frames this large are written at once instead of being copied into the batch."""

COALESCE_LIMIT: Final = 256 * 1024
"""The batch is written early once it holds this many bytes."""

DEFAULT_WRITE_BUFFER_HIGH: Final = 256 * 1024 * 1024
"""Default high-water mark of the transport's write buffer (bytes)."""

CLOSE_TIMEOUT_S: Final = 5.0
"""Default time ``close`` waits for the socket to go before aborting it."""

DRAIN_RECHECK_S: Final = 0.05
"""How often ``drain`` re-checks a buffer whose transport never paused."""

SO_TIMESTAMPNS: Final = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux: every read carries the kernel's receive time as a ``timespec`` (``SCM_TIMESTAMPNS``)."""
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_BYTES: Final = socket.CMSG_SPACE(_TIMESPEC.size)
STAMPED_READ_BYTES: Final = 256 * 1024
"""Read size of the kernel-stamped path (uvloop's own reads are this large too)."""
_read_buffer: bytearray | None = None
"""One buffer for every kernel-stamped read of the process: each read is copied out before
the next one (an event loop handles one callback at a time)."""


def _stamped_read_buffer() -> bytearray:
    global _read_buffer
    if _read_buffer is None:
        _read_buffer = bytearray(STAMPED_READ_BYTES)
    return _read_buffer


DataHandler = Callable[[bytes], None]
"""``(data)``: one read from the socket, for the client's parser."""

LostHandler = Callable[[TransportError], int | None]
"""``(failure)``: the connection is gone; fail waiting requests with ``failure`` and return
how many QoS >= 1 publishes were still unacknowledged (None: the client tracks none), for
the ``Disconnected`` event."""


def describe_oserror(exc: OSError) -> str:
    """One short phrase for a socket error ("connection refused", "cannot resolve host ...")."""
    if isinstance(exc, ssl_module.SSLCertVerificationError):
        return f"TLS: the broker's certificate is not trusted ({exc.verify_message})"
    if isinstance(exc, ssl_module.SSLError):
        return f"TLS handshake failed ({exc.reason or type(exc).__name__})"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host ({exc.strerror or exc})"
    # asyncio rewords strerror ("Connect call failed (...)"); the errno keeps the cause.
    text = os.strerror(exc.errno) if exc.errno else exc.strerror
    if text:
        return text[0].lower() + text[1:]
    return str(exc) or type(exc).__name__


class ClosingSSLSocket(ssl_module.SSLSocket):
    """An ``SSLSocket`` that closes itself when its handshake fails.

    paho-mqtt (and aiomqtt, which runs it) wraps a connected socket and calls
    ``do_handshake()`` with nothing to close the socket when that raises (an untrusted
    certificate): the socket was left open to the garbage collector.
    """

    def do_handshake(self, block: bool = False) -> None:
        """The handshake; on failure (not a non-blocking "try again") the socket is closed."""
        try:
            super().do_handshake(block)
        except (ssl_module.SSLWantReadError, ssl_module.SSLWantWriteError):
            raise
        except BaseException:
            self.close()
            raise


@functools.lru_cache(maxsize=16)
def tls_context(tls: ClientTls) -> ssl_module.SSLContext:
    """The client ``SSLContext`` for ``tls`` (one per setting, shared by all clients):
    verifies the broker's certificate and host name; loads the client certificate. Sockets
    it wraps close themselves when their handshake fails (``ClosingSSLSocket``).

    Raises ``TransportError`` (CONNECT_FAILED) naming a file that cannot be loaded.
    """
    try:
        context = ssl_module.create_default_context(cafile=tls.ca_file)
        if tls.cert_file is not None:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl_module.SSLError) as exc:
        files = ", ".join(f for f in (tls.ca_file, tls.cert_file, tls.key_file) if f)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TransportError(
            f"cannot load TLS files ({files}): {why}", TransportErrorKind.CONNECT_FAILED
        ) from None
    context.sslsocket_class = ClosingSSLSocket
    return context


async def open_socket(host: str, port: int) -> socket.socket:
    """A connected, non-blocking TCP socket to the first address of ``host`` that accepts.

    Raises the ``OSError`` of the first address when every address failed (the caller
    bounds the time).
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    first: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            first = first or exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise first or OSError(f"no address for {host}")


async def probe_tcp(host: str, port: int, timeout_s: float) -> str | None:
    """Open and close a TCP connection; None when it worked, else a short reason.

    Clients whose library retries a refused connection until its timeout (zenoh and the
    stock clients) probe first, so a closed port fails at once with "connection refused",
    as the lean clients do.
    """
    try:
        async with asyncio.timeout(timeout_s):
            sock = await open_socket(host, port)
    except TimeoutError:
        return f"no TCP connection within {timeout_s:g} s"
    except OSError as exc:
        return describe_oserror(exc)
    sock.close()
    return None


class StreamConnection(asyncio.Protocol):
    """One client connection's socket: setup, coalesced bounded writes, keepalive, loss."""

    __slots__ = (
        "_batch",
        "_close_timeout_s",
        "_closing",
        "_connected",
        "_direct_min",
        "_drain_waiter",
        "_dropped",
        "_flush_scheduled",
        "_high",
        "_keepalive",
        "_lent",
        "_lost",
        "_on_data",
        "_on_event",
        "_on_lost",
        "_open",
        "_opened",
        "_options",
        "_out",
        "_paused",
        "_reusable",
        "_session",
        "_settle_waiter",
        "_stamp_ns",
        "_stamp_sock",
        "_tls",
        "_transport",
        "kernel_stamped_reads",
        "last_error",
        "loss_reason",
        "max_pending",
        "peer_closed_reason",
        "sends_refused",
        "sent",
        "stage",
        "user_stamped_reads",
        "where",
    )

    def __init__(
        self,
        where: str,
        options: ClientOptions,
        on_data: DataHandler,
        on_lost: LostHandler,
        *,
        reusable: bool = True,
    ) -> None:
        """``where`` names the peer in messages ("nats at 127.0.0.1:4222"); ``reusable``
        False makes the client single-use (a second ``connect`` raises NOT_REUSABLE)."""
        self.where = where
        self._options = options
        self._on_data = on_data
        self._on_lost = on_lost
        self._on_event = options.on_event
        self._reusable = reusable
        extra = options.extra
        self.max_pending = max_pending_bytes(options)
        """Bytes that may wait for the socket before ``send`` refuses messages."""
        # Pausing at the output bound is what lets a full buffer refuse sends (``send``).
        self._high = min(
            int(extra.get("write_buffer_high_bytes", DEFAULT_WRITE_BUFFER_HIGH)),
            self.max_pending,
        )
        # Frames at least this long bypass the batch (all of them without coalescing).
        self._direct_min = COALESCE_MAX if extra.get("coalesce_writes", True) else 0
        self._close_timeout_s = float(extra.get("close_timeout_s", CLOSE_TIMEOUT_S))
        self._transport: asyncio.Transport | None = None
        self._batch: WriteBatch | None = None
        self._out = bytearray()
        self._flush_scheduled = False
        self._paused = False
        self._opened = False
        self._closing = False
        self._dropped = False
        self._session = False
        self._lost: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._settle_waiter: asyncio.Future[None] | None = None
        self._keepalive: asyncio.TimerHandle | None = None
        self._connected = False
        self._open = False
        """Connected and not back-pressured: ``send`` takes its fastest path."""
        self._lent = False
        self.stage = ""
        """What the handshake waits for, named in a connect timeout ("no CONNACK")."""
        self.loss_reason: str | None = None
        """Why the connection went (or is going) down, once known."""
        self.last_error: str | None = None
        """The peer's last error reply, appended to the reason of an unexplained loss."""
        self.peer_closed_reason = "connection closed by the server"
        """The reason given when the peer closes the connection without saying why."""
        self.sends_refused = 0
        """Sends refused because more than ``max_pending_bytes`` waited for the socket."""
        self.sent = 0
        """Frames ``send`` accepted (messages handed to the connection)."""
        self._tls = False
        self._stamp_sock: socket.socket | None = None
        self._stamp_ns = 0
        self.kernel_stamped_reads = 0
        """Reads of the established session stamped with the kernel's receive time."""
        self.user_stamped_reads = 0
        """Reads of the established session stamped with the clock after the wake-up (on a
        kernel-stamped connection: those after its first kernel-stamped read)."""

    # ------------------------------------------------------------------ setup

    async def connect(
        self,
        endpoint: Endpoint,
        handshake: Callable[[], Coroutine[Any, Any, T]],
        *,
        tls: ClientTls | None = None,
    ) -> T:
        """Open the connection and run ``handshake``, all within the connect timeout; return
        the handshake's result.

        Any failure aborts the socket and raises one ``TransportError`` (kind
        CONNECT_FAILED) worded "cannot connect to <where>: <why>"; a connection lost during
        the handshake ends it at once. ``tls`` (``ClientOptions.tls``; the certificate must
        name ``tls.server_hostname``, by default the endpoint's host) makes it a TLS
        connection. Cancellation aborts and propagates.
        """
        try:
            ssl = tls_context(tls) if tls is not None else None
        except TransportError as exc:
            raise self._connect_error(str(exc)) from None
        server_hostname = tls.server_hostname if tls is not None else None
        if (self._opened and not self._reusable) or self._transport is not None:
            once = "" if self._reusable else " once"
            raise TransportError(
                f"the client for {self.where} was already connected{once}; create a new one",
                TransportErrorKind.NOT_REUSABLE,
            )
        self._opened = True
        self._reset()
        self._tls = ssl is not None
        loop = asyncio.get_running_loop()
        self._lost = lost = loop.create_future()
        timeout_s = self._options.connect_timeout_s
        self.stage = "no TCP connection"
        try:
            async with asyncio.timeout(timeout_s):
                sock = await open_socket(endpoint.host, endpoint.port)
                try:
                    await loop.create_connection(
                        lambda: self,
                        sock=sock,
                        ssl=ssl,
                        server_hostname=(server_hostname or endpoint.host) if ssl else None,
                    )
                except BaseException:
                    sock.close()
                    raise
                self.stage = "no handshake"
                return await self._until_lost(loop.create_task(handshake()), lost)
        except TimeoutError:
            self.abort()
            raise self._connect_error(f"{self.stage} within {timeout_s:g} s") from None
        except TransportError as exc:
            self.abort()
            raise self._connect_error(str(exc)) from None
        except OSError as exc:
            self.abort()
            raise self._connect_error(describe_oserror(exc)) from None
        except BaseException:
            self.abort()
            raise

    async def start_tls(self, tls: ClientTls, host: str) -> None:
        """Upgrade the open connection to TLS in the middle of the handshake (NATS: the
        server's plain ``INFO`` first, then TLS). Raises ``OSError``/``ssl.SSLError`` as
        ``connect`` does for an initial TLS handshake (within its timeout)."""
        transport = self._transport
        if transport is None:
            raise TransportError(
                f"{self.peer_closed_reason} before TLS", TransportErrorKind.DISCONNECTED
            )
        loop = asyncio.get_running_loop()
        upgraded = await loop.start_tls(
            transport, self, tls_context(tls), server_hostname=tls.server_hostname or host
        )
        if upgraded is None:
            raise TransportError("TLS upgrade failed", TransportErrorKind.CONNECT_FAILED)
        self._tls = True
        self._transport = upgraded
        self._transport.set_write_buffer_limits(high=self._high)

    async def _until_lost(self, task: asyncio.Task[T], lost: asyncio.Future[None]) -> T:
        """``task``'s result, unless the connection goes first (then the loss is raised)."""
        try:
            await asyncio.wait((task, lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if task.done() and not task.cancelled():
            return task.result()
        raise TransportError(
            f"{self.loss_reason or self.peer_closed_reason} during the handshake",
            TransportErrorKind.DISCONNECTED,
        )

    def established(self, keepalive_s: float = 0.0, tick: Callable[[], None] | None = None) -> None:
        """The handshake is done: sends are accepted and a loss is reported as an event;
        ``tick`` (the protocol's keepalive) runs every ``keepalive_s`` from now on."""
        self._connected = True
        self._open = not self._paused
        self._session = True
        if tick is not None:
            self.start_keepalive(keepalive_s, tick)
        if self._options.receive_stamp == "kernel" and not self._tls:
            self._read_with_kernel_stamps()

    # ------------------------------------------------------------------ receive stamps

    @property
    def kernel_stamps(self) -> bool:
        """True while reads are stamped with the kernel's receive time."""
        return self._stamp_sock is not None

    def receive_ns(self) -> int:
        """The receive time of the read being handled (ns, wall clock)."""
        stamp = self._stamp_ns
        if stamp:
            self.kernel_stamped_reads += 1
            return stamp
        # A kernel-stamped connection's first reads can come unstamped (the kernel turns
        # stamping on in deferred work); they are handshake replies, not counted.
        if self._session and (self._stamp_sock is None or self.kernel_stamped_reads):
            self.user_stamped_reads += 1
        return time.time_ns()

    def lend(self) -> int:
        """Hand the established session to another reader and writer (the compiled core,
        docs/performance.md): write what is queued, stop keepalive and reading, refuse
        ``send`` from now on, and return a duplicate of the socket, which the borrower owns.
        The connection stays open here; ``close`` says goodbye and closes it as usual once
        the borrower is done.

        Raises ``TransportError`` (UNSUPPORTED) when the session is not up, is TLS, or
        still has bytes queued for the socket.
        """
        transport = self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        why = None
        if transport is None or sock is None or not self._connected:
            why = "it is not connected"
        elif self._tls:
            why = "it is TLS"
        else:
            self.flush_out()
            if transport.get_write_buffer_size():
                why = "bytes are still queued for its socket"
        if why is not None or transport is None or sock is None:
            raise TransportError(
                f"cannot lend the session of {self.where}: {why}", TransportErrorKind.UNSUPPORTED
            )
        fd = os.dup(sock.fileno())
        self._cancel_keepalive()
        self._stop_kernel_stamps()
        transport.pause_reading()
        self._lent = True
        self._open = False
        return fd

    def lost_while_lent(self, reason: str) -> None:
        """The borrower lost the lent session (``reason``): drop this side too, so the loss
        is reported as any other (``Disconnected``) and the client can connect again."""
        self.loss_reason = reason
        self.abort()

    @property
    def lent(self) -> bool:
        """True once the session was lent (``lend``): ``send`` refuses messages."""
        return self._lent

    def _read_with_kernel_stamps(self) -> None:
        """Switch reading to ``recvmsg`` with ``SO_TIMESTAMPNS`` on a duplicate socket;
        stays on the transport's reads where the socket cannot do it."""
        transport = self._transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if transport is None or sock is None or self._stamp_sock is not None:
            return
        try:
            dup = socket.socket(fileno=os.dup(sock.fileno()))
        except OSError:
            return
        try:
            dup.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            dup.setblocking(False)
            transport.pause_reading()
            asyncio.get_running_loop().add_reader(dup.fileno(), self._read_stamped)
        except (OSError, RuntimeError, AttributeError):
            dup.close()
            with contextlib.suppress(Exception):
                transport.resume_reading()
            return
        self._stamp_sock = dup

    def _read_stamped(self) -> None:
        sock = self._stamp_sock
        if sock is None:
            return
        buffer = _stamped_read_buffer()
        try:
            size, ancillary, _, _ = sock.recvmsg_into([buffer], _ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            if self.loss_reason is None and not self._closing:
                self.loss_reason = describe_oserror(exc)
            self._stop_kernel_stamps()
            if self._transport is not None:
                self._transport.abort()
            return
        if size == 0:  # the peer closed its side
            self._stop_kernel_stamps()
            if self._transport is not None:
                self._transport.close()
            return
        stamp = 0
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                seconds, nanos = _TIMESPEC.unpack_from(data)
                stamp = seconds * 1_000_000_000 + nanos
        self._stamp_ns = stamp
        try:
            self._on_data(bytes(memoryview(buffer)[:size]))
        except Exception as exc:  # as a transport does when data_received raises
            self.fail(f"read handler raised {type(exc).__name__}: {exc}")
        finally:
            self._stamp_ns = 0

    def _stop_kernel_stamps(self) -> None:
        sock, self._stamp_sock = self._stamp_sock, None
        if sock is None:
            return
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(sock.fileno())
        sock.close()

    @property
    def connected(self) -> bool:
        """True while the protocol session is up (from ``established`` until the connection
        is lost, closed or dropped): ``send`` refuses messages otherwise."""
        return self._connected

    def _down(self) -> None:
        self._connected = False
        self._open = False

    def require_connected(self, action: str) -> None:
        """Raise ``TransportError`` (DISCONNECTED) "cannot <action>: <where> is not connected"
        unless the session is up."""
        if not self._connected:
            raise TransportError(
                f"cannot {action}: {self.where} is not connected", TransportErrorKind.DISCONNECTED
            )

    def _connect_error(self, why: str) -> TransportError:
        return TransportError(
            f"cannot connect to {self.where}: {why}", TransportErrorKind.CONNECT_FAILED
        )

    def _reset(self) -> None:
        self._lent = False
        self._out = bytearray()
        self._flush_scheduled = False
        self._paused = False
        self._closing = False
        self._dropped = False
        self._session = False
        self._down()
        self.loss_reason = None
        self.last_error = None

    # ------------------------------------------------------------------ writing

    def send(self, head: bytes, body: bytes = b"", tail: bytes = b"") -> bool:
        """Queue one message frame, ``head + body + tail``, in the loop's write batch: it
        leaves at the end of the publish step, or else of this loop iteration (the hot path;
        the parts spare the caller a concatenation).

        False when the client is not connected, or when the socket is back-pressured and
        ``max_pending_bytes`` are queued (counted in ``sends_refused``): a refused message
        is never queued. A ``body`` of ``COALESCE_MAX`` bytes or more is written at once.
        """
        if not self._open:
            if not self._connected or self._lent:
                return False
            if self.pending_bytes() >= self.max_pending:
                self.sends_refused += 1
                return False
        self.sent += 1
        if len(body) >= self._direct_min:
            self.write(head + body + tail)
            return True
        out = self._out
        out += head
        out += body
        if tail:
            out += tail
        if not self._flush_scheduled:
            self._flush_scheduled = True
            assert self._batch is not None
            self._batch.add(self.flush_out)
        elif len(out) > COALESCE_LIMIT:
            self.flush_out()
        return True

    def frame_sender(self, head_for: Callable[[int], bytes], tail: bytes = b"") -> Sender:
        """A ``base.Sender`` for frames ``head_for(len(payload)) + payload + tail``.

        The head is cached for the last payload size, so a steady stream of one size costs
        one length check and one ``send`` per message. ``head_for`` may raise
        ``TransportError`` for a size the protocol cannot carry.
        """
        send = self.send
        last_size = -1
        head = b""

        def send_frame(payload: bytes, tag: int) -> bool:
            nonlocal last_size, head
            if len(payload) != last_size:
                head = head_for(len(payload))
                last_size = len(payload)
            return send(head, payload, tail)

        return send_frame

    def write(self, data: bytes) -> None:
        """Write ``data`` now, after anything queued (control frames, acks, handshakes)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._out:
            self.flush_out()
        transport.write(data)

    def flush_out(self) -> None:
        """Hand the queued frames to the transport (one write)."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        # The written buffer is never touched again, so the transport may keep it uncopied.
        self._out = bytearray()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(out)

    @property
    def backpressured(self) -> bool:
        """True while the socket is back-pressured and ``max_pending`` bytes are queued:
        ``send`` refuses messages (a client that queues messages itself checks this)."""
        return self._paused and self.pending_bytes() >= self.max_pending

    def pending_bytes(self) -> int:
        """Bytes queued here and in the transport's write buffer."""
        transport = self._transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        return len(self._out) + buffered

    async def drain(self) -> None:
        """Return once the socket took everything queued (the caller bounds the time).

        With a zero high-water mark the transport pauses the protocol at once and resumes
        it when its buffer is empty; the buffer is also re-checked every 50 ms for a
        transport that never paused. The high-water mark is restored afterwards.
        """
        self.flush_out()
        transport = self._transport
        if transport is None or transport.is_closing() or not transport.get_write_buffer_size():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiter = waiter
        try:
            transport.set_write_buffer_limits(high=0, low=0)
            while not waiter.done() and transport.get_write_buffer_size() > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(waiter), DRAIN_RECHECK_S)
        finally:
            self._drain_waiter = None
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=self._high)

    async def flush(
        self,
        timeout_s: float,
        *,
        confirm: Callable[[], Awaitable[object]] | None = None,
        unsettled: Callable[[], bool] | None = None,
    ) -> None:
        """Wait, at most ``timeout_s``, until the socket took everything queued, then for
        ``confirm`` (a round trip the peer answers after processing what came before), then
        while ``unsettled()`` holds for ``settled`` (the client's acks). Returns quietly on
        timeout or when the connection is (or gets) lost; never raises."""
        if not self._connected:
            return
        with contextlib.suppress(TimeoutError, TransportError):
            async with asyncio.timeout(timeout_s):
                await self.drain()
                if confirm is not None and self.writable:
                    await confirm()
                if unsettled is not None and unsettled() and self.writable:
                    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                    self._settle_waiter = waiter
                    try:
                        await waiter
                    finally:
                        self._settle_waiter = None

    def settled(self) -> None:
        """Everything the client waited acknowledgements for is acknowledged: wake
        ``flush``."""
        waiter = self._settle_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ keepalive, events

    def start_keepalive(self, interval_s: float, tick: Callable[[], None]) -> None:
        """Call ``tick`` every ``interval_s`` while connected (0 or less: never)."""
        if interval_s <= 0 or self._batch is None:
            return
        loop = asyncio.get_running_loop()

        def run() -> None:
            self._keepalive = None
            if not self._connected:
                return
            tick()
            if self._connected:
                self._keepalive = loop.call_later(interval_s, run)

        self._cancel_keepalive()
        self._keepalive = loop.call_later(interval_s, run)

    def _cancel_keepalive(self) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None

    def emit(self, event: ClientEvent) -> None:
        """Report a connection event to ``ClientOptions.on_event``."""
        handler = self._on_event
        if handler is not None:
            handler(event)

    # ------------------------------------------------------------------ ending

    def fail(self, reason: str) -> None:
        """Drop the connection because of ``reason`` (the disconnect reason; emitted as
        ``protocol_error``)."""
        if self.loss_reason is None:
            self.loss_reason = reason
        self.emit(ProtocolError(reason, self.where, self._options.client_id))
        self.abort()

    def abort(self) -> None:
        """Drop the connection at once (queued bytes are lost)."""
        self._end(abort=True)

    def shutdown(self) -> None:
        """Close the socket after the bytes already written (the peer said goodbye)."""
        self._end(abort=False)

    def _end(self, *, abort: bool) -> None:
        if not self._closing:
            # dropped before any close(): a close() that follows before the socket is gone
            # must not turn this loss into an expected one
            self._dropped = True
        self._down()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            if abort:
                transport.abort()
            else:
                transport.close()

    async def close(
        self, goodbye: bytes = b"", farewell: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        """Close by request; never raises.

        When connected: write what is queued and ``goodbye``, then run ``farewell`` (the
        protocol's closing handshake, e.g. AMQP's Close/Close-Ok), bounded by
        ``close_timeout_s``. Then close the socket and wait for it to go (at most
        ``close_timeout_s``, then abort). A loss from here on is reported as expected.
        """
        transport = self._transport
        if transport is None or self._closing:
            return
        self._closing = True
        self._cancel_keepalive()
        try:
            was_connected = self._connected
            self._down()
            if self.loss_reason is None:
                self.loss_reason = "closed by client"
            if was_connected:
                self.flush_out()
                if goodbye:
                    transport.write(goodbye)
                if farewell is not None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(self._close_timeout_s):
                            await farewell()
            transport.close()
            lost = self._lost
            if lost is not None and not lost.done():
                try:
                    async with asyncio.timeout(self._close_timeout_s):
                        await asyncio.shield(lost)
                except TimeoutError:
                    transport.abort()
        except Exception:  # close() must never raise: the connection is going away anyway
            with contextlib.suppress(Exception):
                transport.abort()

    @property
    def writable(self) -> bool:
        """True while there is a socket to write to (also during the handshake)."""
        transport = self._transport
        return transport is not None and not transport.is_closing()

    @property
    def closing(self) -> bool:
        """True once ``close`` was called (until the next ``connect``)."""
        return self._closing

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Set TCP_NODELAY and the write-buffer limits."""
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = transport = cast(asyncio.Transport, transport)
        self._batch = write_batch(asyncio.get_running_loop())
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._options.receive_stamp == "kernel" and not self._tls:
                    # asked for now, read once the session is up: the kernel turns receive
                    # stamping on in deferred work, so the first segments may lack it
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        transport.set_write_buffer_limits(high=self._high)

    def data_received(self, data: bytes) -> None:
        """Hand a read to the client's parser."""
        self._on_data(data)

    def eof_received(self) -> bool | None:
        """The peer closed its side: let the transport close."""
        return None

    def pause_writing(self) -> None:
        """The write buffer passed its high-water mark: sends are bounded from now on."""
        self._paused = True
        self._open = False
        if self._drain_waiter is None:
            self.emit(WritePaused(self.where, self.pending_bytes()))

    def resume_writing(self) -> None:
        """The write buffer drained below its low-water mark."""
        self._paused = False
        self._open = self._connected and not self._lent
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail the client's waiting requests and report the disconnection once."""
        self._stop_kernel_stamps()
        self._down()
        self._transport = None
        self._out = bytearray()
        self._cancel_keepalive()
        reason = self.loss_reason
        if reason is None:
            if isinstance(exc, OSError):
                reason = describe_oserror(exc)
            elif exc is not None:
                reason = str(exc) or type(exc).__name__
            else:
                reason = self.peer_closed_reason
            if self.last_error is not None:
                reason += f" (last error: {self.last_error})"
            self.loss_reason = reason
        unacked = self._on_lost(TransportError(reason, TransportErrorKind.DISCONNECTED))
        for waiter in (self._drain_waiter, self._settle_waiter, self._lost):
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if self._session:
            self.emit(
                Disconnected(
                    reason,
                    expected=self._closing and not self._dropped,
                    client_id=self._options.client_id,
                    endpoint=self.where,
                    unacked=unacked,
                    last_error=self.last_error,
                )
            )
