"""The server side's message flows: QoS 1 and 2 both ways, Receive Maximum both ways,
Topic Aliases both ways, retained messages, message expiry, subscriptions and the
subscribe deny rule; on both codec implementations."""

from __future__ import annotations

from types import ModuleType

from session_helpers import FakeClient, of_type

from mqttwire import Properties
from mqttwire.session import (
    Broker,
    BrokerConfig,
    ClientSubscribed,
    ConnectionClosed,
    MessagePublished,
)


def pair(codec: ModuleType, config: BrokerConfig | None = None, sub_version: int = 5,
         pub_version: int = 5, sub_qos: int = 2,
         **connect: object) -> tuple[Broker, FakeClient, FakeClient]:
    """A broker, a subscriber to "t/#" and a publisher."""
    broker = Broker(config, codec=codec)
    sub = FakeClient(broker, codec, version=sub_version)
    sub.connect("sub", **connect)
    sub.subscribe(("t/#", sub_qos))
    pub = FakeClient(broker, codec, version=pub_version)
    pub.connect("pub")
    return broker, sub, pub


# Client -> server ----------------------------------------------------------------------


def test_qos1_publish_is_acknowledged_and_routed(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    events = pub.send(codec.Publish("t/a", b"m", qos=1, packet_id=7))
    assert pub.received() == [codec.PubAck(7)]  # [MQTT-4.3.2-4]
    [published] = of_type(events, MessagePublished)
    assert published.client_id == "pub" and published.deliveries == 1
    [forwarded] = sub.received()
    assert forwarded.topic == "t/a" and forwarded.qos == 1 and forwarded.packet_id == 1


def test_qos2_publish_exchange_and_duplicate(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=9))
    assert pub.received() == [codec.PubRec(9)]  # [MQTT-4.3.3-8]
    assert len(sub.received()) == 1
    # [MQTT-4.3.3-10]: until PUBREL, the same identifier is acknowledged again and not
    # delivered twice.
    events = pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=9, dup=True))
    assert pub.received() == [codec.PubRec(9)]
    assert sub.received() == [] and of_type(events, MessagePublished) == []
    pub.send(codec.PubRel(9))
    assert pub.received() == [codec.PubComp(9)]  # [MQTT-4.3.3-11]
    # [MQTT-4.3.3-12]: after PUBCOMP the identifier is a new message.
    pub.send(codec.Publish("t/a", b"n", qos=2, packet_id=9))
    assert pub.received() == [codec.PubRec(9)]
    assert [p.payload for p in sub.received()] == [b"n"]


def test_pubrel_for_unknown_identifier(codec: ModuleType) -> None:
    # 5.0 §3.7.2.1: PUBCOMP 0x92 Packet Identifier not found; 3.1.1 a plain PUBCOMP.
    broker, sub, pub = pair(codec)
    pub.send(codec.PubRel(44))
    assert pub.received() == [codec.PubComp(44, reason_code=0x92)]
    v4 = FakeClient(broker, codec, version=4)
    v4.connect("v4")
    v4.send(codec.PubRel(44))
    assert v4.received() == [codec.PubComp(44)]


def test_subscription_identifier_from_client_is_a_protocol_error(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    events = pub.send(codec.Publish("t/a", b"m", properties=Properties(
        subscription_identifiers=[3])))
    assert [p.reason_code for p in pub.received()] == [0x82]
    assert of_type(events, ConnectionClosed)[0].error.rule == "MQTT-3.3.4-6"


def test_client_over_receive_maximum_gets_disconnect_0x93(codec: ModuleType) -> None:
    # The CONNACK's Receive Maximum 2: a third unacknowledged QoS 2 PUBLISH (no PUBREL
    # yet, so no PUBCOMP sent) breaks [MQTT-3.3.4-7]: DISCONNECT 0x93.
    broker, sub, pub = pair(codec, BrokerConfig(receive_maximum=2))
    for pid in (1, 2):
        pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=pid))
    assert pub.received() == [codec.PubRec(1), codec.PubRec(2)]
    events = pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=3))
    assert [p.reason_code for p in pub.received()] == [0x93]
    closed = of_type(events, ConnectionClosed)[0]
    assert closed.reason_code == 0x93 and closed.error.rule == "MQTT-3.3.4-7"
    assert pub.conn.closed


