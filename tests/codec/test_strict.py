"""Strictness: every rule the decoder enforces, fed the bad bytes, one test per rule.

Each case's bytes were built by hand (the arithmetic is in the comment beside it) and
carry exactly one fault.  A case names the rule it breaks (the key of
``mqttwire._errors._RULES``, which is also the start of its test id) and says what the
error must be: its class, reason code, rule number, and, where the project defined it, its
offset in the input.  Every message must start with the packet type's name.

The encoder-side tests at the bottom check that encoding refuses what decoding refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from mqttwire import (
    MalformedPacket,
    MQTTWireError,
    Properties,
    ProtocolError,
)
from mqttwire._errors import rule


def wire(*parts: str | bytes) -> bytes:
    """Packet bytes from hex strings ("30 12") and literal bytes (b"sensors/temp")."""
    return b"".join(bytes.fromhex(p) if isinstance(p, str) else p for p in parts)


@dataclass(frozen=True)
class Case:
    """Bad bytes and the error they must raise."""

    key: str | tuple[str, ...] | None  # rule key(s) in _RULES; None: no rule number asked for
    note: str  # what the case is, for its test id
    version: int  # protocol level passed to decode (for CONNECT: also its own level)
    data: bytes
    cls: type[MQTTWireError]
    ptype: str | None  # the packet type the message must name; None when it has none
    offset: int | None = None  # where the fault is, when the project defined it
    reason_code: int | None = None  # None: the class default

    @property
    def id(self) -> str:
        key = self.key if isinstance(self.key, str) else "|".join(self.key or ("malformed",))
        return f"{key}-{self.note}-v{self.version}"


CASES: list[Case] = []


def case(key: str | tuple[str, ...] | None, note: str, version: int, data: bytes,
         cls: type[MQTTWireError], ptype: str | None, offset: int | None = None,
         reason_code: int | None = None) -> None:
    CASES.append(Case(key, note, version, data, cls, ptype, offset, reason_code))


M, P = MalformedPacket, ProtocolError

# ---------------------------------------------------------------------------------------
# Fixed header (3.1.1 §2.2, 5.0 §2.1)

# Flags other than the required ones: 0x2 for PUBREL, SUBSCRIBE, UNSUBSCRIBE, 0 for the
# rest [MQTT-2.2.2-1] / [MQTT-2.1.3-1].  Offset 0: the first byte.
_BAD_FLAGS_V4 = [
    ("CONNECT", wire("11 0d 00 04", b"MQTT", "04 02 00 3c 00 01", b"c")),
    ("CONNACK", wire("21 02 00 00")),
    ("PUBACK", wire("41 02 00 01")),
    ("PUBREC", wire("58 02 00 01")),
    ("PUBREL-0x0", wire("60 02 00 01")),
    ("PUBREL-0x3", wire("63 02 00 01")),
    ("PUBCOMP", wire("72 02 00 01")),
    ("SUBSCRIBE-0x0", wire("80 06 00 01 00 01", b"t", "00")),
    ("SUBSCRIBE-0xA", wire("8a 06 00 01 00 01", b"t", "00")),
    ("SUBACK", wire("91 03 00 01 00")),
    ("UNSUBSCRIBE", wire("a0 05 00 01 00 01", b"t")),
    ("UNSUBACK", wire("b1 02 00 01")),
    ("PINGREQ", wire("c1 00")),
    ("PINGRESP", wire("d8 00")),
    ("DISCONNECT", wire("e2 00")),
]
for _name, _data in _BAD_FLAGS_V4:
    case("fixed_header_flags", _name, 4, _data, M, _name.split("-")[0], offset=0)
_BAD_FLAGS_V5 = [
    ("CONNECT", wire("12 0e 00 04", b"MQTT", "05 02 00 3c 00 00 01", b"c")),
    ("CONNACK", wire("24 03 00 00 00")),
    ("PUBACK", wire("41 02 00 01")),
    ("PUBREL", wire("66 02 00 01")),
    ("SUBSCRIBE", wire("83 07 00 01 00 00 01", b"t", "00")),
    ("UNSUBACK", wire("b2 04 00 01 00 00")),
    ("DISCONNECT", wire("e1 00")),
    ("AUTH", wire("f1 00")),
]
for _name, _data in _BAD_FLAGS_V5:
    case("fixed_header_flags", _name, 5, _data, M, _name, offset=0)

# Packet type 0 is reserved (3.1.1 §2.2.1, 5.0 §2.1.2); AUTH (15) exists only in 5.0.
for _v in (3, 4, 5):
    case("packet_type_reserved", "type-0", _v, wire("00 00"), M, None)
for _v in (3, 4):
    case("auth_v5_only", "AUTH", _v, wire("f0 00"), M, "AUTH")

# A Remaining Length of more than four bytes (3.1.1 §2.2.3, 5.0 §1.5.5); offset 1, where
# the Remaining Length starts.
for _v in (4, 5):
    case("remaining_length", "PUBLISH-5-bytes", _v, wire("30 ff ff ff ff 7f"), M, "PUBLISH",
         offset=1)
    case("remaining_length", "PINGREQ-5-bytes", _v, wire("c0 80 80 80 80 01"), M, "PINGREQ",
         offset=1)

# Variable Byte Integers in their shortest form only [MQTT-1.5.5-1], at every level.
for _v in (3, 4, 5):
    # 80 00 encodes 0 in two bytes.
    case("varint_minimal", "remaining-length-PINGREQ", _v, wire("c0 80 00"), M, "PINGREQ")
# 83 00 = 3 in two bytes; the PUBLISH to "t" that follows is 3 bytes long.
case("varint_minimal", "remaining-length-PUBLISH", 4, wire("30 83 00 00 01", b"t"), M,
     "PUBLISH")
# v5 PUBACK: packet id, reason 0x10, property length 80 00 (0 in two bytes): RL 5.
case("varint_minimal", "property-length", 5, wire("40 05 00 01 10 80 00"), M, "PUBACK")
# Subscription identifier 81 00 (1 in two bytes): topic 3 + property length 1 + 3 = RL 7.
case("varint_minimal", "subscription-identifier", 5, wire("30 07 00 01", b"t", "03 0b 81 00"),
     M, "PUBLISH")

# ---------------------------------------------------------------------------------------
# PUBLISH (3.1.1 §3.3, 5.0 §3.3)

for _v in (3, 4, 5):
    _props = "" if _v < 5 else "00"
    _rl = 0 if _v < 5 else 1  # the v5 property length byte
    # QoS bits 11 [MQTT-3.3.1-4]: 0x36 = 0x30 | 3 << 1.  RL = 3 + 2 (packet id) (+ 1).
    case("qos_bits", "0x36", _v, wire(f"36 {5 + _rl:02x} 00 01", b"t", "00 01", _props), M,
         "PUBLISH", offset=0)
    # DUP with QoS 0 [MQTT-3.3.1-2]: 0x38 = 0x30 | 0x08.  RL = 3 (+ 1).
    case("dup_qos0", "0x38", _v, wire(f"38 {3 + _rl:02x} 00 01", b"t", _props), M, "PUBLISH",
         offset=0)
    # Wildcards in a topic name [MQTT-3.3.2-2]: "a/+" at offsets 4-6, "+" at 6.
    case("topic_name_wildcard", "plus", _v, wire(f"30 {5 + _rl:02x} 00 03", b"a/+", _props),
         M, "PUBLISH", offset=6)
    # "a#": "#" at offset 5.
    case("topic_name_wildcard", "hash", _v, wire(f"30 {4 + _rl:02x} 00 02", b"a#", _props),
         M, "PUBLISH", offset=5)
    # Packet identifier 0 with QoS 1 and 2 [MQTT-2.3.1-1] / [MQTT-2.2.1-3]: the id's first
    # byte is at offset 5 (after 32 RL 00 01 "t").
    case("packet_id_nonzero", "PUBLISH-qos1", _v,
         wire(f"32 {5 + _rl:02x} 00 01", b"t", "00 00", _props), P, "PUBLISH", offset=5)
    case("packet_id_nonzero", "PUBLISH-qos2", _v,
         wire(f"34 {5 + _rl:02x} 00 01", b"t", "00 00", _props), P, "PUBLISH", offset=5)
for _v in (3, 4):
    # A topic name is at least one character [MQTT-4.7.3-1]: RL 2, length 0.
    case("topic_length", "PUBLISH-empty-topic", _v, wire("30 02 00 00"), M, "PUBLISH")
# In 5.0 an empty topic name needs a Topic Alias (§3.3.2.1): RL = 2 + property length 1.
case("topic_alias_missing", "PUBLISH-empty-topic", 5, wire("30 03 00 00 00"), P, "PUBLISH")
# Same with properties that are not a topic alias: 02 00 00 00 0a (5); RL = 2 + 1 + 5 = 8.
case("topic_alias_missing", "PUBLISH-empty-topic-other-property", 5,
     wire("30 08 00 00 05 02 00 00 00 0a"), P, "PUBLISH")

# ---------------------------------------------------------------------------------------
# UTF-8 Encoded Strings (3.1.1 §1.5.3, 5.0 §1.5.4): well-formed [MQTT-1.5.3-1] /
# [MQTT-1.5.4-1], no U+0000 [MQTT-1.5.3-2] / [MQTT-1.5.4-2].  The offset is the first byte
# of the ill-formed sequence, or the NUL byte.

# A topic "a" + the bad sequence: 30 RL 00 len "a" bad...; "a" at offset 4, bad at 5.
_BAD_UTF8 = [
    ("bad-continuation", "c3 28"),  # c3 needs a continuation byte 80..bf; 28 is "("
    ("overlong-2-byte", "c0 af"),  # "/" in two bytes
    ("overlong-3-byte", "e0 80 af"),  # "/" in three bytes
    ("surrogate", "ed a0 80"),  # U+D800 encoded
    ("byte-ff", "ff"),  # never appears in UTF-8
    ("above-u10ffff", "f4 90 80 80"),  # U+110000
    ("truncated-at-end", "e2 82"),  # "€" missing its last byte
]
for _v in (3, 4, 5):
    for _note, _bad in _BAD_UTF8:
        _n = 1 + len(bytes.fromhex(_bad))
        _props = "00" if _v == 5 else ""
        _rl = 2 + _n + (1 if _v == 5 else 0)
        case("utf8_well_formed", f"topic-{_note}", _v,
             wire(f"30 {_rl:02x} 00 {_n:02x}", b"a", _bad, _props), M, "PUBLISH", offset=5)
# Client identifier: 10 0e 00 04 "MQTT" 04 02 00 3c (offsets 0-11), 00 02 (12-13), "a" (14),
# ff (15).  RL = 10 + 2 + 2 = 14 = 0x0E.
case("utf8_well_formed", "client-id", 4, wire("10 0e 00 04", b"MQTT", "04 02 00 3c 00 02",
                                              b"a", "ff"), M, "CONNECT", offset=15)
# User name (flags 0x82): client id 00 01 "c" (12-14), 00 02 (15-16), "a" (17), ff (18).
# RL = 10 + 3 + 4 = 17 = 0x11.
case("utf8_well_formed", "username", 4, wire("10 11 00 04", b"MQTT", "04 82 00 3c 00 01",
                                             b"c", "00 02", b"a", "ff"), M, "CONNECT",
     offset=18)
# SUBSCRIBE filter: 82 07 00 01 (0-3), 00 02 (4-5), "a" (6), ff (7), options 00.
# RL = 2 + 4 + 1 = 7.
case("utf8_well_formed", "topic-filter", 4, wire("82 07 00 01 00 02", b"a", "ff 00"), M,
     "SUBSCRIBE", offset=7)
# UNSUBSCRIBE filter: a2 06 00 01 00 02 "a" ff; RL = 2 + 4 = 6; ff at 7.
case("utf8_well_formed", "unsubscribe-filter", 4, wire("a2 06 00 01 00 02", b"a", "ff"), M,
     "UNSUBSCRIBE", offset=7)
# v5 PUBACK user property name: 40 0b 00 01 00 (0-4), property length 07 (5), 26 (6),
# 00 02 (7-8), "a" (9), ff (10), value 00 00.  Properties 1 + 4 + 2 = 7;
# RL = 2 + 1 + 1 + 7 = 11 = 0x0B.
case("utf8_well_formed", "user-property-name", 5,
     wire("40 0b 00 01 00 07 26 00 02", b"a", "ff 00 00"), M, "PUBACK", offset=10)
# v5 DISCONNECT user property value: e0 09 00 (0-2), 07 (3), 26 (4), 00 00 (5-6),
# 00 02 (7-8), "a" (9), ff (10).  RL = 1 + 1 + 7 = 9.
case("utf8_well_formed", "user-property-value", 5,
     wire("e0 09 00 07 26 00 00 00 02", b"a", "ff"), M, "DISCONNECT", offset=10)
# v5 SUBACK reason string: 90 09 00 01 (0-3), 05 (4), 1f (5), 00 02 (6-7), "a" (8),
# ff (9), reason code 00.  RL = 2 + 1 + 5 + 1 = 9.
case("utf8_well_formed", "reason-string", 5, wire("90 09 00 01 05 1f 00 02", b"a", "ff 00"),
     M, "SUBACK", offset=9)
# v5 PUBLISH content type: 30 09 00 01 "t" (0-4), 05 (5), 03 (6), 00 02 (7-8), "a" (9),
# ff (10).  RL = 3 + 1 + 5 = 9.
case("utf8_well_formed", "content-type", 5, wire("30 09 00 01", b"t", "05 03 00 02", b"a",
                                                 "ff"), M, "PUBLISH", offset=10)

# U+0000: topic "a\0b", NUL at offset 5.
for _v in (3, 4):
    case("utf8_null", "topic", _v, wire("30 05 00 03 61 00 62"), M, "PUBLISH", offset=5)
case("utf8_null", "topic", 5, wire("30 06 00 03 61 00 62 00"), M, "PUBLISH", offset=5)
# v5 client id "a\0": 10 0f 00 04 "MQTT" 05 02 00 3c 00 (0-12), 00 02 (13-14), "a" (15),
# NUL (16).  RL = 11 + 4 = 15 = 0x0F.
case("utf8_null", "client-id", 5, wire("10 0f 00 04", b"MQTT", "05 02 00 3c 00 00 02 61 00"),
     M, "CONNECT", offset=16)
# v4 will topic "a\0" (flags 0x06: will, clean session): client id 00 01 "c" (12-14),
# 00 02 (15-16), "a" (17), NUL (18), will message 00 00.  RL = 10 + 3 + 4 + 2 = 19 = 0x13.
case("utf8_null", "will-topic", 4, wire("10 13 00 04", b"MQTT", "04 06 00 3c 00 01", b"c",
                                        "00 02 61 00 00 00"), M, "CONNECT", offset=18)

# ---------------------------------------------------------------------------------------
# Packet identifiers other than PUBLISH's: 0 is not allowed [MQTT-2.3.1-1] /
# [MQTT-2.2.1-3]; the id follows the fixed header, at offset 2.
for _v in (3, 4, 5):
    for _name, _first in (("PUBACK", "40"), ("PUBREC", "50"), ("PUBREL", "62"),
                          ("PUBCOMP", "70")):
        case("packet_id_nonzero", _name, _v, wire(f"{_first} 02 00 00"), P, _name, offset=2)
for _v in (3, 4):
    case("packet_id_nonzero", "SUBSCRIBE", _v, wire("82 06 00 00 00 01", b"t", "00"), P,
         "SUBSCRIBE", offset=2)
    case("packet_id_nonzero", "SUBACK", _v, wire("90 03 00 00 00"), P, "SUBACK", offset=2)
    case("packet_id_nonzero", "UNSUBSCRIBE", _v, wire("a2 05 00 00 00 01", b"t"), P,
         "UNSUBSCRIBE", offset=2)
    case("packet_id_nonzero", "UNSUBACK", _v, wire("b0 02 00 00"), P, "UNSUBACK", offset=2)
case("packet_id_nonzero", "SUBSCRIBE", 5, wire("82 07 00 00 00 00 01", b"t", "00"), P,
     "SUBSCRIBE", offset=2)
case("packet_id_nonzero", "SUBACK", 5, wire("90 04 00 00 00 00"), P, "SUBACK", offset=2)
case("packet_id_nonzero", "UNSUBSCRIBE", 5, wire("a2 06 00 00 00 00 01", b"t"), P,
     "UNSUBSCRIBE", offset=2)
case("packet_id_nonzero", "UNSUBACK", 5, wire("b0 04 00 00 00 00"), P, "UNSUBACK", offset=2)

# ---------------------------------------------------------------------------------------
# Fields that run past the Remaining Length, and bytes left over (no rule number asked).
_LENGTH_MISMATCH = [
    # topic length 5, but only "ab" fits in RL 4
    ("PUBLISH-topic-past-end", 4, wire("30 04 00 05", b"ab"), "PUBLISH"),
    # QoS 1 with no room for the packet id: RL 3 = topic only
    ("PUBLISH-packet-id-past-end", 4, wire("32 03 00 01", b"t"), "PUBLISH"),
    # v5 PUBLISH without its property length (RL 3 = topic only)
    ("PUBLISH-v5-no-property-length", 5, wire("30 03 00 01", b"t"), "PUBLISH"),
    # property length 2, but message expiry interval needs 4 bytes: RL = 3 + 1 + 2 = 6
    ("PUBLISH-property-past-block", 5, wire("30 06 00 01", b"t", "02 02 00"), "PUBLISH"),
    # v3 PUBACK is exactly the packet id: RL 3 leaves a byte over
    ("PUBACK-v4-extra-byte", 4, wire("40 03 00 01 00"), "PUBACK"),
    ("PUBACK-v3-extra-byte", 3, wire("40 03 00 01 00"), "PUBACK"),
    ("PUBREL-v4-extra-byte", 4, wire("62 03 00 01 00"), "PUBREL"),
    ("PUBACK-v4-short", 4, wire("40 01 00"), "PUBACK"),
    ("PUBACK-v5-short", 5, wire("40 01 00"), "PUBACK"),
    # v5 PUBACK: property length 5 with RL 4
    ("PUBACK-v5-property-length-past-end", 5, wire("40 04 00 01 00 05"), "PUBACK"),
    # v5 PUBACK: property length 0, then a stray byte
    ("PUBACK-v5-extra-byte", 5, wire("40 05 00 01 00 00 00"), "PUBACK"),
    ("UNSUBACK-v4-extra-byte", 4, wire("b0 03 00 01 00"), "UNSUBACK"),
    ("CONNACK-v4-short", 4, wire("20 01 00"), "CONNACK"),
    ("CONNACK-v4-extra-byte", 4, wire("20 03 00 00 00"), "CONNACK"),
    # v5 CONNACK without its property length
    ("CONNACK-v5-no-property-length", 5, wire("20 02 00 00"), "CONNACK"),
    # SUBSCRIBE filter without its options byte: RL = 2 + 3
    ("SUBSCRIBE-options-past-end", 4, wire("82 05 00 01 00 01", b"t"), "SUBSCRIBE"),
    # CONNECT flags say "user name" (0x82) but the payload ends after the client id
    ("CONNECT-username-past-end", 4, wire("10 0d 00 04", b"MQTT", "04 82 00 3c 00 01", b"c"),
     "CONNECT"),
    # CONNECT with a byte after its last field: RL 14 = 13 + 1
    ("CONNECT-extra-byte", 4, wire("10 0e 00 04", b"MQTT", "04 02 00 3c 00 01", b"c", "ff"),
     "CONNECT"),
    # PINGREQ, PINGRESP and (before 5.0) DISCONNECT have RL 0 (3.1.1 §3.12-3.14)
    ("PINGREQ-v4-rl-1", 4, wire("c0 01 00"), "PINGREQ"),
    ("PINGREQ-v5-rl-1", 5, wire("c0 01 00"), "PINGREQ"),
    ("PINGRESP-v4-rl-1", 4, wire("d0 01 00"), "PINGRESP"),
    ("PINGRESP-v5-rl-1", 5, wire("d0 01 00"), "PINGRESP"),
    ("DISCONNECT-v3-rl-1", 3, wire("e0 01 00"), "DISCONNECT"),
    ("DISCONNECT-v4-rl-1", 4, wire("e0 01 00"), "DISCONNECT"),
    # v5 DISCONNECT: property length 5 with RL 2
    ("DISCONNECT-v5-property-length-past-end", 5, wire("e0 02 00 05"), "DISCONNECT"),
]
for _note, _v, _data, _name in _LENGTH_MISMATCH:
    case(None, _note, _v, _data, M, _name)

# ---------------------------------------------------------------------------------------
# Properties (MQTT 5.0 §2.2.2)

# Unknown identifiers, and identifiers the packet type does not allow (Table 2-4).
# PUBLISH to "t" with property block XX: RL = 3 + 1 + len(block).
_PROPERTY_IDENTIFIER = [
    ("unknown-0x00", wire("30 06 00 01", b"t", "02 00 00"), "PUBLISH"),
    ("unknown-0x04", wire("30 06 00 01", b"t", "02 04 00"), "PUBLISH"),
    ("unknown-0x7f", wire("30 06 00 01", b"t", "02 7f 00"), "PUBLISH"),
    # session expiry interval (CONNECT, CONNACK, DISCONNECT only): 11 00 00 00 01 (5)
    ("session-expiry-in-PUBLISH", wire("30 09 00 01", b"t", "05 11 00 00 00 01"), "PUBLISH"),
    # reason string in PUBLISH: 1f 00 01 "x" (4); RL = 3 + 1 + 4 = 8
    ("reason-string-in-PUBLISH", wire("30 08 00 01", b"t", "04 1f 00 01", b"x"), "PUBLISH"),
    # topic alias in CONNECT: 23 00 01 (3); RL = 10 + 1 + 3 + 3 = 17 = 0x11
    ("topic-alias-in-CONNECT",
     wire("10 11 00 04", b"MQTT", "05 02 00 3c 03 23 00 01 00 01", b"c"), "CONNECT"),
    # will delay interval outside the will properties: 18 00 00 00 01 (5); RL = 19 = 0x13
    ("will-delay-in-CONNECT",
     wire("10 13 00 04", b"MQTT", "05 02 00 3c 05 18 00 00 00 01 00 01", b"c"), "CONNECT"),
    # session expiry in the will properties (flags 0x06): client id 3, will properties
    # 05 11 00 00 00 01 (6), will topic 00 01 "w" (3), will payload 00 00 (2): payload 14;
    # RL = 11 + 14 = 25 = 0x19
    ("session-expiry-in-will",
     wire("10 19 00 04", b"MQTT", "05 06 00 3c 00 00 01", b"c", "05 11 00 00 00 01",
          "00 01", b"w", "00 00"), "CONNECT"),
    # subscription identifier in PUBACK: 0b 01 (2); RL = 2 + 1 + 1 + 2 = 6
    ("subscription-identifier-in-PUBACK", wire("40 06 00 01 00 02 0b 01"), "PUBACK"),
    # reason string in SUBSCRIBE: 1f 00 01 "x" (4); RL = 2 + 1 + 4 + 4 = 11 = 0x0B
    ("reason-string-in-SUBSCRIBE",
     wire("82 0b 00 01 04 1f 00 01", b"x", "00 01", b"t", "00"), "SUBSCRIBE"),
    # reason string in UNSUBSCRIBE: RL = 2 + 1 + 4 + 3 = 10 = 0x0A
    ("reason-string-in-UNSUBSCRIBE",
     wire("a2 0a 00 01 04 1f 00 01", b"x", "00 01", b"t"), "UNSUBSCRIBE"),
    # content type in AUTH: 15 00 01 "m" (4) + 03 00 01 "x" (4) = 8; RL = 1 + 1 + 8 = 10
    ("content-type-in-AUTH", wire("f0 0a 18 08 15 00 01", b"m", "03 00 01", b"x"), "AUTH"),
    # topic alias in CONNACK: 23 00 01 (3); RL = 2 + 1 + 3 = 6
    ("topic-alias-in-CONNACK", wire("20 06 00 00 03 23 00 01"), "CONNACK"),
]
for _note, _data, _name in _PROPERTY_IDENTIFIER:
    case("property_identifier", _note, 5, _data, M, _name)

# Properties that may appear at most once (everything but user properties, and
# subscription identifiers in PUBLISH).
_PROPERTY_DUPLICATE = [
    # message expiry twice: 2 * 5 = 10; RL = 3 + 1 + 10 = 14 = 0x0E
    ("message-expiry-PUBLISH",
     wire("30 0e 00 01", b"t", "0a 02 00 00 00 01 02 00 00 00 02"), "PUBLISH"),
    # topic alias twice: 2 * 3 = 6; RL = 3 + 1 + 6 = 10 = 0x0A
    ("topic-alias-PUBLISH", wire("30 0a 00 01", b"t", "06 23 00 01 23 00 02"), "PUBLISH"),
    # subscription identifier twice in SUBSCRIBE: 0b 01 0b 02 (4); RL = 2 + 1 + 4 + 4 = 11
    ("subscription-identifier-SUBSCRIBE",
     wire("82 0b 00 01 04 0b 01 0b 02 00 01", b"t", "00"), "SUBSCRIBE"),
    # reason string twice: 2 * 4 = 8; RL = 2 + 1 + 1 + 8 = 12 = 0x0C
    ("reason-string-PUBACK", wire("40 0c 00 01 00 08 1f 00 01", b"a", "1f 00 01", b"b"),
     "PUBACK"),
    # session expiry twice: 2 * 5 = 10; RL = 10 + 1 + 10 + 3 = 24 = 0x18
    ("session-expiry-CONNECT",
     wire("10 18 00 04", b"MQTT", "05 02 00 3c 0a 11 00 00 00 01 11 00 00 00 02 00 01",
          b"c"), "CONNECT"),
    # maximum QoS twice: 24 00 24 01 (4); RL = 2 + 1 + 4 = 7
    ("maximum-qos-CONNACK", wire("20 07 00 00 04 24 00 24 01"), "CONNACK"),
    # authentication method twice: 2 * 4 = 8; RL = 1 + 1 + 8 = 10
    ("authentication-method-AUTH", wire("f0 0a 18 08 15 00 01", b"a", "15 00 01", b"b"),
     "AUTH"),
    # will delay interval twice in the will properties: 2 * 5 = 10 (block 11); payload
    # = client id 3 + 11 + will topic 3 + will payload 2 = 19; RL = 11 + 19 = 30 = 0x1E
    ("will-delay-will-properties",
     wire("10 1e 00 04", b"MQTT", "05 06 00 3c 00 00 01", b"c",
          "0a 18 00 00 00 01 18 00 00 00 02 00 01", b"w", "00 00"), "CONNECT"),
]
for _note, _data, _name in _PROPERTY_DUPLICATE:
    case("property_duplicate", _note, 5, _data, P, _name)

# Values out of range.
_PROPERTY_VALUE = [
    # receive maximum 0 (§3.1.2.11.3): 21 00 00 (3); RL = 10 + 1 + 3 + 3 = 17 = 0x11
    ("receive-maximum-0-CONNECT",
     wire("10 11 00 04", b"MQTT", "05 02 00 3c 03 21 00 00 00 01", b"c"), "CONNECT"),
    ("receive-maximum-0-CONNACK", wire("20 06 00 00 03 21 00 00"), "CONNACK"),
    # maximum packet size 0 (§3.1.2.11.4): 27 00 00 00 00 (5); RL = 10 + 1 + 5 + 3 = 19
    ("maximum-packet-size-0-CONNECT",
     wire("10 13 00 04", b"MQTT", "05 02 00 3c 05 27 00 00 00 00 00 01", b"c"), "CONNECT"),
    ("maximum-packet-size-0-CONNACK", wire("20 08 00 00 05 27 00 00 00 00"), "CONNACK"),
    # subscription identifier 0 (§3.3.2.3.8, §3.8.2.1.2): 0b 00 (2)
    ("subscription-identifier-0-PUBLISH", wire("30 06 00 01", b"t", "02 0b 00"), "PUBLISH"),
    # RL = 2 + 1 + 2 + 4 = 9
    ("subscription-identifier-0-SUBSCRIBE", wire("82 09 00 01 02 0b 00 00 01", b"t", "00"),
     "SUBSCRIBE"),
    # payload format indicator 2 (§3.3.2.3.2)
    ("payload-format-indicator-2-PUBLISH", wire("30 06 00 01", b"t", "02 01 02"), "PUBLISH"),
    # in the will properties: client id 3 + 02 01 02 (3) + will topic 3 + will payload 2
    # = 11; RL = 11 + 11 = 22 = 0x16
    ("payload-format-indicator-2-will",
     wire("10 16 00 04", b"MQTT", "05 06 00 3c 00 00 01", b"c", "02 01 02 00 01", b"w",
          "00 00"), "CONNECT"),
    # request problem / response information 2 (§3.1.2.11.7, §3.1.2.11.6): 2 bytes;
    # RL = 10 + 1 + 2 + 3 = 16 = 0x10
    ("request-problem-information-2",
     wire("10 10 00 04", b"MQTT", "05 02 00 3c 02 17 02 00 01", b"c"), "CONNECT"),
    ("request-response-information-2",
     wire("10 10 00 04", b"MQTT", "05 02 00 3c 02 19 02 00 01", b"c"), "CONNECT"),
    # CONNACK byte properties that are 0 or 1 (§3.2.2.3.4, .5, .11-.13): RL = 2 + 1 + 2
    ("maximum-qos-2", wire("20 05 00 00 02 24 02"), "CONNACK"),
    ("retain-available-2", wire("20 05 00 00 02 25 02"), "CONNACK"),
    ("wildcard-subscription-available-2", wire("20 05 00 00 02 28 02"), "CONNACK"),
    ("subscription-identifier-available-2", wire("20 05 00 00 02 29 02"), "CONNACK"),
    ("shared-subscription-available-2", wire("20 05 00 00 02 2a 02"), "CONNACK"),
    ("retain-available-255", wire("20 05 00 00 02 25 ff"), "CONNACK"),
]
for _note, _data, _name in _PROPERTY_VALUE:
    case("property_value", _note, 5, _data, P, _name)
# Topic Alias 0 [MQTT-3.3.2-8]: the project's rule table has its own key for this
# statement, which cites it more precisely than §2.2.2.2.  23 00 00 (3); RL = 3 + 1 + 3.
case("topic_alias_zero", "PUBLISH", 5, wire("30 07 00 01", b"t", "03 23 00 00"), P, "PUBLISH")

# Authentication Data without an Authentication Method (§3.1.2.11.10, §3.2.2.3.18):
# 16 00 01 "x" (4).  CONNECT: RL = 10 + 1 + 4 + 3 = 18 = 0x12; CONNACK: RL = 2 + 1 + 4 = 7.
case("auth_data_without_method", "CONNECT", 5,
     wire("10 12 00 04", b"MQTT", "05 02 00 3c 04 16 00 01", b"x", "00 01", b"c"), P,
     "CONNECT")
case("auth_data_without_method", "CONNACK", 5, wire("20 07 00 00 04 16 00 01", b"x"), P,
     "CONNACK")
# Every AUTH other than RL 0 carries an Authentication Method: "It is a Protocol Error to
# omit the Authentication Method" (§3.15.2.2.2).
case("auth_method_missing", "reason-only", 5, wire("f0 01 18"), P, "AUTH")
case("auth_method_missing", "property-length-0", 5, wire("f0 02 18 00"), P, "AUTH")
case("auth_method_missing", "success-property-length-0", 5, wire("f0 02 00 00"), P, "AUTH")
# reason string only: 1f 00 01 "x" (4); RL = 1 + 1 + 4 = 6
case("auth_method_missing", "reason-string-only", 5, wire("f0 06 18 04 1f 00 01", b"x"), P,
     "AUTH")

# Response Topic with wildcards [MQTT-3.3.2-14]: 08 00 03 "a/+" (6); RL = 3 + 1 + 6 = 10.
case("response_topic_wildcard", "PUBLISH", 5, wire("30 0a 00 01", b"t", "06 08 00 03", b"a/+"),
     P, "PUBLISH")
# In the will properties: 08 00 01 "#" (4); payload = client id 3 + block 5 + will topic 3
# + will payload 2 = 13; RL = 11 + 13 = 24 = 0x18.
case("response_topic_wildcard", "will", 5,
     wire("10 18 00 04", b"MQTT", "05 06 00 3c 00 00 01", b"c", "04 08 00 01", b"#",
          "00 01", b"w", "00 00"), P, "CONNECT")

# A property that runs past the end of its block but would fit in the packet: the
# Property Length is too small (§2.2.2.1), not the Remaining Length.  Offset: where the
# field's reader stopped (its start; for a Variable Byte Integer, the byte it missed).
# The bytes after the block are the payload (PUBLISH), or the next field.
_PROPERTY_LENGTH = [
    # topic alias 23 00|01: block 2 (23 00), payload 01; RL = 3 + 1 + 2 + 1 = 7; the alias
    # at offset 7 would be 00 01, ending with the packet at 9.
    ("topic-alias-PUBLISH", wire("30 07 00 01", b"t", "02 23 00 01"), "PUBLISH", 7),
    # user property "k" = 3 bytes, of which the block (7: 26 0001 6b 0003 76) holds one;
    # payload 77 77; RL = 3 + 1 + 7 + 2 = 13; the value's length at offset 10, its end at
    # 10 + 2 + 3 = 15, the packet's.
    ("user-property-value-PUBLISH",
     wire("30 0d 00 01", b"t", "07 26 00 01 6b 00 03 76 77 77"), "PUBLISH", 10),
    # subscription identifier 80|01 (= 128): block 2 (0b 80), payload 01; RL = 7; the
    # identifier misses its second byte, offset 8.
    ("subscription-identifier-PUBLISH", wire("30 07 00 01", b"t", "02 0b 80 01"), "PUBLISH",
     8),
    # the ack path: PUBACK id 1, reason 0x00, block 4 (1f 0004 61: reason string of 4, one
    # in the block), then 62 63 64; RL = 2 + 1 + 1 + 4 + 3 = 11; the string at offset 7.
    ("reason-string-PUBACK", wire("40 0b 00 01 00 04 1f 00 04 61 62 63 64"), "PUBACK", 7),
    # CONNECT: session expiry interval 11 0000|0001 with block 3 (11 00 00), then the
    # client id 00 01 "c"; RL = 10 + 1 + 3 + 3 = 17; the interval at offset 14.
    ("session-expiry-interval-CONNECT",
     wire("10 11 00 04", b"MQTT", "05 02 00 3c 03 11 00 00 00 01", b"c"), "CONNECT", 14),
]
for _note, _data, _name, _at in _PROPERTY_LENGTH:
    case("property_length", _note, 5, _data, M, _name, offset=_at)


# ---------------------------------------------------------------------------------------
# SUBSCRIBE, UNSUBSCRIBE (3.1.1 §3.8, §3.10; 5.0 §3.8, §3.10)

case("subscribe_no_filter", "SUBSCRIBE", 4, wire("82 02 00 01"), P, "SUBSCRIBE")
case("subscribe_no_filter", "SUBSCRIBE", 5, wire("82 03 00 01 00"), P, "SUBSCRIBE")
case("unsubscribe_no_filter", "UNSUBSCRIBE", 4, wire("a2 02 00 01"), P, "UNSUBSCRIBE")
case("unsubscribe_no_filter", "UNSUBSCRIBE", 5, wire("a2 03 00 01 00"), P, "UNSUBSCRIBE")
# Options byte after filter "t": v3/v4 RL = 2 + 3 + 1 = 6, v5 one more (property length).
for _v in (3, 4):
    # bits 2-7 are reserved before 5.0: No Local's bit 0x04, and 0x80
    case("subscribe_reserved_bits", "0x04", _v, wire("82 06 00 01 00 01", b"t", "04"), M,
         "SUBSCRIBE")
    case("subscribe_reserved_bits", "0x80", _v, wire("82 06 00 01 00 01", b"t", "80"), M,
         "SUBSCRIBE")
    case("subscribe_qos", "3", _v, wire("82 06 00 01 00 01", b"t", "03"), M, "SUBSCRIBE")
    # empty filter [MQTT-4.7.3-1]: RL = 2 + 2 + 1 = 5 / UNSUBSCRIBE 2 + 2 = 4
    case("topic_length", "SUBSCRIBE-empty-filter", _v, wire("82 05 00 01 00 00 00"), M,
         "SUBSCRIBE")
    case("topic_length", "UNSUBSCRIBE-empty-filter", _v, wire("a2 04 00 01 00 00"), M,
         "UNSUBSCRIBE")
# v5: bits 6-7 reserved [MQTT-3.8.3-5]
case("subscribe_reserved_bits", "0x40", 5, wire("82 07 00 01 00 00 01", b"t", "40"), M,
     "SUBSCRIBE")
case("subscribe_reserved_bits", "0x80", 5, wire("82 07 00 01 00 00 01", b"t", "80"), M,
     "SUBSCRIBE")
case("subscribe_qos", "3", 5, wire("82 07 00 01 00 00 01", b"t", "03"), M, "SUBSCRIBE")
# retain handling 3 = 0x30
case("subscribe_retain_handling", "3", 5, wire("82 07 00 01 00 00 01", b"t", "30"), P,
     "SUBSCRIBE")
# No Local (0x04) on "$share/g/t" (10 bytes) [MQTT-3.8.3-4]: RL = 2 + 1 + 12 + 1 = 16
case("no_local_shared", "share", 5, wire("82 10 00 01 00 00 0a", b"$share/g/t", "04"), P,
     "SUBSCRIBE")
case("topic_length", "SUBSCRIBE-empty-filter", 5, wire("82 06 00 01 00 00 00 00"), M,
     "SUBSCRIBE")
case("topic_length", "UNSUBSCRIBE-empty-filter", 5, wire("a2 05 00 01 00 00 00"), M,
     "UNSUBSCRIBE")

# ---------------------------------------------------------------------------------------
# CONNECT (3.1.1 §3.1, 5.0 §3.1).  The rule numbers are those of the CONNECT's own level.

_PROTOCOL = [
    # an unknown name, with level 4: "MQTX"
    ("protocol_name", "MQTX", wire("10 0d 00 04", b"MQTX", "04 02 00 3c 00 01", b"c")),
    ("protocol_name", "lower-case-mqtt", wire("10 0d 00 04", b"mqtt", "04 02 00 3c 00 01",
                                              b"c")),
    # an unknown level with the right name
    ("protocol_level", "MQTT-6", wire("10 0d 00 04", b"MQTT", "06 02 00 3c 00 01", b"c")),
    ("protocol_level", "MQTT-2", wire("10 0d 00 04", b"MQTT", "02 02 00 3c 00 01", b"c")),
    ("protocol_level", "MQIsdp-0", wire("10 0f 00 06", b"MQIsdp", "00 02 00 3c 00 01", b"c")),
    # pairs other than MQIsdp/3, MQTT/4, MQTT/5: either rule fits
    (("protocol_name", "protocol_level"), "MQIsdp-4",
     wire("10 0f 00 06", b"MQIsdp", "04 02 00 3c 00 01", b"c")),
    (("protocol_name", "protocol_level"), "MQTT-3",
     wire("10 0d 00 04", b"MQTT", "03 02 00 3c 00 01", b"c")),
]
for _key, _note, _data in _PROTOCOL:
    # [MQTT-3.1.2-1] / [MQTT-3.1.2-2]; a server answers 0x84 Unsupported Protocol Version.
    case(_key, _note, 4, _data, P, "CONNECT", reason_code=0x84)


def _connect(level: int, flags: int, payload: bytes) -> bytes:
    """A CONNECT at ``level`` with the given flags and payload, keep alive 60."""
    name = b"MQIsdp" if level == 3 else b"MQTT"
    # variable header: name length, name, level, flags, keep alive (+ property length 0)
    body = wire(f"00 {len(name):02x}", name, f"{level:02x} {flags:02x} 00 3c",
                "00" if level == 5 else "") + payload
    return wire("10", f"{len(body):02x}") + body  # RL: all after the fixed header, < 128


for _v in (3, 4, 5):
    _client = wire("00 01", b"c")
    _will = wire("00 01", b"w", "00 00") if _v < 5 else wire("00 00 01", b"w", "00 00")
    # reserved flag bit 0 [MQTT-3.1.2-3]: 0x03 = clean | reserved
    case("connect_reserved", "0x03", _v, _connect(_v, 0x03, _client), M, "CONNECT")
    # will QoS 1 (0x08) without will flag: 0x0A; will retain (0x20) without: 0x22
    case("will_qos_without_will", "0x0A", _v, _connect(_v, 0x0A, _client), M, "CONNECT")
    case("will_retain_without_will", "0x22", _v, _connect(_v, 0x22, _client), M, "CONNECT")
    # will QoS 3 with the will flag: 0x18 | 0x04 | 0x02 = 0x1E, will topic and payload
    case("will_qos_3", "0x1E", _v, _connect(_v, 0x1E, _client + _will), M, "CONNECT")
for _v in (3, 4):
    # password (0x40) without user name before 5.0 [MQTT-3.1.2-22]: 0x42, password "pw"
    case("password_without_username", "0x42", _v,
         _connect(_v, 0x42, wire("00 01", b"c", "00 02", b"pw")), M, "CONNECT")

# ---------------------------------------------------------------------------------------
# CONNACK (3.1.1 §3.2, 5.0 §3.2)

# Acknowledge flags bits 7-1 are reserved (3.1.1 §3.2.2.1, [MQTT-3.2.2-1]).
case("connack_reserved", "0x02", 4, wire("20 02 02 00"), M, "CONNACK")
case("connack_reserved", "0x80", 5, wire("20 03 80 00 00"), M, "CONNACK")
# Session present with a refusal ([MQTT-3.2.2-4] / [MQTT-3.2.2-6]).
case("connack_session_present", "code-5", 4, wire("20 02 01 05"), P, "CONNACK")
case("connack_session_present", "code-0x80", 5, wire("20 03 01 80 00"), P, "CONNACK")

# A v5 SUBACK whose second reason code is undefined: offset 6.
case("reason_code", "SUBACK-second-code", 5, wire("90 05 00 01 00 00 03"), M, "SUBACK",
     offset=6)

# A SUBACK or 5.0 UNSUBACK without a code: one is due for each topic filter of the
# SUBSCRIBE / UNSUBSCRIBE, so at least one ([MQTT-3.9.3-1], [MQTT-3.11.3-1]).  Packet id 1;
# offset: where the first code should be (4; 5 in 5.0, after the property length 0).
for _v in (3, 4):
    case("suback_code_per_filter", "SUBACK-no-code", _v, wire("90 02 00 01"), M, "SUBACK",
         offset=4)
case("suback_code_per_filter", "SUBACK-no-code", 5, wire("90 03 00 01 00"), M, "SUBACK",
     offset=5)
case("unsuback_code_per_filter", "UNSUBACK-no-code", 5, wire("b0 03 00 01 00"), M,
     "UNSUBACK", offset=5)

CASE_IDS = [c.id for c in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS), "duplicate case ids"


def _rule_version(c: Case) -> int:
    """The level whose numbering the rule follows: a CONNECT's own level, else the call's."""
    if c.ptype == "CONNECT" and c.data[0] == 0x10:
        return {3: 3, 4: 4, 5: 5}.get(c.data[2 + c.data[3] + 2], c.version)
    return c.version


def check_error(exc: MQTTWireError, c: Case, *, offset_shift: int = 0) -> None:
    """The assertions every case makes on its error."""
    assert type(exc) is c.cls, f"{type(exc).__name__}: {exc}"
    expected_code = c.reason_code if c.reason_code is not None else c.cls.default_reason_code
    assert exc.reason_code == expected_code
    if c.key is not None:
        keys = (c.key,) if isinstance(c.key, str) else c.key
        rules = {rule(k, _rule_version(c)) for k in keys}
        assert exc.rule in rules, f"rule {exc.rule!r}, expected one of {rules}: {exc}"
        assert f"[{exc.rule}]" in str(exc)
    if c.offset is not None:
        assert exc.offset == c.offset + offset_shift
    if exc.offset is not None:
        assert f"at offset {exc.offset}" in str(exc)
    if c.ptype is not None:
        assert exc.packet_type == c.ptype
        assert str(exc).startswith(f"{c.ptype}: ")


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_decode_rejects(codec: ModuleType, c: Case) -> None:
    """decode() raises the rule's error for the bad bytes."""
    with pytest.raises(MQTTWireError) as info:
        codec.decode(c.data, version=c.version)
    check_error(info.value, c)


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_decode_from_rejects_at_an_offset(codec: ModuleType, c: Case) -> None:
    """decode_from() raises the same error, with the offset counted in its whole input."""
    prefix = b"\xc0\x00\xd0\x00\xc0"  # PINGREQ, PINGRESP and one unrelated byte
    with pytest.raises(MQTTWireError) as info:
        codec.decode_from(prefix + c.data + b"\xc0\x00", 5, version=c.version)
    check_error(info.value, c, offset_shift=5)


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_stream_decoder_rejects(codec: ModuleType, c: Case) -> None:
    """StreamDecoder raises the same error, with the offset counted in the stream, and
    holds on to the packets completed before the bad one."""
    dec = codec.StreamDecoder(version=c.version)
    assert dec.feed(b"\xc0\x00") == [codec.PingReq()]
    with pytest.raises(MQTTWireError) as info:
        dec.feed(b"\xd0\x00" + c.data)
    check_error(info.value, c, offset_shift=4)
    assert info.value.packets == [codec.PingResp()]


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_stream_decoder_rejects_byte_by_byte(codec: ModuleType, c: Case) -> None:
    """Fed a byte at a time, the bad bytes give the same error: how the stream is cut
    does not change what is wrong or where."""
    dec = codec.StreamDecoder(version=c.version)
    with pytest.raises(MQTTWireError) as info:
        for i in range(len(c.data)):
            assert dec.feed(c.data[i : i + 1]) == []
    check_error(info.value, c)


