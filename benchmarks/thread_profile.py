"""Per-thread CPU time and context switches of each broker over its cells' measured
windows, divided by the messages delivered (run on demand; docs/findings.md, "Of the two
JVM brokers, Artemis is the slower one at 1 KiB").

Runs ``mqbench run`` with the given arguments, and while it runs samples every
``--interval`` s, for every broker process it started (a descendant whose PID a cell of
the manifest names as its broker, found as any descendant that is not mqbench's own
Python), each thread's ``/proc/<pid>/task/<tid>/schedstat`` (CPU ns, run-queue wait ns,
times run) and ``status`` (voluntary and involuntary context switches). A JVM broker's
threads are named from ``jcmd <pid> Thread.print`` taken 10 s before its first window
and again when it ends (``/proc``'s ``comm`` keeps 15 characters only). After the run,
per cell: the samples bracketing ``[window.start_ns, window.end_ns)`` of ``manifest.json``
give each thread's deltas, summed per thread group (the name with its numbers replaced by
``#``) and divided by the deliveries in the window (``summary.json``, else the schedule's
expected deliveries). A voluntary switch is the thread going to sleep; each one is a wake-up
paid later, so ``vcs/msg`` counts the hand-offs a message costs in that group.

``--hold-dma-latency`` holds ``/dev/cpu_dma_latency`` at 0 for the whole run (the knob of
docs/calibration.md, "The wake-up floor"). Real-time workers hold it during their cells
anyway (``cells[].timing.dma_latency_us``); with ``--set generator.realtime=off`` it is
the one knob left to compare wake-up costs with.

    .venv/bin/python benchmarks/thread_profile.py -- \\
        scenarios/paper-exp1-latency-vs-payload.yaml \\
        --set 'targets=[artemis,hivemq]' --set 'workload.payload=[1KiB]' \\
        --set workload.warmup=60s --set workload.duration=6s --set workload.drain=2s
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

MAX_SECONDS = 1800.0
NID = re.compile(r'^"(?P<name>[^"]*)".* nid=(?P<nid>0x[0-9a-f]+|\d+)', re.MULTILINE)
DIGITS = re.compile(r"\d+")
NAME_LEAD_S = 10.0
"""Thread names are taken this long before a window starts (jcmd pauses the JVM briefly)."""
LOADS: dict[int, tuple[float, float, float]] = {}
"""Load average ``NAME_LEAD_S`` before each broker's first window."""


@dataclass(frozen=True)
class ThreadStat:
    """One thread's counters at one instant."""

    comm: str
    cpu_ns: int
    wait_ns: int
    slices: int
    vcs: int
    ncs: int


Sample = tuple[int, dict[int, ThreadStat]]


