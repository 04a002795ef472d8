"""The MQTT 5 allowed-property tables: one per packet type, checked against the spec's table
by property (MQTT 5.0, 2.2.2.2), enforced when decoding, and used to filter forwarding."""

from __future__ import annotations

import pytest

from mqbench.wire.mqtt.errors import MqttCodecError
from mqbench.wire.mqtt.primitives import (
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBACK,
    SUBSCRIBE,
    UNSUBACK,
    UNSUBSCRIBE,
)
from mqbench.wire.mqtt.properties import (
    FORWARDED_PUBLISH_PROPERTIES,
    PACKET_PROPERTIES,
    PROP_ASSIGNED_CLIENT_ID,
    PROP_AUTH_DATA,
    PROP_AUTH_METHOD,
    PROP_CONTENT_TYPE,
    PROP_CORRELATION_DATA,
    PROP_MAXIMUM_PACKET_SIZE,
    PROP_MAXIMUM_QOS,
    PROP_MESSAGE_EXPIRY,
    PROP_PAYLOAD_FORMAT,
    PROP_REASON_STRING,
    PROP_RECEIVE_MAXIMUM,
    PROP_REQUEST_PROBLEM_INFO,
    PROP_REQUEST_RESPONSE_INFO,
    PROP_RESPONSE_INFO,
    PROP_RESPONSE_TOPIC,
    PROP_RETAIN_AVAILABLE,
    PROP_SERVER_KEEP_ALIVE,
    PROP_SERVER_REFERENCE,
    PROP_SESSION_EXPIRY,
    PROP_SHARED_SUB_AVAILABLE,
    PROP_SUB_ID_AVAILABLE,
    PROP_SUBSCRIPTION_ID,
    PROP_TOPIC_ALIAS,
    PROP_TOPIC_ALIAS_MAXIMUM,
    PROP_USER_PROPERTY,
    PROP_WILDCARD_SUB_AVAILABLE,
    PROP_WILL_DELAY,
    SERVER_DISCONNECT_PROPERTIES,
    WILL,
    Properties,
    PropertyValue,
    encode_properties,
    filter_properties,
    parse_properties,
)

ACKS = (PUBACK, PUBREC, PUBREL, PUBCOMP)
EVERY_PACKET: tuple[int, ...] = (CONNECT, CONNACK, PUBLISH, *ACKS, SUBSCRIBE, SUBACK)
EVERY_PACKET += (UNSUBSCRIBE, UNSUBACK, DISCONNECT, AUTH, WILL)

# The spec's table, written the other way round: property -> packets that may carry it.
SPEC_BY_PROPERTY: dict[int, tuple[int, ...]] = {
    PROP_PAYLOAD_FORMAT: (PUBLISH, WILL),
    PROP_MESSAGE_EXPIRY: (PUBLISH, WILL),
    PROP_CONTENT_TYPE: (PUBLISH, WILL),
    PROP_RESPONSE_TOPIC: (PUBLISH, WILL),
    PROP_CORRELATION_DATA: (PUBLISH, WILL),
    PROP_SUBSCRIPTION_ID: (PUBLISH, SUBSCRIBE),
    PROP_SESSION_EXPIRY: (CONNECT, CONNACK, DISCONNECT),
    PROP_ASSIGNED_CLIENT_ID: (CONNACK,),
    PROP_SERVER_KEEP_ALIVE: (CONNACK,),
    PROP_AUTH_METHOD: (CONNECT, CONNACK, AUTH),
    PROP_AUTH_DATA: (CONNECT, CONNACK, AUTH),
    PROP_REQUEST_PROBLEM_INFO: (CONNECT,),
    PROP_WILL_DELAY: (WILL,),
    PROP_REQUEST_RESPONSE_INFO: (CONNECT,),
    PROP_RESPONSE_INFO: (CONNACK,),
    PROP_SERVER_REFERENCE: (CONNACK, DISCONNECT),
    PROP_REASON_STRING: (CONNACK, *ACKS, SUBACK, UNSUBACK, DISCONNECT, AUTH),
    PROP_RECEIVE_MAXIMUM: (CONNECT, CONNACK),
    PROP_TOPIC_ALIAS_MAXIMUM: (CONNECT, CONNACK),
    PROP_TOPIC_ALIAS: (PUBLISH,),
    PROP_MAXIMUM_QOS: (CONNACK,),
    PROP_RETAIN_AVAILABLE: (CONNACK,),
    PROP_USER_PROPERTY: EVERY_PACKET,
    PROP_MAXIMUM_PACKET_SIZE: (CONNECT, CONNACK),
    PROP_WILDCARD_SUB_AVAILABLE: (CONNACK,),
    PROP_SUB_ID_AVAILABLE: (CONNACK,),
    PROP_SHARED_SUB_AVAILABLE: (CONNACK,),
}

