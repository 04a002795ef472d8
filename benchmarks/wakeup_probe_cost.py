"""What the cell's wake-up probe costs: its CPU share and its figures at each interval.

``run`` keeps a wake-up probe above real-time workers through each cell
(``generator.wakeup_probe``, docs/calibration.md, "The floor during the cell"). This starts the same
probe (``mqbench.workload.wakeup_probe.CellProbe``, SCHED_FIFO at priority 2, above workers
at the lowest real-time priority, unpinned, nothing held) on the idle machine for
``--seconds`` at each interval in turn, and prints the CPU it used (user + system, from
/proc) as a share of one core, with the wake-up percentiles it measured. Needs SCHED_FIFO
permission (root or CAP_SYS_NICE).

    .venv/bin/python benchmarks/wakeup_probe_cost.py --seconds 20 --interval-us 2000 6000 10000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import psutil

from mqbench.workload.realtime import RealtimeSettings, probe_permission
from mqbench.workload.wakeup_probe import CellProbe, cell_probe_settings

SETTLE_S = 3.0
"""The probe process imports mqbench before it samples: its CPU is counted after this."""


def measure(interval_us: int, seconds: float) -> str:
    """One interval: the probe's CPU share over ``seconds`` and its floor (one line)."""
    why = probe_permission()
    if why is not None:
        return f"{interval_us} µs: SCHED_FIFO is not permitted here ({why})"
    settings = cell_probe_settings(RealtimeSettings(dma_latency_us=None))
    assert settings is not None
    probe = CellProbe(settings, SETTLE_S + seconds, interval_us)
    failed = probe.start()
    if failed is not None:
        return f"{interval_us} µs: {failed.reason}"
    try:
        time.sleep(SETTLE_S)
        assert probe.pid is not None
        process = psutil.Process(probe.pid)
        before, t0, start_ns = process.cpu_times(), time.monotonic(), time.time_ns()
        time.sleep(seconds)
        after, t1 = process.cpu_times(), time.monotonic()
        result = probe.stop(start_ns, time.time_ns())
    finally:
        probe.close()
    user = after.user - before.user
    system = after.system - before.system
    share = (user + system) / (t1 - t0)
    floor = result.floor
    figures = (
        f"p50 {floor.p50_us:g} µs, p99 {floor.p99_us:g} µs, p99.9 {floor.p999_us:g} µs, "
        f"{floor.samples} samples"
        if floor is not None
        else f"no floor ({result.reason})"
    )
    return (
        f"interval {interval_us} µs: CPU {100 * share:.2f} % of a core "
        f"(user {user:.2f} s, system {system:.2f} s over {t1 - t0:.0f} s); {figures}"
    )


def main(argv: list[str] | None = None) -> int:
    """Parse the options, print one line per interval and the load average."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured per interval")
    parser.add_argument(
        "--interval-us", type=int, nargs="+", default=[2000, 6000, 10000], help="intervals"
    )
    args = parser.parse_args(argv)
    for interval in args.interval_us:
        print(measure(interval, args.seconds), flush=True)
    print("load average (1, 5, 15 min):", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
