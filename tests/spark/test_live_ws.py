"""MQTT over WebSocket for the live source (mqttwire.spark.live.transport under
mqttwire.spark.live.subscriber), against real WebSocket listeners started here on 127.0.0.1:
amqtt's (MQTT 3.1.1; ws, and wss with certificates made here) and the project's example
broker behind the websockets package (tests/capture/ws_broker.py: MQTT 5.0, each binary
message it sends fragmented, a packet split across frames).  paho-mqtt publishes over
WebSocket.  Scripted WebSocket servers (the websockets package) break the rules: no
'mqtt' subprotocol [MQTT-6.0.0-4], a text frame [MQTT-6.0.0-1], a refused path, a port
that is not a WebSocket's."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from live_brokers import amqtt_websockets, example_websocket
from live_clients import TIMEOUT, publish, take
from local_servers import HOST
from tls_certs import Certs, make_certs

from mqttwire.session import ClientSession
from mqttwire.spark.live.subscriber import Reconnect, Subscriber, SubscriberError
from mqttwire.spark.live.transport import Endpoint, TlsOptions

pytestmark = pytest.mark.interop


@dataclass
class WsBrokers:
    amqtt_ws: int  # amqtt, ws://
    amqtt_wss: int  # amqtt, wss:// (its certificate for localhost and 127.0.0.1)
    example: int  # examples/broker.py behind ws_broker.py, ws://
    certs: Certs


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WsBrokers]:
    tmp = tmp_path_factory.mktemp("ws")
    certs = make_certs(tmp)
    with amqtt_websockets(tmp, certs) as (ws, wss), example_websocket(tmp) as example:
        yield WsBrokers(ws, wss, example, certs)


def subscriber(endpoint: Endpoint, version: int, *, client_id: str = "ws-sub",
               codec: Any = None) -> Subscriber:
    session = ClientSession(client_id, version=version, clean_start=True, auto_ack=False,
                            codec=codec, connect_timeout=5)
    # No reconnection: an end after SUBACK (a close frame, a text frame) is the subject
    # of the tests here, said at once (reconnection: test_live_restart.py).
    return Subscriber(endpoint.host, endpoint.port, [("ws/#", 1)], session,
                      connect_timeout=5, endpoint=endpoint, reconnect=Reconnect(timeout=0))


#: Sizes around the WebSocket's 7-bit and 16-bit length forms (125, 65,535) and the
#: link's read size, and a payload of many TCP segments.
SIZES = [0, 1, 125, 126, 65_535, 65_536, 300_000] + [40] * 20


@pytest.mark.parametrize("broker", ["amqtt ws", "amqtt wss", "example ws"])
def test_messages_arrive_whole_and_in_order(codec: Any, brokers: WsBrokers,
                                            broker: str) -> None:
    """Subscribed over the WebSocket (and TLS), messages of every size arrive whole, in
    order; acknowledged, the broker sends none again after close()."""
    version = 5 if broker.startswith("example") else 4  # amqtt 0.12 speaks 3.1.1
    if broker == "amqtt wss":
        endpoint = Endpoint("localhost", brokers.amqtt_wss, TlsOptions(str(brokers.certs.ca)),
                            "/mqtt")
        publish_port = brokers.amqtt_ws  # the same broker, its ws:// listener
    else:
        publish_port = brokers.example if version == 5 else brokers.amqtt_ws
        endpoint = Endpoint(HOST, publish_port, None, "/mqtt")
    client_id = f"ws-{broker.replace(' ', '-')}-{codec.__name__.rsplit('.', 1)[-1]}"
    payloads = [bytes([n % 256]) * size for n, size in enumerate(SIZES)]
    sub = subscriber(endpoint, version, client_id=client_id, codec=codec)
    sub.start()
    try:
        assert f" to {endpoint.url} subscribed" in repr(sub)
        publish(publish_port, "ws", payloads, version=version, websocket=True)
        got = take(sub, len(payloads))
        assert [r.message.topic for r in got] == [f"ws/{n}" for n in range(len(payloads))]
        assert [r.message.payload for r in got] == payloads
        assert sub.ack_through(got[-1].seq) == len(payloads)
    finally:
        sub.close()
    assert sub.error is None


# ---------------------------------------------------------------------------------------
# Servers that break the rules (the websockets package's, scripted)


@contextlib.contextmanager
def scripted_server(handler: Callable[[Any], None], **kwargs: Any) -> Iterator[int]:
    """A WebSocket server on a free port running ``handler(connection)``; yields its
    port."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import serve

    def run(conn: Any) -> None:
        with contextlib.suppress(ConnectionClosed):  # the client failed the connection
            handler(conn)

    with serve(run, HOST, 0, **kwargs) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.socket.getsockname()[1]
        finally:
            server.shutdown()
            thread.join(10)


