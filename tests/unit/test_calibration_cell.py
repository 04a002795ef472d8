"""The one-cell scenario a calibration measurement runs, built as a typed ``Scenario``."""

from __future__ import annotations

import pytest

from mqbench.calibration.measure import RELAY_VERSION, CellRequest, calibration_scenario
from mqbench.errors import ScenarioError
from mqbench.scenario.matrix import expand


def request(**changes: object) -> CellRequest:
    fields: dict[str, object] = {
        "name": "cal-nats",
        "target": "nats",
        "runtime": "native",
        "pairs": 4,
        "rate_per_publisher": 250.0,
        "payload_bytes": 64,
        "warmup_s": 1.0,
        "duration_s": 2.0,
        "drain_s": 0.5,
        **changes,
    }
    return CellRequest(**fields)  # type: ignore[arg-type]


def test_a_calibration_request_is_one_cell_of_pairs_at_qos_0_on_one_worker() -> None:
    scenario = calibration_scenario(request())
    (cell,) = expand(scenario)
    assert (cell.target, cell.topology, cell.pairs, cell.rate) == ("nats", "pairs", 4, 250.0)
    assert (cell.payload_bytes, cell.qos, cell.warmup_s, cell.duration_s) == (64, 0, 1.0, 2.0)
    assert scenario.generator.workers == 1 and scenario.runtime == "native"
    assert scenario.broker.port is None and scenario.broker.options == [{}]


def test_an_external_relay_is_reached_on_its_port_and_sampled_by_its_pid() -> None:
    scenario = calibration_scenario(request(runtime="external", port=4300, pid=77, client="nats"))
    assert (scenario.broker.port, scenario.broker.pid) == (4300, 77)
    assert scenario.broker.options == [{"version": RELAY_VERSION, "label": "relay"}]
    (cell,) = expand(scenario)
    assert cell.client == "nats" and cell.broker_label == "relay"


def test_a_request_out_of_range_is_one_scenario_error_naming_the_value() -> None:
    with pytest.raises(ScenarioError, match=r"^mqbench calibrate: pairs: .* \(got 0\)$"):
        calibration_scenario(request(pairs=0))
