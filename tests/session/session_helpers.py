"""Drivers for the session tests: a fake client that feeds a ServerConnection encoded
packets, and a fake server that feeds a ClientSession; both decode what comes back with
the codec under test."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from mqttwire.session import Broker, ClientSession, ServerConnection
from mqttwire.session.events import Event


class FakeClient:
    """One network connection to ``broker``, driven packet by packet."""

    def __init__(self, broker: Broker, codec: ModuleType, version: int = 5,
                 now: float = 0.0, info: Any = None) -> None:
        self.broker = broker
        self.codec = codec
        self.version = version
        self.conn: ServerConnection = broker.new_connection(now, info=info)
        self._decoder = codec.StreamDecoder(version)
        self._pending: list[Any] = []
        self.events: list[Event] = []

    def send(self, packet: Any, now: float = 0.0) -> list[Event]:
        return self.send_bytes(packet.encode(self.version), now)

    def send_bytes(self, data: bytes, now: float = 0.0) -> list[Event]:
        events = self.conn.receive_data(data, now)
        self.events += events
        return events

    def connect(self, client_id: str = "c", now: float = 0.0, **kwargs: Any) -> Any:
        """CONNECT; returns the CONNACK."""
        kwargs.setdefault("protocol_version", self.version)
        self.send(self.codec.Connect(client_id, **kwargs), now)
        packets = self.received()
        assert packets and isinstance(packets[0], self.codec.ConnAck), packets
        self._pending = packets[1:]
        return packets[0]

    def received(self) -> list[Any]:
        """The packets the server sent since the last call."""
        packets, self._pending = self._pending, []
        return packets + self._decoder.feed(self.conn.data_to_send())

    def subscribe(self, *subs: Any, pid: int = 1, now: float = 0.0,
                  properties: Any = None) -> Any:
        subscriptions = [s if isinstance(s, self.codec.Subscription)
                         else self.codec.Subscription(s[0], qos=s[1]) for s in subs]
        self.send(self.codec.Subscribe(pid, subscriptions, properties=properties), now)
        packets = self.received()
        assert isinstance(packets[0], self.codec.SubAck), packets
        self._pending = packets[1:]
        return packets[0]


class FakeServer:
    """The server end of a ClientSession's connections, driven packet by packet."""

    def __init__(self, client: ClientSession, codec: ModuleType) -> None:
        self.client = client
        self.codec = codec
        self._decoder = codec.StreamDecoder(None)

    def new_connection(self) -> None:
        self._decoder = self.codec.StreamDecoder(None)

    def received(self) -> list[Any]:
        return self._decoder.feed(self.client.data_to_send())

    def send(self, packet: Any, now: float = 0.0) -> list[Event]:
        return self.client.receive_data(packet.encode(self.client.version), now)

    def connect(self, now: float = 0.0, session_present: bool = False,
                properties: Any = None, **kwargs: Any) -> list[Event]:
        """client.connect(), check the CONNECT, answer CONNACK 0; returns the events."""
        self.new_connection()
        self.client.connect(now, **kwargs)
        connect = self.received()[0]
        assert isinstance(connect, self.codec.Connect), connect
        self.last_connect = connect
        return self.send(self.codec.ConnAck(session_present=session_present,
                                            properties=properties), now)


def of_type(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]
