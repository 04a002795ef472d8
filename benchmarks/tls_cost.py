"""What TLS costs on each native broker: plain vs TLS side by side (run on demand).

For every target, a plain run and a TLS run (scenario ``security: {tls: true}``: the
run's throwaway CA, server verification by every client) are made back to back with the
same workload, each with two cells:

* a *fixed* rate (``--fixed-rate`` msg/s offered in total): latency p50/p99 from the
  intended send time and the broker's CPU;
* a *high* rate (``--high-rate`` msg/s offered in total, near what this machine's
  generator can drive): delivered throughput, loss and the broker's CPU.

With ``--ceiling``, a saturation search per target and mode instead: the offered rate
steps up through ``--ceiling-rates`` (msg/s in total) until a step loses more than
``--ceiling-loss`` %, has a p99 above ``--ceiling-p99-ms`` or saturates the generator;
the table gives the highest sustainable step and what stopped the search. A search the
generator stopped measured the generator, not the broker: such a ceiling is printed as
``>= N ‡`` (a lower bound).

64 B payloads, QoS 0, ``--pairs`` pairs, the lean default client of each protocol, the
numpy analysis (no Spark). It prints one table and the load average: the machine has two
cores and other work may run on it, so compare the two rows of one target (measured one
after the other) and re-measure on a quiet machine before quoting absolute numbers.

    .venv/bin/python benchmarks/tls_cost.py
    .venv/bin/python benchmarks/tls_cost.py --targets mosquitto,nats --high-rate 40000
    .venv/bin/python benchmarks/tls_cost.py --ceiling
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from mqbench.analysis.numpy_ref import analyze_cell_numpy
from mqbench.records.cell_entry import CellEntry
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.scenario.matrix import Cell
from mqbench.workload.run import RunResult, SilentReporter, run_scenario

TARGETS = "mosquitto,nats,redis,rabbitmq-mqtt,rabbitmq-amqp,tbmq-style,zenoh"


class QuietReporter(SilentReporter):
    """Reports failed cells only."""

    def cell_finished(self, cell: Cell, status: str, detail: CellEntry) -> None:
        if status != "completed":
            print(f"{cell.id}: {status} {detail.error or ''}", file=sys.stderr)


def _run(
    target: str,
    tls: bool,
    args: argparse.Namespace,
    out: Path,
    rate: float | list[float],
    search: dict[str, Any] | None = None,
) -> RunResult:
    """One scenario run: ``args.pairs`` pairs of 64 B QoS 0 at ``rate`` msg/s per publisher."""
    kind = "ceiling" if search else "cost"
    data: dict[str, Any] = {
        "name": f"tls-{kind}-{target}-{'tls' if tls else 'plain'}",
        "targets": [target],
        "security": {"tls": tls},
        "workload": {
            "pairs": args.pairs,
            "rate": rate,
            "payload": "64B",
            "qos": 0,
            "warmup": "2s",
            "duration": args.duration,
            "drain": "3s",
        },
        "broker": {"startup_timeout": "120s"},
    }
    if search:
        data["search"] = search
    return run_scenario(
        validate_scenario(data, "benchmark"),
        source=ScenarioSource("benchmark", data),
        out_root=out,
        argv=["benchmarks/tls_cost.py", *(["--ceiling"] if search else [])],
        reporter=QuietReporter(),
        evaluate=analyze_cell_numpy,
    )


def _measure(target: str, tls: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    rates = [args.fixed_rate / args.pairs, args.high_rate / args.pairs]
    result = _run(target, tls, args, out, rates)
    row: dict[str, Any] = {"target": target, "mode": "tls" if tls else "plain"}
    for cell, name in zip(result.cells, ("fixed", "high"), strict=True):
        if cell.status != "completed":
            row[f"{name}_error"] = cell.error
            continue
        summary = analyze_cell_numpy(cell, result.result_dir / "cells" / cell.id)
        lat = summary.latency
        row[f"{name}_p50"] = lat.p50_us / 1e3 if lat else None
        row[f"{name}_p99"] = lat.p99_us / 1e3 if lat else None
        row[f"{name}_tput"] = summary.throughput_msg_s
        row[f"{name}_loss"] = summary.loss_pct
        row[f"{name}_broker_cpu"] = summary.broker_cpu_cores_mean
        row[f"{name}_gen"] = "saturated" if summary.generator_saturated else "ok"
    return row


def _ceiling(target: str, tls: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    rates = [float(r) for r in args.ceiling_rates.split(",")]
    search = {
        "axis": "rate",
        "values": [r / args.pairs for r in rates],
        "stop": {"loss_pct": args.ceiling_loss, "p99_ms": args.ceiling_p99_ms},
    }
    result = _run(target, tls, args, out, rates[0] / args.pairs, search)
    manifest = json.loads((result.result_dir / "manifest.json").read_text())
    steps = manifest["search"]["steps"]
    best = manifest["search"]["highest_sustainable"]
    stopping = next((step for step in steps if not step["sustainable"]), None)
    crossed = stopping["crossed"] if stopping else []
    return {
        "target": target,
        "mode": "tls" if tls else "plain",
        "ceiling": best[0]["value"] * args.pairs if best else None,
        "delivered": best[0]["throughput_msg_s"] if best else None,
        "generator_bound": any(c.startswith("generator saturated") for c in crossed),
        "stopped_by": "; ".join(c.split(" (")[0] for c in crossed)
        if stopping
        else "every step sustainable",
        "stopped_at": stopping["value"] * args.pairs if stopping else None,
        "open_ended": stopping is None,
    }


def _print_ceilings(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"# ceiling search: {args.pairs} pairs, 64 B, QoS 0, {args.duration} per step, "
        f"steps {args.ceiling_rates} msg/s, stop at loss > {args.ceiling_loss:g} % or "
        f"p99 > {args.ceiling_p99_ms:g} ms or a saturated generator; load average "
        f"{os.getloadavg()[0]:.2f} (1 min) after the run"
    )
    print("| target | mode | highest sustainable msg/s | delivered msg/s | stopped at | by |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        bound = r["generator_bound"] or r["open_ended"]
        ceiling = "-" if r["ceiling"] is None else f"{r['ceiling']:,.0f}"
        if bound and r["ceiling"] is not None:
            ceiling = f">= {ceiling} ‡"
        stopped_at = "-" if r["stopped_at"] is None else f"{r['stopped_at']:,.0f}"
        print(
            f"| {r['target']} | {r['mode']} | {ceiling} | {_fmt(r['delivered'], ',.0f')} | "
            f"{stopped_at} | {r['stopped_by']} |"
        )
    print("‡ a lower bound: the generator, or the last step, stopped the search, not the broker")


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return format(value, spec)


def main() -> None:
    """Parse arguments, measure plain and TLS per target, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=TARGETS)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--fixed-rate", type=float, default=2000.0, help="msg/s, all pubs")
    parser.add_argument("--high-rate", type=float, default=30000.0, help="msg/s, all pubs")
    parser.add_argument("--duration", default="5s")
    parser.add_argument("--ceiling", action="store_true", help="saturation search instead")
    parser.add_argument("--ceiling-rates", default="4000,6000,9000,13500,20000,30000,45000,67500")
    parser.add_argument("--ceiling-loss", type=float, default=0.1, help="%% lost to stop at")
    parser.add_argument("--ceiling-p99-ms", type=float, default=50.0)
    args = parser.parse_args()
    rows = []
    measure = _ceiling if args.ceiling else _measure
    with tempfile.TemporaryDirectory(prefix="mqbench-tls-cost-") as tmp:
        for target in args.targets.split(","):
            for tls in (False, True):
                rows.append(measure(target, tls, args, Path(tmp)))
                print(f"measured {target} {'tls' if tls else 'plain'}", file=sys.stderr)
    if args.ceiling:
        _print_ceilings(rows, args)
        return
    print(
        f"# {args.pairs} pairs, 64 B, QoS 0, {args.duration} measured per cell; "
        f"fixed {args.fixed_rate:g} msg/s, high {args.high_rate:g} msg/s offered; "
        f"load average {os.getloadavg()[0]:.2f} (1 min) after the run"
    )
    header = (
        "| target | mode | p50 ms @fixed | p99 ms @fixed | broker CPU @fixed | "
        "delivered msg/s @high | loss % @high | broker CPU @high | generator @high |"
    )
    print(header)
    print("|" + "---|" * 9)
    for r in rows:
        error = r.get("fixed_error") or r.get("high_error")
        if error:
            print(f"| {r['target']} | {r['mode']} | failed: {error} |||||||")
            continue
        print(
            f"| {r['target']} | {r['mode']} | {_fmt(r['fixed_p50'], '.2f')} | "
            f"{_fmt(r['fixed_p99'], '.2f')} | {_fmt(r['fixed_broker_cpu'], '.2f')} | "
            f"{_fmt(r['high_tput'], ',.0f')} | {_fmt(r['high_loss'], '.2f')} | "
            f"{_fmt(r['high_broker_cpu'], '.2f')} | {r['high_gen']} |"
        )


if __name__ == "__main__":
    main()
