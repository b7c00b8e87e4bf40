"""The server's bounds (docs/session.md, "Bounds"): what waits to be written to one
connection, the session's queue (online and offline), the stall timeout, the Session
Expiry cap, Maximum QoS and Retain Available; on both codec implementations.

The expected counts come from the documented rules, worked out here from the encoded
size of a PUBLISH: a QoS 0 message is dropped when the unwritten output is already at
its bound (so ceil(bound / size) get through), a message of any QoS when the queue is
already at its bound (the new one is dropped, the queued ones kept).
"""

from __future__ import annotations

import math
from types import ModuleType

import pytest
from session_helpers import FakeClient, of_type

from mqttwire import Properties
from mqttwire.session import (
    SESSION_NEVER_EXPIRES,
    Broker,
    BrokerConfig,
    ConnectionClosed,
    DeliveriesDropped,
    SessionError,
    SessionExpired,
)

PAYLOAD = b"x" * 1000


def subscriber(broker: Broker, codec: ModuleType, qos: int = 0, version: int = 5,
               client_id: str = "sub", **connect: object) -> FakeClient:
    sub = FakeClient(broker, codec, version=version)
    sub.connect(client_id, **connect)
    sub.subscribe(("t/#", qos))
    assert sub.received() == []  # CONNACK and SUBACK taken: nothing waits
    return sub


def publisher(broker: Broker, codec: ModuleType) -> FakeClient:
    pub = FakeClient(broker, codec)
    pub.connect("pub")
    return pub


def publish(pub: FakeClient, codec: ModuleType, count: int, qos: int = 0,
            payload: bytes = PAYLOAD, now: float = 0.0, start: int = 0) -> None:
    """``count`` PUBLISHes to t/a, numbered from ``start`` (the first 8 payload bytes)."""
    for i in range(start, start + count):
        pub.send(codec.Publish("t/a", b"%08d" % i + payload[8:], qos=qos,
                               packet_id=i % 60000 + 1 if qos else None), now)
    pub.received()  # its acknowledgements


def numbers(packets: list[object]) -> list[int]:
    return [int(p.payload[:8]) for p in packets]  # type: ignore[attr-defined]


# What waits to be written ----------------------------------------------------------------


def test_qos0_past_the_unwritten_bytes_bound_is_dropped(codec: ModuleType) -> None:
    bound = 16 * 1024
    broker = Broker(BrokerConfig(max_unwritten_bytes=bound), codec=codec)
    sub = subscriber(broker, codec)
    pub = publisher(broker, codec)
    size = len(codec.Publish("t/a", PAYLOAD).encode(5))
    kept = math.ceil(bound / size)
    publish(pub, codec, 200)  # the subscriber takes nothing meanwhile
    session = broker.sessions["sub"]
    assert sub.conn.unwritten_bytes == kept * size < bound + size
    assert sub.conn.unwritten_messages == kept
    assert session.stats.dropped_unwritten == 200 - kept
    # One event for the episode, not one per message.
    [dropped] = of_type(pub.events, DeliveriesDropped)
    assert (dropped.client_id, dropped.reason, dropped.total) == ("sub", "unwritten", 1)
    # The client gets the oldest run, in order; then, its output taken, new messages.
    assert numbers(sub.received()) == list(range(kept))
    assert sub.conn.unwritten_bytes == 0 and sub.conn.behind_since is None
    publish(pub, codec, 1, start=500)
    assert numbers(sub.received()) == [500]


def test_qos0_past_the_unwritten_messages_bound_is_dropped(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(max_unwritten_messages=10), codec=codec)
    sub = subscriber(broker, codec)
    pub = publisher(broker, codec)
    publish(pub, codec, 25, payload=b"y" * 8)
    assert sub.conn.unwritten_messages == 10
    assert broker.sessions["sub"].stats.dropped_unwritten == 15
    assert numbers(sub.received()) == list(range(10))