# ---------------------------------------------------------------------------------------
# Which length an overrunning property blames, in words: the Property Length when the
# field would fit in the packet (the property_length cases above), else the Remaining
# Length, as for any field that runs past the packet.

_PROPERTY_LENGTH_FIELDS = {
    "topic-alias-PUBLISH": "topic alias",
    "user-property-value-PUBLISH": "user property value",
    "subscription-identifier-PUBLISH": "subscription identifier",
    "reason-string-PUBACK": "reason string",
    "session-expiry-interval-CONNECT": "session expiry interval",
}
_PAST_BLOCK = " runs past the end of the property block (Property Length too small)"
_PAST_PACKET = " runs past the end of the packet (Remaining Length too small)"


@pytest.mark.parametrize(
    ("data", "field", "offset"),
    [pytest.param(d, _PROPERTY_LENGTH_FIELDS[n], at, id=n) for n, d, _, at in _PROPERTY_LENGTH],
)
def test_property_past_its_block_blames_the_property_length(
    codec: ModuleType, data: bytes, field: str, offset: int
) -> None:
    with pytest.raises(MalformedPacket) as info:
        codec.decode(data, version=5)
    assert (info.value.what, info.value.offset, info.value.rule) == (
        field + _PAST_BLOCK, offset, "§2.2.2.1")
    assert str(info.value).endswith(f"at offset {offset} [§2.2.2.1]")


