"""Record files copied piecewise from where a worker writes them to the run folder.

A distributed load task (docs/distributed.md) writes its record files into a staging
folder on its own machine, exactly as a local worker writes into the cell folder (blocks,
checkpoints at least once a second, count sidecars). A :class:`StagingReader` on the task
reads what was flushed since the last look and turns it into :class:`RecordChunk` (bytes of
a file at an offset, at most ``max_chunk`` bytes each) and :class:`RecordCount` (the
sidecar's state) messages; on the driver a :class:`RecordSink` appends them to the cell
folder under the same names. The sidecar is read *before* the data it counts, so the
driver's copy never counts records it does not hold: the integrity checks
(``records.integrity``) hold on the copy as on the original, and a copy whose task died
keeps everything up to the last chunk shipped (its sidecar says ``closed: false``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from mqbench.errors import ResultsWriteError
from mqbench.records.format import RECORD_SIZE
from mqbench.records.integrity import count_path, write_count

MAX_CHUNK_BYTES = 1 << 20
"""Largest data chunk per message (1 MiB; cut down to whole records)."""

RECORD_FILE = re.compile(r"^(sends|deliveries)-(\d+)\.bin$")
"""The record files a worker writes (``sends-N.bin``, ``deliveries-N.bin``)."""


@dataclass(frozen=True)
class RecordChunk:
    """``data`` belongs at byte ``offset`` of record file ``name`` (whole records only)."""

    name: str
    offset: int
    data: bytes


@dataclass(frozen=True)
class RecordCount:
    """The state of ``name``'s count sidecar (``records.integrity``)."""

    name: str
    records: int
    closed: bool
    t_ns: int


Shipment = RecordChunk | RecordCount
"""One message of a record transfer."""


def _read_count(path: Path) -> tuple[int, bool, int] | None:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        data = json.loads(count_path(path).read_text(encoding="ascii"))
        return int(data["records"]), bool(data["closed"]), int(data["t_ns"])
    return None


class StagingReader:
    """What is new in the record files of a staging folder since the previous call."""

    def __init__(self, folder: Path, max_chunk: int = MAX_CHUNK_BYTES) -> None:
        if max_chunk < RECORD_SIZE:
            raise ValueError(f"max_chunk {max_chunk} is smaller than one record")
        self.folder = folder
        self.max_chunk = max_chunk - max_chunk % RECORD_SIZE
        self._offsets: dict[str, int] = {}
        self._counts: dict[str, tuple[int, bool, int]] = {}
        self.shipped_bytes = 0
        """Data bytes handed out so far."""

    def new(self) -> list[Shipment]:
        """Chunks of whole records flushed since the last call, then changed sidecars.

        A file appears once with an empty chunk at offset 0 (so an empty file exists on
        the other side too). Each sidecar is read before its file's data: the count
        shipped never exceeds the records shipped.
        """
        out: list[Shipment] = []
        for path in sorted(self.folder.iterdir()):
            if not RECORD_FILE.match(path.name):
                continue
            count = _read_count(path)
            out.extend(self._chunks(path))
            if count is not None and self._counts.get(path.name) != count:
                self._counts[path.name] = count
                out.append(RecordCount(path.name, *count))
        return out

    def _chunks(self, path: Path) -> list[RecordChunk]:
        name = path.name
        offset = self._offsets.get(name)
        try:
            size = path.stat().st_size
        except OSError:
            return []
        end = size - size % RECORD_SIZE
        chunks: list[RecordChunk] = []
        if offset is None:
            offset = 0
            chunks.append(RecordChunk(name, 0, b""))
        if end > offset:
            with path.open("rb") as file:
                file.seek(offset)
                while offset < end:
                    data = file.read(min(self.max_chunk, end - offset))
                    if not data:
                        break
                    data = data[: len(data) - len(data) % RECORD_SIZE]
                    chunks.append(RecordChunk(name, offset, data))
                    offset += len(data)
                    self.shipped_bytes += len(data)
        self._offsets[name] = offset
        return chunks


class RecordSink:
    """Appends shipped records of one task to the cell folder (the driver's side).

    ``worker`` is the task's worker index: only that worker's record files are accepted,
    and only under their plain names, so a task cannot write anywhere else.
    """

    def __init__(self, cell_dir: Path, worker: int) -> None:
        self.cell_dir = cell_dir
        self.worker = worker
        self._files: dict[str, BinaryIO] = {}
        self._sizes: dict[str, int] = {}
        self.received_bytes = 0
        """Data bytes appended so far."""

    def _path(self, name: str) -> Path:
        match = RECORD_FILE.match(name)
        if match is None or int(match.group(2)) != self.worker:
            raise ResultsWriteError(
                f"task {self.worker} shipped records for {name!r}, not one of its record files",
                path=str(self.cell_dir),
            )
        return self.cell_dir / name

    def accept(self, item: Shipment) -> None:
        """Append a chunk at its offset or rewrite a sidecar; raise ``ResultsWriteError``."""
        path = self._path(item.name)
        try:
            if isinstance(item, RecordCount):
                if item.name not in self._files:
                    raise ResultsWriteError(
                        f"{path}: a count arrived before the file", path=str(path)
                    )
                file = self._files[item.name]
                if not file.closed:
                    file.flush()
                write_count(path, item.records, closed=item.closed, t_ns=item.t_ns)
                if item.closed:
                    self._close(item.name)
                return
            self._append(path, item)
        except OSError as exc:
            raise ResultsWriteError(
                f"cannot write {path}: {exc.strerror or exc}", path=str(path), errno=exc.errno
            ) from None

    def _append(self, path: Path, chunk: RecordChunk) -> None:
        file = self._files.get(chunk.name)
        if file is None:
            if chunk.offset != 0:
                raise ResultsWriteError(
                    f"{path}: first chunk at offset {chunk.offset}", path=str(path)
                )
            file = self._files[chunk.name] = open(path, "xb")  # noqa: SIM115
            self._sizes[chunk.name] = 0
        if chunk.offset != self._sizes[chunk.name] or len(chunk.data) % RECORD_SIZE:
            raise ResultsWriteError(
                f"{path}: chunk of {len(chunk.data)} bytes at offset {chunk.offset}, "
                f"expected whole records at {self._sizes[chunk.name]}",
                path=str(path),
            )
        file.write(chunk.data)
        self._sizes[chunk.name] += len(chunk.data)
        self.received_bytes += len(chunk.data)

    def _close(self, name: str) -> None:
        file = self._files.get(name)
        if file is not None and not file.closed:
            file.flush()
            os.fsync(file.fileno())
            file.close()

    def close(self) -> None:
        """Flush and close every file (a task that died leaves its sidecar unclosed)."""
        for name in list(self._files):
            with contextlib.suppress(OSError):
                self._close(name)
