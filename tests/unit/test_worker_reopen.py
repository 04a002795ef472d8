"""The engine decides whether a client object can be reused from the error's kind."""

from __future__ import annotations

import asyncio
import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest

from mqbench.endpoint import Endpoint
from mqbench.errors import TransportError, TransportErrorKind
from mqbench.transports.base import (
    AckHandler,
    ClientOptions,
    ClientStats,
    MessageHandler,
    Sender,
    TransportCapabilities,
)
from mqbench.workload.messages import Failed
from mqbench.workload.plan import WorkerPlan
from mqbench.workload.topology import PubSpec
from mqbench.workload.worker import Worker, run_worker

CREATED: list[ReopenClient] = []


class ReopenClient:
    """Fails ``connect`` with the error it was given; a fresh client connects."""

    def __init__(self, failure: TransportError | None) -> None:
        self.failure = failure
        self.connects = 0

    @property
    def connected(self) -> bool:
        return self.connects > 0

    async def connect(self) -> None:
        self.connects += 1
        if self.failure is not None:
            raise self.failure

    async def subscribe(self, topic: str, qos: int, on_message: MessageHandler) -> None:
        pass

    def sender(self, topic: str, qos: int) -> Sender:
        return lambda payload, tag: True

    def set_ack_handler(self, handler: AckHandler) -> None:
        pass

    def pending_write_bytes(self) -> int:
        return 0

    async def flush(self, timeout_s: float) -> None:
        pass

    async def close(self) -> None:
        pass

    def stats(self) -> ClientStats:
        return ClientStats()


class ReopenTransport:
    """Creates clients that connect (the worker's fresh clients)."""

    name = "reopen"
    protocol = "mqtt"
    capabilities = TransportCapabilities(max_qos=2, persistent_sessions=True, wildcard_filters=True)

    def create_client(self, endpoint: Endpoint, options: ClientOptions) -> ReopenClient:
        client = ReopenClient(None)
        CREATED.append(client)
        return client


def make_worker(tmp_path: Path) -> Worker:
    spec = PubSpec(0, "p0", "t/0")
    plan = WorkerPlan(
        worker=0,
        cell_dir=str(tmp_path),
        transport="test_worker_reopen:ReopenTransport",
        host="127.0.0.1",
        port=1,
        publishers=[spec],
        subscribers=[],
        publishers_total=1,
        rate=1.0,
        payload_bytes=24,
        qos=0,
        messages_per_publisher=1,
        connect_timeout_s=1.0,
        spin_ns=0,
        late_threshold_ns=1,
    )
    parent, child = multiprocessing.Pipe()
    parent.close()
    return Worker(plan, child)


def test_a_client_that_cannot_connect_again_is_replaced_by_a_new_one(tmp_path: Path) -> None:
    worker = make_worker(tmp_path)
    used = ReopenClient(TransportError("x", TransportErrorKind.NOT_REUSABLE))
    CREATED.clear()
    reopened = asyncio.run(worker.pool.reopen(worker.plan.publishers[0], used))
    assert reopened is CREATED[0] and reopened is not used
    assert used.connects == 1 and CREATED[0].connects == 1


@pytest.mark.parametrize(
    "kind", [TransportErrorKind.UNSUPPORTED, TransportErrorKind.CONNECT_FAILED]
)
def test_other_failures_propagate_even_when_their_text_says_once(
    tmp_path: Path, kind: TransportErrorKind
) -> None:
    worker = make_worker(tmp_path)
    failure = TransportError("the nats client is at-most-once: QoS 1 was already used once", kind)
    CREATED.clear()
    with pytest.raises(TransportError) as info:
        asyncio.run(worker.pool.reopen(worker.plan.publishers[0], ReopenClient(failure)))
    assert info.value is failure
    assert CREATED == []


def test_a_worker_that_cannot_open_its_record_folder_says_why_instead_of_vanishing(
    tmp_path: Path,
) -> None:
    worker = make_worker(tmp_path)
    plan = replace(worker.plan, cell_dir=str(tmp_path / "missing" / "cell"))
    parent, child = multiprocessing.Pipe()
    assert run_worker(plan, child) is None
    reply = parent.recv()
    assert isinstance(reply, Failed)
    message = reply.message
    assert message.startswith("worker 0 could not start: FileNotFoundError")
    assert str(tmp_path / "missing" / "cell") in message and "\n" not in message
