"""Progress of an analysis, for the CLI to show while Spark works.

:class:`ProgressTracker` holds the current step (which cell, n of m, elapsed seconds and,
while the Spark job runs, its finished and total tasks) and hands a snapshot to the
caller's callback at every step and about once a second in between (from a daemon thread,
so a long Spark stage still shows time passing). Spark runs all cells in one job: its
tasks mix chunks of every cell, so the scan reports tasks, not cells.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

Phase = Literal["planning", "starting Spark", "scanning", "summarising", "fault metrics"]


@dataclass(frozen=True)
class AnalysisProgress:
    """One snapshot of an analysis."""

    phase: Phase
    cells: int
    """Cells being analysed."""
    cell: int = 0
    """1-based position of ``cell_id`` among them (0: the step is not per cell)."""
    cell_id: str | None = None
    elapsed_s: float = 0.0
    tasks_done: int | None = None
    """Spark tasks finished in the running stage (None outside the Spark scan)."""
    tasks: int | None = None


ProgressFn = Callable[[AnalysisProgress], None]

HEARTBEAT_S = 1.0


class ProgressTracker:
    """Reports steps to ``on_progress`` (nothing when it is None)."""

    def __init__(
        self,
        on_progress: ProgressFn | None,
        cells: int,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self._emit = on_progress
        self._clock = clock
        self._t0 = clock()
        self._state = AnalysisProgress("planning", cells)
        self._lock = threading.Lock()
        self._spark: Any | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if on_progress is not None and heartbeat_s > 0:
            self._thread = threading.Thread(
                target=self._beat, args=(heartbeat_s,), name="mqbench-analysis-progress"
            )
            self._thread.daemon = True
            self._thread.start()

    def step(self, phase: Phase, cell: int = 0, cell_id: str | None = None) -> None:
        """Enter a step (and report it at once)."""
        with self._lock:
            self._state = replace(self._state, phase=phase, cell=cell, cell_id=cell_id)
        self._report()

    def watch_spark(self, spark: Any | None) -> None:
        """Report the running Spark stage's tasks from now on (None: stop)."""
        with self._lock:
            self._spark = spark

    def close(self) -> None:
        """Stop the heartbeat."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _beat(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self._report()

    def _report(self) -> None:
        if self._emit is None:
            return
        with self._lock:
            state, spark = self._state, self._spark
        done, total = _spark_tasks(spark) if spark is not None else (None, None)
        snapshot = replace(state, elapsed_s=self._clock() - self._t0, tasks_done=done, tasks=total)
        try:
            self._emit(snapshot)
        except Exception:  # a display problem never stops an analysis
            return


def _spark_tasks(spark: Any) -> tuple[int | None, int | None]:
    """Finished and total tasks of Spark's active stages (None, None when unknown)."""
    try:
        tracker = spark.sparkContext.statusTracker()
        infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        infos = [i for i in infos if i is not None]
        if not infos:
            return None, None
        return sum(i.numCompletedTasks for i in infos), sum(i.numTasks for i in infos)
    except Exception:  # the status API is best effort; the analysis goes on
        return None, None
