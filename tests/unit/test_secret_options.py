"""Secret broker options come only from an environment variable or a file, print as
``<redacted>`` wherever they land by mistake, and their private folder is removed even
when mqbench is killed (issue 27, "Secrets")."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mqbench.brokers.registry import get_definition
from mqbench.errors import ScenarioError
from mqbench.process.lifeline import REAPER_SCRIPT
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import expand
from mqbench.scenario.model import Scenario
from mqbench.scenario.security import (
    REDACTED,
    Secret,
    check_secret_options,
    options_label,
    redact,
    resolve_secret_options,
)
from mqbench.workload.preflight import preflight
from mqbench.workload.security import (
    BrokerStartOptions,
    broker_start_options,
    open_run_security,
)

SECRET = "S3cret-value"


def scenario(options: dict[str, object], target: str = "redis") -> Scenario:
    data = {
        "name": "s",
        "targets": [target],
        "workload": {"pairs": 1, "rate": 10, "duration": "1s", "warmup": "0s"},
        "broker": {"options": [options]},
    }
    return validate_scenario(data, "s.yaml")


def test_a_secret_prints_as_redacted_in_every_form() -> None:
    secret = Secret(SECRET, "environment variable PW")
    shown = [str(secret), repr(secret), f"{secret}", json.dumps({"p": secret}, default=str)]
    assert all(SECRET not in text for text in shown), shown
    assert str(secret) == REDACTED and redact({"x": [secret]}) == {"x": [REDACTED]}
    assert secret.reveal() == SECRET


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"default_pass": SECRET}, "'default_pass' is a secret and is not read"),
        (
            {"tbmq_credentials": [{"username": "u", "password": SECRET}]},
            "'tbmq_credentials.password'",
        ),
        ({"password_env": "1BAD"}, "'password_env' must be an environment variable name"),
        ({"password_file": ""}, "'password_file' must be a file path"),
        ({"password_env": "A", "password_file": "/f"}, "give the secret 'password' once"),
    ],
)
def test_a_secret_given_as_text_twice_or_nowhere_is_refused_without_its_value(
    options: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValueError) as caught:
        check_secret_options(options)
    assert problem in str(caught.value) and SECRET not in str(caught.value)


def test_secrets_in_nested_options_are_read_from_the_environment_and_files(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pw"
    path.write_text(f"{SECRET}\nsecond line ignored\n")
    options = {
        "io_threads": 2,
        "password_file": str(path),
        "tbmq_credentials": [{"username": "u", "password_env": "TB_PW"}],
    }
    check_secret_options(options)
    resolved = resolve_secret_options(options, environ={"TB_PW": "tb-secret"})
    assert resolved["io_threads"] == 2 and "password_file" not in resolved
    assert resolved["password"].reveal() == SECRET
    assert resolved["password"].source == f"file {path}"
    (credential,) = resolved["tbmq_credentials"]
    assert credential["password"].reveal() == "tb-secret" and credential["username"] == "u"


def test_where_a_secret_comes_from_never_reaches_a_cell_id() -> None:
    assert options_label({"password_env": "REDIS_PW", "io_threads": 2}) == "2"
    assert options_label({"password_file": "/x", "label": "a"}) == "a"


def test_an_unset_variable_is_refused_before_the_run_naming_the_file_and_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MQBENCH_TEST_UNSET", raising=False)
    loaded = scenario({"password_env": "MQBENCH_TEST_UNSET"})
    with pytest.raises(ScenarioError) as caught:
        preflight(loaded, source="s.yaml")
    assert str(caught.value) == (
        "s.yaml: broker.options.password_env: environment variable MQBENCH_TEST_UNSET is not "
        "set (or empty)"
    )


def test_an_option_a_broker_definition_declares_secret_is_refused_as_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    redis = get_definition("redis")
    declared = dataclasses.replace(redis, secret_options=frozenset({"extra_config"}))
    monkeypatch.setattr("mqbench.workload.security.get_definition", lambda _: declared)
    loaded = scenario({"extra_config": "requirepass x"})  # the name alone says nothing
    (cell,) = expand(loaded)
    with pytest.raises(ScenarioError, match="'extra_config' is a secret and is not read"):
        broker_start_options(loaded, cell)
    by_env = scenario({"extra_config_env": "EXTRA"})
    (cell,) = expand(by_env)
    monkeypatch.setenv("EXTRA", "requirepass x")
    options = broker_start_options(by_env, cell)
    assert options.values["extra_config"].reveal() == "requirepass x"


def test_a_plain_run_with_a_secret_option_gets_a_private_folder_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_PW", SECRET)
    loaded = scenario({"password_env": "REDIS_PW"})
    security = open_run_security(loaded)
    try:
        assert security.private_dir is not None and security.private_dir.is_dir()
        assert security.private_dir.stat().st_mode & 0o077 == 0
        (cell,) = expand(loaded)
        broker = security.broker_for(broker_start_options(loaded, cell))
        assert broker is not None and not broker.auth and broker.tls is None
        assert security.broker_for(BrokerStartOptions({"io_threads": 2})) is None
        assert security.describe() == {"tls": False, "auth": False}
    finally:
        private = security.private_dir
        security.close()
    assert private is not None and not private.exists()
    plain = open_run_security(scenario({"io_threads": 2}))
    assert plain.private_dir is None


def test_the_reaper_removes_a_guarded_folder_when_its_pipe_closes(tmp_path: Path) -> None:
    kept, removed = tmp_path / "kept dir", tmp_path / "removed dir"
    for folder in (kept, removed):
        (folder / "inner").mkdir(parents=True)
        (folder / "inner" / "key.pem").write_text("secret")
    lines = f"dir {removed}\ndir {kept}\nundir {kept}\ndir relative/ignored\n"
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(REAPER_SCRIPT)],
        input=lines.encode(),
        timeout=30,
        check=False,
    )
    assert done.returncode == 0
    assert not removed.exists() and (kept / "inner" / "key.pem").exists()
