"""The NATS core text protocol: frame builders and an incremental, split-tolerant parser.

Client -> server frames are built by small functions (``build_connect``, ``build_sub``, ...)
or, on the publish hot path, by a cached ``PUB <subject> <#bytes>\\r\\n`` prefix.

Server -> client frames are parsed by ``NatsParser.feed``: it accepts data cut anywhere
(mid-line, mid-payload, byte by byte) and dispatches ``MSG`` frames by subscription id to a
``MessageHandler`` ``(payload, t_recv_ns)`` without creating a message object. The parsed
``MSG`` control line is cached by its exact bytes, so a stream of messages on one subject
with one payload size costs one dictionary lookup per message instead of a split and two
integer conversions. Control operations (``INFO``, ``PING``, ``PONG``, ``+OK``, ``-ERR``)
go to callbacks. Malformed input raises ``NatsProtocolError``.

The server always sends operation names in upper case; the parser also accepts control
operations in other cases (the protocol says they are case-insensitive) but only the
upper-case ``MSG`` takes the fast path. ``HMSG`` (headers) is rejected because the client
never asks for headers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from mqbench.errors import TransportError
from mqbench.wire.framing import FramedParser

CRLF: Final = b"\r\n"
PING: Final = b"PING\r\n"
PONG: Final = b"PONG\r\n"

MAX_CONTROL_LINE: Final = 1 << 20
"""Longest control line accepted from the server (``INFO`` of a big cluster can be long)."""

MAX_MSG_SIZE: Final = 64 << 20
"""Largest payload the parser accepts (the nats-server cap on ``max_payload`` is 64 MiB)."""

MSG_CACHE_SIZE: Final = 4096
"""Distinct ``MSG`` control lines remembered; the cache is cleared when full."""

MsgHandler = Callable[[bytes, int], None]
"""``(payload, t_recv_ns)``: called for each ``MSG`` on a subscription id."""

UnhandledMsg = Callable[[str, int, str | None, bytes], None]
"""``(subject, sid, reply_to, payload)``: a ``MSG`` for a subscription id without a handler."""


class NatsProtocolError(TransportError):
    """The server sent bytes that are not valid NATS protocol."""


def _ignore_err(message: str) -> None:
    """Default ``-ERR`` callback: ignore."""


def _ignore_info(info: dict[str, Any]) -> None:
    """Default ``INFO`` callback: ignore."""


def _drop(payload: bytes, t_recv_ns: int) -> None:
    """Placeholder handler of the fast path before the first message."""


_NO_LINE: Final = b"\x00never"
"""Fast-path line that no frame starts with (no operation begins with NUL)."""


def _noop() -> None:
    """Default callback for ``PING``, ``PONG`` and ``+OK``: ignore."""


# --------------------------------------------------------------------------- builders


def encode_subject(subject: str, *, wildcards: bool) -> bytes:
    """Return ``subject`` as protocol bytes; raise ``ValueError`` if NATS would reject it.

    Publish subjects (``wildcards=False``) may not contain ``*`` or ``>`` tokens.
    """
    if not subject:
        raise ValueError("subject is empty")
    if any(c.isspace() for c in subject):
        raise ValueError(f"subject {subject!r} contains whitespace")
    tokens = subject.split(".")
    if any(t == "" for t in tokens):
        raise ValueError(f"subject {subject!r} has an empty token")
    if not wildcards and any(t in ("*", ">") for t in tokens):
        raise ValueError(f"subject {subject!r} has a wildcard; publish subjects cannot")
    if wildcards and ">" in tokens[:-1]:
        raise ValueError(f"subject {subject!r}: '>' must be the last token")
    return subject.encode("utf-8")


def build_connect(
    name: str,
    *,
    version: str = "0",
    echo: bool = True,
    user: str | None = None,
    password: str | None = None,
    auth_token: str | None = None,
) -> bytes:
    """Return a ``CONNECT`` frame: no verbose acks, no pedantic checks, no headers."""
    options: dict[str, Any] = {
        "verbose": False,
        "pedantic": False,
        "tls_required": False,
        "name": name,
        "lang": "python-mqbench",
        "version": version,
        "protocol": 1,
        "echo": echo,
        "headers": False,
        "no_responders": False,
    }
    if user is not None:
        options["user"] = user
    if password is not None:
        options["pass"] = password
    if auth_token is not None:
        options["auth_token"] = auth_token
    return b"CONNECT " + json.dumps(options, separators=(",", ":")).encode() + CRLF


def build_sub(subject: bytes, sid: int, queue: bytes | None = None) -> bytes:
    """Return ``SUB <subject> [queue] <sid>``."""
    if queue:
        return b"SUB %s %s %d\r\n" % (subject, queue, sid)
    return b"SUB %s %d\r\n" % (subject, sid)


def build_unsub(sid: int, max_msgs: int | None = None) -> bytes:
    """Return ``UNSUB <sid> [max_msgs]``."""
    if max_msgs is None:
        return b"UNSUB %d\r\n" % sid
    return b"UNSUB %d %d\r\n" % (sid, max_msgs)


def pub_header(subject: bytes, size: int, reply_to: bytes | None = None) -> bytes:
    """Return the control line ``PUB <subject> [reply-to] <#bytes>\\r\\n`` (no payload)."""
    if reply_to:
        return b"PUB %s %s %d\r\n" % (subject, reply_to, size)
    return b"PUB %s %d\r\n" % (subject, size)


