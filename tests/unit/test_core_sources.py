"""A compiled core built from other ``core/`` sources than the checkout's is not used."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

import mqbench
from mqbench.workload.core_sources import checkout_core, sources_digest, staleness
from mqbench.workload.hot_path import CoreInstall, core_install, judge_install


def fake_checkout(root: Path) -> Path:
    """A source checkout's ``mqbench/`` with a small ``core/`` beside it."""
    (root / "mqbench").mkdir(parents=True)
    core = root / "core"
    (core / "src" / "deep").mkdir(parents=True)
    (core / "Cargo.toml").write_text('[package]\nname = "mqbench-core"\n')
    (core / "Cargo.lock").write_text("version = 4\n")
    (core / "pyproject.toml").write_text("[tool.maturin]\n")
    (core / "src" / "lib.rs").write_text("pub mod engine;\n")
    (core / "src" / "deep" / "engine.rs").write_text("// the loop\npub fn run() {}\n")
    return core


def built_from(core: Path) -> SimpleNamespace:
    """A fake ``mqbench_core`` module built from ``core`` as it is now."""
    return SimpleNamespace(__version__="9.9.9", __sources__=sources_digest(core))


def test_a_core_built_from_the_checkouts_sources_is_used(tmp_path: Path) -> None:
    core = fake_checkout(tmp_path)
    assert checkout_core(tmp_path / "mqbench") == core
    assert judge_install(built_from(core), core) == CoreInstall("9.9.9")


def test_an_edited_source_file_makes_the_core_stale_and_unused(tmp_path: Path) -> None:
    core = fake_checkout(tmp_path)
    module = built_from(core)
    (core / "src" / "deep" / "engine.rs").write_text("// the new loop\npub fn run() {}\n")
    install = judge_install(module, core)
    assert install.version is None
    assert install.stale
    assert install.missing is not None
    assert "built from other core/ sources than this checkout's" in install.missing
    assert "scripts/install.sh" in install.missing


@pytest.mark.parametrize(
    "change",
    [
        lambda core: (core / "Cargo.lock").write_text("version = 4\n# bumped\n"),
        lambda core: (core / "pyproject.toml").write_text("[tool.maturin]\nfeatures = []\n"),
        lambda core: (core / "src" / "new.rs").write_text("pub fn more() {}\n"),
        lambda core: (core / "src" / "lib.rs").unlink(),
        lambda core: (core / "src" / "lib.rs").rename(core / "src" / "lib2.rs"),
    ],
    ids=["lock", "pyproject", "added", "removed", "renamed"],
)
def test_any_change_to_what_the_build_reads_changes_the_digest(
    tmp_path: Path, change: Callable[[Path], object]
) -> None:
    core = fake_checkout(tmp_path)
    before = sources_digest(core)
    change(core)
    assert sources_digest(core) != before


def test_an_editors_swap_file_beside_the_sources_is_not_a_source(tmp_path: Path) -> None:
    core = fake_checkout(tmp_path)
    before = sources_digest(core)
    (core / "src" / ".engine.rs.swp").write_bytes(b"\x00swap")
    (core / "src" / "lib.rs~").write_text("backup\n")
    assert sources_digest(core) == before


def test_a_core_that_records_no_sources_is_stale_in_a_checkout(tmp_path: Path) -> None:
    core = fake_checkout(tmp_path)
    for sources in (None, ""):
        module = SimpleNamespace(__version__="9.9.9", __sources__=sources)
        install = judge_install(module, core)
        assert install.stale and install.version is None
        assert install.missing is not None and "records no core/ sources" in install.missing
    older = SimpleNamespace(__version__="9.9.9")  # built before the core exported its sources
    assert judge_install(older, core).stale


def test_an_installed_package_without_core_beside_it_is_not_checked(tmp_path: Path) -> None:
    (tmp_path / "site-packages" / "mqbench").mkdir(parents=True)
    assert checkout_core(tmp_path / "site-packages" / "mqbench") is None
    assert staleness(None, None) is None
    module = SimpleNamespace(__version__="9.9.9", __sources__=None)
    assert judge_install(module, None) == CoreInstall("9.9.9")


def test_a_folder_named_core_without_a_cargo_manifest_is_not_a_checkout(tmp_path: Path) -> None:
    (tmp_path / "mqbench").mkdir()
    (tmp_path / "core").mkdir()
    assert checkout_core(tmp_path / "mqbench") is None


@pytest.fixture
def fresh_install_check() -> Iterator[None]:
    """``core_install`` checks once per process: forget its answer before and after."""
    core_install.cache_clear()
    yield
    core_install.cache_clear()


@pytest.mark.usefixtures("fresh_install_check")
def test_the_engine_compares_the_imported_core_with_this_checkouts_core_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = checkout_core(Path(mqbench.__file__).resolve().parent)
    assert core is not None  # the tests run from a source checkout
    monkeypatch.setitem(sys.modules, "mqbench_core", built_from(core))
    assert core_install() == CoreInstall("9.9.9")
    core_install.cache_clear()
    stale = SimpleNamespace(__version__="9.9.9", __sources__="0" * 64)
    monkeypatch.setitem(sys.modules, "mqbench_core", stale)
    assert core_install().stale
