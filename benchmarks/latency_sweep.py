"""Latency vs offered rate, real time on against off, next to an independent native
subscriber and the machine's wake-up floor (run on demand).

For each offered rate (all publishers together) this runs one mqbench cell against a broker
it starts itself (native runtime, 127.0.0.1), while an independent native client on the
same broker timestamps the same messages from the wire header's ``t_sent``: mosquitto's own
``mosquitto_sub -F '%U %x'`` for MQTT, the official Go client (nats.go, built once from
``benchmarks/native/natssub`` with the Go toolchain) for NATS. It prints, per rate: send
lag p50/p99, the headline latency (from the intended send time) p50/p99, latency from the
actual send p50/p99, the independent subscriber's p50/p99, generator CPU and the
self-check verdicts.

Each rate runs once per ``--realtime`` mode (``off,on`` by default, alternating), so real
time and normal scheduling are measured side by side in one run, and once per
``--receive-stamp`` (``kernel`` by default; ``kernel,user`` compares the two stamps).
Before the cells it measures the machine's wake-up floor twice: Debian's ``cyclictest``
(rt-tests; one thread, 1 kHz, under SCHED_OTHER and SCHED_FIFO, with and without
``/dev/cpu_dma_latency`` held at 0) and mqbench's own probe in the worker's process model
(``mqbench/calibration/wakeup.py``, the probe ``mqbench calibrate`` runs), under each
policy the cells may run (``other``, ``fifo``, ``fifo+dma``). The probe's figures are the
floor each cell's latency verdict is judged against, exactly as ``mqbench run`` judges a
cell after ``mqbench calibrate`` (``--floor calibration`` takes the calibration file's
floors instead; ``--floor none`` judges without one: every lag above 5 µs counts). The
calibration's ceilings are passed on as ``run`` passes them (they size the real-time
decision), and a rate written ``50%`` is that share of the calibrated ceiling of the
target's client (msg/s per worker x ``--workers``), so the whole range of issue 21's
targets runs in one command. The last columns check the targets per row: send lag p99 <=
2x the wake-up p99 under the cell's policy (``lag_ok``), send lag p50 <= 10 µs
(``lag50_ok``) and headline p50 <= 1.15x the independent p50 + 20 µs (``p50_ok``);
``marked`` says which rule of the latency verdict marked a row (docs/calibration.md).

    .venv/bin/python benchmarks/latency_sweep.py --target mosquitto --rates 1000,4000
    .venv/bin/python benchmarks/latency_sweep.py --rates 100,400,1000,4000,50% --realtime off,on
    .venv/bin/python benchmarks/latency_sweep.py --target mosquitto --resources 1cpu-2g
    .venv/bin/python benchmarks/latency_sweep.py --target nats --rates 100,1000,20000
    .venv/bin/python benchmarks/latency_sweep.py --target mosquitto --layout shared --timer loop
    .venv/bin/python benchmarks/latency_sweep.py --realtime off --cyclictest 0 --probe 0

``--resources 1cpu-2g`` starts the broker under that profile (its own CPU), so real time
may use the other CPU at any rate; without it real time is used only where the cell's
generator needs a small share of a core (docs/performance.md).

Each rate is one cell of ``--pairs`` pairs (20 by default), 64 B, QoS 0, one generator
worker (``--workers``), ``--duration`` measured after a 2 s warm-up.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mqbench.analysis.latency_check import judge_latency
from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.brokers.base import RunningBroker, StartRequest
from mqbench.brokers.registry import get_target
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.calibration.store import default_path, load
from mqbench.calibration.use import CalibrationCheck
from mqbench.calibration.wakeup import probe_all
from mqbench.errors import MqbenchError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.format import HEADER
from mqbench.records.worker_stats import WorkerStats
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.scenario.matrix import Cell
from mqbench.scenario.units import parse_duration
from mqbench.transports.registry import resolve_client
from mqbench.workload.cell_timing import TimingHints
from mqbench.workload.realtime import RealtimeSettings
from mqbench.workload.run import SilentReporter, run_scenario

WARMUP_S = 2.0
DRAIN_S = 2.0
CELL_OVERHEAD_S = 8.0
"""Per cell beyond warm-up, measured window and drain: worker start-up, connects, analysis
(for the run-time estimate printed at the start)."""
PROBE_OVERHEAD_S = 3.0
"""Per probed policy beyond its samples: spawning a process that imports mqbench."""
LAG_P50_TARGET_MS = 0.010
NATIVE_SUB_ARGS = ("-t", "mqbench/#", "-q", "0", "-F", "%U %x")


class QuietReporter(SilentReporter):
    """Reports failed cells only."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        if status != "completed":
            print(f"{cell.id}: {status} {detail.error or ''}", file=sys.stderr)


