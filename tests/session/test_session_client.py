"""The client side (ClientSession) driven packet by packet by a fake server, on both
codec implementations: CONNECT, QoS 1/2 both ways, Receive Maximum both ways, Topic
Aliases both ways, keep-alive with Server Keep Alive, resumed sessions, deferred
acknowledgement, and the server's protocol violations."""

from __future__ import annotations

from types import ModuleType

import pytest
from session_helpers import FakeServer, of_type

from mqttwire import Properties
from mqttwire.session import (
    ClientSession,
    ClientState,
    Connected,
    ConnectRefused,
    Disconnected,
    MessageReceived,
    PublishCompleted,
    SessionError,
    SubscribeCompleted,
    UnsubscribeCompleted,
)


def connected(codec: ModuleType, connack_props: Properties | None = None,
              **kwargs: object) -> tuple[ClientSession, FakeServer]:
    client = ClientSession("me", codec=codec, **kwargs)  # type: ignore[arg-type]
    server = FakeServer(client, codec)
    events = server.connect(properties=connack_props)
    assert of_type(events, Connected), events
    return client, server


def received_message(events: list[object]) -> object:
    [event] = of_type(events, MessageReceived)
    return event.message


# Connecting ----------------------------------------------------------------------------


def test_connect_sends_connect_with_its_properties(codec: ModuleType) -> None:
    client = ClientSession("me", codec=codec, keep_alive=30, session_expiry_interval=600,
                           receive_maximum=5, topic_alias_maximum=3,
                           will=codec.Will("w", b"bye"))
    server = FakeServer(client, codec)
    client.connect(0.0)
    assert client.state is ClientState.CONNECTING
    [connect] = server.received()
    assert connect.client_id == "me" and connect.keep_alive == 30 and connect.clean_start
    props = connect.properties
    assert (props.session_expiry_interval, props.receive_maximum,
            props.topic_alias_maximum) == (600, 5, 3)
    assert connect.will == codec.Will("w", b"bye")
    with pytest.raises(SessionError):
        client.connect(0.0)


def test_connack_applies_server_properties(codec: ModuleType) -> None:
    client = ClientSession("", codec=codec, keep_alive=100)
    server = FakeServer(client, codec)
    events = server.connect(properties=Properties(
        server_keep_alive=20, assigned_client_identifier="given", receive_maximum=1))
    [event] = of_type(events, Connected)
    assert event.client_id == "given" and client.client_id == "given"
    assert not event.session_present
    # [MQTT-3.2.2-21]: the Server Keep Alive replaces ours.
    assert client.effective_keep_alive == 20
    assert client.next_deadline() == 20.0


def test_connect_refused(codec: ModuleType) -> None:
    client = ClientSession("me", codec=codec)
    server = FakeServer(client, codec)
    client.connect(0.0)
    server.received()
    events = server.send(codec.ConnAck(reason_code=0x87))
    assert of_type(events, ConnectRefused)[0].reason_code == 0x87
    assert of_type(events, Disconnected)[0].by_server
    assert client.state is ClientState.DISCONNECTED


def test_v311_connect(codec: ModuleType) -> None:
    client, server = connected(codec, version=4)
    assert server.last_connect.protocol_version == 4
    assert server.last_connect.properties is None
    with pytest.raises(SessionError):
        ClientSession("x", version=4, session_expiry_interval=5, codec=codec)
    with pytest.raises(SessionError):  # 3.1.1 [MQTT-3.1.3-7]
        ClientSession("", version=4, clean_start=False, codec=codec).connect(0.0)


# Publishing ----------------------------------------------------------------------------


def test_qos1_publish(codec: ModuleType) -> None:
    client, server = connected(codec)
    message = client.publish("a/b", b"x", qos=1, now=1.0)
    [publish] = server.received()
    assert (publish.topic, publish.qos, publish.packet_id, publish.dup) == ("a/b", 1, 1, False)
    assert message.state == "sent" and client.inflight == [message]
    events = server.send(codec.PubAck(1))
    assert of_type(events, PublishCompleted)[0].message is message
    assert message.state == "done" and client.inflight == []


