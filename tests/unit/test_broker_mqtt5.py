"""The built-in broker's MQTT 5 behaviour: will properties and delay, forwarded properties,
topic aliases and shared subscriptions.

Clients are :class:`Connection` objects on fake transports inside a real (memory-backed)
broker, so each test sees exactly the packets the broker writes; every packet is decoded at
protocol level 5 with the strict per-packet property tables, so a forbidden property in
anything the broker sends fails the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mqbench.builtin_broker import Broker, BrokerConfig
from mqbench.builtin_broker.connection import TOPIC_ALIAS_MAXIMUM, Connection
from mqbench.wire.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    PubAck,
    Publish,
    Suback,
    Subscribe,
    Unsubscribe,
    Will,
)
from mqbench.wire.mqtt.parser import StreamParser
from mqbench.wire.mqtt.primitives import PROTOCOL_LEVEL_5
from mqbench.wire.mqtt.properties import (
    PROP_CONTENT_TYPE,
    PROP_MESSAGE_EXPIRY,
    PROP_SESSION_EXPIRY,
    PROP_SHARED_SUB_AVAILABLE,
    PROP_SUBSCRIPTION_ID,
    PROP_TOPIC_ALIAS,
    PROP_TOPIC_ALIAS_MAXIMUM,
    PROP_USER_PROPERTY,
    PROP_WILL_DELAY,
    Properties,
)
from mqbench.wire.mqtt.reason_codes import (
    RC_PROTOCOL_ERROR,
    RC_TOPIC_ALIAS_INVALID,
    RC_TOPIC_FILTER_INVALID,
)


class FakeTransport(asyncio.Transport):
    """Collects what the broker writes to one client."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default


class Client:
    """One MQTT 5 client connection to the broker under test."""

    def __init__(self, broker: Broker) -> None:
        self.conn = Connection(broker)
        self.transport = FakeTransport()
        self.conn.connection_made(self.transport)
        self.parser = StreamParser(protocol_level=PROTOCOL_LEVEL_5)
        self.backlog: list[Packet] = []

    def send(self, packet: Packet) -> None:
        self.conn.data_received(packet.encode())

    async def received(self) -> list[Packet]:
        for _ in range(3):
            await asyncio.sleep(0)
        data = bytes(self.transport.data)
        self.transport.data.clear()
        packets, self.backlog = self.backlog + self.parser.feed(data), []
        return packets

    async def publishes(self) -> list[Publish]:
        return [p for p in await self.received() if isinstance(p, Publish)]

    def vanish(self) -> None:
        """The socket is gone without DISCONNECT."""
        self.conn.connection_lost(ConnectionResetError())


async def connect(
    broker: Broker,
    client_id: str,
    *,
    will: Will | None = None,
    clean: bool = True,
    expiry: int = 0,
) -> tuple[Client, Connack]:
    client = Client(broker)
    props: Properties = {PROP_SESSION_EXPIRY: expiry} if expiry else {}
    client.send(
        Connect(
            client_id,
            clean_session=clean,
            will=will,
            protocol_level=PROTOCOL_LEVEL_5,
            properties=props,
        )
    )
    (connack,) = await client.received()
    assert isinstance(connack, Connack) and connack.return_code == 0
    return client, connack


async def subscribe(
    client: Client, topic_filter: str, options: int = 1, sub_id: int | None = None
) -> int:
    props: Properties = {PROP_SUBSCRIPTION_ID: (sub_id,)} if sub_id else {}
    client.send(Subscribe(1, ((topic_filter, options),), props))
    suback, *client.backlog = await client.received()
    assert isinstance(suback, Suback)
    return suback.return_codes[0]


