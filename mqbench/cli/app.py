"""``mqbench``: run scenarios, analyse results, validate scenarios, list targets."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.console import Console
from rich.text import Text

from mqbench import __version__
from mqbench.cli.broker_cmd import broker_app
from mqbench.cli.brokers_cmd import brokers_app
from mqbench.cli.calibrate_cmd import calibrate
from mqbench.cli.columns import Column, layout
from mqbench.cli.errors import guarded
from mqbench.cli.output import (
    View,
    console,
    err_console,
    parse_format,
    people,
    print_analysis,
    print_lines,
    table_width,
    to_csv,
    to_json,
    write_raw,
)
from mqbench.cli.report_cmd import compare, history, report
from mqbench.errors import UsageError
from mqbench.records.hadoop_fs import RemoteRoot, parse_location

if TYPE_CHECKING:
    from mqbench.analysis.api import RunAnalysis
    from mqbench.brokers.runtime.availability import TargetAvailability
    from mqbench.calibration.use import CalibrationCheck
    from mqbench.records.cell_entry import CellEntry
    from mqbench.scenario.loader import ScenarioSource
    from mqbench.workload.metrics_endpoint import MetricsEndpoint
    from mqbench.workload.outline import RunOutline

STRICT_EXIT_CODE: Final = 4
"""``run --strict`` with an invalid cell: the code ``compare`` uses when it refuses to judge."""

app = typer.Typer(
    name="mqbench",
    help=(
        "Honest, reproducible message-broker benchmarks.\n\n"
        "Examples:\n\n"
        "  mqbench run scenarios/quickstart.yaml\n\n"
        "  mqbench run scenarios/quickstart.yaml --set workload.pairs=[10,50] --dry-run\n\n"
        "  mqbench analyze results/quickstart/20261122T050102Z-1a2b3c\n\n"
        "  mqbench targets"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"mqbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the mqbench version and exit.",
        ),
    ] = False,
) -> None:
    """Honest, reproducible message-broker benchmarks."""


scenario_app = typer.Typer(help="Work with scenario files.", no_args_is_help=True)
app.add_typer(scenario_app, name="scenario")
app.add_typer(brokers_app, name="brokers")
app.add_typer(broker_app, name="broker")

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY.PATH=VALUE",
        help="Override a scenario value (YAML syntax), e.g. --set workload.rate=[10,100].",
    ),
]


def _parse_conf(items: list[str] | None) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--conf {item!r}: expected KEY=VALUE, e.g. spark.driver.memory=4g")
        conf[key] = value
    return conf


WideOption = Annotated[
    bool,
    typer.Option("--wide", help="Every column (the default table fits 100 columns)."),
]
FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="table|json|csv",
        help="table for people; json or csv for programs (on stdout, everything else on stderr).",
    ),
]


@app.command()
def run(
    scenario_file: Annotated[Path, typer.Argument(metavar="SCENARIO", help="Scenario YAML file.")],
    out: Annotated[
        str,
        typer.Option(
            "--out",
            help="Root folder for results: a path, or with the Spark engine any "
            "Hadoop-compatible URI (hdfs://, s3a://, file://; docs/distributed.md).",
        ),
    ] = "results",
    overrides: SetOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the cells and their offered load; run nothing.")
    ] = False,
    no_analyze: Annotated[
        bool, typer.Option("--no-analyze", help="Skip the Spark analysis at the end.")
    ] = False,
    only: Annotated[
        list[str] | None, typer.Option("--only", metavar="CELL", help="Run only this cell id.")
    ] = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master for the analysis.")
    ] = None,
    spark_master: Annotated[
        str | None,
        typer.Option(
            "--spark-master",
            metavar="URL",
            help="Generate the load as a Spark barrier stage on this master "
            "(sets generator.engine=spark, generator.master=URL; docs/distributed.md).",
        ),
    ] = None,
    bind: Annotated[
        str | None,
        typer.Option(
            "--bind",
            metavar="ADDRESS",
            help="Address brokers and the fault proxy listen on (sets broker.host; "
            "default loopback).",
        ),
    ] = None,
    wide: WideOption = False,
    fmt: FormatOption = "table",
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help=f"Exit with code {STRICT_EXIT_CODE} when any cell is invalid (generator "
            "saturated, broker exited, sends failed, records truncated), for CI.",
        ),
    ] = False,
    metrics: Annotated[
        str | None,
        typer.Option(
            "--metrics",
            metavar="ADDRESS",
            help="Serve OpenMetrics at http://ADDRESS/metrics while the run goes on "
            "(PORT or HOST:PORT; host 127.0.0.1 by default; docs/results.md).",
        ),
    ] = None,
) -> None:
    """Run a scenario: start brokers, drive open-loop load, record, analyse.

    Example: mqbench run scenarios/quickstart.yaml --set workload.duration=10s
    """

    def go() -> int:
        from mqbench.calibration.use import check_run
        from mqbench.scenario.loader import load_scenario
        from mqbench.scenario.matrix import expand

        view = View(parse_format(fmt), wide)
        out_root = parse_location(out)
        settings = list(overrides or [])
        if spark_master is not None:
            settings += ["generator.engine=spark", f"generator.master={spark_master}"]
        if bind is not None:
            settings.append(f"broker.host={bind}")
        scenario, source = load_scenario(scenario_file, settings)
        cells = expand(scenario)
        selected = set(only or [])
        if selected:
            unknown = selected - {c.id for c in cells}
            if unknown:
                raise UsageError(
                    f"--only {sorted(unknown)[0]!r}: no such cell (see the ids with --dry-run)"
                )
        chosen = [c for c in cells if not selected or c.id in selected]
        check = check_run(scenario, chosen)
        if dry_run:
            from mqbench.workload.outline import outline
            from mqbench.workload.preflight import preflight

            preflight(scenario, chosen, out_root, source=str(scenario_file))
            _print_outline(scenario, outline(scenario, chosen, out_root))
            _print_calibration_notes(check, console)
            _print_runtime_notes(scenario, console)
            return 0
        _print_calibration_notes(check, people(view.fmt))
        _print_runtime_notes(scenario, people(view.fmt))
        _print_core_note(scenario, people(view.fmt))
        run_args = RunArgs(source, out_root, selected, no_analyze, master, view)
        if metrics is None:
            return _run(scenario, run_args, check, strict)
        from mqbench.workload.live_metrics import parse_address
        from mqbench.workload.metrics_endpoint import MetricsEndpoint

        with MetricsEndpoint(*parse_address(metrics)) as endpoint:
            err_console.print(f"metrics: {endpoint.url}")
            return _run(scenario, run_args, check, strict, endpoint)

    code = guarded(go)
    if code:
        sys.exit(code)


def _print_calibration_notes(check: CalibrationCheck, target: Console) -> None:
    """One line per cell above its client's calibrated ceiling (and a stale calibration)."""
    for line in check.notes():
        target.print(Text.assemble(("warning: ", "yellow"), line))