def test_qos2_publish(codec: ModuleType) -> None:
    client, server = connected(codec)
    message = client.publish("a/b", b"x", qos=2, now=1.0)
    [publish] = server.received()
    server.send(codec.PubRec(publish.packet_id))
    assert server.received() == [codec.PubRel(publish.packet_id)]  # [MQTT-4.3.3-4]
    assert message.state == "released"
    events = server.send(codec.PubComp(publish.packet_id))
    assert of_type(events, PublishCompleted)[0].reason_code == 0
    assert message.state == "done"


def test_qos2_publish_refused_by_pubrec(codec: ModuleType) -> None:
    # [MQTT-4.4.0-2]
    client, server = connected(codec)
    message = client.publish("a/b", b"x", qos=2, now=1.0)
    server.received()
    events = server.send(codec.PubRec(1, reason_code=0x87))
    assert of_type(events, PublishCompleted)[0].reason_code == 0x87
    assert message.state == "failed" and server.received() == []


def test_pubrec_for_unknown_identifier_gets_pubrel_0x92(codec: ModuleType) -> None:
    client, server = connected(codec)
    server.send(codec.PubRec(9))
    assert server.received() == [codec.PubRel(9, reason_code=0x92)]


def test_publish_before_connack_is_held(codec: ModuleType) -> None:
    client = ClientSession("me", codec=codec)
    server = FakeServer(client, codec)
    client.connect(0.0)
    server.received()
    message = client.publish("a", b"x", qos=1, now=0.0)
    assert message.state == "queued" and server.received() == []
    server.send(codec.ConnAck())
    assert [p.payload for p in server.received()] == [b"x"]


def test_server_receive_maximum_limits_our_inflight(codec: ModuleType) -> None:
    # [MQTT-3.3.4-7]; other packets are not held back [MQTT-3.3.4-8].
    client, server = connected(codec, Properties(receive_maximum=1))
    first = client.publish("a", b"1", qos=1, now=0.0)
    second = client.publish("a", b"2", qos=2, now=0.0)
    zero = client.publish("a", b"0", now=0.0)
    assert [p.payload for p in server.received()] == [b"1"]
    assert second.state == "queued" and zero.state == "queued"
    client.subscribe(("s", 1), now=0.0)
    assert isinstance(server.received()[0], codec.Subscribe)
    server.send(codec.PubAck(first.packet_id))
    assert [p.payload for p in server.received()] == [b"2", b"0"]


def test_publish_checks(codec: ModuleType) -> None:
    client, server = connected(codec, Properties(maximum_qos=1, retain_available=0))
    with pytest.raises(SessionError, match="MQTT-3.2.2-11"):
        client.publish("a", qos=2, now=0.0)
    with pytest.raises(SessionError, match="MQTT-3.2.2-14"):
        client.publish("a", retain=True, now=0.0)
    with pytest.raises(SessionError):
        client.publish("a", qos=3, now=0.0)
    with pytest.raises(Exception, match="MQTT-3.3.2-2"):
        client.publish("a/+", now=0.0)


def test_publish_over_servers_maximum_packet_size_fails(codec: ModuleType) -> None:
    client, server = connected(codec, Properties(maximum_packet_size=30))
    message = client.publish("a", b"x" * 100, qos=1, now=0.0)
    assert message.state == "failed" and server.received() == []
    events = client.tick(0.0)
    assert of_type(events, PublishCompleted)[0].reason_code == 0x95


def test_outbound_topic_aliases(codec: ModuleType) -> None:
    # [MQTT-3.3.2-9]: within the server's Topic Alias Maximum.
    client, server = connected(codec, Properties(topic_alias_maximum=1))
    for topic in ("long/topic", "long/topic", "other"):
        client.publish(topic, b"x", now=0.0)
    got = [(p.topic, p.properties.topic_alias) for p in server.received()]
    assert got == [("long/topic", 1), ("", 1), ("other", 1)]
    # [MQTT-3.2.2-18]: none when the server allows none.
    plain, plain_server = connected(codec)
    plain.publish("t", now=0.0)
    plain.publish("t", now=0.0)
    assert [p.topic for p in plain_server.received()] == ["t", "t"]


