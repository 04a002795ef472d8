"""Run a whole scenario: result folder, manifest, and per cell broker -> load -> records."""

from __future__ import annotations

import contextlib
import functools
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from mqbench.errors import LoadTaskLost, MqbenchError, ResultsWriteError, ScenarioError
from mqbench.process import interrupts
from mqbench.records.calibration_entry import CalibrationEntry
from mqbench.records.cell_entry import CellEntry
from mqbench.records.hadoop_fs import HadoopFs, RemoteRoot, RunPublisher
from mqbench.records.manifest import Manifest
from mqbench.records.results import SpaceReserve, create_result_dir
from mqbench.records.run_manifest import run_failure
from mqbench.scenario.loader import ScenarioSource
from mqbench.scenario.matrix import Cell, expand
from mqbench.scenario.model import Scenario
from mqbench.scenario.security import redact, redact_argv
from mqbench.workload.capacity import RESERVE_BYTES
from mqbench.workload.cell_run import CellRun, RunContext
from mqbench.workload.cell_timing import RunTiming, TimingHints
from mqbench.workload.distributed import staging_parent
from mqbench.workload.interruption import RunInterrupted as RunInterrupted
from mqbench.workload.interruption import signal_text, stop_signal
from mqbench.workload.preflight import preflight
from mqbench.workload.reporter import RunReporter as RunReporter
from mqbench.workload.reporter import SilentReporter as SilentReporter
from mqbench.workload.search import Evaluate, SearchTracker
from mqbench.workload.security import RunSecurity, open_run_security
from mqbench.workload.spark_engine import spark_context, spark_running, stop_spark


@dataclass
class RunResult:
    """Where the results are and how the run ended."""

    result_dir: Path
    """The run folder on this machine (the local staging copy when ``published``)."""
    status: str
    cells: list[CellEntry] = field(default_factory=list)
    published: RemoteRoot | None = None
    """The run folder on the output URI (``--out URI``), or None for a local ``--out``."""
    staging: Path | None = None
    """The private local folder ``result_dir`` lives in when published; the caller removes
    it (``discard_staging``) once it has analysed and published the outputs."""

    @property
    def location(self) -> str:
        """Where the results are, as the user gave the output (URI or path)."""
        return str(self.published) if self.published is not None else str(self.result_dir)

    @property
    def failed_cells(self) -> list[CellEntry]:
        """Cells that did not complete."""
        return [c for c in self.cells if c.status == "failed"]

    @property
    def broker_exits(self) -> list[CellEntry]:
        """Cells whose broker exited on its own (their results are invalid)."""
        return [c for c in self.cells if c.broker_exit is not None]

    def failure(self) -> MqbenchError | None:
        """Why the run as a whole failed (cells that failed, brokers that died), or None:
        the manifest's ``failed`` status and mqbench's exit code 1 come from the same
        :func:`run_failure`."""
        reason = run_failure(self.cells)
        return None if reason is None else MqbenchError(reason)


def run_scenario(
    scenario: Scenario,
    *,
    source: ScenarioSource,
    out_root: Path | RemoteRoot,
    argv: list[str],
    reporter: RunReporter,
    only: Callable[[Cell], bool] | None = None,
    calibration: CalibrationEntry | None = None,
    evaluate: Evaluate | None = None,
    timing: TimingHints | None = None,
) -> RunResult:
    """Run every cell of ``scenario``; raise ``RunInterrupted`` on Ctrl-C (after saving).

    Nothing is created or started before :func:`workload.preflight.preflight` passes.
    ``source`` is the scenario as the user gave it (file and document), recorded in the
    manifest. ``calibration`` is the manifest's record of the calibration the CLI checked
    the cells against. ``evaluate`` summarises a finished
    step of a saturation search (``workload.search``); a scenario with a ``search`` needs
    one. ``timing``: the calibration's wake-up floors and ceilings (``workload.cell_timing``).
    """
    scenario_file = source.file
    cells = [c for c in expand(scenario) if only is None or only(c)]
    if not cells:
        raise ScenarioError(f"{scenario_file}: no cell matches the selection")
    preflight(scenario, cells, out_root, source=scenario_file)
    run_timing = RunTiming(scenario, timing or TimingHints())
    run_timing.check(cells)
    search: SearchTracker | None = None
    if scenario.search is not None:
        if evaluate is None:
            raise ScenarioError(f"{scenario_file}: a saturation search needs an evaluation")
        search = SearchTracker(scenario.search, evaluate)
    spark_was_running = scenario.generator.distributed and spark_running()
    output: _Output | None = None
    security = open_run_security(scenario)
    try:
        local_root = out_root
        if isinstance(out_root, RemoteRoot):
            output = _Output(out_root, scenario)  # starts Spark: the refusal comes first
            local_root = output.local
        assert isinstance(local_root, Path)
        with interrupts.StopSignals():
            result = _run_cells(
                scenario,
                cells,
                source,
                local_root,
                argv,
                reporter,
                calibration,
                search,
                security,
                run_timing,
                output,
            )
    except BaseException:
        if output is not None:
            discard_staging(output.local)
        raise
    finally:
        security.close()
        if scenario.generator.distributed and not spark_was_running:
            stop_spark()
    if output is not None:
        result.published, result.staging = output.folder, output.local
    return result


