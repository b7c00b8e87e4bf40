"""ClientSession and Broker talking to each other through bytes only, as the asyncio
glue will: the streaming-source case (deferred acknowledgement throttled by the Receive
Maximum, a resumed session after a lost connection), on both codec implementations."""

from __future__ import annotations

from types import ModuleType

from session_helpers import of_type

from mqttwire.session import (
    Broker,
    ClientSession,
    Connected,
    MessageReceived,
    PublishCompleted,
    ServerConnection,
    SubscribeCompleted,
)
from mqttwire.session.events import Event


class Net:
    """Every ClientSession's network connection to one Broker, moved by hand, as the
    asyncio glue would: bytes up, ``Broker.outgoing()`` down to each connection."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.links: dict[ServerConnection, ClientSession] = {}
        self.events: dict[str, list[Event]] = {}

    def connect(self, client: ClientSession, now: float) -> ServerConnection:
        conn = self.broker.new_connection(now)
        self.links[conn] = client
        client.connect(now)
        return conn

    def pump(self, now: float) -> None:
        """Move bytes both ways until everyone is quiet; each client's events are added
        to ``events`` under its Client Identifier."""
        while True:
            moved = False
            for conn, client in list(self.links.items()):
                up = client.data_to_send()
                if up:
                    moved = True
                    conn.receive_data(up, now)
            for out in self.broker.outgoing():
                client = self.links.get(out.connection)
                if client is None:
                    continue  # a dropped connection: the glue closes its socket
                if out.data:
                    moved = True
                    self.events.setdefault(client.client_id, []).extend(
                        client.receive_data(out.data, now))
            if not moved:
                return

    def take(self, client_id: str, kind: type) -> list[object]:
        events = self.events.pop(client_id, [])
        return of_type(events, kind)

    def drop(self, conn: ServerConnection, now: float) -> None:
        client = self.links.pop(conn)
        conn.connection_lost(now)
        client.connection_lost(now)


def test_deferred_acks_throttle_the_broker(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    net = Net(broker)
    consumer = ClientSession("spark", codec=codec, clean_start=True, auto_ack=False,
                             receive_maximum=2, session_expiry_interval=3600)
    conn = net.connect(consumer, 0.0)
    net.pump(0.0)
    assert net.take("spark", Connected)
    consumer.subscribe(("data/#", 1), now=0.0)
    net.pump(0.0)
    assert net.take("spark", SubscribeCompleted)[0].reason_codes == [1]  # type: ignore[attr-defined]

    producer = ClientSession("producer", codec=codec)
    net.connect(producer, 0.0)
    net.pump(0.0)
    for i in range(5):
        producer.publish("data/x", str(i).encode(), qos=1, now=1.0)
    net.pump(1.0)
    assert len(net.take("producer", PublishCompleted)) == 5

    # The broker holds back all but Receive Maximum (2) unacknowledged messages.
    got = [e.message for e in net.take("spark", MessageReceived)]  # type: ignore[attr-defined]
    assert [m.payload for m in got] == [b"0", b"1"]
    consumer.ack(got[0], now=2.0)
    consumer.ack(got[1], now=2.0)
    net.pump(2.0)
    got = [e.message for e in net.take("spark", MessageReceived)]  # type: ignore[attr-defined]
    assert [m.payload for m in got] == [b"2", b"3"]

    # The connection is lost before "2" and "3" are committed; the session survives
    # (expiry 3600) and the broker sends them again (DUP 1, same identifiers).  They are
    # still unacknowledged here, so they are recognised and not delivered twice.
    net.drop(conn, 3.0)
    net.connect(consumer, 4.0)
    net.pump(4.0)
    assert net.events["spark"] and \
        net.take("spark", Connected)[0].session_present  # type: ignore[attr-defined]
    assert [m.payload for m in consumer.unacknowledged] == [b"2", b"3"]
    for message in consumer.unacknowledged:
        consumer.ack(message, now=5.0)
    net.pump(5.0)
    rest = [e.message for e in net.take("spark", MessageReceived)]  # type: ignore[attr-defined]
    assert [m.payload for m in rest] == [b"4"]
    consumer.ack(rest[0], now=6.0)
    net.pump(6.0)
    assert broker.sessions["spark"].inflight == {}


def test_qos2_both_ways_through_the_broker(codec: ModuleType) -> None:
    broker = Broker(codec=codec)
    net = Net(broker)
    sub = ClientSession("sub", codec=codec, version=4)
    net.connect(sub, 0.0)
    net.pump(0.0)
    sub.subscribe(("q/#", 2), now=0.0)
    pub = ClientSession("pub", codec=codec, topic_alias_maximum=4)
    net.connect(pub, 0.0)
    net.pump(0.0)
    message = pub.publish("q/a", b"exactly once", qos=2, now=1.0)
    pub.publish("q/a", b"again", qos=2, now=1.0)
    net.pump(1.0)
    assert len(net.take("pub", PublishCompleted)) == 2
    assert message.state == "done"
    got = [e.message for e in net.take("sub", MessageReceived)]  # type: ignore[attr-defined]
    assert [(m.topic, m.payload, m.qos) for m in got] == [
        ("q/a", b"exactly once", 2), ("q/a", b"again", 2)]
    assert broker.sessions["sub"].inflight == {}
