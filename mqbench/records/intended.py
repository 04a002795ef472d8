"""The intended send time of every message: one formula shared by engine and analysis."""

from __future__ import annotations

import numpy as np


def intended_ns(start_ns: int, rate: float, publishers: int, pub: int, seq: int) -> int:
    """Intended send time of message ``seq`` of cell-local publisher ``pub`` (docs/records.md)."""
    return start_ns + int(float(seq * publishers + pub) * 1e9 / (rate * publishers))


def intended_ns_array(
    start_ns: int, rate: float, publishers: int, pub: np.ndarray, seq: np.ndarray
) -> np.ndarray:
    """Vectorised ``intended_ns``; bit-identical to the scalar version."""
    k = seq.astype(np.int64) * publishers + pub.astype(np.int64)
    offset = (k.astype(np.float64) * 1e9 / (rate * publishers)).astype(np.int64)
    return np.int64(start_ns) + offset


def intended_in_window(
    start_ns: int,
    rate: float,
    publishers: int,
    window: tuple[int, int],
    pub: np.ndarray,
    seq: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Intended send time of each (pub, seq) record and whether it counts: a publisher of
    the cell whose message was intended inside ``window`` ``[start, end)``."""
    intended = intended_ns_array(start_ns, rate, publishers, pub, seq)
    mask = (pub < publishers) & (intended >= window[0]) & (intended < window[1])
    return intended, mask


def first_seq_at_or_after(rate: float, publishers: int, pub: int, start_ns: int, t_ns: int) -> int:
    """Smallest ``seq`` whose intended time is >= ``t_ns`` (for window bounds)."""
    if t_ns <= start_ns:
        return 0
    seq = max(0, int((t_ns - start_ns) * rate / 1e9) - 1)
    while intended_ns(start_ns, rate, publishers, pub, seq) < t_ns:
        seq += 1
    return seq


def measured_window(
    start_ns: int, connected_ns: int, warmup_s: float, duration_s: float
) -> tuple[int, int]:
    """The planned measured window ``[start, end)`` of a cell (docs/results.md).

    It starts when every client is connected and the warm-up has passed,
    ``max(connected_ns, start_ns + warmup)``, and ends at ``start_ns + warmup + duration``.
    """
    warmup_ns = int(warmup_s * 1e9)
    return max(connected_ns, start_ns + warmup_ns), start_ns + warmup_ns + int(duration_s * 1e9)