def test_receive_maximum_counts_until_pubcomp(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec, BrokerConfig(receive_maximum=1))
    for pid in (1, 2, 3):
        pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=pid))
        pub.send(codec.PubRel(pid))
    assert not pub.conn.closed
    assert pub.received()[-1] == codec.PubComp(3)


def test_inbound_topic_alias(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec, BrokerConfig(topic_alias_maximum=2))
    pub.send(codec.Publish("t/long", b"1", properties=Properties(topic_alias=2)))
    pub.send(codec.Publish("", b"2", properties=Properties(topic_alias=2)))
    received = sub.received()
    assert [(p.topic, p.payload) for p in received] == [("t/long", b"1"), ("t/long", b"2")]
    # The alias is the connection's: it is not forwarded (PreparedPublish drops it).
    assert all(p.properties is None or p.properties.topic_alias is None for p in received)


def test_inbound_topic_alias_above_maximum_gets_0x94(codec: ModuleType) -> None:
    # [MQTT-3.2.2-17]: not above the CONNACK's Topic Alias Maximum; §3.3.2.3.4: 0x94.
    broker, sub, pub = pair(codec, BrokerConfig(topic_alias_maximum=2))
    pub.send(codec.Publish("t/a", b"1", properties=Properties(topic_alias=3)))
    assert [p.reason_code for p in pub.received()] == [0x94]
    assert pub.conn.closed


def test_inbound_topic_alias_with_maximum_zero_gets_0x94(codec: ModuleType) -> None:
    # [MQTT-3.2.2-18]: Topic Alias Maximum 0: no aliases at all.
    broker, sub, pub = pair(codec, BrokerConfig(topic_alias_maximum=0))
    pub.send(codec.Publish("t/a", b"1", properties=Properties(topic_alias=1)))
    assert [p.reason_code for p in pub.received()] == [0x94]


def test_inbound_unknown_topic_alias_is_a_protocol_error(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    events = pub.send(codec.Publish("", b"1", properties=Properties(topic_alias=1)))
    assert [p.reason_code for p in pub.received()] == [0x82]
    assert of_type(events, ConnectionClosed)[0].error.rule == "§3.3.2.3.4"


def test_topic_aliases_do_not_outlive_the_connection(codec: ModuleType) -> None:
    # [MQTT-3.3.2-7]
    broker, sub, pub = pair(codec)
    pub.send(codec.Publish("t/a", b"1", properties=Properties(topic_alias=1)))
    pub.conn.connection_lost(1.0)
    again = FakeClient(broker, codec)
    again.connect("pub")
    again.send(codec.Publish("", b"2", properties=Properties(topic_alias=1)))
    assert [p.reason_code for p in again.received()] == [0x82]


# Server -> client ----------------------------------------------------------------------


def test_qos1_delivery_completes_with_puback(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    pub.send(codec.Publish("t/a", b"m", qos=1, packet_id=1))
    [forwarded] = sub.received()
    session = broker.sessions["sub"]
    assert list(session.inflight) == [forwarded.packet_id]
    sub.send(codec.PubAck(forwarded.packet_id))
    assert not session.inflight


def test_qos2_delivery_exchange(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=1))
    [forwarded] = sub.received()
    pid = forwarded.packet_id
    sub.send(codec.PubRec(pid))
    assert sub.received() == [codec.PubRel(pid)]  # [MQTT-4.3.3-4]
    assert broker.sessions["sub"].inflight
    sub.send(codec.PubComp(pid))
    assert not broker.sessions["sub"].inflight


def test_failed_pubrec_ends_the_exchange(codec: ModuleType) -> None:
    # [MQTT-4.4.0-2]: a PUBREC of 0x80 or more: acknowledged, never re-sent, no PUBREL.
    broker, sub, pub = pair(codec)
    pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=1))
    [forwarded] = sub.received()
    sub.send(codec.PubRec(forwarded.packet_id, reason_code=0x80))
    assert sub.received() == []
    assert not broker.sessions["sub"].inflight


