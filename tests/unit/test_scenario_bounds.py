"""Hostile scenario input is bounded: alias bombs, merge keys, loose types and bad ``--set``
paths are refused in one line that names the file (issue 27, "Hostile input")."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from mqbench.errors import MqbenchError, ResultsError, ScenarioError, UsageError
from mqbench.scenario.loader import (
    MAX_SCENARIO_BYTES,
    MAX_YAML_NODES,
    load_scenario,
    parse_override,
    redact_override,
)
from mqbench.scenario.matrix import expand
from mqbench.workload.preflight import check_payloads, preflight

BASE = """\
name: s
targets: [nats]
workload: {pairs: 1, rate: 10, duration: 1s, warmup: 0s}
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def alias_bomb(levels: int, width: int = 9) -> str:
    """A "billion laughs" scenario: ``width ** levels`` values in a few hundred bytes."""
    lines = [
        "name: bomb",
        "targets: [nats]",
        "workload:",
        f"  pairs: &l0 [{', '.join(['1'] * width)}]",
    ]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"  x{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_expands_with_little_memory(tmp_path: Path) -> None:
    path = write(tmp_path, alias_bomb(9))  # 9**10 values once expanded
    assert path.stat().st_size < 600
    tracemalloc.start()
    try:
        with pytest.raises(ScenarioError) as caught:
            load_scenario(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert "aliases are expanded" in message
    assert peak < 5 * 2**20, peak


def test_aliases_within_the_budget_are_read_as_usual(tmp_path: Path) -> None:
    text = BASE + "description: &d shared\nbroker:\n  options: [{label: a}, {label: *d}]\n"
    scenario, _ = load_scenario(write(tmp_path, text))
    assert [o["label"] for o in scenario.broker.options] == ["a", "shared"]


def test_a_file_with_more_values_than_the_budget_is_refused_while_it_is_read(
    tmp_path: Path,
) -> None:
    values = ", ".join(["1"] * (MAX_YAML_NODES + 10))
    path = write(tmp_path, f"{BASE}description: [{values}]\n")
    with pytest.raises(ScenarioError, match=r"more than 100,000 values \(at line 4\)"):
        load_scenario(path)


def test_a_file_above_one_mebibyte_is_not_a_scenario(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "description: '" + "x" * MAX_SCENARIO_BYTES + "'\n")
    with pytest.raises(ScenarioError, match=r"too big for a scenario file \(> 1 MiB\)"):
        load_scenario(path)


def test_a_yaml_merge_key_gets_a_message_that_says_what_to_do(tmp_path: Path) -> None:
    path = write(tmp_path, BASE + "generator: &g {spin_ms: 1}\nbroker:\n  <<: *g\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: a YAML merge key ('<<') at line 6")
    assert "write the keys out" in message


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("workload.rate=true", "workload.rate: Input should be a valid number (got True)"),
        ("workload.pairs='10'", "workload.pairs: Input should be a valid integer (got '10')"),
        ("workload.pairs=2.0", "workload.pairs: Input should be a valid integer (got 2.0)"),
        ("broker.pid=-5", "broker.pid: Input should be greater than 0 (got -5)"),
        ("broker.port=true", "broker.port: Input should be a valid integer (got True)"),
        ("workload.persistent=1", "workload.persistent: Input should be a valid boolean"),
    ],
)
def test_values_of_the_wrong_type_are_refused_not_converted(
    tmp_path: Path, setting: str, problem: str
) -> None:
    path = write(tmp_path, BASE)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path, [setting])
    assert str(caught.value).startswith(f"{path}: {problem}")


def test_numbers_still_fill_float_fields(tmp_path: Path) -> None:
    scenario, _ = load_scenario(write(tmp_path, BASE), ["workload.rate=[10, 2.5]"])
    assert scenario.workload.rate == [10.0, 2.5]


@pytest.mark.parametrize("path", ["a..b", ".a", "a.", "work load.pairs", "a.b c"])
def test_a_set_path_with_an_empty_or_malformed_key_is_refused(path: str) -> None:
    with pytest.raises(UsageError, match=r"KEY\.PATH is keys joined by dots"):
        parse_override(f"{path}=1")


