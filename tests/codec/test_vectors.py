"""Valid packets of every type at every protocol level, byte for byte.

Every vector's bytes were worked out by hand from the OASIS MQTT 3.1.1 and 5.0 standards
(and the IBM MQTT V3.1 specification for level 3), with the Remaining Length and property
length arithmetic in a comment beside it; none was produced by the codec under test.
Each vector is checked both ways in both implementations: the packet encodes to exactly
these bytes (when they are the shortest form, which is what encoding writes), and these
bytes decode to a packet equal to it.

The small vectors are also the corpus in ``tests/vectors/valid.json`` that the stream,
input and differential tests, fuzzers and benchmarks reuse;
:func:`test_corpus_file_matches_the_vectors` keeps the two identical.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import mqttwire
from mqttwire import Properties

CORPUS = Path(__file__).resolve().parents[1] / "vectors" / "valid.json"

#: Vectors larger than this stay out of the corpus file (hex doubles their size, and the
#: stream tests split every corpus packet at every byte).
CORPUS_MAX_BYTES = 1024


def wire(*parts: str | bytes) -> bytes:
    """Packet bytes from hex strings ("30 12") and literal bytes (b"sensors/temp")."""
    return b"".join(bytes.fromhex(p) if isinstance(p, str) else p for p in parts)


@dataclass(frozen=True)
class Vector:
    """A valid packet: its bytes at ``version`` and the packet they mean."""

    name: str
    version: int
    build: Callable[[ModuleType], Any]
    wire: bytes
    #: False when ``wire`` is a valid form other than the shortest (captured from a
    #: broker, say): it must decode to the packet, and encoding writes something shorter.
    encodes: bool = True


VECTORS: list[Vector] = []


def vector(name: str, version: int, wire_bytes: bytes, *, encodes: bool = True):
    """Register the decorated ``build(codec) -> packet`` as a vector."""

    def register(build: Callable[[ModuleType], Any]) -> Callable[[ModuleType], Any]:
        VECTORS.append(Vector(name, version, build, wire_bytes, encodes))
        return build

    return register


# ---------------------------------------------------------------------------------------
# CONNECT (MQTT 3.1.1 §3.1, MQTT 5.0 §3.1; MQTT 3.1 uses protocol name "MQIsdp", level 3)
#
# Connect Flags (bit 7..0): user name, password, will retain, will QoS (2 bits), will
# flag, clean session / clean start, reserved.

# Variable header 00 06 "MQIsdp" (8) + level (1) + flags (1) + keep alive (2) = 12;
# payload: client id 00 01 "c" = 3.  RL = 12 + 3 = 15 = 0x0F.  Flags 0x02: clean session.
vector("connect-v3-minimal", 3, wire("10 0f 00 06", b"MQIsdp", "03 02 00 3c 00 01", b"c"))(
    lambda m: m.Connect("c", protocol_version=3)
)
# Variable header 00 04 "MQTT" (6) + level + flags + keep alive (4) = 10; payload 3.
# RL = 10 + 3 = 13 = 0x0D.
vector("connect-v4-minimal", 4, wire("10 0d 00 04", b"MQTT", "04 02 00 3c 00 01", b"c"))(
    lambda m: m.Connect("c", protocol_version=4)
)
# An empty client id is allowed with clean session 1 (3.1.1 [MQTT-3.1.3-7]).
# RL = 10 + 2 = 12 = 0x0C.
vector("connect-v4-empty-client-id", 4, wire("10 0c 00 04", b"MQTT", "04 02 00 3c 00 00"))(
    lambda m: m.Connect("", protocol_version=4)
)

# Flags: user name 0x80 | password 0x40 | will retain 0x20 | will QoS 1 (1 << 3 = 0x08) |
# will flag 0x04 | clean session 0 = 0xEC.  Keep alive 300 = 0x012C.
# Payload: client id 2 + 8 = 10, will topic 2 + 10 = 12, will message 2 + 3 = 5,
# user name 2 + 4 = 6, password 2 + 4 = 6: 39 bytes.
_CONNECT_V3_PAYLOAD = wire(
    "00 08", b"client-1", "00 0a", b"will/topic", "00 03", b"bye",
    "00 04", b"user", "00 04", b"pass",
)


def _full_v3_connect(level: int) -> Callable[[ModuleType], Any]:
    return lambda m: m.Connect(
        "client-1", protocol_version=level, clean_start=False, keep_alive=300,
        username="user", password=b"pass",
        will=m.Will("will/topic", b"bye", qos=1, retain=True),
    )


# RL = 12 (variable header with "MQIsdp") + 39 = 51 = 0x33.
vector("connect-v3-will-username-password", 3,
       wire("10 33 00 06", b"MQIsdp", "03 ec 01 2c") + _CONNECT_V3_PAYLOAD)(
    _full_v3_connect(3)
)
# RL = 10 (variable header with "MQTT") + 39 = 49 = 0x31.
vector("connect-v4-will-username-password", 4,
       wire("10 31 00 04", b"MQTT", "04 ec 01 2c") + _CONNECT_V3_PAYLOAD)(
    _full_v3_connect(4)
)

# Variable header 6 + 1 + 1 + 2 + property length 00 (1) = 11; payload 3.  RL = 14 = 0x0E.
vector("connect-v5-minimal", 5, wire("10 0e 00 04", b"MQTT", "05 02 00 3c 00 00 01", b"c"))(
    lambda m: m.Connect("c")
)
# MQTT 5.0 allows a password without a user name (§3.1.2.9).  Flags 0x40, keep alive 0.
# RL = 11 + client id 3 + password 00 02 "pw" 4 = 18 = 0x12.
vector("connect-v5-password-without-username", 5,
       wire("10 12 00 04", b"MQTT", "05 40 00 00 00 00 01", b"c", "00 02", b"pw"))(
    lambda m: m.Connect("c", clean_start=False, keep_alive=0, password=b"pw")
)

# A will without properties: flags 0x06 (will flag | clean start).  Payload: client id 3,
# will property length 00 (1), will topic 00 01 "w" (3), will payload 00 00 (2) = 9.
# RL = 11 + 9 = 20 = 0x14.
vector("connect-v5-will-no-properties", 5,
       wire("10 14 00 04", b"MQTT", "05 06 00 3c 00 00 01", b"c", "00 00 01", b"w", "00 00"))(
    lambda m: m.Connect("c", will=m.Will("w"))
)

# Every CONNECT property and every Will property (MQTT 5.0 §3.1.2.11, §3.1.3.2), written
# in ascending identifier order.
# Flags: user name 0x80 | password 0x40 | will QoS 2 (2 << 3 = 0x10) | will flag 0x04 |
# clean start 0x02 = 0xD6.  Keep alive 30 = 0x001E.
# CONNECT properties:
#   11 00 00 00 78              session expiry interval 120            5
#   15 00 0b "SCRAM-SHA-1"      authentication method                 14
#   16 00 02 de ad              authentication data                    5
#   17 00                       request problem information 0          2
#   19 01                       request response information 1         2
#   21 00 14                    receive maximum 20                     3
#   22 00 0a                    topic alias maximum 10                 3
#   26 00 01 "a" 00 01 "1"      user property                          7
#   26 00 01 "b" 00 01 "2"      user property                          7
#   27 00 10 00 00              maximum packet size 1,048,576          5
#   total 53 = 0x35
# Variable header: 6 + 1 + 1 + 2 + 1 (property length) + 53 = 64.
# Will properties:
#   01 01                       payload format indicator 1             2
#   02 00 00 0e 10              message expiry interval 3600           5
#   03 00 0a "text/plain"       content type                          13
#   08 00 06 "w/resp"           response topic                         9
#   09 00 02 01 02              correlation data                       5
#   18 00 00 00 0a              will delay interval 10                 5
#   26 00 01 "k" 00 01 "v"      user property                          7
#   total 46 = 0x2E
# Payload: client id 2 + 8 = 10, will properties 1 + 46 = 47, will topic 2 + 3 = 5,
# will payload 2 + 4 = 6, user name 2 + 4 = 6, password 2 + 2 = 4: 78.
# RL = 64 + 78 = 142 = 0x8E: varint 0x8E 0x01 (142 - 128 = 14 = 0x0E, | 0x80; 142 >> 7 = 1).
vector(
    "connect-v5-all-properties-will-username-password", 5,
    wire(
        "10 8e 01 00 04", b"MQTT", "05 d6 00 1e 35",
        "11 00 00 00 78", "15 00 0b", b"SCRAM-SHA-1", "16 00 02 de ad", "17 00", "19 01",
        "21 00 14", "22 00 0a", "26 00 01", b"a", "00 01", b"1", "26 00 01", b"b",
        "00 01", b"2", "27 00 10 00 00",
        "00 08", b"client-5",
        "2e", "01 01", "02 00 00 0e 10", "03 00 0a", b"text/plain", "08 00 06", b"w/resp",
        "09 00 02 01 02", "18 00 00 00 0a", "26 00 01", b"k", "00 01", b"v",
        "00 03", b"w/t", "00 04", b"gone", "00 04", b"user", "00 02", b"pw",
    ),
)(
    lambda m: m.Connect(
        "client-5", keep_alive=30, username="user", password=b"pw",
        will=m.Will(
            "w/t", b"gone", qos=2,
            properties=Properties(
                payload_format_indicator=1, message_expiry_interval=3600,
                content_type="text/plain", response_topic="w/resp",
                correlation_data=b"\x01\x02", will_delay_interval=10,
                user_properties=[("k", "v")],
            ),
        ),
        properties=Properties(
            session_expiry_interval=120, authentication_method="SCRAM-SHA-1",
            authentication_data=b"\xde\xad", request_problem_information=0,
            request_response_information=1, receive_maximum=20, topic_alias_maximum=10,
            user_properties=[("a", "1"), ("b", "2")], maximum_packet_size=1_048_576,
        ),
    )
)

# ---------------------------------------------------------------------------------------
# CONNACK (3.1.1 §3.2: flags, return code; 5.0 §3.2: flags, reason code, properties)

vector("connack-v3-accepted", 3, wire("20 02 00 00"))(lambda m: m.ConnAck())
vector("connack-v4-session-present", 4, wire("20 02 01 00"))(
    lambda m: m.ConnAck(session_present=True)
)
vector("connack-v4-not-authorized", 4, wire("20 02 00 05"))(lambda m: m.ConnAck(reason_code=5))
# RL = flags 1 + reason code 1 + property length 1 = 3.
vector("connack-v5-success", 5, wire("20 03 00 00 00"))(lambda m: m.ConnAck())
vector("connack-v5-session-present", 5, wire("20 03 01 00 00"))(
    lambda m: m.ConnAck(session_present=True)
)
# Every CONNACK property (MQTT 5.0 §3.2.2.3):
#   11 00 00 0e 10        session expiry interval 3600          5
#   12 00 06 "auto-1"     assigned client identifier            9
#   13 00 78              server keep alive 120                 3
#   15 00 01 "m"          authentication method                 4
#   16 00 01 "d"          authentication data                   4
#   1a 00 02 "ri"         response information                  5
#   1c 00 03 "srv"        server reference                      6
#   1f 00 02 "ok"         reason string                         5
#   21 00 64              receive maximum 100                   3
#   22 00 05              topic alias maximum 5                 3
#   24 01                 maximum QoS 1                         2
#   25 00                 retain available 0                    2
#   26 00 01 "x" 00 01 "y" user property                        7
#   27 00 01 00 00        maximum packet size 65,536            5
#   28 01                 wildcard subscription available 1     2
#   29 00                 subscription identifier available 0   2
#   2a 01                 shared subscription available 1       2
#   total 69 = 0x45.  RL = 1 + 1 + 1 + 69 = 72 = 0x48.
vector(
    "connack-v5-all-properties", 5,
    wire(
        "20 48 00 00 45",
        "11 00 00 0e 10", "12 00 06", b"auto-1", "13 00 78", "15 00 01", b"m",
        "16 00 01", b"d", "1a 00 02", b"ri", "1c 00 03", b"srv", "1f 00 02", b"ok",
        "21 00 64", "22 00 05", "24 01", "25 00", "26 00 01", b"x", "00 01", b"y",
        "27 00 01 00 00", "28 01", "29 00", "2a 01",
    ),
)(
    lambda m: m.ConnAck(
        properties=Properties(
            session_expiry_interval=3600, assigned_client_identifier="auto-1",
            server_keep_alive=120, authentication_method="m", authentication_data=b"d",
            response_information="ri", server_reference="srv", reason_string="ok",
            receive_maximum=100, topic_alias_maximum=5, maximum_qos=1, retain_available=0,
            user_properties=[("x", "y")], maximum_packet_size=65_536,
            wildcard_subscription_available=1, subscription_identifier_available=0,
            shared_subscription_available=1,
        )
    )
)

# ---------------------------------------------------------------------------------------
# PUBLISH (3.1.1 §3.3, 5.0 §3.3).  First byte 0x30 | DUP << 3 | QoS << 1 | RETAIN.


def _seed_example_1(m: ModuleType) -> Any:
    return m.Publish("sensors/temp", b"22.5")


def _seed_example_2(m: ModuleType) -> Any:
    return m.Publish("status", b"online", qos=1, retain=True, packet_id=1)


# The two wire examples of a Markdown rendering of the 3.1.1 PUBLISH section (its §5.3.7),
# with their Remaining Lengths corrected (tests/vectors/README.md, "Provenance").
# Example 1: RL = 2 + 12 ("sensors/temp") + 4 ("22.5") = 18 = 0x12 (the document prints
# 0x10).
# Example 2: first byte 0x30 | QoS 1 << 1 | RETAIN = 0x33;
# RL = 2 + 6 ("status") + 2 (packet id) + 6 ("online") = 16 = 0x10 (printed: 0x0E).
for _level in (3, 4):
    vector(f"publish-v{_level}-seed-5.3.7-example-1", _level,
           wire("30 12 00 0c", b"sensors/temp", b"22.5"))(_seed_example_1)
    vector(f"publish-v{_level}-seed-5.3.7-example-2", _level,
           wire("33 10 00 06", b"status", "00 01", b"online"))(_seed_example_2)

# Figure 5-8's variable header (topic "a/b", packet id 10) in a QoS 1 PUBLISH with an
# empty payload: 0x32 = 0x30 | 1 << 1; RL = 2 + 3 + 2 = 7.
vector("publish-v4-qos1-empty-payload", 4, wire("32 07 00 03", b"a/b", "00 0a"))(
    lambda m: m.Publish("a/b", qos=1, packet_id=10)
)
# QoS 2, DUP: 0x30 | 0x08 | 2 << 1 = 0x3C; packet id 65535; RL = 2 + 3 + 2 + 1 = 8.
vector("publish-v4-qos2-dup-max-packet-id", 4, wire("3c 08 00 03", b"a/b", "ff ff", b"x"))(
    lambda m: m.Publish("a/b", b"x", qos=2, dup=True, packet_id=65535)
)
# Multi-byte UTF-8: "é" c3 a9 (2) "/" (1) "€" e2 82 ac (3) "/" (1) "😀" f0 9f 98 80 (4)
# = 11 bytes; RL = 2 + 11 = 13 = 0x0D.
vector("publish-v4-utf8-topic", 4,
       wire("30 0d 00 0b c3 a9 2f e2 82 ac 2f f0 9f 98 80"))(
    lambda m: m.Publish("é/€/😀")
)
# RL = 2 + 1 + property length 1 = 4.
vector("publish-v5-qos0-empty", 5, wire("30 04 00 01", b"t", "00"))(lambda m: m.Publish("t"))
# The PUBLISH captured from a broker (tests/vectors/README.md, "Provenance"): topic
# "request" (2 + 7 = 9), properties 02 00 00 01 2c (message expiry 300, 5)
# + 08 00 08 "response" (11) = 16 = 0x10 (block 1 + 16 = 17), payload "This is a QoS 0
# message" (23).  RL = 9 + 17 + 23 = 49 = 0x31.  Already in ascending identifier order,
# so it is also what encoding writes.
vector(
    "publish-v5-captured-expiry-response-topic", 5,
    wire("30 31 00 07", b"request", "10 02 00 00 01 2c 08 00 08", b"response",
         b"This is a QoS 0 message"),
)(
    lambda m: m.Publish(
        "request", b"This is a QoS 0 message",
        properties=Properties(message_expiry_interval=300, response_topic="response"),
    )
)
# Every PUBLISH property (MQTT 5.0 §3.3.2.3), two subscription identifiers (a server
# sends one per matching subscription):
#   01 01                   payload format indicator 1      2
#   02 00 00 00 3c          message expiry interval 60      5
#   03 00 04 "json"         content type                    7
#   08 00 03 "r/t"          response topic                  6
#   09 00 02 00 ff          correlation data                5
#   0b 01                   subscription identifier 1       2
#   0b ff ff ff 7f          subscription identifier 268,435,455 (largest varint)  5
#   23 00 03                topic alias 3                   3
#   26 00 01 "k" 00 02 "v1" user property                   8
#   26 00 01 "k" 00 02 "v2" user property (same key again)  8
#   total 51 = 0x33
# First byte 0x32 (QoS 1).  RL = topic 2 + 3 + packet id 2 + 1 + 51 + payload 2 = 61 = 0x3D.
vector(
    "publish-v5-all-properties", 5,
    wire(
        "32 3d 00 03", b"a/b", "00 07 33",
        "01 01", "02 00 00 00 3c", "03 00 04", b"json", "08 00 03", b"r/t",
        "09 00 02 00 ff", "0b 01", "0b ff ff ff 7f", "23 00 03",
        "26 00 01", b"k", "00 02", b"v1", "26 00 01", b"k", "00 02", b"v2",
        b"hi",
    ),
)(
    lambda m: m.Publish(
        "a/b", b"hi", qos=1, packet_id=7,
        properties=Properties(
            payload_format_indicator=1, message_expiry_interval=60, content_type="json",
            response_topic="r/t", correlation_data=b"\x00\xff",
            subscription_identifiers=[1, 268_435_455], topic_alias=3,
            user_properties=[("k", "v1"), ("k", "v2")],
        ),
    )
)
# An empty topic name is valid in MQTT 5.0 when a Topic Alias stands for it (§3.3.2.1).
# RL = 2 + 0 + 1 + (23 00 05 = 3) = 6.
vector("publish-v5-empty-topic-with-alias", 5, wire("30 06 00 00 03 23 00 05"))(
    lambda m: m.Publish("", properties=Properties(topic_alias=5))
)

# ---------------------------------------------------------------------------------------
# PUBACK, PUBREC, PUBREL, PUBCOMP (3.1.1 §3.4-3.7, 5.0 §3.4-3.7).  PUBREL's first byte
# carries the required flags 0x2: 0x62.

for _level in (3, 4):
    # RL = packet id 2.
    vector(f"puback-v{_level}", _level, wire("40 02 00 01"))(lambda m: m.PubAck(1))
    vector(f"pubrec-v{_level}", _level, wire("50 02 00 02"))(lambda m: m.PubRec(2))
    vector(f"pubrel-v{_level}", _level, wire("62 02 00 03"))(lambda m: m.PubRel(3))
    vector(f"pubcomp-v{_level}", _level, wire("70 02 00 04"))(lambda m: m.PubComp(4))

# v5, reason 0 and no properties: the shortest form has RL 2 (MQTT 5.0 §3.4.2.1).
vector("puback-v5-success", 5, wire("40 02 64 4a"))(lambda m: m.PubAck(0x644A))
# Reason code only: RL 3.
vector("puback-v5-no-matching-subscribers", 5, wire("40 03 64 4a 10"))(
    lambda m: m.PubAck(0x644A, reason_code=0x10)
)
vector("pubrec-v5-no-matching-subscribers", 5, wire("50 03 11 c2 10"))(
    lambda m: m.PubRec(0x11C2, reason_code=0x10)
)
vector("pubrel-v5-success", 5, wire("62 02 11 c2"))(lambda m: m.PubRel(0x11C2))
vector("pubcomp-v5-success", 5, wire("70 02 11 c2"))(lambda m: m.PubComp(0x11C2))
vector("pubcomp-v5-packet-id-not-found", 5, wire("70 03 00 01 92"))(
    lambda m: m.PubComp(1, reason_code=0x92)
)
# The acknowledgements captured from a broker (tests/vectors/README.md, "Provenance"),
# longer than the shortest form:
# "If the Remaining Length is less than 4 there is no Property Length and the value of 0
# is used" (MQTT 5.0 §3.4.2.2.1); a reason code of 0 may be written (§3.4.2.1).
vector("puback-v5-captured-reason-0x10-property-length-0", 5, wire("40 04 64 4a 10 00"),
       encodes=False)(lambda m: m.PubAck(0x644A, reason_code=0x10))
vector("pubrec-v5-captured-reason-0x10-property-length-0", 5, wire("50 04 11 c2 10 00"),
       encodes=False)(lambda m: m.PubRec(0x11C2, reason_code=0x10))
vector("pubrel-v5-captured-reason-0", 5, wire("62 03 11 c2 00"), encodes=False)(
    lambda m: m.PubRel(0x11C2)
)
vector("pubcomp-v5-captured-reason-0-property-length-0", 5, wire("70 04 11 c2 00 00"),
       encodes=False)(lambda m: m.PubComp(0x11C2))
# Reason 0x80 with properties 1f 00 02 "no" (5) + 26 00 01 "a" 00 01 "b" (7) = 12 = 0x0C.
# RL = 2 + 1 + 1 + 12 = 16 = 0x10.
vector("puback-v5-reason-string-user-property", 5,
       wire("40 10 00 05 80 0c 1f 00 02", b"no", "26 00 01", b"a", "00 01", b"b"))(
    lambda m: m.PubAck(
        5, reason_code=0x80,
        properties=Properties(reason_string="no", user_properties=[("a", "b")]),
    )
)
# Properties go out in ascending identifier order whatever order they were given in, and
# user properties in the order given (not sorted): 1f 00 01 "r" (4) before
# 26 00 01 "z" 00 01 "1" (7) and 26 00 01 "a" 00 01 "2" (7): 18 = 0x12.
# RL = 2 + 1 + 1 + 18 = 22 = 0x16.
vector("puback-v5-user-properties-in-given-order", 5,
       wire("40 16 00 01 00 12 1f 00 01", b"r", "26 00 01", b"z", "00 01", b"1",
            "26 00 01", b"a", "00 01", b"2"))(
    lambda m: m.PubAck(1, properties=Properties(user_properties=[("z", "1"), ("a", "2")],
                                                reason_string="r"))
)
# Reason 0 must still be written when properties follow: 1f 00 01 "x" = 4;
# RL = 2 + 1 + 1 + 4 = 8.
vector("pubrel-v5-success-reason-string", 5, wire("62 08 00 09 00 04 1f 00 01", b"x"))(
    lambda m: m.PubRel(9, properties=Properties(reason_string="x"))
)
vector("pubrec-v5-success-user-property", 5,
       wire("50 0b 00 02 00 07 26 00 01", b"k", "00 01", b"v"))(
    # 26 00 01 "k" 00 01 "v" = 7; RL = 2 + 1 + 1 + 7 = 11 = 0x0B.
    lambda m: m.PubRec(2, properties=Properties(user_properties=[("k", "v")]))
)

# ---------------------------------------------------------------------------------------
# SUBSCRIBE (3.1.1 §3.8, 5.0 §3.8).  First byte 0x82 (required flags 0x2).

# RL = packet id 2 + "x" (2 + 1) + options 1 = 6.
vector("subscribe-v3-one-filter", 3, wire("82 06 00 0a 00 01", b"x", "00"))(
    lambda m: m.Subscribe(10, [m.Subscription("x")])
)
# RL = 2 + ("a/+" 2 + 3 + 1 = 6) + ("#" 2 + 1 + 1 = 4) = 12 = 0x0C.
vector("subscribe-v4-two-filters", 4, wire("82 0c 00 01 00 03", b"a/+", "01 00 01", b"#", "02"))(
    lambda m: m.Subscribe(1, [m.Subscription("a/+", qos=1), m.Subscription("#", qos=2)])
)
# Wildcard placement in a filter is the broker's check (validate_topic_filter; v5 answers
# with SUBACK 0x8F per filter), not the decoder's: "a#" is carried as is.
# RL = 2 + (2 + 2 + 1) = 7.
vector("subscribe-v4-filter-not-checked-by-codec", 4, wire("82 07 00 04 00 02", b"a#", "00"))(
    lambda m: m.Subscribe(4, [m.Subscription("a#")])
)
# RL = 2 + property length 1 + ("t" 2 + 1 + 1 = 4) = 7.
vector("subscribe-v5-no-properties", 5, wire("82 07 00 03 00 00 01", b"t", "00"))(
    lambda m: m.Subscribe(3, [m.Subscription("t")])
)
# Options (MQTT 5.0 §3.8.3.1): QoS bits 0-1, No Local bit 2, Retain As Published bit 3,
# Retain Handling bits 4-5.  "a/b": 1 | 0x04 | 0x08 | 2 << 4 = 0x2D.
# "$share/g/t" (10 bytes): retain handling 1 << 4 = 0x10.
# Properties 0b 2a (subscription identifier 42, 2) + 26 00 01 "u" 00 01 "v" (7) = 9.
# RL = 2 + 1 + 9 + (2 + 3 + 1 = 6) + (2 + 10 + 1 = 13) = 31 = 0x1F.
vector(
    "subscribe-v5-options-subscription-identifier", 5,
    wire("82 1f 00 02 09 0b 2a 26 00 01", b"u", "00 01", b"v",
         "00 03", b"a/b", "2d 00 0a", b"$share/g/t", "10"),
)(
    lambda m: m.Subscribe(
        2,
        [
            m.Subscription("a/b", qos=1, no_local=True, retain_as_published=True,
                           retain_handling=2),
            m.Subscription("$share/g/t", retain_handling=1),
        ],
        properties=Properties(subscription_identifiers=[42], user_properties=[("u", "v")]),
    )
)

# ---------------------------------------------------------------------------------------
# SUBACK (3.1.1 §3.9, 5.0 §3.9)

# RL = 2 + 3 return codes = 5.
vector("suback-v3", 3, wire("90 05 00 01 00 01 02"))(lambda m: m.SubAck(1, [0, 1, 2]))
# 0x80 (Failure) exists from 3.1.1 on.  RL = 2 + 4 = 6.
vector("suback-v4-with-failure", 4, wire("90 06 00 01 00 01 02 80"))(
    lambda m: m.SubAck(1, [0, 1, 2, 0x80])
)
# RL = 2 + 1 + 1 = 4.
vector("suback-v5-granted-qos-0", 5, wire("90 04 00 02 00 00"))(lambda m: m.SubAck(2, [0]))
# Every SUBACK reason code (12) and a reason string 1f 00 01 "r" (4).
# RL = 2 + 1 + 4 + 12 = 19 = 0x13.
vector("suback-v5-every-reason-code-reason-string", 5,
       wire("90 13 00 01 04 1f 00 01", b"r", "00 01 02 80 83 87 8f 91 97 9e a1 a2"))(
    lambda m: m.SubAck(
        1, [0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2],
        properties=Properties(reason_string="r"),
    )
)

# ---------------------------------------------------------------------------------------
# UNSUBSCRIBE (3.1.1 §3.10, 5.0 §3.10).  First byte 0xA2 (required flags 0x2).

# RL = 2 + (2 + 1) = 5.
vector("unsubscribe-v3", 3, wire("a2 05 00 05 00 01", b"x"))(
    lambda m: m.Unsubscribe(5, ["x"])
)
# RL = 2 + (2 + 3) + (2 + 3) = 12 = 0x0C.
vector("unsubscribe-v4-two-filters", 4, wire("a2 0c 00 01 00 03", b"a/b", "00 03", b"c/#"))(
    lambda m: m.Unsubscribe(1, ["a/b", "c/#"])
)
# Properties 26 00 01 "k" 00 01 "v" (7); RL = 2 + 1 + 7 + (2 + 1) = 13 = 0x0D.
vector("unsubscribe-v5-user-property", 5,
       wire("a2 0d 00 02 07 26 00 01", b"k", "00 01", b"v", "00 01", b"t"))(
    lambda m: m.Unsubscribe(2, ["t"], properties=Properties(user_properties=[("k", "v")]))
)

# ---------------------------------------------------------------------------------------
# UNSUBACK (3.1.1 §3.11: packet id only; 5.0 §3.11: properties and reason codes)

for _level in (3, 4):
    vector(f"unsuback-v{_level}", _level, wire("b0 02 00 01"))(lambda m: m.UnsubAck(1))
# Every UNSUBACK reason code (7).  RL = 2 + 1 + 7 = 10 = 0x0A.
vector("unsuback-v5-every-reason-code", 5, wire("b0 0a 00 01 00 00 11 80 83 87 8f 91"))(
    lambda m: m.UnsubAck(1, [0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91])
)
# Properties 1f 00 02 "ok" (5); RL = 2 + 1 + 5 + 1 = 9.
vector("unsuback-v5-reason-string", 5, wire("b0 09 00 03 05 1f 00 02", b"ok", "00"))(
    lambda m: m.UnsubAck(3, [0], properties=Properties(reason_string="ok"))
)

# ---------------------------------------------------------------------------------------
# PINGREQ, PINGRESP (RL 0 at every level), DISCONNECT

for _level in (3, 4, 5):
    vector(f"pingreq-v{_level}", _level, wire("c0 00"))(lambda m: m.PingReq())
    vector(f"pingresp-v{_level}", _level, wire("d0 00"))(lambda m: m.PingResp())
for _level in (3, 4):
    vector(f"disconnect-v{_level}", _level, wire("e0 00"))(lambda m: m.Disconnect())

# v5: reason 0 and no properties may be left out (RL 0); reason only, RL 1 (§3.14.2.1).
vector("disconnect-v5-normal", 5, wire("e0 00"))(lambda m: m.Disconnect())
vector("disconnect-v5-with-will", 5, wire("e0 01 04"))(lambda m: m.Disconnect(reason_code=4))
vector("disconnect-v5-reason-0-written", 5, wire("e0 01 00"), encodes=False)(
    lambda m: m.Disconnect()
)
vector("disconnect-v5-reason-0-property-length-0", 5, wire("e0 02 00 00"), encodes=False)(
    lambda m: m.Disconnect()
)
vector("disconnect-v5-with-will-property-length-0", 5, wire("e0 02 04 00"), encodes=False)(
    lambda m: m.Disconnect(reason_code=4)
)
# Every DISCONNECT property (§3.14.2.2):
#   11 00 00 00 00        session expiry interval 0   5
#   1c 00 05 "other"      server reference            8
#   1f 00 03 "bye"        reason string               6
#   26 00 01 "a" 00 01 "b" user property              7
#   total 26 = 0x1A.  RL = 1 + 1 + 26 = 28 = 0x1C.
vector(
    "disconnect-v5-session-taken-over-all-properties", 5,
    wire("e0 1c 8e 1a 11 00 00 00 00 1c 00 05", b"other", "1f 00 03", b"bye",
         "26 00 01", b"a", "00 01", b"b"),
)(
    lambda m: m.Disconnect(
        reason_code=0x8E,
        properties=Properties(
            session_expiry_interval=0, server_reference="other", reason_string="bye",
            user_properties=[("a", "b")],
        ),
    )
)

# ---------------------------------------------------------------------------------------
# AUTH (MQTT 5.0 only, §3.15)

vector("auth-v5-success", 5, wire("f0 00"))(lambda m: m.Auth())
# Any other AUTH carries its Authentication Method ("It is a Protocol Error to omit the
# Authentication Method", MQTT 5.0 §3.15.2.2.2); only RL 0 stands for "success, no
# properties" (§3.15.2.1).  15 00 01 "m" = 4; RL = 1 + 1 + 4 = 6.
vector("auth-v5-re-authenticate", 5, wire("f0 06 19 04 15 00 01", b"m"))(
    lambda m: m.Auth(reason_code=0x19, properties=Properties(authentication_method="m"))
)
# Every AUTH property (§3.15.2.2):
#   15 00 05 "SCRAM"        authentication method   8
#   16 00 03 01 02 03       authentication data     6
#   1f 00 02 "go"           reason string           5
#   26 00 01 "a" 00 01 "b"  user property           7
#   total 26 = 0x1A.  RL = 1 + 1 + 26 = 28 = 0x1C.
vector(
    "auth-v5-continue-all-properties", 5,
    wire("f0 1c 18 1a 15 00 05", b"SCRAM", "16 00 03 01 02 03 1f 00 02", b"go",
         "26 00 01", b"a", "00 01", b"b"),
)(
    lambda m: m.Auth(
        reason_code=0x18,
        properties=Properties(
            authentication_method="SCRAM", authentication_data=b"\x01\x02\x03",
            reason_string="go", user_properties=[("a", "b")],
        ),
    )
)

# ---------------------------------------------------------------------------------------
# Remaining Length boundaries (3.1.1 §2.2.3, 5.0 §1.5.5): a level 4 QoS 0 PUBLISH to "t"
# has RL = 2 + 1 + len(payload), so payload = RL - 3.
#   RL        varint            payload
#   127       7f                124
#   128       80 01             125      (128 = 1 * 128 + 0)
#   16383     ff 7f             16380    (0x3FFF = 127 * 128 + 127)
#   16384     80 80 01          16381    (0x4000 = 1 * 128**2)
#   2097151   ff ff 7f          2097148  (0x1FFFFF = 128**3 - 1)
#   2097152   80 80 80 01       2097149  (0x200000 = 128**3: the first 4-byte length)
#   2113665   81 81 81 01       2113662  (128**3 + 128**2 + 128 + 1: every byte non-zero)
# RL 0 is PINGREQ's "c0 00" above.
RL_BOUNDARIES = [
    (127, "7f"),
    (128, "80 01"),
    (16383, "ff 7f"),
    (16384, "80 80 01"),
    (2_097_151, "ff ff 7f"),
    (2_097_152, "80 80 80 01"),
    (2_113_665, "81 81 81 01"),
]
for _rl, _varint in RL_BOUNDARIES:
    _payload = b"x" * (_rl - 3)
    vector(f"publish-v4-remaining-length-{_rl}", 4,
           wire("30", _varint, "00 01", b"t") + _payload)(
        lambda m, p=_payload: m.Publish("t", p)
    )


# ---------------------------------------------------------------------------------------
# Tests


def _ids(vectors: list[Vector]) -> list[str]:
    return [v.name for v in vectors]


ENCODED = [v for v in VECTORS if v.encodes]


@pytest.mark.parametrize("vec", ENCODED, ids=_ids(ENCODED))
def test_encode(codec: ModuleType, vec: Vector) -> None:
    """The packet encodes to exactly the hand-computed bytes, by every encoding call."""
    packet = vec.build(codec)
    assert codec.encode(packet, version=vec.version) == vec.wire
    assert packet.encode(version=vec.version) == vec.wire
    buf = bytearray()
    assert packet.encode_into(buf, version=vec.version) == len(vec.wire)
    assert bytes(buf) == vec.wire


@pytest.mark.parametrize("vec", VECTORS, ids=_ids(VECTORS))
def test_decode(codec: ModuleType, vec: Vector) -> None:
    """The bytes decode to a packet equal to the expected one, of the expected class."""
    packet = codec.decode(vec.wire, version=vec.version)
    expected = vec.build(codec)
    assert type(packet) is type(expected)
    assert packet == expected
    assert codec.decode_from(vec.wire, version=vec.version) == (expected, len(vec.wire))


@pytest.mark.parametrize("vec", VECTORS, ids=_ids(VECTORS))
def test_reencode_gives_the_shortest_form(codec: ModuleType, vec: Vector) -> None:
    """Decoding then encoding is the identity on shortest forms, and never longer."""
    out = codec.encode(codec.decode(vec.wire, version=vec.version), version=vec.version)
    if vec.encodes:
        assert out == vec.wire
    else:
        assert len(out) < len(vec.wire)
        assert codec.decode(out, version=vec.version) == vec.build(codec)


CONNECTS = [v for v in VECTORS if v.wire[0] == 0x10]


@pytest.mark.parametrize("vec", CONNECTS, ids=_ids(CONNECTS))
@pytest.mark.parametrize("version", [3, 4, 5])
def test_connect_carries_its_own_level(codec: ModuleType, vec: Vector, version: int) -> None:
    """CONNECT decodes by its own Protocol Level, and encodes by its protocol_version,
    whatever ``version`` the call is given."""
    packet = codec.decode(vec.wire, version=version)
    assert packet == vec.build(codec)
    assert packet.protocol_version == vec.version
    assert codec.encode(vec.build(codec), version=version) == vec.wire
    assert vec.build(codec).encode(version=version) == vec.wire


def test_connect_protocol_name(codec: ModuleType) -> None:
    """The protocol name is derived from the level: "MQIsdp" for 3, "MQTT" otherwise."""
    assert codec.Connect("c", protocol_version=3).protocol_name == "MQIsdp"
    assert codec.Connect("c", protocol_version=4).protocol_name == "MQTT"
    assert codec.Connect("c").protocol_name == "MQTT"


# ---------------------------------------------------------------------------------------
# Every reason code of every packet type.  These tables are MQTT 5.0's, transcribed from
# the specification (§3.2.2.2 Table 3-1, §3.4.2.1, §3.5.2.1, §3.6.2.1, §3.7.2.1, §3.9.3,
# §3.11.3, §3.14.2.1, §3.15.2.1), not from mqttwire._constants.
V5_REASON_CODES: dict[str, list[int]] = {
    "CONNACK": [0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A,
                0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F],
    "PUBACK": [0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99],
    "PUBREC": [0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99],
    "PUBREL": [0x00, 0x92],
    "PUBCOMP": [0x00, 0x92],
    "SUBACK": [0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2],
    "UNSUBACK": [0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91],
    "DISCONNECT": [0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F,
                   0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D,
                   0x9E, 0x9F, 0xA0, 0xA1, 0xA2],
    "AUTH": [0x00, 0x18, 0x19],
}


def _reason_code_case(ptype: str, code: int) -> tuple[bytes, bytes, Callable[[ModuleType], Any]]:
    """(bytes carrying ``code`` to decode, the shortest encoding, the packet) for v5."""
    rc = bytes((code,))
    if ptype == "CONNACK":  # flags, reason code, property length: RL 3
        longest = shortest = b"\x20\x03\x00" + rc + b"\x00"
        return longest, shortest, lambda m: m.ConnAck(reason_code=code)
    if ptype in ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP"):
        first = {"PUBACK": 0x40, "PUBREC": 0x50, "PUBREL": 0x62, "PUBCOMP": 0x70}[ptype]
        cls = {"PUBACK": "PubAck", "PUBREC": "PubRec", "PUBREL": "PubRel",
               "PUBCOMP": "PubComp"}[ptype]
        # packet id 00 01, reason code: RL 3 (RL 2 when the reason is 0).
        longest = bytes((first, 3, 0, 1, code))
        shortest = bytes((first, 2, 0, 1)) if code == 0 else longest
        return longest, shortest, lambda m: getattr(m, cls)(1, reason_code=code)
    if ptype == "SUBACK":  # packet id, property length, one reason code: RL 4
        longest = shortest = b"\x90\x04\x00\x01\x00" + rc
        return longest, shortest, lambda m: m.SubAck(1, [code])
    if ptype == "UNSUBACK":
        longest = shortest = b"\xb0\x04\x00\x01\x00" + rc
        return longest, shortest, lambda m: m.UnsubAck(1, [code])
    if ptype == "DISCONNECT":  # reason code only: RL 1 (RL 0 when the reason is 0)
        longest = b"\xe0\x01" + rc
        shortest = b"\xe0\x00" if code == 0 else longest
        return longest, shortest, lambda m: m.Disconnect(reason_code=code)
    # AUTH: reason code, property length 4, 15 00 01 "m" (the Authentication Method every
    # AUTH but RL 0 must carry, §3.15.2.2.2): RL = 1 + 1 + 4 = 6.
    longest = shortest = b"\xf0\x06" + rc + b"\x04\x15\x00\x01m"
    return longest, shortest, lambda m: m.Auth(
        reason_code=code, properties=Properties(authentication_method="m")
    )


REASON_CODE_CASES = [(p, c) for p, codes in V5_REASON_CODES.items() for c in codes]


@pytest.mark.parametrize(
    ("ptype", "code"), REASON_CODE_CASES, ids=[f"{p}-0x{c:02X}" for p, c in REASON_CODE_CASES]
)
def test_v5_reason_code_accepted(codec: ModuleType, ptype: str, code: int) -> None:
    """Every reason code MQTT 5.0 defines for a packet type decodes, and round-trips."""
    longest, shortest, build = _reason_code_case(ptype, code)
    packet = codec.decode(longest, version=5)
    assert packet == build(codec)
    if ptype in ("SUBACK", "UNSUBACK"):
        assert packet.reason_codes == [code]
    else:
        assert packet.reason_code == code
    assert codec.encode(build(codec), version=5) == shortest


@pytest.mark.parametrize("level", [3, 4])
@pytest.mark.parametrize("code", range(6))
def test_v3_connack_return_codes(codec: ModuleType, level: int, code: int) -> None:
    """CONNACK return codes 0-5 (3.1.1 §3.2.2.3 Table 3.1; 3.1 §3.2 the same six)."""
    data = bytes((0x20, 0x02, 0x00, code))
    packet = codec.decode(data, version=level)
    assert packet == codec.ConnAck(reason_code=code)
    assert packet.reason_code == code
    assert packet.properties is None
    assert codec.encode(packet, version=level) == data


@pytest.mark.parametrize(
    ("level", "code"), [(3, 0), (3, 1), (3, 2), (4, 0), (4, 1), (4, 2), (4, 0x80)]
)
def test_v3_suback_return_codes(codec: ModuleType, level: int, code: int) -> None:
    """SUBACK return codes: granted QoS 0-2, and 0x80 Failure from 3.1.1 on (§3.9.3)."""
    data = bytes((0x90, 0x03, 0x00, 0x01, code))
    packet = codec.decode(data, version=level)
    assert packet == codec.SubAck(1, [code])
    assert codec.encode(packet, version=level) == data


# ---------------------------------------------------------------------------------------
# What v3 decoding yields for v5 fields, and packet equality.


@pytest.mark.parametrize("level", [3, 4])
def test_v3_acks_have_reason_code_0_and_no_properties(codec: ModuleType, level: int) -> None:
    """v3 acknowledgements carry no reason code or properties: 0 and None (decided)."""
    for data in (b"\x40\x02\x00\x01", b"\x50\x02\x00\x01", b"\x62\x02\x00\x01",
                 b"\x70\x02\x00\x01"):
        packet = codec.decode(data, version=level)
        assert packet.packet_id == 1
        assert packet.reason_code == 0
        assert packet.properties is None
    unsuback = codec.decode(b"\xb0\x02\x00\x07", version=level)
    assert unsuback.packet_id == 7
    assert unsuback.reason_codes == []
    assert unsuback.properties is None
    assert codec.decode(b"\xe0\x00", version=level).reason_code == 0


def test_empty_property_block_decodes_as_none(codec: ModuleType) -> None:
    """A v5 packet with property length 0 has properties None, and equals a packet built
    with an empty Properties()."""
    packet = codec.decode(b"\x30\x04\x00\x01t\x00", version=5)  # RL = 3 + 1 = 4
    assert packet.properties is None
    assert packet == codec.Publish("t", properties=Properties())
    assert codec.Publish("t", properties=Properties()) == codec.Publish("t")
    assert codec.Publish("t", properties=Properties()).encode() == b"\x30\x04\x00\x01t\x00"


@pytest.mark.parametrize("name", [
    "connect-v5-minimal", "connect-v5-will-no-properties", "connack-v5-success",
    "subscribe-v5-no-properties", "suback-v5-granted-qos-0",
    "puback-v5-captured-reason-0x10-property-length-0",
    "disconnect-v5-reason-0-property-length-0",
])
def test_empty_property_blocks_are_none(codec: ModuleType, name: str) -> None:
    """Every v5 packet with a property length of 0 decodes with properties None."""
    vec = VECTORS_BY_NAME[name]
    packet = codec.decode(vec.wire, version=5)
    assert packet.properties is None
    if getattr(packet, "will", None) is not None:
        assert packet.will.properties is None


def test_properties_in_any_wire_order(codec: ModuleType) -> None:
    """Decoding takes properties in whatever order they come; encoding sorts them.
    PUBLISH to "t" with 08 00 01 "r" (4) before 02 00 00 00 05 (5): 9 bytes;
    RL = 3 + 1 + 9 = 13 = 0x0D."""
    data = bytes.fromhex("300d 0001 74 09 08000172 0200000005")
    expected = codec.Publish(
        "t", properties=Properties(response_topic="r", message_expiry_interval=5)
    )
    assert codec.decode(data, version=5) == expected
    assert codec.encode(expected) == bytes.fromhex("300d 0001 74 09 0200000005 08000172")


def test_list_fields_are_lists(codec: ModuleType) -> None:
    """List fields are stored as lists, whatever iterable the constructor was given."""
    sub = codec.Subscribe(1, (codec.Subscription(f) for f in ("a", "b")))
    assert type(sub.subscriptions) is list and len(sub.subscriptions) == 2
    assert type(codec.Unsubscribe(1, ("a",)).topic_filters) is list
    assert type(codec.SubAck(1, (0, 1)).reason_codes) is list
    assert type(codec.UnsubAck(1).reason_codes) is list
    assert type(codec.UnsubAck(1, iter([0x11])).reason_codes) is list
    props = Properties(user_properties=(("k", "v"),), subscription_identifiers=(1, 2))
    assert props.user_properties == [("k", "v")]
    assert type(props.subscription_identifiers) is list
    decoded = codec.decode(VECTORS_BY_NAME["publish-v5-all-properties"].wire, version=5)
    assert type(decoded.properties.user_properties) is list
    assert decoded.properties.user_properties == [("k", "v1"), ("k", "v2")]
    assert decoded.properties.subscription_identifiers == [1, 268_435_455]


def test_packets_differ_when_a_field_differs(codec: ModuleType) -> None:
    """Equality looks at every field (a sanity check that == is not always True)."""
    base = codec.Publish("t", b"p", qos=1, packet_id=1)
    assert base == codec.Publish("t", b"p", qos=1, packet_id=1)
    assert base != codec.Publish("u", b"p", qos=1, packet_id=1)
    assert base != codec.Publish("t", b"q", qos=1, packet_id=1)
    assert base != codec.Publish("t", b"p", qos=2, packet_id=1)
    assert base != codec.Publish("t", b"p", qos=1, packet_id=2)
    assert base != codec.Publish("t", b"p", qos=1, packet_id=1, retain=True)
    assert base != codec.Publish("t", b"p", qos=1, packet_id=1, dup=True)
    assert base != codec.Publish("t", b"p", qos=1, packet_id=1,
                                 properties=Properties(topic_alias=1))
    assert codec.PubAck(1) != codec.PubRec(1)
    assert codec.PubAck(1) != codec.PubAck(1, reason_code=0x10)


# ---------------------------------------------------------------------------------------
# The corpus file.

VECTORS_BY_NAME = {v.name: v for v in VECTORS}


def corpus_entries() -> dict[str, dict[str, Any]]:
    """What tests/vectors/valid.json must hold: every vector up to CORPUS_MAX_BYTES."""
    return {
        v.name: {"version": v.version, "hex": v.wire.hex()}
        for v in VECTORS
        if len(v.wire) <= CORPUS_MAX_BYTES
    }


def test_vector_names_are_unique() -> None:
    assert len(VECTORS_BY_NAME) == len(VECTORS)


def test_corpus_file_matches_the_vectors() -> None:
    """valid.json is exactly the hand-checked vectors (regenerate it with
    ``python tests/codec/test_vectors.py`` after changing them)."""
    assert json.loads(CORPUS.read_text()) == corpus_entries()


def test_every_packet_type_at_every_level() -> None:
    """The vectors cover each packet type at each level it exists at (AUTH: 5 only)."""
    seen = {(v.wire[0] >> 4, v.version) for v in VECTORS}
    expected = {(t, level) for t in range(1, 15) for level in (3, 4, 5)} | {(15, 5)}
    assert seen == expected


def test_every_property_appears() -> None:
    """Every MQTT 5.0 property is in at least one vector (MQTT 5.0 §2.2.2.2, Table 2-4)."""
    names = {
        "payload_format_indicator", "message_expiry_interval", "content_type",
        "response_topic", "correlation_data", "subscription_identifiers",
        "session_expiry_interval", "assigned_client_identifier", "server_keep_alive",
        "authentication_method", "authentication_data", "request_problem_information",
        "will_delay_interval", "request_response_information", "response_information",
        "server_reference", "reason_string", "receive_maximum", "topic_alias_maximum",
        "topic_alias", "maximum_qos", "retain_available", "user_properties",
        "maximum_packet_size", "wildcard_subscription_available",
        "subscription_identifier_available", "shared_subscription_available",
    }
    assert len(names) == 27
    seen: set[str] = set()
    for vec in VECTORS:
        packet = vec.build(mqttwire)  # the top-level classes, whichever implementation
        for props in (getattr(packet, "properties", None),
                      getattr(getattr(packet, "will", None), "properties", None)):
            if props is not None:
                seen |= {n for n in names if getattr(props, n) not in (None, [])}
    assert seen == names


if __name__ == "__main__":
    # Rewrite the corpus file from the vectors above.
    CORPUS.parent.mkdir(exist_ok=True)
    CORPUS.write_text(json.dumps(corpus_entries(), indent=1, sort_keys=True) + "\n")
