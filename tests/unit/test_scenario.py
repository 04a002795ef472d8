from pathlib import Path

import pytest

from mqbench.errors import ScenarioError, UsageError
from mqbench.scenario.loader import ScenarioSource, apply_overrides, load_scenario
from mqbench.scenario.matrix import expand
from mqbench.scenario.units import format_size, parse_duration, parse_size


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_sizes_accept_binary_and_decimal_units() -> None:
    assert parse_size("64B") == 64
    assert parse_size("1KiB") == 1024
    assert parse_size("16 KiB") == 16384
    assert parse_size("1MiB") == 1048576
    assert parse_size("1KB") == 1000
    assert parse_size(100) == 100
    assert format_size(16384) == "16KiB"
    assert format_size(1500) == "1500B"


def test_durations_accept_units_and_plain_seconds() -> None:
    assert parse_duration("30s") == 30.0
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration(7) == 7.0


def test_list_fields_expand_into_every_combination(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "name: m\ntargets: [nats, mosquitto]\nworkload:\n  payload: [64B, 1KiB]\n"
        "  pairs: [1, 5]\n  rate: 10\n  qos: [0, 1]\n",
    )
    scenario, _ = load_scenario(path)
    cells = expand(scenario)
    assert len(cells) == 2 * 2 * 2 * 2
    assert len({c.id for c in cells}) == len(cells)
    assert cells[0].id == "nats-64B-1pairs-10hz-qos0"
    assert [c.index for c in cells] == list(range(16))


def test_repeats_are_interleaved_and_get_distinct_ids(tmp_path: Path) -> None:
    path = write(tmp_path, "name: m\ntargets: [nats, mosquitto]\nrepeat: 2\n")
    cells = expand(load_scenario(path)[0])
    assert [(c.target, c.repeat) for c in cells] == [
        ("nats", 0),
        ("mosquitto", 0),
        ("nats", 1),
        ("mosquitto", 1),
    ]
    assert cells[2].id.endswith("-r1")


def test_offered_load_is_rate_times_publishers(tmp_path: Path) -> None:
    path = write(
        tmp_path, "name: m\ntargets: nats\nworkload: {pairs: 20, rate: 50, payload: 1KiB}\n"
    )
    (cell,) = expand(load_scenario(path)[0])
    assert cell.offered_rate == 1000
    assert cell.offered_bytes_per_s == 1024 * 1000
    assert cell.connections == 40


def test_unknown_key_is_named_with_its_path(tmp_path: Path) -> None:
    path = write(tmp_path, "name: m\ntargets: [nats]\nworkload:\n  rat: 3\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml: unknown key 'workload\.rat'"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("workload: {rate: -5}", r"workload\.rate: .*greater than 0.*-5"),
        ("workload: {rate: 0}", r"workload\.rate"),
        ("workload: {payload: 12B}", r"payload 12 B is below the 24-byte header"),
        ("workload: {payload: 1 parsec}", r"expected a size"),
        ("workload: {duration: soon}", r"expected a duration"),
        ("workload: {qos: 3}", r"workload\.qos"),
        ("broker: {host: broker.example}", r"not an IP address"),
        ("runtime: kubernetes", r"runtime"),
    ],
)
def test_bad_values_are_rejected_naming_key_and_value(
    tmp_path: Path, body: str, message: str
) -> None:
    path = write(tmp_path, f"name: m\ntargets: [nats]\n{body}\n")
    with pytest.raises(ScenarioError, match=message):
        load_scenario(path)


@pytest.mark.parametrize(
    "value",
    [
        '"\\UAAAAAAAA"',  # past U+10FFFF: PyYAML's chr() raises OverflowError
        '"\\U00110000"',  # one past U+10FFFF: ValueError
        "2020-13-45",  # an impossible date: ValueError from the timestamp constructor
    ],
)
def test_yaml_that_pyyaml_fails_on_with_a_python_error_is_one_malformed_yaml_line(
    tmp_path: Path, value: str
) -> None:
    path = write(tmp_path, f"name: m\ntargets: [nats]\nlabel: {value}\n")
    with pytest.raises(
        ScenarioError, match=r"malformed YAML: a value that cannot be read \("
    ) as refused:
        load_scenario(path)
    assert "\n" not in str(refused.value)


def test_malformed_yaml_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "name: m\ntargets: [nats\n")
    with pytest.raises(ScenarioError, match=r"malformed YAML at line \d+, column \d+"):
        load_scenario(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.yaml")


def test_missing_targets_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "name: m\n")
    with pytest.raises(ScenarioError, match="missing required key 'targets'"):
        load_scenario(path)


