"""The server side's CONNECT handling, keep-alive, and its answers to bad input, packet
by packet, on both codec implementations."""

from __future__ import annotations

from types import ModuleType

import pytest
from session_helpers import FakeClient, of_type

from mqttwire import Properties
from mqttwire.session import (
    Broker,
    BrokerConfig,
    ClientConnected,
    ClientRefused,
    ConnectionClosed,
    ConnectionState,
    SessionError,
)


def test_v5_connect_gets_connack_with_what_the_server_offers(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(receive_maximum=10, topic_alias_maximum=5), codec=codec)
    client = FakeClient(broker, codec)
    connack = client.connect("c1")
    assert connack.reason_code == 0 and not connack.session_present
    props = connack.properties
    assert props.receive_maximum == 10
    assert props.topic_alias_maximum == 5
    assert props.maximum_packet_size == 1024 * 1024
    assert props.server_keep_alive is None
    [event] = of_type(client.events, ClientConnected)
    assert event.client_id == "c1" and event.version == 5 and not event.session_present
    assert client.conn.state is ConnectionState.CONNECTED
    assert "c1" in broker.sessions


def test_empty_client_id_is_assigned(codec: ModuleType) -> None:
    # 5.0 [MQTT-3.1.3-6], [MQTT-3.1.3-7]: a unique id, returned in the CONNACK.
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    connack = client.connect("")
    assigned = connack.properties.assigned_client_identifier
    assert assigned and assigned in broker.sessions
    # 3.1.1 [MQTT-3.1.3-6]: assigned too, but there is no property to say which.
    v4 = FakeClient(broker, codec, version=4)
    assert v4.connect("").reason_code == 0
    assert v4.conn.client_id and v4.conn.client_id != assigned


def test_v311_empty_client_id_without_clean_session_is_refused(codec: ModuleType) -> None:
    # 3.1.1 [MQTT-3.1.3-8]: CONNACK 0x02 Identifier rejected, then close.
    client = FakeClient(Broker(codec=codec), codec, version=4)
    connack = client.connect("", clean_start=False)
    assert connack.reason_code == 0x02
    assert client.conn.closed
    assert of_type(client.events, ClientRefused)[0].reason_code == 0x02


def test_v31_client_id_rules(codec: ModuleType) -> None:
    # MQTT 3.1 §3.1: 1 to 23 characters, else return code 2.
    broker = Broker(codec=codec)
    assert FakeClient(broker, codec, version=3).connect("").reason_code == 0x02
    assert FakeClient(broker, codec, version=3).connect("x" * 24).reason_code == 0x02
    assert FakeClient(broker, codec, version=3).connect("x" * 23).reason_code == 0


def test_enhanced_authentication_is_refused(codec: ModuleType) -> None:
    # [MQTT-4.12.0-1]: CONNACK 0x8C Bad authentication method, then close.
    client = FakeClient(Broker(codec=codec), codec)
    connack = client.connect("c", properties=Properties(authentication_method="SCRAM"))
    assert connack.reason_code == 0x8C
    assert client.conn.closed
    # [MQTT-3.1.4-6]: nothing after a refused CONNECT is processed.
    assert client.send(codec.PingReq()) == []
    assert client.received() == []


def test_first_packet_not_connect_closes_without_answer(codec: ModuleType) -> None:
    # [MQTT-3.1.0-1]; no CONNACK has gone out, so no DISCONNECT either [MQTT-3.14.0-1].
    client = FakeClient(Broker(codec=codec), codec)
    events = client.send(codec.PingReq())
    [closed] = of_type(events, ConnectionClosed)
    assert closed.error is not None and closed.error.rule == "MQTT-3.1.0-1"
    assert closed.reason_code is None
    assert client.conn.closed and client.received() == []


def test_first_packet_not_connect_as_decoded_packet(codec: ModuleType) -> None:
    client = FakeClient(Broker(codec=codec), codec)
    events = client.conn.receive_packet(codec.PingReq(), 0.0)
    assert of_type(events, ConnectionClosed)[0].error.rule == "MQTT-3.1.0-1"