SAMPLE: dict[int, PropertyValue] = {
    PROP_PAYLOAD_FORMAT: 1,
    PROP_MESSAGE_EXPIRY: 30,
    PROP_CONTENT_TYPE: "text/plain",
    PROP_RESPONSE_TOPIC: "reply/here",
    PROP_CORRELATION_DATA: b"\x01\x02",
    PROP_SUBSCRIPTION_ID: (7,),
    PROP_SESSION_EXPIRY: 60,
    PROP_ASSIGNED_CLIENT_ID: "auto-1",
    PROP_SERVER_KEEP_ALIVE: 30,
    PROP_AUTH_METHOD: "SCRAM",
    PROP_AUTH_DATA: b"data",
    PROP_REQUEST_PROBLEM_INFO: 1,
    PROP_WILL_DELAY: 5,
    PROP_REQUEST_RESPONSE_INFO: 1,
    PROP_RESPONSE_INFO: "resp",
    PROP_SERVER_REFERENCE: "other:1883",
    PROP_REASON_STRING: "because",
    PROP_RECEIVE_MAXIMUM: 10,
    PROP_TOPIC_ALIAS_MAXIMUM: 10,
    PROP_TOPIC_ALIAS: 3,
    PROP_MAXIMUM_QOS: 1,
    PROP_RETAIN_AVAILABLE: 1,
    PROP_USER_PROPERTY: (("k", "v"), ("k", "w")),
    PROP_MAXIMUM_PACKET_SIZE: 4096,
    PROP_WILDCARD_SUB_AVAILABLE: 1,
    PROP_SUB_ID_AVAILABLE: 1,
    PROP_SHARED_SUB_AVAILABLE: 1,
}


def test_each_packet_table_is_the_spec_table_read_by_packet() -> None:
    for packet_type in EVERY_PACKET:
        expected = {pid for pid, packets in SPEC_BY_PROPERTY.items() if packet_type in packets}
        assert PACKET_PROPERTIES[packet_type] == expected, packet_type
    assert set(PACKET_PROPERTIES) == set(EVERY_PACKET)


@pytest.mark.parametrize("packet_type", EVERY_PACKET)
def test_a_packet_decodes_every_property_its_table_allows(packet_type: int) -> None:
    props: Properties = {pid: SAMPLE[pid] for pid in sorted(PACKET_PROPERTIES[packet_type])}
    assert parse_properties(encode_properties(props), packet_type) == props


@pytest.mark.parametrize("packet_type", EVERY_PACKET)
def test_a_packet_rejects_each_property_its_table_does_not_allow(packet_type: int) -> None:
    forbidden = set(SAMPLE) - PACKET_PROPERTIES[packet_type]
    assert forbidden
    for pid in sorted(forbidden):
        with pytest.raises(MqttCodecError, match="not allowed"):
            parse_properties(encode_properties({pid: SAMPLE[pid]}), packet_type)


def test_forwarding_a_will_drops_the_will_delay_interval_and_keeps_the_message_properties() -> None:
    will = {pid: SAMPLE[pid] for pid in PACKET_PROPERTIES[WILL]}
    forwarded = filter_properties(will, FORWARDED_PUBLISH_PROPERTIES)
    assert forwarded is not None
    assert PROP_WILL_DELAY not in forwarded
    assert set(forwarded) == PACKET_PROPERTIES[WILL] - {PROP_WILL_DELAY}
    # What is forwarded is valid in a PUBLISH.
    assert parse_properties(encode_properties(forwarded), PUBLISH) == forwarded


def test_forwarding_a_publish_drops_its_topic_alias_and_subscription_identifiers() -> None:
    received = {pid: SAMPLE[pid] for pid in PACKET_PROPERTIES[PUBLISH]}
    forwarded = filter_properties(received, FORWARDED_PUBLISH_PROPERTIES)
    assert forwarded is not None
    assert PROP_TOPIC_ALIAS not in forwarded and PROP_SUBSCRIPTION_ID not in forwarded


def test_filtering_to_nothing_gives_none() -> None:
    assert filter_properties({PROP_WILL_DELAY: 3}, FORWARDED_PUBLISH_PROPERTIES) is None
    assert filter_properties(None, FORWARDED_PUBLISH_PROPERTIES) is None


def test_a_server_disconnect_may_not_carry_a_session_expiry_interval() -> None:
    assert PROP_SESSION_EXPIRY in PACKET_PROPERTIES[DISCONNECT]
    assert PROP_SESSION_EXPIRY not in SERVER_DISCONNECT_PROPERTIES
    assert PROP_REASON_STRING in SERVER_DISCONNECT_PROPERTIES
