"""docs/results.md documents every field of a cell summary (the table is the reference)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from mqbench.analysis.summary import CellSummary


def test_every_summary_field_is_in_the_summary_table_of_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    section = docs.split("## summary.json / summary.parquet", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    # A row may name a pair as `x_mean/max`: both fields are documented.
    table = re.sub(r"(\w+)_mean/max", r"\1_mean \1_max", "\n".join(rows))
    missing = [f.name for f in dataclasses.fields(CellSummary) if f.name not in table]
    assert missing == []
