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

if TYPE_CHECKING:
    from mqbench.calibration.use import CalibrationCheck

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
    out: Annotated[Path, typer.Option("--out", help="Root folder for results.")] = Path("results"),
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
) -> None:
    """Run a scenario: start brokers, drive open-loop load, record, analyse.

    Example: mqbench run scenarios/quickstart.yaml --set workload.duration=10s
    """

    def go() -> None:
        from mqbench.scenario.loader import load_scenario
        from mqbench.scenario.matrix import expand

        scenario, data = load_scenario(scenario_file, overrides or [])
        cells = expand(scenario)
        selected = set(only or [])
        if selected:
            unknown = selected - {c.id for c in cells}
            if unknown:
                raise UsageError(
                    f"--only {sorted(unknown)[0]!r}: no such cell (see the ids with --dry-run)"
                )
        chosen = [c for c in cells if not selected or c.id in selected]
        check = _check_calibration(scenario, chosen)
        if dry_run:
            from mqbench.workload.run import check_load

            check_load(scenario, chosen)
            _print_cells(scenario, chosen, out)
            _print_calibration_notes(check)
            return
        _print_calibration_notes(check)
        _run(scenario, data, scenario_file, out, selected, no_analyze, master, check)

    guarded(go)


def _check_calibration(scenario: Any, cells: list[Any]) -> CalibrationCheck:
    """The calibration ``run`` finds (docs/calibration.md) checked against ``cells``."""
    from mqbench.calibration.store import default_path, load
    from mqbench.calibration.use import check_cells

    return check_cells(scenario, cells, load(default_path()), os.cpu_count() or 1)


def _print_calibration_notes(check: CalibrationCheck) -> None:
    """One line per cell above its client's calibrated ceiling (and a stale calibration)."""
    for line in check.notes():
        console.print(Text.assemble(("warning: ", "yellow"), line))


def _print_cells(scenario: Any, cells: list[Any], out: Path) -> None:
    from mqbench.workload.capacity import (
        RESERVE_BYTES,
        free_bytes,
        human_bytes,
        record_bytes,
        result_bytes,
    )
    from mqbench.workload.plan import process_count, resolve_layout, worker_count

    table = Table(title=f"{scenario.name}: {len(cells)} cell(s)", title_justify="left")
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
    total_s = 0.0
    for c in cells:
        workers = worker_count(scenario.generator.workers, c.connections, os.cpu_count() or 1)
        layout = resolve_layout(scenario.generator.layout, c)
        workers = process_count(layout, workers, c.publishers, c.subscribers)
        seconds = c.warmup_s + c.duration_s + c.drain_s
        total_s += seconds
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
            f"{workers} {layout}",
            f"{c.warmup_s:g}+{c.duration_s:g}s",
            human_bytes(record_bytes(c)),
        )
    console.print(table)
    note = f"load time at least {total_s:.0f} s (plus broker start-up and analysis)"
    if scenario.search is not None:
        note += f"; search over {scenario.search.axis} stops early at the first failing step"
    console.print(note)
    where, free = free_bytes(out)
    need = result_bytes(cells) + RESERVE_BYTES
    verdict = "fits" if need <= free else "[bold red]does not fit[/]: `run` will refuse"
    console.print(
        f"results: about {human_bytes(need)} (records 24 B x (sends + deliveries + acks)); "
        f"{where} has {human_bytes(free)} free: {verdict}"
    )


