"""The engine decides whether a client object can be reused from the error's kind."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
from collections.abc import Callable, Iterator
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


def make_plan(tmp_path: Path) -> WorkerPlan:
    spec = PubSpec(0, "p0", "t/0")
    return WorkerPlan(
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


@pytest.fixture
def make_worker() -> Iterator[Callable[[Path], Worker]]:
    """Workers that are never run: their record files are closed after the test."""
    made: list[Worker] = []

    def make(tmp_path: Path) -> Worker:
        parent, child = multiprocessing.Pipe()
        parent.close()
        made.append(Worker(make_plan(tmp_path), child))
        return made[-1]

    yield make
    for worker in made:
        worker.deliveries.close()
        worker.sends.close()
        worker.conn.close()


def test_a_client_that_cannot_connect_again_is_replaced_by_a_new_one(
    tmp_path: Path, make_worker: Callable[[Path], Worker]
) -> None:
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
    tmp_path: Path, kind: TransportErrorKind, make_worker: Callable[[Path], Worker]
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
    plan = replace(make_plan(tmp_path), cell_dir=str(tmp_path / "missing" / "cell"))
    parent, child = multiprocessing.Pipe()
    assert run_worker(plan, child) is None
    reply = parent.recv()
    assert isinstance(reply, Failed)
    message = reply.message
    assert message.startswith("worker 0 could not start: FileNotFoundError")
    assert str(tmp_path / "missing" / "cell") in message and "\n" not in message


@pytest.mark.parametrize(
    "broken",
    [
        {"transport": "test_worker_reopen:NoSuchTransport"},
        {"worker": 7},  # its sends file already exists: the second file cannot be created
    ],
)
def test_a_worker_that_cannot_start_closes_the_record_files_it_opened(
    tmp_path: Path, broken: dict[str, object]
) -> None:
    (tmp_path / "sends-7.bin").touch()
    plan = replace(make_plan(tmp_path), **broken)  # type: ignore[arg-type]
    parent, child = multiprocessing.Pipe()
    assert run_worker(plan, child) is None
    assert isinstance(parent.recv(), Failed)
    parent.close()
    gc.collect()  # an unclosed file is reported (an error in this suite) when collected
    assert (tmp_path / f"deliveries-{plan.worker}.bin").exists()
