"""How each side tells its I/O glue to close: at once, or after lingering.

The side that closes first while its peer may still be writing lingers (docs/session.md,
"Closing"): it shuts its write side, reads and discards until the peer closes or the
linger time passes, then closes, so that no TCP reset destroys the DISCONNECT or the
refusing CONNACK it wrote last.  The server lingers whenever it ends the connection
(``Outgoing.linger``, ``ConnectionClosed.linger``: ``BrokerConfig.linger_timeout``);
the client when it does (``Disconnected.linger``: ``ClientSession``'s
``linger_timeout``).  Whoever closes second, or after a network loss, closes at once
(0.0).  Both codec implementations.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from session_helpers import FakeClient, FakeServer, of_type

from mqttwire.session import (
    Broker,
    BrokerConfig,
    ClientSession,
    ConnectionClosed,
    Disconnected,
    SessionError,
)


def closing(broker: Broker, client: FakeClient) -> tuple[list[Any], float, float]:
    """(the packets written last, Outgoing.linger, ConnectionClosed.linger) of the
    client's closed connection."""
    [out] = [o for o in broker.outgoing() if o.connection is client.conn]
    assert out.close
    [closed] = of_type(client.events, ConnectionClosed)
    return client.codec.StreamDecoder(client.version).feed(out.data), out.linger, closed.linger


# Server side -----------------------------------------------------------------------


def test_server_lingers_after_its_disconnect(codec: ModuleType) -> None:
    """DISCONNECT 0x93: a QoS 2 PUBLISH over our Receive Maximum of 1 [MQTT-3.3.4-7]."""
    broker = Broker(BrokerConfig(receive_maximum=1), codec=codec)
    client = FakeClient(broker, codec)
    client.connect()
    client.send(codec.Publish("t", b"1", qos=2, packet_id=1))
    client.send(codec.Publish("t", b"2", qos=2, packet_id=2))
    packets, *lingers = closing(broker, client)
    assert packets == [codec.PubRec(1), codec.Disconnect(reason_code=0x93)]
    assert lingers == [2.0, 2.0]
    assert client.conn.linger == 2.0  # for a caller that takes data_to_send() itself


def test_server_lingers_after_a_refusing_connack(codec: ModuleType) -> None:
    """CONNACK 0x8C: enhanced authentication is not supported."""
    broker = Broker(BrokerConfig(linger_timeout=0.5), codec=codec)
    client = FakeClient(broker, codec)
    client.send(codec.Connect("c", properties=codec.Properties(authentication_method="m")))
    [connack], *lingers = closing(broker, client)
    assert connack.reason_code == 0x8C
    assert lingers == [0.5, 0.5]


@pytest.mark.parametrize("version", [4, 5])
def test_server_lingers_when_it_ends_the_connection(codec: ModuleType, version: int) -> None:
    """A close of the server's own (keep-alive timeout; 3.1.1 sends nothing first) lingers
    too: whatever it wrote last is still on its way."""
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec, version=version)
    client.connect(keep_alive=10)
    broker.outgoing()
    client.events += broker.tick(15.0)
    packets, *lingers = closing(broker, client)
    assert packets == ([codec.Disconnect(reason_code=0x8D)] if version == 5 else [])
    assert lingers == [2.0, 2.0]


def test_server_closes_at_once_after_the_clients_disconnect(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect()
    broker.outgoing()
    client.send(codec.Disconnect())
    assert closing(broker, client) == ([], 0.0, 0.0)
    assert client.conn.linger == 0.0


def test_server_closes_at_once_after_a_network_loss(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    client = FakeClient(broker, codec)
    client.connect()
    broker.outgoing()
    client.events += client.conn.connection_lost(1.0)
    assert closing(broker, client) == ([], 0.0, 0.0)


def test_outgoing_still_unpacks_as_three() -> None:
    """``linger`` is an attribute: ``for conn, data, close in broker.outgoing()`` holds."""
    broker = Broker()
    conn = broker.new_connection(0.0)
    conn.disconnect(0.0)
    [(connection, data, close)] = broker.outgoing()
    assert (connection, data, close) == (conn, b"", True)


@pytest.mark.parametrize("value", [-1.0, float("inf"), float("nan")])
def test_broker_linger_timeout_checked(value: float) -> None:
    with pytest.raises(ValueError, match="linger_timeout"):
        BrokerConfig(linger_timeout=value)


# Client side -----------------------------------------------------------------------


def connected(codec: ModuleType, **kwargs: object) -> tuple[ClientSession, FakeServer]:
    client = ClientSession("me", codec=codec, **kwargs)  # type: ignore[arg-type]
    server = FakeServer(client, codec)
    server.connect()
    return client, server


def test_client_lingers_after_its_disconnect(codec: ModuleType) -> None:
    client, server = connected(codec, linger_timeout=1.5)
    [event] = client.disconnect(1.0)
    assert isinstance(event, Disconnected) and event.linger == 1.5
    assert server.received() == [codec.Disconnect()]


def test_client_lingers_after_its_protocol_error_disconnect(codec: ModuleType) -> None:
    """A second CONNACK [MQTT-3.2.0-2]: DISCONNECT 0x82, then the lingering close."""
    client, server = connected(codec)
    [event] = server.send(codec.ConnAck())
    assert isinstance(event, Disconnected) and event.reason_code == 0x82
    assert event.linger == 2.0


def test_client_lingers_when_the_server_is_silent(codec: ModuleType) -> None:
    """No PINGRESP: we close first, so we linger."""
    client, server = connected(codec, keep_alive=10)
    client.tick(10.0)
    assert server.received() == [codec.PingReq()]
    [event] = client.tick(20.0)
    assert isinstance(event, Disconnected) and event.linger == 2.0


def test_client_closes_at_once_after_the_servers_disconnect(codec: ModuleType) -> None:
    client, server = connected(codec)
    [event] = server.send(codec.Disconnect(reason_code=0x8B))
    assert isinstance(event, Disconnected) and event.by_server and event.linger == 0.0


def test_client_closes_at_once_after_a_refusing_connack(codec: ModuleType) -> None:
    client = ClientSession("me", codec=codec)
    server = FakeServer(client, codec)
    client.connect(0.0)
    server.received()
    events = server.send(codec.ConnAck(reason_code=0x87))
    [event] = of_type(events, Disconnected)
    assert event.linger == 0.0


def test_client_closes_at_once_after_a_network_loss(codec: ModuleType) -> None:
    client, _ = connected(codec)
    [event] = client.connection_lost(1.0)
    assert isinstance(event, Disconnected) and event.linger == 0.0


@pytest.mark.parametrize("value", [-1.0, float("inf"), float("nan")])
def test_client_linger_timeout_checked(value: float) -> None:
    with pytest.raises(SessionError, match="linger_timeout"):
        ClientSession("me", linger_timeout=value)
