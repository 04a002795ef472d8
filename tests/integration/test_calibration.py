"""``mqbench calibrate`` for real: relays carry the lean clients' messages, a short
calibration of MQTT and NATS against their relays and native brokers, and ``run`` using it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from loops import run, wait_until
from typer.testing import CliRunner

from mqbench.brokers.runtime.native import NativeRuntime
from mqbench.calibration import store
from mqbench.calibration.ceiling import SearchPlan
from mqbench.calibration.model import CeilingBounds, Settings
from mqbench.calibration.relay_process import RelayProcess
from mqbench.calibration.runner import CalibrationRequest, calibrate, lean_client
from mqbench.cli.app import app
from mqbench.endpoint import Endpoint
from mqbench.records.format import HEADER
from mqbench.transports.base import ClientOptions
from mqbench.transports.registry import get_transport

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("protocol", ["mqtt", "nats", "redis", "amqp", "zenoh"])
def test_a_relay_carries_the_lean_clients_messages_from_publisher_to_subscriber(
    protocol: str,
) -> None:
    async def exchange(port: int) -> list[tuple[bytes, int]]:
        transport = get_transport(lean_client(protocol))
        endpoint = Endpoint("127.0.0.1", port)
        sub = transport.create_client(endpoint, ClientOptions("sub", connect_timeout_s=5))
        pub = transport.create_client(endpoint, ClientOptions("pub", connect_timeout_s=5))
        got: list[tuple[bytes, int]] = []
        await sub.connect()
        await sub.subscribe("mqbench/calib/0", 0, lambda p, t: got.append((bytes(p), t)))
        await pub.connect()
        send = pub.sender("mqbench/calib/0", 0)
        # zenoh peers find each other by gossip: send until the first message arrives
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            send(HEADER.pack(0, 0, time.time_ns(), 0) + bytes(40), 0)
            await asyncio.sleep(0.05)
        got.clear()
        for seq in range(1, 51):
            send(HEADER.pack(0, seq, time.time_ns(), 0) + bytes(40), seq)
            await asyncio.sleep(0.002)
        await pub.flush(2.0)
        await wait_until(lambda: len(got) >= 50, timeout_s=5)
        await pub.close()
        await sub.close()
        return got

    with RelayProcess.start(protocol) as relay:
        got = run("uvloop", exchange(relay.port))
    seqs = [HEADER.unpack_from(payload)[1] for payload, _ in got]
    assert seqs == list(range(1, 51))
    for payload, t_recv in got:
        assert 0 < t_recv - HEADER.unpack_from(payload)[2] < 1_000_000_000
    if protocol == "zenoh":
        assert relay.hop_stats is None  # the discovery peer forwards nothing
    else:
        # reads, not messages: under load two publishes can arrive in one read
        assert relay.hop_stats is not None and relay.hop_stats.reads > 0


@pytest.mark.slow
def test_a_short_calibration_is_saved_and_then_used_by_run(
    tmp_path: Path, isolated_calibration: Path
) -> None:
    runtime = NativeRuntime()
    for target in ("mosquitto", "nats"):
        if not runtime.availability(target).available:
            pytest.skip(f"{target} is not installed natively")
    settings = Settings(
        pairs=5,
        rate_per_publisher=20.0,
        payload_bytes=64,
        warmup_s=1.0,
        duration_s=2.0,
        drain_s=1.0,
        ceiling_pairs=5,
        ceiling_start_msg_s=50.0,
        ceiling_max_msg_s=100.0,
        ceiling_max_steps=2,
        ceiling_budget_s=60.0,
    )
    lines: list[str] = []
    calibration = calibrate(
        CalibrationRequest(
            protocols=["mqtt", "nats"],
            targets=["mosquitto", "nats"],
            settings=settings,
            search=SearchPlan(start=50.0, max_rate=100.0, max_steps=2, budget_s=60.0),
            # the bound is loose on purpose: this test checks the plumbing, not the machine
            bounds=CeilingBounds(lag_p99_us=50_000.0),
        ),
        lines.append,
    )
    for protocol, target in (("mqtt", "mosquitto"), ("nats", "nats")):
        floor = calibration.floors[protocol].figures
        broker = calibration.brokers[target].figures
        assert floor is not None and broker is not None, (protocol, lines)
        assert floor.sent == floor.received == 5 * 20 * 2
        assert floor.lost == 0 and broker.lost == 0
        assert floor.from_send_p50_us is not None and broker.from_send_p50_us is not None
        # the floor is the tool plus one minimal relay hop: at most about the broker's
        assert floor.from_send_p50_us <= 3.0 * broker.from_send_p50_us + 200.0, (
            protocol,
            floor.from_send_p50_us,
            broker.from_send_p50_us,
        )
        hop = calibration.floors[protocol].relay_hop
        assert hop is not None and hop.p50_us < floor.from_send_p50_us
        ceiling = calibration.ceilings[protocol]
        assert len(ceiling.steps) == 2
        # other load on the machine can fail a step through the generator's self-check
        assert ceiling.msg_s_per_worker in (None, 25.0, 50.0, 100.0)
    other = calibration.wakeup["other"].figures
    assert other is not None, calibration.wakeup["other"].reason
    assert other.samples == 2000 and other.p50_us <= other.p99_us
    store.save(calibration, isolated_calibration)
    nats_ceiling = calibration.ceilings["nats"].msg_s_per_worker

    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: calibrated\ntargets: [nats]\n"
        "workload: {pairs: 5, rate: 100, payload: 64B, warmup: 1s, duration: 2s, drain: 1s}\n"
    )
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out), "--no-analyze"])
    assert result.exit_code == 0, result.output
    cell = "nats-64B-5pairs-100hz-qos0"
    (manifest_path,) = out.glob("*/*/manifest.json")
    recorded = json.loads(manifest_path.read_text())["calibration"]
    assert recorded["path"] == str(isolated_calibration)
    assert recorded["used"] is True
    assert recorded["created_utc"] == calibration.created_utc
    assert recorded["figures"]["floors"]["nats"]["latency_p50_us"] == (
        calibration.floors["nats"].figures.latency_p50_us  # type: ignore[union-attr]
    )
    assert recorded["figures"]["wakeup"]["other"]["p99_us"] == other.p99_us
    # the cell carries the floor of the policy its workers ran under, for the verdict
    timing = json.loads(manifest_path.read_text())["cells"][0]["timing"]
    policy = "other" if timing["policy"] == "other" else "fifo+dma"
    assert timing["wakeup_floor"]["policy"] == policy
    if nats_ceiling is None:  # no step passed: nothing to compare with, nothing to warn
        assert "warning:" not in result.output
        assert recorded["warnings"] == []
        return
    assert (
        f"warning: {cell}: 500 msg/s offered per worker (1 worker(s)) is above the calibrated "
        f"nats ceiling of {nats_ceiling:,.0f} msg/s per worker" in result.output
    )
    assert recorded["figures"]["ceilings"]["nats"]["msg_s_per_worker"] == nats_ceiling
    assert [w["cell"] for w in recorded["warnings"]] == [cell]