def _run(
    scenario: Any,
    data: dict[str, Any],
    scenario_file: Path,
    out: Path,
    selected: set[str],
    no_analyze: bool,
    master: str | None,
    check: CalibrationCheck,
) -> None:
    from mqbench.cli.progress import RichReporter
    from mqbench.records.manifest import command_line
    from mqbench.workload.run import run_scenario

    result = run_scenario(
        scenario,
        scenario_file=str(scenario_file),
        scenario_data=data,
        out_root=out,
        argv=command_line(),
        reporter=RichReporter(console),
        only=(lambda c: c.id in selected) if selected else None,
        manifest_extra={"calibration": check.manifest_record()},
    )
    if not no_analyze and any(c["status"] == "completed" for c in result.cells):
        _analyze(result.result_dir, master, {})
    console.print(f"results: [bold]{result.result_dir}[/]")
    from mqbench.errors import MqbenchError

    if result.failed_cells:
        first = result.failed_cells[0]
        raise MqbenchError(
            f"{len(result.failed_cells)} of {len(result.cells)} cell(s) failed; "
            f"{first['id']}: {first['error']}"
        )
    if result.broker_exits:
        first = result.broker_exits[0]
        raise MqbenchError(
            f"the broker died in {len(result.broker_exits)} of {len(result.cells)} cell(s); "
            f"{first['id']}: {first['broker_exit'].get('reason', 'exited')} "
            f"(exit code {first['broker_exit'].get('exit_code')}); results are marked invalid"
        )


def _analyze(
    result_dir: Path, master: str | None, conf: dict[str, str], approx: bool = False
) -> None:
    from mqbench.analysis.api import analyze_run
    from mqbench.analysis.faults import write_fault_metrics
    from mqbench.cli.tables import fault_table, summary_table
    from mqbench.records.results import read_manifest

    console.print("analysing with Spark ...")
    summaries = analyze_run(result_dir, master=master, conf=conf, approx=approx)
    console.print(summary_table(summaries))
    faults = {}
    for cell in read_manifest(result_dir)["cells"]:
        if cell.get("status") in ("completed", "interrupted") and cell.get("schedule"):
            metrics = write_fault_metrics(cell, result_dir / "cells" / cell["id"])
            if metrics is not None:
                faults[cell["id"]] = metrics
    if faults:
        console.print(fault_table(faults))


@app.command()
def analyze(
    result_dir: Annotated[Path, typer.Argument(metavar="RESULT_DIR", help="A run's folder.")],
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
    guarded(lambda: _analyze(result_dir, master, _parse_conf(conf), approx))


@scenario_app.command("validate")
def scenario_validate(
    scenario_file: Annotated[Path, typer.Argument(metavar="FILE", help="Scenario YAML file.")],
    overrides: SetOption = None,
) -> None:
    """Check a scenario file (keys, values, targets, QoS) without running anything."""

    def go() -> None:
        from mqbench.errors import ScenarioError
        from mqbench.scenario.loader import load_scenario
        from mqbench.scenario.matrix import expand
        from mqbench.workload.run import check_load

        scenario, _ = load_scenario(scenario_file, overrides or [])
        cells = expand(scenario)
        try:
            check_load(scenario, cells)
        except ScenarioError as exc:
            raise type(exc)(f"{scenario_file}: {exc}") from None
        console.print(f"{scenario_file}: ok ({len(cells)} cell(s))")

    guarded(go)


@app.command()
def targets() -> None:
    """List every known target and which runtimes can run it on this machine."""

    def go() -> None:
        from mqbench.brokers.registry import get_target, target_names
        from mqbench.brokers.runtimes import get_runtime

        runtimes = [get_runtime(name) for name in ("native", "docker")]
        table = Table(title="targets", title_justify="left")
        for column in ("target", "protocol", "broker", *(r.name for r in runtimes)):
            table.add_column(column)
        reasons: dict[str, list[str]] = {r.name: [] for r in runtimes}
        for target in (get_target(n) for n in target_names()):
            marks = []
            for runtime in runtimes:
                availability = runtime.availability(target.name)
                if availability.available:
                    marks.append("[green]yes[/]")
                else:
                    marks.append("[dim]no[/]")
                    reasons[runtime.name].append(f"{target.name}: {availability.reason}")
            table.add_row(target.name, target.transport, target.broker, *marks)
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