def test_second_connect_v5_gets_disconnect_0x82(codec: ModuleType) -> None:
    # [MQTT-3.1.0-2]: a Protocol Error; 5.0 sends DISCONNECT 0x82 [MQTT-4.13.1-1].
    client = FakeClient(Broker(codec=codec), codec)
    client.connect("c")
    events = client.send(codec.Connect("c"))
    assert [p.reason_code for p in client.received()] == [0x82]
    closed = of_type(events, ConnectionClosed)[0]
    assert closed.reason_code == 0x82 and closed.error.rule == "MQTT-3.1.0-2"
    assert client.conn.closed


def test_second_connect_v311_closes_without_disconnect(codec: ModuleType) -> None:
    client = FakeClient(Broker(codec=codec), codec, version=4)
    client.connect("c")
    client.send(codec.Connect("c", protocol_version=4))
    assert client.received() == []
    assert client.conn.closed


def test_unsupported_protocol_level_gets_connack_0x01(codec: ModuleType) -> None:
    # 3.1.1 [MQTT-3.1.2-2]: return code 0x01, then close.  Level 6 CONNECT, by hand.
    client = FakeClient(Broker(codec=codec), codec, version=4)
    body = b"\x00\x04MQTT\x06\x02\x00\x3c\x00\x01c"
    client.send_bytes(bytes((0x10, len(body))) + body)
    assert [p.reason_code for p in client.received()] == [1]
    assert client.conn.closed


def test_malformed_packet_after_connack_gets_disconnect_0x81(codec: ModuleType) -> None:
    client = FakeClient(Broker(codec=codec), codec)
    client.connect("c")
    events = client.send_bytes(b"\x36\x00")  # PUBLISH with QoS 3 [MQTT-3.3.1-4]
    assert [p.reason_code for p in client.received()] == [0x81]
    closed = of_type(events, ConnectionClosed)[0]
    assert closed.error.rule == "MQTT-3.3.1-4"


def test_packets_before_bad_bytes_are_still_handled(codec: ModuleType) -> None:
    client = FakeClient(Broker(codec=codec), codec)
    client.connect("c")
    client.send_bytes(codec.PingReq().encode(5) + b"\x36\x00")
    packets = client.received()
    assert isinstance(packets[0], codec.PingResp)
    assert packets[1].reason_code == 0x81


def test_packet_too_large_gets_disconnect_0x95(codec: ModuleType) -> None:
    client = FakeClient(Broker(BrokerConfig(max_packet_size=100), codec=codec), codec)
    client.connect("c")
    client.send(codec.Publish("t", b"x" * 200))
    assert [p.reason_code for p in client.received()] == [0x95]
    assert client.conn.closed


def test_server_only_packets_from_a_client_are_protocol_errors(codec: ModuleType) -> None:
    # §2.1.2: SUBACK goes only from Server to Client.
    client = FakeClient(Broker(codec=codec), codec)
    client.connect("c")
    client.send(codec.SubAck(1, [0]))
    assert [p.reason_code for p in client.received()] == [0x82]


def test_auth_without_authentication_method_is_a_protocol_error(codec: ModuleType) -> None:
    # [MQTT-4.12.0-7]
    client = FakeClient(Broker(codec=codec), codec)
    client.connect("c")
    events = client.send(codec.Auth(reason_code=0x18,
                                    properties=Properties(authentication_method="x")))
    assert [p.reason_code for p in client.received()] == [0x82]
    assert of_type(events, ConnectionClosed)[0].error.rule == "MQTT-4.12.0-7"


def test_pingreq_gets_pingresp(codec: ModuleType) -> None:
    client = FakeClient(Broker(codec=codec), codec, version=4)
    client.connect("c")
    client.send(codec.PingReq())
    assert client.received() == [codec.PingResp()]  # [MQTT-3.12.4-1]


# Keep-alive ---------------------------------------------------------------------------