OUTLINE_COLUMNS: Final = (
    Column("cell", "left"),
    Column("topology", "left", drop=4),
    Column("msg/s\nper pub"),
    Column("payload\n(B)"),
    Column("QoS"),
    Column("offered\nmsg/s"),
    Column("delivered\nmsg/s"),
    Column("offered\nMB/s", drop=3),
    Column("conns"),
    Column("workers", drop=2),
    Column("time"),
    Column("records", drop=1),
)


def _print_runtime_notes(scenario: Any, target: Console) -> None:
    """One line per limit the runtime gives less of than asked (e.g. Docker's nofile)."""
    from mqbench.workload.preflight import runtime_notes

    for line in runtime_notes(scenario):
        target.print(Text.assemble(("note: ", "yellow"), line))


def _print_core_note(scenario: Any, target: Console) -> None:
    """One line when a stale compiled core leaves the run to the Python engine (``--dry-run``
    says it in its hot path line instead)."""
    from mqbench.workload.hot_path import stale_core_note

    note = stale_core_note(scenario)
    if note is not None:
        target.print(Text.assemble(("warning: ", "yellow"), note))


def _print_outline(scenario: Any, plan: RunOutline) -> None:
    from mqbench.workload.capacity import human_bytes

    rows: list[list[str | Text]] = []
    for row in plan.cells:
        c = row.cell
        rows.append(
            [
                Text(c.id, style="bold"),
                f"{c.topology} {c.size_label}",
                f"{c.rate:g}",
                f"{c.payload_bytes:,}",
                str(c.qos),
                f"{c.offered_rate:,.0f}",
                f"{c.expected_delivery_rate:,.0f}",
                f"{c.offered_bytes_per_s / 1e6:,.2f}",
                f"{c.connections:,}",
                f"{row.workers} {row.layout}",
                f"{c.warmup_s:g}+{c.duration_s:g}s",
                human_bytes(row.record_bytes),
            ]
        )
    table = layout(OUTLINE_COLUMNS, rows, table_width())
    console.print(Text(f"{scenario.name}: {len(plan.cells)} cell(s)", style="bold"))
    print_lines(table.lines)
    if table.dropped:
        console.print(f"not shown at this width: {', '.join(table.dropped)}", style="dim")
    for line in hot_path_lines(plan):
        console.print(line)
    note = f"load time at least {plan.load_s:.0f} s (plus broker start-up and analysis)"
    if scenario.search is not None:
        note += f"; search over {scenario.search.axis} stops early at the first failing step"
    console.print(note)
    verdict = "fits" if plan.fits else "[bold red]does not fit[/]: `run` will refuse"
    console.print(
        f"results: about {human_bytes(plan.result_bytes)} (records 24 B x (sends + "
        f"deliveries + acks)); {plan.disk} has {human_bytes(plan.free_bytes)} free: {verdict}"
    )


