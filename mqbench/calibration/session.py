"""``mqbench calibrate`` end to end: choose the targets, measure, merge, save.

The CLI parses its options into a :class:`CalibrationOrder`, calls :func:`run_calibration`
and prints the result; the typed errors here say which option was wrong, so the CLI can
name the option (exit code 2) without deciding anything from message text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mqbench.brokers.registry import get_target, target_names
from mqbench.brokers.runtime.registry import get_runtime
from mqbench.calibration import store
from mqbench.calibration.model import Calibration
from mqbench.calibration.relays import RELAY_PROTOCOLS
from mqbench.calibration.runner import CalibrationRequest, Progress, calibrate, default_settings
from mqbench.errors import BrokerError, ResultsError, ScenarioError


class UnknownTargetError(ScenarioError):
    """A requested target mqbench does not know."""

    def __init__(self, target: str) -> None:
        super().__init__(f"unknown target {target!r} (known: {', '.join(target_names())})")
        self.target = target
        self.known = target_names()


class TargetNotInstalledError(BrokerError):
    """A requested target the native runtime cannot run here."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"{target}: not installed for the native runtime ({reason})")
        self.target = target
        self.reason = reason


class CalibrationPathError(ResultsError):
    """The calibration file cannot be written where it would go."""

    def __init__(self, path: Path, cause: ResultsError) -> None:
        super().__init__(str(cause))
        self.path = path


@dataclass(frozen=True)
class CalibrationOrder:
    """What ``mqbench calibrate`` was asked for."""

    targets: list[str]
    """Broker targets to measure; empty: every target installed for the native runtime."""
    duration_s: float
    """Measured seconds per cell."""
    path: Path | None = None
    """Where to save (None: ``store.default_path()``)."""


@dataclass(frozen=True)
class CalibrationOutcome:
    """The saved calibration (merged into the older one at ``path``) and where it is."""

    calibration: Calibration
    path: Path


def select_targets(requested: list[str]) -> list[str]:
    """The broker targets to measure: the requested ones (each must run natively here) or,
    with none requested, every target the native runtime can run."""
    runtime = get_runtime("native")
    for name in requested:
        if name not in target_names():
            raise UnknownTargetError(name)
    if requested:
        for name in requested:
            availability = runtime.availability(name)
            if not availability.available:
                raise TargetNotInstalledError(name, availability.reason)
        return list(dict.fromkeys(requested))
    available = [n for n in target_names() if runtime.availability(n).available]
    if not available:
        raise BrokerError(
            "no broker is installed for the native runtime (see `mqbench targets`; "
            "scripts/install.sh installs them)"
        )
    return available


def run_calibration(order: CalibrationOrder, on_line: Progress) -> CalibrationOutcome:
    """Measure floors, brokers and ceilings (docs/calibration.md) and save them.

    Protocols follow the requested targets, or are every relay protocol when none was
    requested. ``on_line`` receives one line per step.
    """
    path = order.path if order.path is not None else store.default_path()
    try:
        store.check_writable(path)
    except ResultsError as exc:
        raise CalibrationPathError(path, exc) from None
    targets = select_targets(order.targets)
    protocols: list[str] = (
        list(dict.fromkeys(get_target(t).transport for t in targets))
        if order.targets
        else list(RELAY_PROTOCOLS)
    )
    older = store.load(path).usable
    request = CalibrationRequest(
        protocols=protocols, targets=targets, settings=default_settings(order.duration_s)
    )
    on_line(f"calibrating {', '.join(protocols)} (floor + ceiling) and {', '.join(targets)}")
    calibration = calibrate(request, on_line).merged_into(older)
    store.save(calibration, path)
    return CalibrationOutcome(calibration, path)
