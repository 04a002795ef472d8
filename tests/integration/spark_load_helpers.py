"""Shared helpers of the distributed-load integration tests: small scenarios, one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mqbench.brokers.runtime.registry import get_runtime
from mqbench.records.hadoop_fs import RemoteRoot
from mqbench.scenario.loader import ScenarioSource, validate_scenario
from mqbench.workload.run import RunResult, SilentReporter, run_scenario


def small_scenario(target: str, generator: dict[str, Any], **workload: Any) -> dict[str, Any]:
    """Four pairs at 20 msg/s for 1 + 3 s on ``target``: 320 messages."""
    return {
        "name": f"spark-{target}",
        "targets": [target],
        "runtime": "native",
        "workload": {
            "topology": "pairs",
            "pairs": 4,
            "rate": 20,
            "payload": 64,
            "qos": 0,
            "warmup": "1s",
            "duration": "3s",
            "drain": "2s",
            **workload,
        },
        "generator": generator,
        "seed": 1,
    }


def run(data: dict[str, Any], out: Path | RemoteRoot) -> RunResult:
    """Run a scenario mapping into ``out`` (skips when the target is not installed)."""
    scenario = validate_scenario(data, "test.yaml")
    for target in scenario.targets:
        availability = get_runtime("native").availability(target)
        if not availability.available:
            pytest.skip(f"{target}: {availability.reason}")
    return run_scenario(
        scenario,
        source=ScenarioSource("test.yaml", data),
        out_root=out,
        argv=["pytest"],
        reporter=SilentReporter(),
    )


def manifest(result_dir: Path) -> dict[str, Any]:
    """The run's manifest as JSON."""
    data: dict[str, Any] = json.loads((result_dir / "manifest.json").read_text())
    return data