def test_pubrec_for_unknown_identifier_gets_pubrel_0x92(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    sub.send(codec.PubRec(77))
    assert sub.received() == [codec.PubRel(77, reason_code=0x92)]


def test_delivery_qos_is_the_lower_of_message_and_subscription(codec: ModuleType) -> None:
    # [MQTT-3.8.4-8]; with overlapping subscriptions the highest [MQTT-3.3.4-2].
    broker, sub, pub = pair(codec, sub_qos=1)
    pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=1))
    assert sub.received()[0].qos == 1
    sub.subscribe(("t/a", 0), pid=2)
    pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=2))
    [forwarded] = sub.received()
    assert forwarded.qos == 1


def test_client_receive_maximum_limits_what_we_send(codec: ModuleType) -> None:
    # [MQTT-3.3.4-9]: the client's Receive Maximum 2: a third QoS 1 waits for a PUBACK;
    # QoS 0 and other packets are not held back [MQTT-3.3.4-10].
    broker, sub, pub = pair(codec, sub_qos=1,
                            properties=Properties(receive_maximum=2))
    for pid in (1, 2, 3):
        pub.send(codec.Publish("t/a", bytes([pid]), qos=1, packet_id=pid))
    first = sub.received()
    assert [p.payload for p in first] == [b"\x01", b"\x02"]
    sub.send(codec.PingReq())
    assert sub.received() == [codec.PingResp()]
    sub.send(codec.PubAck(first[0].packet_id))
    assert [p.payload for p in sub.received()] == [b"\x03"]


def test_v3_send_window(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec, BrokerConfig(v3_send_window=1), sub_version=4, sub_qos=1)
    for pid in (1, 2):
        pub.send(codec.Publish("t/a", bytes([pid]), qos=1, packet_id=pid))
    [first] = sub.received()
    sub.send(codec.PubAck(first.packet_id))
    assert [p.payload for p in sub.received()] == [b"\x02"]


def test_outbound_topic_aliases_within_the_clients_maximum(codec: ModuleType) -> None:
    # [MQTT-3.1.2-26]: never above the client's Topic Alias Maximum.
    broker, sub, pub = pair(codec, sub_qos=0, properties=Properties(topic_alias_maximum=1))
    for topic in ("t/a", "t/a", "t/b", "t/a"):
        pub.send(codec.Publish(topic, b"m"))
    got = [(p.topic, p.properties.topic_alias) for p in sub.received()]
    # The first use sends topic and alias, then the alias alone; a new topic takes
    # over alias 1 (the only one) and sends its topic again.
    assert got == [("t/a", 1), ("", 1), ("t/b", 1), ("t/a", 1)]


def test_outbound_topic_aliases_can_be_turned_off(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec, BrokerConfig(assign_topic_aliases=False), sub_qos=0,
                            properties=Properties(topic_alias_maximum=5))
    pub.send(codec.Publish("t/a", b"m"))
    pub.send(codec.Publish("t/a", b"m"))
    assert [p.topic for p in sub.received()] == ["t/a", "t/a"]
    # [MQTT-3.1.2-27]: a client that allows none gets none.
    broker2, sub2, pub2 = pair(codec, sub_qos=0)
    pub2.send(codec.Publish("t/a", b"m"))
    pub2.send(codec.Publish("t/a", b"m"))
    assert all(p.properties is None for p in sub2.received())


def test_packet_over_clients_maximum_is_dropped_as_delivered(codec: ModuleType) -> None:
    # [MQTT-3.1.2-24], [MQTT-3.1.2-25]
    broker, sub, pub = pair(codec, sub_qos=1, properties=Properties(maximum_packet_size=50))
    pub.send(codec.Publish("t/a", b"x" * 100, qos=1, packet_id=1))
    pub.send(codec.Publish("t/a", b"small", qos=1, packet_id=2))
    assert [p.payload for p in sub.received()] == [b"small"]
    assert len(broker.sessions["sub"].inflight) == 1


