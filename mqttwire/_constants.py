"""Protocol constants shared by both implementations.

Everything here is cold data: enums, limits and the per-packet tables of MQTT 5.0 reason
codes and properties.  ``_pure`` and ``_speedups`` both import it, so the two can never
disagree on what is allowed where.
"""

from __future__ import annotations

import enum

__all__ = [
    "MAX_REMAINING_LENGTH",
    "MAX_PACKET_ID",
    "MQTT31",
    "MQTT311",
    "MQTT5",
    "PacketType",
    "ProtocolVersion",
    "ReasonCode",
    "PACKET_NAMES",
    "REQUIRED_FLAGS",
    "REASON_CODES",
    "V3_CONNACK_CODES",
    "V3_SUBACK_CODES",
]


class ProtocolVersion(enum.IntEnum):
    """The Protocol Level byte of CONNECT."""

    MQTT31 = 3  # protocol name "MQIsdp"
    MQTT311 = 4  # protocol name "MQTT"
    MQTT5 = 5  # protocol name "MQTT"


MQTT31 = ProtocolVersion.MQTT31
MQTT311 = ProtocolVersion.MQTT311
MQTT5 = ProtocolVersion.MQTT5


class PacketType(enum.IntEnum):
    """Control packet types: the high nibble of the first byte (MQTT 5.0 §2.1.2)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # MQTT 5.0 only


#: Index by packet type number; 0 is reserved and has no name.
PACKET_NAMES: tuple[str, ...] = ("RESERVED",) + tuple(t.name for t in PacketType)

#: 2**28 - 1: four bytes of seven bits each (MQTT 3.1.1 §2.2.3, MQTT 5.0 §1.5.5).
MAX_REMAINING_LENGTH = 268_435_455

MAX_PACKET_ID = 65_535

#: The low nibble of the first byte that each packet type other than PUBLISH must carry
#: (MQTT 3.1.1 §2.2.2 [MQTT-2.2.2-1], MQTT 5.0 §2.1.3 [MQTT-2.1.3-1]).
REQUIRED_FLAGS: dict[int, int] = {t: 0 for t in PacketType if t != PacketType.PUBLISH}
REQUIRED_FLAGS[PacketType.PUBREL] = 0x2
REQUIRED_FLAGS[PacketType.SUBSCRIBE] = 0x2
REQUIRED_FLAGS[PacketType.UNSUBSCRIBE] = 0x2


class ReasonCode(enum.IntEnum):
    """Every MQTT 5.0 reason code (MQTT 5.0 §2.4, Table 2-6).

    Several names share a value (0x00 is Success, Normal disconnection and Granted QoS 0);
    the enum keeps them as aliases of the first name.
    """

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


_P = PacketType

#: The MQTT 5.0 reason codes each packet type may carry (MQTT 5.0 §3.2.2.2, §3.4.2.1,
#: §3.5.2.1, §3.6.2.1, §3.7.2.1, §3.9.3, §3.11.3, §3.14.2.1, §3.15.2.1).
REASON_CODES: dict[int, frozenset[int]] = {
    _P.CONNACK: frozenset(
        (0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C,
         0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F)
    ),
    _P.PUBACK: frozenset((0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99)),
    _P.PUBREC: frozenset((0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99)),
    _P.PUBREL: frozenset((0x00, 0x92)),
    _P.PUBCOMP: frozenset((0x00, 0x92)),
    _P.SUBACK: frozenset(
        (0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2)
    ),
    _P.UNSUBACK: frozenset((0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91)),
    _P.DISCONNECT: frozenset(
        (0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90,
         0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F,
         0xA0, 0xA1, 0xA2)
    ),
    _P.AUTH: frozenset((0x00, 0x18, 0x19)),
}

#: CONNACK return codes of MQTT 3.1 and 3.1.1 (3.1.1 §3.2.2.3, Table 3.1).
V3_CONNACK_CODES = frozenset(range(6))

#: SUBACK return codes: granted QoS 0-2, and 0x80 Failure, added in 3.1.1 (§3.9.3).
V3_SUBACK_CODES: dict[int, frozenset[int]] = {
    3: frozenset((0, 1, 2)),
    4: frozenset((0, 1, 2, 0x80)),
}
