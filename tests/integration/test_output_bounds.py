"""A broker that stops reading makes sends refused (counted), never grows client memory.

The broker is frozen with SIGSTOP (it accepts nothing more, the socket buffers fill up) and
continued with SIGCONT afterwards; the module shares one broker per target.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

import pytest
from loops import run

from mqbench.brokers.base import RunningBroker
from mqbench.transports.base import ClientOptions
from mqbench.transports.registry import get_transport

NativeBrokerFactory = Callable[..., RunningBroker]

pytestmark = pytest.mark.integration

BOUND = 1 << 20
PAYLOAD = bytes(64 * 1024)
OFFERED = 4000
"""64 KiB x 4000 = 256 MiB offered to a broker that reads nothing."""


@pytest.mark.parametrize(
    ("target", "transport"), [("nats", "nats"), ("mosquitto", "mqtt"), ("redis", "redis")]
)
def test_a_stalled_broker_gets_refused_sends_instead_of_a_growing_output_buffer(
    module_broker: NativeBrokerFactory, target: str, transport: str
) -> None:
    broker = module_broker(target)
    pid = broker.pids[0]

    async def main() -> tuple[int, int, int]:
        client = get_transport(transport).create_client(
            broker.endpoint,
            ClientOptions(client_id=f"bound-{target}", max_pending_bytes=BOUND),
        )
        await client.connect()
        send = client.sender("mqbench/bound", 0)
        refused = peak = 0
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(OFFERED):
                if not send(PAYLOAD, i):
                    refused += 1
                peak = max(peak, client.pending_write_bytes())
                if i % 8 == 0:
                    await asyncio.sleep(0)  # the loop flushes coalesced writes
        finally:
            os.kill(pid, signal.SIGCONT)
        counted = client.stats().sends_refused
        await client.close()
        return refused, counted, peak

    refused, counted, peak = run("uvloop", main())
    assert refused > OFFERED // 2  # the socket buffers hold a few MB at most
    assert counted == refused
    # Bounded: the bound plus what one loop iteration coalesces (8 sends), never 256 MiB.
    assert peak <= BOUND + 9 * len(PAYLOAD) + 1024
