"""``mqbench calibrate`` errors as one line with exit codes, and ``run``'s calibration check."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from calibration_fixtures import calibration
from typer.testing import CliRunner

from mqbench.brokers.base import Availability
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.calibration import store
from mqbench.calibration.model import current_host
from mqbench.cli.app import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQBENCH_DEBUG", raising=False)


@pytest.fixture
def nothing_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(self: NativeRuntime, target: str) -> Availability:
        return Availability(False, f"{target} is not installed here")

    monkeypatch.setattr(NativeRuntime, "availability", unavailable)


def one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_bad_format_is_a_usage_error() -> None:
    result = runner.invoke(app, ["calibrate", "--format", "yaml"])
    assert result.exit_code == 2
    assert one_line_error(result.output) == "error: --format 'yaml': choose one of table, json"


def test_an_unknown_target_is_a_usage_error_naming_the_known_ones() -> None:
    result = runner.invoke(app, ["calibrate", "--target", "kafkaesque"])
    assert result.exit_code == 2
    line = one_line_error(result.output)
    assert "--target 'kafkaesque': unknown target (known: mosquitto, emqx" in line


def test_a_target_that_is_not_installed_fails_with_the_reason(nothing_installed: None) -> None:
    result = runner.invoke(app, ["calibrate", "--target", "nats"])
    assert result.exit_code == 1
    line = one_line_error(result.output)
    assert line == (
        "error: --target 'nats': not installed for the native runtime (nats is not installed here)"
    )


def test_without_any_installed_broker_calibrate_says_so(nothing_installed: None) -> None:
    result = runner.invoke(app, ["calibrate"])
    assert result.exit_code == 1
    assert "no broker is installed for the native runtime" in one_line_error(result.output)


def test_an_unwritable_out_path_is_refused_before_measuring(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = blocker / "calibration.json"
    result = runner.invoke(app, ["calibrate", "--out", str(out)])
    assert result.exit_code == 2
    line = one_line_error(result.output)
    assert line.startswith(f"error: --out {out}: cannot write the calibration")
    assert "is not a directory" in line


def test_an_unwritable_default_path_is_an_error_with_exit_code_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("MQBENCH_CALIBRATION", str(blocker / "c.json"))
    result = runner.invoke(app, ["calibrate"])
    assert result.exit_code == 1
    assert "cannot write the calibration" in one_line_error(result.output)


@pytest.mark.parametrize("duration", ["0s", "soon"])
def test_a_bad_duration_is_a_usage_error(duration: str) -> None:
    result = runner.invoke(app, ["calibrate", "--duration", duration])
    assert result.exit_code == 2
    assert one_line_error(result.output).startswith(f"error: --duration {duration!r}: ")


def write_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntargets: [nats]\nworkload: {pairs: 10, rate: [10, 500]}\n")
    return path


def test_run_warns_once_per_cell_above_the_calibrated_ceiling(
    tmp_path: Path, isolated_calibration: Path
) -> None:
    store.save(calibration({"nats": 1000.0}), isolated_calibration)
    result = runner.invoke(app, ["run", str(write_scenario(tmp_path)), "--dry-run"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: nats-1KiB-10pairs-500hz-qos0: 5,000 msg/s offered per worker (2 worker(s)) "
        "is above the calibrated nats ceiling of 1,000 msg/s per worker; send lag may "
        "dominate its latency"
    ]


def test_run_names_a_stale_calibration_and_does_not_use_it(
    tmp_path: Path, isolated_calibration: Path
) -> None:
    other = current_host().model_copy(update={"hostname": "elsewhere"})
    store.save(calibration({"nats": 1.0}, host=other), isolated_calibration)
    result = runner.invoke(app, ["run", str(write_scenario(tmp_path)), "--dry-run"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "is stale and not used (hostname 'elsewhere' != " in warnings[0]


def test_the_wakeup_floor_table_shows_each_policy_and_why_one_was_not_measured() -> None:
    from rich.console import Console

    from mqbench.calibration.model import WakeupFigures, WakeupResult
    from mqbench.cli.calibrate_cmd import wakeup_table

    figures = WakeupFigures(p50_us=16.0, p99_us=26.0, p999_us=59.0, max_us=120.0, samples=3000)
    stored = SimpleNamespace(
        wakeup={
            "other": WakeupResult(
                policy="other", interval_us=1000, measured_utc="t", figures=figures
            ),
            "fifo": WakeupResult(
                policy="fifo", interval_us=1000, measured_utc="t", figures=None, reason="no root"
            ),
        }
    )
    console = Console(width=120, record=True)
    console.print(wakeup_table(stored))  # type: ignore[arg-type]
    text = console.export_text()
    assert "│ other  │ 16.0 │ 26.0 │  59.0 │ 120.0 │   3,000 │" in text
    assert "no root" in text