def connack_suback(conn: Any) -> None:
    """Answer CONNECT with CONNACK (5.0, success) and SUBSCRIBE with SUBACK (QoS 1)."""
    conn.recv(TIMEOUT)  # CONNECT
    conn.send(bytes([0x20, 3, 0, 0, 0]))
    subscribe = conn.recv(TIMEOUT)  # its packet identifier in bytes 2-3
    conn.send(bytes([0x90, 4, subscribe[2], subscribe[3], 0, 1]))


def failure(endpoint: Endpoint) -> str:
    sub = subscriber(endpoint, 5)
    try:
        with pytest.raises(SubscriberError) as exc:
            sub.start()
            take(sub, 1)  # an error after SUBACK
    finally:
        sub.close()
    return str(exc.value)


def test_a_server_that_does_not_select_mqtt() -> None:
    with scripted_server(connack_suback) as port:  # no subprotocols: selects none
        said = failure(Endpoint(HOST, port, None, "/"))
    assert said == (f"ws://{HOST}:{port}/ accepted the WebSocket without the subprotocol "
                    "'mqtt' (none): the server must select 'mqtt' [MQTT-6.0.0-4]")


def test_a_text_frame_fails_the_connection() -> None:
    closed: list[Any] = []

    def handler(conn: Any) -> None:
        connack_suback(conn)
        conn.send("not MQTT")
        with contextlib.suppress(Exception):
            conn.recv(TIMEOUT)
        closed.append(conn.close_code)

    from websockets.typing import Subprotocol

    with scripted_server(handler, subprotocols=[Subprotocol("mqtt")]) as port:
        said = failure(Endpoint(HOST, port, None, "/mqtt"))
        deadline = time.monotonic() + TIMEOUT
        while not closed and time.monotonic() < deadline:
            time.sleep(0.02)
    assert said.endswith(f"ws://{HOST}:{port}/mqtt sent a text WebSocket frame: MQTT "
                         "packets travel in binary frames only [MQTT-6.0.0-1]"), said
    assert closed == [1003]  # unsupported data (RFC 6455 §7.4.1), then the close


def test_a_close_frame_from_the_broker_ends_the_connection() -> None:
    def handler(conn: Any) -> None:
        connack_suback(conn)
        conn.close(1001)  # going away

    from websockets.typing import Subprotocol

    with scripted_server(handler, subprotocols=[Subprotocol("mqtt")]) as port:
        said = failure(Endpoint(HOST, port, None, "/mqtt"))
    # The session's word for an end without DISCONNECT (the close frame is the
    # WebSocket's, under MQTT).
    assert said == f"connection to {HOST}:{port} ended: network connection lost"


def test_a_refused_path() -> None:
    def refuse(conn: Any, request: Any) -> Any:
        return conn.respond(404, "no MQTT here\n")

    with scripted_server(connack_suback, process_request=refuse) as port:
        said = failure(Endpoint(HOST, port, None, "/nowhere"))
    assert said.startswith(f"WebSocket handshake with ws://{HOST}:{port}/nowhere failed: ")
    assert "HTTP 404" in said, said


