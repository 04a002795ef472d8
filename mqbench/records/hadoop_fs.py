"""Result folders on any Hadoop-compatible URI (``hdfs://``, ``s3a://``, ``file://``, ...).

A run with ``--out URI`` builds its run folder in a private local staging folder and
publishes it to the URI through the Hadoop ``FileSystem`` API of a running Spark JVM
(py4j: ``sc._jvm.org.apache.hadoop.fs``); ``analyze URI`` fetches a run folder the same way
and publishes its outputs back (docs/distributed.md). Nothing here imports PySpark: the
caller passes its ``SparkContext``, so any scheme that JVM's Hadoop knows works.

A URI is carried as a string from the command line on (``RemoteRoot``): ``pathlib`` would
turn ``hdfs://nn/x`` into ``hdfs:/nn/x``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mqbench.errors import ResultsError, ResultsWriteError

MANIFEST = "manifest.json"

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class RemoteRoot:
    """A folder on a Hadoop-compatible URI, e.g. ``hdfs://127.0.0.1:9000/results``."""

    uri: str

    def child(self, *parts: str) -> RemoteRoot:
        """The URI of ``parts`` below this folder."""
        return RemoteRoot("/".join([self.uri.rstrip("/"), *parts]))

    @property
    def name(self) -> str:
        """The last component of the URI."""
        return self.uri.rstrip("/").rpartition("/")[2]

    def __str__(self) -> str:
        return self.uri


def parse_location(text: str) -> Path | RemoteRoot:
    """``text`` as a local path, or as a ``RemoteRoot`` when it starts with ``scheme://``."""
    if _SCHEME.match(text):
        return RemoteRoot(text.rstrip("/") or text)
    return Path(text)


def _why(exc: BaseException) -> str:
    """The first line of a (py4j) Java exception, without the Python wrapper's noise."""
    java = getattr(exc, "java_exception", None)
    text = str(java) if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


class RemoteFs(Protocol):
    """What publishing and fetching need of a file system (``HadoopFs``; fakes in tests)."""

    def exists(self, uri: RemoteRoot) -> bool:
        """Whether ``uri`` exists."""
        ...

    def reserve(self, folder: RemoteRoot) -> None:
        """Create ``folder``; refuse when it exists."""
        ...

    def put(self, local: Path, uri: RemoteRoot) -> None:
        """Copy a local file to ``uri``."""
        ...

    def files(self, folder: RemoteRoot) -> dict[str, int]:
        """Files below ``folder``: relative path -> size."""
        ...

    def get(self, uri: RemoteRoot, local: Path) -> None:
        """Copy the file ``uri`` to ``local``."""
        ...


