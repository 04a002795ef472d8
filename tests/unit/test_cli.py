"""The CLI's contract: one-line errors, exit codes 1/2, no traceback, nothing half-written."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqbench.cli.app import app

runner = CliRunner()


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQBENCH_DEBUG", raising=False)


def test_version_prints_the_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.output.startswith("mqbench 0.")


def test_validate_accepts_a_good_scenario(tmp_path: Path) -> None:
    path = write(tmp_path, "name: ok\ntargets: [nats, mosquitto]\nworkload: {qos: 0}\n")
    result = runner.invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "ok (2 cell(s))" in result.output


def test_validate_names_the_unknown_key_in_one_line_without_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, "name: ok\ntargets: [nats]\nworkload: {rte: 10}\n")
    result = runner.invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 1
    assert "unknown key 'workload.rte'" in result.output
    assert str(path) in result.output
    assert "Traceback" not in result.output


def test_validate_rejects_unknown_target(tmp_path: Path) -> None:
    path = write(tmp_path, "name: ok\ntargets: [kafkaesque]\n")
    result = runner.invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 1
    assert "unknown target 'kafkaesque'" in result.output


def test_validate_rejects_qos_the_protocol_cannot_give(tmp_path: Path) -> None:
    path = write(tmp_path, "name: ok\ntargets: [nats]\nworkload: {qos: 1}\n")
    result = runner.invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 1
    assert "QoS 1 is not supported by the nats client" in result.output


def test_bad_set_override_is_a_usage_error_with_exit_code_2(tmp_path: Path) -> None:
    path = write(tmp_path, "name: ok\ntargets: [nats]\n")
    result = runner.invoke(app, ["run", str(path), "--set", "workload.rate", "--dry-run"])
    assert result.exit_code == 2
    assert "expected KEY.PATH=VALUE" in result.output


def test_unknown_option_is_a_usage_error() -> None:
    result = runner.invoke(app, ["run", "--frobnicate"])
    assert result.exit_code == 2


def test_dry_run_prints_cells_and_offered_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "name: dr\ntargets: [nats]\nworkload: {pairs: [10, 100], rate: 50, payload: 1KiB}\n",
    )
    out = tmp_path / "results"
    result = runner.invoke(
        app, ["run", str(path), "--dry-run", "--out", str(out)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "nats-1KiB-10pairs-50hz-qos0" in result.output
    assert "5,000" in result.output  # 100 pairs x 50 msg/s
    assert not out.exists()


def test_only_with_unknown_cell_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path, "name: dr\ntargets: [nats]\n")
    result = runner.invoke(app, ["run", str(path), "--only", "nope", "--dry-run"])
    assert result.exit_code == 2
    assert "no such cell" in result.output


def test_run_with_unknown_target_creates_no_result_folder(tmp_path: Path) -> None:
    path = write(tmp_path, "name: bad\ntargets: [kafkaesque]\n")
    out = tmp_path / "results"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 1
    assert "unknown target 'kafkaesque'" in result.output
    assert not (out / "bad").exists()


def test_run_with_missing_broker_binary_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqbench.brokers.runtime.native_spec import NativeSpec

    monkeypatch.setattr(NativeSpec, "find_binary", lambda self: None)
    path = write(tmp_path, "name: nobin\ntargets: [mosquitto]\n")
    out = tmp_path / "results"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 1
    assert "mosquitto" in result.output
    assert "apt-get install mosquitto" in result.output
    assert not (out / "nobin").exists()


def test_run_into_unwritable_folder_fails_before_starting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    path = write(tmp_path, "name: q\ntargets: [nats]\n")
    result = runner.invoke(app, ["run", str(path), "--out", str(blocker / "results")])
    assert result.exit_code == 1
    assert "not a directory" in result.output


def test_analyze_of_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(tmp_path / "nope")])
    assert result.exit_code == 1
    assert "no such result folder" in result.output
    assert "Traceback" not in result.output


def test_analyze_rejects_malformed_conf() -> None:
    result = runner.invoke(app, ["analyze", ".", "--conf", "novalue"])
    assert result.exit_code == 2
    assert "expected KEY=VALUE" in result.output


def test_debug_env_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQBENCH_DEBUG", "1")
    path = write(tmp_path, "name: ok\ntargets: [kafkaesque]\n")
    result = runner.invoke(app, ["scenario", "validate", str(path)])
    assert result.exit_code == 1
    assert result.exception is not None


def test_targets_lists_every_target_with_runtime_availability() -> None:
    result = runner.invoke(app, ["targets"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for name in ("mosquitto", "emqx", "hivemq", "rabbitmq-mqtt", "nats", "zenoh", "tbmq-style"):
        assert name in result.output


FAULTY = (
    "name: f\ntargets: [nats]\nworkload: {{pairs: 2, rate: 1, duration: 10s}}\n"
    "faults: {{{faults}}}\n"
)


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ("type: drop_all, schedule: {kind: fixed, every: 5s, duration: 1s}", "drop_all"),
        (
            "type: latency, attributes: {delay_ms: 5}, "
            "schedule: {kind: fixed, every: 5s, duration: 1s}",
            "toxic 'latency' has no attribute 'delay_ms'",
        ),
        (
            "schedule: {kind: exponential, mttf: 5s, mttr: 30s}",
            "a fault lasts 30 s on average, not shorter than the 10 s run",
        ),
        (
            "target: gateways, schedule: {kind: fixed, every: 5s, duration: 1s}",
            "faults.target 'gateways' is no client group",
        ),
        (
            "proxy: 'http://10.0.0.1:8474', schedule: {kind: fixed, every: 5s, duration: 1s}",
            "is not a loopback URL",
        ),
    ],
)
def test_bad_faults_are_rejected_in_one_line_before_anything_runs(
    tmp_path: Path, faults: str, message: str
) -> None:
    path = write(tmp_path, FAULTY.format(faults=faults))
    out = tmp_path / "results"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not out.exists() or not any(out.rglob("manifest.json"))


def test_a_toxiproxy_url_that_does_not_answer_is_rejected_before_load(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = write(
        tmp_path,
        FAULTY.format(
            faults=f"proxy: 'http://127.0.0.1:{port}', "
            "schedule: {kind: fixed, every: 5s, duration: 1s}"
        ),
    )
    out = tmp_path / "results"
    result = runner.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert f"127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output
    assert not out.exists() or not any(out.rglob("*.bin"))


def test_a_local_run_to_a_uri_is_refused_in_one_line_before_anything_starts(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "name: ok\ntargets: [nats]\nworkload: {qos: 0}\n")
    result = runner.invoke(app, ["run", str(path), "--out", "hdfs://127.0.0.1:9/results"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--out hdfs://127.0.0.1:9/results: a URI needs" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "hdfs:").exists() and not Path("hdfs:").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "hdfs://127.0.0.1:9/results/s/run"],
        ["compare", "hdfs://127.0.0.1:9/results/s/a", "results/b"],
    ],
)
def test_report_and_compare_refuse_a_uri_in_one_line_naming_the_way(argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "reads local result folders only" in lines[0]
    assert "hdfs://127.0.0.1:9/results/s/" in lines[0]
