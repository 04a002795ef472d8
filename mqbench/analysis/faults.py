"""Fault metrics of a cell (docs/faults.md), computed with numpy from records + events.

Fault runs are small (tens of pairs at paper rates), so this runs in one process beside the
Spark summary and writes ``cells/<id>/faults.json``, a
:class:`~mqbench.records.fault_metrics.FaultMetrics`:

- ``windows``: every ``fault_injected`` / ``fault_recovered`` pair from events.jsonl;
- ``downtime_fraction``: share of the measured window spent inside faults;
- ``latency_in_faults`` / ``latency_outside``: latency from the intended send time of
  deliveries whose message was *intended* inside / outside a fault window;
- per recovery: ``first_delivery_ms`` (first delivery to a faulted subscriber after the
  recovery) and ``drain_ms`` (until the last delivery of a message intended during that
  fault, i.e. how long the backlog took to drain);
- ``reconnects`` and outage durations reported by the clients (``client_reconnected``);
  ``subscriber_outage_fraction``: the faulted subscribers' time away as the clients saw it
  (disconnect to resubscribed), over the window; it exceeds ``downtime_fraction`` by the
  reconnect time after each recovery;
- ``duplicates``: deliveries of a (publisher, sequence, subscriber) already delivered
  (redeliveries after reconnects).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mqbench.errors import AnalysisError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.events import Event, EventKind, read_events
from mqbench.records.fault_metrics import (
    FaultLatency,
    FaultMetrics,
    FaultSpan,
    Recovery,
    write_fault_metrics_json,
)
from mqbench.records.format import LAT_UNIT_NS, RECORD_DTYPE, RECORD_SIZE
from mqbench.records.intended import intended_in_window


def fault_windows(events: list[Event]) -> list[tuple[int, int]]:
    """``(inject_ns, recover_ns)`` pairs in order; an unrecovered fault ends at the last event."""
    windows: list[tuple[int, int]] = []
    open_at: int | None = None
    for event in events:
        if event.kind is EventKind.FAULT_INJECTED and open_at is None:
            open_at = event.t_ns
        elif event.kind is EventKind.FAULT_RECOVERED and open_at is not None:
            windows.append((open_at, event.t_ns))
            open_at = None
    if open_at is not None and events:
        windows.append((open_at, events[-1].t_ns))
    return windows


def _load(folder: Path, kind: str) -> np.ndarray:
    parts = []
    for path in sorted(folder.glob(f"{kind}-*.bin")):
        size = path.stat().st_size
        if size % RECORD_SIZE:
            raise AnalysisError(f"{path}: size {size} is not a multiple of {RECORD_SIZE} bytes")
        parts.append(np.fromfile(path, dtype=RECORD_DTYPE))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=RECORD_DTYPE)


def _stats(values_us: np.ndarray) -> FaultLatency | None:
    if values_us.size == 0:
        return None
    ordered = np.sort(values_us)
    n = ordered.size

    def rank(q: float) -> float:
        return float(ordered[max(0, int(np.ceil(q * n)) - 1)])

    return FaultLatency(
        count=int(n),
        p50_us=rank(0.50),
        p95_us=rank(0.95),
        p99_us=rank(0.99),
        max_us=float(ordered[-1]),
        mean_us=float(ordered.mean()),
    )


def _inside(t: np.ndarray, windows: list[tuple[int, int]]) -> np.ndarray:
    mask = np.zeros(t.shape, dtype=bool)
    for start, end in windows:
        mask |= (t >= start) & (t < end)
    return mask


def _recoveries(
    windows: list[tuple[int, int]],
    t_recv: np.ndarray,
    intended: np.ndarray,
    faulted: np.ndarray | None,
) -> tuple[Recovery, ...]:
    """Per fault: first delivery to a faulted subscriber (``faulted`` marks their
    deliveries; None: every delivery counts) and the drain of the fault's messages."""
    recoveries = []
    for start, end in windows:
        after = t_recv >= end
        if faulted is not None:
            after &= faulted
        first = int(t_recv[after].min()) if after.any() else None
        in_fault = (intended >= start) & (intended < end)
        last = int(t_recv[in_fault].max()) if in_fault.any() else None
        recoveries.append(
            Recovery(
                injected_ns=start,
                recovered_ns=end,
                duration_ms=(end - start) / 1e6,
                first_delivery_ms=None if first is None else (first - end) / 1e6,
                drain_ms=None if last is None else max(0.0, (last - end) / 1e6),
                deliveries_of_fault_messages=int(in_fault.sum()),
            )
        )
    return tuple(recoveries)


