"""``mqbench calibrate``: the tool's latency floor, brokers at the same rate, the ceiling."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from mqbench.cli.errors import guarded
from mqbench.cli.output import err_console
from mqbench.errors import BrokerError, UsageError

if TYPE_CHECKING:
    from mqbench.calibration.model import Calibration, CellFigures

FORMATS = ("table", "json")


def _ms(value_us: float | None) -> str:
    return "-" if value_us is None else f"{value_us / 1000:.3f}"


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def latency_table(calibration: Calibration) -> Table:
    """Floor and broker rows per protocol: latency and lag percentiles, CPU."""
    s = calibration.settings
    table = Table(
        title=(
            f"latency floor vs brokers: {s.pairs} pairs x {s.rate_per_publisher:g} msg/s, "
            f"{s.payload_bytes} B, QoS 0, one worker, {s.duration_s:g} s measured (ms)"
        ),
        title_justify="left",
    )
    for column in (
        "path",
        "p50",
        "p99",
        "p50 from send",
        "p99 from send",
        "lag p50",
        "lag p99",
        "gen cpu",
        "broker/relay cpu",
        "note",
    ):
        table.add_column(column, justify="left" if column in ("path", "note") else "right")

    def row(label: str, figures: CellFigures | None, reason: str | None, note: str = "") -> None:
        if figures is None:
            table.add_row(label, *["-"] * 8, f"[yellow]{reason or 'not measured'}[/]")
            return
        if figures.generator_saturated:
            note = f"[yellow]generator saturated: {figures.generator_reason}[/]"
        elif figures.lost:
            note = f"[yellow]{figures.lost} lost[/]"
        table.add_row(
            label,
            _ms(figures.latency_p50_us),
            _ms(figures.latency_p99_us),
            _ms(figures.from_send_p50_us),
            _ms(figures.from_send_p99_us),
            _ms(figures.send_lag_p50_us),
            _ms(figures.send_lag_p99_us),
            _cores(figures.generator_cpu_cores),
            _cores(figures.peer_cpu_cores),
            note,
        )

    protocols = list(calibration.floors)
    protocols += [b.protocol for b in calibration.brokers.values() if b.protocol not in protocols]
    for protocol in protocols:
        floor = calibration.floors.get(protocol)
        if floor is not None:
            hop = floor.relay_hop
            note = (
                f"relay held reads p50 {hop.p50_us / 1000:.3f} / p99 {hop.p99_us / 1000:.3f}"
                if hop is not None
                else ""
            )
            row(f"[bold]{protocol} floor[/] ({floor.path})", floor.figures, floor.reason, note)
        for broker in calibration.brokers.values():
            if broker.protocol == protocol:
                version = f" {broker.broker_version}" if broker.broker_version else ""
                row(f"  {broker.target}{version}", broker.figures, broker.reason)
    return table


def ceiling_table(calibration: Calibration) -> Table:
    """One row per client: the ceiling, what ended the search, the first failing step."""
    table = Table(title="generator ceiling: msg/s per worker process", title_justify="left")
    for column in ("client", "msg/s per worker", "limited by", "steps", "first failing step"):
        table.add_column(column, justify="right" if column.startswith(("msg", "steps")) else "left")
    for ceiling in calibration.ceilings.values():
        failing = [s for s in ceiling.steps if not s.passed]
        first_fail = ""
        if failing:
            lowest = min(failing, key=lambda s: s.offered_msg_s)
            first_fail = f"{lowest.offered_msg_s:,.0f}: {'; '.join(lowest.reasons)}"
        value = "-" if ceiling.msg_s_per_worker is None else f"{ceiling.msg_s_per_worker:,.0f}"
        table.add_row(
            ceiling.client,
            value,
            ceiling.limited_by,
            str(len(ceiling.steps)),
            first_fail or (ceiling.reason or ""),
        )
    if calibration.ceilings:
        bounds = next(iter(calibration.ceilings.values())).bounds
        table.caption = (
            f"within bounds: send lag p99 <= {bounds.lag_p99_us:,.0f} µs, worker CPU < "
            f"{100 * bounds.worker_cpu_fraction:.0f}% of a core, no generator_saturated, no loss"
        )
        table.caption_justify = "left"
    return table


def wakeup_table(calibration: Calibration) -> Table:
    """One row per scheduling policy: the machine's wake-up floor (µs)."""
    table = Table(title="wake-up floor (µs late after a 1 ms timer)", title_justify="left")
    for column in ("policy", "p50", "p99", "p99.9", "max", "samples"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for result in calibration.wakeup.values():
        f = result.figures
        if f is None:
            table.add_row(result.policy, "-", "-", "-", "-", result.reason or "")
            continue
        table.add_row(
            result.policy,
            f"{f.p50_us:,.1f}",
            f"{f.p99_us:,.1f}",
            f"{f.p999_us:,.1f}",
            f"{f.max_us:,.1f}",
            f"{f.samples:,}",
        )
    table.caption = (
        "generator.realtime uses fifo+dma where permitted, else other; send lag within "
        "2x the p99 is the machine's (docs/calibration.md)"
    )
    table.caption_justify = "left"
    return table


def calibrate(
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            metavar="T",
            help="Broker target to measure (repeatable); default: every target installed "
            "for the native runtime. Floors and ceilings follow the targets' protocols.",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="Output: table or json.")] = "table",
    duration: Annotated[
        str, typer.Option("--duration", metavar="S", help="Measured seconds per cell, e.g. 3s.")
    ] = "3s",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="PATH",
            help="Where to write the calibration (default: $MQBENCH_CALIBRATION, else "
            "$XDG_STATE_HOME/mqbench/calibration.json, else ~/.local/state/mqbench/...).",
        ),
    ] = None,
) -> None:
    """Measure mqbench's own latency floor per protocol, the brokers at the same low rate,
    and the generator's ceiling per client; save it for `mqbench run` (docs/calibration.md).

    Example: mqbench calibrate --target mosquitto --target nats --duration 5s
    """

    def go() -> None:
        from mqbench.calibration.session import (
            CalibrationOrder,
            CalibrationPathError,
            TargetNotInstalledError,
            UnknownTargetError,
            run_calibration,
        )
        from mqbench.scenario.units import parse_duration

        if fmt not in FORMATS:
            raise UsageError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        try:
            seconds = parse_duration(duration)
        except ValueError as exc:
            raise UsageError(f"--duration {duration!r}: {exc}") from None
        if seconds <= 0:
            raise UsageError(f"--duration {duration!r}: must be more than 0 s")
        try:
            outcome = run_calibration(
                CalibrationOrder(target or [], seconds, out),
                lambda line: err_console.print(line, markup=False),
            )
        except CalibrationPathError as exc:
            if out is not None:
                raise UsageError(f"--out {out}: {exc}") from None
            raise
        except UnknownTargetError as exc:
            known = ", ".join(exc.known)
            raise UsageError(f"--target {exc.target!r}: unknown target (known: {known})") from None
        except TargetNotInstalledError as exc:
            raise BrokerError(
                f"--target {exc.target!r}: not installed for the native runtime ({exc.reason})"
            ) from None
        calibration = outcome.calibration
        if fmt == "json":
            sys.stdout.write(calibration.model_dump_json(indent=2) + "\n")
            sys.stdout.flush()
        else:
            console = Console(
                highlight=False,
                soft_wrap=True,
                width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200,
            )
            console.print(latency_table(calibration))
            console.print(ceiling_table(calibration))
            if calibration.wakeup:
                console.print(wakeup_table(calibration))
        err_console.print(
            f"saved {outcome.path}; load average at start {calibration.load_average} "
            "(on a busy machine these figures are noisy: re-measure on a quiet one)"
        )

    guarded(go)
