"""The gate's result as text for a terminal, Markdown for a CI job summary, and JUnit XML
for CI test reports (``mqbench compare --format text|markdown|junit``; JSON is
``CompareResult.to_json``).

JUnit has one test case per (cell, metric), named ``<metric>`` in class ``<cell>``:
a regression is a ``failure``, a refused metric an ``error``, a missing one ``skipped``
(a failure with ``--fail-on-missing``); ``ok`` and ``improvement`` pass. A problem that
refuses the whole comparison (no cell matched, other scenarios, an invalid cell) is a
failing test case of its own in class ``mqbench.compare``, so a CI page never shows green
for a gate that judged nothing.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqbench.analysis.compare import CompareResult


def fmt(v: float | None) -> str:
    """A number with about three significant figures (``-`` for none)."""
    if v is None:
        return "-"
    if v == 0:
        return "0"
    mag = abs(v)
    if mag >= 1000:
        return f"{v:,.0f}"
    if mag >= 10:
        return f"{v:.1f}"
    if mag >= 0.1:
        return f"{v:.3f}"
    return f"{v:.3g}"


def fmt_mean(mean: float | None, ci: float | None, unit: str) -> str:
    """``mean±ci unit``."""
    if mean is None:
        return "-"
    text = fmt(mean) if ci is None else f"{fmt(mean)}±{fmt(ci)}"
    return f"{text} {unit}"


def fmt_change(change: float | None, pct: float | None) -> str:
    """``+1.2 (+3.4%)``."""
    if change is None:
        return "-"
    sign = "+" if change > 0 else ""
    text = f"{sign}{fmt(change)}"
    return f"{text} ({sign}{pct:.1f}%)" if pct is not None else text


HEADER = (
    "cell",
    "metric",
    "baseline",
    "current",
    "change",
    "noise ±",
    "floor",
    "limit",
    "verdict",
)


def rows(result: CompareResult) -> list[tuple[str, ...]]:
    """One row per (cell, metric), and one per cell found on one side only."""
    out: list[tuple[str, ...]] = []
    for c in result.cells:
        if c.status != "both":
            out.append((c.cell, "-", "", "", "", "", "", "", f"missing ({c.status})"))
            continue
        for m in c.metrics:
            verdict = m["verdict"]
            out.append(
                (
                    c.cell,
                    m["metric"],
                    fmt_mean(m["baseline"], m["baseline_ci95"], m["unit"]),
                    fmt_mean(m["current"], m["current_ci95"], m["unit"]),
                    fmt_change(m["change"], m["change_pct"]),
                    fmt(m["noise"]),
                    fmt(m.get("floor")),
                    fmt(m["limit"]),
                    verdict.upper() if verdict in ("regression", "refused") else verdict,
                )
            )
    return out


def thresholds_line(result: CompareResult) -> str:
    """``thresholds from the scenario's gate: throughput=-5%, ...``."""
    source = {"gate": " from the scenario's gate", "--threshold": " from --threshold"}
    where = source.get(result.threshold_source, " (default)")
    return f"thresholds{where}: {', '.join(str(t) for t in result.thresholds.values())}"


def verdict_line(result: CompareResult) -> str:
    """``OK: 12 ok`` or ``REFUSED: 11 ok, 1 refused``: the verdict and the counts that are
    not zero."""
    counts = ", ".join(f"{v} {k}" for k, v in result.counts().items() if v) or "nothing judged"
    return f"{result.verdict.upper()}: {counts}"


def notes(result: CompareResult) -> list[str]:
    """Every note of every cell, ``cell: note``."""
    return [f"{c.cell}: {note}" for c in result.cells for note in c.notes]


def to_text(result: CompareResult) -> str:
    """Columns padded to their widest value (nothing is ever cut), notes, problems, and
    the verdict line last."""
    lines = [HEADER, *rows(result)]
    widths = [max(len(row[i]) for row in lines) for i in range(len(HEADER))]
    text = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in lines
    ]
    text.extend(f"note: {note}" for note in notes(result))
    text.extend(f"refused: {p.message}" for p in result.problems)
    floor = result.floor_note()
    if floor:
        text.append(floor)
    text.append(thresholds_line(result))
    text.append(verdict_line(result))
    return "\n".join(text) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(result: CompareResult) -> str:
    """A job summary: the verdict as a heading, problems, the table, and notes."""
    icon = {"ok": "✅", "regression": "❌", "refused": "⚠️"}[result.verdict]
    out = [f"### {icon} mqbench compare: {result.verdict.upper()}", ""]
    out.append(f"`{_md(result.baseline)}` → `{_md(result.current)}`")
    out.append("")
    out.append(f"{verdict_line(result).split(': ', 1)[1]}; {thresholds_line(result)}")
    out.append("")
    floor = result.floor_note()
    if floor:
        out.extend([_md(floor), ""])
    for problem in result.problems:
        out.append(f"- **refused**: {_md(problem.message)}")
    if result.problems:
        out.append("")
    body = rows(result)
    if body:
        out.append("| " + " | ".join(HEADER) + " |")
        out.append("|" + "|".join("---" if i < 2 else "--:" for i in range(len(HEADER))) + "|")
        for row in body:
            cells = [f"**{v}**" if v in ("REGRESSION", "REFUSED") else v for v in row]
            out.append("| " + " | ".join(_md(v) for v in cells) + " |")
        out.append("")
    for note in notes(result):
        out.append(f"- {_md(note)}")
    return "\n".join(out).rstrip() + "\n"


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")