def test_a_set_value_is_read_with_the_same_alias_budget() -> None:
    text = "&a0 [" + ",".join(["1"] * 10) + "]"
    for k in range(1, 7):  # each level: the previous one and 9 aliases of it
        text = f"&a{k} [{text}, " + ", ".join([f"*a{k - 1}"] * 9) + "]"
    with pytest.raises(UsageError, match="aliases are expanded"):
        parse_override(f"description={text}")


def test_a_secret_inside_a_set_mapping_is_redacted_for_messages_and_the_manifest() -> None:
    shown = redact_override("broker.options={password: S3cret, label: x}")
    assert "S3cret" not in shown and "label: x" in shown
    assert redact_override("broker.options.password=S3cret") == (
        "broker.options.password=<redacted>"
    )
    assert redact_override("workload.pairs=3") == "workload.pairs=3"
    assert "S3cret" not in redact_override("broker.options={password: S3cret")


def test_a_nats_payload_above_max_payload_is_refused_by_validate(tmp_path: Path) -> None:
    scenario, _ = load_scenario(write(tmp_path, BASE), ["workload.payload=2MiB"])
    with pytest.raises(ScenarioError) as caught:
        check_payloads(scenario, expand(scenario))
    limit = "the nats server's max_payload (broker.options.max_payload): 1,048,576 B"
    assert limit in str(caught.value)
    raised, _ = load_scenario(
        write(tmp_path, BASE),
        ["workload.payload=2MiB", "broker.options.max_payload=4194304"],
    )
    check_payloads(raised, expand(raised))


def test_a_600_mb_redis_payload_is_refused_against_redis_own_limit(tmp_path: Path) -> None:
    scenario, _ = load_scenario(
        write(tmp_path, BASE), ["targets=[redis]", "workload.payload=600MB"]
    )
    with pytest.raises(ScenarioError) as caught:
        check_payloads(scenario, expand(scenario))
    message = str(caught.value)
    assert "redis's proto-max-bulk-len" in message and "MQTT" not in message


def test_an_mqtt_payload_above_the_packet_limit_names_mqtt(tmp_path: Path) -> None:
    scenario, _ = load_scenario(
        write(tmp_path, BASE), ["targets=[mosquitto]", "workload.payload=300MiB"]
    )
    with pytest.raises(ScenarioError, match="MQTT's maximum packet size"):
        check_payloads(scenario, expand(scenario))


def test_an_external_nats_broker_is_not_held_to_the_max_payload_mqbench_writes(
    tmp_path: Path,
) -> None:
    scenario, _ = load_scenario(
        write(tmp_path, BASE),
        ["runtime=external", "broker.port=4222", "workload.payload=2MiB"],
    )
    check_payloads(scenario, expand(scenario))


def test_an_out_folder_holding_a_file_with_the_scenario_name_is_refused_up_front(
    tmp_path: Path,
) -> None:
    scenario, _ = load_scenario(write(tmp_path, BASE))
    out = tmp_path / "out"
    out.mkdir()
    (out / "s").write_text("not a folder")
    with pytest.raises(ResultsError) as caught:
        preflight(scenario, out_root=out, source="s.yaml")
    assert str(caught.value).startswith(f"s.yaml: output folder {out}: {out / 's'} is a file")


def test_every_preflight_refusal_names_the_scenario_file(tmp_path: Path) -> None:
    scenario, _ = load_scenario(write(tmp_path, BASE), ["broker.options.nope=1"])
    with pytest.raises(MqbenchError) as caught:
        preflight(scenario, source="my.yaml")
    assert str(caught.value).startswith("my.yaml: target 'nats': unknown nats option(s) nope")


def test_the_recorded_command_line_hides_secrets_in_every_set_form() -> None:
    from mqbench.scenario.security import redact_argv

    argv = [
        "mqbench",
        "run",
        "p.yaml",
        "--set",
        "broker.options={password: S3cret}",
        "--set=broker.options.password=S3cret",
        "--set=broker.options=[{requirepass: S3cret}]",
        "--set",
        "workload.pairs=3",
    ]
    shown = redact_argv(argv)
    assert not any("S3cret" in arg for arg in shown), shown
    assert shown[-1] == "workload.pairs=3" and shown[:3] == argv[:3]
