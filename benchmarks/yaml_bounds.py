"""How fast, and in how little memory, the scenario loader refuses alias bombs (not a test;
run on demand; issue 27's target: refused in under 1 s and 50 MB).

For each file it prints the size, the values it stands for once its aliases are expanded,
the outcome, the wall time of ``load_scenario`` (median of ``--repeat`` runs), the peak
of Python allocations during one more, traced, run (tracemalloc) and the process's RSS
growth over all of them. The 534-byte
shape that ended in ``MemoryError`` before the bounds is the ``9 x 10`` row.

    .venv/bin/python benchmarks/yaml_bounds.py
    .venv/bin/python benchmarks/yaml_bounds.py --repeat 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

from mqbench.errors import MqbenchError
from mqbench.scenario.loader import load_scenario


def bomb(levels: int, width: int) -> str:
    """Each level a list of ``width`` aliases of the one below: ``width ** (levels + 1)``."""
    lines = ["name: bomb", "targets: [nats]", "workload:"]
    lines.append("  pairs: &l0 [" + ", ".join(["1"] * width) + "]")
    for level in range(1, levels + 1):
        lines.append(f"  x{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


CASES = {
    "quickstart-sized scenario": (
        "name: q\ntargets: [nats, mosquitto]\n"
        "workload: {pairs: [1, 10], rate: [10, 100], payload: [64B, 1KiB], duration: 10s}\n"
    ),
    "bomb 9 x 4 (59k values)": bomb(4, 9),
    "bomb 9 x 6 (4.8M values)": bomb(6, 9),
    "bomb 9 x 10 (3.5e10 values)": bomb(9, 9),
    "bomb 16 x 20 (1.3e25 values)": bomb(19, 16),
}


def measure(text: str, repeat: int) -> tuple[str, float, float, float]:
    """Outcome, median seconds, peak traced MB, RSS growth MB."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(text)
        process = psutil.Process(os.getpid())
        rss_before = process.memory_info().rss
        times, outcome = [], ""
        for _ in range(repeat):
            t0 = time.perf_counter()
            outcome = _load(path)
            times.append(time.perf_counter() - t0)
        tracemalloc.start()  # one more run, traced (tracing slows it: not timed)
        _load(path)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        grown = (process.memory_info().rss - rss_before) / 1e6
        return outcome, statistics.median(times), peak / 1e6, grown


def _load(path: Path) -> str:
    try:
        load_scenario(path)
    except MqbenchError as exc:
        return "refused: " + str(exc).split(": ", 1)[1][:60]
    return "loaded"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.repeat} runs each (median time)")
    print(f"{'file':32} {'bytes':>6} {'time ms':>8} {'peak MB':>8} {'RSS+ MB':>8}  outcome")
    for name, text in CASES.items():
        outcome, seconds, peak, grown = measure(text, args.repeat)
        print(f"{name:32} {len(text):6} {seconds * 1e3:8.1f} {peak:8.2f} {grown:8.1f}  {outcome}")


if __name__ == "__main__":
    main()
