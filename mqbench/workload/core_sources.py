"""Which ``core/`` sources the compiled core was built from, and whether this checkout's
still are those (docs/performance.md, "The compiled core").

``scripts/install.sh`` computes :func:`sources_digest` of ``core/`` before it builds the
core and bakes it into the extension (``MQBENCH_CORE_SOURCES`` at build time,
``mqbench_core.__sources__`` at run time). A checkout updated without re-running the
install keeps the old core, which reports the same version: only this digest tells that
its hot path is not the checkout's. An installed wheel ships no ``core/``, so there is
nothing to compare with and its core is taken as it is.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

CORE_SOURCES_ENV: Final = "MQBENCH_CORE_SOURCES"
"""The build-time variable ``scripts/install.sh`` sets to the digest of ``core/``."""

BUILD_FILES: Final = ("Cargo.toml", "Cargo.lock", "pyproject.toml")
"""The files of ``core/`` besides its Rust sources that decide what is built."""

REBUILD_HINT: Final = "rebuild it with scripts/install.sh"


def checkout_core(package_dir: Path) -> Path | None:
    """The ``core/`` folder beside the mqbench package when it runs from a source checkout
    (None for an installed wheel, which has no ``core/`` beside it)."""
    core = package_dir.parent / "core"
    return core if (core / "Cargo.toml").is_file() else None


def sources_digest(core: Path) -> str:
    """SHA-256 (hex) of what the core is built from: ``BUILD_FILES`` and every ``*.rs``
    under ``src/``, each by its path inside ``core/`` and its bytes, in path order.

    Only ``*.rs`` under ``src/``: an editor's swap or backup file there is not a source.
    """
    paths = [core / name for name in BUILD_FILES]
    paths += sorted((core / "src").rglob("*.rs"))
    digest = hashlib.sha256()
    for path in paths:
        name = path.relative_to(core).as_posix().encode()
        data = path.read_bytes() if path.is_file() else b""
        digest.update(b"%d:%s:%d:" % (len(name), name, len(data)))
        digest.update(data)
    return digest.hexdigest()


def staleness(built_from: object, core: Path | None) -> str | None:
    """Why an installed core that records ``built_from`` (its ``__sources__``) is not the
    one ``core`` builds (None: it is, or there is no checkout to compare with)."""
    if core is None:
        return None
    if not isinstance(built_from, str) or not built_from:
        return f"the compiled core is stale (it records no core/ sources; {REBUILD_HINT})"
    if built_from != sources_digest(core):
        return (
            "the compiled core is stale (built from other core/ sources than this "
            f"checkout's; {REBUILD_HINT})"
        )
    return None
