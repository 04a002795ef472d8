"""Synthetic result folders with known contents for the analysis tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mqbench.records.format import RECORD_DTYPE, SEND_ACK, SEND_OK

if TYPE_CHECKING:
    from mqbench.scenario.matrix import Cell

MS = 1_000_000
RATE = 1000.0  # per publisher: with n publishers, slot k = seq * n + pub is at k * 1 ms / n


def intended(pub: int, seq: int, n: int = 1) -> int:
    """Intended time (start 0) of (pub, seq) with ``n`` publishers at RATE."""
    return int(float(seq * n + pub) * 1e9 / (RATE * n))


def records(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    """Structured records from (t_sent, lat, pub, sub, seq) tuples."""
    out = np.zeros(len(rows), dtype=RECORD_DTYPE)
    for i, row in enumerate(rows):
        out[i] = row
    return out


def sends_ok(n: int, seqs: range, pubs: range | None = None, lag_ns: int = 0) -> np.ndarray:
    """SEND_OK records for every (pub, seq), sent ``lag_ns`` after the intended time."""
    pubs = pubs if pubs is not None else range(n)
    return records([(intended(p, s, n) + lag_ns, 0, p, SEND_OK, s) for s in seqs for p in pubs])


def make_cell(
    root: Path,
    *,
    cell_id: str = "c0",
    publishers: int = 1,
    subscribers: int = 1,
    routes: list[dict[str, Any]] | None = None,
    window: tuple[int, int] = (0, 100 * MS),
    deliveries: list[np.ndarray] | None = None,
    sends: list[np.ndarray] | None = None,
    status: str = "completed",
    resources: str | None = None,
    events: list[dict[str, Any]] | None = None,
    generator: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """Write one cell folder under ``root/cells`` and return its manifest entry."""
    folder = root / "cells" / cell_id
    folder.mkdir(parents=True)
    for w, rec in enumerate(deliveries or []):
        rec.tofile(folder / f"deliveries-{w}.bin")
    for w, rec in enumerate(sends or []):
        rec.tofile(folder / f"sends-{w}.bin")
    if resources is not None:
        (folder / "resources.csv").write_text(resources)
    if events is not None:
        (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return {
        "id": cell_id,
        "index": index,
        "repeat": 0,
        "status": status,
        "error": None,
        "params": params or {"target": "fake", "pairs": publishers, "drain_s": 0.0},
        "offered_rate": RATE * publishers,
        "publishers": publishers,
        "subscribers": subscribers,
        "routes": routes
        if routes is not None
        else [{"kind": "pairs", "pubs": [0, publishers], "subs": [0, publishers]}],
        "schedule": {
            "kind": "interleaved",
            "start_ns": 0,
            "rate": RATE,
            "publishers": publishers,
            "messages_per_publisher": 1000,
        },
        "window": {"start_ns": window[0], "end_ns": window[1], "connected_ns": 0},
        "generator": generator or {"workers": []},
    }


def write_manifest(root: Path, cells: list[dict[str, Any]], version: int = 1) -> Path:
    """Write manifest.json for ``cells``."""
    (root / "manifest.json").write_text(
        json.dumps({"schema_version": version, "status": "completed", "cells": cells})
    )
    return root


def rich_run(root: Path) -> Path:
    """Two cells exercising every metric: loss, duplicates, reordering, acks, fan-out."""
    rng = np.random.default_rng(7)
    n = 4
    seqs = range(200)
    sends = sends_ok(n, seqs, lag_ns=3_000)
    acks = records(
        [(intended(p, s, n), 100 + s % 37, p, SEND_ACK, s) for s in seqs for p in range(n)]
    )
    rows = []
    for s in seqs:
        for p in range(n):
            if (p, s) in ((1, 0), (2, 199), (3, 50)):
                continue  # head, tail and middle loss
            lat = int(rng.integers(50, 5000))
            rows.append((intended(p, s, n) + 3_000, lat, p, p, s))
            if s % 41 == 0:
                rows.append((intended(p, s, n) + 3_000, lat + 700, p, p, s))  # duplicate
    deliveries = records(rows)
    # swap some neighbours so that reordering crosses chunk boundaries too
    for i in range(5, len(deliveries) - 9, 23):
        deliveries[[i, i + 8]] = deliveries[[i + 8, i]]
    half = len(deliveries) // 2
    pairs = make_cell(
        root,
        cell_id="pairs",
        publishers=n,
        window=(20 * MS, 180 * MS),
        deliveries=[deliveries[:half], deliveries[half:]],
        sends=[np.concatenate([sends, acks])],
        resources="t_ns,role,pid,cpu_cores,rss_bytes\n"
        + "".join(f"{t * 10 * MS},broker,1,{t / 10},{(100 + t) * 10**6}\n" for t in range(25))
        + "".join(f"{t * 10 * MS},generator,2,0.5,{50 * 10**6}\n" for t in range(25)),
        generator={"saturated": True, "reason": "send lag"},
    )
    fan = [
        (intended(p, s, 2) + 1_000, 10 + sub + s % 5, p, sub, s)
        for s in range(100)
        for p in range(2)
        for sub in range(3)
        if not (sub == 2 and s > 90)
    ]
    fan += [(intended(0, 30, 2), 5, 0, 7, 30)]  # on no route
    fanout = make_cell(
        root,
        cell_id="fanout",
        index=1,
        publishers=2,
        subscribers=3,
        routes=[{"kind": "all", "pubs": [0, 2], "subs": [0, 3]}],
        window=(5 * MS, 95 * MS),
        deliveries=[records(fan)],
        sends=[sends_ok(2, range(100), lag_ns=1_000)],
    )
    return write_manifest(root, [pairs, fanout])


@dataclass(frozen=True)
class Traits:
    """What one cell of :func:`scenario_run` measured (latency in µs, from the send)."""

    latency_us: float = 200.0
    spread_us: float = 100.0
    cpu_cores: float = 0.1
    rss_mb: float = 10.0
    send_lag_us: float = 0.0
    saturated: bool = False
    broker_exited: bool = False
    tail_loss: bool = False


def scenario_run(
    root: Path,
    scenario: dict[str, Any],
    traits: Callable[[Cell], Traits] = lambda cell: Traits(),
    messages: int = 40,
) -> Path:
    """A result folder as ``mqbench run`` leaves it for ``scenario`` (a scenario file's
    data; the workload rate is forced to RATE): the manifest holds the resolved scenario,
    ``scenario_input`` and one entry per cell of the expanded matrix with the parameters a
    run records; each cell has records, resources and generator verdicts from ``traits``.
    Topologies ``pairs`` and ``fanout``; nothing is analysed yet."""
    from mqbench.scenario.matrix import expand
    from mqbench.scenario.model import Scenario

    data = {**scenario, "workload": {**scenario.get("workload", {}), "rate": RATE}}
    resolved = Scenario.model_validate(data)
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for cell in expand(resolved):
        t = traits(cell)
        rng = np.random.default_rng(cell.index + 7)
        n, subs = cell.publishers, cell.subscribers
        fanout = cell.topology == "fanout"
        lag_ns = int(t.send_lag_us * 1000)
        rows = []
        for s in range(messages):
            for p in range(n):
                if t.tail_loss and s == messages - 1:
                    continue
                for sub in range(subs) if fanout else [p]:
                    lat = int((t.latency_us + rng.uniform(0, t.spread_us)) * 10)
                    rows.append((intended(p, s, n) + lag_ns, lat, p, sub, s))
        samples = "".join(
            f"{k * 10 * MS},broker,1,{t.cpu_cores},{int(t.rss_mb * 10**6)}\n" for k in range(4)
        )
        entry = make_cell(
            root,
            cell_id=cell.id,
            publishers=n,
            subscribers=subs,
            routes=[{"kind": "all", "pubs": [0, 1], "subs": [0, subs]}] if fanout else None,
            window=(0, messages * MS),
            deliveries=[records(rows)],
            sends=[sends_ok(n, range(messages), lag_ns=lag_ns)],
            resources="t_ns,role,pid,cpu_cores,rss_bytes\n" + samples,
            generator={"saturated": True, "reason": "send lag"} if t.saturated else None,
            params={**cell.params(), "runtime": "native", "faults": None},
            index=cell.index,
        )
        entry["repeat"] = cell.repeat
        entry["schedule"]["messages_per_publisher"] = messages
        if t.broker_exited:
            entry["broker_exit"] = {"pid": 1, "reason": "exited", "exit_code": 1, "t_ns": 0}
        entries.append(entry)
    write_manifest(root, entries)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["scenario"] = resolved.model_dump(mode="json")
    manifest["scenario_input"] = scenario
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root
