"""Calibrate's zenoh ceiling, side by side: the same ceiling step for MQTT through its relay,
zenoh peer to peer (the path ``mqbench calibrate`` measures zenoh on) and zenoh through a
router, interleaved per offered rate (run on demand).

A ceiling step is 10 pairs of 64-byte QoS 0 messages from one worker process; it passes
when the send lag p99 is <= 1 ms, the worker used < 90 % of a core, nothing was lost and
the self-check did not mark it (``mqbench.calibration.ceiling.judge``, the bounds
``mqbench calibrate`` uses). The ceiling is therefore the highest rate one worker keeps on
time, not a throughput: ``benchmarks/zenoh_client_bench.py`` measures how many messages the
client moves closed-loop (354-379K msg/s, docs/transports.md), with no schedule to keep.

Each rate runs the three setups one after the other, so a busy machine slows all three
alike; a row per cell: send lag p50/p99, worker CPU, relay/router CPU, verdict.

    .venv/bin/python benchmarks/zenoh_ceiling.py
    .venv/bin/python benchmarks/zenoh_ceiling.py --rates 500,1000,2000 --duration 5
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mqbench.calibration.ceiling import judge_figures
from mqbench.calibration.measure import CellRequest, run_cell
from mqbench.calibration.model import CeilingBounds, CellFigures
from mqbench.calibration.relay_process import RelayProcess
from mqbench.calibration.zenoh_peer import CLIENT as ZENOH_PEER_CLIENT

PAIRS = 10
SETUPS = ("mqtt relay", "zenoh peer", "zenoh router")


@contextlib.contextmanager
def relays() -> Iterator[dict[str, RelayProcess]]:
    """The MQTT relay and zenoh's discovery peer, stopped at the end."""
    with RelayProcess.start("mqtt") as mqtt, RelayProcess.start("zenoh") as zenoh:
        yield {"mqtt relay": mqtt, "zenoh peer": zenoh}


def request(
    setup: str, rate: float, duration: float, found: dict[str, RelayProcess]
) -> CellRequest:
    """One ceiling step of ``setup`` at ``rate`` msg/s for the worker."""
    name = "zenoh-ceiling-" + setup.replace(" ", "-")
    relay = found.get(setup)
    target, client = {
        "mqtt relay": ("mosquitto", "mqtt"),
        "zenoh peer": ("zenoh", ZENOH_PEER_CLIENT),
        "zenoh router": ("zenoh", None),
    }[setup]
    return CellRequest(
        name=name,
        target=target,
        runtime="native" if relay is None else "external",
        pairs=PAIRS,
        rate_per_publisher=rate / PAIRS,
        payload_bytes=64,
        warmup_s=1.0,
        duration_s=duration,
        drain_s=1.0,
        client=client,
        port=None if relay is None else relay.port,
        pid=None if relay is None else relay.pid,
    )


def row(rate: float, setup: str, figures: CellFigures, bounds: CeilingBounds) -> str:
    """One printed line: send lag, worker and relay CPU, the ceiling step's verdict."""
    f = figures
    reasons = judge_figures(f, bounds)
    lag = f"{f.send_lag_p50_us or 0:.0f}/{f.send_lag_p99_us or 0:.0f}"
    cpu = f"{100 * f.worker_cpu_fraction:.0f} %" if f.worker_cpu_fraction else "-"
    peer = f"{f.peer_cpu_cores:.2f}" if f.peer_cpu_cores is not None else "-"
    verdict = "ok" if not reasons else "; ".join(reasons)
    return f"{rate:g} | {setup} | {lag} | {cpu} | {peer} | {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="250,500,1000,2000,4000,8000")
    parser.add_argument("--duration", type=float, default=3.0, help="measured s per cell")
    args = parser.parse_args()
    bounds = CeilingBounds()
    print("rate | setup | lag p50/p99 us | worker CPU | relay/router cores | verdict")
    with tempfile.TemporaryDirectory(prefix="mqbench-zenoh-ceiling-") as tmp, relays() as found:
        for rate in (float(r) for r in args.rates.split(",")):
            for setup in SETUPS:
                out = Path(tmp) / f"{setup.replace(' ', '-')}-{rate:g}"
                outcome = run_cell(request(setup, rate, args.duration, found), out)
                if outcome.figures is None:
                    print(f"{rate:g} | {setup} | - | - | - | failed: {outcome.error}", flush=True)
                else:
                    print(row(rate, setup, outcome.figures, bounds), flush=True)


if __name__ == "__main__":
    main()