class MosquittoSub:
    """``mosquitto_sub`` on ``mqbench/#`` printing receive time and payload hex per message."""

    def __init__(self, port: int) -> None:
        self.out = tempfile.NamedTemporaryFile(prefix="mqbench-native-sub-", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*("mosquitto_sub", "-h", "127.0.0.1", "-p", str(port)), *NATIVE_SUB_ARGS],
            stdout=self.out,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> list[tuple[int, int]]:
        """Stop it (by PID) and return ``(t_sent, t_recv)`` per message."""
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:  # still printing a backlog: stop it by PID
            self.proc.kill()
            self.proc.wait(5)
        self.out.close()
        pairs = []
        with open(self.out.name, encoding="ascii", errors="replace") as fh:
            for line in fh:
                stamp, _, payload = line.strip().partition(" ")
                if len(payload) < 48 or "." not in stamp:
                    continue
                secs, frac = stamp.split(".")
                t_recv = int(secs) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
                _, _, t_sent, _ = HEADER.unpack(bytes.fromhex(payload[:48]))
                pairs.append((t_sent, t_recv))
        os.unlink(self.out.name)
        return pairs


NATSSUB_SOURCE = Path(__file__).resolve().parent / "native" / "natssub"


def _natssub_binary() -> Path:
    """Build the Go subscriber once (module downloads from the Go module proxy)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mqbench"
    binary = cache / "natssub"
    source = NATSSUB_SOURCE / "main.go"
    if binary.exists() and binary.stat().st_mtime >= source.stat().st_mtime:
        return binary
    if shutil.which("go") is None:
        raise SystemExit("the NATS side-by-side needs Go to build benchmarks/native/natssub")
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=NATSSUB_SOURCE, check=True)
    return binary


class NatsSub:
    """The official Go NATS client (nats.go) on ``mqbench.>`` in its own process."""

    def __init__(self, port: int) -> None:
        fd, self.path = tempfile.mkstemp(prefix="mqbench-native-sub-")
        os.close(fd)
        self.proc = subprocess.Popen(
            [str(_natssub_binary()), f"nats://127.0.0.1:{port}", "mqbench.>", self.path],
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "ready": subscribed

    def stop(self) -> list[tuple[int, int]]:
        """Stop it by PID (it writes its file on SIGTERM); ``(t_sent, t_recv)`` per message."""
        self.proc.terminate()
        self.proc.wait(30)
        pairs = []
        with open(self.path, encoding="ascii") as fh:
            for line in fh:
                a, b = line.split()
                pairs.append((int(a), int(b)))
        os.unlink(self.path)
        return pairs


def _pct(values: np.ndarray, q: float) -> float:
    """Nearest-rank percentile in ms."""
    if values.size == 0:
        return float("nan")
    ordered = np.sort(values)
    rank = max(1, int(np.ceil(q / 100 * ordered.size)))
    return float(ordered[rank - 1]) / 1e6


CYCLICTEST_CASES = (
    ("other", ["--policy=other", "--default-system"]),
    ("other+dma", ["--policy=other", "--latency=0"]),
    ("fifo", ["--policy=fifo", "-p1", "--default-system"]),
    ("fifo+dma", ["--policy=fifo", "-p1", "--latency=0"]),
)
"""cyclictest under each policy mqbench may use (``--default-system``: no DMA-latency hold)."""
HIST_US = 20_000


def cyclictest(seconds: float) -> list[dict[str, Any]]:
    """Debian's cyclictest, one thread at 1 kHz per case: wake-up p50/p99/p99.9 in µs."""
    if seconds <= 0 or shutil.which("cyclictest") is None:
        return []
    rows = []
    loops = int(seconds * 1000)
    for name, extra in CYCLICTEST_CASES:
        argv = ["cyclictest", "-t1", "-i1000", f"-l{loops}", "-q", "-m", f"-h{HIST_US}", *extra]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
        counts: list[int] = [0] * (HIST_US + 1)
        for line in done.stdout.splitlines():
            if line.startswith("#"):
                if line.startswith("# Histogram Overflows:"):
                    counts[HIST_US] += int(line.split(":")[1].split()[0])
                continue
            parts = line.split()
            if len(parts) >= 2 and parts[0].isdigit():
                counts[min(HIST_US, int(parts[0]))] += int(parts[1])
        rows.append({"policy": name, **_hist_percentiles(counts)})
    return rows