def test_subscribe_and_unsubscribe(codec: ModuleType) -> None:
    client, server = connected(codec)
    pid = client.subscribe([("a/#", 1), codec.Subscription("b", qos=2)], now=0.0)
    [subscribe] = server.received()
    assert subscribe.packet_id == pid and len(subscribe.subscriptions) == 2
    events = server.send(codec.SubAck(pid, [1, 0x87]))
    assert of_type(events, SubscribeCompleted)[0].reason_codes == [1, 0x87]
    pid = client.unsubscribe("a/#", now=0.0)
    server.received()
    events = server.send(codec.UnsubAck(pid, [0]))
    assert of_type(events, UnsubscribeCompleted)[0].packet_id == pid


# Receiving -----------------------------------------------------------------------------


def test_received_qos1_is_acknowledged_automatically(codec: ModuleType) -> None:
    client, server = connected(codec)
    events = server.send(codec.Publish("t", b"m", qos=1, packet_id=4))
    message = received_message(events)
    assert message.topic == "t" and message.qos == 1  # type: ignore[attr-defined]
    assert server.received() == [codec.PubAck(4)]


def test_received_qos2_exchange(codec: ModuleType) -> None:
    client, server = connected(codec)
    events = server.send(codec.Publish("t", b"m", qos=2, packet_id=4))
    assert len(of_type(events, MessageReceived)) == 1
    assert server.received() == [codec.PubRec(4)]
    # [MQTT-4.3.3-10]: PUBREC again, no second delivery.
    events = server.send(codec.Publish("t", b"m", qos=2, packet_id=4, dup=True))
    assert of_type(events, MessageReceived) == []
    assert server.received() == [codec.PubRec(4)]
    server.send(codec.PubRel(4))
    assert server.received() == [codec.PubComp(4)]
    server.send(codec.PubRel(5))
    assert server.received() == [codec.PubComp(5, reason_code=0x92)]


def test_deferred_acknowledgement(codec: ModuleType) -> None:
    client, server = connected(codec, auto_ack=False)
    one = received_message(server.send(codec.Publish("t", b"1", qos=1, packet_id=1)))
    two = received_message(server.send(codec.Publish("t", b"2", qos=2, packet_id=2)))
    three = received_message(server.send(codec.Publish("t", b"3", qos=1, packet_id=3)))
    assert server.received() == []
    assert client.unacknowledged == [one, two, three]
    # [MQTT-4.6.0-2], [MQTT-4.6.0-3]: in arrival order: acking 3 first sends nothing.
    assert client.ack(three, now=1.0)  # type: ignore[arg-type]
    assert server.received() == []
    assert client.ack(one, now=1.0)  # type: ignore[arg-type]
    assert server.received() == [codec.PubAck(1)]
    assert client.ack(two, now=1.0)  # type: ignore[arg-type]
    assert server.received() == [codec.PubRec(2), codec.PubAck(3)]
    assert not client.ack(two, now=1.0)  # type: ignore[arg-type]
    # A re-sent PUBLISH of a message not yet acknowledged is not delivered twice.
    four = received_message(server.send(codec.Publish("t", b"4", qos=1, packet_id=4)))
    events = server.send(codec.Publish("t", b"4", qos=1, packet_id=4, dup=True))
    assert of_type(events, MessageReceived) == []
    client.ack(four, reason_code=0x80, now=2.0)  # type: ignore[arg-type]
    assert server.received() == [codec.PubAck(4, reason_code=0x80)]


