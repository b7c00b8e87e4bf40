"""examples/broker.py closes the way a careful server does, so that a client that is still
writing reads the DISCONNECT it is sent.

When the broker ends a connection with DISCONNECT (here 0x93, Receive Maximum exceeded,
[MQTT-3.3.4-7]), the client may have more on its way: the rest of a burst of PUBLISHes,
PUBRELs.  A socket closed with unread input, or one that input reaches after it closed,
makes the server's TCP stack answer with a reset (RST), and the client's next send fails
(EPIPE / ECONNRESET) and its reads can fail too, before it has read the reason code: the
Eclipse Paho 5.0 test ``test_flow_control2`` failed that way in about half its runs.  The
session layer marks such a close as one to linger over (``Outgoing.linger``,
docs/session.md), and the broker then shuts its write side, reads and discards until the
client closes or the linger time ends, and only then closes.

The client here is a raw socket that sends more QoS 2 PUBLISHes than the broker's Receive
Maximum in one burst and then keeps sending for a while, and must read the DISCONNECT
bytes intact and the end of the stream, with no reset on either side; 20 times per
mqttwire implementation, since the failure it guards against came in about half the
runs.  The other way round, examples/client.py and the live source's subscriber
(mqttwire.spark.live.subscriber) disconnect from a raw server that keeps sending, which must
read their DISCONNECT and the end of the stream with no reset.  Every byte string is
written out by hand.
"""

from __future__ import annotations

import select
import socket
import time
from typing import Any

import pytest

pytestmark = pytest.mark.interop

TIMEOUT = 10.0
RECEIVE_MAXIMUM = 2
BROKER_OPTIONS = ("--receive-maximum", str(RECEIVE_MAXIMUM))
RUNS = 20
#: How long the client goes on writing after its burst: well under the broker's linger
#: time (2 s, BrokerConfig.linger_timeout), so the broker is still reading.
KEEP_WRITING = 0.3

# CONNECT, level 5, client "linger", Clean Start, Keep Alive 60: protocol name 00 04
# "MQTT" (6), level 05, flags 02, keep alive 00 3c, property length 00 (4 + 1 = 5 after
# the name), client id 00 06 "linger" (8): RL = 6 + 5 + 8 = 19 = 0x13.
CONNECT = bytes.fromhex("10 13 0004 4d515454 05 02 003c 00 0006 6c696e676572")


def publish_qos2(packet_id: int) -> bytes:
    """PUBLISH QoS 2 to "a", payload "x": first byte 0x34 (type 3, QoS bits 10); topic
    00 01 61 (3), packet id (2), property length 00 (1), payload 78 (1): RL 7."""
    return bytes.fromhex(f"34 07 0001 61 {packet_id:04x} 00 78")


def pubrec(packet_id: int) -> bytes:
    """PUBREC with reason code 0x00 and no properties, in its shortest form: RL 2
    (MQTT 5.0 §3.5.2.1)."""
    return bytes.fromhex(f"50 02 {packet_id:04x}")


# PUBREL of packet id 1 (first byte 0x62: type 6, reserved flags 0010), RL 2: what the
# client keeps sending after its burst, as a client finishing its QoS 2 exchanges does.
PUBREL = bytes.fromhex("62 02 0001")
# DISCONNECT 0x93 Receive Maximum exceeded, no properties: e0 01 93.
DISCONNECT_0x93 = bytes.fromhex("e0 01 93")


def read_connack(sock: socket.socket) -> None:
    """Read the CONNACK: 20, a one-byte Remaining Length, flags 00, reason code 00."""
    head = b""
    while len(head) < 2:
        chunk = sock.recv(2 - len(head))
        assert chunk, "closed before CONNACK"
        head += chunk
    assert head[0] == 0x20 and head[1] < 0x80
    body = b""
    while len(body) < head[1]:
        chunk = sock.recv(head[1] - len(body))
        assert chunk, "closed in the CONNACK"
        body += chunk
    assert body[:2] == b"\x00\x00", body.hex()


