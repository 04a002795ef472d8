"""Saturation search: step one axis up until a limit is crossed; keep the highest good step.

Cells of one *combination* (everything equal except the searched axis and the repeat) run
in increasing order. After each, the numpy reference analysis (no Spark start-up) decides
whether the step was sustainable; the first step that crosses a limit stops that
combination, and its remaining steps are skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mqbench.errors import MqbenchError
from mqbench.records.cell_entry import CellEntry
from mqbench.scenario.matrix import Cell
from mqbench.scenario.model import Search


def combination_key(cell: Cell, axis: str) -> tuple[Any, ...]:
    """Everything that identifies a search combination (not the axis, not the repeat)."""
    params = cell.params()
    for name in ("index", "repeat", "search_step", "publishers", "subscribers"):
        params.pop(name, None)
    params.pop(
        {
            "rate": "rate",
            "pairs": "pairs",
            "subscribers": "fanout_subscribers",
            "publishers": "fanin_publishers",
        }[axis],
        None,
    )
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


class SearchTracker:
    """Follows a saturation search across the cells of a run."""

    def __init__(self, search: Search) -> None:
        self.search = search
        self._stopped: dict[tuple[Any, ...], str] = {}
        self._best: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._steps: list[dict[str, Any]] = []

    def _key(self, cell: Cell) -> tuple[Any, ...]:
        return (combination_key(cell, self.search.axis), cell.repeat)

    def should_skip(self, cell: Cell) -> bool:
        """True when an earlier step of this combination already crossed a limit."""
        return self._key(cell) in self._stopped

    def skip_reason(self, cell: Cell) -> str:
        """Why ``cell`` is skipped."""
        return f"search stopped at an earlier step: {self._stopped[self._key(cell)]}"

    def limits_crossed(self, summary: dict[str, Any]) -> list[str]:
        """Which stop limits a step's summary crosses."""
        stop = self.search.stop
        crossed = []
        loss = summary.get("loss_pct")
        if stop.loss_pct is not None and loss is not None and loss > stop.loss_pct:
            crossed.append(f"loss {loss:.3f}% > {stop.loss_pct:g}%")
        latency = summary.get("latency") or {}
        p99_us = latency.get("p99_us")
        if stop.p99_ms is not None and p99_us is not None and p99_us / 1000 > stop.p99_ms:
            crossed.append(f"p99 {p99_us / 1000:.1f} ms > {stop.p99_ms:g} ms")
        if stop.generator_saturated and summary.get("generator_saturated"):
            crossed.append(f"generator saturated ({summary.get('generator_reason')})")
        return crossed

    def observe(self, cell: Cell, manifest_cell: CellEntry, folder: Path) -> None:
        """Analyse a finished step and decide whether its combination goes on."""
        key = self._key(cell)
        value = manifest_cell.params[
            {
                "rate": "rate",
                "pairs": "pairs",
                "subscribers": "fanout_subscribers",
                "publishers": "fanin_publishers",
            }[self.search.axis]
        ]
        if manifest_cell.status != "completed":
            crossed = [f"cell {manifest_cell.status}: {manifest_cell.error}"]
            summary: dict[str, Any] = {}
        else:
            from mqbench.analysis.numpy_ref import analyze_cell_numpy

            try:
                summary = analyze_cell_numpy(manifest_cell, folder).to_dict()
            except MqbenchError as exc:
                summary = {}
                crossed = [f"analysis failed: {exc}"]
            else:
                crossed = self.limits_crossed(summary)
        self._steps.append(
            {
                "cell": cell.id,
                "value": value,
                "sustainable": not crossed,
                "crossed": crossed,
                "throughput_msg_s": summary.get("throughput_msg_s"),
            }
        )
        if crossed:
            self._stopped[key] = "; ".join(crossed)
        else:
            self._best[key] = {
                "cell": cell.id,
                "value": value,
                "throughput_msg_s": summary.get("throughput_msg_s"),
            }

    def report(self) -> dict[str, Any]:
        """The search's outcome for the manifest: every step and the best per combination."""
        best = []
        for key, entry in self._best.items():
            best.append({**entry, "stopped_by": self._stopped.get(key)})
        return {
            "axis": self.search.axis,
            "values": self.search.values,
            "stop": self.search.stop.model_dump(mode="json"),
            "steps": self._steps,
            "highest_sustainable": best,
        }
