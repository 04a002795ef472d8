"""What the gate compares besides the numbers: every setting that shapes a cell's results.

Two runs' cells match by id, and the id says target, payload, size, rate and QoS, but not
TLS, authentication, the generator's settings, the broker's version and settings, or the
machine. :func:`run_settings` flattens all of them per cell (``security.tls``,
``generator.workers``, ``broker.version``, ``broker.settings.max_pending``, ``host.cpus``,
``qos``, ...) so :func:`differences` can name every one that differs between a baseline
cell and its current counterpart (docs/ci.md, "parameters differ").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from mqbench.analysis.repeats import base_id

if TYPE_CHECKING:
    from mqbench.analysis.run_summaries import LoadedRun
    from mqbench.records.cell_entry import CellEntry
    from mqbench.records.run_manifest import RunManifest

Settings = dict[str, dict[str, Any]]
"""Flat settings (dotted keys) by base cell id."""

CELL_IGNORED: Final = frozenset({"index", "repeat"})
"""Cell parameters that number a cell rather than shape it."""
SCENARIO_SECTIONS: Final = ("security", "generator")
"""Run-wide scenario sections whose every key shapes every cell."""
SCENARIO_KEYS: Final = ("broker.host", "seed")
BROKER_KEYS: Final = ("version", "runtime", "settings", "resources")
"""Keys of a cell's broker entry (the manifest) that shape its results; ports, PIDs and
paths differ on every run and are left out."""
VOLATILE: Final = re.compile(r"(port|listen|endpoints|nodename|path|dir|file|pid|url|dsn)$")
"""Broker settings named like this hold the run's own ports, addresses and folders, which
differ on every run without changing what is measured."""
HOST_KEYS: Final = ("cpus", "memory_bytes", "platform", "open_files_limit")
"""The machine: its name is left out (CI runners change names, not shapes)."""


@dataclass(frozen=True)
class SettingDifference:
    """One setting whose value differs between the baseline and the current cell."""

    key: str
    baseline: Any
    current: Any

    def __str__(self) -> str:
        return f"{self.key} {_show(self.baseline)} -> {_show(self.current)}"

    def to_dict(self) -> dict[str, Any]:
        """``{"key", "baseline", "current"}`` for the JSON output."""
        return {"key": self.key, "baseline": self.baseline, "current": self.current}


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys; lists stay values."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def cell_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's own parameters, flattened, without the ones that only number it."""
    return flatten({k: v for k, v in params.items() if k not in CELL_IGNORED})


def _scenario_settings(manifest: RunManifest) -> dict[str, Any]:
    scenario = manifest.scenario
    flat = flatten({k: scenario.get(k) for k in SCENARIO_SECTIONS if k in scenario})
    everything = flatten(scenario)
    flat.update({k: everything[k] for k in SCENARIO_KEYS if k in everything})
    flat.update({f"host.{k}": manifest.host[k] for k in HOST_KEYS if k in manifest.host})
    return flat


def _broker_settings(entry: CellEntry) -> dict[str, Any]:
    broker = entry.broker
    if broker is None:
        return {}
    flat = flatten({k: broker[k] for k in BROKER_KEYS if k in broker}, "broker.")
    return {k: v for k, v in flat.items() if not VOLATILE.search(k.lower())}


def run_settings(run: LoadedRun) -> Settings:
    """Every cell's settings by base id (the first repeat's, which the others share)."""
    shared = _scenario_settings(run.manifest)
    out: Settings = {}
    for cell_id, entry in run.cells.items():
        params = entry.params
        bid = base_id(cell_id, entry.repeat)
        if bid in out:
            continue
        out[bid] = {**shared, **cell_settings(params), **_broker_settings(entry)}
    return out


def differences(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> list[SettingDifference]:
    """Every key whose value differs (a key on one side only differs from ``unset``)."""
    keys = sorted(set(baseline) | set(current))
    return [
        SettingDifference(k, baseline.get(k), current.get(k))
        for k in keys
        if baseline.get(k) != current.get(k)
    ]
