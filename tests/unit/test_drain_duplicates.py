"""A broker's second delivery of a message does not end the drain one message early."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_worker_reopen import ReopenClient, make_plan

from mqbench.records.format import pack_header
from mqbench.transports.base import MessageHandler
from mqbench.workload.coordinator import drained
from mqbench.workload.topology import SubSpec
from mqbench.workload.worker import Worker


class CapturingClient(ReopenClient):
    """Connects, and keeps the handler its subscription was given."""

    def __init__(self) -> None:
        super().__init__(None)
        self.on_message: MessageHandler | None = None

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        self.on_message = on_message


@pytest.fixture
def subscriber_worker(tmp_path: Path) -> Iterator[Worker]:
    spec = SubSpec(0, "s0", "t/0", persistent=True)
    plan = replace(make_plan(tmp_path), publishers=[], subscribers=[spec], qos=1)
    parent, child = multiprocessing.Pipe()
    parent.close()
    worker = Worker(plan, child)
    yield worker
    worker.deliveries.close()
    worker.sends.close()
    worker.conn.close()


def deliver(client: CapturingClient, pub: int, seqs: list[int]) -> None:
    assert client.on_message is not None
    for seq in seqs:
        client.on_message(pack_header(pub, seq, 1_000 + seq) + bytes(8), 2_000 + seq)


def test_a_qos1_message_delivered_again_after_a_reconnect_is_not_an_arrival(
    subscriber_worker: Worker,
) -> None:
    # 100 sent; the subscriber got 0-98, then after a reset the broker delivered 98 again
    # on the new connection; 99 is still on its way.
    pool = subscriber_worker.pool
    spec = subscriber_worker.plan.subscribers[0]
    first, second = CapturingClient(), CapturingClient()
    asyncio.run(pool._open_subscriber(spec, first))
    deliver(first, 0, list(range(99)))
    asyncio.run(pool._open_subscriber(spec, second))
    deliver(second, 0, [98])
    stats = replace(subscriber_worker.stats(), sent=100)
    assert (stats.received, stats.duplicate_deliveries) == (100, 1)
    assert not drained(stats, 1.0)
    deliver(second, 0, [99])
    assert drained(replace(subscriber_worker.stats(), sent=100), 1.0)
