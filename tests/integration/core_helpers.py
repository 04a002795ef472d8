"""Drive ``mqbench_core.Core`` over lent client sessions in a test (no worker, no plan)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mqbench.records.format import RECORD_DTYPE
from mqbench.records.writer import RecordWriter
from mqbench.transports.base import LendsSockets


@dataclass
class CoreRun:
    """What one core run left: its records and counters."""

    deliveries: np.ndarray
    sends: np.ndarray
    stats: dict[str, int]
    lost: list[tuple[str, int, str]]


async def drive_core(
    folder: Path,
    protocol: str,
    publishers: Sequence[tuple[LendsSockets, str]],
    subscribers: Sequence[LendsSockets],
    *,
    rate: float,
    messages: int,
    payload: int = 64,
    settle_s: float = 1.0,
) -> CoreRun:
    """Lend the sessions to a core that publishes ``messages`` per publisher at ``rate``
    from 0.2 s on, keep it receiving ``settle_s`` after the schedule, stop it and read
    the records (written through ``RecordWriter`` as a worker does)."""
    import mqbench_core

    deliveries = RecordWriter(folder / "deliveries-0.bin")
    sends = RecordWriter(folder / "sends-0.bin")
    start_ns = time.time_ns() + 200_000_000
    core: Any = mqbench_core.Core(
        protocol,
        deliveries.lend(),
        sends.lend(),
        start_ns,
        rate,
        len(publishers),
        0,
        len(publishers),
        messages,
        payload,
        0,
        5_000_000,
        True,
        60.0,
        1 << 24,
    )
    for index, (client, topic) in enumerate(publishers):
        head, tail = client.publish_frame(topic, payload)
        core.add_publisher(client.lend_socket(), index, head, tail)
    for index, client in enumerate(subscribers):
        core.add_subscriber(client.lend_socket(), index)
    thread = threading.Thread(target=core.run)
    thread.start()
    deadline = time.monotonic() + 30
    while not core.published and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.sleep(settle_s)
    core.stop()
    await asyncio.get_running_loop().run_in_executor(None, thread.join, 10)
    stats = core.stats()
    for writer, kind in ((deliveries, "deliveries"), (sends, "sends")):
        writer.adopt(stats[kind], stats[f"{kind}_written"], stats[f"{kind}_errno"])
        writer.close()
    return CoreRun(
        np.fromfile(folder / "deliveries-0.bin", dtype=RECORD_DTYPE),
        np.fromfile(folder / "sends-0.bin", dtype=RECORD_DTYPE),
        stats,
        core.take_lost(),
    )