def hot_path_lines(plan: RunOutline) -> list[str]:
    """Which engine runs the cells' hot path: one line per engine and reason."""
    groups: dict[tuple[str, str], list[str]] = {}
    for row in plan.cells:
        entry = row.hot_path
        reason = "" if entry.engine == "compiled" else entry.reason
        groups.setdefault((entry.engine, reason), []).append(row.cell.id)
    lines = []
    for (engine, reason), ids in groups.items():
        name = "compiled core" if engine == "compiled" else "Python engine"
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        why = f" ({reason})" if reason else ""
        lines.append(f"hot path: {name} on {len(ids)} cell(s){why}: {shown}")
    return lines


@dataclass(frozen=True)
class RunArgs:
    """What ``run`` passes on from its command line."""

    source: ScenarioSource
    out: Path | RemoteRoot
    selected: set[str]
    no_analyze: bool
    master: str | None
    view: View


def _run(
    scenario: Any,
    args: RunArgs,
    check: CalibrationCheck,
    strict: bool,
    endpoint: MetricsEndpoint | None = None,
) -> int:
    from mqbench.analysis.numpy_ref import analyze_cell_numpy
    from mqbench.cli.progress import RichReporter
    from mqbench.records.manifest import command_line
    from mqbench.workload.run import discard_staging, run_scenario

    target = people(args.view.fmt)
    selected = args.selected
    result = run_scenario(
        scenario,
        source=args.source,
        out_root=args.out,
        argv=command_line(),
        reporter=endpoint.reporter(RichReporter(target)) if endpoint else RichReporter(target),
        only=(lambda c: c.id in selected) if selected else None,
        calibration=check.manifest_record(),
        evaluate=analyze_cell_numpy,
        timing=check.timing_hints(),
    )
    analysis = None
    try:
        if not args.no_analyze and any(c.status == "completed" for c in result.cells):
            local = result.result_dir if result.published is not None else None
            where: Path | RemoteRoot = result.published or result.result_dir
            states = _states(result.status, result.cells)
            analysis = _analyze(
                where, result.location, args.master, {}, args.view, local=local, extra=states
            )
        elif args.view.fmt != "table":
            _print_states(result.location, result.status, result.cells, args.view)
    finally:
        if result.staging is not None:
            discard_staging(result.staging)
    _print_cell_states(result.cells, target)
    if result.status != "completed":
        target.print(Text.assemble(("run: ", "bold"), (result.status, "bold yellow")))
    target.print(f"results: [bold]{result.location}[/]")
    failure = result.failure()
    if failure is not None:
        raise failure
    if strict:
        return _strict_code(result.cells, analysis, target)
    return 0