def test_mqtt_bytes_in_the_handshake_response_segment_are_kept() -> None:
    """A server whose 101 response and first frame (CONNACK) leave in one segment: the
    link reads both in one recv during the handshake, and the CONNACK must still reach the
    session (the link holds it and reports itself readable at once).  A raw socket
    server, to put both in one write; the frames are RFC 6455's, unmasked from a
    server."""
    import base64
    import hashlib

    server = socket.create_server((HOST, 0))
    answered: list[bytes] = []

    def frame(payload: bytes) -> bytes:
        return bytes([0x82, len(payload)]) + payload  # FIN, binary; payloads < 126 here

    def unmask(data: bytes) -> bytes:  # one short masked client frame
        mask, payload = data[2:6], data[6:6 + (data[1] & 0x7F)]
        return bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                request = conn.recv(4096).decode()
                key = re.search(r"(?i)^sec-websocket-key: *(\S+)", request, re.M)
                assert key is not None
                accept = base64.b64encode(hashlib.sha1(
                    key.group(1).encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
                ).digest()).decode()
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: Upgrade\r\nSec-WebSocket-Protocol: mqtt\r\n"
                             b"Sec-WebSocket-Accept: " + accept.encode() + b"\r\n\r\n"
                             + frame(bytes([0x20, 3, 0, 0, 0])))  # CONNACK, 5.0
                conn.recv(4096)  # CONNECT
                subscribe = unmask(conn.recv(4096))
                answered.append(subscribe)  # before the SUBACK that ends start()
                conn.sendall(frame(bytes([0x90, 4, subscribe[2], subscribe[3], 0, 1])))
                conn.recv(4096)  # DISCONNECT, or the end

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    sub = subscriber(Endpoint(HOST, port, None, "/mqtt"), 5)
    try:
        sub.start()  # the CONNACK lost: "no CONNACK and SUBACK from ... within 10 s"
        assert sub.error is None and answered and answered[0][0] == 0x82  # SUBSCRIBE
    finally:
        sub.close()
        server.close()
        thread.join(10)


def test_a_port_that_is_no_websocket() -> None:
    """An MQTT port (or anything that closes on an HTTP request)."""
    server = socket.create_server((HOST, 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                conn.recv(4096)

    threading.Thread(target=serve, daemon=True).start()
    port = server.getsockname()[1]
    try:
        said = failure(Endpoint(HOST, port, None, "/mqtt"))
    finally:
        server.close()
    assert re.fullmatch(rf"WebSocket handshake with ws://{HOST}:{port}/mqtt failed: .* "
                        rf"\(is port {port} a WebSocket listener\?\)", said), said


# ---------------------------------------------------------------------------------------
# The options (LiveOptions.parse needs pyspark)

try:
    from mqttwire.spark.live import LiveOptions
except ImportError:  # no spark extra: the tests below fail, marked spark
    LiveOptions = None  # type: ignore[assignment,misc]


@pytest.mark.spark
@pytest.mark.parametrize(("url", "endpoint"), [
    ("ws://h", Endpoint("h", 80, None, "/")),
    ("ws://h:8080/mqtt", Endpoint("h", 8080, None, "/mqtt")),
    ("WS://u:p@h:9001/a/b?x=1&y", Endpoint("h", 9001, None, "/a/b?x=1&y")),
    ("wss://h/mqtt", Endpoint("h", 443, TlsOptions(), "/mqtt")),
    ("wss://[::1]:8884", Endpoint("::1", 8884, TlsOptions(), "/")),
])
def test_websocket_urls(url: str, endpoint: Endpoint) -> None:
    assert LiveOptions is not None, "pyspark is not installed"
    o = LiveOptions.parse({"url": url, "topics": "t", "clientId": "x"})
    assert o.endpoint == endpoint
    assert (o.host, o.port) == (endpoint.host, endpoint.port)
    # The user and password of the url are MQTT's (CONNECT), not HTTP's: not in the path.
    assert (o.username, o.password) == (("u", b"p") if "u:p@" in url else (None, None))


def test_endpoint_url() -> None:
    assert Endpoint("h", 80, None, "/").url == "ws://h:80/"
    assert Endpoint("::1", 443, TlsOptions(), "/m?q").url == "wss://[::1]:443/m?q"
    assert Endpoint("h", 8883, TlsOptions()).url == "mqtts://h:8883"
    assert str(Endpoint("h", 1883)) == "mqtt://h:1883"
