"""``mqbench``: run scenarios, analyse results, validate scenarios, list targets."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mqbench import __version__
from mqbench.cli.broker_cmd import broker_app
from mqbench.cli.brokers_cmd import brokers_app
from mqbench.cli.calibrate_cmd import calibrate
from mqbench.cli.errors import guarded
from mqbench.cli.report_cmd import compare, report
from mqbench.errors import UsageError
from mqbench.records.hadoop_fs import RemoteRoot, parse_location

if TYPE_CHECKING:
    from mqbench.calibration.use import CalibrationCheck
    from mqbench.workload.outline import RunOutline

# Piped output (CI logs, files) gets a wide console so tables are not squeezed to 80 columns.
console = Console(
    highlight=False,
    soft_wrap=True,
    width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 200,
)

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
) -> None:
    """Run a scenario: start brokers, drive open-loop load, record, analyse.

    Example: mqbench run scenarios/quickstart.yaml --set workload.duration=10s
    """

    def go() -> None:
        from mqbench.calibration.use import check_run
        from mqbench.scenario.loader import load_scenario
        from mqbench.scenario.matrix import expand

        out_root = parse_location(out)
        settings = list(overrides or [])
        if spark_master is not None:
            settings += ["generator.engine=spark", f"generator.master={spark_master}"]
        if bind is not None:
            settings.append(f"broker.host={bind}")
        scenario, data = load_scenario(scenario_file, settings)
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
            _print_calibration_notes(check)
            _print_runtime_notes(scenario)
            return
        _print_calibration_notes(check)
        _print_runtime_notes(scenario)
        _run(scenario, data, scenario_file, out_root, selected, no_analyze, master, check)

    guarded(go)


def _print_calibration_notes(check: CalibrationCheck) -> None:
    """One line per cell above its client's calibrated ceiling (and a stale calibration)."""
    for line in check.notes():
        console.print(Text.assemble(("warning: ", "yellow"), line))


def _print_runtime_notes(scenario: Any) -> None:
    """One line per limit the runtime gives less of than asked (e.g. Docker's nofile)."""
    from mqbench.workload.preflight import runtime_notes

    for line in runtime_notes(scenario):
        console.print(Text.assemble(("note: ", "yellow"), line))


def _print_outline(scenario: Any, plan: RunOutline) -> None:
    from mqbench.workload.capacity import human_bytes

    table = Table(title=f"{scenario.name}: {len(plan.cells)} cell(s)", title_justify="left")
    columns = (
        "cell",
        "topology",
        "msg/s/pub",
        "payload",
        "QoS",
        "offered msg/s",
        "delivered msg/s",
        "offered MB/s",
        "conns",
        "workers",
        "time",
        "records",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("cell", "topology") else "right")
    for row in plan.cells:
        c = row.cell
        table.add_row(
            c.id,
            f"{c.topology} {c.size_label}",
            f"{c.rate:g}",
            str(c.payload_bytes),
            str(c.qos),
            f"{c.offered_rate:,.0f}",
            f"{c.expected_delivery_rate:,.0f}",
            f"{c.offered_bytes_per_s / 1e6:,.2f}",
            f"{c.connections:,}",
            f"{row.workers} {row.layout}",
            f"{c.warmup_s:g}+{c.duration_s:g}s",
            human_bytes(row.record_bytes),
        )
    console.print(table)
    note = f"load time at least {plan.load_s:.0f} s (plus broker start-up and analysis)"
    if scenario.search is not None:
        note += f"; search over {scenario.search.axis} stops early at the first failing step"
    console.print(note)
    verdict = "fits" if plan.fits else "[bold red]does not fit[/]: `run` will refuse"
    console.print(
        f"results: about {human_bytes(plan.result_bytes)} (records 24 B x (sends + "
        f"deliveries + acks)); {plan.disk} has {human_bytes(plan.free_bytes)} free: {verdict}"
    )


