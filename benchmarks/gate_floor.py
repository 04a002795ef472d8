"""Does the CI gate pass two identical runs? Back-to-back quickstarts compared pairwise.

Runs ``scenarios/quickstart.yaml`` ``--runs`` times back to back (or reads the result folders
given), then compares every pair (i < j) as ``mqbench compare`` does with the default
thresholds, and prints per cell and latency percentile the change between the two runs,
the send lag both measured (p95, p99, p99.9: the figures docs/ci.md's timing floor chooses
among), the floor and the verdict; last, the exit code of every pair. The load average is
printed before each run: quote it with the numbers (docs/ci.md, "The timing floor").

    .venv/bin/python benchmarks/gate_floor.py --runs 4 [--set workload.duration=10s]
    .venv/bin/python benchmarks/gate_floor.py RESULT_DIR RESULT_DIR [...]

Bounded: each run has a timeout; the result folders go to a temporary folder removed at the
end unless ``--keep DIR``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from mqbench.analysis.compare import compare_runs
from mqbench.analysis.run_summaries import load_run
from mqbench.analysis.summary import CellSummary

ROOT = Path(__file__).resolve().parents[1]
MQBENCH = str(ROOT / ".venv" / "bin" / "mqbench")
RUN_TIMEOUT_S = 600.0
PERCENTILES = ("p50", "p95", "p99", "p999")


def run_quickstarts(count: int, settings: list[str], out: Path) -> list[Path]:
    """``count`` back-to-back quickstart runs under ``out``; their result folders."""
    folders: list[Path] = []
    for i in range(count):
        print(f"run {i + 1}/{count}: load average {_load()}", flush=True)
        argv = [MQBENCH, "run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(out)]
        for setting in settings:
            argv += ["--set", setting]
        subprocess.run(argv, check=True, timeout=RUN_TIMEOUT_S, stdout=subprocess.DEVNULL)
        made = sorted(p for p in (out / "quickstart").iterdir() if p not in folders)
        folders.append(made[-1])
    print(f"after the runs: load average {_load()}")
    return folders


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _us(summary: CellSummary, group: str, percentile: str) -> float | None:
    stats = getattr(summary, group)
    return None if stats is None else float(getattr(stats, f"{percentile}_us"))


def print_pair(i: int, j: int, base: Path, cur: Path) -> int:
    """The per-percentile table of one pair; returns compare's exit code."""
    result = compare_runs(base, cur, ",".join(f"{p}=+10%" for p in PERCENTILES))
    summaries = [{s.cell_id: s for s in load_run(p).summaries} for p in (base, cur)]
    print(f"\npair {i}-{j}: {base.name} -> {cur.name}")
    for cell in result.cells:
        a, b = summaries[0].get(cell.cell), summaries[1].get(cell.cell)
        if a is None or b is None:
            continue
        lag = {
            q: max(_us(a, "send_lag", q) or 0.0, _us(b, "send_lag", q) or 0.0)
            for q in ("p95", "p99", "p999")
        }
        print(
            f"  {cell.cell}  send lag (µs, larger of the two) p95 {lag['p95']:.0f} "
            f"p99 {lag['p99']:.0f} p99.9 {lag['p999']:.0f}"
        )
        for m in cell.metrics:
            if m["change"] is None:
                continue
            floor = "-" if m["floor"] is None else f"{1000 * m['floor']:.0f}"
            print(
                f"    {m['metric']:5s} {1000 * m['baseline']:8.0f} -> {1000 * m['current']:8.0f} µs"
                f"  change {1000 * m['change']:+8.0f} ({m['change_pct']:+6.1f} %)"
                f"  floor {floor:>6s}  limit {1000 * m['limit']:6.0f}  {m['verdict']}"
            )
    gate = compare_runs(base, cur)  # the default thresholds: what CI would see
    print(f"  mqbench compare (default thresholds): exit {gate.exit_code}")
    return gate.exit_code


def main() -> int:
    """Run or read the folders, compare every pair, print the exit codes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, help="result folders to compare")
    parser.add_argument("--runs", type=int, default=0, help="quickstart runs to make (<= 10)")
    parser.add_argument("--set", action="append", default=[], dest="settings")
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder")
    args = parser.parse_args()
    if not args.folders and not 2 <= args.runs <= 10:
        parser.error("give two or more result folders, or --runs 2..10")
    temp = None if args.keep else Path(tempfile.mkdtemp(prefix="mqbench-gate-floor-"))
    try:
        folders = list(args.folders)
        out = args.keep or temp
        if args.runs and out is not None:
            folders += run_quickstarts(args.runs, args.settings, out)
        codes = {
            (i, j): print_pair(i, j, folders[i], folders[j])
            for i, j in itertools.combinations(range(len(folders)), 2)
        }
        print("\nexit codes: " + ", ".join(f"{i}-{j}: {c}" for (i, j), c in codes.items()))
        return 0
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
