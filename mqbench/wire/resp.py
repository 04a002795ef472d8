"""RESP2 for Redis Pub/Sub: command builders and an incremental, split-tolerant parser.

Client -> server frames are RESP arrays of bulk strings (``encode_command``). On the publish
hot path the whole frame up to the payload, ``*3\\r\\n$7\\r\\nPUBLISH\\r\\n$<n>\\r\\n<channel>
\\r\\n$<size>\\r\\n``, is built once per (channel, size) by ``publish_prefix``; a publish is
that prefix, the payload and CRLF.

Server -> client frames are parsed by ``RespParser.feed``, which accepts data cut anywhere
and has two fast paths for the steady state of a benchmark:

* ``message`` pushes on a subscribed connection: the bytes of a push up to its payload are
  the same for every message on one channel with one payload size, so after the first one
  a push costs one ``startswith`` and one slice before the handler is called with
  ``(payload, t_recv_ns)``; no list or reply object is created.
* runs of identical integer replies (the ``:<receivers>\\r\\n`` answer to each ``PUBLISH``):
  a block of them is checked with one ``bytes.count`` and reported as one
  ``on_integers(value, count)`` call.

Anything else (subscribe confirmations, ``+OK``, ``-ERR``, ``pong`` arrays, other integers)
is decoded by a small generic RESP2 decoder and handed to ``on_reply``; errors arrive as
``RespError`` values. ``hiredis.Reader`` decodes the same stream in the tests (oracle); the
fast paths are faster than it because they create no per-message list (benchmarks in
``docs/transports.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeAlias

from mqbench.errors import TransportError
from mqbench.wire.framing import FramedParser

CRLF: Final = b"\r\n"

MAX_BULK: Final = 512 << 20
"""Largest bulk string accepted (Redis's own ``proto-max-bulk-len`` default)."""

MAX_LINE: Final = 64 << 10
"""Longest simple line (status, error, integer, length prefix) accepted."""

MAX_DEPTH: Final = 8
"""Deepest array nesting accepted (Pub/Sub replies are flat)."""

MESSAGE_CACHE: Final = 1024
"""Distinct ``message`` push prefixes remembered per parser; cleared when full."""

PushHandler = Callable[[bytes, int], None]
"""``(payload, t_recv_ns)``: called for each ``message`` push on a channel."""


class RespError:
    """An error reply (``-ERR ...``, ``-NOAUTH ...``): its code and the full text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    @property
    def code(self) -> str:
        """The first word, e.g. ``ERR``, ``NOAUTH``, ``WRONGPASS``."""
        return self.text.split(" ", 1)[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RespError) and other.text == self.text

    def __hash__(self) -> int:
        return hash(("RespError", self.text))

    def __repr__(self) -> str:
        return f"RespError({self.text!r})"


Reply: TypeAlias = "int | bytes | RespError | list[Reply] | None"
"""A decoded RESP2 reply: integer, simple or bulk string (bytes), nil, error, or array."""


class RespProtocolError(TransportError):
    """The server sent bytes that are not valid RESP2."""


class _Incomplete(Exception):
    """The frame at the current position is not complete; ``need`` bytes from it are."""

    def __init__(self, need: int) -> None:
        self.need = need


def _ignore_reply(reply: Reply) -> None:
    """Default ``on_reply``: ignore."""


def _ignore_integers(value: int, count: int) -> None:
    """Default ``on_integers``: ignore."""


_NO_PREFIX: Final = b"\x00never"
"""Fast-path prefix no frame starts with (no RESP type byte is NUL)."""


# --------------------------------------------------------------------------- builders


def bulk(arg: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def encode_command(*args: bytes | str | int) -> bytes:
    """A command as a RESP array of bulk strings (str is UTF-8 encoded, int written out)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            data = arg.encode("utf-8")
        elif isinstance(arg, int):
            data = b"%d" % arg
        else:
            data = bytes(arg)
        parts.append(bulk(data))
    return b"".join(parts)


def publish_prefix(channel: bytes, size: int) -> bytes:
    """The ``PUBLISH`` frame up to its payload; append payload + CRLF to complete it."""
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n" % (len(channel), channel, size)


def build_publish(channel: bytes, payload: bytes) -> bytes:
    """A complete ``PUBLISH channel payload`` frame."""
    return publish_prefix(channel, len(payload)) + payload + CRLF


def message_prefix(channel: bytes, size: int) -> bytes:
    """The bytes of a ``message`` push up to its payload (what the fast path matches)."""
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n" % (len(channel), channel, size)


def encode_reply(reply: Reply) -> bytes:
    """Encode a reply as a RESP2 server would (strings as bulk strings); for tests and fakes."""
    if reply is None:
        return b"$-1\r\n"
    if isinstance(reply, RespError):
        return b"-" + reply.text.encode("utf-8") + CRLF
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if isinstance(reply, bytes):
        return bulk(reply)
    return b"*%d\r\n" % len(reply) + b"".join(encode_reply(r) for r in reply)


def _show(data: bytes, limit: int = 60) -> str:
    text = repr(bytes(data[:limit]))
    return text + ("..." if len(data) > limit else "")


# --------------------------------------------------------------------------- parser


class RespParser(FramedParser):
    """Incremental parser of server -> client RESP2 for Pub/Sub and publish connections.

    Register a handler per channel with ``set_handler``; call ``feed`` with each chunk read
    from the socket and the receive time to stamp its ``message`` pushes with. A ``message``
    push for a channel without a handler goes to ``on_reply`` like any other reply.
    """

    __slots__ = (
        "_handlers",
        "_last_handler",
        "_last_int",
        "_last_int_value",
        "_last_prefix",
        "_last_size",
        "_prefixes",
        "on_integers",
        "on_reply",
    )

    def __init__(
        self,
        *,
        on_reply: Callable[[Reply], None] = _ignore_reply,
        on_integers: Callable[[int, int], None] | None = None,
    ) -> None:
        """``on_integers(value, count)`` receives integer replies in runs; when it is None
        they go to ``on_reply`` one by one."""
        super().__init__()
        self.on_reply = on_reply
        self.on_integers = on_integers
        self._handlers: dict[bytes, PushHandler] = {}
        self._prefixes: dict[bytes, tuple[int, PushHandler]] = {}
        self._last_prefix = _NO_PREFIX
        self._last_size = 0
        self._last_handler: PushHandler = _drop
        self._last_int = _NO_PREFIX
        self._last_int_value = 0

    def set_handler(self, channel: bytes, handler: PushHandler) -> None:
        """Deliver ``message`` pushes on ``channel`` to ``handler``."""
        self._handlers[channel] = handler
        self._reset_fast_path()

    def remove_handler(self, channel: bytes) -> None:
        """Stop delivering ``channel`` (later pushes go to ``on_reply``)."""
        self._handlers.pop(channel, None)
        self._reset_fast_path()

    def _reset_fast_path(self) -> None:
        self._prefixes.clear()
        self._last_prefix = _NO_PREFIX
        self._last_handler = _drop

    def _parse(self, data: bytes, t_recv_ns: int) -> int:
        """Dispatch complete frames in ``data``; return where the incomplete tail starts."""
        n = len(data)
        pos = 0
        startswith = data.startswith
        last_size = self._last_size
        last_handler = self._last_handler
        while pos < n:
            last = self._last_prefix
            if startswith(last, pos):
                start = pos + len(last)
                end = start + last_size
                if end + 2 > n:
                    self._need = end + 2 - pos
                    return pos
                if data[end] != 13 or data[end + 1] != 10:
                    raise RespProtocolError(
                        f"message payload from redis is not followed by CRLF: {_show(last)}"
                    )
                last_handler(data[start:end], t_recv_ns)
                pos = end + 2
                continue
            first = data[pos]
            if first == 58 and self.on_integers is not None:  # ':'
                line = self._last_int
                if startswith(line, pos):
                    size = len(line)
                    whole = (n - pos) // size
                    run = whole
                    while run > 1 and data.count(line, pos, pos + run * size) != run:
                        run //= 2  # the run ends inside: take a tiled half, then look again
                    self.on_integers(self._last_int_value, run)
                    pos += run * size
                    continue
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    self._need = self._line_need(data, pos)
                    return pos
                value = _int(data, pos + 1, eol)
                self._last_int = data[pos : eol + 2]
                self._last_int_value = value
                self.on_integers(value, 1)
                pos = eol + 2
                continue
            try:
                reply, end = _decode(data, pos, 0)
            except _Incomplete as inc:
                self._need = inc.need
                return pos
            if type(reply) is list and len(reply) == 3 and reply[0] == b"message":
                channel = reply[1]
                payload = reply[2]
                handler = self._handlers.get(channel) if type(channel) is bytes else None
                if handler is not None and type(payload) is bytes:
                    start = end - len(payload) - 2
                    self._last_prefix = data[pos:start]
                    self._last_size = last_size = len(payload)
                    self._last_handler = last_handler = handler
                    handler(payload, t_recv_ns)
                    pos = end
                    continue
            self.on_reply(reply)
            pos = end
        self._need = 0
        return pos

    @staticmethod
    def _line_need(data: bytes, pos: int) -> int:
        if len(data) - pos > MAX_LINE:
            raise RespProtocolError(f"redis sent a line longer than {MAX_LINE} bytes")
        return len(data) - pos + 1


def _drop(payload: bytes, t_recv_ns: int) -> None:
    """Placeholder handler of the fast path before the first message."""


def _int(data: bytes, start: int, end: int) -> int:
    text = data[start:end]
    try:
        return int(text)
    except ValueError:
        raise RespProtocolError(f"malformed integer from redis: {_show(text)}") from None


def _decode(data: bytes, pos: int, depth: int) -> tuple[Reply, int]:
    """Decode one reply starting at ``pos``; return it and the position after it.

    Raises ``_Incomplete`` (with the bytes needed from ``pos`` when known, else one more than
    available) when the frame is cut, ``RespProtocolError`` when it is malformed.
    """
    n = len(data)
    eol = data.find(b"\r\n", pos)
    if eol < 0:
        if n - pos > MAX_LINE:
            raise RespProtocolError(f"redis sent a line longer than {MAX_LINE} bytes")
        raise _Incomplete(n - pos + 1)
    kind = data[pos]
    if kind == 36:  # '$' bulk string
        size = _int(data, pos + 1, eol)
        if size < 0:
            return None, eol + 2
        if size > MAX_BULK:
            raise RespProtocolError(f"bulk string from redis is larger than {MAX_BULK} bytes")
        start = eol + 2
        end = start + size
        if end + 2 > n:
            raise _Incomplete(end + 2 - pos)
        if data[end] != 13 or data[end + 1] != 10:
            raise RespProtocolError(
                f"bulk string from redis is not followed by CRLF: {_show(data[pos:eol])}"
            )
        return data[start:end], end + 2
    if kind == 42:  # '*' array
        count = _int(data, pos + 1, eol)
        if count < 0:
            return None, eol + 2
        if depth >= MAX_DEPTH:
            raise RespProtocolError(f"redis sent arrays nested deeper than {MAX_DEPTH}")
        items: list[Reply] = []
        at = eol + 2
        for _ in range(count):
            try:
                item, at = _decode(data, at, depth + 1)
            except _Incomplete as inc:
                raise _Incomplete(at - pos + inc.need) from None
            items.append(item)
        return items, at
    if kind == 58:  # ':' integer
        return _int(data, pos + 1, eol), eol + 2
    if kind == 43:  # '+' simple string
        return data[pos + 1 : eol], eol + 2
    if kind == 45:  # '-' error
        return RespError(data[pos + 1 : eol].decode("utf-8", "replace")), eol + 2
    raise RespProtocolError(f"unknown RESP type from redis: {_show(data[pos:eol])}")


def decode_all(data: bytes) -> list[Reply]:
    """Decode a complete stream of replies (no fast paths); raises on a cut or bad frame."""
    replies: list[Reply] = []
    pos = 0
    while pos < len(data):
        try:
            reply, pos = _decode(data, pos, 0)
        except _Incomplete:
            raise RespProtocolError("redis reply stream ends in the middle of a frame") from None
        replies.append(reply)
    return replies