# The same fields when the packet ends before them too: nothing but a larger Remaining
# Length (or a smaller field) would do, so the Remaining Length is blamed, as before.
_PAST_PACKET_CASES = [
    # topic alias 23 00 with the block ending the packet: RL = 3 + 1 + 2 = 6.
    ("topic-alias", wire("30 06 00 01", b"t", "02 23 00"), "topic alias", 7),
    # the user property value of 4 bytes needs 10 + 2 + 4 = 16; the packet ends at 15.
    ("user-property-value", wire("30 0d 00 01", b"t", "07 26 00 01 6b 00 04 76 77 77"),
     "user property value", 10),
    # the subscription identifier's next byte (80) goes on too, past the packet.
    ("subscription-identifier", wire("30 07 00 01", b"t", "02 0b 80 80"),
     "subscription identifier", 8),
    # PUBACK reason string of 5: needs 7 + 2 + 5 = 14; the packet ends at 13.
    ("reason-string-PUBACK", wire("40 0b 00 01 00 04 1f 00 05 61 62 63 64"), "reason string",
     7),
]


@pytest.mark.parametrize(("data", "field", "offset"),
                         [pytest.param(d, f, at, id=n) for n, d, f, at in _PAST_PACKET_CASES])
def test_property_past_the_packet_blames_the_remaining_length(
    codec: ModuleType, data: bytes, field: str, offset: int
) -> None:
    with pytest.raises(MalformedPacket) as info:
        codec.decode(data, version=5)
    assert (info.value.what, info.value.offset, info.value.rule) == (
        field + _PAST_PACKET, offset, None)


