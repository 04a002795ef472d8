"""The paper's tables from aggregated summaries, rendered as Markdown, LaTeX, CSV or HTML.

Every value is the mean over a cell's repeats; ``± h`` follows when there are >= 2 repeats
(``h`` = 95 % Student-t half-width). A ``†`` marks cells where the generator, not the
broker, was the bottleneck in some repeat; a ``‡`` marks latency figures the generator's
send lag shaped (``latency_verdict``); a ``§`` marks cells invalid for another reason (the
broker exited, sends failed, records truncated). Which tables appear depends on which
parameters vary (:func:`build_tables`).
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mqbench.analysis.repeats import MeanCI, RepeatAggregate

SATURATED_MARK: Final = "†"
SATURATED_NOTE: Final = (
    "† generator saturated in at least one repeat: the load generator, not the broker, "
    "limited this cell (numbers are not broker capacity)."
)
LATENCY_MARK: Final = "‡"
LATENCY_NOTE: Final = (
    "‡ latency generator-bound in at least one repeat: the generator's send lag is a "
    "material share of the latency (see docs/results.md); it describes mqbench, not the broker."
)
INVALID_MARK: Final = "§"
INVALID_NOTE: Final = (
    "§ invalid in at least one repeat for a reason other than the generator (the broker "
    "exited, sends failed, or records were truncated; see invalid_reasons in summary.json): "
    "the numbers do not measure the broker."
)


def invalid_beyond_generator(agg: RepeatAggregate) -> bool:
    """Invalid for a reason the saturation mark does not already say."""
    return any(kind != "generator_saturated" for kind in agg.invalid_kinds)


AXES: Final[dict[str, str]] = {
    "scenario": "Scenario",
    "target": "Target",
    "topology": "Topology",
    "resources": "Resources",
    "client": "Client",
    "faults": "Faults",
    "rate": "Rate (msg/s per publisher)",
    "payload": "Payload",
    "pairs": "Pairs",
    "subscribers": "Subscribers",
    "publishers": "Publishers",
    "qos": "QoS",
}
"""Axes the report knows, in facet order, with their headings."""

_PARAM_OF: Final = {"payload": "payload_bytes"}


def format_bytes(n: Any) -> str:
    """``1024`` -> ``1 KiB``; ``64`` -> ``64 B``."""
    try:
        value = int(n)
    except (TypeError, ValueError):
        return str(n)
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} B"


def fault_label(value: Any) -> str | None:
    """A short label of a cell's ``faults`` parameter (None when there are none)."""
    if value in (None, False, "", [], {}):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        kind = value.get("type") or value.get("kind") or "faults"
        extra = [f"{k} {value[k]}" for k in ("mttf", "mttr") if value.get(k) is not None]
        return " ".join([str(kind), *extra])
    if isinstance(value, list):
        labels = [fault_label(v) for v in value]
        return ", ".join(x for x in labels if x)
    return json.dumps(value, sort_keys=True, default=str)


def axis_value(agg: RepeatAggregate, axis: str) -> Any:
    """The value of ``axis`` for an aggregate (None when the parameter is absent)."""
    value = agg.params.get(_PARAM_OF.get(axis, axis))
    if axis == "faults":
        return fault_label(value)
    return value


def axis_text(axis: str, value: Any) -> str:
    """How a value of ``axis`` is printed."""
    if value is None:
        return "-"
    if axis == "payload":
        return format_bytes(value)
    if axis == "qos":
        return f"QoS {value}"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, int | float):
        return (1, value)
    return (2, str(value))


def axis_values(aggs: Sequence[RepeatAggregate], axis: str, ordered: bool = True) -> list[Any]:
    """Distinct values of ``axis``: sorted (numbers ascending), or in first-seen order."""
    seen: list[Any] = []
    for a in aggs:
        v = axis_value(a, axis)
        if v not in seen:
            seen.append(v)
    return sorted(seen, key=_sort_key) if ordered else seen


def varying_axes(aggs: Sequence[RepeatAggregate]) -> list[str]:
    """Known axes with at least two distinct values."""
    return [axis for axis in AXES if len(axis_values(aggs, axis)) > 1]


