"""Rich tables of analysed cells."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from mqbench.analysis.summary import CellSummary
from mqbench.report.labels import label


def _ms(value_us: float | None) -> str:
    if value_us is None:
        return "-"
    ms = value_us / 1000.0
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def validity_text(s: CellSummary) -> str:
    """``ok``, or ``INVALID`` with every reason (Rich markup)."""
    if s.valid:
        return "[green]ok[/]"
    reasons = "; ".join(f"{r.kind.value}: {r.message}" for r in s.invalid_reasons)
    return f"[bold red]INVALID[/] {reasons}"


def summary_table(summaries: Sequence[CellSummary]) -> Table:
    """One row per cell: delivery, throughput, latency (ms), lag, broker resources, validity."""
    table = Table(
        title="results (latency from the intended send time; window = measured period; "
        "loss over scheduled messages, unsent = scheduled but never sent)",
        title_justify="left",
    )
    # metric columns carry the labels the report uses for the same numbers
    columns = [
        ("cell", "left"),
        ("sent", "right"),
        ("unsent", "right"),
        ("recv", "right"),
        (label("loss_pct"), "right"),
        (label("duplicates"), "right"),
        (label("throughput_msg_s"), "right"),
        (label("latency_p50_us"), "right"),
        (label("latency_p95_us"), "right"),
        (label("latency_p99_us"), "right"),
        (label("latency_max_us"), "right"),
        (label("latency_from_send_p99_us"), "right"),
        (label("send_lag_p99_us"), "right"),
        (label("broker_cpu_cores_mean"), "right"),
        (label("broker_rss_mb_max"), "right"),
        ("valid", "left"),
        ("latency", "left"),
    ]
    # the labelled headers wrap; the cell id must not be the column that gets squeezed
    widest_id = min(48, max((len(s.cell_id) for s in summaries), default=4))
    for name, justify in columns:
        table.add_column(
            name,
            justify=justify,  # type: ignore[arg-type]
            min_width=widest_id if name == "cell" else None,
        )
    for s in summaries:
        lat, from_send, lag = s.latency, s.latency_from_send, s.send_lag
        if s.latency_generator_bound:
            latency = f"[bold yellow]GENERATOR-BOUND[/]: {s.latency_reason or ''}"
        elif s.latency_verdict == "ok":
            latency = "[green]ok[/]"
        else:
            latency = "-"
        if s.latency_error_ms is not None:
            latency += f" ±{s.latency_error_ms:.3f} ms clock error (routes across load tasks)"
        loss = _num(s.loss_pct, "{:.3f}")
        if s.loss_pct:
            loss = f"[red]{loss}[/]"
        table.add_row(
            s.cell_id,
            f"{s.sent:,}",
            "-" if s.unsent is None else (f"[red]{s.unsent:,}[/]" if s.unsent else "0"),
            f"{s.received:,}",
            loss,
            f"{s.duplicates:,}",
            _num(s.throughput_msg_s),
            _ms(lat.p50_us if lat else None),
            _ms(lat.p95_us if lat else None),
            _ms(lat.p99_us if lat else None),
            _ms(lat.max_us if lat else None),
            _ms(from_send.p99_us if from_send else None),
            _ms(lag.p99_us if lag else None),
            _num(s.broker_cpu_cores_mean, "{:.2f}"),
            _num(s.broker_rss_mb_max, "{:.1f}"),
            validity_text(s),
            latency,
        )
    return table


def backlog_notes(summaries: Sequence[CellSummary]) -> list[str]:
    """One line per cell whose loss includes messages still queued when the drain ended."""
    lines = []
    for s in summaries:
        if not s.backlog_at_drain_end:
            continue
        drain = s.params.get("drain_s")
        lines.append(
            f"[yellow]{s.cell_id}[/]: deliveries were still arriving when the "
            f"{drain:g} s drain ended (last {s.last_delivery_s:.2f} s after the window): the "
            f"broker was behind, so the {s.lost:,} lost include messages it may still have "
            "held; lengthen workload.drain to tell a backlog from drops"
            if isinstance(drain, int | float) and s.last_delivery_s is not None
            else f"[yellow]{s.cell_id}[/]: deliveries were still arriving when the drain "
            "ended: the loss includes messages the broker may still have held"
        )
    return lines


def fault_table(metrics: dict[str, dict[str, Any]]) -> Table:
    """One row per cell with faults: downtime, latency in/out of faults, recovery times."""
    table = Table(title="faults (latency from the intended send time)", title_justify="left")
    for name in (
        "cell",
        "faults",
        "downtime (%)",
        "sub away (%)",
        "p50 out (ms)",
        "p99 out (ms)",
        "p50 in (ms)",
        "p99 in (ms)",
        "first delivery max (ms)",
        "drain max (ms)",
        "reconnects",
        "dup",
    ):
        table.add_column(name, justify="left" if name == "cell" else "right")
    for cell_id, m in metrics.items():
        out, inside = m.get("latency_outside") or {}, m.get("latency_in_faults") or {}
        firsts = [
            r["first_delivery_ms"] for r in m["recoveries"] if r["first_delivery_ms"] is not None
        ]
        drains = [r["drain_ms"] for r in m["recoveries"] if r["drain_ms"] is not None]
        fraction = m.get("downtime_fraction")
        away = m.get("subscriber_outage_fraction")
        table.add_row(
            cell_id,
            str(m["faults"]),
            "-" if fraction is None else f"{100 * fraction:.1f}",
            "-" if away is None else f"{100 * away:.1f}",
            _ms(out.get("p50_us")),
            _ms(out.get("p99_us")),
            _ms(inside.get("p50_us")),
            _ms(inside.get("p99_us")),
            f"{max(firsts):.0f}" if firsts else "-",
            f"{max(drains):.0f}" if drains else "-",
            str(m["reconnects"]),
            str(m["duplicates"]),
        )
    return table
