"""What each runtime does with the broker is its ``RuntimeCapabilities``; code asks these,
never the runtime's name (issue 24)."""

from __future__ import annotations

import re
from pathlib import Path

from mqbench.brokers.runtime.manage import BrokerState
from mqbench.brokers.runtime.registry import runtime_capabilities, runtime_names

PACKAGE = Path(__file__).resolve().parents[2] / "mqbench"
NAME_TEST = re.compile(r"runtime\s*[!=]=\s*\"(native|docker|external)\"")


def test_only_the_native_runtime_runs_the_broker_as_a_local_process() -> None:
    local = {name: runtime_capabilities(name).local_process for name in runtime_names()}
    assert local == {"native": True, "docker": False, "external": False}


def test_a_hand_started_broker_is_handled_by_its_runtimes_capabilities() -> None:
    native = BrokerState("nats", "native", "127.0.0.1", 4222, "/w", 0, pid=1)
    docker = BrokerState("nats", "docker", "127.0.0.1", 4222, "/w", 0, project="p")
    assert native.local_process and not docker.local_process


def test_no_engine_code_outside_the_scenario_model_tests_a_runtime_by_name() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        # The scenario model validates the runtime's name itself (layer 2 sees no runtimes).
        if path != PACKAGE / "scenario" / "model.py"
        for line in path.read_text(encoding="utf-8").splitlines()
        if NAME_TEST.search(line)
    ]
    assert found == []
