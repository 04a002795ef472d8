"""Distributed load rules: routes across tasks, clock bounds, outputs, generator settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mqbench.errors import ClockError, ScenarioError
from mqbench.records.cell_entry import CellEntry
from mqbench.records.clocks import ClockOffset, GeneratorClocks, TaskClock
from mqbench.records.hadoop_fs import RemoteRoot, parse_location
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import expand
from mqbench.scenario.model import Scenario
from mqbench.workload.distributed import (
    check_clock_bound,
    check_distributed,
    clock_spread_ns,
    cross_task_routes,
)
from mqbench.workload.plan import build_worker_plans
from mqbench.workload.preflight import preflight
from mqbench.workload.topology import build_topology


def scenario(workload: dict[str, Any], **generator: Any) -> Scenario:
    data = {
        "name": "d",
        "targets": ["mosquitto"],
        "workload": {"rate": 1, "duration": "2s", **workload},
        "generator": {"engine": "spark", "master": "local[2]", **generator},
    }
    return validate_scenario(data, "d.yaml")


def crossing(s: Scenario) -> int:
    cell = expand(s)[0]
    topology = build_topology(cell, "t", s.seed)
    plans = build_worker_plans(
        cell,
        topology,
        cell_dir="",
        transport="",
        host="127.0.0.1",
        port=1,
        workers=s.generator.executors,
        connect_timeout_s=1,
        spin_ns=0,
        late_threshold_ns=0,
    )
    return cross_task_routes(topology.routes, plans)


def test_pairs_over_two_tasks_keep_each_publisher_with_its_subscriber() -> None:
    s = scenario({"topology": "pairs", "pairs": 10})
    assert crossing(s) == 0
    check_distributed(s, expand(s))


def test_a_fanout_over_two_tasks_puts_routes_across_tasks_and_is_refused() -> None:
    s = scenario({"topology": "fanout", "subscribers": 10})
    assert crossing(s) == 5  # the subscribers in the second task
    with pytest.raises(ScenarioError, match=r"puts 5 of 10 .*max_clock_error_ms"):
        check_distributed(s, expand(s))


def test_a_fanout_on_one_task_or_with_a_stated_clock_bound_is_accepted() -> None:
    check_distributed(
        *_with_cells(scenario({"topology": "fanout", "subscribers": 10}, executors=1))
    )
    bounded = scenario({"topology": "fanout", "subscribers": 10}, max_clock_error_ms=1)
    check_distributed(*_with_cells(bounded))


def _with_cells(s: Scenario) -> tuple[Scenario, list[Any]]:
    return s, expand(s)


def test_a_fanin_over_two_tasks_counts_every_publisher_away_from_its_subscriber() -> None:
    s = scenario({"topology": "fanin", "publishers": 8})
    # 8 publishers in one group -> 1 subscriber: the 4 publishers of the other task cross
    assert crossing(s) == 4


def test_task_offsets_within_the_bound_pass_and_beyond_it_are_refused() -> None:
    near = [ClockOffset(100_000, 50_000, 100_000, 16), ClockOffset(-100_000, 50_000, 100_000, 16)]
    assert clock_spread_ns(near) == 300_000
    check_clock_bound(near, 300_000)
    with pytest.raises(ClockError, match=r"differ by 0.300 ms .*max_clock_error_ms 0.2"):
        check_clock_bound(near, 200_000)


def test_an_output_uri_is_carried_as_the_string_the_user_gave() -> None:
    root = parse_location("hdfs://127.0.0.1:9000/results/")
    assert root == RemoteRoot("hdfs://127.0.0.1:9000/results")
    assert isinstance(root, RemoteRoot)
    assert root.child("s", "run-1").uri == "hdfs://127.0.0.1:9000/results/s/run-1"
    assert parse_location("file:///tmp/x") == RemoteRoot("file:///tmp/x")
    assert parse_location("results/x") == Path("results/x")


def test_an_output_uri_is_refused_for_a_local_run_with_a_reason() -> None:
    s = validate_scenario(
        {"name": "l", "targets": ["mosquitto"], "workload": {"pairs": 2}}, "t.yaml"
    )
    with pytest.raises(ScenarioError, match=r"^--out hdfs://nn/r: a URI needs generator.engine"):
        preflight(s, out_root=RemoteRoot("hdfs://nn/r"))


def test_the_split_layout_is_refused_with_the_spark_engine() -> None:
    s = scenario({"topology": "pairs", "pairs": 2}, layout="split")
    with pytest.raises(ScenarioError, match="layout split"):
        check_distributed(s, expand(s))


@pytest.mark.parametrize(
    ("generator", "message"),
    [
        ({"engine": "spark"}, "needs generator.master"),
        ({"master": "spark://127.0.0.1:7077"}, "generator.engine is local"),
    ],
)
def test_spark_settings_need_each_other(generator: dict[str, Any], message: str) -> None:
    data = {"name": "d", "targets": ["mosquitto"], "generator": generator}
    with pytest.raises(ScenarioError, match=message):
        validate_scenario(data, "d.yaml")


def test_the_broker_binds_to_loopback_unless_an_address_is_given() -> None:
    base = {"name": "d", "targets": ["mosquitto"]}
    assert validate_scenario(base, "d.yaml").broker.host == "127.0.0.1"
    explicit = validate_scenario({**base, "broker": {"host": "10.1.2.3"}}, "d.yaml")
    assert explicit.broker.host == "10.1.2.3"


def test_a_cell_entry_keeps_its_task_clocks() -> None:
    offset = ClockOffset(1, 2, 4, 16)
    clocks = GeneratorClocks("spark", "m", (TaskClock(0, "h", 9, offset, offset, 7),), 0, 0)
    entry = CellEntry(id="c", status="completed", clocks=clocks)
    data = yaml.safe_load(yaml.safe_dump(entry.to_dict()))
    assert CellEntry.from_dict(data).clocks == clocks


def test_run_with_a_spark_master_refuses_a_fanout_over_two_tasks_before_anything_starts(
    tmp_path: Path,
) -> None:
    from typer.testing import CliRunner

    from mqbench.cli.app import app

    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(
        "name: f\ntargets: [nats]\nworkload: {topology: fanout, subscribers: 10}\n"
    )
    out = tmp_path / "out"
    args = ["run", str(scenario_file), "--dry-run", "--out", str(out)]
    refused = CliRunner().invoke(app, [*args, "--spark-master", "spark://127.0.0.1:7077"])
    assert refused.exit_code == 1
    assert "puts 5 of 10 publisher-subscriber routes across tasks" in refused.output
    assert not out.exists()
    bound = ["--set", "generator.max_clock_error_ms=1", "--bind", "127.0.0.2"]
    bounded = CliRunner().invoke(app, [*args, "--spark-master", "spark://127.0.0.1:7077", *bound])
    assert bounded.exit_code == 0, bounded.output
    assert "2 shared" in bounded.output


def test_a_spark_failure_is_told_by_the_tasks_own_mqbench_error_in_one_line() -> None:
    from mqbench.workload.spark_engine import one_line

    text = (
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collect.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: barrier task\n"
        'Traceback (most recent call last):\n  File "x.py", line 1, in run_shard\n'
        "mqbench.errors.TransportError: task 1 cannot reach the driver at 10.0.0.4:4040\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.abortStage(DAGScheduler.scala:4568)\n"
    )
    assert one_line(RuntimeError(text)) == "task 1 cannot reach the driver at 10.0.0.4:4040"
    aborted = RuntimeError("x\n: org.apache.spark.SparkException: Job aborted due to y\n\tat z")
    assert one_line(aborted) == ": org.apache.spark.SparkException: Job aborted due to y"