def test_external_runtime_needs_a_port(tmp_path: Path) -> None:
    path = write(tmp_path, "name: m\ntargets: [nats]\nruntime: external\n")
    with pytest.raises(ScenarioError, match=r"broker\.port"):
        load_scenario(path)


def test_overrides_parse_yaml_values_and_create_sections() -> None:
    data = apply_overrides(
        {"name": "m", "workload": {"rate": 1}},
        ["workload.rate=[10, 20]", "generator.workers=2", "description=hello world"],
    )
    assert data["workload"]["rate"] == [10, 20]
    assert data["generator"]["workers"] == 2
    assert data["description"] == "hello world"


def test_override_without_equals_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"expected KEY\.PATH=VALUE"):
        apply_overrides({}, ["workload.rate"])


def test_override_into_a_scalar_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="name is not a section"):
        apply_overrides({"name": "m"}, ["name.x=1"])


SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_quickstart_scenario_is_small_and_needs_only_pip() -> None:
    scenario, _ = load_scenario(SCENARIOS / "quickstart.yaml")
    cells = expand(scenario)
    assert {c.target for c in cells} <= {"nats", "zenoh"}
    assert sum(c.warmup_s + c.duration_s for c in cells) <= 90


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_scenario_is_valid_and_documents_how_to_shrink_it(path: Path) -> None:
    scenario, _ = load_scenario(path)
    assert expand(scenario)
    if path.name != "quickstart.yaml":
        assert "Shrink" in path.read_text()


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("paper-*.yaml")), ids=lambda p: p.name)
def test_every_paper_scenario_says_in_one_line_what_to_change_and_that_change_fits(
    path: Path,
) -> None:
    from mqbench.workload.capacity import Limits, check_fits

    (line,) = [x for x in path.read_text().splitlines() if x.startswith("# Cannot run it as")]
    settings = [item.removeprefix("--set ") for item in line.split(": ", 1)[1].split(" --set ")]
    assert settings and all("=" in s for s in settings), line
    scenario, _ = load_scenario(path, settings)
    this_machine = Limits(2, 20_000, 20_000, "the RLIMIT_NOFILE it inherits", 24 * 10**9)
    check_fits(scenario, expand(scenario), this_machine)


def test_zenoh_shared_memory_is_off_unless_the_scenario_turns_it_on(tmp_path: Path) -> None:
    from mqbench.transports.base import ZenohSettings
    from mqbench.workload.cell_run import protocol_params

    path = write(tmp_path, "name: z\ntargets: [zenoh, nats]\n")
    plain, _ = load_scenario(path)
    assert plain.zenoh.shared_memory is False
    assert protocol_params(plain, "zenoh") == ZenohSettings(shared_memory=False)
    assert protocol_params(plain, "nats") is None
    on, _ = load_scenario(path, ["zenoh.shared_memory=true"])
    assert protocol_params(on, "zenoh") == ZenohSettings(shared_memory=True)
    assert ZenohSettings(shared_memory=True).params() == {"zenoh_shared_memory": True}
    with pytest.raises(ScenarioError, match=r"zenoh\.shm"):
        load_scenario(write(tmp_path, "name: z\ntargets: [zenoh]\nzenoh: {shm: true}\n"))


def test_the_scenario_as_given_is_a_private_copy_stored_with_its_secrets_redacted(
    tmp_path: Path,
) -> None:
    _, source = load_scenario(write(tmp_path, "name: s\ntargets: [nats]\n"), ["workload.rate=5"])
    assert source.file == str(tmp_path / "s.yaml")
    stored = source.stored_input()
    assert stored == {"name": "s", "targets": ["nats"], "workload": {"rate": 5}}
    stored["workload"]["rate"] = 7  # the manifest's copy, not the source
    assert source.stored_input()["workload"] == {"rate": 5}
    document = {"broker": {"extra": {"api_token": "t0ps3cret"}}}
    given = ScenarioSource("s.yaml", document)
    document["broker"]["extra"]["api_token"] = "changed"
    assert given.document == {"broker": {"extra": {"api_token": "t0ps3cret"}}}
    assert "t0ps3cret" not in repr(given.stored_input())


def test_a_runs_zenoh_settings_reach_the_client_and_win_over_its_extra_keys() -> None:
    from mqbench.endpoint import Endpoint
    from mqbench.transports.base import ClientOptions, ZenohSettings
    from mqbench.transports.zenoh import ZenohTransport

    where = Endpoint("127.0.0.1", 7447)
    chosen = ClientOptions(
        "z", protocol=ZenohSettings(shared_memory=True), extra={"shared_memory": False}
    )
    assert ZenohTransport().create_client(where, chosen).settings["shared_memory"] is True
    plain = ZenohTransport().create_client(where, ClientOptions("z", extra={"express": True}))
    assert plain.settings["shared_memory"] is False and plain.settings["express"] is True
