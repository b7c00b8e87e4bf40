"""ClientSession(tolerate_overrun=True) driven packet by packet by a fake server, on both
codec implementations: a server that puts more than our Receive Maximum, or more than
65,535 messages, in flight towards us (so that two of them share a packet identifier,
as Mosquitto 2.0.11 does with a backlog: tests/spark/test_live_backlog.py shows it from
the bytes) loses no message, and each acknowledgement goes out only once the server
can match it to the right message: it matches an acknowledgement to the first message
in flight with that identifier, so the earlier exchange must have ended (our PUBACK,
or our PUBCOMP) before the later message's PUBACK or PUBREC goes."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from session_helpers import FakeServer, of_type

from mqttwire.session import ClientSession, ClientState, Connected, Disconnected, MessageReceived


def tolerant(codec: ModuleType, **kwargs: Any) -> tuple[ClientSession, FakeServer]:
    client = ClientSession("me", codec=codec, auto_ack=False, tolerate_overrun=True,
                           **kwargs)
    server = FakeServer(client, codec)
    assert of_type(server.connect(), Connected)
    return client, server


def deliver(server: FakeServer, packet: Any) -> Any:
    """Send ``packet``; the one message it delivers."""
    [event] = of_type(server.send(packet), MessageReceived)
    return event.message


def ack_all(client: ClientSession, *messages: Any) -> None:
    for message in messages:
        assert client.ack(message, now=1.0)


def test_strict_is_the_default(codec: ModuleType) -> None:
    # The protocol errors of test_session_client.py stay what a session does unless
    # asked: here the second PUBLISH with identifier 9 ends the connection.
    client = ClientSession("me", codec=codec, auto_ack=False)
    server = FakeServer(client, codec)
    server.connect()
    deliver(server, codec.Publish("t", b"1", qos=1, packet_id=9))
    events = server.send(codec.Publish("t", b"2", qos=1, packet_id=9))
    assert of_type(events, Disconnected) and client.state is ClientState.DISCONNECTED


def test_beyond_our_receive_maximum_is_taken(codec: ModuleType) -> None:
    client, server = tolerant(codec, receive_maximum=2)
    messages = [deliver(server, codec.Publish("t", bytes([n]), qos=1, packet_id=n))
                for n in (1, 2, 3, 4)]
    assert client.connected and client.receive_maximum_exceeded == 2
    ack_all(client, *messages)
    assert server.received() == [codec.PubAck(n) for n in (1, 2, 3, 4)]


@pytest.mark.parametrize("dup", [False, True])
def test_two_qos1_messages_with_one_identifier(codec: ModuleType, dup: bool) -> None:
    client, server = tolerant(codec)
    first = deliver(server, codec.Publish("t", b"1", qos=1, packet_id=9))
    second = deliver(server, codec.Publish("t", b"2", qos=1, packet_id=9, dup=dup))
    assert (first.payload, second.payload) == (b"1", b"2") and client.ids_reused == 1
    assert client.unacknowledged == [first, second]
    ack_all(client, second)
    assert server.received() == []  # arrival order [MQTT-4.6.0-2]
    ack_all(client, first)
    assert server.received() == [codec.PubAck(9), codec.PubAck(9)]
    assert client.unacknowledged == []


def test_two_qos2_messages_with_one_identifier(codec: ModuleType) -> None:
    # The second PUBREC waits for the first exchange's PUBCOMP: sent before it, the
    # server would take it for the first message, and the second would never complete.
    client, server = tolerant(codec)
    first = deliver(server, codec.Publish("t", b"1", qos=2, packet_id=9))
    second = deliver(server, codec.Publish("t", b"2", qos=2, packet_id=9))
    ack_all(client, first, second)
    assert server.received() == [codec.PubRec(9)]
    server.send(codec.PubRel(9))
    assert server.received() == [codec.PubComp(9), codec.PubRec(9)]
    server.send(codec.PubRel(9))
    assert server.received() == [codec.PubComp(9)]


def test_a_qos2_exchange_holds_the_acknowledgements_after_it(codec: ModuleType) -> None:
    # QoS 2 with identifier 9, then QoS 1 with 9 and with 10: the PUBACK of the second 9
    # waits for our PUBCOMP of the first (a server that matched it to the QoS 2 message
    # would call that a protocol error), and 10's waits behind it (arrival order).
    client, server = tolerant(codec)
    messages = [deliver(server, codec.Publish("t", b"a", qos=2, packet_id=9)),
                deliver(server, codec.Publish("t", b"b", qos=1, packet_id=9)),
                deliver(server, codec.Publish("t", b"c", qos=1, packet_id=10))]
    ack_all(client, *messages)
    assert server.received() == [codec.PubRec(9)]
    server.send(codec.PubRel(9))
    assert server.received() == [codec.PubComp(9), codec.PubAck(9), codec.PubAck(10)]


def test_qos1_then_qos2_with_one_identifier(codec: ModuleType) -> None:
    client, server = tolerant(codec, version=4)
    first = deliver(server, codec.Publish("t", b"1", qos=1, packet_id=6662))
    second = deliver(server, codec.Publish("t", b"2", qos=2, packet_id=6662))
    ack_all(client, first, second)
    assert server.received() == [codec.PubAck(6662), codec.PubRec(6662)]
    server.send(codec.PubRel(6662))
    assert server.received() == [codec.PubComp(6662)]


def test_a_qos2_message_after_our_pubrec_with_its_identifier(codec: ModuleType) -> None:
    # Our PUBREC for 9 went out; before its PUBREL, a new message with 9 (the server's
    # PUBREL is queued behind the PUBLISHes it already had in flight).
    client, server = tolerant(codec)
    ack_all(client, deliver(server, codec.Publish("t", b"1", qos=2, packet_id=9)))
    assert server.received() == [codec.PubRec(9)]
    second = deliver(server, codec.Publish("t", b"2", qos=2, packet_id=9))
    ack_all(client, second)
    assert server.received() == []
    server.send(codec.PubRel(9))
    assert server.received() == [codec.PubComp(9), codec.PubRec(9)]


def test_after_a_resume_the_copy_is_still_a_copy(codec: ModuleType) -> None:
    # The first PUBLISH with 7 after the resuming CONNACK is the copy of the message we
    # hold [MQTT-4.4.0-1]: not delivered twice.  A second one with 7 on that connection
    # is another message (the server had both in flight, and sends both again).
    client, server = tolerant(codec, session_expiry_interval=300)
    held = deliver(server, codec.Publish("t", b"held", qos=1, packet_id=7))
    client.connection_lost(1.0)
    server.connect(now=2.0, session_present=True)
    assert server.received() == [codec.PingReq()]
    events = server.send(codec.Publish("t", b"held", qos=1, packet_id=7, dup=True))
    assert of_type(events, MessageReceived) == []
    other = deliver(server, codec.Publish("t", b"other", qos=1, packet_id=7, dup=True))
    assert other.payload == b"other" and client.ids_reused == 1
    ack_all(client, held, other)
    assert server.received() == [codec.PubAck(7), codec.PubAck(7)]


def test_after_a_resume_a_pubrel_due_then_a_new_message(codec: ModuleType) -> None:
    # PUBREC for 5 sent before the connection broke; after the resuming CONNACK the
    # server sends the PUBLISH again (it did not get our PUBREC): a copy, PUBREC again.
    # Then a QoS 1 message with 5: new; its PUBACK waits for our PUBCOMP of the first.
    client, server = tolerant(codec, session_expiry_interval=300)
    ack_all(client, deliver(server, codec.Publish("t", b"q2", qos=2, packet_id=5)))
    assert server.received() == [codec.PubRec(5)]
    client.connection_lost(1.0)
    server.connect(now=2.0, session_present=True)
    server.received()
    events = server.send(codec.Publish("t", b"q2", qos=2, packet_id=5, dup=True))
    assert of_type(events, MessageReceived) == [] and server.received() == [codec.PubRec(5)]
    new = deliver(server, codec.Publish("t", b"q1", qos=1, packet_id=5))
    ack_all(client, new)
    server.send(codec.PingResp())
    assert server.received() == []
    server.send(codec.PubRel(5))
    assert server.received() == [codec.PubComp(5), codec.PubAck(5)]


def test_a_restarted_client_takes_both_copies(codec: ModuleType) -> None:
    # A new process resuming the session knows nothing: the server sends again its two
    # messages in flight with identifier 3, both DUP 1: both are delivered.
    client, server = tolerant(codec, session_expiry_interval=300, clean_start=False)
    first = deliver(server, codec.Publish("t", b"1", qos=2, packet_id=3, dup=True))
    second = deliver(server, codec.Publish("t", b"2", qos=2, packet_id=3, dup=True))
    ack_all(client, first, second)
    assert server.received() == [codec.PubRec(3)]
    server.send(codec.PubRel(3))
    assert server.received() == [codec.PubComp(3), codec.PubRec(3)]


def test_more_messages_than_identifiers(codec: ModuleType) -> None:
    # 70,000 in flight, identifiers 1 to 65,535 and then 1 to 4,465 again (a 16-bit
    # counter that skips 0), QoS 1 and 2 alternating; acknowledged in one batch, the
    # server answering each PUBREC: every message delivered once, every exchange ended.
    client, server = tolerant(codec, version=4)
    messages = []
    for n in range(70_000):
        pid = n % 65535 + 1
        messages.append(deliver(server, codec.Publish("t", n.to_bytes(3, "big"),
                                                      qos=1 + n % 2, packet_id=pid)))
    assert client.ids_reused == 70_000 - 65535
    ack_all(client, *messages)
    done = 0
    while True:
        packets = server.received()
        if not packets:
            break
        for packet in packets:
            if isinstance(packet, codec.PubRec):
                server.send(codec.PubRel(packet.packet_id))
            done += isinstance(packet, (codec.PubAck, codec.PubComp))
    assert done == 70_000
    assert client.unacknowledged == [] and client.connected


def test_after_a_resume_two_held_messages_with_one_identifier(codec: ModuleType) -> None:
    # Two messages with identifier 4 held from the last connection; the server sends
    # both again, in their order: each copy is its message's, none delivered twice.
    client, server = tolerant(codec, session_expiry_interval=300)
    first = deliver(server, codec.Publish("t", b"1", qos=1, packet_id=4))
    second = deliver(server, codec.Publish("t", b"2", qos=2, packet_id=4))
    client.connection_lost(1.0)
    server.connect(now=2.0, session_present=True)
    assert server.received() == [codec.PingReq()]
    for payload, qos in ((b"1", 1), (b"2", 2)):
        events = server.send(codec.Publish("t", payload, qos=qos, packet_id=4, dup=True))
        assert of_type(events, MessageReceived) == []
    ack_all(client, first, second)
    assert server.received() == [codec.PubAck(4), codec.PubRec(4)]
    assert client.ids_reused == 1  # the second, on the first connection
