"""Fixtures that start real brokers on 127.0.0.1 for integration tests.

``native_broker(target)`` starts a target with the native runtime in a fresh directory
under ``tmp_path`` and stops it at teardown, even when the test fails. ``mosquitto`` and
``nats`` are shortcuts. A missing broker executable skips the test with the install hint;
any other start failure fails the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqbench.brokers.base import RunningBroker, StartRequest
from mqbench.brokers.native import NativeRuntime

NativeBrokerFactory = Callable[..., RunningBroker]


@pytest.fixture
def native_broker(tmp_path: Path) -> Iterator[NativeBrokerFactory]:
    """Factory: ``native_broker(target, **options) -> RunningBroker``, stopped at teardown."""
    runtime = NativeRuntime()
    started: list[RunningBroker] = []

    def start(
        target: str, *, port: int | None = None, startup_timeout_s: float = 30.0, **options: Any
    ) -> RunningBroker:
        spec = runtime.spec_for(target)
        if spec.find_binary() is None:
            pytest.skip(f"{spec.executable} is not installed; install it with: {spec.install_hint}")
        workdir = tmp_path / f"broker-{target}-{len(started)}"
        broker = runtime.start(
            StartRequest(
                target=target,
                workdir=workdir,
                port=port,
                options=options,
                startup_timeout_s=startup_timeout_s,
            )
        )
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in reversed(started):
            broker.stop()


@pytest.fixture
def mosquitto(native_broker: NativeBrokerFactory) -> RunningBroker:
    """A native mosquitto on a free loopback port (stopped at teardown)."""
    return native_broker("mosquitto")


@pytest.fixture
def nats(native_broker: NativeBrokerFactory) -> RunningBroker:
    """A native nats-server on a free loopback port (stopped at teardown)."""
    return native_broker("nats")
