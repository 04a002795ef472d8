"""Buffered writer of 24-byte records: one ``write`` syscall per block, never per message."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from mqbench.records.format import LAT_MAX, LAT_MIN, LAT_UNIT_NS, RECORD, RECORD_SIZE

DEFAULT_BLOCK_RECORDS = 65536


class RecordWriter:
    """Appends records to a file in blocks of ``block_records`` (1.5 MiB by default).

    ``append`` packs into a preallocated ``bytearray`` with ``struct.pack_into``; when the
    block is full it is written out in one call. ``flush`` writes a partial block, so an
    interrupted run keeps every record appended so far.
    """

    __slots__ = ("_buf", "_capacity", "_file", "_pack_into", "_pos", "count", "path")

    def __init__(self, path: Path, block_records: int = DEFAULT_BLOCK_RECORDS) -> None:
        self.path = path
        self._file: BinaryIO | None = open(path, "xb", buffering=0)  # noqa: SIM115
        self._capacity = block_records * RECORD_SIZE
        self._buf = bytearray(self._capacity)
        self._pos = 0
        self._pack_into = RECORD.pack_into
        self.count = 0
        """Records appended so far."""

    def append(self, t_sent: int, lat: int, pub: int, sub: int, seq: int) -> None:
        """Append one record (``lat`` already in 100 ns units and within i32)."""
        self._pack_into(self._buf, self._pos, t_sent, lat, pub, sub, seq)
        self._pos += RECORD_SIZE
        self.count += 1
        if self._pos == self._capacity:
            self._write_block()

    def append_delivery(self, t_sent: int, t_recv: int, pub: int, sub: int, seq: int) -> None:
        """Append a delivery record, converting ``t_recv - t_sent`` to saturating 100 ns."""
        lat = (t_recv - t_sent) // LAT_UNIT_NS
        if lat > LAT_MAX:
            lat = LAT_MAX
        elif lat < LAT_MIN:
            lat = LAT_MIN
        self.append(t_sent, lat, pub, sub, seq)

    def _write_block(self) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: writer is closed")
        view = memoryview(self._buf)[: self._pos]
        written = 0
        while written < len(view):
            written += self._file.write(view[written:]) or 0
        self._pos = 0

    def flush(self) -> None:
        """Write the partial block and push it to the OS."""
        if self._file is not None and self._pos:
            self._write_block()

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        if self._file is None:
            return
        self.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
