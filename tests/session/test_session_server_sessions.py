"""The server side's sessions: resumption and re-sending, takeover, session expiry,
wills and the Will Delay Interval, and message expiry while a client is away; on both
codec implementations."""

from __future__ import annotations

from types import ModuleType

from session_helpers import FakeClient, of_type

from mqttwire import Properties
from mqttwire.session import (
    SESSION_NEVER_EXPIRES,
    Broker,
    ClientConnected,
    ConnectionClosed,
    SessionExpired,
    WillPublished,
)


def watcher(broker: Broker, codec: ModuleType, topic_filter: str = "w/#") -> FakeClient:
    client = FakeClient(broker, codec)
    client.connect("watcher",
                   properties=Properties(session_expiry_interval=SESSION_NEVER_EXPIRES))
    client.subscribe((topic_filter, 1))
    return client


def persistent(codec: ModuleType, expiry: int = 100) -> dict[str, object]:
    return {"clean_start": False,
            "properties": Properties(session_expiry_interval=expiry)}


# Sessions ------------------------------------------------------------------------------


def test_session_resumed_with_queued_messages(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    sub = FakeClient(broker, codec)
    sub.connect("s", **persistent(codec))
    sub.subscribe(("t/#", 1))
    sub.conn.connection_lost(1.0)
    pub = FakeClient(broker, codec)
    pub.connect("p")
    pub.send(codec.Publish("t/a", b"q1", qos=1, packet_id=1), now=2.0)
    pub.send(codec.Publish("t/a", b"q0"), now=2.0)  # QoS 0 to an absent client: dropped
    again = FakeClient(broker, codec)
    connack = again.connect("s", now=3.0, **persistent(codec))
    # [MQTT-3.2.2-3]: Session Present 1, and [MQTT-3.1.2-5] the session goes on.
    assert connack.session_present
    assert [p.payload for p in again.received()] == [b"q1"]
    assert of_type(again.events, ClientConnected)[0].session_present


def test_unacknowledged_messages_resent_with_dup_and_same_ids(codec: ModuleType) -> None:
    # [MQTT-4.4.0-1], DUP 1 [MQTT-3.3.1-1]; PUBREL re-sent for a released QoS 2.
    broker = Broker(codec=codec)
    sub = FakeClient(broker, codec)
    sub.connect("s", **persistent(codec))
    sub.subscribe(("t/#", 2))
    pub = FakeClient(broker, codec)
    pub.connect("p")
    pub.send(codec.Publish("t/a", b"one", qos=1, packet_id=1))
    pub.send(codec.Publish("t/a", b"two", qos=2, packet_id=2))
    first, second = sub.received()
    sub.send(codec.PubRec(second.packet_id))
    assert sub.received() == [codec.PubRel(second.packet_id)]
    sub.conn.connection_lost(1.0)
    again = FakeClient(broker, codec)
    again.connect("s", now=2.0, **persistent(codec))
    resent = again.received()
    assert isinstance(resent[0], codec.Publish)
    assert (resent[0].packet_id, resent[0].dup, resent[0].payload) == (
        first.packet_id, True, b"one")
    assert resent[1] == codec.PubRel(second.packet_id)


def test_clean_start_discards_the_session(codec: ModuleType) -> None:
    # [MQTT-3.1.2-4]; Session Present 0 [MQTT-3.2.2-2].
    broker = Broker(codec=codec)
    sub = FakeClient(broker, codec)
    sub.connect("s", **persistent(codec))
    sub.subscribe(("t/#", 1))
    sub.conn.connection_lost(1.0)
    again = FakeClient(broker, codec)
    assert not again.connect("s", clean_start=True).session_present
    assert len(broker.subscriptions) == 0


def test_session_expiry(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    sub = FakeClient(broker, codec)
    sub.connect("s", **persistent(codec, expiry=30))
    sub.subscribe(("t/#", 1))
    sub.conn.connection_lost(10.0)
    assert broker.next_deadline() == 40.0
    assert broker.tick(39.0) == []
    assert of_type(broker.tick(40.0), SessionExpired)[0].client_id == "s"
    assert "s" not in broker.sessions and len(broker.subscriptions) == 0
    again = FakeClient(broker, codec)
    assert not again.connect("s", now=41.0, **persistent(codec)).session_present


def test_reconnect_before_expiry_keeps_the_session(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    sub = FakeClient(broker, codec)
    sub.connect("s", **persistent(codec, expiry=30))
    sub.conn.connection_lost(10.0)
    again = FakeClient(broker, codec)
    assert again.connect("s", now=20.0, **persistent(codec, expiry=30)).session_present
    assert broker.tick(40.0) == []  # the expiry timer was cancelled


def test_session_expiry_zero_ends_with_the_connection(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("s")
    events = client.conn.connection_lost(1.0)
    assert of_type(events, SessionExpired) and "s" not in broker.sessions


def test_v311_clean_session_0_lasts(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec, version=4)
    client.connect("s", clean_start=False)
    client.subscribe(("t", 1))
    client.conn.connection_lost(1.0)
    assert broker.next_deadline() is None and "s" in broker.sessions
    again = FakeClient(broker, codec, version=4)
    assert again.connect("s", clean_start=False).session_present  # 3.1.1 [MQTT-3.2.2-2]


def test_disconnect_may_change_session_expiry(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("s", **persistent(codec, expiry=100))
    client.send(codec.Disconnect(properties=Properties(session_expiry_interval=5)), now=1.0)
    assert broker.next_deadline() == 6.0


def test_disconnect_setting_expiry_after_zero_is_a_protocol_error(codec: ModuleType) -> None:
    # §3.14.2.2.2: CONNECT's interval was 0: a non-zero one on DISCONNECT is a Protocol
    # Error; the server answers DISCONNECT 0x82.
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("s")
    events = client.send(codec.Disconnect(properties=Properties(session_expiry_interval=5)))
    assert [p.reason_code for p in client.received()] == [0x82]
    assert of_type(events, ConnectionClosed)[0].error.rule == "§3.14.2.2.2"


def test_session_takeover(codec: ModuleType) -> None:
    # [MQTT-3.1.4-3]: the existing connection gets DISCONNECT 0x8E and is closed.
    broker = Broker(codec=codec)
    first = FakeClient(broker, codec)
    first.connect("s", **persistent(codec))
    second = FakeClient(broker, codec)
    events = second.send(codec.Connect("s", clean_start=False))
    assert [p.reason_code for p in first.received()] == [0x8E]
    assert first.conn.closed and not second.conn.closed
    closed = of_type(events, ConnectionClosed)[0]
    assert closed.connection is first.conn and closed.reason_code == 0x8E
    assert second.received()[0].session_present


# Message expiry ------------------------------------------------------------------------


def test_message_expiry_while_the_client_is_away(codec: ModuleType) -> None:
    # [MQTT-3.3.2-5]: an expired message is not delivered; [MQTT-3.3.2-6]: the rest
    # goes with the interval minus the time it waited.
    broker = Broker(codec=codec)
    sub = FakeClient(broker, codec)
    sub.connect("s", **persistent(codec))
    sub.subscribe(("t/#", 1))
    sub.conn.connection_lost(0.0)
    pub = FakeClient(broker, codec)
    pub.connect("p")
    pub.send(codec.Publish("t/a", b"short", qos=1, packet_id=1,
                           properties=Properties(message_expiry_interval=5)), now=0.0)
    pub.send(codec.Publish("t/a", b"long", qos=1, packet_id=2,
                           properties=Properties(message_expiry_interval=60)), now=0.0)
    again = FakeClient(broker, codec)
    again.connect("s", now=10.0, **persistent(codec))
    [delivered] = again.received()
    assert delivered.payload == b"long"
    assert delivered.properties.message_expiry_interval == 50


# Wills ---------------------------------------------------------------------------------


def test_will_published_when_the_connection_is_lost(codec: ModuleType) -> None:
    # [MQTT-3.1.2-8]
    broker = Broker(codec=codec)
    watch = watcher(broker, codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"gone", qos=1))
    events = client.conn.connection_lost(1.0)
    [will] = of_type(events, WillPublished)
    assert will.client_id == "c" and will.message.payload == b"gone"
    [got] = watch.received()
    assert (got.topic, got.payload, got.qos) == ("w/c", b"gone", 1)


def test_will_deleted_by_normal_disconnect(codec: ModuleType) -> None:
    # [MQTT-3.1.2-10] (3.1.1 [MQTT-3.1.2-10] likewise)
    broker = Broker(codec=codec)
    watch = watcher(broker, codec)
    for version in (4, 5):
        client = FakeClient(broker, codec, version=version)
        client.connect(f"c{version}", will=codec.Will("w/c", b"gone"))
        client.send(codec.Disconnect())
        assert client.conn.closed
    assert watch.received() == []


def test_disconnect_with_will_message_publishes_it(codec: ModuleType) -> None:
    # 5.0 §3.14.2.1: 0x04 Disconnect with Will Message.
    broker = Broker(codec=codec)
    watch = watcher(broker, codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"gone"))
    client.send(codec.Disconnect(reason_code=0x04))
    assert [p.payload for p in watch.received()] == [b"gone"]


def test_will_retain(codec: ModuleType) -> None:
    # [MQTT-3.1.2-15]: Will Retain 1: published as a retained message.
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"gone", retain=True))
    client.conn.connection_lost(1.0)
    assert broker.retained.get("w/c") is not None


def test_will_delay(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    watch = watcher(broker, codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"late", properties=Properties(
        will_delay_interval=10, content_type="text/plain")), **persistent(codec, 100))
    assert of_type(client.conn.connection_lost(0.0), WillPublished) == []
    assert broker.next_deadline() == 10.0
    assert broker.tick(9.0) == [] and watch.received() == []
    events = broker.tick(10.0)
    assert of_type(events, WillPublished)
    [got] = watch.received()
    # The Will Delay Interval is the server's; the other Will Properties are the
    # message's (§3.1.3.2).
    assert got.payload == b"late" and got.properties.content_type == "text/plain"
    assert got.properties.will_delay_interval is None


def test_reconnect_within_will_delay_cancels_the_will(codec: ModuleType) -> None:
    # [MQTT-3.1.3-9]
    broker = Broker(codec=codec)
    watch = watcher(broker, codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"late", properties=Properties(
        will_delay_interval=10)), **persistent(codec, 100))
    client.conn.connection_lost(0.0)
    FakeClient(broker, codec).connect("c", now=5.0, **persistent(codec, 100))
    assert of_type(broker.tick(20.0), WillPublished) == []
    assert watch.received() == []