def test_glue_reports_what_its_transport_still_holds(codec: ModuleType) -> None:
    # A glue that reports (set_unwritten): taken bytes stay unwritten until reported
    # written, and QoS 1 messages wait in the queue (not dropped) while behind.
    bound = 8 * 1024
    broker = Broker(BrokerConfig(max_unwritten_bytes=bound), codec=codec)
    sub = subscriber(broker, codec, qos=1)
    pub = publisher(broker, codec)
    sub.conn.set_unwritten(0, 0.0)
    size = len(codec.Publish("t/a", PAYLOAD, qos=1, packet_id=1).encode(5))
    kept = math.ceil(bound / size)
    publish(pub, codec, 20, qos=1)
    session = broker.sessions["sub"]
    data = sub.conn.data_to_send()
    assert len(data) == kept * size
    assert len(session.queue) == 20 - kept and session.stats.dropped_unwritten == 0
    sub.conn.set_unwritten(len(data), 1.0)  # nothing written yet: still behind
    assert sub.conn.data_to_send() == b"" and sub.conn.behind_since == 0.0
    sub.conn.set_unwritten(bound // 2, 1.0)  # below the bound: the queue moves on
    more = sub.conn.data_to_send()
    assert len(more) > 0 and len(session.queue) == 20 - kept - len(more) // size
    with pytest.raises(Exception, match="set_unwritten"):
        sub.conn.set_unwritten(10**9, 1.0)


def test_a_client_behind_past_the_stall_timeout_is_disconnected(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(max_unwritten_bytes=4096, write_stall_timeout=5.0),
                    codec=codec)
    sub = subscriber(broker, codec)
    pub = publisher(broker, codec)
    publish(pub, codec, 10, now=1.0)
    assert sub.conn.behind_since == 1.0
    assert broker.tick(5.9) == []
    [closed] = of_type(broker.tick(6.0), ConnectionClosed)
    # 5.0: DISCONNECT 0x97 Quota exceeded (§3.14.2.1: "An implementation or
    # administrative imposed limit has been exceeded").
    assert closed.connection is sub.conn and closed.reason_code == 0x97
    assert isinstance(sub.received()[-1], codec.Disconnect)


def test_a_client_that_catches_up_is_not_disconnected(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(max_unwritten_bytes=4096, write_stall_timeout=5.0),
                    codec=codec)
    sub = subscriber(broker, codec)
    pub = publisher(broker, codec)
    publish(pub, codec, 10, now=1.0)
    sub.received()
    assert broker.tick(10.0) == [] and not sub.conn.closed


# The session's queue -------------------------------------------------------------------


def test_qos1_beyond_receive_maximum_queues_up_to_max_queued_messages(
        codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(max_queued_messages=3), codec=codec)
    sub = subscriber(broker, codec, qos=1, properties=Properties(receive_maximum=2))
    pub = publisher(broker, codec)
    publish(pub, codec, 10, qos=1)
    session = broker.sessions["sub"]
    first = sub.received()
    assert numbers(first) == [0, 1] and len(session.queue) == 3
    # Mosquitto's rule: the new messages past the bound are dropped.
    assert session.stats.dropped_queue_full == 5
    [dropped] = of_type(pub.events, DeliveriesDropped)
    assert (dropped.reason, dropped.total) == ("queue full", 1)
    got = []
    for packet in first:
        sub.send(codec.PubAck(packet.packet_id))
    while True:
        packets = sub.received()
        if not packets:
            break
        got += numbers(packets)
        for packet in packets:
            sub.send(codec.PubAck(packet.packet_id))
    assert got == [2, 3, 4] and not session.queue and session.queued_bytes == 0


def test_max_queued_bytes(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(max_queued_bytes=2500), codec=codec)
    subscriber(broker, codec, qos=1, properties=Properties(receive_maximum=1))
    pub = publisher(broker, codec)
    publish(pub, codec, 6, qos=1)
    session = broker.sessions["sub"]
    # One in flight; 1003 bytes (payload and topic) each queued while under 2500: 3.
    assert len(session.inflight) == 1 and len(session.queue) == 3
    assert session.queued_bytes == 3 * (len(PAYLOAD) + len("t/a"))
    assert session.stats.dropped_queue_full == 2


@pytest.mark.parametrize("version", [4, 5])
def test_offline_session_queue_is_bounded(codec: ModuleType, version: int) -> None:
    broker = Broker(BrokerConfig(max_queued_messages=4), codec=codec)
    persistent: dict[str, object] = {"clean_start": False}
    if version == 5:
        persistent["properties"] = Properties(session_expiry_interval=100)
    sub = subscriber(broker, codec, qos=1, version=version, **persistent)
    sub.conn.connection_lost(1.0)
    pub = publisher(broker, codec)
    publish(pub, codec, 10, qos=1, now=2.0)
    publish(pub, codec, 3, qos=0, now=2.0, start=100)
    session = broker.sessions["sub"]
    assert len(session.queue) == 4
    assert session.stats.dropped_queue_full == 6 and session.stats.dropped_offline == 3
    again = FakeClient(broker, codec, version=version)
    assert again.connect("sub", now=3.0, **persistent).session_present
    assert numbers(again.received()) == [0, 1, 2, 3]


# Session Expiry cap --------------------------------------------------------------------


def test_session_expiry_capped_and_told_in_connack(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(max_session_expiry=60), codec=codec)
    client = FakeClient(broker, codec)
    connack = client.connect("a", properties=Properties(session_expiry_interval=3600))
    # §3.2.2.3.2: the CONNACK carries the interval the server uses when it differs.
    assert connack.properties.session_expiry_interval == 60
    assert broker.sessions["a"].expiry_interval == 60
    under = FakeClient(broker, codec)
    connack = under.connect("b", properties=Properties(session_expiry_interval=30))
    assert connack.properties.session_expiry_interval is None
    # DISCONNECT may change it (§3.14.2.2.2), within the cap too.
    under.send(codec.Disconnect(properties=Properties(session_expiry_interval=7200)), 1.0)
    assert broker.sessions["b"].expiry_interval == 60
    assert [e.client_id for e in of_type(broker.tick(61.0), SessionExpired)] == ["b"]


def test_v311_persistent_session_expires_after_the_cap(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(max_session_expiry=60), codec=codec)
    client = FakeClient(broker, codec, version=4)
    client.connect("s", clean_start=False)
    client.conn.connection_lost(1.0)
    assert broker.next_deadline() == 61.0
    assert [e.client_id for e in of_type(broker.tick(61.0), SessionExpired)] == ["s"]
    # No cap: it never expires.
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec, version=4)
    client.connect("s", clean_start=False)
    assert broker.sessions["s"].expiry_interval == SESSION_NEVER_EXPIRES


