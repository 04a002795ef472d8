"""A spec's recorded settings (``LaunchPlan.settings``, a ``BrokerSettings``) reach the
manifest's ``broker.settings`` as they are, and their readers refuse a wrong kind of value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqbench.brokers.definitions.mosquitto import MosquittoSpec
from mqbench.brokers.docker.security import HealthcheckInput, rabbitmq_healthcheck
from mqbench.brokers.info import NativeInfo
from mqbench.brokers.runtime.native_spec import LaunchPlan
from mqbench.brokers.runtime.settings import BrokerSettings, int_setting, str_setting
from mqbench.errors import BrokerError
from mqbench.records.cell_entry import CellEntry


def _manifest_broker(plan: LaunchPlan) -> object:
    """The ``broker`` entry a native start writes for ``plan``, as read back from JSON."""
    info = NativeInfo(
        name="mosquitto",
        target="mosquitto",
        version="2.0.11",
        binary="/usr/sbin/mosquitto",
        argv=list(plan.argv),
        config_path=str(plan.config_path),
        config=plan.config_text,
        host="127.0.0.1",
        port=18830,
        pid=7,
        log_path="/w/mosquitto.log",
        settings=dict(plan.settings),
        resources=None,
    )
    entry = CellEntry(id="c0", broker=info.to_dict())
    return json.loads(json.dumps(entry.to_dict()))["broker"]


def test_mosquittos_settings_reach_the_manifest_as_recorded(tmp_path: Path) -> None:
    options = {"max_inflight_messages": 5, "user": "mqbench"}
    plan = MosquittoSpec().prepare(
        Path("/usr/sbin/mosquitto"), tmp_path, "127.0.0.1", 18830, options
    )
    broker = _manifest_broker(plan)
    assert isinstance(broker, dict)
    assert json.dumps(broker["settings"]) == json.dumps(
        {
            "max_queued_messages": 100000,
            "max_queued_bytes": 0,
            "max_inflight_messages": 5,
            "max_connections": -1,
            "persistence": False,
            "user": "mqbench",
            "set_tcp_nodelay": True,
            "allow_anonymous": True,
        }
    )


def test_a_setting_read_as_a_number_or_text_refuses_another_kind_of_value() -> None:
    settings: BrokerSettings = {
        "epmd_port": 4369,
        "nodename": "mqbench-1@localhost",
        "plugins": ["x"],
    }
    assert int_setting(settings, "epmd_port") == 4369
    assert int_setting(settings, "mqtt_port") is None
    assert str_setting(settings, "nodename") == "mqbench-1@localhost"
    with pytest.raises(BrokerError, match=r"^broker setting plugins \['x'\] is not an integer$"):
        int_setting(settings, "plugins")
    with pytest.raises(BrokerError, match="not an integer"):
        int_setting({"epmd_port": True}, "epmd_port")
    with pytest.raises(BrokerError, match=r"^broker setting epmd_port 4369 is not text$"):
        str_setting(settings, "epmd_port")


def _health(settings: BrokerSettings) -> HealthcheckInput:
    return HealthcheckInput(
        port=5672,
        tls=False,
        ca=None,
        client_cert=None,
        client_key=None,
        username=None,
        password_file=None,
        settings=settings,
    )


def test_rabbitmqs_container_healthcheck_checks_every_recorded_listener() -> None:
    settings: BrokerSettings = {
        "nodename": "mqbench-1@localhost",
        "epmd_port": 4400,
        "amqp_port": 5672,
    }
    command = rabbitmq_healthcheck(_health({**settings, "mqtt_port": None}))
    assert command[0] == "CMD-SHELL"
    assert command[1].count("check_port_listener") == 1
    assert command[1].endswith("-n mqbench-1@localhost check_port_listener 5672")
    assert "ERL_EPMD_PORT=4400 " in command[1]
    with pytest.raises(BrokerError, match="records no epmd_port or nodename"):
        rabbitmq_healthcheck(_health({"amqp_port": 5672}))
