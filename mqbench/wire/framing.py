"""Reassembly of a byte stream into whole frames, shared by the line-framed parsers.

A parser (``wire.nats.NatsParser``, ``wire.resp.RespParser``) implements ``_parse``: it
dispatches the complete frames at the start of a buffer, returns where the incomplete tail
begins and sets ``_need`` to the bytes that tail needs before parsing can go on. ``feed``
keeps the tail and joins it with later reads only once enough bytes have arrived, so a
large frame split over many reads is joined once, not once per read.
"""

from __future__ import annotations


class FramedParser:
    """``feed`` any split of a stream; subclasses parse whole frames in ``_parse``."""

    __slots__ = ("_chunks", "_need", "_pending")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._pending = 0
        self._need = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not parsed yet (an incomplete frame)."""
        return self._pending

    def feed(self, data: bytes, t_recv_ns: int = 0) -> None:
        """Parse ``data`` (any split of the stream) and dispatch every complete frame."""
        if self._chunks:
            self._chunks.append(data)
            self._pending += len(data)
            if self._pending < self._need:
                return
            data = b"".join(self._chunks)
            self._chunks = []
            self._pending = 0
        pos = self._parse(data, t_recv_ns)
        if pos < len(data):
            rest = data[pos:]
            self._chunks = [rest]
            self._pending = len(rest)

    def _parse(self, data: bytes, t_recv_ns: int) -> int:
        """Dispatch complete frames in ``data``; return where the incomplete tail starts
        (and set ``_need``, the bytes from there a complete frame needs at least)."""
        raise NotImplementedError