def _states(status: str, cells: Sequence[CellEntry]) -> dict[str, Any]:
    """The run's status and how each cell ended (``run --format json``)."""
    return {
        "status": status,
        "states": [{"cell_id": c.id, "status": c.status, "error": c.error} for c in cells],
    }


def _print_states(location: str, status: str, cells: Sequence[CellEntry], view: View) -> None:
    """Machine output of a run that was not analysed: how each cell ended."""
    states = _states(status, cells)
    if view.fmt == "json":
        write_raw(to_json({"results": location, "cells": [], "faults": {}, **states}))
    else:
        write_raw(to_csv(states["states"]))


def _print_cell_states(cells: Sequence[CellEntry], target: Console) -> None:
    """One line per cell that did not complete (the table has rows for completed ones)."""
    for cell in cells:
        if cell.status in ("completed", "skipped"):
            continue
        detail = f": {cell.error}" if cell.error else ""
        target.print(Text.assemble((f"{cell.id}: ", "bold"), (cell.status, "yellow"), detail))


def _strict_code(cells: Sequence[CellEntry], analysis: RunAnalysis | None, target: Console) -> int:
    """``--strict``: the exit code for a run with invalid cells, with one line saying which."""
    invalid = [s.cell_id for s in analysis.summaries if not s.valid] if analysis else []
    if analysis is None:  # not analysed: what the run itself knows
        invalid = [
            c.id
            for c in cells
            if c.broker_exit is not None or (c.generator is not None and c.generator.saturated)
        ]
    if not invalid:
        return 0
    more = f" (+{len(invalid) - 1} more)" if len(invalid) > 1 else ""
    target.print(
        Text.assemble(
            ("error: ", "bold red"),
            f"--strict: cell {invalid[0]!r} is invalid{more}; see its mark under the table",
        )
    )
    return STRICT_EXIT_CODE


def _analyze(
    where: Path | RemoteRoot,
    location: str,
    master: str | None,
    conf: dict[str, str],
    view: View,
    approx: bool = False,
    local: Path | None = None,
    extra: dict[str, Any] | None = None,
) -> RunAnalysis:
    """Analyse a run folder (local or on a URI) and print it: the one path for both."""
    from mqbench.cli.progress import AnalysisReporter

    notes: list[str] = []
    with AnalysisReporter(people(view.fmt)) as reporter:
        if isinstance(where, RemoteRoot):
            from mqbench.analysis.remote import analyze_remote

            remote = analyze_remote(
                where,
                local=local,
                master=master,
                conf=conf,
                approx=approx,
                on_progress=reporter.update,
            )
            analysis = remote.analysis
            notes = [f"{where.child(rel)} existed: not overwritten" for rel in remote.kept]
        else:
            from mqbench.analysis.api import analyze_results

            analysis = analyze_results(
                where, master=master, conf=conf, approx=approx, on_progress=reporter.update
            )
    print_analysis(analysis, location, view, notes, extra)
    return analysis


@app.command()
def analyze(
    result_dir: Annotated[
        str,
        typer.Argument(
            metavar="RESULT_DIR",
            help="A run's folder: a path or a Hadoop-compatible URI (hdfs://, s3a://, file://).",
        ),
    ],
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master URL (default local[*]).")
    ] = None,
    conf: Annotated[
        list[str] | None,
        typer.Option("--conf", metavar="KEY=VALUE", help="Spark configuration, repeatable."),
    ] = None,
    approx: Annotated[
        bool,
        typer.Option("--approx", help="Approximate percentiles (relative error < 0.79%)."),
    ] = False,
    wide: WideOption = False,
    fmt: FormatOption = "table",
) -> None:
    """Analyse a result folder with PySpark: summary.json per cell, summary.parquet per run.

    Example: mqbench analyze results/quickstart/20261122T050102Z-1a2b3c --master local[2]
    """

    def go() -> None:
        view = View(parse_format(fmt), wide)
        where = parse_location(result_dir)
        _analyze(where, str(where), master, _parse_conf(conf), view, approx)

    guarded(go)