# Maximum QoS and Retain Available --------------------------------------------------------


def test_defaults_offer_qos2_and_retain(codec: ModuleType) -> None:
    connack = FakeClient(Broker(codec=codec), codec).connect("c")
    props = connack.properties
    assert props.maximum_qos is None and props.retain_available == 1  # absent: 2
    assert props.session_expiry_interval is None


@pytest.mark.parametrize("version", [4, 5])
def test_publish_above_maximum_qos(codec: ModuleType, version: int) -> None:
    broker = Broker(BrokerConfig(maximum_qos=1), codec=codec)
    client = FakeClient(broker, codec, version=version)
    connack = client.connect("c")
    if version == 5:
        assert connack.properties.maximum_qos == 1  # [MQTT-3.2.2-9]
    client.send(codec.Publish("t/a", b"m", qos=1, packet_id=1))
    assert client.received() == [codec.PubAck(1)]
    [closed] = of_type(client.send(codec.Publish("t/a", b"m", qos=2, packet_id=2)),
                       ConnectionClosed)
    assert closed.error is not None and closed.error.rule == "MQTT-3.2.2-11"
    if version == 5:  # §3.2.2.3.4: DISCONNECT 0x9B QoS not supported
        assert closed.reason_code == 0x9B
        assert client.received() == [codec.Disconnect(reason_code=0x9B)]
    else:  # 3.1.1 has no DISCONNECT from the server: the connection closes
        assert closed.reason_code is None and client.received() == []


@pytest.mark.parametrize("version", [4, 5])
def test_subscribe_granted_at_most_maximum_qos(codec: ModuleType, version: int) -> None:
    broker = Broker(BrokerConfig(maximum_qos=1), codec=codec)
    sub = FakeClient(broker, codec, version=version)
    sub.connect("s")
    # [MQTT-3.2.2-10]: a SUBSCRIBE asking QoS 2 is accepted, granted 1.
    assert sub.subscribe(("t/#", 2), ("u", 0)).reason_codes == [1, 0]
    pub = publisher(broker, codec)
    pub.send(codec.Publish("t/a", b"m", qos=1, packet_id=1))
    [delivered] = sub.received()
    assert delivered.qos == 1


@pytest.mark.parametrize("version", [4, 5])
def test_retain_not_available(codec: ModuleType, version: int) -> None:
    broker = Broker(BrokerConfig(retain_available=False), codec=codec)
    client = FakeClient(broker, codec, version=version)
    connack = client.connect("c")
    if version == 5:
        assert connack.properties.retain_available == 0
    [closed] = of_type(client.send(codec.Publish("t/a", b"m", retain=True)), ConnectionClosed)
    assert closed.error is not None and closed.error.rule == "MQTT-3.2.2-14"
    assert len(broker.retained) == 0
    if version == 5:  # §3.2.2.3.5: DISCONNECT 0x9A Retain not supported
        assert client.received() == [codec.Disconnect(reason_code=0x9A)]
    else:
        assert client.received() == []


