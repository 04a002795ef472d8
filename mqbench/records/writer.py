"""Buffered writer of 24-byte records: one ``write`` syscall per block, never per message."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import BinaryIO

from mqbench.records.format import LAT_MAX, LAT_MIN, LAT_UNIT_NS, RECORD, RECORD_SIZE
from mqbench.records.integrity import write_count

DEFAULT_BLOCK_RECORDS = 65536


class RecordWriter:
    """Appends records to a file in blocks of ``block_records`` (1.5 MiB by default).

    ``append`` packs into a preallocated ``bytearray`` with ``struct.pack_into``; when the
    block is full it is written out in one call. ``checkpoint`` (called by the worker at
    least once a second) writes the partial block and the count sidecar
    (``mqbench/records/integrity.py``), so a hard kill loses at most the records since the
    last checkpoint and the analysis knows how many there were.

    A failed write (a full disk, say) never raises on the hot path: the file is cut back to
    its last whole record, further records are dropped, and :attr:`error` holds the
    ``OSError`` for the owner to act on.
    """

    __slots__ = (
        "_base",
        "_buf",
        "_capacity",
        "_file",
        "_pack_into",
        "_pos",
        "count",
        "error",
        "path",
        "written",
    )

    def __init__(self, path: Path, block_records: int = DEFAULT_BLOCK_RECORDS) -> None:
        self.path = path
        self._file: BinaryIO | None = open(path, "xb", buffering=0)  # noqa: SIM115
        self._capacity = block_records * RECORD_SIZE
        self._buf = bytearray(self._capacity)
        self._pos = 0
        self._pack_into = RECORD.pack_into
        self.count = 0
        """Records appended so far."""
        self.written = 0
        """Records handed to the OS (whole records in the file)."""
        self.error: OSError | None = None
        """The write error that stopped this writer (None while it works)."""
        self._base: tuple[int, int] | None = None
        """``(count, written)`` when the file was lent (``lend``); None: not lent."""

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
        pending, self._pos = self._pos, 0
        if self._file is None:
            if self.error is not None:
                return  # failed earlier: records are dropped, the owner was told
            raise ValueError(f"{self.path}: writer is closed")
        view = memoryview(self._buf)[:pending]
        done = 0
        try:
            while done < pending:
                done += self._file.write(view[done:]) or 0
        except OSError as exc:
            self._fail(exc)
            return
        self.written += pending // RECORD_SIZE

    def _fail(self, exc: OSError) -> None:
        """Keep only whole records in the file, stop writing, remember why."""
        self.error = exc
        file, self._file = self._file, None
        if file is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(file.fileno(), self.written * RECORD_SIZE)
        with contextlib.suppress(OSError):
            file.close()

    def lend(self) -> int:
        """Write out the partial block and return a duplicate of the file descriptor for
        another writer (the compiled core), which appends whole records at the same file
        position from now on; its counts come back through ``adopt``. Nothing may be
        appended here while the file is lent."""
        self.flush()
        if self._file is None:
            raise ValueError(f"{self.path}: writer is closed")
        self._base = (self.count, self.written)
        return os.dup(self._file.fileno())

    def adopt(self, count: int, written: int, errno: int = 0) -> None:
        """The borrower's counts so far (records appended and written since ``lend``), and
        the errno of the write that stopped it (0: none; the borrower cut the file back to
        its last whole record)."""
        if self._base is None:
            raise ValueError(f"{self.path}: adopt without lend")
        self.count = self._base[0] + count
        self.written = self._base[1] + written
        if errno and self.error is None:
            self._fail(OSError(errno, os.strerror(errno)))

    def flush(self) -> None:
        """Write the partial block and push it to the OS."""
        if self._pos:
            self._write_block()

    def checkpoint(self, t_ns: int | None = None) -> None:
        """Flush and rewrite the count sidecar (``closed: false``); errors go to ``error``."""
        self.flush()
        if self._file is None:
            return
        try:
            write_count(self.path, self.written, closed=False, t_ns=t_ns or time.time_ns())
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        """Flush, fsync and close; the sidecar says ``closed: true``. Safe to call twice."""
        if self._file is None:
            return
        self.flush()
        file = self._file
        if file is None:  # the flush failed
            return
        try:
            os.fsync(file.fileno())
            write_count(self.path, self.written, closed=True, t_ns=time.time_ns())
        except OSError as exc:
            self._fail(exc)
            return
        file.close()
        self._file = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
