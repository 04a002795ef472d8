"""Broker and generator CPU/RSS from ``resources.csv`` within the measured window."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mqbench.errors import AnalysisError

ROLES = ("broker", "generator")
MB = 1_000_000


def resource_stats(path: Path, win_start: int, win_end: int) -> dict[str, float | None]:
    """Mean and max CPU cores and RSS (MB = 10^6 bytes) per role for samples in the window.

    Keys: ``<role>_cpu_cores_mean|max`` and ``<role>_rss_mb_mean|max`` for role in
    ``broker``, ``generator``; None when the file or the role's samples are missing.
    """
    out: dict[str, float | None] = {}
    for role in ROLES:
        for metric in ("cpu_cores", "rss_mb"):
            out[f"{role}_{metric}_mean"] = None
            out[f"{role}_{metric}_max"] = None
    if not path.exists():
        return out
    try:
        frame = pd.read_csv(path)
    except (ValueError, OSError) as exc:
        raise AnalysisError(f"{path}: unreadable ({exc})") from None
    if frame.empty:
        return out
    missing = {"t_ns", "role", "cpu_cores", "rss_bytes"} - set(frame.columns)
    if missing:
        raise AnalysisError(f"{path}: missing columns {sorted(missing)}")
    t = pd.to_numeric(frame["t_ns"], errors="coerce")
    frame = frame[(t >= win_start) & (t < win_end)]
    for role in ROLES:
        rows = frame[frame["role"] == role]
        cpu = pd.to_numeric(rows["cpu_cores"], errors="coerce").dropna()
        rss = pd.to_numeric(rows["rss_bytes"], errors="coerce").dropna() / MB
        if len(cpu):
            out[f"{role}_cpu_cores_mean"] = float(cpu.mean())
            out[f"{role}_cpu_cores_max"] = float(cpu.max())
        if len(rss):
            out[f"{role}_rss_mb_mean"] = float(rss.mean())
            out[f"{role}_rss_mb_max"] = float(rss.max())
    return out
