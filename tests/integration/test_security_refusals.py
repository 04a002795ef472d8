"""A wrong password and an untrusted certificate fail the connect in one line that names
the broker and the reason, for every client of every secured native broker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from secured_probe import connect_as_bob, endpoint_of

from mqbench.brokers.base import BrokerSecurity, RunningBroker, StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.brokers.security.tls_material import TlsMaterial, generate
from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind

pytestmark = pytest.mark.integration

PASSWORD = "Right-pw-4c2e"
WRONG = "Wrong-pw-91ab"

CASES = [
    ("mosquitto", "mqtt"),
    ("mosquitto", "paho"),
    ("mosquitto", "aiomqtt"),
    ("nats", "nats"),
    ("nats", "nats-py"),
    ("redis", "redis"),
    ("redis", "redis-py"),
    ("rabbitmq-mqtt", "mqtt"),
    ("rabbitmq-mqtt", "amqp"),
    ("rabbitmq-mqtt", "aio-pika"),
    ("tbmq-style", "mqtt"),
]
CLI = [sys.executable, "-m", "mqbench.cli"]
NAMES_THE_USER = {
    "mqtt",
    "paho",
    "aiomqtt",
    "nats",
    "nats-py",
    "redis",
    "redis-py",
    "amqp",
    "aio-pika",
}


class Secured:
    """The brokers, their CA, and a second CA that signed nothing of theirs."""

    def __init__(self, material: TlsMaterial, stranger: TlsMaterial) -> None:
        self.material = material
        self.stranger = stranger
        self.brokers: dict[str, RunningBroker] = {}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("refusals")
    state = Secured(generate(root / "tls"), generate(root / "stranger"))
    security = BrokerSecurity(root / "private", state.material, False, "bob", PASSWORD)
    runtime = NativeRuntime()
    try:
        for target in sorted({t for t, _ in CASES}):
            if runtime.spec_for(target).find_binary() is None:
                continue
            state.brokers[target] = runtime.start(
                StartRequest(
                    target=target,
                    workdir=root / target,
                    security=security,
                    startup_timeout_s=90,
                )
            )
        yield state
    finally:
        for broker in state.brokers.values():
            broker.stop()


def _endpoint(secured: Secured, target: str, client: str) -> Endpoint:
    return endpoint_of(secured.brokers, target, client)


async def _connect(client: str, endpoint: Endpoint, password: str, ca: Path) -> None:
    await connect_as_bob(client, endpoint, password, ca, "refusal-probe")


@pytest.mark.parametrize(("target", "client"), CASES)
def test_the_right_password_over_tls_connects(secured: Secured, target: str, client: str) -> None:
    endpoint = _endpoint(secured, target, client)
    asyncio.run(_connect(client, endpoint, PASSWORD, secured.material.ca_cert))


@pytest.mark.parametrize(("target", "client"), CASES)
def test_a_wrong_password_is_one_line_naming_the_broker(
    secured: Secured, target: str, client: str
) -> None:
    endpoint = _endpoint(secured, target, client)
    with pytest.raises(TransportError) as caught:
        asyncio.run(_connect(client, endpoint, WRONG, secured.material.ca_cert))
    message = str(caught.value)
    assert caught.value.kind is TransportErrorKind.CONNECT_FAILED
    assert "\n" not in message
    assert f"127.0.0.1:{endpoint.port}" in message
    assert WRONG not in message
    assert "user 'bob'" in message


@pytest.mark.parametrize(("target", "client"), CASES)
def test_an_untrusted_certificate_is_one_line_naming_the_reason(
    secured: Secured, target: str, client: str
) -> None:
    endpoint = _endpoint(secured, target, client)
    with pytest.raises(TransportError) as caught:
        asyncio.run(_connect(client, endpoint, PASSWORD, secured.stranger.ca_cert))
    message = str(caught.value)
    assert caught.value.kind is TransportErrorKind.CONNECT_FAILED
    assert "\n" not in message
    assert f"127.0.0.1:{endpoint.port}" in message
    assert "not trusted" in message or "CERTIFICATE_VERIFY_FAILED" in message


def test_a_run_with_the_wrong_password_fails_in_one_line_without_a_traceback(
    secured: Secured, tmp_path: Path
) -> None:
    broker = secured.brokers["mosquitto"]
    scenario = tmp_path / "wrong.yaml"
    scenario.write_text(
        "name: wrong\ntargets: mosquitto\nruntime: external\n"
        f"broker: {{port: {broker.endpoint.port}}}\n"
        f"security: {{tls: true, ca_file: {secured.material.ca_cert},"
        " auth: {username: bob, password_env: MQBENCH_IT_WRONG}}\n"
        "workload: {pairs: 1, rate: 10, payload: 64, duration: 1s, warmup: 0s, drain: 1s}\n"
    )
    env = {**os.environ, "MQBENCH_IT_WRONG": WRONG}
    env.pop("MQBENCH_DEBUG", None)
    proc = subprocess.run(
        [*CLI, "run", str(scenario), "--no-analyze", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1
    assert "refused the connection" in errors[0] and "(user 'bob')" in errors[0]
    assert f"127.0.0.1:{broker.endpoint.port}" in errors[0]
    assert WRONG not in proc.stdout + proc.stderr
