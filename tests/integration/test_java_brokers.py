"""HiveMQ CE and ActiveMQ Artemis run natively from Maven Central jars on 127.0.0.1.

The module shares one JVM per broker (``hivemq``/``artemis`` fixtures); the stop and
start-up failure tests start JVMs of their own. Needs the jars in the cache
(``scripts/install.sh`` or ``mqbench brokers fetch``); the fetch test talks to Maven Central.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import psutil
import pytest

from mqbench.brokers.base import RunningBroker
from mqbench.brokers.java import maven
from mqbench.brokers.java.maven import Artifact, JavaDistribution
from mqbench.brokers.registry import maven_distributions
from mqbench.brokers.resources.sampler import ResourceSampler
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.endpoint import Endpoint
from mqbench.errors import BrokerError
from mqbench.transports.base import ClientOptions
from mqbench.transports.mqtt import MqttTransport

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NativeBrokerFactory = Callable[..., RunningBroker]
VERSIONS = {"hivemq": "2025.5", "artemis": "2.55.0"}
JAVA_DISTS = maven_distributions()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def listening_ports(pid: int) -> set[tuple[str, int]]:
    """(IPv4 address, port) of every listening TCP socket; Java's dual-stack sockets show
    127.0.0.1 as the IPv4-mapped ``::ffff:127.0.0.1``."""
    conns = psutil.Process(pid).net_connections(kind="inet")
    return {
        (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)
        for c in conns
        if c.status == psutil.CONN_LISTEN
    }


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def qos1_round_trip(endpoint: Endpoint, topic: str) -> list[bytes]:
    client = MqttTransport().create_client(endpoint, ClientOptions(f"java-{topic}"))
    got: list[bytes] = []
    await client.connect()
    await client.subscribe(topic, 1, lambda p, t: got.append(bytes(p)))
    client.sender(topic, 1)(b"hello at least once", 1)
    await client.flush(5)
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await client.close()
    return got


@pytest.fixture(scope="module", params=["hivemq", "artemis"])
def java_broker(request: pytest.FixtureRequest) -> RunningBroker:
    broker: RunningBroker = request.getfixturevalue(request.param)
    return broker


def test_the_broker_runs_the_pinned_version_the_launcher_loaded(
    java_broker: RunningBroker,
) -> None:
    name = java_broker.info.name
    assert java_broker.info.version == VERSIONS[name]
    log = Path(java_broker.info.log_path).read_text()
    assert f"mqbench-launcher ready broker={name} version={VERSIONS[name]}" in log


def test_the_broker_listens_only_on_its_mqtt_port_on_loopback(
    java_broker: RunningBroker,
) -> None:
    assert listening_ports(java_broker.pids[0]) == {("127.0.0.1", java_broker.endpoint.port)}


def test_the_heap_is_explicit_on_the_command_line_and_in_the_manifest(
    java_broker: RunningBroker,
) -> None:
    argv = java_broker.info.argv
    assert "-Xms1g" in argv and "-Xmx1g" in argv
    settings = java_broker.info.settings
    assert (settings["heap_min"], settings["heap_max"]) == ("1g", "1g")
    first_line = Path(java_broker.info.log_path).read_text().splitlines()[0]
    assert "-XX:MaxHeapSize=1073741824" in first_line  # what the JVM took (PrintCommandLineFlags)


def test_config_data_and_temp_files_stay_in_the_work_directory(
    java_broker: RunningBroker,
) -> None:
    workdir = Path(java_broker.info.log_path).parent.resolve()
    assert f"-Djava.io.tmpdir={workdir / 'tmp'}" in java_broker.info.argv
    assert Path(java_broker.info.config_path).is_relative_to(workdir)
    proc = psutil.Process(java_broker.pids[0])
    assert Path(proc.cwd()).resolve() == workdir


def test_a_qos1_message_round_trips(java_broker: RunningBroker) -> None:
    topic = f"java/{java_broker.info.name}/{os.getpid()}"
    assert run(qos1_round_trip(java_broker.endpoint, topic)) == [b"hello at least once"]


def test_the_sampler_reports_the_jvms_cpu_and_rss_at_one_hertz(
    java_broker: RunningBroker, tmp_path: Path
) -> None:
    sampler = ResourceSampler(tmp_path / "resources.csv", {"broker": java_broker.pids})
    sampler.start()
    time.sleep(3.5)
    sampler.stop()
    rows = (tmp_path / "resources.csv").read_text().splitlines()[1:]
    broker_rows = [r.split(",") for r in rows if r.split(",")[1] == "broker"]
    assert 2 <= len(broker_rows) <= 4
    for _, _, pid, cpu, rss in broker_rows:
        assert int(pid) == java_broker.pids[0]
        assert float(cpu) >= 0.0
        assert int(rss) > 50 * 1024 * 1024  # a JVM with a broker loaded


@pytest.mark.parametrize("target", ["hivemq", "artemis"])
def test_stop_ends_the_jvm_by_pid(native_broker: NativeBrokerFactory, target: str) -> None:
    broker = native_broker(target, heap="256m")
    java = broker.pids[0]
    assert "-Xmx256m" in broker.info.argv and "-Xms256m" in broker.info.argv
    started = time.monotonic()
    broker.stop()
    assert time.monotonic() - started < 10  # graceful (SIGTERM), not the SIGKILL fallback
    assert gone(java)
    assert broker.info.exit_code == 143  # the JVM's exit after SIGTERM and its hooks


def test_a_jvm_that_exits_during_start_up_reports_its_log_tail(
    native_broker: NativeBrokerFactory,
) -> None:
    with pytest.raises(BrokerError) as excinfo:
        native_broker("artemis", heap="256m", heap_min="512m")
    message = str(excinfo.value)
    assert message.startswith("artemis exited during start-up (code 1): ")
    assert "Initial heap size set to a larger value than the maximum heap size" in message


def test_an_invalid_hivemq_config_stops_the_start_instead_of_running_hivemqs_defaults(
    native_broker: NativeBrokerFactory,
) -> None:
    # A second <listeners> breaks config.xsd; HiveMQ alone would log it and then listen on
    # 0.0.0.0:1883 with usage statistics on. The launcher validates first and exits.
    with pytest.raises(BrokerError) as excinfo:
        native_broker("hivemq", extra_config="<listeners/>")
    message = str(excinfo.value)
    assert message.startswith("hivemq exited during start-up (code 1): ")
    assert "HiveMQ would fall back to its default config" in message.splitlines()[-1]


def test_an_extra_config_that_is_not_xml_is_refused_before_anything_starts(
    native_broker: NativeBrokerFactory,
) -> None:
    with pytest.raises(BrokerError, match="hivemq option extra_config gives XML that does not"):
        native_broker("hivemq", extra_config="<unclosed>")


def test_a_fetched_broker_runs_without_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = maven.find_tool("java")
    if java is None or maven.installed(JAVA_DISTS["hivemq"]) is None:
        pytest.skip("hivemq is not fetched here (scripts/install.sh)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java.resolve())
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert NativeRuntime().availability("hivemq").available


def test_an_artifact_maven_central_does_not_have_is_a_one_line_error(tmp_path: Path) -> None:
    if maven.find_tool("mvn") is None:
        pytest.skip("mvn is not installed (scripts/install.sh installs it)")
    missing = JavaDistribution(
        "artemis",
        "0.0.1-mqbench-missing",
        (Artifact("org.apache.artemis", "artemis-server", "0.0.1-mqbench-missing"),),
        "ArtemisLauncher",
    )
    with pytest.raises(BrokerError) as excinfo:
        maven.fetch(missing, root=tmp_path, timeout_s=300)
    message = str(excinfo.value)
    assert message.startswith("cannot fetch artemis 0.0.1-mqbench-missing from Maven Central: ")
    assert "org.apache.artemis:artemis-server:jar:0.0.1-mqbench-missing" in message
    assert "\n" not in message
    assert maven.installed(missing, tmp_path) is None
