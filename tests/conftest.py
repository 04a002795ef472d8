"""Shared by every test: no test reads or writes the user's calibration file."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_calibration(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point ``MQBENCH_CALIBRATION`` at a file that does not exist (tests may replace it)."""
    path = tmp_path_factory.mktemp("calibration") / "calibration.json"
    monkeypatch.setenv("MQBENCH_CALIBRATION", str(path))
    return path
