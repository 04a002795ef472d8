"""Record files carry their count in a sidecar, so a hard stop is detected, not guessed.

Next to every record file ``<name>.bin`` the writer keeps ``<name>.bin.count``, a small
JSON object rewritten atomically (temporary file + rename) each time it flushes (at least
once a second) and when it closes the file (docs/records.md)::

    {"records": 1234, "closed": false, "t_ns": 1763791200123456789}

``records`` whole records were in the file at ``t_ns``; ``closed`` is true once the writer
closed it normally. The analysis (:func:`check_record_file`) reads what is intact and says
what is not: a torn last record (bytes past the last multiple of 24), fewer records than
the count, or a writer that never closed the file (records after ``t_ns`` may be missing).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mqbench.records.format import RECORD_SIZE

COUNT_SUFFIX = ".count"
_WORKER = re.compile(r"^(?:sends|deliveries)-(\d+)\.bin$")


def count_path(path: Path | str) -> Path:
    """The sidecar of record file ``path``."""
    return Path(f"{path}{COUNT_SUFFIX}")


def write_count(path: Path | str, records: int, *, closed: bool, t_ns: int) -> None:
    """Atomically write the sidecar of ``path``; raise OSError (leaving no temp file)."""
    target = count_path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    text = json.dumps({"records": records, "closed": closed, "t_ns": t_ns})
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = text.encode("ascii")
            if os.write(fd, data) != len(data):
                raise OSError(28, "short write", str(tmp))
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@dataclass(frozen=True)
class RecordFileCheck:
    """What is intact in one record file."""

    path: str
    records: int
    """Whole records in the file (what the analysis reads)."""
    torn_bytes: int
    """Bytes after the last whole record (a write cut short); ignored."""
    counted: int | None
    """Records the writer had flushed at its last checkpoint (None: no sidecar)."""
    closed: bool | None
    """Whether the writer closed the file (None: no sidecar, e.g. an older run)."""
    checkpoint_ns: int | None
    """When the sidecar was last written."""
    absent: str | None = None
    """Why the file should exist although it does not (its sidecar, the manifest's worker
    count); None for a file that is there."""

    @property
    def missing(self) -> int:
        """Records the sidecar counts that the file no longer holds."""
        return max(0, (self.counted or 0) - self.records)

    @property
    def truncated(self) -> bool:
        """Something is not intact: a missing file, a torn record, missing records or an
        unclosed writer."""
        return bool(self.absent or self.torn_bytes or self.missing or self.closed is False)

    def describe(self) -> str:
        """One line: the file name and what is wrong with it ('' when intact)."""
        if self.absent:
            return f"{Path(self.path).name}: missing, although {self.absent}"
        problems = []
        if self.missing:
            problems.append(f"{self.missing} of {self.counted} counted records are missing")
        if self.torn_bytes:
            problems.append(f"{self.torn_bytes} bytes of a torn last record ignored")
        if self.closed is False:
            problems.append("its writer never closed it (stopped hard)")
        if not problems:
            return ""
        return f"{Path(self.path).name}: " + "; ".join(problems)


def check_record_file(path: Path | str) -> RecordFileCheck:
    """Inspect ``path`` and its sidecar (a missing or unreadable sidecar means unknown)."""
    size = os.path.getsize(path)
    counted: int | None = None
    closed: bool | None = None
    t_ns: int | None = None
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
        data = json.loads(count_path(path).read_text(encoding="ascii"))
        counted = int(data["records"])
        closed = bool(data["closed"])
        t_ns = int(data["t_ns"]) if data.get("t_ns") is not None else None
    return RecordFileCheck(
        path=str(path),
        records=size // RECORD_SIZE,
        torn_bytes=size % RECORD_SIZE,
        counted=counted,
        closed=closed,
        checkpoint_ns=t_ns,
    )


def absent_file(path: Path | str, why: str) -> RecordFileCheck:
    """The check of a record file that should exist (``why``) but does not; what its
    sidecar says, when there is one, is kept (``counted`` records were flushed)."""
    counted: int | None = None
    closed: bool | None = None
    t_ns: int | None = None
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
        data = json.loads(count_path(path).read_text(encoding="ascii"))
        counted = int(data["records"])
        closed = bool(data["closed"])
        t_ns = int(data["t_ns"]) if data.get("t_ns") is not None else None
    if counted is not None:
        why = f"its count sidecar says {counted:,} records were written"
    return RecordFileCheck(str(path), 0, 0, counted, closed, t_ns, absent=why)


def expected_record_files(folder: Path, workers: Iterable[int]) -> dict[str, str]:
    """Record file name -> why it should exist: every count sidecar's file, and both files
    (``sends-<w>.bin``, ``deliveries-<w>.bin``) of every worker the manifest names (each
    worker opens both before the first message)."""
    expected: dict[str, str] = {}
    for w in sorted(set(workers)):
        for kind in ("deliveries", "sends"):
            expected[f"{kind}-{w}.bin"] = f"the manifest says worker {w} ran"
    for sidecar in folder.glob(f"*.bin{COUNT_SUFFIX}"):
        name = sidecar.name.removesuffix(COUNT_SUFFIX)
        expected.setdefault(name, "its count sidecar exists")
    return expected


def writer_shortfalls(checks: Iterable[RecordFileCheck], written: Mapping[int, int]) -> list[str]:
    """One line per worker whose two record files hold fewer whole records than the worker
    said it wrote (``records_written`` in its last stats, kept by the manifest)."""
    held: dict[int, int] = {}
    for check in checks:
        match = _WORKER.match(Path(check.path).name)
        if match is not None:
            w = int(match.group(1))
            held[w] = held.get(w, 0) + check.records
    lines = []
    for w, count in sorted(written.items()):
        if count > held.get(w, 0):
            lines.append(f"worker {w} wrote {count:,} records; its files hold {held.get(w, 0):,}")
    return lines
