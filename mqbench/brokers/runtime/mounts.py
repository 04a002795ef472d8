"""Where a broker process sees the files mqbench writes for it: ``Mounts``.

A native broker reads its config, certificates and password files at the paths mqbench
wrote them to. A broker in a container reads the same files through bind mounts, at other
paths. A spec's ``configure`` writes every file on this machine and names each one in the
broker's config through ``Mounts.seen``, so one piece of code writes the config for both
(the docker runtime's use: ``mqbench/brokers/docker/security.py``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class Mounts:
    """Host directory -> the path the broker process sees it at (empty: the same path)."""

    points: tuple[tuple[Path, PurePosixPath], ...] = ()

    def seen(self, path: Path) -> str:
        """``path`` (a file mqbench wrote on this machine) as the broker process sees it."""
        for host, inside in self.points:
            if path == host or host in path.parents:
                return str(inside / path.relative_to(host).as_posix())
        return str(path)

    def relative(self, path: Path, start: Path) -> str:
        """``path`` relative to the directory ``start``, both as the broker sees them."""
        return posixpath.relpath(self.seen(path), self.seen(start))


NATIVE = Mounts()
"""The broker runs on this machine and sees every path as it is."""