def _hist_percentiles(counts: list[int]) -> dict[str, Any]:
    total = sum(counts)
    out: dict[str, Any] = {"samples": total}
    for label, q in (("p50", 50), ("p99", 99), ("p999", 99.9)):
        rank, seen = max(1, int(np.ceil(q / 100 * total))), 0
        for us, n in enumerate(counts):
            seen += n
            if seen >= rank:
                out[label] = float(us)
                break
    return out


def _probe_policies(modes: list[str]) -> tuple[RealtimeSettings | None, ...]:
    """The policies the sweep's cells may run under: ``other``, and with real time
    ``fifo+dma`` (``fifo`` where ``/dev/cpu_dma_latency`` cannot be held)."""
    if all(mode == "off" for mode in modes):
        return (None,)
    return (None, RealtimeSettings(dma_latency_us=None), RealtimeSettings())


def _hints(
    args: argparse.Namespace, modes: list[str], calibrated: TimingHints, where: str
) -> tuple[TimingHints, str]:
    """The wake-up floors and ceilings the cells are decided and judged with, and where the
    floors came from (one line for the header)."""
    if args.floor == "calibration":
        if not calibrated.wakeup:
            raise SystemExit(f"--floor calibration: no wake-up floors in {where}")
        return calibrated, f"wake-up floors from {where}"
    if args.floor == "none" or args.probe <= 0:
        return TimingHints(ceilings=calibrated.ceilings), "no wake-up floor (5 µs allowance)"
    outcomes = probe_all(args.probe, policies=_probe_policies(modes))
    floors = {o.policy: o.floor for o in outcomes if o.floor is not None}
    for outcome in outcomes:
        figures = outcome.floor.to_dict() if outcome.floor else {"reason": outcome.reason}
        print(f"# mqbench probe {outcome.policy} {json.dumps(figures)}", flush=True)
    return TimingHints(wakeup=floors, ceilings=calibrated.ceilings), "wake-up floors probed now"


def parse_rates(text: str, ceiling_per_worker: float | None, workers: int) -> list[float]:
    """``--rates``: msg/s, or ``N%`` of the calibrated ceiling of all ``workers``."""
    rates = []
    for token in text.split(","):
        token = token.strip()
        if not token.endswith("%"):
            rates.append(float(token))
            continue
        if ceiling_per_worker is None:
            raise SystemExit(
                f"--rates {token}: no calibrated ceiling for this target's client "
                "(run `mqbench calibrate --target TARGET` first)"
            )
        rates.append(float(round(float(token[:-1]) / 100 * ceiling_per_worker * workers)))
    return rates


def _ceiling(args: argparse.Namespace, hints: TimingHints) -> float | None:
    if args.ceiling is not None:
        return float(args.ceiling)
    client = resolve_client(get_target(args.target).transport, None)
    return hints.ceilings.get(client)


def expected_seconds(args: argparse.Namespace, cells: int, policies: int) -> float:
    """A rough run time: cyclictest, the probe, then every cell."""
    cells_s = cells * (WARMUP_S + parse_duration(args.duration) + DRAIN_S + CELL_OVERHEAD_S)
    probe_s = policies * (args.probe + PROBE_OVERHEAD_S) if args.floor == "probe" else 0.0
    cyclic_s = len(CYCLICTEST_CASES) * args.cyclictest if shutil.which("cyclictest") else 0.0
    return cyclic_s + probe_s + cells_s


