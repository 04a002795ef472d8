"""The compiled core's lost connections go back to the Python clients and return to the core
(``workload.compiled``), with a fake core, fake clients and a fake pool."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from mqbench.errors import TransportError, TransportErrorKind
from mqbench.records.format import encode_latency, pack_record
from mqbench.workload.client_pool import ClientKey, ClientPool
from mqbench.workload.compiled import PUBLISHED_POLL_S, CompiledPublishing


class FakeCore:
    """What ``CompiledPublishing`` calls on ``mqbench_core.Core`` for reconnects."""

    def __init__(self, lost: list[tuple[str, int, str]] | None = None) -> None:
        self.lost = list(lost or [])
        self.readopted: list[tuple[str, int, int, bytes]] = []
        self.calls: list[str] = []

    def take_lost(self) -> list[tuple[str, int, str]]:
        lost, self.lost = self.lost, []
        return lost

    def readopt(self, role: str, index: int, fd: int, records: bytes) -> None:
        self.readopted.append((role, index, fd, records))
        self.calls.append("readopt")

    def stop(self) -> None:
        self.calls.append("stop")


class FakeClient:
    """A lean client as the core sees it (``LendsSockets``)."""

    def __init__(self, fd: int, lendable: bool = True) -> None:
        self.fd = fd
        self.lendable = lendable
        self.lost: list[str] = []

    def lend_socket(self) -> int:
        if not self.lendable:
            raise TransportError("part of a packet is read", TransportErrorKind.UNSUPPORTED)
        return self.fd

    def lost_lent_session(self, reason: str) -> None:
        self.lost.append(reason)


class FakePool:
    def __init__(self, clients: dict[ClientKey, FakeClient]) -> None:
        self.clients = clients

    def client(self, key: ClientKey) -> FakeClient | None:
        return self.clients.get(key)


def publishing(core: FakeCore) -> CompiledPublishing:
    unused = cast(Any, None)
    p = CompiledPublishing(unused, (unused, unused), lambda *a, **k: None, "mqtt")
    p._core = core
    return p


def test_a_connection_the_core_lost_goes_back_to_its_client_to_be_reconnected() -> None:
    core = FakeCore([("sub", 3, "connection closed by the server")])
    sub, pub = FakeClient(10), FakeClient(11)
    pool = FakePool({("sub", 3): sub, ("pub", 3): pub})

    async def scenario() -> None:
        watcher = asyncio.create_task(publishing(core)._watch_lost(cast(ClientPool, pool)))
        await asyncio.sleep(3 * PUBLISHED_POLL_S)
        watcher.cancel()

    asyncio.run(scenario())
    assert sub.lost == ["connection closed by the server"] and pub.lost == []


def test_a_reconnected_client_is_lent_back_with_the_deliveries_it_received_meanwhile() -> None:
    core = FakeCore()
    p = publishing(core)
    p._hold_delivery(1_000, 1_550, 2, 3, 7)  # received before the socket was lent again
    p._relend(("sub", 3), cast(Any, FakeClient(12)))
    record = pack_record(1_000, encode_latency(550), 2, 3, 7)
    assert core.readopted == [("sub", 3, 12, record)]
    p._relend(("pub", 0), cast(Any, FakeClient(13)))
    assert core.readopted[-1] == ("pub", 0, 13, b"")


def test_a_new_session_that_cannot_be_lent_is_dropped_so_the_pool_tries_again() -> None:
    core = FakeCore()
    client = FakeClient(14, lendable=False)
    publishing(core)._relend(("sub", 1), cast(Any, client))
    assert core.readopted == []
    assert client.lost == ["the new session could not be lent: part of a packet is read"]


def test_deliveries_held_for_the_core_reach_it_before_it_stops() -> None:
    core = FakeCore()
    p = publishing(core)
    p._hold_delivery(5, 105, 0, 1, 2)
    p.stop()
    assert core.calls == ["readopt", "stop"]
    assert core.readopted == [("sub", 0, -1, pack_record(5, 1, 0, 1, 2))]
    p._relend(("sub", 1), cast(Any, FakeClient(15)))  # after the stop: not lent any more
    assert len(core.readopted) == 1
