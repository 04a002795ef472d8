"""``mqbench report`` and ``mqbench compare`` (registered in app.py with one line each)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from mqbench.cli.errors import guarded
from mqbench.cli.output import err_console, print_lines, table_width
from mqbench.cli.tables import compare_view
from mqbench.errors import MqbenchError, UsageError
from mqbench.records.hadoop_fs import RemoteRoot, parse_location


def _write(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write ({exc.strerror})") from None
    err_console.print(f"wrote {out}")


def _local_folder(text: str, command: str) -> Path:
    """``text`` as a local folder; a URI is refused in one line (the reason and the way)."""
    where = parse_location(text)
    if isinstance(where, RemoteRoot):
        raise UsageError(
            f"{text}: {command} reads local result folders only; fetch the run folder first "
            "(e.g. hdfs dfs -get) — mqbench analyze reads and writes URIs"
        )
    return where


def report(
    result_dirs: Annotated[
        list[str], typer.Argument(metavar="RESULT_DIR...", help="One or more result folders.")
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="Table format: md, latex (fits a column), latex-wide (table*), csv (one number "
            "per column) or html (one self-contained page with figures and run metadata).",
        ),
    ] = "md",
    figures: Annotated[
        Path | None,
        typer.Option("--figures", metavar="DIR", help="Also write figures (PNG and PDF) here."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", metavar="FILE", help="Write the tables to FILE.")
    ] = None,
    allow_mixed: Annotated[
        bool,
        typer.Option("--allow-mixed", help="Allow result folders of different scenarios."),
    ] = False,
) -> None:
    """Paper-style tables (and figures) from analysed result folders.

    Cells without a summary are analysed first with the numpy engine (up to 1 GiB of
    records; bigger runs need `mqbench analyze`).

    Example: mqbench report results/quickstart/20261122T050102Z-1a2b3c --figures figs
    """

    def go() -> None:
        from mqbench.report.build import build_report

        folders = [_local_folder(text, "report") for text in result_dirs]
        result = build_report(folders, fmt, figures, allow_mixed)
        for note in result.notes:
            err_console.print(f"note: {note}")
        _write(result.text, out)
        if result.figure_files:
            err_console.print(f"figures: {len(result.figure_files)} file(s) in {figures}")

    guarded(go)


COMPARE_FORMATS = ("text", "json", "junit", "markdown")


def compare(
    baseline: Annotated[str, typer.Argument(metavar="BASELINE", help="Baseline result folder.")],
    current: Annotated[str, typer.Argument(metavar="CURRENT", help="Current result folder.")],
    threshold: Annotated[
        str | None,
        typer.Option(
            "--threshold",
            metavar="METRIC=[+|-]N[%],...",
            help="Tolerated worsening per metric; replaces the scenario's gate: thresholds "
            "(default throughput=-5%,p95=+10%,loss=+0.1). "
            "Metrics: throughput, p50, p95, p99, p999, loss, ack_p95, cpu, rss.",
        ),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="Output: text, json, junit or markdown.")
    ] = "text",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Write the result to FILE (on every exit, errors too); the text verdict is "
            "still printed.",
        ),
    ] = None,
    allow_generator_bound: Annotated[
        bool,
        typer.Option(
            "--allow-generator-bound",
            help="Judge latency (p50..p999) even where the generator's send lag shaped it.",
        ),
    ] = False,
    allow_invalid: Annotated[
        bool,
        typer.Option(
            "--allow-invalid",
            help="Compare even when cells are invalid (broker exited, generator saturated, "
            "sends failed, records truncated); otherwise compare refuses with exit code 4.",
        ),
    ] = False,
    allow_mixed: Annotated[
        bool,
        typer.Option(
            "--allow-mixed",
            help="Compare runs of differently named scenarios; otherwise exit code 4.",
        ),
    ] = False,
    fail_on_missing: Annotated[
        bool,
        typer.Option(
            "--fail-on-missing",
            help="Exit with code 4 when a cell is in one run only or a metric has no value.",
        ),
    ] = False,
) -> None:
    """Compare CURRENT with BASELINE per cell and metric; exit code 3 on a regression.

    Noise aware when cells have repeats (see docs/ci.md); without repeats a latency change
    within the timing noise both runs measured (send lag, machine wake-up: the floor
    column) is not judged. Exit code 4 when the gate cannot
    judge honestly: no cell is in both runs; the scenario names differ (unless
    --allow-mixed); a cell is invalid on either side (unless --allow-invalid); a cell or
    metric is missing with --fail-on-missing; or nothing regressed but a latency metric was
    refused because the generator's send lag shaped it (unless --allow-generator-bound).
    Thresholds come from --threshold, else the scenario's gate:, else the defaults.

    Example: mqbench compare ci/baseline results/ci-smoke/20261122T050102Z-1a2b3c
    """

    def go() -> int:
        from mqbench.analysis.compare import Options, compare_runs, parse_thresholds

        thresholds = None if threshold is None else parse_thresholds(threshold)
        options = Options(allow_generator_bound, allow_invalid, allow_mixed, fail_on_missing)
        result = compare_runs(
            _local_folder(baseline, "compare"),
            _local_folder(current, "compare"),
            thresholds,
            options=options,
        )
        if fmt != "text" or out is not None:
            rendered = {
                "text": result.to_text,
                "json": result.to_json,
                "junit": result.to_junit,
                "markdown": result.to_markdown,
            }[fmt]()
            _write(rendered, out)
        if out is not None or fmt == "text":
            print_lines(compare_view(result, table_width()))
        return result.exit_code

    def guarded_go() -> int:
        if fmt not in COMPARE_FORMATS:
            raise UsageError(f"--format {fmt!r}: choose {', '.join(COMPARE_FORMATS)}")
        try:
            return go()
        except MqbenchError as exc:
            _write_error(fmt, out, baseline, current, exc)
            raise

    code = guarded(guarded_go)
    if code:
        sys.exit(code)


def _write_error(
    fmt: str, out: Path | None, baseline: str, current: str, exc: MqbenchError
) -> None:
    """Every exit writes the requested output: a machine format gets an ``error`` document
    (on stdout, or in ``--out``), so a CI step that uploads it always finds one."""
    from mqbench.analysis.compare_output import error_output

    if fmt == "text":
        return
    text = error_output(fmt, baseline, current, str(exc), exc.exit_code)
    # --out itself may be what cannot be written: the original error is the one to report
    with contextlib.suppress(UsageError):
        _write(text, out)


def history(
    result_dirs: Annotated[
        list[str],
        typer.Argument(metavar="RESULT_DIR...", help="Two or more result folders (any order)."),
    ],
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            metavar="M,...",
            help="Metrics to follow (default throughput,p50,p99): throughput, p50, p95, p99, "
            "p999, max, loss, cpu, rss.",
        ),
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            metavar="PCT",
            help="A change larger than PCT % whose 95 % intervals do not overlap is a step.",
        ),
    ] = 10.0,
    fmt: Annotated[str, typer.Option("--format", help="Output: text, csv or json.")] = "text",
    figure: Annotated[
        Path | None,
        typer.Option("--figure", metavar="FILE", help="Also draw the history (.png or .pdf)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", metavar="FILE", help="Write the table to FILE.")
    ] = None,
) -> None:
    """Chosen metrics of each cell across runs, in time order, with step changes flagged.

    Exit code 0 whether or not there are steps (the table and the JSON say which).

    Example: mqbench history results/ci-smoke/* --metric throughput,p99 --figure trend.png
    """

    def go() -> None:
        from mqbench.report.draw import NamedFigure, draw, save_figure_as
        from mqbench.report.history import (
            build_history,
            history_figure,
            parse_metrics,
            render_csv,
            render_json,
            render_text,
        )

        renderers = {"text": render_text, "csv": render_csv, "json": render_json}
        if fmt not in renderers:
            raise UsageError(f"--format {fmt!r}: choose text, csv or json")
        if threshold <= 0:
            raise UsageError(f"--threshold {threshold:g}: must be above 0")
        folders = [_local_folder(text, "history") for text in result_dirs]
        result = build_history(folders, parse_metrics(metric), threshold / 100.0)
        _write(renderers[fmt](result), out)
        if figure is not None:
            data = history_figure(result)
            save_figure_as(NamedFigure(data, draw(data)), figure)
            err_console.print(f"figure: {figure}")

    guarded(go)