def _run_rate(
    broker: RunningBroker,
    args: argparse.Namespace,
    rate: float,
    out_root: Path,
    realtime: str,
    hints: TimingHints,
    stamp: str = "kernel",
    spin_ms: float | None = None,
) -> dict[str, Any]:
    per_pub = rate / args.pairs
    data = {
        "name": "latency-sweep",
        "targets": [args.target],
        "runtime": "external",
        "broker": {"port": broker.endpoint.port, "pid": broker.pids[0]},
        "workload": {
            "pairs": args.pairs,
            "rate": per_pub,
            "payload": "64B",
            "qos": 0,
            "warmup": f"{WARMUP_S}s",
            "duration": args.duration,
            "drain": f"{DRAIN_S:g}s",
        },
        "generator": {
            "workers": args.workers,
            "layout": args.layout,
            "timer": args.timer,
            "realtime": realtime,
            "receive_stamp": stamp,
        }
        | ({"spin_ms": spin_ms} if spin_ms is not None else {}),
    }
    scenario = validate_scenario(data, "benchmark")
    native = (MosquittoSub if args.target == "mosquitto" else NatsSub)(broker.endpoint.port)
    time.sleep(0.5)  # subscribed before the first message
    try:
        result = run_scenario(
            scenario,
            source=ScenarioSource("benchmark", data),
            out_root=out_root,
            argv=["benchmarks/latency_sweep.py"],
            reporter=QuietReporter(),
            timing=hints,
        )
    except MqbenchError as exc:  # realtime on refused for this cell: say so, go on
        refused: str | None = str(exc)
    else:
        refused = None
    finally:
        seen = native.stop()
    if refused is not None:
        return {"rate": rate, "realtime": realtime, "latency": f"refused: {refused}"}
    cell = result.cells[0]
    if cell.status != "completed" or cell.window is None:
        raise SystemExit(f"rate {rate}: cell {cell.status}: {cell.error}")
    summary = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
    window = cell.window
    stamps = np.array(seen, dtype=np.int64).reshape(-1, 2)
    in_window = stamps[(stamps[:, 0] >= window.start_ns) & (stamps[:, 0] < window.end_ns)]
    native_lat = in_window[:, 1] - in_window[:, 0]
    lat, frm, lag = summary.latency, summary.latency_from_send, summary.send_lag
    workers = cell.generator.workers if cell.generator else ()
    timing = cell.timing
    floor = timing.wakeup_floor if timing is not None else None
    native_p50 = _pct(native_lat, 50)
    verdict = judge_latency(lat, lag, floor)
    stats = WorkerStats.total(workers)
    return {
        "rate": rate,
        "realtime": realtime,
        "spin_ms": spin_ms,
        "policy": timing.policy if timing is not None else "-",
        "stamp": timing.receive_stamp if timing is not None else "-",
        "engine": cell.hot_path.engine if cell.hot_path is not None else "-",
        "margin_us": stats.wake_margin_us,
        "spin_core": stats.spin_s / (WARMUP_S + (window.end_ns - window.start_ns) / 1e9),
        "cpus": ",".join(str(c) for c in timing.worker_cpus) if timing else "-",
        "wake_p50": floor.p50_us / 1e3 if floor else None,
        "wake_p99": floor.p99_us / 1e3 if floor else None,
        "lag_ok": _yes(lag is not None and floor is not None and lag.p99_us <= 2 * floor.p99_us),
        "lag50_ok": _yes(lag is not None and lag.p50_us / 1e3 <= LAG_P50_TARGET_MS),
        "p50_ok": _yes(lat is not None and lat.p50_us / 1e3 <= 1.15 * native_p50 + 0.020),
        "layout": cell.params.get("layout"),
        "timer": ",".join(sorted({str(w.timer) for w in workers if w.timer})),
        "lag_p50": lag.p50_us / 1e3 if lag else None,
        "lag_p99": lag.p99_us / 1e3 if lag else None,
        "p50": lat.p50_us / 1e3 if lat else None,
        "p99": lat.p99_us / 1e3 if lat else None,
        "send_p50": frm.p50_us / 1e3 if frm else None,
        "send_p99": frm.p99_us / 1e3 if frm else None,
        "native_n": int(native_lat.size),
        "native_p50": native_p50,
        "native_p99": _pct(native_lat, 99),
        "gen_cpu": summary.generator_cpu_cores_mean,
        "broker_cpu": summary.broker_cpu_cores_mean,
        "loss_pct": summary.loss_pct,
        "recv_msg_s": summary.throughput_msg_s,
        "generator": "saturated" if summary.generator_saturated else "ok",
        "latency": summary.latency_verdict,
        "marked": "+".join(verdict.marked_by) or "-",
        "reason": verdict.reason,
    }


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _fmt(value: Any, spec: str = ".3f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


COLUMNS = (
    "rate", "realtime", "spin_ms", "policy", "engine", "cpus", "lag_p50", "lag_p99", "wake_p50",
    "wake_p99", "margin_us", "spin_core", "p50", "p99", "send_p50", "native_p50",
    "native_p99", "native_n", "gen_cpu", "broker_cpu", "loss_pct", "recv_msg_s", "generator",
    "lag_ok", "lag50_ok", "p50_ok", "latency", "marked",
)  # fmt: skip


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("mosquitto", "nats"), default="mosquitto")
    parser.add_argument(
        "--rates", default="100,200,400,1000,4000,20000", help="msg/s, or N%% of the ceiling"
    )
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--duration", default="10s")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--layout", default="auto", choices=("auto", "shared", "split"))
    parser.add_argument("--timer", default="auto", choices=("auto", "timerfd", "loop"))
    parser.add_argument("--realtime", default="off,on", help="modes to compare, per rate")
    parser.add_argument("--resources", default=None, help="broker resources profile")
    parser.add_argument("--receive-stamp", default="kernel", help="kernel, user or both")
    parser.add_argument("--cyclictest", type=float, default=10.0, help="s per case; 0: skip")
    parser.add_argument(
        "--floor",
        default="probe",
        choices=("probe", "calibration", "none"),
        help="the wake-up floor the verdicts use: probed now, the calibration's, or none",
    )
    parser.add_argument("--probe", type=float, default=3.0, help="s per probed policy")
    parser.add_argument(
        "--ceiling",
        type=float,
        default=None,
        help="msg/s per worker for N%% rates "
        "(default: the calibrated ceiling of the target's client)",
    )
    parser.add_argument(
        "--spin-ms", default="", help="generator.spin_ms values to compare (default: its default)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per rate")
    return parser.parse_args()


