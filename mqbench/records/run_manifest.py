"""``manifest.json`` as one frozen, versioned type: the run's header, its state and its cells.

The engine writes it through :class:`mqbench.records.manifest.Manifest`; everything that
reads a result folder reads it through :func:`read_run_manifest` (or
:meth:`RunManifest.from_dict`), like the cell entries it holds (``cell_entry.py``). Keys
that older manifests of the same schema version lack take their defaults; a malformed
value is an error naming the manifest and the key (docs/results.md, "manifest.json").

The run's state machine lives here too (docs/results.md, "Run states")::

    running ──> completed     every cell ran; mqbench exits 0
            ├─> failed        a cell failed or a broker died (exit 1), or the run could not
            │                 go on (results cannot be written, an internal error)
            └─> interrupted   SIGINT/SIGTERM (exit 130/143), a lost load task, or, found by
                              the analysis, an mqbench process that is gone (a SIGKILL)

A run is ``completed`` exactly when mqbench exits 0 (:func:`run_failure` decides both).
The manifest records the mqbench process (PID, start time, boot id, host); a manifest that
still says ``running`` while that process is gone is recovered as interrupted
(:func:`recover`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal, TypeVar, cast, get_args

from mqbench.errors import ResultsError
from mqbench.process.lifeline import start_time
from mqbench.records.calibration_entry import CalibrationEntry
from mqbench.records.cell_entry import CellEntry, CellEntryError
from mqbench.records.format import SCHEMA_VERSION
from mqbench.records.results import write_json_atomic
from mqbench.records.search_report import SearchReport

RUN_MANIFEST_VERSION: Final = SCHEMA_VERSION
"""The manifest's ``schema_version`` this mqbench writes and reads."""
MANIFEST: Final = "manifest.json"

RunStatus = Literal["running", "completed", "failed", "interrupted"]
TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    "running": frozenset({"completed", "failed", "interrupted"}),
    "completed": frozenset(),
    "failed": frozenset(),
    "interrupted": frozenset(),
}
"""Which run status may follow which: a run finishes once, from ``running``."""
BOOT_ID: Final = Path("/proc/sys/kernel/random/boot_id")


class ManifestError(ResultsError):
    """A manifest that cannot be read or trusted (names the file and the key)."""


class RunStateError(ResultsError):
    """A run status change the state machine does not allow (a bug, never user input)."""


def next_status(current: RunStatus, new: RunStatus) -> RunStatus:
    """``new`` when a run in ``current`` may go there; RunStateError otherwise."""
    if new not in TRANSITIONS[current]:
        raise RunStateError(f"a run cannot go from {current!r} to {new!r}")
    return new