def _limit_text(m: dict[str, Any]) -> str:
    """``limit 0.145 (timing floor: send lag p99.9 of the current run; p95=+10%)``."""
    if m.get("limit_by") == "floor":
        return f"limit {fmt(m['limit'])} (timing floor: {m['floor_source']}; {m['threshold']})"
    floor = f", timing floor {fmt(m['floor'])}" if m.get("floor") is not None else ""
    return f"limit {fmt(m['limit'])} ({m['threshold']}{floor})"


def _metric_case(suite: ET.Element, cell: str, m: dict[str, Any], fail_missing: bool) -> str:
    case = _case(suite, cell, m["metric"])
    verdict = m["verdict"]
    detail = (
        f"{m['metric']}: baseline {fmt_mean(m['baseline'], m['baseline_ci95'], m['unit'])}, "
        f"current {fmt_mean(m['current'], m['current_ci95'], m['unit'])}, change "
        f"{fmt_change(m['change'], m['change_pct'])}, noise ±{fmt(m['noise'])}, "
        f"{_limit_text(m)}"
    )
    if verdict == "regression":
        ET.SubElement(case, "failure", message=f"regression: {detail}", type="regression")
        return "failures"
    if verdict == "refused":
        ET.SubElement(case, "error", message=f"refused: {detail}", type="refused")
        return "errors"
    if verdict == "missing":
        if fail_missing:
            ET.SubElement(case, "failure", message=f"missing: {detail}", type="missing")
            return "failures"
        ET.SubElement(case, "skipped", message=f"missing: {detail}")
        return "skipped"
    ET.SubElement(case, "system-out").text = f"{verdict}: {detail}"
    return "passed"


def to_junit(result: CompareResult) -> str:
    """JUnit XML (see the module docstring for the mapping)."""
    root = ET.Element("testsuites", name="mqbench compare")
    suite = ET.SubElement(root, "testsuite", name=f"mqbench compare {result.current}")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "passed": 0}
    fail_missing = any(p.kind == "missing" for p in result.problems)
    for problem in result.problems:
        case = _case(suite, "mqbench.compare", problem.kind)
        ET.SubElement(case, "failure", message=problem.message, type=problem.kind)
        counts["tests"] += 1
        counts["failures"] += 1
    for c in result.cells:
        if c.status != "both":
            case = _case(suite, c.cell, "present in both runs")
            tag = "failure" if fail_missing else "skipped"
            ET.SubElement(case, tag, message=f"missing: {c.status}")
            counts["tests"] += 1
            counts["failures" if fail_missing else "skipped"] += 1
            continue
        for m in c.metrics:
            counts["tests"] += 1
            counts[_metric_case(suite, c.cell, m, fail_missing)] += 1
    del counts["passed"]
    for key, count in counts.items():
        suite.set(key, str(count))
        root.set(key, str(count))
    props = ET.Element("properties")
    for name, value in (
        ("baseline", result.baseline),
        ("current", result.current),
        ("verdict", result.verdict),
        ("exit_code", str(result.exit_code)),
        ("thresholds", ", ".join(str(t) for t in result.thresholds.values())),
        ("timing_floor", result.floor_note() or "not applied"),
    ):
        ET.SubElement(props, "property", name=name, value=value)
    suite.insert(0, props)
    if notes(result):
        ET.SubElement(suite, "system-out").text = "\n".join(notes(result))
    return _xml(root)


def _xml(root: ET.Element) -> str:
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def error_output(fmt: str, baseline: str, current: str, message: str, exit_code: int) -> str:
    """What ``compare --format FMT`` writes when it could not compare at all (a folder it
    cannot read, a bad threshold): the same shape as a result, with verdict ``error``."""
    if fmt == "json":
        data = {
            "verdict": "error",
            "exit_code": exit_code,
            "baseline": baseline,
            "current": current,
            "error": message,
        }
        return json.dumps(data, indent=2) + "\n"
    if fmt == "junit":
        root = ET.Element("testsuites", name="mqbench compare", tests="1", errors="1")
        suite = ET.SubElement(
            root, "testsuite", name=f"mqbench compare {current}", tests="1", errors="1"
        )
        case = _case(suite, "mqbench.compare", "compare")
        ET.SubElement(case, "error", message=message, type="error")
        return _xml(root)
    if fmt == "markdown":
        where = f"`{_md(baseline)}` → `{_md(current)}`"
        return f"### ⚠️ mqbench compare: ERROR\n\n{where}\n\n{_md(message)}\n"
    return f"error: {message}\n"