def test_keep_alive_timeout_v5(codec: ModuleType) -> None:
    # [MQTT-3.1.2-22]: nothing for 1.5 x Keep Alive: close (5.0: DISCONNECT 0x8D).
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect("c", keep_alive=10, now=0.0)
    assert broker.next_deadline() == 15.0
    assert broker.tick(14.9) == []
    client.send(codec.PingReq(), now=10.0)  # any packet restarts the count
    client.received()
    assert of_type(broker.tick(15.0), ConnectionClosed) == []
    assert broker.next_deadline() == 25.0
    events = broker.tick(25.0)
    assert of_type(events, ConnectionClosed)[0].reason_code == 0x8D
    assert [p.reason_code for p in client.received()] == [0x8D]
    assert client.conn.closed


def test_keep_alive_timeout_v311_just_closes(codec: ModuleType) -> None:
    # 3.1.1 [MQTT-3.1.2-24]
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec, version=4)
    client.connect("c", keep_alive=4)
    assert of_type(broker.tick(6.0), ConnectionClosed)
    assert client.received() == [] and client.conn.closed


def test_keep_alive_zero_has_no_deadline(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    FakeClient(broker, codec).connect("c", keep_alive=0)
    assert broker.next_deadline() is None


def test_server_keep_alive_caps_the_clients(codec: ModuleType) -> None:
    # §3.2.2.3.14: the Server Keep Alive replaces the client's [MQTT-3.2.2-21]; the
    # server enforces its own value then.
    broker = Broker(BrokerConfig(max_keep_alive=30), codec=codec)
    client = FakeClient(broker, codec)
    connack = client.connect("c", keep_alive=100)
    assert connack.properties.server_keep_alive == 30
    assert client.conn.keep_alive == 30
    assert broker.next_deadline() == 45.0
    assert of_type(broker.tick(45.0), ConnectionClosed)[0].reason_code == 0x8D
    # Keep Alive 0 (none) is capped as well.
    other = FakeClient(broker, codec)
    assert other.connect("d", keep_alive=0).properties.server_keep_alive == 30
    # Within the cap: no Server Keep Alive, [MQTT-3.2.2-22] the client's value holds.
    third = FakeClient(broker, codec)
    assert third.connect("e", keep_alive=20).properties.server_keep_alive is None
    assert third.conn.keep_alive == 20


def test_connect_timeout(codec: ModuleType) -> None:
    broker = Broker(BrokerConfig(connect_timeout=5.0), codec=codec)
    client = FakeClient(broker, codec, now=100.0)
    assert broker.next_deadline() == 105.0
    events = broker.tick(105.0)
    assert of_type(events, ConnectionClosed)[0].connection is client.conn
    assert client.conn.closed


def test_outgoing_lists_each_connection_with_output(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    a = FakeClient(broker, codec)
    b = FakeClient(broker, codec)
    a.send(codec.Connect("a"))
    b.send(codec.Connect("b"))
    out = broker.outgoing()
    assert [o.connection for o in out] == [a.conn, b.conn]
    assert all(isinstance(codec.decode(o.data), codec.ConnAck) and not o.close for o in out)
    assert broker.outgoing() == []
    with pytest.raises(SessionError, match="0x84 is not one a DISCONNECT may carry"):
        a.conn.disconnect(0.0, reason_code=0x84)  # a CONNACK's code: nothing sent
    assert broker.outgoing() == [] and not a.conn.closed
    a.conn.disconnect(0.0)
    [(conn, data, close)] = broker.outgoing()
    assert conn is a.conn and close and codec.decode(data).reason_code == 0x98


def test_connection_lost_reports_close(codec: ModuleType) -> None:
    client = FakeClient(Broker(codec=codec), codec)
    client.connect("c")
    [closed] = of_type(client.conn.connection_lost(1.0), ConnectionClosed)
    assert closed.by_client and closed.reason_code is None and closed.client_id == "c"
    assert client.conn.connection_lost(2.0) == []
    assert "ServerConnection" in repr(client.conn) and "closed" in repr(client.conn)


def test_data_to_send_takes_a_connection_out_of_outgoing(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.send(codec.Connect("a"))
    assert isinstance(codec.decode(client.conn.data_to_send()), codec.ConnAck)
    assert broker.outgoing() == []