def utc_now() -> str:
    """The current UTC time as the manifest writes it (ISO 8601, seconds)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class RunnerProcess:
    """The mqbench process that runs (ran) the scenario: enough to tell whether it still
    lives, across PID reuse (start time) and reboots (boot id)."""

    pid: int
    start_ticks: int | None
    """``/proc/<pid>/stat`` field 22: clock ticks after boot when it started."""
    boot_id: str | None
    hostname: str

    @classmethod
    def current(cls) -> RunnerProcess:
        """This process."""
        import os

        pid = os.getpid()
        return cls(pid, start_time(pid), _boot_id(), socket.gethostname())

    def alive(self) -> bool | None:
        """True while the process runs, False once it is gone, None when this machine
        cannot tell (the run was on another host)."""
        if self.hostname != socket.gethostname():
            return None
        boot = _boot_id()
        if self.boot_id is not None and boot is not None and boot != self.boot_id:
            return False  # the machine rebooted since
        now = start_time(self.pid)
        if now is None:
            return False
        return self.start_ticks is None or now == self.start_ticks

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunnerProcess:
        """Read ``runner``; ValueError naming the key."""
        pid = data.get("pid")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ValueError(f"runner.pid {pid!r} is not a process id")
        ticks = data.get("start_ticks")
        if ticks is not None and (isinstance(ticks, bool) or not isinstance(ticks, int)):
            raise ValueError(f"runner.start_ticks {ticks!r} is not a number")
        boot = data.get("boot_id")
        return cls(pid, ticks, None if boot is None else str(boot), str(data.get("hostname")))


@dataclass(frozen=True)
class Recovery:
    """The analysis found the run's mqbench process gone while the manifest said running."""

    reason: str
    """One line, e.g. ``mqbench (pid 123) is gone: killed before it could finish``."""
    recovered_utc: str
    by: str = "mqbench analyze"

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RunManifest:
    """``manifest.json`` (docs/results.md). Mapping-valued entries are JSON documents
    stored as other parts wrote them (the resolved scenario, the scenario as written, the
    security facts); the calibration check is a ``CalibrationEntry`` and the saturation
    search's report a ``SearchReport``."""

    schema_version: int = RUN_MANIFEST_VERSION
    status: RunStatus = "running"
    error: str | None = None
    tool: Mapping[str, Any] = field(default_factory=dict)
    """``{"name": "mqbench", "version": …, "git_commit": …}``."""
    command_line: tuple[str, ...] = ()
    """As typed, secrets redacted (``scenario.security.redact_argv``)."""
    created_utc: str | None = None
    finished_utc: str | None = None
    host: Mapping[str, Any] = field(default_factory=dict)
    scenario_file: str | None = None
    scenario: Mapping[str, Any] = field(default_factory=dict)
    """The resolved scenario, secrets redacted."""
    scenario_input: Mapping[str, Any] | None = None
    """The scenario as written (with ``--set`` applied), secrets redacted."""
    security: Mapping[str, Any] | None = None
    calibration: CalibrationEntry | None = None
    """Which calibration ``run`` checked the cells against (``records.calibration_entry``)."""
    search: SearchReport | None = None
    runner: RunnerProcess | None = None
    recovered: Recovery | None = None
    cells: tuple[CellEntry, ...] = ()

    @property
    def scenario_name(self) -> str:
        """The scenario's name (``?`` when the manifest has none)."""
        return str(self.scenario.get("name") or "?")

    def cell(self, cell_id: str) -> CellEntry:
        """The entry of ``cell_id`` (KeyError when there is none)."""
        for cell in self.cells:
            if cell.id == cell_id:
                return cell
        raise KeyError(cell_id)

    def finished(
        self, status: RunStatus, error: str | None, when: str | None = None
    ) -> RunManifest:
        """This manifest in its final ``status`` (RunStateError when already final)."""
        return replace(
            self,
            status=next_status(self.status, status),
            error=error,
            finished_utc=when or utc_now(),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document; unrecorded (None) optional entries are left out."""
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "status": self.status,
            "error": self.error,
            "tool": dict(self.tool),
            "command_line": list(self.command_line),
            "created_utc": self.created_utc,
            "finished_utc": self.finished_utc,
            "host": dict(self.host),
            "scenario_file": self.scenario_file,
            "scenario": dict(self.scenario),
        }
        optional: dict[str, Any] = {
            "scenario_input": self.scenario_input,
            "security": self.security,
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "search": self.search.to_dict() if self.search is not None else None,
            "runner": self.runner.to_dict() if self.runner is not None else None,
            "recovered": self.recovered.to_dict() if self.recovered is not None else None,
        }
        out.update({k: dict(v) for k, v in optional.items() if v is not None})
        out["cells"] = [c.to_dict() for c in self.cells]
        return out

    @classmethod
    def from_dict(cls, data: Any, source: str = "manifest") -> RunManifest:
        """Read a version-``RUN_MANIFEST_VERSION`` manifest; ManifestError naming ``source``
        (the file) and the key when something is malformed."""
        if not isinstance(data, Mapping):
            raise ManifestError(f"{source}: not a manifest object")
        version = data.get("schema_version")
        if version != RUN_MANIFEST_VERSION:
            raise ManifestError(
                f"{source}: schema version {version!r}; this mqbench reads version "
                f"{RUN_MANIFEST_VERSION}"
            )
        try:
            return cls._read(data)
        except CellEntryError as exc:
            raise ManifestError(f"{source}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ManifestError(f"{source}: {exc}") from None

    @classmethod
    def _read(cls, data: Mapping[str, Any]) -> RunManifest:
        status = data.get("status") or "running"
        if status not in get_args(RunStatus):
            raise ValueError(f"unknown run status {status!r}")
        cells = data.get("cells") or []
        if not isinstance(cells, list):
            raise ValueError("cells is not a list")
        argv = data.get("command_line") or []
        if not isinstance(argv, list):
            raise ValueError("command_line is not a list")
        runner = _mapping(data, "runner")
        recovered = _mapping(data, "recovered")
        return cls(
            schema_version=RUN_MANIFEST_VERSION,
            status=cast(RunStatus, status),
            error=_text(data.get("error")),
            tool=_mapping(data, "tool") or {},
            command_line=tuple(str(a) for a in argv),
            created_utc=_text(data.get("created_utc")),
            finished_utc=_text(data.get("finished_utc")),
            host=_mapping(data, "host") or {},
            scenario_file=_text(data.get("scenario_file")),
            scenario=_mapping(data, "scenario") or {},
            scenario_input=_mapping(data, "scenario_input"),
            security=_mapping(data, "security"),
            calibration=_entry(data, "calibration", CalibrationEntry.from_dict),
            search=_entry(data, "search", SearchReport.from_dict),
            runner=None if runner is None else RunnerProcess.from_dict(runner),
            recovered=None
            if recovered is None
            else Recovery(
                str(recovered.get("reason")),
                str(recovered.get("recovered_utc")),
                str(recovered.get("by") or "mqbench analyze"),
            ),
            cells=tuple(CellEntry.from_dict(c) for c in cells),
        )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _mapping(data: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} is not an object")
    return value


_T = TypeVar("_T")


def _entry(data: Mapping[str, Any], key: str, read: Callable[[Mapping[str, Any]], _T]) -> _T | None:
    """The typed record stored under ``key`` (None: absent); ValueError naming a missing key."""
    value = _mapping(data, key)
    if value is None:
        return None
    try:
        return read(value)
    except KeyError as exc:
        raise ValueError(f"{key} lacks {exc}") from None


def read_run_manifest(result_dir: Path) -> RunManifest:
    """Read ``result_dir/manifest.json``; ManifestError (one line naming the path) when
    the folder or the file is missing, unreadable, not JSON, or malformed."""
    path = Path(result_dir) / MANIFEST
    if not Path(result_dir).is_dir():
        raise ManifestError(f"{result_dir}: no such result folder")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"{result_dir}: no {MANIFEST} (not an mqbench result folder)") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ManifestError(f"{path}: not a manifest (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"{path}: not a manifest (invalid JSON: {exc.msg} at line {exc.lineno})"
        ) from None
    except RecursionError:
        raise ManifestError(f"{path}: not a manifest (JSON nested too deeply)") from None
    return RunManifest.from_dict(data, str(path))


def run_failure(cells: Iterable[CellEntry]) -> str | None:
    """Why a run whose cells all ended is not ``completed`` (its status is then ``failed``
    and mqbench exits 1): failed cells first, then brokers that died. None: completed."""
    entries = list(cells)
    failed = [c for c in entries if c.status == "failed"]
    if failed:
        return f"{len(failed)} of {len(entries)} cell(s) failed; {failed[0].id}: {failed[0].error}"
    exits = [c for c in entries if c.broker_exit is not None]
    if exits and exits[0].broker_exit is not None:
        first = exits[0].broker_exit
        return (
            f"the broker died in {len(exits)} of {len(entries)} cell(s); "
            f"{exits[0].id}: {first.reason or 'exited'} (exit code {first.exit_code}); "
            "results are marked invalid"
        )
    return None


def recover(
    manifest: RunManifest,
    alive: Callable[[RunnerProcess], bool | None] | None = None,
    now: Callable[[], str] = utc_now,
) -> RunManifest | None:
    """The manifest of a run whose mqbench process is gone although it says ``running``:
    the run and its running cells ``interrupted``, with the reason. None when there is
    nothing to recover (a finished run, a live process, a process this host cannot see,
    or an older manifest that does not record its process). ``alive`` replaces
    :meth:`RunnerProcess.alive` (tests)."""
    runner = manifest.runner
    if manifest.status != "running" or runner is None:
        return None
    if (alive(runner) if alive is not None else runner.alive()) is not False:
        return None
    reason = (
        f"mqbench (pid {runner.pid}) is gone: it was killed (SIGKILL, the OOM killer, a crash) "
        "before it could finish the manifest"
    )
    cells = tuple(
        replace(c, status="interrupted", error=c.error or "mqbench was killed during the cell")
        if c.status == "running"
        else c
        for c in manifest.cells
    )
    when = now()
    return replace(
        manifest.finished("interrupted", reason, when),
        recovered=Recovery(reason, when),
        cells=cells,
    )


def open_run_manifest(result_dir: Path) -> tuple[RunManifest, Recovery | None]:
    """Read the manifest of ``result_dir`` and recover it when its run was killed
    (:func:`recover`): the recovered manifest is saved in place (keys this mqbench does not
    know are kept) so every later reader sees the same states; a folder that cannot be
    written is recovered in memory only. Returns the manifest and the recovery, if any."""
    manifest = read_run_manifest(result_dir)
    recovered = recover(manifest)
    if recovered is None:
        return manifest, None
    path = Path(result_dir) / MANIFEST
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        write_json_atomic(path, {**raw, **recovered.to_dict()})
    except (OSError, ValueError, ResultsError):
        pass  # a read-only copy: the analysis still treats the run as interrupted
    return recovered, recovered.recovered