@pytest.mark.parametrize(("qos", "code"), [(1, 0x84), (2, 0x92), (1, 0x01)])
def test_an_acknowledgement_with_a_reason_code_its_packet_cannot_carry(
        codec: ModuleType, qos: int, code: int) -> None:
    # Refused before the message leaves the session: it can still be acknowledged.
    client, server = connected(codec, auto_ack=False)
    message = received_message(server.send(codec.Publish("t", b"1", qos=qos, packet_id=1)))
    with pytest.raises(SessionError, match=f"0x{code:02X} is not one a PUB"):
        client.ack(message, reason_code=code, now=1.0)  # type: ignore[arg-type]
    assert server.received() == [] and client.unacknowledged == [message]
    assert client.ack(message, reason_code=0x80, now=1.0)  # type: ignore[arg-type]
    ack = codec.PubAck(1, reason_code=0x80) if qos == 1 else codec.PubRec(1, reason_code=0x80)
    assert server.received() == [ack]


@pytest.mark.parametrize(("version", "rule"), [(5, "MQTT-2.2.1-4"), (4, "MQTT-2.3.1-4")])
@pytest.mark.parametrize("qos", [1, 2])
def test_a_new_publish_reusing_an_identifier_in_use_is_a_protocol_error(
        codec: ModuleType, version: int, rule: str, qos: int) -> None:
    # Mosquitto 2.0.11 does this under load (it overruns the Receive Maximum and wraps
    # its identifiers): taken for a re-send, the second message would be lost silently.
    client, server = connected(codec, version=version, auto_ack=False)
    received_message(server.send(codec.Publish("t", b"1", qos=qos, packet_id=9)))
    events = server.send(codec.Publish("t", b"2", qos=qos, packet_id=9))
    assert of_type(events, MessageReceived) == []
    [event] = of_type(events, Disconnected)
    assert event.error.rule == rule
    assert "new PUBLISH (DUP 0) with packet identifier 9, in use" in str(event.error)
    if version == 5:
        assert server.received() == [codec.Disconnect(reason_code=0x82)]
    assert client.state is ClientState.DISCONNECTED


def test_our_receive_maximum_is_enforced(codec: ModuleType) -> None:
    # [MQTT-3.3.4-9] is the server's duty: a third unacknowledged message with our
    # Receive Maximum 2 gets DISCONNECT 0x93.
    client, server = connected(codec, receive_maximum=2, auto_ack=False)
    server.send(codec.Publish("t", b"1", qos=1, packet_id=1))
    server.send(codec.Publish("t", b"2", qos=1, packet_id=2))
    events = server.send(codec.Publish("t", b"3", qos=1, packet_id=3))
    [disconnect] = server.received()
    assert disconnect.reason_code == 0x93
    [event] = of_type(events, Disconnected)
    assert event.error.rule == "MQTT-3.3.4-9" and event.reason_code == 0x93
    assert client.state is ClientState.DISCONNECTED


def test_inbound_topic_aliases(codec: ModuleType) -> None:
    # [MQTT-3.3.2-10]: every alias up to our Topic Alias Maximum is accepted.
    client, server = connected(codec, topic_alias_maximum=2)
    server.send(codec.Publish("long/t", b"1", properties=Properties(topic_alias=2)))
    message = received_message(server.send(
        codec.Publish("", b"2", properties=Properties(topic_alias=2))))
    assert message.topic == "long/t"  # type: ignore[attr-defined]
    server.send(codec.Publish("x", b"3", properties=Properties(topic_alias=3)))
    assert [p.reason_code for p in server.received()] == [0x94]
    assert client.state is ClientState.DISCONNECTED


def test_inbound_unknown_alias(codec: ModuleType) -> None:
    client, server = connected(codec, topic_alias_maximum=2)
    server.send(codec.Publish("", b"1", properties=Properties(topic_alias=1)))
    assert [p.reason_code for p in server.received()] == [0x82]


# Keep-alive ----------------------------------------------------------------------------