class HadoopFs:
    """The Hadoop ``FileSystem`` of one URI, driven over py4j from a ``SparkContext``."""

    def __init__(self, sc: Any, root: RemoteRoot) -> None:
        self.root = root
        self._jvm = sc._jvm
        self._conf = sc._jsc.hadoopConfiguration()
        try:
            uri = self._jvm.java.net.URI(root.uri)
            self._fs = self._jvm.org.apache.hadoop.fs.FileSystem.get(uri, self._conf)
        except Exception as exc:  # py4j: unknown scheme, unreachable name node, ...
            raise ResultsError(f"{root}: no Hadoop FileSystem for it: {_why(exc)}") from None

    def _path(self, uri: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def _local(self, path: Path) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(path.resolve().as_uri())

    def exists(self, uri: RemoteRoot) -> bool:
        """Whether ``uri`` exists."""
        try:
            return bool(self._fs.exists(self._path(uri.uri)))
        except Exception as exc:
            raise ResultsError(f"{uri}: cannot check it: {_why(exc)}") from None

    def reserve(self, folder: RemoteRoot) -> None:
        """Create ``folder``; refuse (``ResultsError``) when it exists: never overwrite."""
        if self.exists(folder):
            raise ResultsError(f"{folder} exists: a run folder is never overwritten")
        try:
            if not self._fs.mkdirs(self._path(folder.uri)):
                raise ResultsError(f"cannot create {folder}")
        except ResultsError:
            raise
        except Exception as exc:
            raise ResultsError(f"cannot create {folder}: {_why(exc)}") from None

    def put(self, local: Path, uri: RemoteRoot) -> None:
        """Copy the local file ``local`` to ``uri`` (replacing our own earlier copy)."""
        try:
            self._fs.copyFromLocalFile(False, True, self._local(local), self._path(uri.uri))
        except Exception as exc:
            raise ResultsWriteError(
                f"cannot publish {local.name} to {uri}: {_why(exc)}", path=uri.uri
            ) from None

    def files(self, folder: RemoteRoot) -> dict[str, int]:
        """Every file below ``folder``: path relative to it -> size in bytes."""
        if not self.exists(folder):
            raise ResultsError(f"{folder} does not exist")
        base = str(self._fs.makeQualified(self._path(folder.uri)).toUri().getPath()).rstrip("/")
        found: dict[str, int] = {}
        try:
            listing = self._fs.listFiles(self._path(folder.uri), True)
            while listing.hasNext():
                status = listing.next()
                path = str(status.getPath().toUri().getPath())
                found[path[len(base) + 1 :]] = int(status.getLen())
        except Exception as exc:
            raise ResultsError(f"cannot list {folder}: {_why(exc)}") from None
        return found

    def get(self, uri: RemoteRoot, local: Path) -> None:
        """Copy the file ``uri`` to the local path ``local`` (no ``.crc`` files)."""
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._fs.copyToLocalFile(False, self._path(uri.uri), self._local(local), True)
        except Exception as exc:
            raise ResultsError(f"cannot fetch {uri}: {_why(exc)}") from None


def local_files(folder: Path) -> dict[str, tuple[int, int]]:
    """Regular files below ``folder`` (relative POSIX path -> (size, mtime_ns)).

    Hidden temporary files (``.name.tmp``) are left out: they are never a result.
    """
    found: dict[str, tuple[int, int]] = {}
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            if name.startswith(".") and name.endswith(".tmp"):
                continue
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if path.is_symlink() or not path.is_file():
                continue
            found[path.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns)
    return found


@dataclass
class RunPublisher:
    """Publishes a local run folder to its reserved URI, the manifest always last.

    Each call copies the files that are new or changed since the previous call, then the
    manifest, so a reader never sees a manifest naming files that are not there yet.
    ``skip`` names files that stay local (e.g. the run's disk-space reserve).
    """

    fs: RemoteFs
    folder: RemoteRoot
    skip: frozenset[str] = frozenset()
    _seen: dict[str, tuple[int, int]] = field(default_factory=dict)

    def publish(self, local: Path) -> list[str]:
        """Copy what changed under ``local``; return the relative paths copied."""
        now = local_files(local)
        changed = [
            rel
            for rel, state in sorted(now.items())
            if rel not in self.skip and self._seen.get(rel) != state and rel != MANIFEST
        ]
        if MANIFEST in now and self._seen.get(MANIFEST) != now[MANIFEST]:
            changed.append(MANIFEST)
        for rel in changed:
            self.fs.put(local / rel, self.folder.child(*rel.split("/")))
            self._seen[rel] = now[rel]
        return changed


def fetch_folder(fs: RemoteFs, folder: RemoteRoot, local: Path) -> dict[str, tuple[int, int]]:
    """Copy every file below ``folder`` into ``local``; return the local copies' state
    (relative path -> (size, mtime_ns)) for :func:`publish_new`."""
    remote = fs.files(folder)
    if MANIFEST not in remote:
        raise ResultsError(f"{folder}: no {MANIFEST}; not a run folder")
    for rel in sorted(remote):
        fs.get(folder.child(*rel.split("/")), local / rel)
    return local_files(local)


def publish_new(
    fs: RemoteFs, local: Path, folder: RemoteRoot, fetched: dict[str, tuple[int, int]]
) -> tuple[list[str], list[str]]:
    """Publish the files under ``local`` that ``folder`` did not hold; never overwrite.

    ``fetched`` is what :func:`fetch_folder` copied. Returns (published, kept): ``kept``
    are files that were there and changed locally since; the URI keeps its version.
    """
    published: list[str] = []
    kept: list[str] = []
    for rel, state in sorted(local_files(local).items()):
        if rel in fetched:
            if fetched[rel] != state:
                kept.append(rel)
            continue
        target = folder.child(*rel.split("/"))
        if fs.exists(target):
            kept.append(rel)
            continue
        fs.put(local / rel, target)
        published.append(rel)
    return published, kept
