"""What to analyse in one cell: window, schedule, routes and record files (no Spark here).

A :class:`CellPlan` is built on the driver from a manifest cell entry and the cell folder.
It is small and picklable, so Spark tasks receive it in their closure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import (
    BrokerExitEntry,
    CellEntry,
    CellEntryError,
    GeneratorVerdict,
)
from mqbench.records.cell_params import CellParams, CellParamsError
from mqbench.records.events import Event, EventKind, read_events
from mqbench.records.format import RECORD_SIZE
from mqbench.records.integrity import (
    RecordFileCheck,
    absent_file,
    check_record_file,
    expected_record_files,
    writer_shortfalls,
)
from mqbench.records.intended import intended_in_window, intended_ns
from mqbench.records.timing import WakeupFloor

DEFAULT_CHUNK_RECORDS = 1 << 20
"""Records per task (24 MiB): small enough that every core gets work, big enough for numpy."""


@dataclass(frozen=True)
class Chunk:
    """A slice of one record file: ``count`` records starting at record ``offset``."""

    cell: int
    kind: str  # "deliveries" | "sends"
    file: int  # index of the file within its kind, in sorted name order
    index: int  # chunk number within the file (file order)
    path: str
    offset: int
    count: int


@dataclass
class CellPlan:
    """Everything the record kernels need to know about one cell."""

    cell_id: str
    index: int
    repeat: int
    status: str
    params: CellParams
    """The cell's ``params`` as the manifest stores them, read by name."""
    folder: Path
    start_ns: int
    rate: float
    publishers: int
    messages_per_publisher: int | None
    win_start: int
    win_end: int
    window_clipped: bool
    offered_rate: float | None
    routes: list[tuple[str, int, int, int, int]]
    fanout: np.ndarray  # int64[publishers]: routed subscribers of each publisher
    route_offset: np.ndarray  # int64[len(routes), publishers]: slot offset of route r for pub p
    f_max: int
    k_lo: int  # first interleaved slot k = seq * n + pub whose intended time is in the window
    k_hi: int  # first slot at or after the window end
    delivery_files: list[str] = field(default_factory=list)
    send_files: list[str] = field(default_factory=list)
    generator: GeneratorVerdict = field(default_factory=GeneratorVerdict)
    window_source: str = "manifest"
    approx_bits: int | None = None  # None: exact histograms; else see kernel.approx_encode
    record_checks: list[RecordFileCheck] = field(default_factory=list)
    broker_exit: BrokerExitEntry | None = None
    send_failures_expected: bool = False
    """Sends fail by design in this cell (faults on publishers, publisher churn)."""
    clipped_for_records: bool = False
    """The window end was moved to before an unclosed record file's last checkpoint."""
    latency_error_ms: float | None = None
    """Clock error bound added to every latency (routes across load tasks), else None."""
    drain_ns: int = 0
    """How long subscribers listened after the window (``drain_s``)."""
    drain_end_ns: int | None = None
    """When subscribers stopped listening (the ``drain_finished`` event), if recorded."""
    wakeup_floor: WakeupFloor | None = None
    """The machine's wake-up latency under the workers' policy: the larger of the calibrated
    floor and the one measured during the cell (``TimingEntry.machine_floor``)."""
    record_shortfalls: list[str] = field(default_factory=list)
    """Workers whose record files hold fewer records than they said they wrote."""
    error: str | None = None
    """The manifest's one line on why the cell ended early (interrupted cells)."""
    planned_s: float | None = None
    """The measured seconds the scenario planned (``params.duration_s``), if recorded."""

    def in_window(self, pub: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Intended send time of each (pub, seq) record and whether it is measured (a
        publisher of the cell, intended inside ``[win_start, win_end)``)."""
        return intended_in_window(
            self.start_ns, self.rate, self.publishers, (self.win_start, self.win_end), pub, seq
        )

    @property
    def window_ns(self) -> int:
        """Length of the measured window in nanoseconds (0 when empty)."""
        return max(0, self.win_end - self.win_start)

    @property
    def scheduled(self) -> int:
        """Messages whose intended time lies in the window (all publishers)."""
        hi = self.k_hi
        if self.messages_per_publisher is not None:
            hi = min(hi, self.messages_per_publisher * self.publishers)
        return max(0, hi - self.k_lo)

    @property
    def scheduled_deliveries(self) -> int:
        """Deliveries the schedule asks for in the window: Σ fanout over scheduled messages."""
        lo, hi = self.k_lo, self.k_hi
        n = self.publishers
        if self.messages_per_publisher is not None:
            hi = min(hi, self.messages_per_publisher * n)
        if hi <= lo or n <= 0:
            return 0
        full, rest = divmod(hi - lo, n)
        total = full * int(self.fanout.sum())
        if rest:
            pubs = (np.arange(lo, lo + rest, dtype=np.int64)) % n
            total += int(self.fanout[pubs].sum())
        return total

    @property
    def n_routes(self) -> int:
        """Size of the dense route-id space ``pub * f_max + slot``."""
        return self.publishers * max(1, self.f_max)


def _first_slot_at_or_after(start_ns: int, rate: float, n: int, t_ns: int) -> int:
    """Smallest interleaved slot ``k`` whose intended time is ``>= t_ns`` (monotone in k)."""
    if t_ns <= start_ns:
        return 0

    def at(k: int) -> int:
        return intended_ns(start_ns, rate, n, k % n, k // n)

    hi = max(1, int((t_ns - start_ns) * rate * n / 1e9) + 2)
    while at(hi) < t_ns:
        hi *= 2
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if at(mid) < t_ns:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _routes(cell: CellEntry, n_pubs: int) -> list[tuple[str, int, int, int, int]]:
    out: list[tuple[str, int, int, int, int]] = []
    for route in cell.routes or ():
        (a, b), (c, d) = route.pubs, route.subs
        if a < 0 or b > n_pubs or a > b or c < 0 or c > d:
            raise AnalysisError(f"cell {cell.id}: route {route.to_dict()!r} out of range")
        out.append((route.kind, a, b, c, d))
    return out


def _record_files(folder: Path, prefix: str) -> list[RecordFileCheck]:
    """The record files of one kind with what is intact in each (sorted by name)."""
    return [check_record_file(p) for p in sorted(str(p) for p in folder.glob(f"{prefix}-*.bin"))]


def _stop_time(events: list[Event], checks: list[RecordFileCheck]) -> int | None:
    """When recording stopped in an interrupted cell: the `interrupted` event, else the last
    sign of life: the latest event or record checkpoint (a killed mqbench wrote no event,
    but its workers checkpointed their records up to about a second before the kill)."""
    for event in events:
        if event.kind is EventKind.INTERRUPTED:
            return event.t_ns
    times = [e.t_ns for e in events] + [c.checkpoint_ns for c in checks if c.checkpoint_ns]
    return max(times, default=None)


def _record_checks(folder: Path, entry: CellEntry) -> tuple[list[RecordFileCheck], list[str]]:
    """Every record file the cell has or should have (absent ones included, see
    ``records.integrity``), and the workers whose files hold less than they wrote."""
    checks = _record_files(folder, "deliveries") + _record_files(folder, "sends")
    present = {Path(c.path).name for c in checks}
    workers = entry.generator.workers if entry.generator is not None else ()
    numbers = [w.worker for w in workers if w.worker is not None]
    count = entry.cell_params.workers
    if count is not None:
        numbers += range(count)
    expected = expected_record_files(folder, numbers)
    checks += [absent_file(folder / n, why) for n, why in expected.items() if n not in present]
    written = {w.worker: w.records_written for w in workers if w.worker is not None}
    return checks, writer_shortfalls(checks, written)


def window_from_events(
    cid: str, events: list[Event], start_ns: int, params: CellParams
) -> tuple[int, int]:
    """The measured window ``[start, end)`` of a cell whose manifest has none.

    Start: a ``window_start`` event, else ``max(connected, schedule start + warmup_s)`` where
    *connected* is the last ``clients_connected`` event (its ``connected_ns``, else its
    ``t_ns``). End: a ``window_end`` event, else ``schedule start + warmup_s + duration_s``,
    else the ``publishing_stopped`` event. AnalysisError when neither can be found.
    """

    def last(kind: EventKind, key: str | None = None) -> int | None:
        times = [
            int(e.details.get(key) or e.t_ns) if key else e.t_ns for e in events if e.kind is kind
        ]
        return max(times) if times else None

    warmup_ns = int((params.warmup_s or 0.0) * 1e9)
    start = last(EventKind.WINDOW_START)
    if start is None:
        connected = last(EventKind.CLIENTS_CONNECTED, "connected_ns")
        if connected is None:
            raise AnalysisError(
                f"cell {cid}: the manifest has no window and events.jsonl has no "
                "window_start or clients_connected event"
            )
        start = max(connected, start_ns + warmup_ns)
    end = last(EventKind.WINDOW_END)
    duration_s = params.duration_s
    if end is None and duration_s is not None:
        end = start_ns + warmup_ns + int(duration_s * 1e9)
    if end is None:
        end = last(EventKind.PUBLISHING_STOPPED)
    if end is None:
        raise AnalysisError(
            f"cell {cid}: the manifest has no window and neither params.duration_s nor a "
            "window_end/publishing_stopped event gives its end"
        )
    return start, max(start, end)


def manifest_cell(stored: Mapping[str, Any]) -> CellEntry:
    """A cell entry's stored JSON form (``manifest.json`` read by other means than
    ``read_run_manifest``) read through ``records`` (AnalysisError when malformed): the
    one edge where it becomes a ``CellEntry``; past it the analysis passes ``CellEntry``
    only."""
    try:
        return CellEntry.from_dict(stored)
    except CellEntryError as exc:
        raise AnalysisError(str(exc)) from None


def plan_cell(entry: CellEntry, folder: Path, approx_bits: int | None = None) -> CellPlan:
    """Build the plan of one manifest cell (checks record files; raises AnalysisError).

    The manifest's ``window`` is authoritative; without one, the window is derived from
    ``events.jsonl`` (:func:`window_from_events`). ``approx_bits`` asks for approximate
    histograms (see :func:`mqbench.analysis.kernel.approx_encode`).
    """
    cid = entry.id
    sched = entry.schedule
    if sched is None:
        raise AnalysisError(f"cell {cid}: manifest entry lacks schedule ('schedule')")
    start_ns, rate, n = sched.start_ns, sched.rate, sched.publishers
    source = "manifest" if entry.window is not None else "events"
    win_start, win_end = _window(entry, folder, start_ns)
    if n <= 0 or rate <= 0:
        raise AnalysisError(f"cell {cid}: schedule needs publishers > 0 and rate > 0")
    mpp = sched.messages_per_publisher
    try:
        drain_ns = int((entry.cell_params.drain_s or 0.0) * 1e9)
        planned_s = entry.cell_params.duration_s
        checks, shortfalls = _record_checks(folder, entry)
    except CellParamsError as exc:
        raise AnalysisError(str(exc)) from None
    win_end, clipped, clipped_for_records = _clipped_end(
        entry, folder, checks, drain_ns, (win_start, win_end)
    )
    routes = _routes(entry, n)
    fanout, offsets = _route_offsets(routes, n)
    f_max = int(fanout.max()) if n else 0
    k_lo = _first_slot_at_or_after(start_ns, rate, n, win_start)
    k_hi = max(k_lo, _first_slot_at_or_after(start_ns, rate, n, win_end))
    offered = entry.offered_rate
    return CellPlan(
        cell_id=cid,
        index=entry.index,
        repeat=entry.repeat,
        status=entry.status,
        params=entry.cell_params,
        folder=folder,
        start_ns=start_ns,
        rate=rate,
        publishers=n,
        messages_per_publisher=mpp,
        win_start=win_start,
        win_end=win_end,
        window_clipped=clipped,
        offered_rate=offered if offered is not None else rate * n,
        routes=routes,
        fanout=fanout,
        route_offset=offsets,
        f_max=f_max,
        k_lo=k_lo,
        k_hi=k_hi,
        delivery_files=_files(checks, "deliveries-"),
        send_files=_files(checks, "sends-"),
        generator=entry.generator or GeneratorVerdict(),
        window_source=source,
        approx_bits=approx_bits,
        record_checks=checks,
        broker_exit=entry.broker_exit,
        send_failures_expected=bool(entry.send_failures_expected),
        clipped_for_records=clipped_for_records,
        latency_error_ms=_latency_error_ms(entry),
        drain_ns=drain_ns,
        drain_end_ns=_drain_end(folder),
        wakeup_floor=entry.timing.machine_floor if entry.timing is not None else None,
        record_shortfalls=shortfalls,
        error=entry.error,
        planned_s=planned_s,
    )


def _clipped_end(
    entry: CellEntry,
    folder: Path,
    checks: list[RecordFileCheck],
    drain_ns: int,
    window: tuple[int, int],
) -> tuple[int, bool, bool]:
    """The window's end after clipping, whether it was clipped, and whether for records.

    An interrupted cell ends where its publishers stopped, less the drain. A writer that
    never closed its file may have lost what it held after its last checkpoint: keep only
    messages that had the drain time to arrive before it."""
    win_start, win_end = window
    clipped = False
    if entry.status == "interrupted":
        stop = _stop_time(read_events(folder), checks)
        if stop is not None:
            clip = stop - drain_ns
            if clip < win_end:
                win_end = max(win_start, clip)
                clipped = True
    clipped_for_records = False
    unclosed = [
        c.checkpoint_ns for c in checks if c.closed is False and c.checkpoint_ns and not c.absent
    ]
    if unclosed:
        clip = min(unclosed) - drain_ns
        if clip < win_end:
            win_end = max(win_start, clip)
            clipped = clipped_for_records = True
    return win_end, clipped, clipped_for_records


def _route_offsets(
    routes: list[tuple[str, int, int, int, int]], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Routed subscribers of each publisher, and each route's slot offset per publisher."""
    fanout = np.zeros(n, dtype=np.int64)
    offsets = np.zeros((len(routes), n), dtype=np.int64)
    for r, (kind, a, b, c, d) in enumerate(routes):
        offsets[r, a:b] = fanout[a:b]
        fanout[a:b] += 1 if kind == "pairs" else d - c
    return fanout, offsets