def test_pingreq_when_idle_and_timeout_without_pingresp(codec: ModuleType) -> None:
    # [MQTT-3.1.2-20]
    client, server = connected(codec, keep_alive=10, ping_timeout=5.0)
    assert client.next_deadline() == 10.0
    client.publish("t", now=4.0)  # any packet sent restarts the count
    server.received()
    assert client.tick(10.0) == [] and server.received() == []
    client.tick(14.0)
    assert server.received() == [codec.PingReq()]
    server.send(codec.PingResp(), now=15.0)
    assert client.next_deadline() == 24.0
    client.tick(24.0)
    assert server.received() == [codec.PingReq()]
    events = client.tick(29.0)
    assert "PINGRESP" in of_type(events, Disconnected)[0].reason


def test_connack_timeout(codec: ModuleType) -> None:
    client = ClientSession("me", codec=codec, connect_timeout=5.0)
    client.connect(0.0)
    assert client.next_deadline() == 5.0
    assert of_type(client.tick(5.0), Disconnected)


# Sessions across connections -----------------------------------------------------------


def test_resumed_session_resends_and_keeps_pending_acks(codec: ModuleType) -> None:
    client, server = connected(codec, session_expiry_interval=300, auto_ack=False)
    one = client.publish("a", b"1", qos=1, now=0.0)
    two = client.publish("a", b"2", qos=2, now=0.0)
    server.received()
    server.send(codec.PubRec(two.packet_id))
    server.received()
    incoming = received_message(server.send(codec.Publish("t", b"in", qos=1, packet_id=7)))
    events = client.connection_lost(1.0)
    assert of_type(events, Disconnected)[0].reason == "network connection lost"
    # Acknowledged while away: the PUBACK waits for the next connection.
    assert client.ack(incoming, now=2.0)  # type: ignore[arg-type]
    events = server.connect(now=3.0, session_present=True)
    assert not server.last_connect.clean_start  # later connects resume by default
    assert of_type(events, Connected)[0].session_present
    # [MQTT-4.4.0-1], [MQTT-4.6.0-1]: PUBLISH again with DUP 1, PUBREL again, in order.
    resent = server.received()
    assert isinstance(resent[0], codec.Publish) and resent[0].dup
    assert resent[0].packet_id == one.packet_id
    assert resent[1] == codec.PubRel(two.packet_id)
    # The PUBACK for 7 waits for the server's re-sent copy: sent before it, it would
    # make the copy a new message [MQTT-4.3.2-5].  A PINGREQ marks the end of the
    # re-sending.
    assert resent[2:] == [codec.PingReq()]
    events = server.send(codec.Publish("t", b"in", qos=1, packet_id=7, dup=True), now=3.0)
    assert of_type(events, MessageReceived) == []  # not delivered twice
    assert server.received() == [codec.PubAck(7)]


def test_resumed_acks_of_messages_not_sent_again_are_forgotten(codec: ModuleType) -> None:
    # A server that does not re-send a message (it must, [MQTT-4.4.0-1]) no longer holds
    # it for us: the PINGRESP to the PINGREQ sent after CONNACK comes after any
    # re-sending, and then the message is forgotten, not acknowledged.  Its identifier
    # may be a new message's on the server's side: a PUBACK for it would acknowledge
    # that one.  A message that was sent again is acknowledged, in order.
    client, server = connected(codec, session_expiry_interval=300, auto_ack=False)
    one = received_message(server.send(codec.Publish("t", b"1", qos=1, packet_id=1)))
    two = received_message(server.send(codec.Publish("t", b"2", qos=2, packet_id=2)))
    three = received_message(server.send(codec.Publish("t", b"3", qos=1, packet_id=3)))
    client.connection_lost(1.0)
    server.connect(now=2.0, session_present=True)
    assert server.received() == [codec.PingReq()]
    for message in (one, two, three):
        assert client.ack(message, now=2.0)  # type: ignore[arg-type]
    assert server.received() == []
    server.send(codec.Publish("t", b"3", qos=1, packet_id=3, dup=True), now=2.1)
    assert server.received() == []  # 1 and 2 may still come: 3's PUBACK waits
    server.send(codec.PingResp(), now=2.5)
    assert server.received() == [codec.PubAck(3)]
    assert client.unacknowledged == []
    # Identifier 1 is the server's to use again: a new message with it is delivered.
    events = server.send(codec.Publish("t", b"new", qos=1, packet_id=1), now=3.0)
    [new] = [e.message for e in of_type(events, MessageReceived)]
    assert new.payload == b"new"
    assert client.ack(new, now=3.0) and server.received() == [codec.PubAck(1)]