def read_thread(pid: int, tid: int) -> ThreadStat | None:
    """The counters of one thread, None when it is gone."""
    base = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{base}/schedstat") as f:
            cpu, wait, slices = (int(x) for x in f.read().split())
        with open(f"{base}/comm") as f:
            comm = f.read().strip()
        with open(f"{base}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
    except (OSError, ValueError):
        return None
    return ThreadStat(
        comm,
        cpu,
        wait,
        slices,
        int(status["voluntary_ctxt_switches"]),
        int(status["nonvoluntary_ctxt_switches"]),
    )


def sample(pid: int) -> Sample:
    """Every thread of ``pid`` now, stamped with the wall clock (the manifest's clock)."""
    t_ns = time.time_ns()
    threads: dict[int, ThreadStat] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = []
    for tid in tids:
        stat = read_thread(pid, tid)
        if stat is not None:
            threads[tid] = stat
    return t_ns, threads


def _name(pid: int, into: dict[int, str]) -> None:
    into.update(thread_names(pid))


def thread_names(pid: int) -> dict[int, str]:
    """Java thread names by TID from ``jcmd Thread.print`` ({} when it fails)."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return {}
    try:
        out = subprocess.run(
            [jcmd, str(pid), "Thread.print"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(m["nid"], 0): m["name"] for m in NID.finditer(out)}


def brokers(root: psutil.Process) -> list[int]:
    """PIDs of the descendants that are not Python (the brokers mqbench started)."""
    found = []
    for child in root.children(recursive=True):
        try:
            if "python" not in child.name() and "mqbench" not in child.name():
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


def latest_run(out: Path, started: float) -> Path | None:
    """The run folder this run created under ``out`` (the one holding a new manifest)."""
    found = [m.parent for m in out.glob("**/manifest.json") if m.stat().st_mtime >= started]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def windows_near(run: Path | None, now_ns: int, edge: str = "start_ns") -> set[int]:
    """Broker PIDs of cells whose window's ``edge`` is within ``NAME_LEAD_S`` (or passed)."""
    if run is None:
        return set()
    try:
        manifest = json.loads((run / "manifest.json").read_text())
    except (OSError, ValueError):
        return set()
    near = set()
    for cell in manifest.get("cells", []):
        window, broker = cell.get("window") or {}, cell.get("broker") or {}
        at = window.get(edge)
        if (
            at
            and at - (NAME_LEAD_S * 1e9 if edge == "start_ns" else 0) < now_ns
            and broker.get("pid")
        ):
            near.add(int(broker["pid"]))
    return near


def hold_dma_latency() -> Any:
    """Open ``/dev/cpu_dma_latency`` and write 0; it holds while the file is open."""
    f = open("/dev/cpu_dma_latency", "wb", buffering=0)  # noqa: SIM115 - held for the run
    f.write(struct.pack("i", 0))
    return f


def drive(
    args: argparse.Namespace,
) -> tuple[Path | None, dict[int, list[Sample]], dict[int, dict[int, str]]]:
    """Run mqbench, sampling its brokers, until it exits or ``--max-seconds`` pass."""
    out = Path(args.out)
    started = time.time()
    mqbench = str(Path(sys.executable).parent / "mqbench")
    proc = subprocess.Popen([mqbench, "run", "--out", str(out), *args.mqbench])
    root = psutil.Process(proc.pid)
    samples: dict[int, list[Sample]] = defaultdict(list)
    names: dict[int, dict[int, str]] = {}
    renamed: set[int] = set()
    deadline = time.monotonic() + min(args.max_seconds, MAX_SECONDS)
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            pids = brokers(root)
            for pid in pids:
                samples[pid].append(sample(pid))
            for pid in windows_near(latest_run(out, started), time.time_ns()):
                if pid in pids and pid not in names:
                    names[pid] = {}  # filled by the thread: jcmd takes seconds under load
                    LOADS[pid] = os.getloadavg()
                    threading.Thread(target=_name, args=(pid, names[pid]), daemon=True).start()
            for pid in windows_near(latest_run(out, started), time.time_ns(), "end_ns"):
                if pid in pids and pid in names and pid not in renamed:
                    renamed.add(pid)  # again at the end: pools start threads in the window
                    samples[pid].append(sample(pid))  # the window's end, before jcmd pauses it
                    threading.Thread(target=_name, args=(pid, names[pid]), daemon=True).start()
            time.sleep(args.interval)
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)
    return latest_run(out, started), samples, names


def bracket(series: list[Sample], start_ns: int, end_ns: int) -> tuple[Sample, Sample] | None:
    """The last sample at or before the start and the first at or after the end."""
    first = [s for s in series if s[0] <= start_ns]
    last = [s for s in series if s[0] >= end_ns]
    if not first or not last:
        return None
    return first[-1], last[0]


def group_deltas(a: Sample, b: Sample, names: dict[int, str]) -> dict[str, list[float]]:
    """Per thread group: threads, CPU ns, wait ns, slices, voluntary, involuntary switches."""
    zero = ThreadStat("", 0, 0, 0, 0, 0)
    groups: dict[str, list[float]] = defaultdict(lambda: [0.0] * 6)
    for tid, end in b[1].items():
        start = a[1].get(tid, zero)
        delta = (
            end.cpu_ns - start.cpu_ns,
            end.wait_ns - start.wait_ns,
            end.slices - start.slices,
            end.vcs - start.vcs,
            end.ncs - start.ncs,
        )
        if not any(delta):
            continue
        row = groups[DIGITS.sub("#", names.get(tid, end.comm))]
        row[0] += 1
        for i, value in enumerate(delta, start=1):
            row[i] += value
    return groups


def deliveries(run: Path, cell: dict[str, Any], window_s: float) -> tuple[float, str]:
    """Deliveries in the window from summary.json, else the expected ones."""
    try:
        summary = json.loads((run / "cells" / cell["id"] / "summary.json").read_text())
        found = summary.get("deliveries_in_window")
        if found is None:
            found = summary.get("counts", {}).get("deliveries_in_window")
        if found:
            return float(found), "summary"
    except (OSError, ValueError, KeyError):
        pass
    return float(cell.get("expected_delivery_rate", 0.0)) * window_s, "expected"


