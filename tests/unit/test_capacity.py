"""Load that cannot fit is refused up front, with the numbers and the limit that applies."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqbench.cli.app import app
from mqbench.errors import CapacityError, ResultsError
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import expand
from mqbench.scenario.model import Scenario
from mqbench.workload import capacity, hot_path
from mqbench.workload.capacity import Limits, check_disk_space, check_fits, record_bytes

runner = CliRunner()
HERE = Limits(
    cpus=2,
    generator_open_files=20_000,
    broker_open_files=20_000,
    broker_limit_source="the RLIMIT_NOFILE it inherits from mqbench",
    memory_bytes=24 * 10**9,
)


def scenario(**workload: object) -> Scenario:
    """Python-engine sizes: with the compiled core installed, ``auto`` would count two files
    per connection (see the compiled-core test below)."""
    base: dict[str, object] = {"pairs": 10, "rate": 10, "payload": "1KiB", "duration": "10s"}
    return validate_scenario(
        {
            "name": "cap",
            "targets": ["redis"],
            "generator": {"hot_path": "python"},
            "workload": {**base, **workload},
        },
        "test",
    )


def refusal(s: Scenario, limits: Limits = HERE) -> str:
    with pytest.raises(CapacityError) as info:
        check_fits(s, expand(s), limits)
    return str(info.value)


def test_a_moderate_cell_fits() -> None:
    s = scenario()
    check_fits(s, expand(s), HERE)


def test_a_million_pairs_need_more_worker_processes_than_cores_allow() -> None:
    message = refusal(scenario(pairs=1_000_000))
    assert "2,000,000 connections need 106 worker processes" in message
    assert "open-files limit 20,000" in message and "4 per core on this 2-core machine" in message


def test_the_compiled_core_counts_two_files_per_connection_against_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hot_path, "core_install", lambda: hot_path.CoreInstall("9.9.9"))
    # 12,000 files: 6,000 connections fit one Python worker, not one compiled-core worker
    low = Limits(**{**HERE.__dict__, "generator_open_files": 12_000, "broker_open_files": None})
    workload = {"pairs": 3000, "rate": 10, "payload": "1KiB", "duration": "10s"}
    compiled = validate_scenario(
        {
            "name": "cap",
            "targets": ["mosquitto"],
            "generator": {"workers": 1},
            "workload": workload,
        },
        "test",
    )
    message = refusal(compiled, low)
    assert "6,000 connections per worker process (two files each on the compiled core)" in message
    assert "set generator.workers to at least 2" in message
    python = validate_scenario(
        {
            "name": "cap",
            "targets": ["mosquitto"],
            "generator": {"workers": 1, "hot_path": "python"},
            "workload": workload,
        },
        "test",
    )
    check_fits(python, expand(python), low)


def test_more_connections_than_the_broker_may_open_names_its_open_files_limit() -> None:
    message = refusal(scenario(pairs=30_000))
    assert "60,000 connections exceed the broker process's open-files limit of 20,000" in message
    assert "RLIMIT_NOFILE" in message


def test_a_broker_limit_refusal_suggests_the_largest_size_that_fits_and_how_to_raise_it() -> None:
    message = refusal(scenario(pairs=[500, 8000, 10_000]))
    assert "`ulimit -n 20064`" in message
    assert "run at most 9,968 pairs: --set workload.pairs=[500,8000,9968]" in message
    fan = {"topology": "fanout", "subscribers": [100, 25_000], "rate": 1, "payload": "64B"}
    fanout = refusal(validate_scenario({"name": "f", "targets": ["redis"], "workload": fan}, "t"))
    assert "run at most 19,935 subscribers: --set workload.subscribers=[100,19935]" in fanout
    fixed = scenario(pairs=[500, 8000, 9968])
    check_fits(fixed, expand(fixed), HERE)


def test_an_unknown_broker_limit_skips_that_check() -> None:
    s = scenario(pairs=30_000)
    check_fits(
        s,
        expand(s),
        Limits(8, 20_000, None, "", 24 * 10**9),
    )


def test_a_low_generator_open_files_limit_asks_for_more_workers() -> None:
    s = scenario(pairs=1000)
    with pytest.raises(CapacityError, match="open-files limit of 1,024") as info:
        check_fits(s, expand(s), Limits(2, 1024, 20_000, "x", 24 * 10**9))
    assert "set generator.workers to at least" in str(info.value)


def test_offered_bytes_beyond_one_second_of_generator_buffers_are_refused() -> None:
    message = refusal(scenario(pairs=1, rate=10_000, payload="1MiB"))
    assert "offers 10.5 GB/s (10,000 msg/s x 1,048,576 B)" in message
    assert "generator.buffer_memory 1 GiB" in message


def test_publishers_whose_buffer_share_cannot_hold_two_messages_are_refused() -> None:
    message = refusal(scenario(pairs=2000, rate=0.1, payload="1MiB"))
    assert "2,000 publishers share generator.buffer_memory 1 GiB" in message


def test_buffer_memory_above_half_the_machine_is_refused() -> None:
    s = validate_scenario(
        {"name": "cap", "targets": ["redis"], "generator": {"buffer_memory": "16GiB"}}, "t"
    )
    with pytest.raises(CapacityError, match="more than half of this machine's"):
        check_fits(s, expand(s), HERE)


def test_record_volume_counts_sends_deliveries_and_acks() -> None:
    (cell,) = expand(scenario(pairs=10, rate=100, qos=1, duration="10s", warmup="0s"))
    assert record_bytes(cell) == 24 * (10_000 + 10_000 + 10_000)


def test_disk_space_check_refuses_with_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capacity, "free_bytes", lambda root: (tmp_path, 1_000_000))
    with pytest.raises(ResultsError) as info:
        check_disk_space(expand(scenario()), tmp_path / "out")
    assert "results need about 3.2 MB" in str(info.value)
    assert f"{tmp_path} has 1.0 MB free" in str(info.value)


def test_validate_dry_run_and_run_refuse_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: big\ntargets: [redis]\n"
        "workload: {pairs: 1, rate: 10000, payload: 1MiB, duration: 30s}\n"
    )
    out = tmp_path / "r"
    for args in (
        ["scenario", "validate", str(path)],
        ["run", str(path), "--dry-run", "--out", str(out)],
        ["run", str(path), "--out", str(out)],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, result.output
        assert "offers 10.5 GB/s" in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_dry_run_shows_the_record_volume_and_the_free_space(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: ok\ntargets: [nats]\nworkload: {pairs: 10, rate: 100, duration: 10s}\n")
    result = runner.invoke(
        app, ["run", str(path), "--dry-run", "--out", str(tmp_path)], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    assert "records" in result.output and "free: fits" in result.output
