"""A broker-less MQTT 3.1.1 relay for calibration (QoS 0 only), on the shared MQTT codec.

It answers CONNECT with CONNACK 0, SUBSCRIBE with SUBACK granting QoS 0, UNSUBSCRIBE with
UNSUBACK and PINGREQ with PINGRESP, and forwards each QoS 0 PUBLISH to every connection
subscribed to a matching filter. No sessions, retained messages, wills or QoS 1/2: a
PUBLISH with QoS > 0 or a protocol level other than 3/4 closes the connection.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mqbench.calibration.relays import Hub, RelayConnection
from mqbench.wire.mqtt.errors import MqttCodecError
from mqbench.wire.mqtt.packets import (
    PINGRESP_BYTES,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    publish_prefix,
)
from mqbench.wire.mqtt.parser import StreamParser
from mqbench.wire.topics import topic_matches

CONNACK_BAD_VERSION = 1
"""CONNACK return code "unacceptable protocol level" (MQTT 3.1.1, 3.2.2.3)."""


class MqttHub(Hub):
    """Subscriptions by exact topic and, separately, wildcard filters."""

    def __init__(self) -> None:
        super().__init__()
        self.exact: dict[bytes, list[MqttRelayConnection]] = {}
        self.wildcard: list[tuple[str, MqttRelayConnection]] = []
        self._prefixes: dict[tuple[bytes, int], bytes] = {}

    def subscribe(self, topic_filter: str, conn: MqttRelayConnection) -> None:
        """Route ``topic_filter`` to ``conn`` (a repeated subscription is kept once)."""
        if "+" in topic_filter or "#" in topic_filter:
            if (topic_filter, conn) not in self.wildcard:
                self.wildcard.append((topic_filter, conn))
            return
        subs = self.exact.setdefault(topic_filter.encode("utf-8"), [])
        if conn not in subs:
            subs.append(conn)

    def unsubscribe(self, topic_filter: str, conn: MqttRelayConnection) -> None:
        """Stop routing ``topic_filter`` to ``conn``."""
        self.wildcard = [(f, c) for f, c in self.wildcard if (f, c) != (topic_filter, conn)]
        subs = self.exact.get(topic_filter.encode("utf-8"))
        if subs and conn in subs:
            subs.remove(conn)

    def drop(self, conn: MqttRelayConnection) -> None:
        """Remove every subscription of ``conn``."""
        self.wildcard = [(f, c) for f, c in self.wildcard if c is not conn]
        for subs in self.exact.values():
            if conn in subs:
                subs.remove(conn)

    def route(self, topic: bytes, payload: memoryview) -> None:
        """Queue a QoS 0 PUBLISH of ``payload`` on ``topic`` for every matching subscriber."""
        subs = self.exact.get(topic, ())
        if self.wildcard:
            text = topic.decode("utf-8", "replace")
            subs = [*subs, *(c for f, c in self.wildcard if topic_matches(f, text))]
        if not subs:
            return
        key = (topic, len(payload))
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = publish_prefix(topic, len(payload))
            if len(self._prefixes) < 4096:
                self._prefixes[key] = prefix
        frame = prefix + payload
        for conn in subs:
            conn.queue(frame)
        self.routed += 1


class MqttRelayConnection(RelayConnection):
    """One client connection to the MQTT relay."""

    def __init__(self, hub: MqttHub) -> None:
        super().__init__(hub)
        self.mqtt = hub
        self.parser = StreamParser(on_publish=self._on_publish, on_packet=self._on_packet)
        self.connected = False

    def data_received(self, data: bytes) -> None:
        """Parse, route, then write everything queued by this read."""
        t_read = time.time_ns()
        try:
            self.parser.feed(data)
        except MqttCodecError:
            self.close_after_flush()
        self.hub.flush(t_read)

    def _on_publish(
        self, topic: bytes, payload: memoryview, qos: int, packet_id: int, flags: int
    ) -> None:
        if qos or not self.connected:
            raise MqttCodecError("the calibration relay takes QoS 0 PUBLISH after CONNECT only")
        self.mqtt.route(topic, payload)

    def _on_packet(self, packet: Packet) -> None:
        if isinstance(packet, Connect):
            if packet.protocol_level not in (3, 4):
                self.queue(Connack(CONNACK_BAD_VERSION).encode())
                self.close_after_flush()
                return
            self.connected = True
            self.queue(Connack(0).encode())
        elif isinstance(packet, Subscribe):
            for topic_filter, _qos in packet.topics:
                self.mqtt.subscribe(topic_filter, self)
            self.queue(Suback(packet.packet_id, tuple(0 for _ in packet.topics)).encode())
        elif isinstance(packet, Unsubscribe):
            for topic_filter in packet.topics:
                self.mqtt.unsubscribe(topic_filter, self)
            self.queue(Unsuback(packet.packet_id).encode())
        elif isinstance(packet, PingReq):
            self.queue(PINGRESP_BYTES)
        elif isinstance(packet, Disconnect):
            self.close_after_flush()
        else:
            raise MqttCodecError(f"the calibration relay does not take {type(packet).__name__}")

    def forget(self) -> None:
        """Drop this connection's subscriptions."""
        self.mqtt.drop(self)


def relay_factory() -> tuple[MqttHub, Callable[[], MqttRelayConnection]]:
    """The relay's hub and a protocol factory for ``loop.create_server`` sharing it."""
    hub = MqttHub()
    return hub, lambda: MqttRelayConnection(hub)