def facets(
    aggs: Sequence[RepeatAggregate], exclude: Sequence[str], always: Sequence[str] = ()
) -> list[tuple[str, list[RepeatAggregate]]]:
    """Split ``aggs`` by every varying axis not in ``exclude`` (plus ``always`` axes with a
    value); returns (label, members) with labels like ``pairs 10, QoS 1``."""
    varying = varying_axes(aggs)
    axes = [
        a
        for a in AXES
        if a not in exclude
        and (a in varying or (a in always and any(axis_value(x, a) is not None for x in aggs)))
    ]
    if not axes:
        return [("", list(aggs))]
    out = []
    for combo in itertools.product(*(axis_values(aggs, a) for a in axes)):
        members = [
            x for x in aggs if all(axis_value(x, a) == v for a, v in zip(axes, combo, strict=True))
        ]
        if members:
            label = ", ".join(
                f"{AXES[a].split(' (')[0].lower()} {axis_text(a, v)}"
                if a not in ("qos", "payload")
                else axis_text(a, v)
                for a, v in zip(axes, combo, strict=True)
            )
            out.append((label, members))
    return out


def fmt_value(value: float | None, digits: int = 3) -> str:
    """A number with about ``digits`` significant digits (thousands separated)."""
    if value is None:
        return "-"
    mag = abs(value)
    if mag >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    if mag == 0:
        return "0"
    decimals = max(0, digits - 1 - int(f"{mag:e}".split("e")[1]))
    return f"{value:.{decimals}f}"


def fmt_ci(m: MeanCI, scale: float = 1.0, digits: int = 3) -> str:
    """``mean`` or ``mean ± ci`` (scaled)."""
    if m.mean is None:
        return "-"
    text = fmt_value(m.mean * scale, digits)
    if m.ci95 is not None:
        text += f" ± {fmt_value(m.ci95 * scale, 2)}"
    return text


def _mark(agg: RepeatAggregate, text: str, latency: bool = False) -> str:
    if text == "-":
        return text
    if agg.any_saturated:
        text = f"{text} {SATURATED_MARK}"
    if invalid_beyond_generator(agg):
        text = f"{text} {INVALID_MARK}"
    if latency and agg.any_latency_bound:
        text = f"{text} {LATENCY_MARK}"
    return text


@dataclass
class Table:
    """A rendered-agnostic table: a title, a header row, text rows and notes."""

    key: str
    title: str
    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def pivot(
    key: str,
    title: str,
    aggs: Sequence[RepeatAggregate],
    row_axis: str,
    col_axis: str,
    value: Callable[[RepeatAggregate], str],
    *,
    always: Sequence[str] = (),
    note: str | None = None,
    latency: bool = False,
) -> list[Table]:
    """One table per facet: rows = values of ``row_axis``, columns = ``col_axis``.

    ``latency``: the values include latency, so latency-bound cells get ``‡``.
    """
    tables: list[Table] = []
    for label, members in facets(aggs, (row_axis, col_axis), always):
        rows_v = axis_values(members, row_axis, ordered=row_axis != "target")
        cols_v = axis_values(members, col_axis)
        header = [AXES[row_axis].split(" (")[0]] + [axis_text(col_axis, c) for c in cols_v]
        rows: list[list[str]] = []
        saturated = bound = invalid = False
        for r in rows_v:
            row = [axis_text(row_axis, r)]
            for c in cols_v:
                hits = [
                    m
                    for m in members
                    if axis_value(m, row_axis) == r and axis_value(m, col_axis) == c
                ]
                saturated |= any(h.any_saturated for h in hits)
                bound |= latency and any(h.any_latency_bound for h in hits)
                invalid |= any(invalid_beyond_generator(h) for h in hits)
                row.append("; ".join(_mark(h, value(h), latency) for h in hits) if hits else "-")
            rows.append(row)
        notes = [note] if note else []
        if saturated:
            notes.append(SATURATED_NOTE)
        if bound:
            notes.append(LATENCY_NOTE)
        if invalid:
            notes.append(INVALID_NOTE)
        suffix = f" ({label})" if label else ""
        slug = key if not label else f"{key}-{len(tables) + 1}"
        tables.append(Table(slug, title + suffix, header, rows, notes))
    return tables


def _lat_pair(agg: RepeatAggregate) -> str:
    p50, p95 = agg.metrics["latency_p50_us"], agg.metrics["latency_p95_us"]
    if p50.mean is None:
        return "-"
    return f"{fmt_ci(p50, 1e-3)} / {fmt_ci(p95, 1e-3)}"


def _loss_lat(agg: RepeatAggregate) -> str:
    loss = agg.metrics["loss_pct"]
    loss_text = "-" if loss.mean is None else f"{fmt_ci(loss)} %"
    return f"{loss_text}; {_lat_pair(agg)}"


def latency_by_payload(aggs: Sequence[RepeatAggregate]) -> list[Table]:
    """Target x payload: p50 / p95 latency in ms (the paper's experiment 1)."""
    return pivot(
        "latency-payload",
        "Latency p50 / p95 (ms) by target and payload",
        aggs,
        "target",
        "payload",
        _lat_pair,
        note="Latency from the intended send time (corrected for coordinated omission).",
        latency=True,
    )