def over_receive_maximum(server: Any) -> tuple[bytes, str | None]:
    """One run: (everything read after CONNACK, the reset met, or None)."""
    burst = b"".join(publish_qos2(pid) for pid in range(1, RECEIVE_MAXIMUM + 9))
    received = b""
    with socket.create_connection((server.host, server.port), timeout=TIMEOUT) as sock:
        sock.sendall(CONNECT)
        read_connack(sock)
        try:
            sock.sendall(burst)
            # Keep writing, reading whatever comes meanwhile.
            stop = time.monotonic() + KEEP_WRITING
            while time.monotonic() < stop:
                sock.sendall(PUBREL)
                readable, _, _ = select.select([sock], [], [], 0.005)
                if readable:
                    received += sock.recv(4096)
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                chunk = sock.recv(4096)
                if not chunk:
                    return received, None
                received += chunk
            raise AssertionError(f"no end of stream within {TIMEOUT} s after {received!r}")
        except (ConnectionResetError, BrokenPipeError) as exc:
            return received, f"{type(exc).__name__}: {exc}"


def test_client_still_writing_reads_the_disconnect(shared_example_broker: Any) -> None:
    expected = pubrec(1) + pubrec(2) + DISCONNECT_0x93
    for run in range(RUNS):
        received, reset = over_receive_maximum(shared_example_broker)
        assert reset is None, f"run {run}: {reset} after reading {received.hex(' ')}"
        assert received == expected, f"run {run}: {received.hex(' ')}"


# ---------------------------------------------------------------------------------------
# examples/client.py: the same when the client closes first.  The server here is a raw
# socket that keeps sending QoS 0 PUBLISHes while the client disconnects; it must read
# the client's DISCONNECT and then the end of the stream, with no reset (a reset would
# lose the DISCONNECT, and the server would publish the client's will).

# CONNACK at level 4: 20 02, flags 00, return code 00.
CONNACK_V4 = bytes.fromhex("20 02 00 00")
# PUBLISH QoS 0 to "a", payload "xx": topic 00 01 61 (3), payload (2): RL 5.
PUBLISH_QOS0 = bytes.fromhex("30 05 0001 61 7878")
# DISCONNECT at level 4: e0 00.
DISCONNECT_V4 = bytes.fromhex("e0 00")


def flooding_server(listener: socket.socket, result: dict[str, Any],
                    answers: tuple[tuple[int, bytes], ...] | None = None,
                    flood: bytes | None = None) -> None:
    """Accept one client, answer each of its first packets (``answers``: the packet
    type it must be and the answer; default its CONNECT with a 3.1.1 CONNACK), then
    send ``flood`` (default 20 QoS 0 PUBLISHes) over and over until it closes; put in
    ``result`` what it sent after those packets and the reset met, if any."""
    answers = answers or ((0x10, CONNACK_V4),)
    flood = flood or PUBLISH_QOS0 * 20
    received = b""
    try:
        sock, _ = listener.accept()
        with sock:
            sock.settimeout(TIMEOUT)
            for ptype, answer in answers:
                head = sock.recv(2)  # a one-byte Remaining Length (< 128)
                assert head[0] == ptype and head[1] < 0x80, head.hex()
                body = b""
                while len(body) < head[1]:
                    body += sock.recv(head[1] - len(body))
                sock.sendall(answer)
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                sock.sendall(flood)
                readable, _, _ = select.select([sock], [], [], 0.002)
                if readable:
                    chunk = sock.recv(4096)
                    if not chunk:
                        result["received"] = received
                        return
                    received += chunk
            result["error"] = f"the client did not close within {TIMEOUT} s"
    except (ConnectionResetError, BrokenPipeError) as exc:
        result["reset"] = f"{type(exc).__name__}: {exc}"
    except BaseException as exc:  # reported by the test
        result["error"] = repr(exc)
    result["received"] = received


