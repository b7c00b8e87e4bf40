"""examples/broker.py over raw sockets: bad input answered as the specifications say, and
the re-sending of unacknowledged messages to a persistent session.

MQTT 5.0 §4.13: a Server that receives a malformed packet or a protocol error sends
DISCONNECT with the reason code (0x81 Malformed Packet, 0x82 Protocol Error, ...) and
closes the connection.  MQTT 3.1.1 §4.8: it just closes the connection.

Every byte string here is written out by hand, with its arithmetic, so that the
expectations do not come from the codec under test.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

pytestmark = pytest.mark.interop

TIMEOUT = 10.0

# CONNECT, client "bad", Clean Start, Keep Alive 60.  Variable header: protocol name
# 00 04 "MQTT" (6 bytes), level (1), flags 0x02 Clean Start (1), keep alive 00 3c (2),
# and at level 5 the property length 00 (1); payload: client id 00 03 "bad" (5).
#   level 5: RL = 6 + 1 + 1 + 2 + 1 + 5 = 16 = 0x10
#   level 4: RL = 6 + 1 + 1 + 2 + 5 = 15 = 0x0f
#   level 3: protocol name 00 06 "MQIsdp" (8 bytes): RL = 8 + 1 + 1 + 2 + 5 = 17 = 0x11
CONNECT = {
    5: bytes.fromhex("10 10 0004 4d515454 05 02 003c 00 0003 626164"),
    4: bytes.fromhex("10 0f 0004 4d515454 04 02 003c 0003 626164"),
    3: bytes.fromhex("10 11 0006 4d5149736470 03 02 003c 0003 626164"),
}
# The same at level 5 with Keep Alive 1 (00 01).
CONNECT_KEEP_ALIVE_1 = bytes.fromhex("10 10 0004 4d515454 05 02 0001 00 0003 626164")

# PUBLISH with both QoS bits set: first byte 0x36 = type 3 << 4 | 0b0110 (QoS bits 11),
# which [MQTT-3.3.1-4] makes a malformed packet.  Topic 00 01 "a" (3), packet id 00 01
# (2), at level 5 property length 00 (1): RL 6 at level 5, 5 below.
BAD_QOS = {5: bytes.fromhex("36 06 0001 61 0001 00"), 4: bytes.fromhex("36 05 0001 61 0001")}
BAD_QOS[3] = BAD_QOS[4]
# Packet type 0 is reserved (MQTT 5.0 §2.1.2): 00 00.
RESERVED_TYPE = bytes.fromhex("00 00")
# A PUBLISH announcing a Remaining Length of 2,000,000 bytes, over the broker's 1 MiB
# maximum packet size.  2,000,000 = 0 + 128 * (9 + 128 * 122): varint bytes 0x80
# (0 with the continuation bit), 0x89 (9 | 0x80), 0x7a (122).  No body follows: the
# broker must refuse once it knows the length.
TOO_LARGE = bytes.fromhex("30 80897a")
# Level 5 PUBLISH QoS 0 to "a" with a Topic Alias (0x23) of 17, though the broker's
# CONNACK said Topic Alias Maximum 16 (its default): topic (3) + property length 03 (1) +
# 23 0011 (3): RL 7.
TOPIC_ALIAS = bytes.fromhex("30 07 0001 61 03 23 0011")
# PINGRESP (type 13: 0xd0, RL 0) goes from Server to Client only (MQTT 5.0 Table 2-1).
PINGRESP = bytes.fromhex("d0 00")
# Level 5 PUBLISH QoS 0 to "a" carrying a Subscription Identifier (0x0b) of 1, which only
# a Server may send [MQTT-3.3.4-6]: topic (3) + property length 02 (1) + 0b 01 (2): RL 6.
SUBSCRIPTION_ID = bytes.fromhex("30 06 0001 61 02 0b01")

# SUBSCRIBE (first byte 0x82: type 8, reserved flags 0010), packet id 00 01, with four
# filters, each 2-byte length + text + options byte:
#   "ok/#"    00 04 6f6b2f23       QoS 2  (7 bytes)
#   "bad/#/x" 00 07 6261642f232f78 QoS 1  (10 bytes) '#' not last
#   "bad+/y"  00 06 6261642b2f79   QoS 0  (9 bytes)  '+' not alone in its level
#   "ok/+"    00 04 6f6b2f2b       QoS 1  (7 bytes)
# Level 5 adds property length 00: RL = 2 + 1 + 7 + 10 + 9 + 7 = 36 = 0x24; below: 0x23.
_FILTERS = "0004 6f6b2f23 02 0007 6261642f232f78 01 0006 6261642b2f79 00 0004 6f6b2f2b 01"
SUBSCRIBE = {
    5: bytes.fromhex("82 24 0001 00" + _FILTERS),
    4: bytes.fromhex("82 23 0001" + _FILTERS),
}
SUBSCRIBE[3] = SUBSCRIBE[4]


def read_packet(sock: socket.socket) -> bytes:
    """One whole packet: first byte, Remaining Length varint, body."""
    head = _read_exactly(sock, 1)
    length, multiplier = 0, 1
    while True:
        byte = _read_exactly(sock, 1)
        head += byte
        length += (byte[0] & 0x7F) * multiplier
        multiplier *= 128
        if not byte[0] & 0x80:
            break
    return head + _read_exactly(sock, length)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return data


def read_to_eof(sock: socket.socket) -> bytes:
    """Everything the broker still sends until it closes the connection."""
    data = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def connected(server: Any, level: int, connect: bytes | None = None) -> socket.socket:
    """A socket on which CONNECT was sent and a successful CONNACK read."""
    sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT)
    sock.sendall(connect or CONNECT[level])
    connack = read_packet(sock)
    # CONNACK: first byte 0x20; after the Remaining Length, the flags byte and the return
    # or reason code 0x00.  Only a level 5 one is longer than 4 bytes (its properties).
    assert connack[0] == 0x20
    assert connack[2:4] == b"\x00\x00"
    if level < 5:
        assert connack == b"\x20\x02\x00\x00"
    return sock


LEVELS = [pytest.param(n, id=f"level{n}") for n in (3, 4, 5)]


@pytest.mark.parametrize(
    "data, reason",
    [
        pytest.param(BAD_QOS[5], 0x81, id="both-qos-bits-MQTT-3.3.1-4"),
        pytest.param(RESERVED_TYPE, 0x81, id="reserved-packet-type"),
        pytest.param(CONNECT[5], 0x82, id="second-connect-MQTT-3.1.0-2"),
        pytest.param(TOO_LARGE, 0x95, id="packet-too-large"),
        pytest.param(TOPIC_ALIAS, 0x94, id="topic-alias-over-maximum-MQTT-3.2.2-18"),
        pytest.param(SUBSCRIPTION_ID, 0x82, id="subscription-id-from-client-MQTT-3.3.4-6"),
        pytest.param(PINGRESP, 0x82, id="server-packet-from-client"),
    ],
)
def test_v5_bad_input_gets_disconnect_with_reason(shared_example_broker: Any, data: bytes,
                                                  reason: int) -> None:
    with connected(shared_example_broker, 5) as sock:
        sock.sendall(data)
        # DISCONNECT: 0xe0, Remaining Length 1, the reason code (property length
        # omitted, MQTT 5.0 §3.14.2.2.1), and then the connection closes.
        assert read_to_eof(sock) == bytes((0xE0, 0x01, reason))


@pytest.mark.parametrize("level", [pytest.param(3, id="level3"), pytest.param(4, id="level4")])
@pytest.mark.parametrize("bad", ["both-qos-bits", "reserved-type", "second-connect"])
def test_v3_bad_input_just_closes(shared_example_broker: Any, level: int, bad: str) -> None:
    data = {"both-qos-bits": BAD_QOS[level], "reserved-type": RESERVED_TYPE,
            "second-connect": CONNECT[level]}[bad]
    with connected(shared_example_broker, level) as sock:
        sock.sendall(data)
        assert read_to_eof(sock) == b""


def test_unsupported_protocol_level_gets_connack_0x01(shared_example_broker: Any) -> None:
    # CONNECT[4] with the level byte (offset 8: 2 header + 6 name) changed to 6.
    connect = bytearray(CONNECT[4])
    connect[8] = 6
    with socket.create_connection((shared_example_broker.host, shared_example_broker.port),
                                  timeout=TIMEOUT) as sock:
        sock.sendall(connect)
        # 3.1.1 [MQTT-3.1.2-2]: CONNACK with return code 0x01, then the close.
        assert read_to_eof(sock) == bytes.fromhex("20 02 00 01")


def test_malformed_connect_closes_without_answer(shared_example_broker: Any) -> None:
    # CONNECT[5] with the reserved flag bit 0 set (flags 0x03), [MQTT-3.1.2-3]: before a
    # CONNACK the Server may not send DISCONNECT [MQTT-3.14.0-1].
    connect = bytearray(CONNECT[5])
    connect[9] = 0x03
    with socket.create_connection((shared_example_broker.host, shared_example_broker.port),
                                  timeout=TIMEOUT) as sock:
        sock.sendall(connect)
        assert read_to_eof(sock) == b""


@pytest.mark.parametrize("level", LEVELS)
def test_invalid_topic_filters_in_subscribe(shared_example_broker: Any, level: int) -> None:
    with connected(shared_example_broker, level) as sock:
        sock.sendall(SUBSCRIBE[level])
        if level == 3:
            # MQTT 3.1's SUBACK has no failure code: the broker closes the connection.
            assert read_to_eof(sock) == b""
            return
        # SUBACK 0x90, packet id 00 01, (level 5: property length 00), one code per
        # filter in order: 02 and 01 granted, the two bad ones 0x8f Topic Filter invalid
        # (5.0) or 0x80 Failure (3.1.1).  RL = 2 + (1) + 4.
        expected = {5: "90 07 0001 00 02 8f 8f 01", 4: "90 06 0001 02 80 80 01"}[level]
        assert read_packet(sock) == bytes.fromhex(expected)


def test_unacknowledged_publish_resent_on_reconnect(shared_example_broker: Any) -> None:
    # Level 4 CONNECT, client "keep", Clean Session 0 (flags 0x00), Keep Alive 60:
    # RL = 6 + 1 + 1 + 2 + (2 + 4) = 16 = 0x10.
    keep = bytes.fromhex("10 10 0004 4d515454 04 00 003c 0004 6b656570")
    # SUBSCRIBE packet id 1 to "q/1" (00 03 712f31) at QoS 1: RL = 2 + 5 + 1 = 8.
    subscribe = bytes.fromhex("82 08 0001 0003 712f31 01")
    # PUBLISH QoS 1 (0x32) to "q/1", packet id 7, payload "hi": RL = 5 + 2 + 2 = 9.
    publish = bytes.fromhex("32 09 0003 712f31 0007 6869")
    server = shared_example_broker
    with connected(server, 4, keep) as sub:
        sub.sendall(subscribe)
        assert read_packet(sub) == bytes.fromhex("90 03 0001 01")  # SUBACK, QoS 1
        with connected(server, 4) as pub:
            pub.sendall(publish)
            assert read_packet(pub) == bytes.fromhex("40 02 0007")  # PUBACK
        first = read_packet(sub)
        # PUBLISH QoS 1, DUP 0, RETAIN 0 (0x32), "q/1", a packet id of the broker's
        # choosing, "hi".
        assert first[0] == 0x32 and first[2:7] == b"\x00\x03q/1" and first[9:] == b"hi"
        # No PUBACK: the connection just drops.
    with socket.create_connection((server.host, server.port), timeout=TIMEOUT) as sub:
        sub.sendall(keep)
        # CONNACK with Session Present 1 [MQTT-3.2.2-2], then the same PUBLISH with DUP 1
        # (0x08) and the same packet id [MQTT-4.4.0-1] [MQTT-3.3.1-1].
        assert read_packet(sub) == bytes.fromhex("20 02 01 00")
        assert read_packet(sub) == bytes((first[0] | 0x08,)) + first[1:]
        # Acknowledge it, and leave.
        sub.sendall(bytes((0x40, 0x02)) + first[7:9])
        sub.sendall(bytes.fromhex("e0 00"))  # DISCONNECT
        assert read_to_eof(sub) == b""


def test_v5_keep_alive_timeout(shared_example_broker: Any) -> None:
    with connected(shared_example_broker, 5, CONNECT_KEEP_ALIVE_1) as sock:
        started = time.monotonic()
        # Nothing sent: after 1.5 x 1 s, DISCONNECT 0x8d Keep Alive timeout, then close.
        assert read_to_eof(sock) == bytes.fromhex("e0 01 8d")
        assert 1.4 <= time.monotonic() - started < 5