def build_pub(subject: bytes, payload: bytes, reply_to: bytes | None = None) -> bytes:
    """Return a complete ``PUB`` frame."""
    return pub_header(subject, len(payload), reply_to) + payload + CRLF


def parse_info(args: bytes) -> dict[str, Any]:
    """Parse the JSON argument of ``INFO``; raise ``NatsProtocolError`` if it is not an object."""
    try:
        info = json.loads(args)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NatsProtocolError(f"malformed INFO from nats server: {exc}") from None
    if not isinstance(info, dict):
        raise NatsProtocolError("malformed INFO from nats server: not a JSON object")
    return info


def _parse_msg_args(line: bytes) -> tuple[int, int, str, str | None]:
    """Parse ``MSG <subject> <sid> [reply-to] <#bytes>`` into ``(sid, size, subject, reply)``."""
    parts = line.split()
    if len(parts) == 4:
        _, subject, sid, size = parts
        reply: bytes | None = None
    elif len(parts) == 5:
        _, subject, sid, reply, size = parts
    else:
        raise NatsProtocolError(f"malformed MSG line from nats server: {_show(line)}")
    if not (sid.isdigit() and size.isdigit()):
        raise NatsProtocolError(f"malformed MSG line from nats server: {_show(line)}")
    if int(size) > MAX_MSG_SIZE:
        raise NatsProtocolError(f"MSG from nats server is larger than 64 MiB: {_show(line)}")
    return (
        int(sid),
        int(size),
        subject.decode("utf-8", "replace"),
        None if reply is None else reply.decode("utf-8", "replace"),
    )


def _show(line: bytes, limit: int = 80) -> str:
    """A short printable rendering of a protocol line for error messages."""
    text = repr(bytes(line[:limit]))
    return text + ("..." if len(line) > limit else "")


# --------------------------------------------------------------------------- parser