def _print_targets(rows: list[dict[str, Any]]) -> None:
    """Issue 21's send-lag targets over the real-time rows, one line each."""
    timed = [r for r in rows if r.get("policy") == "fifo"]
    for key, text in (
        ("lag_ok", "send lag p99 <= 2x wake-up p99"),
        ("lag50_ok", "send lag p50 <= 10 µs"),
        ("p50_ok", "headline p50 <= 1.15x independent + 20 µs"),
    ):
        met = [r for r in timed if r.get(key) == "yes"]
        missed = ", ".join(f"{r['rate']:g}" for r in timed if r.get(key) != "yes") or "none"
        print(f"# target {text} (real time): {len(met)}/{len(timed)} rows; missed at {missed}")


def main() -> None:
    args = _arguments()
    modes = args.realtime.split(",")
    stamps = args.receive_stamp.split(",")
    spins = [float(x) for x in args.spin_ms.split(",")] if args.spin_ms else [None]
    load_avg = os.getloadavg()[0]
    loaded = load(default_path())
    calibrated = CalibrationCheck(loaded).timing_hints()
    rates = parse_rates(args.rates, _ceiling(args, calibrated), args.workers)
    cells = len(rates) * len(modes) * len(stamps) * len(spins)
    policies = len(_probe_policies(modes))
    print(f"# expected run time ~{expected_seconds(args, cells, policies):.0f} s", flush=True)
    for row in cyclictest(args.cyclictest):
        print(f"# cyclictest {json.dumps(row)}", flush=True)
    hints, floor_source = _hints(args, modes, calibrated, loaded.describe())
    print(
        f"# {args.target}, {args.pairs} pairs, 64 B, QoS 0, {args.workers} worker(s), "
        f"layout {args.layout}, timer {args.timer}, {args.duration} measured, broker "
        f"profile {args.resources or 'none'}; load average {load_avg:.2f}; rates "
        f"{', '.join(f'{r:g}' for r in rates)} msg/s; {floor_source}",
        flush=True,
    )
    if not args.json:
        print("# latency in ms, margin in µs, spin in cores", flush=True)
        print(" ".join(f"{c:>10}" for c in COLUMNS), flush=True)
    options = {"resources": args.resources} if args.resources else {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="mqbench-sweep-") as tmp:
        runtime = NativeRuntime()
        broker = runtime.start(
            StartRequest(target=args.target, workdir=Path(tmp) / "broker", options=options)
        )
        try:
            for rate, mode, stamp, spin in itertools.product(rates, modes, stamps, spins):
                row = _run_rate(broker, args, rate, Path(tmp) / "results", mode, hints, stamp, spin)
                rows.append(row)
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    print(" ".join(f"{_fmt(row.get(c)):>10}" for c in COLUMNS), flush=True)
        finally:
            broker.stop()
    _print_targets(rows)
    for row in rows:
        if row.get("reason") and not args.json:
            print(f"# {row['rate']:g} msg/s, realtime {row['realtime']}: {row['reason']}")


if __name__ == "__main__":
    main()
