"""Native specs of Redis and the Zenoh router: config text, recorded settings, option checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mqbench.brokers.base import BrokerSecurity
from mqbench.brokers.definitions.redis import RedisSpec
from mqbench.brokers.definitions.zenoh import ZenohSpec
from mqbench.brokers.services.zenoh_router import router_settings
from mqbench.errors import BrokerError
from mqbench.scenario.security import Secret

BINARY = Path("/usr/bin/redis-server")


def test_redis_config_is_loopback_only_without_persistence_and_with_the_pubsub_limit(
    tmp_path: Path,
) -> None:
    plan = RedisSpec().prepare(BINARY, tmp_path, "127.0.0.1", 6400, {})
    lines = plan.config_text.splitlines()
    for line in (
        "bind 127.0.0.1",
        "port 6400",
        "protected-mode yes",
        'save ""',
        "appendonly no",
        'logfile ""',
        f'dir "{tmp_path}"',
        "client-output-buffer-limit pubsub 256mb 64mb 60",
        "maxclients 19000",
    ):
        assert line in lines
    assert plan.argv == [str(BINARY), str(tmp_path / "redis.conf")]
    assert plan.settings["client_output_buffer_limit_pubsub"] == "256mb 64mb 60"
    assert plan.settings["requirepass"] is False


def test_a_redis_password_is_written_only_into_the_private_folder(tmp_path: Path) -> None:
    work, private = tmp_path / "work", tmp_path / "private"
    work.mkdir()
    password = Secret('p"w', "environment variable PW")
    security = BrokerSecurity(private_dir=private)
    plan = RedisSpec().prepare_secured(
        BINARY, work, "127.0.0.1", 6400, {"password": password}, security
    )
    secret_file = private / "redis-requirepass.conf"
    assert secret_file.read_text() == 'requirepass "p\\"w"\n'
    assert secret_file.stat().st_mode & 0o077 == 0
    assert f'include "{secret_file}"' in (work / "redis.conf").read_text()
    assert not any('p"w' in p.read_text() for p in work.rglob("*") if p.is_file())
    assert 'p"w' not in plan.config_text and plan.settings["requirepass"] is True
    with pytest.raises(BrokerError, match="needs the run's private folder"):
        RedisSpec().prepare(BINARY, work, "127.0.0.1", 6401, {"password": password})


def test_redis_options_are_checked(tmp_path: Path) -> None:
    spec = RedisSpec()
    with pytest.raises(BrokerError, match=r"unknown redis option\(s\) pubsub_limit"):
        spec.prepare(BINARY, tmp_path, "127.0.0.1", 6400, {"pubsub_limit": "0 0 0"})
    with pytest.raises(BrokerError, match="pubsub_buffer_limit must be '<hard> <soft> <seconds>'"):
        spec.prepare(BINARY, tmp_path, "127.0.0.1", 6400, {"pubsub_buffer_limit": "1gb"})
    plan = spec.prepare(BINARY, tmp_path, "127.0.0.1", 6400, {"pubsub_buffer_limit": "0  0 0"})
    assert plan.settings["client_output_buffer_limit_pubsub"] == "0 0 0"


def test_zenoh_router_runs_in_this_interpreter_with_scouting_off(tmp_path: Path) -> None:
    spec = ZenohSpec()
    assert spec.find_binary() == Path(sys.executable)
    plan = spec.prepare(
        Path(sys.executable),
        tmp_path,
        "127.0.0.1",
        7500,
        {"extra_config": {"transport/unicast/lowlatency": False}},
    )
    assert plan.argv[:5] == [
        sys.executable,
        "-m",
        "mqbench.brokers.services.zenoh_router",
        "--listen",
        "tcp/127.0.0.1:7500",
    ]
    assert plan.argv[-2:] == ["--config", "transport/unicast/lowlatency=false"]
    assert plan.settings["scouting/multicast/enabled"] is False
    assert plan.settings["scouting/gossip/enabled"] is False
    assert plan.settings["transport/unicast/lowlatency"] is False
    assert json.loads((tmp_path / "zenoh-router.json5").read_text()) == plan.settings
    assert router_settings("tcp/127.0.0.1:7500")["transport/unicast/max_sessions"] == 10000


def test_zenoh_options_are_checked(tmp_path: Path) -> None:
    spec = ZenohSpec()
    with pytest.raises(BrokerError, match=r"unknown zenoh option\(s\) sessions"):
        spec.prepare(Path(sys.executable), tmp_path, "127.0.0.1", 7500, {"sessions": 1})
    with pytest.raises(
        BrokerError, match="zenoh option extra_config='x': input should be a valid dictionary"
    ):
        spec.prepare(Path(sys.executable), tmp_path, "127.0.0.1", 7500, {"extra_config": "x"})
