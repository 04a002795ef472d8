"""Scenario security, secret redaction, the throwaway CA and the brokers' secured configs."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import ssl
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definitions.mosquitto import MosquittoSpec, password_line
from mqbench.brokers.definitions.nats import NatsSpec
from mqbench.brokers.definitions.rabbitmq import RabbitMqSpec
from mqbench.brokers.definitions.redis import RedisSpec
from mqbench.brokers.definitions.tbmq_style import TbmqStyleSpec
from mqbench.brokers.definitions.zenoh import ZenohSpec
from mqbench.brokers.docker.runtime import DockerRuntime
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.brokers.runtime.native_spec import LaunchPlan, NativeSpec
from mqbench.brokers.security.tls_material import TlsMaterial, generate
from mqbench.builtin_broker.config import BrokerConfig, ClientClassifier, ClientType
from mqbench.errors import BrokerError, ScenarioError, TransportError
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import expand
from mqbench.scenario.model import Scenario
from mqbench.scenario.security import (
    Auth,
    Secret,
    is_secret_name,
    redact,
    redact_argv,
    resolve_password,
)
from mqbench.transports.base import ClientTls
from mqbench.transports.stream import tls_context
from mqbench.workload.preflight import preflight
from mqbench.workload.security import broker_start_options, open_run_security

SECRET = "Zq7-unit-secret-value"


def _scenario(extra: dict[str, Any]) -> Any:
    return validate_scenario({"name": "s", "targets": ["mosquitto"], **extra}, "s.yaml")


def test_a_literal_password_in_the_scenario_is_refused_without_echoing_it() -> None:
    with pytest.raises(ScenarioError) as caught:
        _scenario({"security": {"auth": {"username": "u", "password": SECRET}}})
    message = str(caught.value)
    assert "'password' is not read from the scenario" in message
    assert SECRET not in message
    assert "\n" not in message


def test_auth_needs_exactly_one_password_source() -> None:
    with pytest.raises(ScenarioError, match="exactly one of password_env or password_file"):
        _scenario({"security": {"auth": {"username": "u"}}})
    with pytest.raises(ScenarioError, match="exactly one of password_env or password_file"):
        _scenario(
            {"security": {"auth": {"username": "u", "password_env": "A", "password_file": "f"}}}
        )


def test_certificate_files_belong_to_external_brokers_and_need_tls() -> None:
    with pytest.raises(ScenarioError, match=r"security\.ca_file is for runtime 'external'"):
        _scenario({"security": {"tls": True, "ca_file": "/x/ca.pem"}})
    with pytest.raises(ScenarioError, match="ca_file needs tls: true"):
        _scenario({"runtime": "external", "broker": {"port": 1}, "security": {"ca_file": "/x"}})
    with pytest.raises(ScenarioError, match="needs ca_file"):
        _scenario({"runtime": "external", "broker": {"port": 1}, "security": {"tls": True}})


def test_the_password_comes_from_the_named_variable_or_the_file_first_line(
    tmp_path: Path,
) -> None:
    auth = Auth(username="u", password_env="PW_VAR")
    assert resolve_password(auth, {"PW_VAR": SECRET}).password == SECRET
    with pytest.raises(ScenarioError, match="environment variable PW_VAR is not set"):
        resolve_password(auth, {})
    path = tmp_path / "pw"
    path.write_text(SECRET + "\nignored\n")
    assert resolve_password(Auth(username="u", password_file=path)).password == SECRET
    folder = tmp_path / "not-a-file"
    folder.mkdir()
    with pytest.raises(ScenarioError, match=f"password_file: {folder}: cannot read"):
        resolve_password(Auth(username="u", password_file=folder))


def test_an_empty_password_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("\n")
    with pytest.raises(ScenarioError, match=f"{path}: the first line is empty"):
        resolve_password(Auth(username="u", password_file=path))


def test_the_credentials_repr_never_shows_the_password() -> None:
    credentials = resolve_password(Auth(username="u", password_env="V"), {"V": SECRET})
    assert SECRET not in repr(credentials)
    assert SECRET not in repr(BrokerSecurity(Path("/tmp"), None, False, "u", SECRET))


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True),
        ("default_pass", True),
        ("requirepass", True),
        ("api_token", True),
        ("client-secret", True),
        ("private_key", True),
        ("password_env", False),
        ("password_file", False),
        ("key_file", False),
        ("max_keepalive", False),
        ("pubsub_buffer_limit", False),
        ("username", False),
    ],
)
def test_secret_setting_names_are_recognised(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_a_redis_password_option_is_refused_as_text_and_taken_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def scenario_with(options: dict[str, object]) -> Scenario:
        data = {"name": "r", "targets": ["redis"], "broker": {"options": [options]}}
        return validate_scenario(data, "s.yaml")

    with pytest.raises(ScenarioError) as caught:
        scenario_with({"password": SECRET, "io_threads": 2})
    assert str(caught.value) == (
        "s.yaml: broker.options: 'password' is a secret and is not read from the scenario: "
        "give password_env (an environment variable) or password_file (a file whose first "
        "line is it)"
    )
    scenario = scenario_with({"password_env": "REDIS_PW", "io_threads": 2})
    (cell,) = expand(scenario)
    assert cell.id.endswith("-2") and "REDIS_PW" not in cell.id
    monkeypatch.setenv("REDIS_PW", SECRET)
    options = broker_start_options(scenario, cell).request_options()
    assert isinstance(options["password"], Secret) and "password_env" not in options
    assert options["password"].reveal() == SECRET
    shown = json.dumps(
        [redact(options), cell.params(), redact(scenario.model_dump(mode="json"))], default=str
    )
    assert SECRET not in shown and SECRET not in f"{options} {options['password']!r}"


def test_command_line_overrides_of_secrets_are_redacted() -> None:
    argv = ["run", "s.yaml", "--set", f"broker.options.password={SECRET}", "--set", "x.rate=5"]
    assert redact_argv(argv) == [
        "run",
        "s.yaml",
        "--set",
        "broker.options.password=<redacted>",
        "--set",
        "x.rate=5",
    ]


def test_the_throwaway_ca_signs_a_server_certificate_for_loopback_with_private_keys(
    tmp_path: Path,
) -> None:
    material = generate(tmp_path / "tls", client_cert=True)
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    for key in (material.server_key, material.client_key):
        assert key is not None
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate(material.server_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    # The CA verifies the server certificate the way clients do.
    context = ssl.create_default_context(cafile=str(material.ca_cert))
    assert context.cert_store_stats()["x509_ca"] == 1
    facts = json.dumps(material.describe())
    assert "PRIVATE KEY" not in facts
    assert material.fingerprints["server"] in facts


def test_mosquitto_password_lines_are_pbkdf2_sha512_of_the_password() -> None:
    line = password_line("bob", SECRET)
    user, rest = line.split(":", 1)
    _, kind, iterations, salt, digest = rest.split("$")
    assert (user, kind) == ("bob", "7")
    expected = hashlib.pbkdf2_hmac(
        "sha512", SECRET.encode(), base64.b64decode(salt), int(iterations)
    )
    assert base64.b64decode(digest) == expected
    assert SECRET not in line


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return generate(tmp_path_factory.mktemp("ca") / "tls", client_cert=True)


SPECS: dict[str, tuple[NativeSpec, Path]] = {
    "mosquitto": (MosquittoSpec(), Path("/usr/sbin/mosquitto")),
    "nats": (NatsSpec(), Path("/usr/bin/nats-server")),
    "redis": (RedisSpec(), Path("/usr/bin/redis-server")),
    "rabbitmq-mqtt": (RabbitMqSpec("mqtt"), Path("/usr/lib/rabbitmq/bin/rabbitmq-server")),
    "tbmq-style": (TbmqStyleSpec(), Path("/usr/bin/python3")),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_secured_configs_keep_the_password_in_the_private_directory_only(
    name: str, tmp_path: Path, material: TlsMaterial
) -> None:
    spec, binary = SPECS[name]
    workdir = tmp_path / "work"
    workdir.mkdir()
    security = BrokerSecurity(tmp_path / "private", material, True, "bob", SECRET)
    plan: LaunchPlan = spec.prepare_secured(binary, workdir, "127.0.0.1", 18830, {}, security)
    assert plan.ready_check is not None  # a TLS listener gets a TLS readiness probe
    written = " ".join(p.read_text() for p in workdir.rglob("*") if p.is_file())
    recorded = json.dumps([plan.argv, plan.config_text, plan.settings])
    assert SECRET not in written + recorded
    assert str(material.server_cert) in written + recorded
    private = [p for p in (tmp_path / "private").iterdir()]
    assert private and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in private)
    as_bytes = ",".join(str(b) for b in SECRET.encode())  # RabbitMQ's Erlang binary
    texts = [p.read_text() for p in private]
    assert any(SECRET in t or "$7$" in t or as_bytes in t for t in texts)


def test_mosquitto_with_auth_refuses_anonymous_clients(tmp_path: Path) -> None:
    security = BrokerSecurity(tmp_path / "private", None, False, "bob", SECRET)
    plan = MosquittoSpec().prepare_secured(
        Path("/usr/sbin/mosquitto"), tmp_path, "127.0.0.1", 1883, {}, security
    )
    assert "allow_anonymous false" in plan.config_text.splitlines()
    assert "allow_anonymous true" not in plan.config_text


def test_the_built_in_broker_requires_the_configured_login(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    config = BrokerConfig(username="bob", password_file=path)
    classifier = ClientClassifier.from_config(config)
    assert classifier.classify("c", "bob", SECRET.encode()) is ClientType.DEVICE
    assert classifier.classify("c", "bob", b"wrong") is None
    assert classifier.classify("c", None, None) is None
    assert classifier.classify("c", "eve", SECRET.encode()) is None


def test_the_docker_runtime_refuses_security_for_a_target_without_a_secured_container() -> None:
    with pytest.raises(BrokerError, match="docker runtime does not configure TLS"):
        DockerRuntime().check_security("emqx", True, False)


def test_a_broker_without_secured_config_is_refused_naming_it() -> None:
    with pytest.raises(BrokerError, match="tls: true is not supported"):
        NativeRuntime().check_security("activemq", True, False)


def test_the_run_security_of_a_native_run_makes_a_ca_and_removes_it_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MQBENCH_UNIT_PW", SECRET)
    scenario = _scenario(
        {
            "security": {
                "tls": True,
                "client_cert": True,
                "auth": {"username": "bob", "password_env": "MQBENCH_UNIT_PW"},
            }
        }
    )
    preflight(scenario)
    security = open_run_security(scenario)
    try:
        assert security.private_dir is not None
        assert security.client is not None and security.client.tls is not None
        assert security.client.password == SECRET
        assert security.client.tls.cert_file is not None
        assert SECRET not in json.dumps(security.describe())
        assert security.describe()["certificates"]["client_certificate"] is True
        private = security.private_dir
    finally:
        security.close()
    assert not private.exists()


def test_a_client_tls_file_that_cannot_be_loaded_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(TransportError, match=f"cannot load TLS files \\({missing}\\)"):
        tls_context(ClientTls(ca_file=missing))


def test_the_zenoh_router_listens_on_tls_with_the_run_certificate_and_refuses_users(
    tmp_path: Path, material: TlsMaterial
) -> None:
    spec = ZenohSpec()
    security = BrokerSecurity(tmp_path / "private", material, True, None, None)
    plan = spec.prepare_secured(Path(sys.executable), tmp_path, "127.0.0.1", 7448, {}, security)
    assert plan.settings["listen/endpoints"] == ["tls/127.0.0.1:7448"]
    assert plan.settings["transport/link/tls/listen_certificate"] == str(material.server_cert)
    assert plan.settings["transport/link/tls/enable_mtls"] is True
    assert plan.ready_check is not None
    with_user = BrokerSecurity(tmp_path / "private", material, False, "bob", SECRET)
    with pytest.raises(BrokerError, match=r"security\.auth is not supported: mqbench does not"):
        spec.prepare_secured(Path(sys.executable), tmp_path, "127.0.0.1", 7448, {}, with_user)