def test_resumed_pubrel_not_sent_again_is_no_longer_awaited(codec: ModuleType) -> None:
    # PUBREC sent for 5 and 6; after the resuming CONNACK the server sends PUBREL for 6
    # only: 5 is no longer in its session, and a new QoS 2 message may take identifier 5.
    client, server = connected(codec, session_expiry_interval=300)
    server.send(codec.Publish("t", b"5", qos=2, packet_id=5))
    server.send(codec.Publish("t", b"6", qos=2, packet_id=6))
    assert server.received() == [codec.PubRec(5), codec.PubRec(6)]
    client.connection_lost(1.0)
    server.connect(now=2.0, session_present=True)
    assert server.received() == [codec.PingReq()]
    server.send(codec.PubRel(6), now=2.1)
    assert server.received() == [codec.PubComp(6)]
    server.send(codec.PingResp(), now=2.2)
    events = server.send(codec.Publish("t", b"new", qos=2, packet_id=5), now=3.0)
    assert [e.message.payload for e in of_type(events, MessageReceived)] == [b"new"]
    assert server.received() == [codec.PubRec(5)]


def test_resumed_qos2_copy_after_our_pubrec_keeps_awaiting_pubrel(codec: ModuleType) -> None:
    # Our PUBREC for 5 was lost with the connection: the server sends the PUBLISH again
    # (DUP 1), we answer PUBREC again and its PUBREL, after the PINGRESP, is awaited.
    client, server = connected(codec, session_expiry_interval=300)
    server.send(codec.Publish("t", b"5", qos=2, packet_id=5))
    assert server.received() == [codec.PubRec(5)]
    client.connection_lost(1.0)
    server.connect(now=2.0, session_present=True)
    server.received()
    events = server.send(codec.Publish("t", b"5", qos=2, packet_id=5, dup=True), now=2.1)
    assert of_type(events, MessageReceived) == []  # not delivered twice
    server.send(codec.PingResp(), now=2.2)
    assert server.received() == [codec.PubRec(5)]
    server.send(codec.PubRel(5), now=2.3)
    assert server.received() == [codec.PubComp(5)]  # not 0x92 Packet Identifier not found


def test_session_not_present_discards_ours(codec: ModuleType) -> None:
    client, server = connected(codec, session_expiry_interval=300, auto_ack=False)
    lost = client.publish("a", b"1", qos=1, now=0.0)
    incoming = received_message(server.send(codec.Publish("t", b"in", qos=1, packet_id=7)))
    client.connection_lost(1.0)
    events = server.connect(now=2.0, session_present=False)
    [event] = of_type(events, Connected)
    assert event.discarded == [lost] and lost.state == "failed"
    assert server.received() == []
    assert not client.ack(incoming, now=3.0)  # type: ignore[arg-type]


def test_session_present_after_clean_start_is_a_protocol_error(codec: ModuleType) -> None:
    # [MQTT-3.2.2-2]
    client = ClientSession("me", codec=codec)
    server = FakeServer(client, codec)
    client.connect(0.0)
    server.received()
    events = server.send(codec.ConnAck(session_present=True))
    assert of_type(events, Disconnected)[0].error.rule == "MQTT-3.2.2-2"


