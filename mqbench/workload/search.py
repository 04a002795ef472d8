"""Saturation search: step one axis up until a limit is crossed; keep the highest good step.

Cells of one *combination* (everything equal except the searched axis and the repeat) run
in increasing order. After each, an ``evaluate`` callable handed in by the caller (the CLI
passes the numpy reference analysis: no Spark start-up) summarises the step, and the
tracker decides whether it was sustainable; the first step that crosses a limit stops that
combination, and its remaining steps are skipped. The engine never imports the analysis
(docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from mqbench.errors import MqbenchError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.search_report import BestStep, SearchLimits, SearchReport, SearchStep
from mqbench.scenario.matrix import AXIS_FIELDS, Cell
from mqbench.scenario.model import Search


class _Latency(Protocol):
    @property
    def p99_us(self) -> float:
        """99th percentile in µs."""
        ...


class StepSummary(Protocol):
    """What the search reads of a step's summary (``analysis.summary.CellSummary`` has it)."""

    @property
    def loss_pct(self) -> float | None:
        """Loss over scheduled messages, in %."""
        ...

    @property
    def latency(self) -> _Latency | None:
        """Latency from the intended send time."""
        ...

    @property
    def generator_saturated(self) -> bool:
        """The generator, not the broker, limited the step."""
        ...

    @property
    def generator_reason(self) -> str | None:
        """Why the generator was saturated."""
        ...

    @property
    def throughput_msg_s(self) -> float | None:
        """Deliveries per second in the window."""
        ...


Evaluate = Callable[[CellEntry, Path], StepSummary]
"""Summarise a finished step from its manifest entry and cell folder; raises
``MqbenchError`` when it cannot."""


def combination_key(cell: Cell, axis: str) -> str:
    """Everything that identifies a search combination (not the axis, not the repeat):
    the cell with those fields set to one value, written out (its options and groups
    hold lists, so the cell itself cannot be a key)."""
    off_axis: dict[str, Any] = {AXIS_FIELDS[axis]: 0}
    return repr(replace(cell, index=0, repeat=0, search_step=None, **off_axis))


class SearchTracker:
    """Follows a saturation search across the cells of a run."""

    def __init__(self, search: Search, evaluate: Evaluate) -> None:
        self.search = search
        self.evaluate = evaluate
        self._stopped: dict[tuple[str, int], str] = {}
        self._best: dict[tuple[str, int], SearchStep] = {}
        self._steps: list[SearchStep] = []

    def _key(self, cell: Cell) -> tuple[str, int]:
        return (combination_key(cell, self.search.axis), cell.repeat)

    def should_skip(self, cell: Cell) -> bool:
        """True when an earlier step of this combination already crossed a limit."""
        return self._key(cell) in self._stopped

    def skip_reason(self, cell: Cell) -> str:
        """Why ``cell`` is skipped."""
        return f"search stopped at an earlier step: {self._stopped[self._key(cell)]}"

    def limits_crossed(self, summary: StepSummary) -> list[str]:
        """Which stop limits a step's summary crosses."""
        stop = self.search.stop
        crossed = []
        loss = summary.loss_pct
        if stop.loss_pct is not None and loss is not None and loss > stop.loss_pct:
            crossed.append(f"loss {loss:.3f}% > {stop.loss_pct:g}%")
        p99_us = summary.latency.p99_us if summary.latency is not None else None
        if stop.p99_ms is not None and p99_us is not None and p99_us / 1000 > stop.p99_ms:
            crossed.append(f"p99 {p99_us / 1000:.1f} ms > {stop.p99_ms:g} ms")
        if stop.generator_saturated and summary.generator_saturated:
            crossed.append(f"generator saturated ({summary.generator_reason})")
        return crossed

    def observe(self, cell: Cell, entry: CellEntry, folder: Path) -> None:
        """Evaluate a finished step and decide whether its combination goes on."""
        key = self._key(cell)
        value = cell.axis_value(self.search.axis)
        throughput: float | None = None
        if entry.status != "completed":
            crossed = [f"cell {entry.status}: {entry.error}"]
        else:
            try:
                summary = self.evaluate(entry, folder)
            except MqbenchError as exc:
                crossed = [f"analysis failed: {exc}"]
            else:
                crossed = self.limits_crossed(summary)
                throughput = summary.throughput_msg_s
        step = SearchStep(cell.id, value, tuple(crossed), throughput)
        self._steps.append(step)
        if crossed:
            self._stopped[key] = "; ".join(crossed)
        else:
            self._best[key] = step

    def report(self) -> SearchReport:
        """The search's outcome for the manifest (``search``, docs/results.md): every step
        and the best per combination."""
        stop = self.search.stop
        return SearchReport(
            axis=self.search.axis,
            values=tuple(self.search.values),
            stop=SearchLimits(stop.loss_pct, stop.p99_ms, stop.generator_saturated),
            steps=tuple(self._steps),
            highest_sustainable=tuple(
                BestStep(step.cell, step.value, step.throughput_msg_s, self._stopped.get(key))
                for key, step in self._best.items()
            ),
        )
