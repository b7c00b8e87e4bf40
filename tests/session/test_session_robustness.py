"""Whatever bytes a peer sends, no exception escapes a session method: the connection
ends with an event that carries the error (MQTT 5.0 §4.13).  Hypothesis feeds random and
mutated packets to both sides, on both codec implementations."""

from __future__ import annotations

from types import ModuleType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_helpers import FakeClient, FakeServer, of_type

from mqttwire.session import (
    Broker,
    ClientSession,
    ConnectionClosed,
    Disconnected,
)

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def valid_stream(codec: ModuleType) -> bytes:
    return b"".join(p.encode(5) for p in (
        codec.Subscribe(1, [codec.Subscription("a/#", qos=2)]),
        codec.Publish("a/b", b"x", qos=2, packet_id=2),
        codec.PubRel(2),
        codec.Publish("a/c", b"y", qos=1, packet_id=3),
        codec.PingReq(),
        codec.Unsubscribe(4, ["a/#"]),
    ))


@SETTINGS
@given(data=st.data())
def test_server_never_raises_on_peer_input(codec: ModuleType, data: st.DataObject) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("c", will=codec.Will("w", b"gone"))
    stream = bytearray(valid_stream(codec))
    for _ in range(data.draw(st.integers(0, 4))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    stream += data.draw(st.binary(max_size=40))
    cut = data.draw(st.integers(0, len(stream)))
    events = client.send_bytes(bytes(stream[:cut]), 1.0)
    events += client.send_bytes(bytes(stream[cut:]), 2.0)
    events += broker.tick(1000.0)
    closed = of_type(events, ConnectionClosed)
    assert client.conn.closed == bool(closed)
    client.received()  # what was sent decodes


@SETTINGS
@given(data=st.data())
def test_client_never_raises_on_peer_input(codec: ModuleType, data: st.DataObject) -> None:
    client = ClientSession("me", codec=codec, topic_alias_maximum=2, receive_maximum=3,
                           auto_ack=data.draw(st.booleans()))
    server = FakeServer(client, codec)
    server.connect()
    client.subscribe(("a/#", 2), now=0.0)
    client.publish("a/b", b"out", qos=2, now=0.0)
    server.received()
    stream = bytearray(b"".join(p.encode(5) for p in (
        codec.SubAck(1, [2]),
        codec.Publish("a/b", b"x", qos=2, packet_id=2),
        codec.PubRec(2),
        codec.PubRel(2),
        codec.Publish("a/c", b"y", qos=1, packet_id=3),
        codec.PingResp(),
    )))
    for _ in range(data.draw(st.integers(0, 4))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    stream += data.draw(st.binary(max_size=40))
    events = client.receive_data(bytes(stream), 1.0)
    for message in list(client.unacknowledged):
        client.ack(message, now=2.0)
    events += client.tick(1000.0)
    assert not client.connected or not of_type(events, Disconnected)
    server.received()
