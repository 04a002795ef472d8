"""Kernel receive stamps (SO_TIMESTAMPNS) on the lean clients, against real brokers.

A subscriber asked for ``receive_stamp: kernel`` reads its established connection through
``recvmsg`` and stamps each read with the kernel's receive time: never before the message
was sent, never after the handler saw it; a peer that goes away is still a disconnection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from loops import LOOPS, run, wait_until

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.records.format import pack_header, unpack_header
from mqbench.records.timing import ReceiveStamp
from mqbench.transports.base import Client, ClientOptions
from mqbench.transports.events import ClientEvent, Disconnected
from mqbench.transports.registry import get_transport

pytestmark = pytest.mark.integration

NativeBrokerFactory = Callable[..., RunningBroker]
TARGETS = {"mosquitto": ("mqtt", "t/stamps"), "nats": ("nats", "t.stamps")}


Events = list[ClientEvent]


def _client(
    protocol: str,
    endpoint: Endpoint,
    name: str,
    events: Events | None = None,
    receive_stamp: ReceiveStamp = "user",
) -> Client:
    def on_event(event: ClientEvent) -> None:
        if events is not None:
            events.append(event)

    options = ClientOptions(
        client_id=name, connect_timeout_s=5.0, on_event=on_event, receive_stamp=receive_stamp
    )
    return get_transport(protocol).create_client(endpoint, options)


async def _exchange(protocol: str, topic: str, endpoint: Endpoint, count: int) -> dict[str, Any]:
    seen: list[tuple[int, int, int]] = []

    def on_message(payload: memoryview | bytes, t_recv: int) -> None:
        t_sent = unpack_header(bytes(payload[:24]))[2]
        seen.append((t_sent, t_recv, time.time_ns()))

    sub = _client(protocol, endpoint, "sub", receive_stamp="kernel")
    pub = _client(protocol, endpoint, "pub")
    await sub.connect()
    await sub.subscribe(topic, 0, on_message)
    await pub.connect()
    await asyncio.sleep(0.2)
    send = pub.sender(topic, 0)
    for seq in range(count):
        assert send(pack_header(1, seq, time.time_ns()) + bytes(40), seq)
        await asyncio.sleep(0.002)
    await wait_until(lambda: len(seen) == count)
    stats = sub.stats()
    await pub.close()
    await sub.close()
    return {"seen": seen, "stats": stats}


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_kernel_stamped_subscriber_stamps_between_the_send_and_the_handler(
    native_broker: NativeBrokerFactory, target: str, loop_kind: str
) -> None:
    protocol, topic = TARGETS[target]
    broker = native_broker(target)
    result = run(loop_kind, _exchange(protocol, topic, broker.endpoint, 50))
    for t_sent, t_recv, t_handler in result["seen"]:
        assert t_sent <= t_recv <= t_handler
    stats = result["stats"]
    assert stats.kernel_stamped_reads >= 1
    assert stats.user_stamped_reads == 0


def test_a_broker_that_goes_away_is_a_disconnection_of_a_kernel_stamped_client(
    native_broker: NativeBrokerFactory,
) -> None:
    broker = native_broker("nats")

    events: Events = []

    async def scenario() -> None:
        sub = _client("nats", broker.endpoint, "sub", events, receive_stamp="kernel")
        await sub.connect()
        await sub.subscribe("t.gone", 0, lambda payload, t: None)
        broker.stop()
        await wait_until(lambda: not sub.connected)
        await sub.close()

    run("uvloop", scenario())
    lost = [e for e in events if isinstance(e, Disconnected)]
    assert len(lost) == 1 and lost[0].expected is False