def test_disconnect(codec: ModuleType) -> None:
    client, server = connected(codec, session_expiry_interval=10)
    events = client.disconnect(1.0, reason_code=0x04, session_expiry_interval=0)
    assert server.received() == [codec.Disconnect(
        reason_code=0x04, properties=Properties(session_expiry_interval=0))]
    assert of_type(events, Disconnected)[0].reason_code == 0x04
    # §3.14.2.2.2: no non-zero interval on DISCONNECT after CONNECT's 0.
    client2, _ = connected(codec)
    with pytest.raises(SessionError, match="3.14.2.2.2"):
        client2.disconnect(1.0, session_expiry_interval=5)
    # A reason code that a DISCONNECT cannot carry (0x84 is a CONNACK's): refused before
    # anything changes; the connection stays.
    client3, server3 = connected(codec, session_expiry_interval=10)
    with pytest.raises(SessionError, match="0x84 is not one a DISCONNECT may carry"):
        client3.disconnect(1.0, reason_code=0x84, session_expiry_interval=20)
    assert client3.connected and client3.session_expiry_interval == 10
    assert server3.received() == []


def test_server_disconnect(codec: ModuleType) -> None:
    client, server = connected(codec)
    events = server.send(codec.Disconnect(reason_code=0x8B))
    [event] = of_type(events, Disconnected)
    assert event.by_server and event.reason_code == 0x8B
    assert client.receive_data(b"\xd0\x00", 2.0) == []  # ignored once disconnected


# The server's protocol violations ------------------------------------------------------


def test_packet_before_connack_closes(codec: ModuleType) -> None:
    # [MQTT-3.2.0-1]: no DISCONNECT before the CONNACK.
    client = ClientSession("me", codec=codec)
    server = FakeServer(client, codec)
    client.connect(0.0)
    server.received()
    events = server.send(codec.PingResp())
    assert of_type(events, Disconnected)[0].error.rule == "MQTT-3.2.0-1"
    assert server.received() == []


def test_second_connack(codec: ModuleType) -> None:
    # [MQTT-3.2.0-2]
    client, server = connected(codec)
    server.send(codec.ConnAck())
    assert [p.reason_code for p in server.received()] == [0x82]


def test_client_only_packet_from_server(codec: ModuleType) -> None:
    client, server = connected(codec, version=4)
    events = server.send(codec.Subscribe(1, [codec.Subscription("a")]))
    assert server.received() == []  # 3.1.1: just close
    assert of_type(events, Disconnected)[0].error.rule == "§2.1.2"


def test_suback_errors(codec: ModuleType) -> None:
    client, server = connected(codec)
    server.send(codec.SubAck(5, [0]))  # [MQTT-3.8.4-2]: answers nothing of ours
    assert [p.reason_code for p in server.received()] == [0x82]
    client2, server2 = connected(codec)
    pid = client2.subscribe([("a", 0), ("b", 0)], now=0.0)
    server2.received()
    events = server2.send(codec.SubAck(pid, [0]))  # [MQTT-3.9.3-1]: one per filter
    assert of_type(events, Disconnected)[0].error.rule == "MQTT-3.9.3-1"


def test_malformed_bytes_from_server(codec: ModuleType) -> None:
    client, server = connected(codec)
    events = client.receive_data(b"\x36\x00", 1.0)
    assert [p.reason_code for p in server.received()] == [0x81]
    assert of_type(events, Disconnected)[0].error.rule == "MQTT-3.3.1-4"


def test_a_connect_from_the_server_with_a_bad_protocol_name(codec: ModuleType) -> None:
    # The decoder's error carries 0x84 (Unsupported Protocol Version), a CONNACK's code
    # that no DISCONNECT may carry (MQTT 5.0 §3.14.2.1): the client sends 0x82 Protocol
    # Error instead, and raises nothing.
    client, server = connected(codec)
    data = codec.Connect("s").encode(5).replace(b"MQTT", b"MQTX")
    events = client.receive_data(data, 1.0)
    assert [p.reason_code for p in server.received()] == [0x82]
    [ended] = of_type(events, Disconnected)
    assert ended.reason_code == 0x82 and ended.error.reason_code == 0x84
    assert not client.connected


