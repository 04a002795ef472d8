"""Where the calibration file lives, and reading/writing it.

Path: ``$MQBENCH_CALIBRATION`` when set, else ``$XDG_STATE_HOME/mqbench/calibration.json``,
else ``~/.local/state/mqbench/calibration.json``. ``mqbench calibrate --out PATH`` writes
elsewhere; ``mqbench run`` reads the default path (set ``MQBENCH_CALIBRATION`` to point it
at another file).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from mqbench.calibration.model import (
    CALIBRATION_SCHEMA_VERSION,
    Calibration,
    HostKey,
    current_host,
    stale_reasons,
)
from mqbench.errors import ResultsError

ENV_VAR = "MQBENCH_CALIBRATION"


def default_path(env: Mapping[str, str] | None = None) -> Path:
    """The calibration file ``run`` reads and ``calibrate`` writes by default."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    state = env.get("XDG_STATE_HOME")
    base = Path(state).expanduser() if state else Path(env.get("HOME", "~")).expanduser()
    if not state:
        base = base / ".local" / "state"
    return base / "mqbench" / "calibration.json"


LoadStatus = Literal["valid", "missing", "stale", "unreadable"]


@dataclass(frozen=True)
class LoadedCalibration:
    """The outcome of looking for a calibration: usable or why not."""

    path: Path
    status: LoadStatus
    calibration: Calibration | None = None
    """Set for ``valid`` and ``stale`` (a stale one is shown, never used)."""
    reasons: list[str] = field(default_factory=list)

    @property
    def usable(self) -> Calibration | None:
        """The calibration when it is valid here, else None."""
        return self.calibration if self.status == "valid" else None

    def describe(self) -> str:
        """One line: what was found at ``path``."""
        if self.status == "valid":
            assert self.calibration is not None
            return f"calibration {self.path} (updated {self.calibration.updated_utc})"
        if self.status == "missing":
            return f"no calibration at {self.path} (run `mqbench calibrate`)"
        if self.status == "stale":
            return (
                f"calibration {self.path} is stale and not used ({'; '.join(self.reasons)}); "
                "re-run `mqbench calibrate`"
            )
        return (
            f"calibration {self.path} is not usable ({'; '.join(self.reasons)}); "
            "re-run `mqbench calibrate`"
        )


def load(path: Path, host: HostKey | None = None) -> LoadedCalibration:
    """Read ``path`` and check it against ``host`` (default: this machine). Never raises
    for a missing or bad file: the status says what was found."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return LoadedCalibration(path, "missing")
    except OSError as exc:
        return LoadedCalibration(path, "unreadable", reasons=[exc.strerror or str(exc)])
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return LoadedCalibration(path, "unreadable", reasons=[f"not JSON ({exc.msg})"])
    if not isinstance(data, dict):
        return LoadedCalibration(path, "unreadable", reasons=["not a JSON object"])
    version = data.get("schema_version")
    if version != CALIBRATION_SCHEMA_VERSION:
        return LoadedCalibration(
            path,
            "unreadable",
            reasons=[
                f"schema version {version!r}; this mqbench reads version "
                f"{CALIBRATION_SCHEMA_VERSION}"
            ],
        )
    try:
        calibration = Calibration.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return LoadedCalibration(path, "unreadable", reasons=[f"{where}: {first['msg']}"])
    reasons = stale_reasons(calibration.host, host or current_host())
    if reasons:
        return LoadedCalibration(path, "stale", calibration, reasons)
    return LoadedCalibration(path, "valid", calibration)


def check_writable(path: Path) -> None:
    """Raise ``ResultsError`` unless ``path`` can be written (its folder is created)."""
    if path.is_dir():
        raise ResultsError(f"cannot write the calibration to {path}: it is a directory")
    for ancestor in path.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ResultsError(
                    f"cannot write the calibration to {path}: {ancestor} is not a directory"
                )
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.probe-{os.getpid()}")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ResultsError(f"cannot write the calibration to {path}: {reason.lower()}") from None


def save(calibration: Calibration, path: Path) -> Path:
    """Write ``calibration`` to ``path`` atomically (ResultsError when it cannot)."""
    check_writable(path)
    text = json.dumps(calibration.model_dump(mode="json"), indent=2) + "\n"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ResultsError(f"cannot write the calibration to {path}: {reason.lower()}") from None
    return path