def scaling_by_pairs(aggs: Sequence[RepeatAggregate]) -> list[Table]:
    """Target x pairs: throughput, broker CPU and RSS, per resource profile (experiment 2)."""
    out: list[Table] = []
    for key, title, metric, scale in (
        ("throughput-pairs", "Throughput (msg/s) by target and pairs", "throughput_msg_s", 1.0),
        ("cpu-pairs", "Broker CPU (cores) by target and pairs", "broker_cpu_cores_mean", 1.0),
        ("rss-pairs", "Broker RSS (MB, mean) by target and pairs", "broker_rss_mb_mean", 1.0),
    ):
        out += pivot(
            key,
            title,
            aggs,
            "target",
            "pairs",
            lambda a, m=metric, s=scale: fmt_ci(a.metrics[m], s),  # type: ignore[misc]
            always=("resources",),
        )
    return out


def fanout_by_subscribers(aggs: Sequence[RepeatAggregate]) -> list[Table]:
    """Target x subscribers: aggregate delivered throughput (fanout topology)."""
    return pivot(
        "throughput-subscribers",
        "Fanout throughput (msg/s delivered) by target and subscribers",
        aggs,
        "target",
        "subscribers",
        lambda a: fmt_ci(a.metrics["throughput_msg_s"]),
        always=("resources",),
    )


def qos_table(aggs: Sequence[RepeatAggregate]) -> list[Table]:
    """Target x QoS: loss % and p50 / p95 latency (experiment 3, under faults if any)."""
    faults = [v for v in axis_values(aggs, "faults") if v]
    title = "Loss (%) and latency p50 / p95 (ms) by target and QoS"
    if faults:
        title += " under faults"
    return pivot("qos", title, aggs, "target", "qos", _loss_lat, latency=True)


def cells_table(aggs: Sequence[RepeatAggregate]) -> Table:
    """One row per cell (repeats pooled): every headline metric."""
    axes = [a for a in varying_axes(aggs) if a != "target"]
    header = ["Cell", "Target", *(AXES[a].split(" (")[0] for a in axes)]
    header += ["n", "Offered msg/s", "Throughput msg/s", "Loss %", "Dup", "Reord"]
    header += ["p50 ms", "p95 ms", "p99 ms", "max ms", "Lag p99 ms", "CPU cores", "RSS MB"]
    rows: list[list[str]] = []
    for a in aggs:
        m = a.metrics
        offered = a.params.get("rate"), a.params.get("pairs")
        offered_text = "-"
        if isinstance(offered[0], int | float) and isinstance(offered[1], int):
            offered_text = fmt_value(float(offered[0]) * offered[1])
        rows.append(
            [
                _mark(a, a.base_id),
                axis_text("target", axis_value(a, "target")),
                *(axis_text(x, axis_value(a, x)) for x in axes),
                str(a.n),
                offered_text,
                fmt_ci(m["throughput_msg_s"]),
                fmt_ci(m["loss_pct"]),
                fmt_ci(m["duplicates"]),
                fmt_ci(m["reordered"]),
                *(
                    _latency_cell(a, fmt_ci(m[f"latency_{q}_us"], 1e-3))
                    for q in ("p50", "p95", "p99", "max")
                ),
                fmt_ci(m["send_lag_p99_us"], 1e-3),
                fmt_ci(m["broker_cpu_cores_mean"]),
                fmt_ci(m["broker_rss_mb_mean"]),
            ]
        )
    notes = ["Offered = rate x pairs (pairs topology). Latency from the intended send time."]
    if any(a.any_saturated for a in aggs):
        notes.append(SATURATED_NOTE)
    if any(a.any_latency_bound for a in aggs):
        notes.append(LATENCY_NOTE)
    if any(invalid_beyond_generator(a) for a in aggs):
        notes.append(INVALID_NOTE)
    return Table("cells", "All cells", header, rows, notes)


def _latency_cell(agg: RepeatAggregate, text: str) -> str:
    """A latency value, marked ``‡`` when the generator shaped it."""
    return f"{text} {LATENCY_MARK}" if agg.any_latency_bound and text != "-" else text


def build_tables(aggs: Sequence[RepeatAggregate]) -> list[Table]:
    """The tables that fit the results: a paper table for each varying axis, then all cells.

    payload varies or several targets -> latency by payload; pairs varies -> throughput, CPU,
    RSS by pairs; subscribers varies -> fanout throughput; QoS varies -> loss and latency by
    QoS. The per-cell table is always last.
    """
    varying = varying_axes(aggs)
    tables: list[Table] = []
    if "payload" in varying or "target" in varying:
        tables += latency_by_payload(aggs)
    if "pairs" in varying:
        tables += scaling_by_pairs(aggs)
    if "subscribers" in varying:
        tables += fanout_by_subscribers(aggs)
    if "qos" in varying:
        tables += qos_table(aggs)
    tables.append(cells_table(aggs))
    return tables