def test_the_disconnect_reason_is_one_a_disconnect_may_carry() -> None:
    from mqttwire import MalformedPacket, MQTTWireError, ProtocolError
    from mqttwire.session.errors import disconnect_reason

    assert disconnect_reason(ProtocolError("X", "y", reason_code=0x84)) == 0x82
    assert disconnect_reason(MalformedPacket("X", "y", reason_code=0x84)) == 0x81
    assert disconnect_reason(MQTTWireError("X", "y", reason_code=0x84)) == 0x80
    assert disconnect_reason(ProtocolError("X", "y", reason_code=0x95)) == 0x95
    assert disconnect_reason(ProtocolError("X", "y")) == 0x82


def test_auth_from_server_without_method(codec: ModuleType) -> None:
    # [MQTT-4.12.0-6]
    client, server = connected(codec)
    server.send(codec.Auth(reason_code=0x18, properties=Properties(authentication_method="x")))
    assert [p.reason_code for p in server.received()] == [0x82]


def test_repr(codec: ModuleType) -> None:
    client, server = connected(codec)
    assert "ClientSession 'me' v5 connected" in repr(client)
    message = client.publish("t", b"x", qos=1, now=0.0)
    assert "OutgoingMessage('t'" in repr(message)


def test_packet_identifier_in_use_by_another_qos(codec: ModuleType) -> None:
    # §2.2.1: the server must not reuse an identifier still in use.
    client, server = connected(codec)
    server.send(codec.Publish("t", b"m", qos=2, packet_id=4))
    server.received()
    events = server.send(codec.Publish("t", b"m", qos=1, packet_id=4))
    assert [p.reason_code for p in server.received()] == [0x82]
    assert of_type(events, Disconnected)[0].error.rule == "§2.2.1"


def test_unanswered_subscribe_is_forgotten_with_the_connection(codec: ModuleType) -> None:
    client, server = connected(codec, session_expiry_interval=60)
    pid = client.subscribe(("a", 0), now=0.0)
    client.connection_lost(1.0)
    server.connect(now=2.0, session_present=True)
    server.received()
    # Its identifier is free again, and a late SUBACK for it answers nothing.
    server.send(codec.SubAck(pid, [0]))
    assert [p.reason_code for p in server.received()] == [0x82]


def test_subscribe_over_servers_maximum_packet_size_raises(codec: ModuleType) -> None:
    client, server = connected(codec, Properties(maximum_packet_size=20))
    with pytest.raises(SessionError, match="Maximum Packet Size"):
        client.subscribe(("a/" + "x" * 40, 0), now=0.0)
    assert server.received() == []
    client.connection_lost(1.0)
    with pytest.raises(SessionError, match="not connected"):
        client.unsubscribe("a", now=2.0)


def test_queued_publish_the_server_does_not_allow_is_dropped(codec: ModuleType) -> None:
    client = ClientSession("me", codec=codec)
    server = FakeServer(client, codec)
    client.connect(0.0)
    server.received()
    qos2 = client.publish("a", b"x", qos=2, now=0.0)
    retained = client.publish("a", b"x", retain=True, now=0.0)
    events = server.send(codec.ConnAck(properties=Properties(maximum_qos=1,
                                                             retain_available=0)))
    codes = [(e.message, e.reason_code) for e in of_type(events, PublishCompleted)]
    assert codes == [(qos2, 0x9B), (retained, 0x9A)]
    assert server.received() == []


def test_v31_clean_session_0_keeps_the_session(codec: ModuleType) -> None:
    # MQTT 3.1's CONNACK has no Session Present flag.
    client, server = connected(codec, version=3, clean_start=False)
    message = client.publish("a", b"x", qos=1, now=0.0)
    server.received()
    client.connection_lost(1.0)
    events = server.connect(now=2.0)
    assert of_type(events, Connected)[0].session_present
    [resent] = server.received()
    assert resent.dup and resent.packet_id == message.packet_id