def test_example_client_disconnect_reaches_a_server_still_writing(
        example_client: Any) -> None:
    import asyncio
    import threading

    async def disconnect_while_flooded(port: int) -> None:
        client = await example_client.Client.connect("127.0.0.1", port, "linger", version=4)
        await client.receive(timeout=TIMEOUT)  # the flood is on its way
        await asyncio.wait_for(client.disconnect(), TIMEOUT)

    for run in range(RUNS):
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.settimeout(TIMEOUT)
            result: dict[str, Any] = {}
            thread = threading.Thread(target=flooding_server, args=(listener, result))
            thread.start()
            try:
                asyncio.run(disconnect_while_flooded(listener.getsockname()[1]))
            finally:
                thread.join(TIMEOUT)
        assert "reset" not in result and "error" not in result, f"run {run}: {result}"
        assert result["received"] == DISCONNECT_V4, f"run {run}: {result}"


# PUBLISH QoS 0 at level 5 to "a", payload "xx": topic 00 01 61 (3), property length 00
# (1), payload (2): RL 6.
PUBLISH_QOS0_V5 = bytes.fromhex("30 06 0001 61 00 7878")
# CONNACK at level 5: 20 03, flags 00, reason 00, property length 00.
CONNACK_V5 = bytes.fromhex("20 03 00 00 00")
# SUBACK at level 5 for packet id 1: 90 04, 00 01, property length 00, granted QoS 0.
SUBACK_V5 = bytes.fromhex("90 04 0001 00 00")
# DISCONNECT at level 5, reason 0x00: e0 00 (Remaining Length 0 means Normal disconnection).
DISCONNECT_V5 = bytes.fromhex("e0 00")
# DISCONNECT 0x81 Malformed Packet: e0 01 81.
DISCONNECT_V5_0x81 = bytes.fromhex("e0 01 81")


@pytest.mark.parametrize(("flood", "expected"), [
    pytest.param(PUBLISH_QOS0_V5 * 20, DISCONNECT_V5, id="close"),
    # The 3.1.1 PUBLISH at level 5: its payload's first byte, 78, is read as a property
    # length of 120, past the packet: malformed, and the subscriber's thread disconnects.
    pytest.param(PUBLISH_QOS0_V5 + PUBLISH_QOS0 * 20, DISCONNECT_V5_0x81, id="malformed"),
])
def test_live_source_subscriber_disconnect_reaches_a_server_still_writing(
        flood: bytes, expected: bytes) -> None:
    """mqttwire.spark.live.subscriber (the live source's connection) closes the same way, on
    close() and when its session ends the connection (DISCONNECT 0x81 for the broker's
    malformed packet)."""
    import threading

    from mqttwire.session import ClientSession
    from mqttwire.spark.live.subscriber import Subscriber

    for run in range(RUNS):
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.settimeout(TIMEOUT)
            result: dict[str, Any] = {}
            # CONNACK after CONNECT, SUBACK after its SUBSCRIBE (packet id 1, one filter)
            thread = threading.Thread(target=flooding_server, args=(
                listener, result, ((0x10, CONNACK_V5), (0x82, SUBACK_V5)), flood))
            thread.start()
            try:
                session = ClientSession("linger", version=5, auto_ack=False)
                subscriber = Subscriber("127.0.0.1", listener.getsockname()[1],
                                        [("a", 0)], session)
                subscriber.start(TIMEOUT)
                deadline = time.monotonic() + TIMEOUT
                while not subscriber.take() and time.monotonic() < deadline:
                    time.sleep(0.001)  # the flood is on its way
                if expected == DISCONNECT_V5:
                    subscriber.close()
                else:  # the thread ends the connection by itself
                    thread.join(TIMEOUT)
                    # The thread says why once the socket is closed (the server saw that).
                    deadline = time.monotonic() + TIMEOUT
                    while subscriber.error is None and time.monotonic() < deadline:
                        time.sleep(0.001)
                    assert subscriber.error is not None and "0x81" in str(subscriber.error)
                    subscriber.close()
            finally:
                thread.join(TIMEOUT)
        assert "reset" not in result and "error" not in result, f"run {run}: {result}"
        assert result["received"] == expected, f"run {run}: {result}"
