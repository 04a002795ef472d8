"""Result folders: created exclusively, never overwritten; manifest written atomically."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import secrets
from pathlib import Path
from typing import Any

from mqbench.errors import ResultsError, ResultsWriteError

MANIFEST = "manifest.json"


def utc_stamp(now: dt.datetime | None = None) -> str:
    """Compact UTC timestamp for folder names, e.g. ``20261122T050102Z``."""
    now = now or dt.datetime.now(dt.UTC)
    return now.strftime("%Y%m%dT%H%M%SZ")


def create_result_dir(root: Path, scenario_name: str) -> Path:
    """Create ``root/<scenario>/<UTC timestamp>-<short id>`` with an exclusive mkdir."""
    parent = root.resolve() / scenario_name
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(f"cannot create output folder {parent}: {exc.strerror}") from None
    if not os.access(parent, os.W_OK):
        raise ResultsError(f"output folder {parent} is not writable")
    for _ in range(10):
        path = parent / f"{utc_stamp()}-{secrets.token_hex(3)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise ResultsError(f"cannot create result folder {path}: {exc.strerror}") from None
        return path
    raise ResultsError(f"could not find an unused result folder name under {parent}")


def check_output_root(root: Path, scenario_name: str | None = None) -> None:
    """Fail early (before any broker starts) when ``root`` cannot hold results (of
    ``scenario_name``: they go into ``root/<scenario_name>/``, see :func:`create_result_dir`)."""
    probe = root
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ResultsError(f"output folder {root}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ResultsError(f"output folder {root} is not writable")
    if scenario_name is None:
        return
    folder = root / scenario_name
    if folder.exists() and not folder.is_dir():
        raise ResultsError(
            f"output folder {root}: {folder} is a file, not a folder (the results of "
            f"scenario {scenario_name!r} go into {folder}/)"
        )
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        raise ResultsError(f"output folder {folder} is not writable")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file and rename it over ``path``.

    ``path`` always holds either the old or the new complete document. When anything
    fails (a full disk, an interrupt) the temporary file is removed and the error raised:
    ``OSError`` becomes :class:`ResultsWriteError` naming the file.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise ResultsWriteError(
                f"cannot write {path}: {exc.strerror or exc}", path=str(path), errno=exc.errno
            ) from None
        raise


class SpaceReserve:
    """A file of ``size`` bytes kept in the result folder while a run writes into it.

    When the disk fills up mid-run, releasing it makes room for the last manifest and event
    writes, so a run that fails for lack of space still ends with a complete manifest.
    """

    NAME = ".mqbench-space-reserve"

    def __init__(self, folder: Path, size: int) -> None:
        self.path: Path | None = folder / self.NAME
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                try:
                    os.posix_fallocate(fd, 0, size)
                except (AttributeError, OSError) as exc:
                    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                        raise
                    os.write(fd, bytes(size))  # file systems without fallocate
            finally:
                os.close(fd)
        except OSError as exc:
            self.release()
            raise ResultsWriteError(
                f"cannot reserve {size} bytes in {folder}: {exc.strerror or exc}",
                path=str(folder),
                errno=exc.errno,
            ) from None

    def release(self) -> None:
        """Delete the reserve (idempotent)."""
        path, self.path = self.path, None
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
