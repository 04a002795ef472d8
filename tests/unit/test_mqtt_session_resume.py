"""The MQTT client's QoS 1/2 session state: resend after reconnect, the QoS 2 in-flight window,
inbound QoS 2 delivered once per message and the broker's breaches of it counted.

A scripted broker on 127.0.0.1 (a few lines of asyncio over the codec) plays each side of
the exchange, so the tests see exactly which packets the client writes and when.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mqbench.endpoint import Endpoint
from mqbench.transports.base import ClientOptions
from mqbench.transports.mqtt import MqttClient
from mqbench.wire.mqtt.decode import decode_packet
from mqbench.wire.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Suback,
    Subscribe,
)
from mqbench.wire.mqtt.primitives import decode_remaining_length


class ScriptedBroker:
    """Accepts connections one at a time and hands their packets to the test."""

    def __init__(self) -> None:
        self.connections: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> Endpoint:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)
            await self.connections.put((reader, writer))

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return Endpoint("127.0.0.1", port)

    async def accept(self, session_present: bool) -> tuple[asyncio.StreamReader, Any]:
        reader, writer = await asyncio.wait_for(self.connections.get(), 5)
        assert isinstance(await read_packet(reader), Connect)
        writer.write(Connack(0, session_present).encode())
        return reader, writer

    async def stop(self) -> None:
        """Close every connection it accepted (closing the server does not), then the server."""
        assert self.server is not None
        for writer in self.writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        self.server.close()
        await self.server.wait_closed()


async def read_packet(reader: asyncio.StreamReader, timeout: float = 5) -> Packet:
    head = await asyncio.wait_for(reader.readexactly(2), timeout)
    data = bytearray(head)
    while data[-1] & 0x80:
        data += await reader.readexactly(1)
    length, start = decode_remaining_length(data, 1)
    assert start > 0
    data += await reader.readexactly(length)
    return decode_packet(bytes(data))


async def nothing_more(reader: asyncio.StreamReader) -> bool:
    try:
        await asyncio.wait_for(reader.readexactly(1), 0.2)
    except TimeoutError:
        return True
    return False


async def drop_and_reconnect(
    broker: ScriptedBroker, client: MqttClient, writer: Any
) -> tuple[asyncio.StreamReader, Any]:
    """Cut the connection on the broker side, then reconnect to a session that is present."""
    writer.transport.abort()
    for _ in range(100):
        if not client.connected:
            break
        await asyncio.sleep(0.01)
    connecting = asyncio.create_task(client.connect())
    reader, new_writer = await broker.accept(session_present=True)
    await connecting
    return reader, new_writer


async def connected_client(
    **extra: Any,
) -> tuple[ScriptedBroker, MqttClient, list[int], asyncio.StreamReader, Any]:
    """A scripted broker and a persistent-session client connected to it (no session yet);
    ``acked`` collects the tags the client reports acknowledged."""
    broker = ScriptedBroker()
    endpoint = await broker.start()
    client = MqttClient(endpoint, ClientOptions("pub-1", clean_session=False, extra=extra))
    acked: list[int] = []
    client.set_ack_handler(lambda tag, t: acked.append(tag))
    connecting = asyncio.create_task(client.connect())
    reader, writer = await broker.accept(session_present=False)
    await connecting
    return broker, client, acked, reader, writer


def test_unacknowledged_qos1_publishes_are_resent_with_dup_after_reconnect() -> None:
    async def scenario() -> None:
        broker, client, acked, reader, writer = await connected_client()
        send = client.sender("t/1", 1)
        assert all(send(f"m{i}".encode(), i) for i in range(3))
        first = [await read_packet(reader) for _ in range(3)]
        assert all(isinstance(p, Publish) and not p.dup for p in first)
        writer.write(PubAck(first[0].packet_id).encode())  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        reader, writer = await drop_and_reconnect(broker, client, writer)
        again = [await read_packet(reader) for _ in range(2)]
        assert (
            [(p.packet_id, p.payload, p.dup) for p in again]
            == [  # type: ignore[union-attr]
                (p.packet_id, p.payload, True)  # type: ignore[union-attr]
                for p in first[1:]
            ]
        )
        for p in again:
            writer.write(PubAck(p.packet_id).encode())  # type: ignore[union-attr]
        await client.flush(2)
        assert acked == [0, 1, 2]
        assert client.inflight == 0
        await client.close()
        await broker.stop()

    asyncio.run(scenario())


def test_qos2_flows_resume_with_pubrel_or_dup_publish_after_reconnect() -> None:
    async def scenario() -> None:
        broker, client, acked, reader, writer = await connected_client()
        send = client.sender("t/2", 2)
        assert send(b"a", 10) and send(b"b", 11)
        a, b = [await read_packet(reader) for _ in range(2)]
        assert isinstance(a, Publish) and isinstance(b, Publish)
        writer.write(PubRec(a.packet_id).encode())
        assert await read_packet(reader) == PubRel(a.packet_id)
        # a waits for PUBCOMP, b for PUBREC
        reader, writer = await drop_and_reconnect(broker, client, writer)
        resumed = [await read_packet(reader) for _ in range(2)]
        assert resumed[0] == PubRel(a.packet_id)
        assert resumed[1] == Publish("t/2", b"b", 2, b.packet_id, dup=True)
        writer.write(PubComp(a.packet_id).encode() + PubRec(b.packet_id).encode())
        assert await read_packet(reader) == PubRel(b.packet_id)
        writer.write(PubComp(b.packet_id).encode())
        await client.flush(2)
        assert acked == [10, 11]
        await client.close()
        await broker.stop()

    asyncio.run(scenario())


def test_qos2_publishes_beyond_the_window_wait_in_order_for_a_completed_flow() -> None:
    async def scenario() -> None:
        broker, client, acked, reader, writer = await connected_client(max_inflight_qos2=2)
        send = client.sender("t/3", 2)
        assert all(send(bytes([i]), i) for i in range(5))
        assert client.inflight == 5
        seen = [await read_packet(reader) for _ in range(2)]
        assert await nothing_more(reader), "a third QoS 2 PUBLISH went out past the window"
        payloads = []
        while len(payloads) < 5:
            p = seen.pop(0)
            assert isinstance(p, Publish)
            payloads.append(p.payload[0])
            writer.write(PubRec(p.packet_id).encode())
            assert await read_packet(reader) == PubRel(p.packet_id)
            writer.write(PubComp(p.packet_id).encode())
            if len(payloads) + len(seen) < 5:
                seen.append(await read_packet(reader))
        assert payloads == [0, 1, 2, 3, 4]
        await client.flush(2)
        assert acked == [0, 1, 2, 3, 4]
        assert client.inflight == 0
        await client.close()
        await broker.stop()

    asyncio.run(scenario())


async def subscribed_client() -> tuple[
    ScriptedBroker, MqttClient, list[bytes], asyncio.StreamReader, Any
]:
    """A persistent-session client subscribed at QoS 2 to ``t/#`` on a scripted broker;
    the list collects the payloads it delivers."""
    broker = ScriptedBroker()
    endpoint = await broker.start()
    client = MqttClient(endpoint, ClientOptions("sub-1", clean_session=False))
    connecting = asyncio.create_task(client.connect())
    reader, writer = await broker.accept(session_present=False)
    await connecting
    got: list[bytes] = []
    subscribing = asyncio.create_task(client.subscribe("t/#", 2, lambda p, t: got.append(bytes(p))))
    request = await read_packet(reader)
    assert isinstance(request, Subscribe)
    writer.write(Suback(request.packet_id, (2,)).encode())
    await subscribing
    return broker, client, got, reader, writer


async def deliver(reader: asyncio.StreamReader, writer: Any, packet: Publish | PubRel) -> Packet:
    """Send ``packet`` as the broker and return the client's answer (PUBREC / PUBCOMP)."""
    writer.write(packet.encode())
    return await read_packet(reader)


