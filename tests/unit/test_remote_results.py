"""Run folders published to / fetched from a URI, with a fake file system."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mqbench.errors import ResultsError
from mqbench.records.hadoop_fs import (
    MANIFEST,
    RemoteRoot,
    RunPublisher,
    fetch_folder,
    publish_new,
)

ROOT = "mem://nn/results"


class FakeFs:
    """A file system held in a folder, addressed by ``mem://nn/...`` URIs; logs copies."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.puts: list[str] = []

    def _at(self, uri: RemoteRoot) -> Path:
        assert uri.uri.startswith("mem://nn/")
        return self.base / uri.uri.removeprefix("mem://nn/")

    def exists(self, uri: RemoteRoot) -> bool:
        return self._at(uri).exists()

    def reserve(self, folder: RemoteRoot) -> None:
        if self.exists(folder):
            raise ResultsError(f"{folder} exists")
        self._at(folder).mkdir(parents=True)

    def put(self, local: Path, uri: RemoteRoot) -> None:
        target = self._at(uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, target)
        self.puts.append(uri.uri.removeprefix(ROOT + "/"))

    def files(self, folder: RemoteRoot) -> dict[str, int]:
        base = self._at(folder)
        return {
            p.relative_to(base).as_posix(): p.stat().st_size for p in base.rglob("*") if p.is_file()
        }

    def get(self, uri: RemoteRoot, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self._at(uri), local)


def _touch(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_each_publication_copies_what_changed_and_the_manifest_last(tmp_path: Path) -> None:
    fs, run = FakeFs(tmp_path / "remote"), tmp_path / "run"
    folder = RemoteRoot(ROOT).child("run")
    fs.reserve(folder)
    publisher = RunPublisher(fs, folder, frozenset({".reserve"}))
    _touch(run / MANIFEST, "{1}")
    _touch(run / "cells/c1/sends-0.bin", "abc")
    _touch(run / ".reserve", "x")
    _touch(run / ".manifest.json.tmp", "half")
    assert publisher.publish(run) == ["cells/c1/sends-0.bin", MANIFEST]
    _touch(run / "cells/c2/sends-0.bin", "def")
    _touch(run / MANIFEST, "{1, 2}")
    assert publisher.publish(run) == ["cells/c2/sends-0.bin", MANIFEST]
    assert publisher.publish(run) == []
    assert fs.puts[-1] == "run/" + MANIFEST
    assert (tmp_path / "remote/results/run" / MANIFEST).read_text() == "{1, 2}"
    assert not (tmp_path / "remote/results/run/.reserve").exists()


def test_a_reserved_run_folder_is_never_reserved_twice(tmp_path: Path) -> None:
    fs = FakeFs(tmp_path)
    folder = RemoteRoot(ROOT).child("run")
    fs.reserve(folder)
    with pytest.raises(ResultsError, match="exists"):
        fs.reserve(folder)


def test_analysis_outputs_are_published_without_overwriting_what_was_there(
    tmp_path: Path,
) -> None:
    fs = FakeFs(tmp_path / "remote")
    folder = RemoteRoot(ROOT).child("run")
    _touch(tmp_path / "remote/results/run" / MANIFEST, "m")
    _touch(tmp_path / "remote/results/run/cells/c1/summary.json", "old")
    local = tmp_path / "local"
    fetched = fetch_folder(fs, folder, local)
    assert set(fetched) == {MANIFEST, "cells/c1/summary.json"}
    _touch(local / "cells/c1/summary.json", "new analysis")
    os.utime(local / "cells/c1/summary.json", ns=(1, 1))
    _touch(local / "summary.parquet", "p")
    published, kept = publish_new(fs, local, folder, fetched)
    assert published == ["summary.parquet"] and kept == ["cells/c1/summary.json"]
    assert (tmp_path / "remote/results/run/cells/c1/summary.json").read_text() == "old"
    assert (tmp_path / "remote/results/run/summary.parquet").read_text() == "p"


def test_a_folder_without_a_manifest_is_not_fetched_as_a_run(tmp_path: Path) -> None:
    fs = FakeFs(tmp_path / "remote")
    _touch(tmp_path / "remote/results/run/x.txt", "x")
    with pytest.raises(ResultsError, match=r"no manifest\.json"):
        fetch_folder(fs, RemoteRoot(ROOT).child("run"), tmp_path / "local")
