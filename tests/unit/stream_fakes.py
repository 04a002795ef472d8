"""A fake asyncio transport for driving ``StreamConnection`` (and the clients on it) in
unit tests, without a socket."""

from __future__ import annotations

from typing import Any

from mqbench.transports.stream import StreamConnection


class FakeTransport:
    """Records writes; ``buffered`` is what ``get_write_buffer_size`` reports."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.buffered = 0
        self.closed = False
        self.aborted = False
        self.limits: list[tuple[int | None, int | None]] = []

    def write(self, data: bytes | bytearray) -> None:
        self.writes.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.limits.append((high, low))

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True


def attach(stream: StreamConnection) -> FakeTransport:
    """Give ``stream`` a fake connection whose handshake is done (inside a running loop)."""
    transport = FakeTransport()
    stream.connection_made(transport)  # type: ignore[arg-type]
    stream.established()
    return transport