def _window(entry: CellEntry, folder: Path, start_ns: int) -> tuple[int, int]:
    """The manifest's window, else the one the cell's events give."""
    if entry.window is not None:
        return entry.window.start_ns, entry.window.end_ns
    try:
        return window_from_events(entry.id, read_events(folder), start_ns, entry.cell_params)
    except (KeyError, TypeError, ValueError, CellParamsError) as exc:
        raise AnalysisError(f"cell {entry.id}: malformed window ({exc})") from None


def _files(checks: list[RecordFileCheck], prefix: str) -> list[str]:
    """The record files of one kind that are there, in name order."""
    return sorted(c.path for c in checks if not c.absent and Path(c.path).name.startswith(prefix))


def _drain_end(folder: Path) -> int | None:
    """When the cell's subscribers stopped listening (its ``drain_finished`` event)."""
    for event in read_events(folder):
        if event.kind is EventKind.DRAIN_FINISHED:
            return event.t_ns
    return None


def _latency_error_ms(entry: CellEntry) -> float | None:
    """The clock bound a distributed cell's latencies carry (``cells[].clocks``)."""
    clocks = entry.clocks
    if clocks is None or not clocks.cross_task_routes:
        return None
    return clocks.latency_error_ns / 1e6


def chunks_of(plan_index: int, plan: CellPlan, chunk_records: int) -> list[Chunk]:
    """Split every record file of the cell into chunks of at most ``chunk_records``."""
    out: list[Chunk] = []
    for kind, files in (("deliveries", plan.delivery_files), ("sends", plan.send_files)):
        for f, path in enumerate(files):
            total = os.path.getsize(path) // RECORD_SIZE
            for i, offset in enumerate(range(0, total, chunk_records)):
                out.append(
                    Chunk(plan_index, kind, f, i, path, offset, min(chunk_records, total - offset))
                )
    return out
