"""Adding a broker takes one module and one registry entry: the fake broker, end to end.

``fake_broker.py`` is the module; the ``registry`` fixture is the entry. With nothing else
changed, the native runtime starts it, ``mqbench targets`` lists it, and ``mqbench brokers
up/down`` run it by hand.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import fake_broker
import psutil
import pytest
from typer.testing import CliRunner

from mqbench.brokers import registry
from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime, process_alive
from mqbench.brokers.runtime.probes import redis_probe
from mqbench.cli.app import app
from mqbench.errors import BrokerError

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def with_fake_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The one registry entry."""
    monkeypatch.setattr(registry, "BROKERS", (*registry.BROKERS, fake_broker.DEFINITION))
    yield


def test_the_native_runtime_starts_probes_and_stops_the_fake_broker(tmp_path: Path) -> None:
    runtime = NativeRuntime()
    assert runtime.availability("fake").available
    broker = runtime.start(
        StartRequest("fake", tmp_path / "w", options={"banner": "hello"}, startup_timeout_s=20)
    )
    try:
        endpoint = broker.endpoint
        assert redis_probe(endpoint.host, endpoint.port, 2.0)
        info = broker.info.to_dict()
        assert (info["name"], info["target"], info["runtime"]) == ("fake", "fake", "native")
        assert info["version"] == fake_broker.VERSION
        assert info["settings"] == {"banner": "hello"}
        assert Path(info["config_path"]).read_text() == info["config"]
        assert f"hello {fake_broker.VERSION} listening on" in broker.log_tail()
    finally:
        broker.stop()
    assert broker.info.exit_code == 0
    assert not process_alive(info["pid"])


def test_an_unknown_option_of_the_fake_broker_is_refused_naming_the_known_ones(
    tmp_path: Path,
) -> None:
    with pytest.raises(BrokerError) as excinfo:
        NativeRuntime().start(StartRequest("fake", tmp_path / "w", options={"colour": "red"}))
    assert str(excinfo.value) == "unknown fake option(s) colour (known: banner)"


def test_mqbench_targets_lists_the_fake_broker_with_why_docker_cannot_run_it() -> None:
    result = CliRunner().invoke(app, ["targets"], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    assert ["fake", "redis", "Fake", "broker", "yes", "no"] in rows
    assert "fake: no compose file for target 'fake'" in result.output
    listed = json.loads(CliRunner().invoke(app, ["targets", "--format", "json"]).stdout)
    (fake,) = [t for t in listed if t["target"] == "fake"]
    assert fake["native"] is True and fake["docker"] is False
    assert fake["docker_reason"] == "no compose file for target 'fake'"


def test_brokers_up_and_down_run_the_fake_broker_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQBENCH_STATE_DIR", str(tmp_path / "state"))
    runner = CliRunner()
    up = runner.invoke(app, ["brokers", "up", "fake", "--timeout", "20"])
    assert up.exit_code == 0, up.output
    assert up.output.startswith("fake is up (native, pid ")
    pid = int(up.output.split("pid ", 1)[1].split(")", 1)[0])
    try:
        down = runner.invoke(app, ["brokers", "down", "fake"])
        assert (down.exit_code, down.output.strip()) == (0, "fake (native): stopped")
        assert not process_alive(pid)
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