def with_broker(test: Callable[[Broker], Awaitable[None]]) -> None:
    async def main() -> None:
        broker = Broker(BrokerConfig(port=0, host="127.0.0.1"))
        await broker.start()
        try:
            await test(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


def will(delay: int | None = None, expiry: int | None = None) -> Will:
    props: Properties = {PROP_USER_PROPERTY: (("why", "gone"),), PROP_CONTENT_TYPE: "text/plain"}
    if delay is not None:
        props[PROP_WILL_DELAY] = delay
    if expiry is not None:
        props[PROP_MESSAGE_EXPIRY] = expiry
    return Will("w", b"bye", 0, False, props)


# ----------------------------------------------------------------------------- wills


def test_a_will_is_published_without_its_will_delay_interval_and_with_its_other_properties() -> (
    None
):
    async def body(broker: Broker) -> None:
        watcher, _ = await connect(broker, "watcher")
        await subscribe(watcher, "w", 0)
        doomed, _ = await connect(broker, "doomed", will=will(0, expiry=60))
        doomed.vanish()
        (message,) = await watcher.publishes()
        assert (message.topic, message.payload) == ("w", b"bye")
        props = message.properties or {}
        assert PROP_WILL_DELAY not in props
        assert props[PROP_USER_PROPERTY] == (("why", "gone"),)
        assert props[PROP_CONTENT_TYPE] == "text/plain"
        assert props[PROP_MESSAGE_EXPIRY] == 60  # counted from the will's publication

    with_broker(body)


def test_a_delayed_will_waits_for_its_delay_and_a_resumed_session_cancels_it() -> None:
    async def body(broker: Broker) -> None:
        watcher, _ = await connect(broker, "watcher")
        await subscribe(watcher, "w", 0)
        doomed, _ = await connect(broker, "doomed", will=will(1), clean=False, expiry=60)
        doomed.vanish()
        assert await watcher.publishes() == []
        back, connack = await connect(broker, "doomed", clean=False, expiry=60)
        assert connack.session_present
        await asyncio.sleep(1.3)
        assert await watcher.publishes() == []
        back.send(Disconnect())

    with_broker(body)


def test_a_delayed_will_is_published_once_its_delay_has_passed() -> None:
    async def body(broker: Broker) -> None:
        watcher, _ = await connect(broker, "watcher")
        await subscribe(watcher, "w", 0)
        doomed, _ = await connect(broker, "doomed", will=will(1), clean=False, expiry=60)
        doomed.vanish()
        await asyncio.sleep(0.5)
        assert await watcher.publishes() == []
        await asyncio.sleep(0.8)
        assert [p.payload for p in await watcher.publishes()] == [b"bye"]

    with_broker(body)


def test_a_session_ending_before_the_will_delay_publishes_the_will_when_it_ends() -> None:
    async def body(broker: Broker) -> None:
        watcher, _ = await connect(broker, "watcher")
        await subscribe(watcher, "w", 0)
        # Session expiry 0: the session ends with the connection, the will goes out now.
        doomed, _ = await connect(broker, "doomed", will=will(3600))
        doomed.vanish()
        assert [p.payload for p in await watcher.publishes()] == [b"bye"]
        # A clean start ends a waiting session: its delayed will goes out at once.
        other, _ = await connect(broker, "other", will=will(3600), clean=False, expiry=3600)
        other.vanish()
        assert await watcher.publishes() == []
        await connect(broker, "other", clean=True)
        assert [p.payload for p in await watcher.publishes()] == [b"bye"]

    with_broker(body)


# ----------------------------------------------------------------------------- forwarding


def test_forwarded_publishes_carry_subscription_ids_per_subscription_and_no_topic_alias() -> None:
    async def body(broker: Broker) -> None:
        sub, _ = await connect(broker, "sub")
        await subscribe(sub, "a/+", 1, sub_id=5)
        await subscribe(sub, "a/#", 1, sub_id=9)
        other, _ = await connect(broker, "other")
        await subscribe(other, "a/b", 1)
        pub, _ = await connect(broker, "pub")
        props: Properties = {PROP_TOPIC_ALIAS: 2, PROP_MESSAGE_EXPIRY: 100}
        pub.send(Publish("a/b", b"x", 1, 1, properties=props))
        assert isinstance((await pub.received())[0], PubAck)
        (got,) = await sub.publishes()
        assert got.properties is not None
        assert sorted(got.properties[PROP_SUBSCRIPTION_ID]) == [5, 9]  # type: ignore[arg-type]
        assert PROP_TOPIC_ALIAS not in got.properties
        assert 99 <= got.properties[PROP_MESSAGE_EXPIRY] <= 100  # type: ignore[operator]
        (plain,) = await other.publishes()
        assert plain.properties is not None
        assert PROP_SUBSCRIPTION_ID not in plain.properties
        assert PROP_TOPIC_ALIAS not in plain.properties

    with_broker(body)


def test_a_client_publish_with_a_subscription_identifier_is_a_protocol_error() -> None:
    async def body(broker: Broker) -> None:
        pub, _ = await connect(broker, "pub")
        pub.send(Publish("a", b"x", 0, properties={PROP_SUBSCRIPTION_ID: (3,)}))
        (disconnect,) = await pub.received()
        assert isinstance(disconnect, Disconnect)
        assert disconnect.reason_code == RC_PROTOCOL_ERROR

    with_broker(body)


# ----------------------------------------------------------------------------- topic aliases


def test_connack_announces_topic_aliases_and_shared_subscriptions() -> None:
    async def body(broker: Broker) -> None:
        _, connack = await connect(broker, "c")
        assert connack.properties is not None
        assert connack.properties[PROP_TOPIC_ALIAS_MAXIMUM] == TOPIC_ALIAS_MAXIMUM
        assert connack.properties[PROP_SHARED_SUB_AVAILABLE] == 1

    with_broker(body)


def test_a_topic_alias_set_by_a_publish_names_the_topic_of_later_publishes() -> None:
    async def body(broker: Broker) -> None:
        sub, _ = await connect(broker, "sub")
        await subscribe(sub, "t/#", 0)
        pub, _ = await connect(broker, "pub")
        pub.send(Publish("t/one", b"1", properties={PROP_TOPIC_ALIAS: 4}))
        pub.send(Publish("", b"2", properties={PROP_TOPIC_ALIAS: 4}))
        pub.send(Publish("t/two", b"3", properties={PROP_TOPIC_ALIAS: 4}))
        pub.send(Publish("", b"4", properties={PROP_TOPIC_ALIAS: 4}))
        got = [(p.topic, p.payload) for p in await sub.publishes()]
        assert got == [("t/one", b"1"), ("t/one", b"2"), ("t/two", b"3"), ("t/two", b"4")]

    with_broker(body)


def test_bad_topic_aliases_close_the_connection_with_the_spec_reason_codes() -> None:
    cases = [
        (Publish("", b"x", properties={PROP_TOPIC_ALIAS: 7}), RC_PROTOCOL_ERROR),
        (Publish("t", b"x", properties={PROP_TOPIC_ALIAS: 0}), RC_TOPIC_ALIAS_INVALID),
        (
            Publish("t", b"x", properties={PROP_TOPIC_ALIAS: TOPIC_ALIAS_MAXIMUM + 1}),
            RC_TOPIC_ALIAS_INVALID,
        ),
        (Publish("", b"x", properties={}), RC_PROTOCOL_ERROR),
    ]

    async def body(broker: Broker) -> None:
        for k, (packet, code) in enumerate(cases):
            pub, _ = await connect(broker, f"pub{k}")
            pub.send(packet)
            (disconnect,) = await pub.received()
            assert isinstance(disconnect, Disconnect), packet
            assert disconnect.reason_code == code, packet
            assert pub.transport.closing

    with_broker(body)


# ----------------------------------------------------------------------------- shared


def test_a_shared_group_gets_each_message_once_round_robin_alongside_a_plain_subscriber() -> None:
    async def body(broker: Broker) -> None:
        members = [(await connect(broker, f"m{k}"))[0] for k in range(2)]
        for member in members:
            assert await subscribe(member, "$share/g/s/#", 1) == 1
        plain, _ = await connect(broker, "plain")
        await subscribe(plain, "s/#", 0)
        pub, _ = await connect(broker, "pub")
        for k in range(6):
            pub.send(Publish("s/x", b"%d" % k, properties={}))
        got = [[p.payload for p in await m.publishes()] for m in members]
        assert got == [[b"0", b"2", b"4"], [b"1", b"3", b"5"]]
        assert len(await plain.publishes()) == 6

    with_broker(body)


def test_a_shared_subscription_gets_no_retained_messages() -> None:
    async def body(broker: Broker) -> None:
        pub, _ = await connect(broker, "pub")
        pub.send(Publish("r/x", b"kept", 1, 1, retain=True, properties={}))
        await pub.received()
        member, _ = await connect(broker, "member")
        await subscribe(member, "$share/g/r/#", 1)
        assert await member.publishes() == []
        plain, _ = await connect(broker, "plain")
        await subscribe(plain, "r/#", 1)
        assert [p.payload for p in await plain.publishes()] == [b"kept"]

    with_broker(body)


def test_malformed_share_names_are_refused_and_no_local_on_a_share_is_a_protocol_error() -> None:
    async def body(broker: Broker) -> None:
        client, _ = await connect(broker, "c")
        for bad in ("$share//x", "$share/g+/x", "$share/g", "$share/g/x/#/y"):
            assert await subscribe(client, bad, 1) == RC_TOPIC_FILTER_INVALID, bad
        client.send(Subscribe(2, (("$share/g/x", 1 | 4),), {}))
        (disconnect,) = await client.received()
        assert isinstance(disconnect, Disconnect)
        assert disconnect.reason_code == RC_PROTOCOL_ERROR
        assert client.transport.closing

    with_broker(body)


def test_after_unsubscribe_or_disconnect_the_remaining_member_gets_everything() -> None:
    async def body(broker: Broker) -> None:
        a, _ = await connect(broker, "a")
        b, _ = await connect(broker, "b")
        c, _ = await connect(broker, "c")
        for member in (a, b, c):
            await subscribe(member, "$share/g/u", 0)
        a.send(Unsubscribe(2, ("$share/g/u",), {}))
        await a.received()
        b.vanish()
        pub, _ = await connect(broker, "pub")
        for k in range(3):
            pub.send(Publish("u", b"%d" % k, properties={}))
        assert await a.publishes() == []
        assert len(await c.publishes()) == 3
        assert list(broker.shared["$share/g/u"].members) == [broker.sessions["c"]]

    with_broker(body)


def test_unacknowledged_qos1_messages_of_a_vanished_member_go_to_another_member() -> None:
    async def body(broker: Broker) -> None:
        a, _ = await connect(broker, "a")
        b, _ = await connect(broker, "b")
        await subscribe(a, "$share/g/q", 1)
        await subscribe(b, "$share/g/q", 1)
        pub, _ = await connect(broker, "pub")
        for k in range(4):
            pub.send(Publish("q", b"%d" % k, 1, k + 1, properties={}))
        got_a = [p.payload for p in await a.publishes()]
        got_b = [p.payload for p in await b.publishes()]
        assert (got_a, got_b) == ([b"0", b"2"], [b"1", b"3"])
        a.vanish()  # without acknowledging
        assert [p.payload for p in await b.publishes()] == [b"0", b"2"]
        assert not broker.shared["$share/g/q"].members.get(broker.sessions.get("a"))  # type: ignore[arg-type]

    with_broker(body)


def test_unacknowledged_qos2_messages_of_a_vanished_member_go_to_nobody_else() -> None:
    async def body(broker: Broker) -> None:
        a, _ = await connect(broker, "a")
        b, _ = await connect(broker, "b")
        await subscribe(a, "$share/g/q2", 2)
        await subscribe(b, "$share/g/q2", 2)
        pub, _ = await connect(broker, "pub")
        for k in range(2):
            pub.send(Publish("q2", b"%d" % k, 2, k + 1, properties={}))
        assert [p.payload for p in await a.publishes()] == [b"0"]
        assert [p.payload for p in await b.publishes()] == [b"1"]
        a.vanish()
        assert await b.publishes() == []

    with_broker(body)
