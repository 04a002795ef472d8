"""Live send and receive rates of a running cell, from the workers' own report times.

Each worker reports cumulative counters stamped with the time it took them
(``WorkerStats.t_ns``), a few times a second. A rate is the change of a worker's counters
between two of its own reports divided by the time between them, summed over workers, so
it is right from the first report: the window never reaches back before publishing began
(the start time is each worker's first point, with nothing sent or received), and the
time the reports spent in the pipe does not enter it.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from mqbench.records.worker_stats import WorkerStats

RATE_WINDOW_S: Final = 2.0
"""Rates are over about the last two seconds of each worker's reports."""


class RateMeter:
    """Send and receive rates over the last ``window_s`` of each worker's reports."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_ns = int(window_s * 1e9)
        self._start_ns: int | None = None
        self._points: dict[int, deque[tuple[int, int, int]]] = {}

    def start(self, start_ns: int) -> None:
        """Publishing starts at ``start_ns``: nothing was sent or received before it."""
        if self._start_ns is None:
            self._start_ns = start_ns

    def add(self, worker: int, stats: WorkerStats) -> None:
        """A worker's latest stats (the same report twice, or one from before the start,
        counts once or not at all)."""
        if self._start_ns is None or stats.t_ns <= self._start_ns:
            return
        points = self._points.setdefault(worker, deque([(self._start_ns, 0, 0)]))
        if stats.t_ns <= points[-1][0]:
            return
        points.append((stats.t_ns, stats.sent, stats.received))
        latest = stats.t_ns
        while len(points) > 2 and latest - points[1][0] >= self.window_ns:
            points.popleft()

    def rates(self) -> tuple[float, float]:
        """(sent, received) per second, summed over workers; (0, 0) before any report."""
        sent = received = 0.0
        for points in self._points.values():
            (t0, s0, r0), (t1, s1, r1) = points[0], points[-1]
            if t1 > t0:
                sent += (s1 - s0) * 1e9 / (t1 - t0)
                received += (r1 - r0) * 1e9 / (t1 - t0)
        return sent, received
