"""Target tbmq-style in the native runtime, and the ``broker serve`` command's errors."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from mqbench.brokers.base import StartRequest
from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.cli.broker_cmd import broker_app
from mqbench.transports.base import ClientOptions
from mqbench.transports.mqtt import MqttClient

pytestmark = pytest.mark.integration


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_native_runtime_starts_the_broker_with_its_own_redis_and_stops_both(
    tmp_path: Path,
) -> None:
    runtime = NativeRuntime()
    assert runtime.availability("tbmq-style").available
    broker = runtime.start(
        StartRequest("tbmq-style", tmp_path / "b", options={"persistence": "redis-async"})
    )
    try:
        redis_pids = [p for p in broker.info.settings["service_pids"] if p]
        assert len(redis_pids) == 1 and _alive(redis_pids[0])
        got: list[bytes] = []

        async def roundtrip() -> None:
            sub = MqttClient(broker.endpoint, ClientOptions("native-sub", clean_session=False))
            await sub.connect()
            await sub.subscribe("n/+", 1, lambda p, t: got.append(bytes(p)))
            pub = MqttClient(broker.endpoint, ClientOptions("native-pub"))
            await pub.connect()
            pub.sender("n/1", 1)(b"hello", 1)
            await pub.flush(10)
            for _ in range(200):
                if got:
                    break
                await asyncio.sleep(0.01)
            await pub.close()
            await sub.close()

        asyncio.run(roundtrip())
        assert got == [b"hello"]
    finally:
        broker.stop()
    assert not _alive(broker.pids[0])
    assert not _alive(redis_pids[0])


def test_unknown_broker_option_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from mqbench.errors import BrokerError

    with pytest.raises(BrokerError, match="unknown tbmq-style option"):
        NativeRuntime().start(StartRequest("tbmq-style", tmp_path, options={"persistance": "x"}))


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(broker_app, name="broker")
    return app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--messages-limit", "70000"], "can't be greater than 65535"),
        (["--persistence", "mongo"], "unknown persistence 'mongo'"),
        (["--app-pattern", "("], "not a valid regular expression"),
    ],
)
def test_serve_rejects_bad_settings_with_one_line_and_exit_code_2(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(_cli(), ["broker", "serve", "--port", "0", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.count("\n") <= 2


def test_serve_reports_an_unreachable_redis_as_a_broker_error() -> None:
    result = CliRunner().invoke(
        _cli(),
        ["broker", "serve", "--port", "0", "--persistence", "redis-async",
         "--redis-url", "redis://127.0.0.1:1/0"],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "cannot use Redis at redis://127.0.0.1:1/0" in result.output
