"""The Compose Specification's JSON schema, as Docker Compose v2 itself validates with it.

The schema ships in the Go module ``github.com/compose-spec/compose-go/v2`` (the library
Docker Compose v2 loads compose files with) at ``schema/compose-spec.json``. The module is
fetched with ``go mod download`` (``scripts/install.sh`` does it once; here it is a no-op
then) at a pinned version, and the JSON is validated with the ``jsonschema`` package.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

COMPOSE_GO = "github.com/compose-spec/compose-go/v2@v2.16.2"
"""The pinned module (also in scripts/install.sh)."""


@functools.cache
def compose_schema() -> dict[str, Any]:
    """The schema document (fails the test, not skips it, when it cannot be had)."""
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin:/usr/lib/go/bin")
    if go is None:
        pytest.fail("the Compose schema comes from a Go module: install Go (scripts/install.sh)")
    proc = subprocess.run(
        [go, "mod", "download", "-json", COMPOSE_GO],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        pytest.fail(f"go mod download {COMPOSE_GO} failed: {info.get('Error') or proc.stderr}")
    schema: dict[str, Any] = json.loads(
        (Path(info["Dir"]) / "schema" / "compose-spec.json").read_text(encoding="utf-8")
    )
    return schema


def compose_errors(document: dict[str, Any]) -> list[str]:
    """Every way ``document`` breaks the Compose Specification ([] when it is valid)."""
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(document)
    ]
