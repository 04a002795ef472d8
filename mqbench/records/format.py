"""The 24-byte wire header and the 24-byte send/delivery record (see docs/records.md).

Wire header (first 24 bytes of every payload, little endian)::

    0  u32 pub      global publisher index
    4  u32 seq      publisher's sequence number (0-based, on schedule)
    8  i64 t_sent   time.time_ns() when the message was handed to the client
    16 i64 spare    run id (low 32 bits) | flags (high 32 bits)

Record (one per delivered or sent message, little endian)::

    0  i64 t_sent   from the header
    8  i32 lat      delivery: t_recv - t_sent; send: ack latency; units of 100 ns, saturating
    12 u32 pub
    16 u32 sub      delivery: global subscriber index; send: SEND_* flags
    20 u32 seq
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np

SCHEMA_VERSION: Final = 1
HEADER_SIZE: Final = 24
RECORD_SIZE: Final = 24
LAT_UNIT_NS: Final = 100
LAT_MAX: Final = 2**31 - 1
LAT_MIN: Final = -(2**31)

HEADER = struct.Struct("<IIqq")
RECORD = struct.Struct("<qiIII")

RECORD_DTYPE: Final = np.dtype(
    [("t_sent", "<i8"), ("lat", "<i4"), ("pub", "<u4"), ("sub", "<u4"), ("seq", "<u4")]
)
assert RECORD_DTYPE.itemsize == RECORD_SIZE

# Flags stored in the ``sub`` field of send records.
SEND_OK: Final = 1
"""The message was handed to a connected client at ``t_sent``."""
SEND_ACK: Final = 2
"""An acknowledgement (PUBACK, confirm, ...) arrived; ``lat`` holds ack latency."""
SEND_FAILED: Final = 4
"""The message was due but could not be handed over (client disconnected)."""


def encode_latency(delta_ns: int) -> int:
    """Convert a nanosecond delta to saturating 100 ns units for the ``lat`` field."""
    units = delta_ns // LAT_UNIT_NS
    if units > LAT_MAX:
        return LAT_MAX
    if units < LAT_MIN:
        return LAT_MIN
    return units


def pack_header(pub: int, seq: int, t_sent: int, spare: int = 0) -> bytes:
    """Return the 24-byte header."""
    return HEADER.pack(pub, seq, t_sent, spare)


def unpack_header(data: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """Return ``(pub, seq, t_sent, spare)`` from the first 24 bytes of ``data``."""
    return HEADER.unpack_from(data, 0)


def pack_record(t_sent: int, lat: int, pub: int, sub: int, seq: int) -> bytes:
    """Return one 24-byte record (``lat`` already in 100 ns units)."""
    return RECORD.pack(t_sent, lat, pub, sub, seq)


def read_records(path: str, *, offset: int = 0, count: int = -1) -> np.ndarray:
    """Read whole records from ``path`` as a structured array.

    Bytes after the last whole record (a write cut short) are ignored; the analysis reports
    them (``mqbench/records/integrity.py``).
    """
    import os

    whole = os.path.getsize(path) // RECORD_SIZE
    available = max(0, whole - offset)
    n = available if count < 0 else min(count, available)
    return np.fromfile(path, dtype=RECORD_DTYPE, count=n, offset=offset * RECORD_SIZE)
