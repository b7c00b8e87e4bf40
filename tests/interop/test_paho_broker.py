"""paho-mqtt clients against examples/broker.py, at protocol levels 3, 4 and 5.

The broker runs in a subprocess under each mqttwire implementation (the
``example_broker`` fixture), so every test here runs for both.  Each message a client
receives arrives in order on its connection; tests publish a marker message last and read
up to it, which proves that nothing else (no duplicate, no stray retained message) was
delivered before it without waiting for a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.interop

mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")
PacketTypes = mqtt.PacketTypes
Properties = mqtt.Properties
ReasonCode = mqtt.ReasonCode
SubscribeOptions = mqtt.SubscribeOptions

LEVELS = [pytest.param(3, id="v31"), pytest.param(4, id="v311"), pytest.param(5, id="v5")]


def summary(messages: list[Any]) -> list[tuple[str, bytes, int, bool]]:
    return [(m.topic, m.payload, m.qos, bool(m.retain)) for m in messages]


@pytest.mark.parametrize("level", LEVELS)
def test_qos_levels_and_overlapping_wildcards(paho: Callable[..., Any], level: int) -> None:
    sub = paho(level, "sub")
    # Three overlapping filters: "t/a/x" matches all of them, "t/b/y" only "t/#".
    assert sub.subscribe([("t/+/x", 2), ("t/#", 1), ("t/a/+", 0)]) == [2, 1, 0]
    pub = paho(level, "pub")
    for qos in (0, 1, 2):
        pub.publish("t/a/x", b"x%d" % qos, qos)
    pub.publish("t/b/y", b"y2", 2)
    # One copy each, at the highest QoS of the matching subscriptions (2 for t/a/x, 1
    # for t/b/y) min'ed with the message's QoS [MQTT-3.3.5-1] [MQTT-3.8.4-8 (5.0)].
    # (Sorted: paho hands QoS 2 messages over later, see Paho.collect.)
    assert sorted(summary(sub.collect(pub))) == [
        ("t/a/x", b"x0", 0, False),
        ("t/a/x", b"x1", 1, False),
        ("t/a/x", b"x2", 2, False),
        ("t/b/y", b"y2", 1, False),
    ]


@pytest.mark.parametrize("level", LEVELS)
def test_retained_messages(paho: Callable[..., Any], level: int) -> None:
    early = paho(level, "early")
    early.subscribe("r/#", 2)
    pub = paho(level, "pub")
    pub.publish("r/a", b"first", 1, retain=True)
    pub.publish("r/a", b"second", 2, retain=True)  # replaces "first" [MQTT-3.3.1-5]
    pub.publish("r/a", b"not kept", 1)  # RETAIN 0: stored nowhere [MQTT-3.3.1-12]
    pub.publish("r/b", b"zero", 0, retain=True)  # QoS 0 retained too [MQTT-3.3.1-7]
    # An established subscription gets RETAIN 0 whatever the publisher set [MQTT-3.3.1-9].
    assert sorted(summary(early.collect(pub))) == [
        ("r/a", b"first", 1, False),
        ("r/a", b"not kept", 1, False),
        ("r/a", b"second", 2, False),
        ("r/b", b"zero", 0, False),
    ]

    # A new subscription gets the last retained message of each matching topic, with
    # RETAIN 1 [MQTT-3.3.1-6] [MQTT-3.3.1-8], at min(granted QoS, stored QoS).
    late = paho(level, "late")
    late.subscribe("r/+", 1)
    assert sorted(summary(late.collect(pub))) == [
        ("r/a", b"second", 1, True),
        ("r/b", b"zero", 0, True),
    ]

    # An empty retained message is forwarded as normal and clears the topic
    # [MQTT-3.3.1-10]; it is not stored itself [MQTT-3.3.1-11].
    pub.publish("r/a", b"", 1, retain=True)
    assert summary(early.collect(pub)) == [("r/a", b"", 1, False)]
    later = paho(level, "later")
    later.subscribe("r/#", 2)
    assert summary(later.collect(pub)) == [("r/b", b"zero", 0, True)]


@pytest.mark.parametrize("level", LEVELS)
def test_will_published_on_abrupt_close(paho: Callable[..., Any], level: int) -> None:
    watcher = paho(level, "watcher")
    watcher.subscribe("will/#", 2)
    doomed = paho(level, "doomed", will=("will/doomed", b"gone", 1, False))
    doomed.drop()  # the socket closes without DISCONNECT
    assert summary([watcher.receive()]) == [("will/doomed", b"gone", 1, False)]


@pytest.mark.parametrize("level", LEVELS)
def test_will_retained(paho: Callable[..., Any], level: int) -> None:
    watcher = paho(level, "watcher")
    watcher.subscribe("will/#", 2)
    doomed = paho(level, "doomed", will=("will/kept", b"gone", 2, True))
    doomed.drop()
    # Forwarded to the established subscription with RETAIN 0 [MQTT-3.3.1-9] ...
    assert summary([watcher.receive()]) == [("will/kept", b"gone", 2, False)]
    # ... and kept for the next one, which gets it with RETAIN 1 [MQTT-3.3.1-8].
    late = paho(level, "late")
    late.subscribe("will/#", 2)
    assert summary(late.collect(late)) == [("will/kept", b"gone", 2, True)]


@pytest.mark.parametrize("level", LEVELS)
def test_no_will_on_clean_disconnect(paho: Callable[..., Any], level: int) -> None:
    watcher = paho(level, "watcher")
    watcher.subscribe("will/#", 2)
    leaving = paho(level, "leaving", will=("will/leaving", b"gone", 1, False))
    leaving.disconnect()
    # A will published by mistake would go out as soon as the broker handles the close,
    # which on loopback takes milliseconds: wait that long before the marker, whose
    # order relative to the close is otherwise not defined.
    time.sleep(0.3)
    marker = paho(level, "marker")
    assert watcher.collect(marker) == []


@pytest.mark.parametrize("level", [pytest.param(4, id="v311"), pytest.param(5, id="v5")])
def test_will_published_on_keep_alive_timeout(paho: Callable[..., Any], level: int) -> None:
    watcher = paho(level, "watcher")
    watcher.subscribe("will/#", 1)
    started = time.monotonic()
    silent = paho(level, "silent", keepalive=1, will=("will/silent", b"timeout", 1, False))
    silent.client.loop_stop()  # no more packets, no PINGREQ: the connection stays open
    assert summary([watcher.receive()]) == [("will/silent", b"timeout", 1, False)]
    # Closed after 1.5 x Keep Alive without a packet [MQTT-3.1.2-24], not much earlier.
    assert time.monotonic() - started >= 1.4


@pytest.mark.parametrize("level", LEVELS)
def test_persistent_session_keeps_subscriptions_and_messages(
    paho: Callable[..., Any], level: int
) -> None:
    kwargs: dict[str, Any] = {"clean": False}
    if level == 5:
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 60
        kwargs["properties"] = props
    first = paho(level, "keeper", **kwargs)
    assert first.subscribe("p/#", 2) == [2]
    first.disconnect()
    pub = paho(level, "pub")
    pub.publish("p/1", b"while away", 2)
    again = paho(level, "keeper", **kwargs)
    if level > 3:  # MQTT 3.1 has no Session Present flag
        assert again.session_present
    got = summary(again.collect(pub))
    assert got == [("p/1", b"while away", 2, False)]


@pytest.mark.parametrize("level", LEVELS)
def test_session_taken_over(paho: Callable[..., Any], level: int) -> None:
    first = paho(level, "same")
    second = paho(level, "same")
    # 3.1.1 [MQTT-3.1.4-2] / 5.0 [MQTT-3.1.4-3]: the first connection is closed; a 5.0
    # client is told why, with DISCONNECT 0x8E Session taken over.
    reason = first.disconnects.get(timeout=10)
    if level == 5:
        assert reason == 0x8E
    second.subscribe("still/here", 1)  # the new connection works


# ---------------------------------------------------------------------------------------
# MQTT 5.0 only


def publish_properties() -> Any:
    props = Properties(PacketTypes.PUBLISH)
    props.PayloadFormatIndicator = 1
    props.MessageExpiryInterval = 120
    props.ContentType = "text/plain; charset=utf-8"
    props.ResponseTopic = "reply/here"
    props.CorrelationData = b"\x00\x01corr\xff"
    # Repeated names and their order must survive [MQTT-3.3.2-17] [MQTT-3.3.2-18].
    props.UserProperty = [("k", "1"), ("x", "y"), ("k", "2")]
    return props


def test_v5_properties_forwarded_intact_and_dropped_for_v3(paho: Callable[..., Any]) -> None:
    v5 = paho(5, "v5")
    v5.subscribe("m/#", 1)
    v311 = paho(4, "v311")
    v311.subscribe("m/#", 1)
    pub = paho(5, "pub")
    pub.publish("m/x", b"hello", 1, properties=publish_properties())
    got = v5.receive()
    assert (got.topic, got.payload) == ("m/x", b"hello")
    p = got.properties
    assert p.PayloadFormatIndicator == 1
    # Reduced by the time the message waited in the broker [MQTT-3.3.2-6]: well under 1 s.
    assert p.MessageExpiryInterval in (119, 120)
    assert p.ContentType == "text/plain; charset=utf-8"
    assert p.ResponseTopic == "reply/here"
    assert p.CorrelationData == b"\x00\x01corr\xff"
    assert p.UserProperty == [("k", "1"), ("x", "y"), ("k", "2")]
    # A 3.1.1 subscriber gets the message without any of them.
    old = v311.receive()
    assert (old.topic, old.payload, old.qos) == ("m/x", b"hello", 1)
    assert old.properties is None


def test_v5_expired_message_not_delivered(paho: Callable[..., Any]) -> None:
    connect_props = Properties(PacketTypes.CONNECT)
    connect_props.SessionExpiryInterval = 60
    away = paho(5, "away", properties=connect_props)
    away.subscribe("exp/#", 1)
    away.disconnect()
    pub = paho(5, "pub")
    short = Properties(PacketTypes.PUBLISH)
    short.MessageExpiryInterval = 1
    pub.publish("exp/short", b"expires", 1, properties=short)
    pub.publish("exp/long", b"waits", 1)
    time.sleep(1.2)
    back = paho(5, "away", clean=False, properties=connect_props)
    # Queued while the client was away, the first one expired: it is not delivered
    # [MQTT-3.3.2-5].
    assert [m.payload for m in back.collect(pub)] == [b"waits"]


def test_v5_subscription_identifiers(paho: Callable[..., Any]) -> None:
    sub = paho(5, "sub")
    for filter, ident in (("s/#", 7), ("s/+", 300)):
        props = Properties(PacketTypes.SUBSCRIBE)
        props.SubscriptionIdentifier = ident
        sub.subscribe(filter, 1, properties=props)
    sub.subscribe("s/x", 0)  # no identifier
    pub = paho(5, "pub")
    pub.publish("s/x", b"all three", 1)
    pub.publish("s/x/y", b"only s/#", 1)
    first, second = sub.receive(), sub.receive()
    # One copy carrying the identifiers of every matching subscription [MQTT-3.3.4-4].
    assert (first.payload, first.qos) == (b"all three", 1)
    assert sorted(first.properties.SubscriptionIdentifier) == [7, 300]
    assert second.payload == b"only s/#"
    assert second.properties.SubscriptionIdentifier == [7]


def test_v5_retain_as_published(paho: Callable[..., Any]) -> None:
    sub = paho(5, "sub")
    sub.subscribe("rap/keep", options=SubscribeOptions(qos=1, retainAsPublished=True))
    sub.subscribe("rap/clear", options=SubscribeOptions(qos=1, retainAsPublished=False))
    pub = paho(5, "pub")
    pub.publish("rap/keep", b"k", 1, retain=True)
    pub.publish("rap/clear", b"c", 1, retain=True)
    # [MQTT-3.3.1-13]: RETAIN as published; [MQTT-3.3.1-12]: otherwise 0.
    assert summary([sub.receive(), sub.receive()]) == [
        ("rap/keep", b"k", 1, True),
        ("rap/clear", b"c", 1, False),
    ]


def test_v5_retain_handling(paho: Callable[..., Any]) -> None:
    pub = paho(5, "pub")
    pub.publish("rh/t", b"kept", 1, retain=True)
    sub = paho(5, "sub")

    def subscribe_and_collect(handling: int) -> list[bytes]:
        sub.subscribe("rh/#", options=SubscribeOptions(qos=1, retainHandling=handling))
        return [m.payload for m in sub.collect(pub)]

    assert subscribe_and_collect(2) == []  # never [MQTT-3.3.1-11]
    sub.unsubscribe("rh/#")
    assert subscribe_and_collect(1) == [b"kept"]  # new subscription [MQTT-3.3.1-10]
    assert subscribe_and_collect(1) == []  # it existed already
    assert subscribe_and_collect(0) == [b"kept"]  # always [MQTT-3.3.1-9]


def test_v5_no_local(paho: Callable[..., Any]) -> None:
    both = paho(5, "both")
    both.subscribe("nl/#", options=SubscribeOptions(qos=1, noLocal=True))
    other = paho(5, "other")
    other.subscribe("nl/#", 1)
    both.publish("nl/own", b"mine", 1)
    # [MQTT-3.8.3-3]: not forwarded back to the publishing client.
    assert both.collect(other) == []
    assert [m.payload for m in other.collect(both)] == [b"mine"]


def test_v5_will_delay_interval(paho: Callable[..., Any]) -> None:
    watcher = paho(5, "watcher")
    watcher.subscribe("will/#", 1)
    will_props = Properties(PacketTypes.WILLMESSAGE)
    will_props.WillDelayInterval = 1
    connect_props = Properties(PacketTypes.CONNECT)
    connect_props.SessionExpiryInterval = 60  # the session outlives the connection
    will = ("will/late", b"delayed", 1, False, will_props)
    paho(5, "late", will=will, properties=connect_props).drop()
    # Back within the delay: no will [MQTT-3.1.3-9].
    paho(5, "late", will=will, clean=False, properties=connect_props).drop()
    started = time.monotonic()
    # Not back: the will comes once the Will Delay Interval has passed (MQTT 5.0
    # §3.1.3.2.2), and only once.
    assert summary([watcher.receive()]) == [("will/late", b"delayed", 1, False)]
    assert time.monotonic() - started >= 0.9
    assert watcher.collect(paho(5, "marker")) == []


def test_v5_disconnect_with_will_message(paho: Callable[..., Any]) -> None:
    watcher = paho(5, "watcher")
    watcher.subscribe("will/#", 1)
    leaving = paho(5, "leaving", will=("will/leaving", b"asked for", 1, False))
    leaving.disconnect(ReasonCode(PacketTypes.DISCONNECT, identifier=0x04))
    assert summary([watcher.receive()]) == [("will/leaving", b"asked for", 1, False)]


def test_v5_shared_subscription(paho: Callable[..., Any]) -> None:
    members = [paho(5, "m1"), paho(5, "m2")]
    for member in members:
        assert member.subscribe("$share/group/job/#", 1) == [1]
    pub = paho(5, "pub")
    for n in range(6):
        pub.publish("job/x", b"%d" % n, 1)
    # Each message goes to one member of the group (MQTT 5.0 §4.8.2); this broker
    # takes the connected members in turn.
    got = [[m.payload for m in member.collect(pub)] for member in members]
    assert sorted(got[0] + got[1]) == [b"%d" % n for n in range(6)]
    assert got[0] and got[1]


def test_v5_connack_advertises_capabilities(example_broker: Any) -> None:
    """The CONNACK says what the broker supports (MQTT 5.0 §3.2.2.3)."""
    props_seen: dict[str, Any] = {}
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="caps",
                         protocol=mqtt.MQTTv5)

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        props_seen.update(props.json())

    client.on_connect = on_connect
    client.connect(example_broker.host, example_broker.port)
    client.loop_start()
    try:
        deadline = time.monotonic() + 10
        while not props_seen and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        client.disconnect()
        client.loop_stop()
    assert props_seen["RetainAvailable"] == 1
    assert props_seen["WildcardSubscriptionAvailable"] == 1
    assert props_seen["SubscriptionIdentifierAvailable"] == 1
    assert props_seen["SharedSubscriptionAvailable"] == 1
    # The defaults of examples/broker.py's --receive-maximum, --topic-alias-maximum and
    # --max-packet-size; without --max-keep-alive the client's Keep Alive stands.
    assert props_seen["ReceiveMaximum"] == 64
    assert props_seen["TopicAliasMaximum"] == 16
    assert props_seen["MaximumPacketSize"] == 1024 * 1024
    assert "ServerKeepAlive" not in props_seen
    # Maximum QoS absent means 2 [MQTT-3.2.2-9].
    assert "MaximumQoS" not in props_seen
