"""mqttwire.session against real MQTT software over TCP: a ClientSession talking to
Mosquitto, and paho-mqtt talking to a Broker, each driven by a small blocking socket
loop written here (the session layer itself has none).  On both codec implementations.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from mqttwire.session import (
    Broker,
    ClientSession,
    Connected,
    MessageReceived,
    PublishCompleted,
    SubscribeCompleted,
)
from mqttwire.session.events import Event

pytestmark = pytest.mark.interop

HOST = "127.0.0.1"
#: Bound on every single wait, in seconds.
TIMEOUT = 10.0


class Link:
    """A ClientSession on a blocking socket: write what it queues, feed what arrives."""

    def __init__(self, client: ClientSession, server: Any) -> None:
        self.client = client
        self.sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT)
        client.connect(time.monotonic())
        self.flush()

    def flush(self) -> None:
        data = self.client.data_to_send()
        if data:
            self.sock.sendall(data)

    def until(self, kind: type, count: int = 1) -> list[Any]:
        """Run until ``count`` events of ``kind``; return them (bounded by TIMEOUT)."""
        found: list[Event] = []
        deadline = time.monotonic() + TIMEOUT
        while len(found) < count:
            assert time.monotonic() < deadline, f"no {kind.__name__} in {TIMEOUT} s"
            ready, _, _ = select.select([self.sock], [], [], 0.1)
            now = time.monotonic()
            events = self.client.tick(now)
            if ready:
                data = self.sock.recv(65536)
                events += (self.client.receive_data(data, now) if data
                           else self.client.connection_lost(now))
            found += [e for e in events if isinstance(e, kind)]
            self.flush()
        return found

    def close(self) -> None:
        self.sock.close()
        self.client.connection_lost(time.monotonic())


@pytest.mark.parametrize("version", [4, 5])
def test_client_session_against_mosquitto(mosquitto_broker: Any, codec: ModuleType,
                                          version: int) -> None:
    # 5.0: Receive Maximum 2 and a session that outlives the connection; 3.1.1: Clean
    # Session 0, no Receive Maximum (Mosquitto's own in-flight limit is 20).
    extra: dict[str, Any] = ({"session_expiry_interval": 300, "receive_maximum": 2}
                             if version == 5 else {"clean_start": False})
    consumer = ClientSession(f"consumer{version}", version=version, codec=codec,
                             auto_ack=False, **extra)
    link = Link(consumer, mosquitto_broker)
    assert link.until(Connected)[0].session_present is False
    consumer.subscribe(("s/#", 2), now=time.monotonic())
    link.flush()
    assert link.until(SubscribeCompleted)[0].reason_codes == [2]

    producer = ClientSession(f"producer{version}", version=version, codec=codec)
    plink = Link(producer, mosquitto_broker)
    plink.until(Connected)
    for n in range(4):
        producer.publish("s/x", f"m{n}".encode(), qos=1, now=time.monotonic())
    plink.flush()
    plink.until(PublishCompleted, 4)

    expected = [b"m0", b"m1"] if version == 5 else [b"m0", b"m1", b"m2", b"m3"]
    first = [e.message for e in link.until(MessageReceived, len(expected))]
    assert [m.payload for m in first] == expected
    if version == 5:
        # Our Receive Maximum (2) holds Mosquitto back until we acknowledge.
        time.sleep(0.3)
        assert not select.select([link.sock], [], [], 0)[0]
    # The connection drops with everything unacknowledged; Clean Start 0 resumes the
    # session and Mosquitto sends the messages again with DUP 1: not delivered twice.
    link.close()
    link = Link(consumer, mosquitto_broker)
    assert link.until(Connected)[0].session_present
    assert [m.payload for m in consumer.unacknowledged] == expected
    for message in consumer.unacknowledged:
        consumer.ack(message, now=time.monotonic())
    link.flush()
    if version == 5:
        rest = [e.message for e in link.until(MessageReceived, 2)]
        assert [m.payload for m in rest] == [b"m2", b"m3"]
        for message in rest:
            consumer.ack(message, now=time.monotonic())
        link.flush()
    # Nothing else arrives: every message came once.
    time.sleep(0.3)
    ready = select.select([link.sock], [], [], 0)[0]
    if ready:
        events = consumer.receive_data(link.sock.recv(65536), time.monotonic())
        assert not [e for e in events if isinstance(e, MessageReceived)]
    consumer.disconnect(time.monotonic())
    link.flush()
    link.sock.close()
    producer.disconnect(time.monotonic())
    plink.flush()
    plink.sock.close()


# paho-mqtt against a Broker -------------------------------------------------------------


@pytest.fixture
def session_broker(codec: ModuleType) -> Iterator[tuple[str, int]]:
    """A Broker on a listening socket, served by a thread with a select() loop."""
    broker = Broker(codec=codec)
    listener = socket.create_server((HOST, 0))
    stop = threading.Event()

    def serve() -> None:
        socks: dict[Any, socket.socket] = {}
        while not stop.is_set():
            ready, _, _ = select.select([listener, *socks.values()], [], [], 0.05)
            now = time.monotonic()
            for sock in ready:
                if sock is listener:
                    conn_sock, _ = listener.accept()
                    socks[broker.new_connection(now)] = conn_sock
                    continue
                conn = next(c for c, s in socks.items() if s is sock)
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if data:
                    conn.receive_data(data, now)
                else:
                    conn.connection_lost(now)
            broker.tick(now)
            for out in broker.outgoing():
                sock = socks.get(out.connection)
                if sock is None:
                    continue
                try:
                    sock.sendall(out.data)
                except OSError:
                    out.connection.connection_lost(now)
                if out.close or out.connection.closed:
                    sock.close()
                    del socks[out.connection]
        for sock in socks.values():
            sock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield HOST, listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(TIMEOUT)
        listener.close()


@pytest.mark.parametrize("version", [4, 5])
def test_paho_against_the_session_broker(session_broker: tuple[str, int],
                                         version: int) -> None:
    import paho.mqtt.client as mqtt

    protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
    received: list[tuple[str, bytes, int]] = []
    got_all = threading.Event()

    def on_message(client: Any, userdata: Any, msg: Any) -> None:
        received.append((msg.topic, msg.payload, msg.qos))
        if len(received) == 3:
            got_all.set()

    clients = []
    for name in ("sub", "pub"):
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{name}{version}",
                             protocol=protocol)
        client.on_message = on_message
        client.connect(*session_broker, keepalive=30)
        client.loop_start()
        clients.append(client)
    sub, pub = clients
    try:
        sub.subscribe("p/#", qos=2)
        time.sleep(0.3)
        infos = [pub.publish(f"p/q{n}", f"m{n}".encode(), qos=n) for n in (0, 1, 2)]
        for info in infos:
            info.wait_for_publish(TIMEOUT)
        assert got_all.wait(TIMEOUT), received
        assert sorted(received) == [("p/q0", b"m0", 0), ("p/q1", b"m1", 1),
                                    ("p/q2", b"m2", 2)]
    finally:
        for client in clients:
            client.disconnect()
            client.loop_stop()