# ---------------------------------------------------------------- renderers


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(tables: Sequence[Table], preamble: str = "") -> str:
    """GitHub-flavoured Markdown: the preamble's first line as ``#`` heading, its other lines
    as paragraphs, then a ``###`` heading per table with its notes below."""
    parts: list[str] = []
    if preamble.strip():
        first, *rest = preamble.strip().splitlines()
        parts.append("\n\n".join([f"# {first}", *rest]) + "\n")
    for t in tables:
        lines = [f"### {t.title}", ""]
        lines.append("| " + " | ".join(_md_cell(h) for h in t.header) + " |")
        lines.append("|" + "|".join([":---"] + ["---:"] * (len(t.header) - 1)) + "|")
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
        if t.notes:
            lines.append("")
            lines += [f"{n}  " if i < len(t.notes) - 1 else n for i, n in enumerate(t.notes)]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


_LATEX_SPECIAL: Final = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "†": r"\textsuperscript{\dag}",
    "‡": r"\textsuperscript{\ddag}",
    "§": r"\textsuperscript{\S}",
    "≥": r"$\geq$",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters (and map ±, † and ‡ to math/text symbols)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def render_latex(tables: Sequence[Table], preamble: str = "") -> str:
    """One ``table`` environment per table (needs ``\\usepackage{booktabs}``)."""
    parts = ["% generated by mqbench report; needs \\usepackage{booktabs}"]
    if preamble:
        parts += [f"% {line}" if line else "%" for line in preamble.strip().splitlines()]
    for t in tables:
        spec = "l" + "r" * (len(t.header) - 1)
        lines = [
            "",
            "\\begin{table}[ht]",
            "\\centering",
            f"\\caption{{{latex_escape(t.title)}}}",
            f"\\label{{tab:{t.key}}}",
            f"\\begin{{tabular}}{{{spec}}}",
            "\\toprule",
            " & ".join(latex_escape(h) for h in t.header) + " \\\\",
            "\\midrule",
        ]
        lines += [" & ".join(latex_escape(c) for c in row) + " \\\\" for row in t.rows]
        lines += ["\\bottomrule", "\\end{tabular}"]
        if t.notes:
            lines.append("\\par\\smallskip\\footnotesize")
            lines += [
                latex_escape(n) + (" \\\\" if i < len(t.notes) - 1 else "")
                for i, n in enumerate(t.notes)
            ]
        lines.append("\\end{table}")
        parts.append("\n".join(lines))
    return "\n".join(parts) + "\n"


def render_csv(tables: Sequence[Table]) -> str:
    """All tables in one CSV text: a ``# title`` line, the header, the rows, a blank line."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for i, t in enumerate(tables):
        if i:
            buf.write("\n")
        buf.write(f"# {t.title}\n")
        writer.writerow(t.header)
        writer.writerows(t.rows)
        for note in t.notes:
            buf.write(f"# {note}\n")
    return buf.getvalue()


def render_html(tables: Sequence[Table], preamble: str = "") -> str:
    """A standalone HTML page with one ``<table>`` per table."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>mqbench report</title>',
        "<style>body{font-family:sans-serif}table{border-collapse:collapse;margin:1em 0}"
        "th,td{border:1px solid #bbb;padding:.2em .6em}td{text-align:right}"
        "td:first-child{text-align:left}.note{font-size:90%;color:#444}</style>",
        "</head><body>",
        "<h1>mqbench report</h1>",
    ]
    out += [f"<p>{html.escape(line)}</p>" for line in preamble.strip().splitlines() if line]
    for t in tables:
        out.append(f"<h3>{html.escape(t.title)}</h3>")
        out.append(f'<table id="{html.escape(t.key)}">')
        out.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.header) + "</tr>")
        for row in t.rows:
            out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
        out.append("</table>")
        out += [f'<p class="note">{html.escape(n)}</p>' for n in t.notes]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


FORMATS: Final = ("md", "latex", "csv", "html")


def render(tables: Sequence[Table], fmt: str, preamble: str = "") -> str:
    """Render ``tables`` in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "md":
        return render_markdown(tables, preamble)
    if fmt == "latex":
        return render_latex(tables, preamble)
    if fmt == "csv":
        return render_csv(tables)
    if fmt == "html":
        return render_html(tables, preamble)
    raise ValueError(f"unknown format {fmt!r}")
