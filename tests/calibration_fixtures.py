"""Calibrations built in code, for the tests of the file, ``run``'s check and the CLI."""

from __future__ import annotations

from mqbench.calibration.model import (
    Calibration,
    CeilingBounds,
    CeilingResult,
    CellFigures,
    FloorResult,
    HostKey,
    current_host,
)
from mqbench.calibration.runner import default_settings


def figures(p50_us: float = 120.0) -> CellFigures:
    """Plausible low-rate figures."""
    return CellFigures(
        offered_msg_s=200.0,
        pairs=10,
        rate_per_publisher=20.0,
        payload_bytes=64,
        window_s=3.0,
        sent=600,
        received=600,
        lost=0,
        latency_p50_us=p50_us,
        latency_p99_us=3 * p50_us,
        from_send_p50_us=p50_us - 5,
        from_send_p99_us=3 * p50_us - 5,
        send_lag_p50_us=4.0,
        send_lag_p99_us=20.0,
        generator_cpu_cores=0.15,
        worker_cpu_fraction=0.15,
        peer_cpu_cores=0.01,
        generator_saturated=False,
    )


def calibration(
    ceilings: dict[str, float | None] | None = None, host: HostKey | None = None
) -> Calibration:
    """A calibration of this machine with the given ceilings (msg/s per worker) by client."""
    ceilings = {"mqtt": 1000.0, "nats": 2000.0} if ceilings is None else ceilings
    return Calibration(
        created_utc="2026-11-22T10:00:00+00:00",
        updated_utc="2026-11-22T10:00:00+00:00",
        host=host or current_host(),
        load_average=[0.1, 0.2, 0.3],
        settings=default_settings(),
        floors={
            p: FloorResult(
                protocol=p,
                client=p,
                path="relay process on 127.0.0.1",
                measured_utc="2026-11-22T10:00:00+00:00",
                figures=figures(),
            )
            for p in ceilings
        },
        ceilings={
            client: CeilingResult(
                client=client,
                protocol=client,
                pairs=10,
                payload_bytes=64,
                msg_s_per_worker=value,
                limited_by="generator" if value is not None else "min_rate",
                bounds=CeilingBounds(),
                measured_utc="2026-11-22T10:00:00+00:00",
            )
            for client, value in ceilings.items()
        },
    )