def test_subscription_identifiers_no_local_and_shared(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    a = FakeClient(broker, codec)
    a.connect("a")
    a.subscribe(codec.Subscription("t/#", qos=1, no_local=True), pid=1,
                properties=Properties(subscription_identifiers=[5]))
    a.subscribe(("t/+", 0), pid=2, properties=Properties(subscription_identifiers=[6]))
    b = FakeClient(broker, codec)
    b.connect("b")
    b.subscribe(("$share/g/t/#", 0), pid=1)
    c = FakeClient(broker, codec)
    c.connect("c")
    c.subscribe(("$share/g/t/#", 0), pid=1)
    # [MQTT-3.8.3-3]: No Local: a's own message does not come back on t/#, but t/+ has
    # no No Local, so one copy comes with identifier 6 only.
    a.send(codec.Publish("t/x", b"own"))
    [own] = a.received()
    assert own.properties.subscription_identifiers == [6]
    b.send(codec.Publish("t/x", b"1"))
    b.send(codec.Publish("t/x", b"2"))
    [both] = a.received()[:1]
    assert sorted(both.properties.subscription_identifiers) == [5, 6]  # [MQTT-3.3.4-4]
    # The shared group gets each message once, round robin.
    shared = [p.payload for p in b.received()] + [p.payload for p in c.received()]
    assert sorted(shared) == [b"1", b"2", b"own"]


# Retained messages ---------------------------------------------------------------------


def test_retained_message_goes_to_new_subscriptions(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    pub = FakeClient(broker, codec)
    pub.connect("pub")
    pub.send(codec.Publish("r/a", b"kept", qos=1, retain=True, packet_id=1))
    pub.send(codec.Publish("r/b", b"not kept"))  # RETAIN 0 [MQTT-3.3.1-8]
    sub = FakeClient(broker, codec)
    sub.connect("sub")
    sub.subscribe(("r/#", 1))
    [retained] = sub.received()
    # RETAIN 1 on a message sent because of a new subscription (5.0 §3.3.1.3).
    assert (retained.topic, retained.payload, retained.retain) == ("r/a", b"kept", True)
    # To an established subscription RETAIN is 0 unless Retain As Published
    # [MQTT-3.3.1-12].
    pub.send(codec.Publish("r/a", b"new", retain=True))
    [live] = sub.received()
    assert live.payload == b"new" and not live.retain


def test_empty_retained_message_clears_and_is_not_stored(codec: ModuleType) -> None:
    # [MQTT-3.3.1-6], [MQTT-3.3.1-7]
    broker = Broker(codec=codec)
    pub = FakeClient(broker, codec)
    pub.connect("pub")
    pub.send(codec.Publish("r/a", b"kept", retain=True))
    pub.send(codec.Publish("r/a", b"", retain=True))
    assert len(broker.retained) == 0
    sub = FakeClient(broker, codec)
    sub.connect("sub")
    sub.subscribe(("r/#", 0))
    assert sub.received() == []


def test_retain_handling_and_retain_as_published(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    pub = FakeClient(broker, codec)
    pub.connect("pub")
    pub.send(codec.Publish("r/a", b"kept", retain=True))
    sub = FakeClient(broker, codec)
    sub.connect("sub")
    # [MQTT-3.3.1-11]: Retain Handling 2: never.
    sub.subscribe(codec.Subscription("r/#", retain_handling=2))
    assert sub.received() == []
    # [MQTT-3.3.1-10]: 1: only when the subscription did not exist.
    sub.subscribe(codec.Subscription("r/+", retain_handling=1), pid=2)
    assert len(sub.received()) == 1
    sub.subscribe(codec.Subscription("r/+", retain_handling=1), pid=3)
    assert sub.received() == []
    # [MQTT-3.3.1-9]: 0: at every subscribe.
    sub.subscribe(codec.Subscription("r/+", retain_handling=0), pid=4)
    assert len(sub.received()) == 1
    # [MQTT-3.3.1-13]: Retain As Published keeps RETAIN 1 on live messages.
    sub.subscribe(codec.Subscription("r/a", retain_as_published=True, retain_handling=2),
                  pid=5)
    pub.send(codec.Publish("r/a", b"again", retain=True))
    assert sub.received()[0].retain


def test_retained_message_expires(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    pub = FakeClient(broker, codec)
    pub.connect("pub")
    pub.send(codec.Publish("r/a", b"short", retain=True,
                           properties=Properties(message_expiry_interval=10)), now=0.0)
    early = FakeClient(broker, codec)
    early.connect("early", now=4.0)
    early.subscribe(("r/#", 0), now=4.0)
    [retained] = early.received()
    assert retained.properties.message_expiry_interval == 6  # [MQTT-3.3.2-6]
    late = FakeClient(broker, codec)
    late.connect("late", now=10.0)
    late.subscribe(("r/#", 0), now=10.0)
    assert late.received() == []
    assert len(broker.retained) == 0


def test_broker_publish_of_its_own(codec: ModuleType) -> None:
    broker, sub, pub = pair(codec)
    events = broker.publish("t/sys", b"up", qos=1, retain=True, now=0.0)
    assert of_type(events, MessagePublished)[0].client_id is None
    assert [p.payload for p in sub.received()] == [b"up"]
    assert broker.retained.get("t/sys") is not None


# Subscriptions -------------------------------------------------------------------------


def deny_secret(client_id: str, subscription: object) -> bool:
    return str(getattr(subscription, "topic_filter", "")).startswith("secret/")


def test_subscribe_deny_rule_v5_gets_0x87(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(deny_subscription=deny_secret), codec=codec)
    client = FakeClient(broker, codec)
    client.connect("c")
    suback = client.subscribe(("ok/#", 1), ("secret/#", 1), ("ok2", 2))
    assert suback.reason_codes == [1, 0x87, 2]
    [event] = of_type(client.events, ClientSubscribed)
    assert event.reason_codes == [1, 0x87, 2]
    # The denied filter is not subscribed.
    client.send(codec.Publish("secret/x", b"m"))
    assert client.received() == []


def test_subscribe_deny_rule_v311_gets_0x80(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(deny_subscription=deny_secret), codec=codec)
    client = FakeClient(broker, codec, version=4)
    client.connect("c")
    assert client.subscribe(("secret/a", 0), ("a", 0)).reason_codes == [0x80, 0]


def test_subscribe_deny_rule_v31_closes(codec: ModuleType) -> None:
    # MQTT 3.1's SUBACK has no failure code: the connection is closed instead.
    broker = Broker(BrokerConfig(deny_subscription=deny_secret), codec=codec)
    client = FakeClient(broker, codec, version=3)
    client.connect("c")
    client.send(codec.Subscribe(1, [codec.Subscription("secret/a")]))
    assert client.received() == [] and client.conn.closed


def test_invalid_filter(codec: ModuleType) -> None:
    # §4.7.1 wildcard placement: 5.0 0x8F Topic Filter invalid, 3.1.1 0x80.
    broker = Broker(codec=codec)
    v5 = FakeClient(broker, codec)
    v5.connect("a")
    assert v5.subscribe(("a/#/b", 0), ("ok", 0)).reason_codes == [0x8F, 0]
    v4 = FakeClient(broker, codec, version=4)
    v4.connect("b")
    assert v4.subscribe(("a+", 0)).reason_codes == [0x80]


def test_unsubscribe(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("c")
    client.subscribe(("a/#", 0))
    client.send(codec.Unsubscribe(2, ["a/#", "b"]))
    # [MQTT-3.10.4-4]; 5.0 §3.11.3 0x11 No subscription existed.
    assert client.received() == [codec.UnsubAck(2, [0, 0x11])]
    assert len(broker.subscriptions) == 0


def test_qos1_publish_reusing_a_qos2_identifier(codec: ModuleType) -> None:
    # §2.2.1: an identifier awaiting PUBREL is in use.
    broker, sub, pub = pair(codec)
    pub.send(codec.Publish("t/a", b"m", qos=2, packet_id=5))
    pub.received()
    events = pub.send(codec.Publish("t/a", b"m", qos=1, packet_id=5))
    assert [p.reason_code for p in pub.received()] == [0x82]
    assert of_type(events, ConnectionClosed)[0].error.rule == "§2.2.1"