@scenario_app.command("validate")
def scenario_validate(
    scenario_file: Annotated[Path, typer.Argument(metavar="FILE", help="Scenario YAML file.")],
    overrides: SetOption = None,
    out: Annotated[
        str,
        typer.Option("--out", help="Root folder (or URI) results would go to (disk space)."),
    ] = "results",
) -> None:
    """Check a scenario file without running anything: everything `run` checks before it
    starts (keys, values, targets installed, broker options, QoS and other client
    capabilities, topologies, load that fits the machine, disk space)."""

    def go() -> None:
        from mqbench.scenario.loader import load_scenario
        from mqbench.workload.preflight import preflight

        scenario, _ = load_scenario(scenario_file, overrides or [])
        where = parse_location(out)
        cells = preflight(scenario, out_root=where, source=str(scenario_file))
        console.print(f"{scenario_file}: ok ({len(cells)} cell(s))")
        _print_runtime_notes(scenario, console)

    guarded(go)


@app.command()
def targets(fmt: FormatOption = "table") -> None:
    """List every known target and which runtimes can run it on this machine."""

    def go() -> None:
        from mqbench.brokers.runtime.availability import LISTED_RUNTIMES, target_availability

        view = View(parse_format(fmt))
        rows = target_availability()
        if view.fmt != "table":
            data = [
                {
                    "target": row.target.name,
                    "protocol": row.target.transport,
                    "broker": row.target.broker,
                    **{name: row.runtimes[name].available for name in LISTED_RUNTIMES},
                    **{
                        f"{name}_reason": row.runtimes[name].reason
                        for name in LISTED_RUNTIMES
                        if row.runtimes[name].reason
                    },
                    **{f"{name}_verified": line for name, line in row.verified.items()},
                }
                for row in rows
            ]
            write_raw(to_json(data) if view.fmt == "json" else to_csv(data))
            return
        _print_targets(rows, LISTED_RUNTIMES)

    guarded(go)


def _print_targets(rows: Sequence[TargetAvailability], runtimes: Sequence[str]) -> None:
    columns = [Column("target", "left"), Column("protocol", "left"), Column("broker", "left")]
    columns += [Column(name, "left") for name in runtimes]
    reasons: dict[str, list[tuple[str, str]]] = {name: [] for name in runtimes}
    notes: list[str] = []
    cells: list[list[str | Text]] = []
    for row in rows:
        marks: list[str | Text] = []
        for name in runtimes:
            availability = row.runtimes[name]
            if availability.available:
                marks.append(Text("yes", style="green"))
                if availability.reason:  # e.g. docker: an image that is not here yet
                    notes.append(f"  {row.target.name} ({name}): {availability.reason}")
            else:
                marks.append(Text("no", style="dim"))
                reasons[name].append((row.target.name, availability.reason or "not available"))
        cells.append(
            [Text(row.target.name, style="bold"), row.target.transport, row.target.broker, *marks]
        )
    console.print(Text("targets", style="bold"))
    print_lines(layout(columns, cells, table_width()).lines)
    for runtime_name, lines in reasons.items():
        texts = {text for _, text in lines}
        if len(texts) == 1 and len(lines) > 1:
            console.print(f"{runtime_name}: not available: {texts.pop()}")
        elif lines:
            console.print(f"{runtime_name}, why not:")
            for name, text in lines:
                console.print(f"  {name}: {text}")
    if notes:
        console.print("notes:")
        for line in notes:
            console.print(line, markup=False)
    verified = [
        (row.target.name, row.verified["docker"]) for row in rows if "docker" in row.verified
    ]
    if verified:
        console.print("docker, what was verified here:")
        for name, line in verified:
            console.print(f"  {name}: {line}", markup=False)
    console.print("external: any target, with broker.port (and broker.pid to sample) set")


@app.command()
def version() -> None:
    """Print the mqbench version."""
    console.print(f"mqbench {__version__}")


app.command()(report)
app.command()(history)
app.command()(compare)
app.command()(calibrate)


def main() -> None:
    """Console-script entry point."""
    app()