class _Output:
    """A run folder built in a private local folder and published to a URI."""

    def __init__(self, root: RemoteRoot, scenario: Scenario) -> None:
        generator = scenario.generator
        sc = spark_context(generator.master or "", generator.spark_conf, scenario.broker.host)
        self.fs = HadoopFs(sc, root)
        self.root = root
        self.local = Path(tempfile.mkdtemp(prefix="mqbench-run-", dir=staging_parent()))
        self.folder: RemoteRoot | None = None
        self._publisher: RunPublisher | None = None

    def reserve(self, result_dir: Path) -> RemoteRoot:
        """Create the run folder on the URI (refused when it exists): the reservation."""
        folder = self.root.child(*result_dir.relative_to(self.local).parts)
        self.fs.reserve(folder)
        self.folder = folder
        self._publisher = RunPublisher(self.fs, folder, frozenset({SpaceReserve.NAME}))
        return folder

    def publish(self, result_dir: Path) -> None:
        """Copy what changed to the URI, the manifest last."""
        if self._publisher is not None:
            self._publisher.publish(result_dir)


def discard_staging(staging: Path) -> None:
    """Remove a published run's private local folder."""
    shutil.rmtree(staging, ignore_errors=True)


def _first_manifest(
    result_dir: Path,
    scenario: Scenario,
    source: ScenarioSource,
    argv: list[str],
    security: RunSecurity,
    calibration: CalibrationEntry | None,
) -> Manifest:
    """The run's manifest as saved before any cell runs, secrets redacted."""
    manifest = Manifest(
        result_dir,
        redact(scenario.model_dump(mode="json")),
        source.file,
        redact_argv(argv),
        scenario_input=source.stored_input(),
        security=security.describe(),
        calibration=calibration,
    )
    manifest.save()
    return manifest


def _publish(output: _Output | None, result_dir: Path) -> None:
    """Copy what changed to the run's URI when the run is written to one (``--output``)."""
    if output is not None:
        output.publish(result_dir)


def _skipped(cell: Cell, search: SearchTracker) -> CellEntry:
    """The manifest entry of a cell the capacity search no longer needs to run."""
    return CellEntry(
        id=cell.id,
        index=cell.index,
        repeat=cell.repeat,
        status="skipped",
        params=cell.params(),
        skip_reason=search.skip_reason(cell),
    )


def _run_cells(
    scenario: Scenario,
    cells: list[Cell],
    source: ScenarioSource,
    out_root: Path,
    argv: list[str],
    reporter: RunReporter,
    calibration: CalibrationEntry | None,
    search: SearchTracker | None,
    security: RunSecurity,
    run_timing: RunTiming,
    output: _Output | None = None,
) -> RunResult:
    # The folder, its space reserve and its first manifest appear together; a signal in
    # between is raised inside the ``try`` below, which finishes the manifest.
    with interrupts.deferred(raise_at_end=False):
        result_dir = create_result_dir(out_root, scenario.name)
        shown: Path | RemoteRoot = result_dir
        if output is not None:
            shown = output.reserve(result_dir)
        reserve = SpaceReserve(result_dir, RESERVE_BYTES)
        manifest = _first_manifest(result_dir, scenario, source, argv, security, calibration)

    publish = functools.partial(_publish, output, result_dir)
    ctx = RunContext(
        scenario, result_dir, manifest, reporter, secrets.token_hex(3), security, run_timing
    )
    try:
        interrupts.raise_pending()
        reporter.run_started(shown, cells)
        for cell in cells:
            if search is not None and search.should_skip(cell):
                manifest.add_cell(_skipped(cell, search))
                continue
            CellRun(ctx, cell).run()
            if search is not None:
                search.observe(cell, manifest.cell(cell.id), result_dir / "cells" / cell.id)
                manifest.update(functools.partial(replace, search=search.report()))
            publish()
    except (KeyboardInterrupt, RunInterrupted) as exc:
        signum = stop_signal(exc)
        manifest.finish("interrupted", f"interrupted by {signal_text(signum)}")
        reserve.release()
        publish()
        raise RunInterrupted(
            f"interrupted by {signal_text(signum)}; records so far are flushed in {shown}",
            signum,
        ) from None
    except LoadTaskLost as exc:
        manifest.finish("interrupted", str(exc))
        reserve.release()
        publish()
        raise LoadTaskLost(f"{exc}; results in {shown}", exc.task) from None
    except ResultsWriteError as exc:
        reserve.release()  # room for the last manifest
        with contextlib.suppress(ResultsWriteError):
            manifest.finish("failed", str(exc))
            publish()
        raise
    except BaseException as exc:
        with contextlib.suppress(ResultsWriteError):
            manifest.finish("failed", f"{type(exc).__name__}: {exc}")
            publish()
        raise
    finally:
        reserve.release()
    entries = manifest.cells
    failure = run_failure(entries)
    manifest.finish("failed" if failure else "completed", failure)
    publish()
    return RunResult(result_dir, manifest.run.status, entries)