class NatsParser(FramedParser):
    """Incremental parser of server -> client NATS frames.

    Register a handler per subscription id with ``set_handler``; call ``feed`` with each
    chunk read from the socket and the receive time to stamp its messages with.
    """

    __slots__ = (
        "_cache",
        "_handlers",
        "_last_handler",
        "_last_line",
        "_last_size",
        "on_err",
        "on_info",
        "on_ok",
        "on_ping",
        "on_pong",
        "on_unhandled",
    )

    def __init__(
        self,
        *,
        on_info: Callable[[dict[str, Any]], None] = _ignore_info,
        on_ping: Callable[[], None] = _noop,
        on_pong: Callable[[], None] = _noop,
        on_ok: Callable[[], None] = _noop,
        on_err: Callable[[str], None] = _ignore_err,
        on_unhandled: UnhandledMsg | None = None,
    ) -> None:
        super().__init__()
        self.on_info = on_info
        self.on_ping = on_ping
        self.on_pong = on_pong
        self.on_ok = on_ok
        self.on_err = on_err
        self.on_unhandled = on_unhandled
        self._handlers: dict[int, MsgHandler] = {}
        self._cache: dict[bytes, tuple[int, int, str, str | None]] = {}
        self._last_line = _NO_LINE
        self._last_size = 0
        self._last_handler: MsgHandler = _drop

    def set_handler(self, sid: int, handler: MsgHandler) -> None:
        """Deliver ``MSG`` frames of subscription ``sid`` to ``handler``."""
        self._handlers[sid] = handler
        self._last_line = _NO_LINE

    def remove_handler(self, sid: int) -> None:
        """Stop delivering subscription ``sid`` (later frames go to ``on_unhandled``)."""
        self._handlers.pop(sid, None)
        self._last_line = _NO_LINE

    def _parse(self, data: bytes, t_recv_ns: int) -> int:
        """Dispatch complete frames in ``data``; return where the incomplete tail starts.

        Fast path: when the next frame starts with exactly the same ``MSG`` control line as
        the last dispatched one (same subject, sid and size, which is the steady state of a
        benchmark stream), one ``startswith`` replaces the line search, the cache lookup and
        the handler lookup. ``set_handler``/``remove_handler`` reset it.
        """
        n = len(data)
        pos = 0
        find = data.find
        startswith = data.startswith
        cache = self._cache
        handlers = self._handlers
        last_size = self._last_size
        last_handler = self._last_handler
        while pos < n:
            last = self._last_line
            if startswith(last, pos):
                start = pos + len(last)
                end = start + last_size
                if end + 2 > n:
                    self._need = end + 2 - pos
                    return pos
                if data[end] != 13 or data[end + 1] != 10:
                    raise NatsProtocolError(
                        f"MSG payload from nats server is not followed by CRLF: {_show(last)}"
                    )
                last_handler(data[start:end], t_recv_ns)
                pos = end + 2
                continue
            eol = find(b"\r\n", pos)
            if eol < 0:
                if n - pos > MAX_CONTROL_LINE:
                    raise NatsProtocolError(
                        f"nats server sent a control line longer than {MAX_CONTROL_LINE} bytes"
                    )
                self._need = n - pos + 1
                return pos
            if startswith(b"MSG ", pos):
                line = data[pos:eol]
                entry = cache.get(line)
                if entry is None:
                    entry = _parse_msg_args(line)
                    if len(cache) >= MSG_CACHE_SIZE:
                        cache.clear()
                    cache[line] = entry
                start = eol + 2
                end = start + entry[1]
                if end + 2 > n:
                    self._need = end + 2 - pos
                    return pos
                if data[end] != 13 or data[end + 1] != 10:
                    raise NatsProtocolError(
                        f"MSG payload from nats server is not followed by CRLF: {_show(line)}"
                    )
                handler = handlers.get(entry[0])
                if handler is not None:
                    self._last_line = data[pos:start]
                    self._last_size = last_size = entry[1]
                    self._last_handler = last_handler = handler
                    handler(data[start:end], t_recv_ns)
                elif self.on_unhandled is not None:
                    self.on_unhandled(entry[2], entry[0], entry[3], data[start:end])
                pos = end + 2
                continue
            self._control(data[pos:eol])
            pos = eol + 2
        self._need = 0
        return pos

    def _control(self, line: bytes) -> None:
        """Dispatch one control line other than an upper-case ``MSG``."""
        if line == b"PING":
            self.on_ping()
            return
        if line == b"PONG":
            self.on_pong()
            return
        parts = line.split(None, 1)
        op = parts[0].upper() if parts else b""
        args = parts[1] if len(parts) > 1 else b""
        if op == b"PING" and not args.strip():
            self.on_ping()
        elif op == b"PONG" and not args.strip():
            self.on_pong()
        elif op == b"+OK" and not args.strip():
            self.on_ok()
        elif op == b"-ERR":
            text = args.strip().decode("utf-8", "replace")
            if len(text) >= 2 and text[0] == text[-1] == "'":
                text = text[1:-1]
            self.on_err(text)
        elif op == b"INFO":
            self.on_info(parse_info(args))
        elif op == b"HMSG":
            raise NatsProtocolError("nats server sent HMSG although headers were not requested")
        else:
            raise NatsProtocolError(f"unknown operation from nats server: {_show(line)}")
