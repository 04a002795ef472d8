"""Native runtimes of RabbitMQ (both targets) and ActiveMQ Classic on 127.0.0.1.

The module shares one RabbitMQ node (``rabbitmq`` fixture, target rabbitmq-mqtt) and one
ActiveMQ; the stop tests start brokers of their own, so the shared node also proves that two
RabbitMQ nodes (each with its own epmd) run side by side.
"""

from __future__ import annotations

import asyncio
import stat
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqbench.brokers.base import RunningBroker
from mqbench.brokers.definitions import rabbitmq as rabbitmq_spec
from mqbench.brokers.definitions.activemq import ActiveMqSpec
from mqbench.brokers.definitions.rabbitmq import RabbitMqSpec, find_epmd
from mqbench.brokers.registry import get_target, native_specs
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.endpoint import Endpoint
from mqbench.errors import BrokerError
from mqbench.transports.amqp import AmqpTransport
from mqbench.transports.base import ClientOptions
from mqbench.transports.mqtt import MqttTransport

pytestmark = pytest.mark.integration

NativeBrokerFactory = Callable[..., RunningBroker]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: list[int], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return all(gone(pid) for pid in pids)


def listening_ports(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket of ``pid``."""
    conns = psutil.Process(pid).net_connections(kind="tcp")
    return {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}


async def mqtt_round_trip(endpoint: Endpoint, topic: str) -> list[bytes]:
    client = MqttTransport().create_client(endpoint, ClientOptions(f"rt-{topic}"))
    got: list[bytes] = []
    await client.connect()
    await client.subscribe(topic, 1, lambda p, t: got.append(bytes(p)))
    client.sender(topic, 1)(b"hello", 1)
    await client.flush(5)
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await client.close()
    return got


def test_rabbitmq_and_activemq_targets_use_their_native_specs() -> None:
    specs = native_specs()
    for target in ("rabbitmq-mqtt", "rabbitmq-amqp", "activemq"):
        spec_name = get_target(target).native_spec
        assert spec_name == target
        assert spec_name in specs


def test_rabbitmq_mqtt_node_listens_only_on_loopback_with_its_own_ports(
    rabbitmq: RunningBroker,
) -> None:
    settings = rabbitmq.info.settings
    ports = listening_ports(rabbitmq.pids[0])
    assert ("127.0.0.1", rabbitmq.endpoint.port) in ports
    assert ("127.0.0.1", settings["amqp_port"]) in ports
    assert ("127.0.0.1", settings["dist_port"]) in ports
    assert {ip for ip, _ in ports} == {"127.0.0.1"}
    assert settings["mqtt_port"] == rabbitmq.endpoint.port
    assert settings["nodename"] == f"mqbench-{rabbitmq.endpoint.port}@localhost"
    assert psutil.Process(rabbitmq.pids[0]).name() == "beam.smp"
    epmd = find_epmd(settings["epmd_port"])
    assert len(epmd) == 1
    assert {ip for ip, port in listening_ports(epmd[0]) if port == settings["epmd_port"]} <= {
        "127.0.0.1",
        "::1",
    }


def test_rabbitmq_keeps_its_state_logs_and_cookie_in_the_work_directory(
    rabbitmq: RunningBroker,
) -> None:
    workdir = Path(rabbitmq.info.log_path).parent
    assert (workdir / "mnesia" / rabbitmq.info.settings["nodename"]).is_dir()
    assert (workdir / ".erlang.cookie").is_file()
    assert (workdir / "enabled_plugins").read_text().strip() == "[rabbitmq_mqtt]."
    log = Path(rabbitmq.info.log_path).read_text()
    # Readiness waited for both listeners (MQTT opens first, AMQP a moment later).
    assert f"started MQTT TCP listener on 127.0.0.1:{rabbitmq.endpoint.port}" in log
    assert f"started TCP listener on 127.0.0.1:{rabbitmq.info.settings['amqp_port']}" in log
    assert not stat.S_IMODE((workdir / ".erlang.cookie").stat().st_mode) & 0o077


def test_rabbitmq_mqtt_accepts_anonymous_clients_and_delivers(rabbitmq: RunningBroker) -> None:
    assert run(mqtt_round_trip(rabbitmq.endpoint, "runtime/anon")) == [b"hello"]


def test_rabbitmq_version_in_the_manifest_matches_what_the_broker_announces(
    rabbitmq: RunningBroker, rabbitmq_amqp: Endpoint
) -> None:
    async def announced() -> str:
        client = AmqpTransport().create_client(rabbitmq_amqp, ClientOptions("version"))
        await client.connect()
        await client.close()
        version = client.server_properties["version"]
        return version.decode() if isinstance(version, bytes) else str(version)

    assert rabbitmq.info.version == run(announced())
    assert rabbitmq.info.version.startswith("3.")


def test_rabbitmq_amqp_target_starts_without_mqtt_and_stop_leaves_no_beam_nor_epmd(
    native_broker: NativeBrokerFactory, rabbitmq: RunningBroker
) -> None:
    broker = native_broker("rabbitmq-amqp", startup_timeout_s=120)
    settings = broker.info.settings
    assert settings["amqp_port"] == broker.endpoint.port
    assert settings["mqtt_port"] is None
    assert settings["plugins"] == []
    # A second node next to the module's one: separate epmd daemons on separate ports.
    assert settings["epmd_port"] != rabbitmq.info.settings["epmd_port"]
    epmd = find_epmd(settings["epmd_port"])
    assert len(epmd) == 1
    beam = broker.pids[0]
    started = time.monotonic()
    broker.stop()
    assert time.monotonic() - started < 15
    assert broker.info.companion_pids == epmd
    assert wait_gone([beam, *epmd])
    # The module's node and its epmd are untouched.
    assert not gone(rabbitmq.pids[0])
    assert find_epmd(rabbitmq.info.settings["epmd_port"])


def test_activemq_listens_only_on_its_mqtt_port_on_loopback(activemq: RunningBroker) -> None:
    ports = listening_ports(activemq.pids[0])
    assert {port for _, port in ports} == {activemq.endpoint.port}
    assert {ip for ip, _ in ports} <= {"127.0.0.1", "::ffff:127.0.0.1"}


def test_activemq_delivers_mqtt_and_logs_into_its_work_directory(activemq: RunningBroker) -> None:
    assert run(mqtt_round_trip(activemq.endpoint, "runtime/amq")) == [b"hello"]
    log = Path(activemq.info.log_path).read_text()
    assert "Connector mqtt started" in log
    assert activemq.info.version == "5.17.2" or activemq.info.version.startswith("5.")
    workdir = Path(activemq.info.log_path).parent
    assert (workdir / "lib" / "mqtt-client.jar").exists()
    assert f"-Dactivemq.base={workdir.resolve()}" in activemq.info.argv


def test_activemq_stop_leaves_no_java_process(native_broker: NativeBrokerFactory) -> None:
    broker = native_broker("activemq", heap="256m")
    java = broker.pids[0]
    children = [p.pid for p in psutil.Process(java).children(recursive=True)]
    assert "-Xmx256m" in broker.info.argv
    broker.stop()
    assert wait_gone([java, *children])


@pytest.mark.parametrize("spec", [RabbitMqSpec("mqtt"), ActiveMqSpec()])
def test_unknown_broker_options_are_rejected_with_the_known_ones_listed(
    spec: RabbitMqSpec | ActiveMqSpec, tmp_path: Path
) -> None:
    binary = spec.find_binary()
    if binary is None:
        pytest.skip(f"{spec.name} not installed")
    with pytest.raises(BrokerError, match=r"unknown .* option\(s\) typo \(known: "):
        spec.prepare(binary, tmp_path, "127.0.0.1", 1, {"typo": 1})


def test_missing_rabbitmq_says_how_to_install_it_and_ignores_the_su_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = tmp_path / "rabbitmq-server"
    wrapper.write_text("#!/bin/sh\nexec su rabbitmq\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(rabbitmq_spec, "SCRIPT_PATH", tmp_path / "missing" / "rabbitmq-server")
    monkeypatch.setenv("PATH", str(tmp_path))
    availability = NativeRuntime().availability("rabbitmq-amqp")
    assert not availability.available
    assert "apt-get install rabbitmq-server" in availability.reason


def test_activemq_without_the_mqtt_client_jar_is_unavailable_with_the_package_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqbench.brokers.definitions import activemq as activemq_spec

    monkeypatch.setattr(activemq_spec, "JAVA_DIR", tmp_path)
    availability = NativeRuntime().availability("activemq")
    assert not availability.available
    assert "libmqtt-client-java" in availability.reason
