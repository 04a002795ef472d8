"""Shared by the secured-broker integration tests: where a client reaches a running secured
broker, and one TLS + password connect attempt."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from mqbench.brokers.base import RunningBroker
from mqbench.endpoint import Endpoint
from mqbench.transports.base import ClientOptions, ClientTls
from mqbench.transports.registry import get_transport


def endpoint_of(running: Mapping[str, RunningBroker], target: str, client: str) -> Endpoint:
    """The broker's endpoint for ``client`` (RabbitMQ's AMQP port for AMQP clients);
    skips when ``target`` did not start because it is not installed."""
    if target not in running:
        pytest.skip(f"{target} is not installed")
    broker = running[target]
    if get_transport(client).protocol == "amqp":
        return Endpoint(broker.endpoint.host, int(broker.info.settings["amqp_port"]))
    return broker.endpoint


async def connect_as_bob(
    client: str, endpoint: Endpoint, password: str, ca: Path, client_id: str
) -> None:
    """Connect as user ``bob`` over TLS trusting ``ca``, then close; raises the
    ``TransportError`` of a refused connection."""
    options = ClientOptions(
        client_id=client_id,
        connect_timeout_s=10,
        username="bob",
        password=password,
        tls=ClientTls(ca_file=str(ca)),
    )
    connection = get_transport(client).create_client(endpoint, options)
    try:
        await connection.connect()
    finally:
        await connection.close()
