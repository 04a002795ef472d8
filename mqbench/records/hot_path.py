"""Which engine ran a cell's publish and receive loop, as the manifest keeps it
(``cells[].hot_path``).

``generator.hot_path`` (docs/scenarios.md) chooses per cell between the compiled core
(``mqbench_core``, docs/performance.md, "The compiled core") and the Python engine; the
cell records the engine that ran it and why, so a reader can tell the two apart. Both
write the same record files (docs/records.md), and one analysis reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

HOT_PATH_VERSION: Final = 1

HotPathEngine = Literal["compiled", "python"]


@dataclass(frozen=True)
class HotPathEntry:
    """The engine that ran a cell's hot path, and why that one."""

    engine: HotPathEngine
    reason: str
    """Why this engine: what made the compiled core unable to serve the cell, or that it
    served it."""
    core_version: str | None = None
    """The compiled core's version (None: the Python engine ran the cell)."""

    def to_dict(self) -> dict[str, Any]:
        """The manifest form."""
        return {
            "version": HOT_PATH_VERSION,
            "engine": self.engine,
            "reason": self.reason,
            "core_version": self.core_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HotPathEntry:
        """Read the manifest form (``ValueError`` naming the key)."""
        engine = data.get("engine")
        if engine not in ("compiled", "python"):
            raise ValueError(f"hot_path.engine {engine!r} is not one of compiled, python")
        version = data.get("core_version")
        return cls(
            engine=cast(HotPathEngine, engine),
            reason=str(data.get("reason") or ""),
            core_version=None if version is None else str(version),
        )