def report(
    run: Path, samples: dict[int, list[Sample]], names: dict[int, dict[int, str]]
) -> list[dict[str, Any]]:
    """Print and return one table per cell."""
    manifest = json.loads((run / "manifest.json").read_text())
    rows: list[dict[str, Any]] = []
    for cell in manifest.get("cells", []):
        pid, window = (cell.get("broker") or {}).get("pid"), cell.get("window") or {}
        pair = (
            bracket(samples.get(pid, []), window.get("start_ns", 0), window.get("end_ns", 0))
            if pid
            else None
        )
        if pair is None:
            print(f"{cell['id']}: no samples bracket its window")
            continue
        span = (pair[1][0] - pair[0][0]) / 1e9
        msgs, source = deliveries(run, cell, (window["end_ns"] - window["start_ns"]) / 1e9)
        print(
            f"\n{cell['id']} (broker pid {pid}): {span:.2f} s sampled, "
            f"{msgs:.0f} deliveries ({source}), load {LOADS.get(pid)}"
        )
        print(
            f"{'group':48} {'thr':>3} {'cpu ms':>8} {'cpu us/msg':>10} "
            f"{'vcs/msg':>8} {'ncs/msg':>8} {'wait us/msg':>11}"
        )
        groups = group_deltas(*pair, names.get(pid, {}))
        total = [0.0] * 6
        for name, g in sorted(groups.items(), key=lambda kv: -kv[1][4]):
            total = [x + y for x, y in zip(total, g, strict=True)]
            rows.append(
                {
                    "cell": cell["id"],
                    "group": name,
                    "threads": g[0],
                    "cpu_ns": g[1],
                    "wait_ns": g[2],
                    "slices": g[3],
                    "vcs": g[4],
                    "ncs": g[5],
                    "deliveries": msgs,
                    "span_s": span,
                }
            )
            print(_line(name[:48], g, msgs))
        print(_line("ALL", total, msgs))
    return rows


def _line(name: str, g: list[float], msgs: float) -> str:
    per = max(msgs, 1.0)
    return (
        f"{name:48} {g[0]:3.0f} {g[1] / 1e6:8.1f} {g[1] / 1e3 / per:10.1f} "
        f"{g[4] / per:8.2f} {g[5] / per:8.2f} {g[2] / 1e3 / per:11.1f}"
    )


def save(
    path: Path, run: Path, samples: dict[int, list[Sample]], names: dict[int, dict[int, str]]
) -> None:
    """Keep the raw samples, to report again with ``--from-samples``."""
    data = {
        "run": str(run),
        "loads": {str(k): v for k, v in LOADS.items()},
        "names": {str(p): {str(t): n for t, n in m.items()} for p, m in names.items()},
        "samples": {
            str(pid): [
                [t, {str(tid): list(vars(st).values()) for tid, st in th.items()}]
                for t, th in series
            ]
            for pid, series in samples.items()
        },
    }
    path.write_text(json.dumps(data))


def load(path: Path) -> tuple[Path, dict[int, list[Sample]], dict[int, dict[int, str]]]:
    """The inverse of :func:`save`."""
    data = json.loads(path.read_text())
    LOADS.update({int(k): tuple(v) for k, v in data["loads"].items()})
    names = {int(p): {int(t): n for t, n in m.items()} for p, m in data["names"].items()}
    samples = {
        int(pid): [(t, {int(tid): ThreadStat(*v) for tid, v in th.items()}) for t, th in series]
        for pid, series in data["samples"].items()
    }
    return Path(data["run"]), samples, names


def main() -> int:
    """Parse, drive, report."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out",
        default="results/thread-profile",
        help="mqbench run --out (a fresh run folder under it)",
    )
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between samples")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=900.0,
        help=f"stop mqbench after this (at most {MAX_SECONDS:.0f})",
    )
    parser.add_argument(
        "--hold-dma-latency", action="store_true", help="hold /dev/cpu_dma_latency at 0 for the run"
    )
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument(
        "--samples", help="write the raw samples here (default: OUT/thread-samples-<time>.json)"
    )
    parser.add_argument("--from-samples", help="report again from a --samples file; run nothing")
    parser.add_argument(
        "mqbench", nargs=argparse.REMAINDER, help="-- then the arguments of mqbench run"
    )
    args = parser.parse_args()
    if args.from_samples:
        rows = report(*load(Path(args.from_samples)))
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return 0
    if args.mqbench[:1] == ["--"]:
        args.mqbench = args.mqbench[1:]
    if not args.mqbench:
        parser.error("give the mqbench run arguments after --")
    held = hold_dma_latency() if args.hold_dma_latency else None
    try:
        run, samples, names = drive(args)
    finally:
        if held is not None:
            held.close()
    if run is None:
        print("no run folder was created", file=sys.stderr)
        return 1
    path = Path(
        args.samples or Path(args.out) / f"thread-samples-{time.strftime('%Y%m%dT%H%M%S')}.json"
    )
    save(path, run, samples, names)
    print(f"\nrun: {run}  samples: {path}  load average now: {os.getloadavg()}")
    rows = report(run, samples, names)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