def test_a_qos2_message_resent_after_its_release_is_delivered_again_and_counted() -> None:
    async def scenario() -> None:
        broker, client, got, reader, writer = await subscribed_client()
        assert await deliver(reader, writer, Publish("t/a", b"A", 2, 7)) == PubRec(7)
        assert await deliver(reader, writer, PubRel(7)) == PubComp(7)
        # the PUBCOMP is lost with the connection; the broker sends the PUBLISH, not PUBREL
        reader, writer = await drop_and_reconnect(broker, client, writer)
        replay = Publish("t/a", b"A", 2, 7, dup=True)
        assert await deliver(reader, writer, replay) == PubRec(7)
        assert await deliver(reader, writer, PubRel(7)) == PubComp(7)
        assert got == [b"A", b"A"]
        assert (client.stats().qos2_redelivered, client.stats().qos2_id_reused) == (1, 0)
        await client.close()
        await broker.stop()

    asyncio.run(scenario())


def test_a_qos2_resend_before_pubrel_is_dropped_and_a_new_message_on_its_id_counted() -> None:
    async def scenario() -> None:
        broker, client, got, reader, writer = await subscribed_client()
        assert await deliver(reader, writer, Publish("t/a", b"A", 2, 7)) == PubRec(7)
        reader, writer = await drop_and_reconnect(broker, client, writer)
        resend = Publish("t/a", b"A", 2, 7, dup=True)
        assert await deliver(reader, writer, resend) == PubRec(7)
        assert got == [b"A"]
        assert (client.stats().qos2_redelivered, client.stats().qos2_id_reused) == (0, 0)
        # a different message on the id still awaiting PUBREL: dropped, counted
        assert await deliver(reader, writer, Publish("t/a", b"B", 2, 7)) == PubRec(7)
        assert got == [b"A"]
        assert client.stats().qos2_id_reused == 1
        # released, the id is free for a new message
        assert await deliver(reader, writer, PubRel(7)) == PubComp(7)
        assert await deliver(reader, writer, Publish("t/a", b"C", 2, 7)) == PubRec(7)
        assert got == [b"A", b"C"]
        assert client.stats().qos2_redelivered == 0
        await client.close()
        await broker.stop()

    asyncio.run(scenario())


def test_a_connack_without_a_session_frees_the_qos2_ids_awaiting_pubrel() -> None:
    async def scenario() -> None:
        broker, client, got, reader, writer = await subscribed_client()
        assert await deliver(reader, writer, Publish("t/a", b"A", 2, 7)) == PubRec(7)
        writer.transport.abort()
        for _ in range(100):
            if not client.connected:
                break
            await asyncio.sleep(0.01)
        connecting = asyncio.create_task(client.connect())
        reader, writer = await broker.accept(session_present=False)
        await connecting
        # the broker lost the session: id 7 carries a new message
        assert await deliver(reader, writer, Publish("t/a", b"B", 2, 7)) == PubRec(7)
        assert got == [b"A", b"B"]
        assert client.stats().qos2_id_reused == 0
        await client.close()
        await broker.stop()

    asyncio.run(scenario())