@pytest.mark.parametrize("available", [True, False])
def test_the_servers_own_retained_message_follows_retain_available(
        codec: ModuleType, available: bool) -> None:
    """Broker.publish(retain=True) keeps the message as a client's would; without Retain
    Available it is refused as a client's RETAIN 1 is [MQTT-3.2.2-14]: nothing stored,
    nothing routed."""
    broker = Broker(BrokerConfig(retain_available=available), codec=codec)
    early = subscriber(broker, codec)
    if available:
        broker.publish("t/sys", b"up", retain=True, now=0.0)
        [live] = early.received()
        assert live.payload == b"up" and not live.retain  # [MQTT-3.3.1-12]
    else:
        with pytest.raises(SessionError, match=r"retain_available.*MQTT-3\.2\.2-14"):
            broker.publish("t/sys", b"up", retain=True, now=0.0)
        assert early.received() == []
    newcomer = FakeClient(broker, codec)
    newcomer.connect("late")
    newcomer.subscribe(("t/#", 0))
    retained = newcomer.received()
    assert len(broker.retained) == int(available)
    assert [(p.payload, p.retain) for p in retained] == ([(b"up", True)] if available else [])
    # Without RETAIN the server's message goes out either way.
    broker.publish("t/sys", b"plain", now=0.0)
    assert [p.payload for p in early.received()] == [b"plain"]


@pytest.mark.parametrize(("config", "will", "code"), [
    ({"maximum_qos": 0}, {"qos": 1}, 0x9B),  # [MQTT-3.2.2-12]
    ({"retain_available": False}, {"retain": True}, 0x9A),  # [MQTT-3.2.2-13]
])
@pytest.mark.parametrize("version", [4, 5])
def test_will_beyond_the_limits_refuses_the_connection(
        codec: ModuleType, version: int, config: dict[str, object], will: dict[str, object],
        code: int) -> None:
    broker = Broker(BrokerConfig(**config), codec=codec)  # type: ignore[arg-type]
    client = FakeClient(broker, codec, version=version)
    events = client.send(codec.Connect("c", protocol_version=version,
                                       will=codec.Will("w", b"x", **will)))
    [closed] = of_type(events, ConnectionClosed)
    assert client.conn.closed and "c" not in broker.sessions
    if version == 5:
        assert client.received() == [codec.ConnAck(reason_code=code)]
    else:  # no 3.1.1 return code fits: closed without CONNACK (3.1.1 [MQTT-3.2.2-6])
        assert client.received() == []


@pytest.mark.parametrize("bad", [
    {"max_unwritten_bytes": 0}, {"max_queued_messages": 0}, {"max_queued_bytes": -1},
    {"max_session_expiry": 0}, {"write_stall_timeout": 0}, {"maximum_qos": 3},
    {"max_unwritten_messages": None},
])
def test_config_bounds_checked(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        BrokerConfig(**bad)  # type: ignore[arg-type]


def test_a_connection_behind_asks_the_glue_for_a_report(codec: ModuleType) -> None:
    # At the message bound, with few bytes, a transport is never paused, so never
    # resumed: the layer lists the connection in outgoing() with no data, so that the
    # glue reports what its transport still holds.
    broker = Broker(BrokerConfig(max_unwritten_messages=5), codec=codec)
    sub = subscriber(broker, codec)
    pub = publisher(broker, codec)
    sub.conn.set_unwritten(0, 0.0)
    publish(pub, codec, 5, payload=b"y" * 8)
    [out] = [o for o in broker.outgoing() if o.connection is sub.conn]
    taken = len(out.data)
    sub.conn.set_unwritten(taken, 1.0)  # the transport holds all five
    publish(pub, codec, 1, payload=b"y" * 8, start=5)  # dropped: behind
    assert broker.sessions["sub"].stats.dropped_unwritten == 1
    [ask] = [o for o in broker.outgoing() if o.connection is sub.conn]
    assert ask.data == b"" and not ask.close and sub.conn.wants_report
    sub.conn.set_unwritten(0, 2.0)  # all written now
    assert sub.conn.behind_since is None and not sub.conn.wants_report
    assert broker.outgoing() == []  # asked once, answered: no loop
    publish(pub, codec, 1, payload=b"y" * 8, start=6)
    assert numbers(sub.received()) == [6]


@pytest.mark.parametrize("caught_up", [True, False])
def test_stall_timeout_asks_for_a_report_before_closing(codec: ModuleType,
                                                        caught_up: bool) -> None:
    broker = Broker(BrokerConfig(max_unwritten_bytes=4096, write_stall_timeout=5.0),
                    codec=codec)
    sub = subscriber(broker, codec)
    pub = publisher(broker, codec)
    sub.conn.set_unwritten(0, 0.0)
    publish(pub, codec, 10, now=1.0)
    taken = len(sub.conn.data_to_send())
    sub.conn.set_unwritten(taken, 1.0)
    broker.outgoing()
    assert broker.tick(6.0) == [] and not sub.conn.closed
    [ask] = broker.outgoing()
    assert ask.connection is sub.conn and ask.data == b""
    sub.conn.set_unwritten(0 if caught_up else taken, 6.0)
    closed = of_type(broker.tick(6.0), ConnectionClosed)
    assert sub.conn.closed is (not caught_up) and len(closed) == (0 if caught_up else 1)