def _run(
    scenario: Any,
    data: dict[str, Any],
    scenario_file: Path,
    out: Path | RemoteRoot,
    selected: set[str],
    no_analyze: bool,
    master: str | None,
    check: CalibrationCheck,
) -> None:
    from mqbench.analysis.numpy_ref import analyze_cell_numpy
    from mqbench.cli.progress import RichReporter
    from mqbench.records.manifest import command_line
    from mqbench.workload.run import discard_staging, run_scenario

    result = run_scenario(
        scenario,
        scenario_file=str(scenario_file),
        scenario_data=data,
        out_root=out,
        argv=command_line(),
        reporter=RichReporter(console),
        only=(lambda c: c.id in selected) if selected else None,
        calibration=check.manifest_record(),
        evaluate=analyze_cell_numpy,
        timing=check.timing_hints(),
    )
    try:
        if not no_analyze and any(c.status == "completed" for c in result.cells):
            if result.published is not None:
                _analyze_remote(result.published, master, {}, local=result.result_dir)
            else:
                _analyze(result.result_dir, master, {})
    finally:
        if result.staging is not None:
            discard_staging(result.staging)
    console.print(f"results: [bold]{result.location}[/]")
    failure = result.failure()
    if failure is not None:
        raise failure


def _analyze(
    result_dir: Path, master: str | None, conf: dict[str, str], approx: bool = False
) -> None:
    from mqbench.analysis.api import analyze_results
    from mqbench.cli.progress import AnalysisReporter
    from mqbench.cli.tables import backlog_notes, fault_table, summary_table

    with AnalysisReporter(console) as reporter:
        analysis = analyze_results(
            result_dir, master=master, conf=conf, approx=approx, on_progress=reporter.update
        )
    if analysis.recovered:
        console.print(Text.assemble(("note: ", "yellow"), analysis.recovered))
    console.print(summary_table(analysis.summaries))
    for line in backlog_notes(analysis.summaries):
        console.print(line)
    if analysis.faults:
        console.print(fault_table(analysis.faults))


def _analyze_remote(
    folder: RemoteRoot,
    master: str | None,
    conf: dict[str, str],
    approx: bool = False,
    local: Path | None = None,
) -> None:
    from mqbench.analysis.remote import analyze_remote
    from mqbench.cli.progress import AnalysisReporter
    from mqbench.cli.tables import fault_table, summary_table

    with AnalysisReporter(console) as reporter:
        remote = analyze_remote(
            folder,
            local=local,
            master=master,
            conf=conf,
            approx=approx,
            on_progress=reporter.update,
        )
    if remote.analysis.recovered:
        console.print(Text.assemble(("note: ", "yellow"), remote.analysis.recovered))
    console.print(summary_table(remote.analysis.summaries))
    if remote.analysis.faults:
        console.print(fault_table(remote.analysis.faults))
    for rel in remote.kept:
        console.print(
            Text.assemble(("note: ", "yellow"), f"{folder.child(rel)} existed: not overwritten")
        )


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
) -> None:
    """Analyse a result folder with PySpark: summary.json per cell, summary.parquet per run.

    Example: mqbench analyze results/quickstart/20261122T050102Z-1a2b3c --master local[2]
    """

    def go() -> None:
        where = parse_location(result_dir)
        if isinstance(where, RemoteRoot):
            _analyze_remote(where, master, _parse_conf(conf), approx)
        else:
            _analyze(where, master, _parse_conf(conf), approx)

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
        _print_runtime_notes(scenario)

    guarded(go)


@app.command()
def targets() -> None:
    """List every known target and which runtimes can run it on this machine."""

    def go() -> None:
        from mqbench.brokers.runtime.availability import LISTED_RUNTIMES, target_availability

        rows = target_availability()
        table = Table(title="targets", title_justify="left")
        for column in ("target", "protocol", "broker", *LISTED_RUNTIMES):
            table.add_column(column)
        reasons: dict[str, list[str]] = {name: [] for name in LISTED_RUNTIMES}
        for row in rows:
            marks = []
            for name in LISTED_RUNTIMES:
                availability = row.runtimes[name]
                if availability.available:
                    marks.append("[green]yes[/]")
                else:
                    marks.append("[dim]no[/]")
                    reasons[name].append(f"{row.target.name}: {availability.reason}")
            table.add_row(row.target.name, row.target.transport, row.target.broker, *marks)
        console.print(table)
        for runtime_name, lines in reasons.items():
            if not lines:
                continue
            texts = {line.split(": ", 1)[1] for line in lines}
            if len(texts) == 1 and len(lines) > 1:
                console.print(f"{runtime_name}: not available: {texts.pop()}")
            else:
                console.print(f"{runtime_name}, why not:")
                for line in lines:
                    console.print(f"  {line}")
        console.print("external: any target, with broker.port (and broker.pid to sample) set")

    guarded(go)


@app.command()
def version() -> None:
    """Print the mqbench version."""
    console.print(f"mqbench {__version__}")


app.command()(report)
app.command()(compare)
app.command()(calibrate)


def main() -> None:
    """Console-script entry point."""
    app()