def test_property_past_its_block_into_a_large_payload(codec: ModuleType) -> None:
    """A property that runs into a 4 MiB payload is blamed on the Property Length by both
    implementations, and the payload is not copied to find that out (the extension hands
    the shared reader a copy of the block and three bytes more)."""
    import tracemalloc

    # content type of 5 ("ab" in the block 03 0005 6162), then the payload.
    body = wire("00 01", b"t", "05 03 00 05 61 62") + bytes(4 << 20)
    n = len(body)  # Remaining Length as a Variable Byte Integer (4 bytes at this size)
    rl = bytes([(n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, ((n >> 14) & 0x7F) | 0x80, n >> 21])
    data = b"\x30" + rl + body
    tracemalloc.start()
    try:
        with pytest.raises(MalformedPacket) as info:
            codec.decode(data, version=5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (info.value.what, info.value.offset, info.value.rule) == (
        "content type" + _PAST_BLOCK, 10, "§2.2.2.1")
    assert peak < 64 * 1024, f"{peak} bytes allocated while decoding"


def test_ack_without_a_code_names_the_rule(codec: ModuleType) -> None:
    """SUBACK / UNSUBACK without a code, decoded and encoded: the words and the rule that
    asks for one code per topic filter (not §2.4, which is about the codes' values)."""
    what = "no reason code (one is due for each topic filter)"
    for data, version, rule_text in [
        (wire("90 02 00 01"), 3, "MQTT-3.9.3-1"),
        (wire("90 02 00 01"), 4, "MQTT-3.9.3-1"),
        (wire("90 03 00 01 00"), 5, "MQTT-3.9.3-1"),
        (wire("b0 03 00 01 00"), 5, "MQTT-3.11.3-1"),
    ]:
        with pytest.raises(MalformedPacket) as info:
            codec.decode(data, version=version)
        assert (info.value.what, info.value.rule) == (what, rule_text)
    for packet, version, rule_text in [
        (codec.SubAck(1, []), 4, "MQTT-3.9.3-1"),
        (codec.SubAck(1, []), 5, "MQTT-3.9.3-1"),
        (codec.UnsubAck(1, []), 5, "MQTT-3.11.3-1"),
    ]:
        with pytest.raises(MalformedPacket) as info:
            packet.encode(version)
        assert (info.value.what, info.value.rule) == (what, rule_text)


# ---------------------------------------------------------------------------------------
# Reason codes that the packet type does not define (MQTT 5.0 §2.4 and each packet's
# table, transcribed here from the specification), every value 0-255.
V5_REASON_CODES: dict[str, set[int]] = {
    "CONNACK": {0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A,
                0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F},
    "PUBACK": {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99},
    "PUBREC": {0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99},
    "PUBREL": {0x00, 0x92},
    "PUBCOMP": {0x00, 0x92},
    "SUBACK": {0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2},
    "UNSUBACK": {0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91},
    "DISCONNECT": {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F,
                   0x90, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D,
                   0x9E, 0x9F, 0xA0, 0xA1, 0xA2},
    "AUTH": {0x00, 0x18, 0x19},
}


def _v5_with_reason_code(ptype: str, code: int) -> tuple[bytes, int]:
    """(v5 packet bytes carrying ``code``, the offset of the reason code byte)."""
    if ptype == "CONNACK":  # 20 03 flags code property-length
        return bytes((0x20, 3, 0, code, 0)), 3
    if ptype in ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP"):  # first RL id id code
        first = {"PUBACK": 0x40, "PUBREC": 0x50, "PUBREL": 0x62, "PUBCOMP": 0x70}[ptype]
        return bytes((first, 3, 0, 1, code)), 4
    if ptype in ("SUBACK", "UNSUBACK"):  # first 04 id id property-length code
        return bytes((0x90 if ptype == "SUBACK" else 0xB0, 4, 0, 1, 0, code)), 5
    if ptype == "DISCONNECT":  # e0 01 code
        return bytes((0xE0, 1, code)), 2
    # AUTH: f0 06 code 04 15 00 01 "m" (the authentication method)
    return bytes((0xF0, 6, code, 4, 0x15, 0, 1)) + b"m", 2


@pytest.mark.parametrize("ptype", list(V5_REASON_CODES))
def test_reason_code_undefined_for_the_packet_type(codec: ModuleType, ptype: str) -> None:
    """Every reason code the packet type does not define is a malformed packet (§2.4)."""
    c = Case("reason_code", ptype, 5, b"", MalformedPacket, ptype)
    for code in set(range(256)) - V5_REASON_CODES[ptype]:
        data, offset = _v5_with_reason_code(ptype, code)
        with pytest.raises(MQTTWireError) as info:
            codec.decode(data, version=5)
        check_error(info.value, Case("reason_code", ptype, 5, data, c.cls, ptype, offset))


@pytest.mark.parametrize("level", [3, 4])
def test_v3_connack_return_code_undefined(codec: ModuleType, level: int) -> None:
    """v3 CONNACK return codes are 0-5 (3.1.1 §3.2.2.3); 6-255 are reserved."""
    for code in range(6, 256):
        data = bytes((0x20, 2, 0, code))
        with pytest.raises(MQTTWireError) as info:
            codec.decode(data, version=level)
        check_error(info.value,
                    Case("connack_return_code", "", level, data, MalformedPacket, "CONNACK", 3))


@pytest.mark.parametrize(("level", "allowed"), [(3, {0, 1, 2}), (4, {0, 1, 2, 0x80})])
def test_v3_suback_return_code_undefined(codec: ModuleType, level: int, allowed: set[int]) -> None:
    """v3 SUBACK return codes: granted QoS 0-2, and 0x80 (Failure) from 3.1.1 on."""
    for code in set(range(256)) - allowed:
        data = bytes((0x90, 3, 0, 1, code))
        with pytest.raises(MQTTWireError) as info:
            codec.decode(data, version=level)
        check_error(info.value,
                    Case("suback_return_code", "", level, data, MalformedPacket, "SUBACK", 4))


# ---------------------------------------------------------------------------------------
# Encoding refuses what decoding refuses: the same class, offset None, message naming the
# packet type.

Build = Callable[[ModuleType], Any]
_REFUSALS: list[tuple[str, int, Build, type[MQTTWireError], str]] = [
    ("qos_bits", 4, lambda m: m.Publish("t", qos=3, packet_id=1), M, "PUBLISH"),
    ("dup_qos0", 4, lambda m: m.Publish("t", dup=True), M, "PUBLISH"),
    ("topic_name_wildcard-plus", 4, lambda m: m.Publish("a/+"), M, "PUBLISH"),
    ("topic_name_wildcard-hash", 5, lambda m: m.Publish("#"), M, "PUBLISH"),
    ("utf8_null-topic", 4, lambda m: m.Publish("a\x00"), M, "PUBLISH"),
    ("utf8_well_formed-lone-surrogate", 4, lambda m: m.Publish("a\ud800"), M, "PUBLISH"),
    ("topic_length-v4", 4, lambda m: m.Publish(""), M, "PUBLISH"),
    ("topic_alias_missing-v5", 5, lambda m: m.Publish(""), P, "PUBLISH"),
    ("packet_id_nonzero-PUBLISH", 5, lambda m: m.Publish("t", qos=1, packet_id=0), P,
     "PUBLISH"),
    ("packet_id_nonzero-PUBACK", 4, lambda m: m.PubAck(0), P, "PUBACK"),
    ("packet_id_nonzero-PUBREL", 5, lambda m: m.PubRel(0), P, "PUBREL"),
    ("packet_id_nonzero-SUBSCRIBE", 4, lambda m: m.Subscribe(0, [m.Subscription("t")]), P,
     "SUBSCRIBE"),
    ("packet_id_nonzero-UNSUBACK", 4, lambda m: m.UnsubAck(0), P, "UNSUBACK"),
    ("property_identifier-PUBLISH", 5,
     lambda m: m.Publish("t", properties=Properties(session_expiry_interval=1)), M,
     "PUBLISH"),
    ("property_identifier-PUBACK", 5,
     lambda m: m.PubAck(1, properties=Properties(topic_alias=1)), M, "PUBACK"),
    ("property_identifier-will", 5,
     lambda m: m.Connect("c", will=m.Will("w", properties=Properties(receive_maximum=1))),
     M, "CONNECT"),
    ("property_value-receive-maximum-0", 5,
     lambda m: m.Connect("c", properties=Properties(receive_maximum=0)), P, "CONNECT"),
    ("property_value-maximum-qos-2", 5,
     lambda m: m.ConnAck(properties=Properties(maximum_qos=2)), P, "CONNACK"),
    ("property_duplicate-subscription-identifier-SUBSCRIBE", 5,
     lambda m: m.Subscribe(1, [m.Subscription("t")],
                           properties=Properties(subscription_identifiers=[1, 2])),
     P, "SUBSCRIBE"),
    ("response_topic_wildcard", 5,
     lambda m: m.Publish("t", properties=Properties(response_topic="a/#")), P, "PUBLISH"),
    ("auth_data_without_method", 5,
     lambda m: m.Connect("c", properties=Properties(authentication_data=b"x")), P, "CONNECT"),
    ("reason_code-PUBACK-v5", 5, lambda m: m.PubAck(1, reason_code=0x01), M, "PUBACK"),
    ("reason_code-DISCONNECT-v5", 5, lambda m: m.Disconnect(reason_code=0x10), M,
     "DISCONNECT"),
    ("subscribe_qos", 4, lambda m: m.Subscribe(1, [m.Subscription("t", qos=3)]), M,
     "SUBSCRIBE"),
    ("subscribe_retain_handling", 5,
     lambda m: m.Subscribe(1, [m.Subscription("t", retain_handling=3)]), P, "SUBSCRIBE"),
    ("no_local_shared", 5,
     lambda m: m.Subscribe(1, [m.Subscription("$share/g/t", no_local=True)]), P,
     "SUBSCRIBE"),
    ("subscribe_no_filter", 4, lambda m: m.Subscribe(1, []), P, "SUBSCRIBE"),
    ("unsubscribe_no_filter", 5, lambda m: m.Unsubscribe(1, []), P, "UNSUBSCRIBE"),
    ("topic_length-SUBSCRIBE", 4, lambda m: m.Subscribe(1, [m.Subscription("")]), M,
     "SUBSCRIBE"),
    ("will_qos_3", 4, lambda m: m.Connect("c", protocol_version=4, will=m.Will("w", qos=3)),
     M, "CONNECT"),
    ("password_without_username", 4,
     lambda m: m.Connect("c", protocol_version=4, password=b"pw"), M, "CONNECT"),
    ("connack_return_code", 4, lambda m: m.ConnAck(reason_code=6), M, "CONNACK"),
    ("connack_session_present", 4, lambda m: m.ConnAck(session_present=True, reason_code=5),
     P, "CONNACK"),
    ("suback_return_code-v3-0x80", 3, lambda m: m.SubAck(1, [0x80]), M, "SUBACK"),
    ("auth_v5_only-v4", 4, lambda m: m.Auth(), M, "AUTH"),
    ("auth_v5_only-v3", 3, lambda m: m.Auth(), M, "AUTH"),
]


@pytest.mark.parametrize(
    ("build", "version", "cls", "ptype"),
    [pytest.param(b, v, c, p, id=n) for n, v, b, c, p in _REFUSALS],
)
def test_encode_refuses(codec: ModuleType, build: Build, version: int,
                        cls: type[MQTTWireError], ptype: str) -> None:
    """encode(), pkt.encode() and encode_into() refuse, and encode_into() leaves the buffer
    as it was."""
    packet = build(codec)
    for call in (lambda: codec.encode(packet, version=version),
                 lambda: packet.encode(version=version)):
        with pytest.raises(MQTTWireError) as info:
            call()
        exc = info.value
        assert type(exc) is cls, f"{type(exc).__name__}: {exc}"
        assert exc.offset is None
        assert exc.packet_type == ptype
        assert str(exc).startswith(f"{ptype}: ")
    buf = bytearray(b"keep")
    with pytest.raises(cls):
        packet.encode_into(buf, version=version)
    assert buf == b"keep"


# Things that exist only in MQTT 5.0, at levels 3 and 4: the decoder could never have
# produced them, so only "a ValueError subclass" is asked for.
_V5_ONLY: list[tuple[str, Build, str]] = [
    ("properties-PUBLISH", lambda m: m.Publish("t", properties=Properties(topic_alias=1)),
     "PUBLISH"),
    ("properties-PUBACK", lambda m: m.PubAck(1, properties=Properties(reason_string="x")),
     "PUBACK"),
    ("properties-CONNECT",
     lambda m: m.Connect("c", protocol_version=4,
                         properties=Properties(session_expiry_interval=1)), "CONNECT"),
    ("properties-will",
     lambda m: m.Connect("c", protocol_version=4,
                         will=m.Will("w", properties=Properties(content_type="x"))),
     "CONNECT"),
    ("properties-SUBSCRIBE",
     lambda m: m.Subscribe(1, [m.Subscription("t")],
                           properties=Properties(user_properties=[("k", "v")])), "SUBSCRIBE"),
    ("reason-code-PUBACK", lambda m: m.PubAck(1, reason_code=0x10), "PUBACK"),
    ("reason-code-PUBREL", lambda m: m.PubRel(1, reason_code=0x92), "PUBREL"),
    ("reason-code-DISCONNECT", lambda m: m.Disconnect(reason_code=4), "DISCONNECT"),
    ("reason-codes-UNSUBACK", lambda m: m.UnsubAck(1, [0x11]), "UNSUBACK"),
    ("subscription-options-no-local",
     lambda m: m.Subscribe(1, [m.Subscription("t", no_local=True)]), "SUBSCRIBE"),
    ("subscription-options-retain-handling",
     lambda m: m.Subscribe(1, [m.Subscription("t", retain_handling=1)]), "SUBSCRIBE"),
]


@pytest.mark.parametrize(("build", "ptype"), [pytest.param(b, p, id=n) for n, b, p in _V5_ONLY])
@pytest.mark.parametrize("version", [3, 4])
def test_encode_refuses_v5_only_fields(codec: ModuleType, build: Build, ptype: str,
                                       version: int) -> None:
    packet = build(codec)
    with pytest.raises(MQTTWireError) as info:
        codec.encode(packet, version=version)
    assert isinstance(info.value, ValueError)
    assert info.value.offset is None
    assert str(info.value).startswith(f"{ptype}: ")


@pytest.mark.parametrize("packet_id", [None, 0, 65536])
def test_encode_refuses_publish_without_a_valid_packet_id(codec: ModuleType,
                                                          packet_id: int | None) -> None:
    """QoS > 0 needs a packet id from 1 to 65,535 [MQTT-2.3.1-1] / [MQTT-2.2.1-3]."""
    with pytest.raises(ValueError):
        codec.Publish("t", qos=1, packet_id=packet_id).encode()


def test_encode_refuses_more_than_268435455_bytes(codec: ModuleType) -> None:
    """The largest Remaining Length is 268,435,455 (four varint bytes).  A QoS 0 PUBLISH
    to "t" has RL = 3 + len(payload): a payload of 268,435,453 makes it 268,435,456."""
    packet = codec.Publish("t", _huge_payload())
    with pytest.raises(MalformedPacket) as info:
        packet.encode(version=4)
    assert info.value.offset is None
    assert str(info.value).startswith("PUBLISH: ")


_HUGE: list[bytes] = []


def _huge_payload() -> bytes:
    """One 268,435,453-byte payload shared by both implementations' runs."""
    if not _HUGE:
        _HUGE.append(bytes(268_435_453))
    return _HUGE[0]

