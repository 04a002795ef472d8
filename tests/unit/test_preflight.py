"""One pre-flight: `scenario validate`, `run --dry-run` and `run` refuse the same scenarios
with the same line, before a result folder exists or a broker starts."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mqbench.cli.app import app
from mqbench.errors import TransportError
from mqbench.scenario.loader import validate_scenario
from mqbench.transports.registry import get_transport
from mqbench.workload.preflight import preflight

runner = CliRunner()

GROUPS = (
    "workload:\n  topology: groups\n  rate: 10\n  groups:\n"
    "    publishers: [{id: a, count: 2, topic_prefix: 'x/a/'}]\n"
    "    subscribers: [{id: s, count: 1, topic_filter: 'y/+', expected_publisher_groups: [a]}]\n"
)
REFUSED = {
    "qos-beyond-the-client": (
        "name: q\ntargets: [mosquitto]\nclient: [paho]\nworkload: {qos: 2}\n",
        "QoS 2 is not supported by the paho client (max QoS 1)",
    ),
    "unknown-broker-option": (
        "name: o\ntargets: [nats]\nbroker: {options: [{bogus_option: 1}]}\n",
        "target 'nats': unknown nats option(s) bogus_option",
    ),
    "mistyped-broker-option": (
        "name: o\ntargets: [nats]\nbroker: {options: [{max_pending: lots}]}\n",
        "target 'nats': nats option max_pending='lots': input should be a valid integer",
    ),
    "group-filter-that-misses": (
        "name: g\ntargets: [mosquitto]\n" + GROUPS,
        "filter 'y/+' does not match publisher group 'a'",
    ),
    "wildcards-the-client-cannot-subscribe": (
        "name: w\ntargets: [rabbitmq-amqp]\nworkload: {topology: fanin, publishers: 4}\n",
        "which the amqp client does not support (exact topics only)",
    ),
    "password-env-not-set": (
        "name: e\ntargets: [mosquitto]\n"
        "security: {auth: {username: u, password_env: MQBENCH_TEST_UNSET_PASSWORD}}\n",
        "environment variable MQBENCH_TEST_UNSET_PASSWORD is not set",
    ),
    "password-file-missing": (
        "name: f\ntargets: [nats]\n"
        "security: {auth: {username: u, password_file: /nonexistent/mqbench-pw}}\n",
        "security.auth.password_file: /nonexistent/mqbench-pw: no such file",
    ),
    "literal-password-in-the-scenario": (
        "name: l\ntargets: [nats]\nsecurity: {auth: {username: u, password: hunter2}}\n",
        "'password' is not read from the scenario: secrets come only from password_env",
    ),
    "persistent-sessions-the-client-lacks": (
        "name: p\ntargets: [nats]\nworkload: {persistent: true}\n",
        "the nats client (nats) has no persistent sessions",
    ),
}


@pytest.fixture(autouse=True)
def no_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQBENCH_DEBUG", raising=False)
    monkeypatch.delenv("MQBENCH_TEST_UNSET_PASSWORD", raising=False)


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("command", ["validate", "dry-run", "run"])
def test_validate_dry_run_and_run_refuse_alike_before_anything_exists(
    tmp_path: Path, case: str, command: str
) -> None:
    text, message = REFUSED[case]
    path = tmp_path / "s.yaml"
    path.write_text(text)
    out = tmp_path / "results"
    args = {
        "validate": ["scenario", "validate", str(path), "--out", str(out)],
        "dry-run": ["run", str(path), "--dry-run", "--out", str(out)],
        "run": ["run", str(path), "--out", str(out)],
    }[command]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert message in result.output.replace("\n", "")
    assert "Traceback" not in result.output
    assert "hunter2" not in result.output
    assert not out.exists()


def test_a_scenario_the_preflight_accepts_returns_its_cells(tmp_path: Path) -> None:
    scenario = validate_scenario(
        {"name": "ok", "targets": ["nats"], "workload": {"pairs": [1, 2]}}, "s.yaml"
    )
    cells = preflight(scenario, out_root=tmp_path / "results")
    assert [c.pairs for c in cells] == [1, 2]


def test_a_plugin_client_without_capabilities_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plugin_without_caps.py").write_text(
        "class T:\n    name = 't'\n    protocol = 'mqtt'\n    max_qos = 0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TransportError, match="plugin_without_caps:T declares no capabilities"):
        get_transport("plugin_without_caps:T")