def _duplicates(deliveries: np.ndarray, measured: np.ndarray) -> int:
    keys = (
        deliveries["pub"].astype(np.uint64) << np.uint64(40)
        | deliveries["seq"].astype(np.uint64) << np.uint64(16)
        | deliveries["sub"].astype(np.uint64)
    )
    return int(keys[measured].size - np.unique(keys[measured]).size)


def fault_metrics(cell: CellEntry, folder: Path) -> FaultMetrics | None:
    """Metrics of a fault run, or None when the cell injected no faults."""
    events = read_events(folder)
    windows = fault_windows(events)
    reconnects = [e.details for e in events if e.kind is EventKind.CLIENT_RECONNECTED]
    if not windows and not reconnects:
        return None
    schedule, window = cell.schedule, cell.window
    if schedule is None or window is None:
        raise AnalysisError(
            f"cell {cell.id}: fault metrics need the manifest's schedule and window"
        )
    w_start, w_end = window.start_ns, window.end_ns
    deliveries = _load(folder, "deliveries")
    intended, measured = intended_in_window(
        schedule.start_ns,
        schedule.rate,
        schedule.publishers,
        (w_start, w_end),
        deliveries["pub"],
        deliveries["seq"],
    )
    t_recv = deliveries["t_sent"] + deliveries["lat"].astype(np.int64) * LAT_UNIT_NS
    latency_us = (t_recv - intended) / 1000.0
    during = _inside(intended, windows) & measured
    clipped = [(max(a, w_start), min(b, w_end)) for a, b in windows]
    downtime = sum(max(0, b - a) for a, b in clipped)
    affected_subs = {
        int(s)
        for e in events
        if e.kind is EventKind.FAULT_INJECTED
        for s in e.details.get("subscribers", [])
    }
    faulted = np.isin(deliveries["sub"], list(affected_subs)) if affected_subs else None
    outages = np.array([float(e["outage_ms"]) for e in reconnects])
    sub_outage_s = sum(float(e["outage_ms"]) / 1000 for e in reconnects if e.get("role") == "sub")
    window_s = (w_end - w_start) / 1e9
    return FaultMetrics(
        windows=tuple(FaultSpan(a, b) for a, b in windows),
        downtime_fraction=downtime / (w_end - w_start) if w_end > w_start else None,
        subscriber_outage_fraction=(
            sub_outage_s / (len(affected_subs) * window_s)
            if affected_subs and window_s > 0
            else None
        ),
        latency_in_faults=_stats(latency_us[during]),
        latency_outside=_stats(latency_us[measured & ~during]),
        recoveries=_recoveries(windows, t_recv, intended, faulted),
        reconnects=int(outages.size),
        outage_ms_p50=float(np.median(outages)) if outages.size else None,
        outage_ms_max=float(outages.max()) if outages.size else None,
        duplicates=_duplicates(deliveries, measured),
    )


def write_fault_metrics(entry: CellEntry, folder: Path) -> FaultMetrics | None:
    """Compute and write ``faults.json`` (nothing when the cell had no faults)."""
    metrics = fault_metrics(entry, folder)
    if metrics is not None:
        write_fault_metrics_json(folder, metrics)
    return metrics