def test_will_published_when_the_session_ends_first(codec: ModuleType) -> None:
    # [MQTT-3.1.2-8]: "either the Will Delay Interval has elapsed or the Session ends".
    broker = Broker(codec=codec)
    watch = watcher(broker, codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"late", properties=Properties(
        will_delay_interval=60)), **persistent(codec, 5))
    client.conn.connection_lost(0.0)
    events = broker.tick(5.0)
    assert of_type(events, SessionExpired) and of_type(events, WillPublished)
    assert [p.payload for p in watch.received()] == [b"late"]
    # With Session Expiry 0 the session ends at once, and the will goes at once too.
    other = FakeClient(broker, codec)
    other.connect("d", will=codec.Will("w/d", b"now", properties=Properties(
        will_delay_interval=60)))
    assert of_type(other.conn.connection_lost(6.0), WillPublished)


def test_will_on_protocol_violation(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    watch = watcher(broker, codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"bad"))
    events = client.send_bytes(b"\x36\x00")
    assert of_type(events, WillPublished)
    assert [p.payload for p in watch.received()] == [b"bad"]


def test_broker_shutdown(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    a = FakeClient(broker, codec)
    a.connect("a")
    b = FakeClient(broker, codec, version=4)
    b.connect("b")
    events = broker.shutdown(1.0)
    assert len(of_type(events, ConnectionClosed)) == 2
    assert [p.reason_code for p in a.received()] == [0x8B]
    assert b.received() == [] and b.conn.closed
    assert repr(broker).startswith("Broker(")


def test_delayed_will_expiry_counts_from_publication(codec: ModuleType) -> None:
    # §3.1.3.2.4: the Will's Message Expiry Interval is the lifetime of the published
    # message, not of the wait before it.
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w/c", b"late", qos=1, properties=Properties(
        will_delay_interval=10, message_expiry_interval=5)), **persistent(codec, 100))
    client.conn.connection_lost(0.0)
    [will] = of_type(broker.tick(10.0), WillPublished)
    assert will.message.expires_at == 15.0


def test_forwarded_expiry_never_exceeds_the_received_interval(codec: ModuleType) -> None:
    """[MQTT-3.3.2-6]: the forwarded interval is the received one minus the time waited.
    At t = 1000.003 the float (t + 300) - t is a hair above 300: forwarded at once, the
    interval must stay 300, not become 301."""
    from mqttwire.session.message import Message

    t = 1000.003
    assert (t + 300) - t > 300  # the float case this test is about
    message = Message.received("t", b"x", 1, False,
                               codec.Properties(message_expiry_interval=300), now=t)
    assert message.remaining_expiry(t) == 300
    assert message.remaining_expiry(t + 0.5) == 300  # under a second waited: ceil
    assert message.remaining_expiry(t + 1.0) == 299
    assert message.remaining_expiry(t + 1000) == 1  # past due but not yet dropped: 1
