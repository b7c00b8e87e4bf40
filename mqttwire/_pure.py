"""The pure-Python implementation of the mqttwire codec.

It runs where no compiled wheel fits (PyPy, unusual platforms) and is the baseline the
benchmarks compare the Cython extension ``mqttwire._speedups`` against.  The two have the
same names, signatures and behaviour: the test suite runs every behavioural test on both.
This module is the typed reference; its docstrings are the documentation of both.

The hot path (fixed header, Remaining Length, PUBLISH, the four acknowledgements, the stream
framing loop) lives here and, in C, in ``_speedups.pyx``.  The other packet types are
decoded and encoded by the shared ``_cold`` module.  This module and ``_speedups`` do not
import each other: the code both run is in shared modules (``_publish``: the PUBLISH and
acknowledgement encoders; ``_forwarding``: PreparedPublish's; ``_framing``: the fixed
header; ``_fields``: equality and repr), which ``_speedups`` hands what its C code does not
vouch for, so that both raise the same errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from struct import Struct
from struct import error as struct_error
from typing import Any, ClassVar, Union

from . import _cold
from ._constants import PACKET_NAMES, REASON_CODES, PacketType
from ._errors import MalformedPacket, MQTTWireError, ProtocolError, rule
from ._fields import (
    ACK,
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    NO_FIELDS,
    PUBLISH,
    SUBACK,
    SUBSCRIBE,
    SUBSCRIPTION,
    UNSUBACK,
    UNSUBSCRIBE,
    WILL,
    Fields,
    fields_equal,
    fields_repr,
)
from ._forwarding import encode_forwarded, forwarding_parts
from ._framing import incomplete, read_header
from ._properties import Properties, decode_properties
from ._publish import ACK_FIRST_BYTE, encode_ack, encode_publish
from ._topics import (
    Matches,
    TopicTree,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)
from ._wire import (
    Buffer,
    as_buffer,
    check_version,
    connect_order_error,
    first_byte_error,
    length_mismatch,
    null_error,
    overrun,
    packet_id_zero_error,
    reason_code_error,
    too_large,
    topic_name_wildcard_error,
    utf8_error,
)

__all__ = [
    "Auth", "ConnAck", "Connect", "Disconnect", "PingReq", "PingResp", "PubAck", "PubComp",
    "Publish", "PubRec", "PubRel", "SubAck", "Subscribe", "Subscription", "UnsubAck",
    "Unsubscribe", "Will", "StreamDecoder", "PreparedPublish", "decode", "decode_from",
    "encode", "Matches", "TopicTree", "parse_shared", "topic_matches", "validate_topic_filter",
    "validate_topic_name",
]

Packet = Union[
    "Connect", "ConnAck", "Publish", "PubAck", "PubRec", "PubRel", "PubComp", "Subscribe",
    "SubAck", "Unsubscribe", "UnsubAck", "PingReq", "PingResp", "Disconnect", "Auth",
]


class _Record:
    """__eq__ and __repr__ of every packet class and of Will and Subscription, written
    once: each class names its field list (``_fields``, from the shared ``_fields``
    module, which both implementations use, so their reprs cannot differ)."""

    __slots__ = ()
    _fields: ClassVar[Fields] = NO_FIELDS

    def __eq__(self, other: object) -> bool:
        return fields_equal(self, other, self._fields)  # type: ignore[no-any-return]

    __hash__ = None  # type: ignore[assignment]  # mutable, so unhashable

    def __repr__(self) -> str:
        return fields_repr(self, type(self).__name__, self._fields)


class _PacketBase(_Record):
    """encode_into() for every packet class; each class defines encode()."""

    __slots__ = ()

    def encode(self, version: int = 5) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode_into(self, buf: bytearray, version: int = 5) -> int:
        """Append the encoded packet to ``buf``; return the number of bytes written."""
        if not isinstance(buf, bytearray):
            raise TypeError(f"encode_into() needs a bytearray, not {type(buf).__name__}")
        data = self.encode(version)
        buf += data
        return len(data)


# ---------------------------------------------------------------------------------------
# Packet classes


class Will(_Record):
    """The will message of a CONNECT (MQTT 5.0 §3.1.2.5, §3.1.3.2-3.1.3.4)."""

    __slots__ = ("topic", "payload", "qos", "retain", "properties")
    _fields = WILL

    def __init__(
        self, topic: str, payload: bytes = b"", *, qos: int = 0, retain: bool = False,
        properties: Properties | None = None,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties



class Connect(_PacketBase):
    """CONNECT (MQTT 3.1.1 §3.1, MQTT 5.0 §3.1).  The protocol name is derived from
    ``protocol_version``: "MQIsdp" for level 3, "MQTT" otherwise.  The packet carries its
    own level, so ``encode()`` ignores its ``version`` argument and ``decode()`` needs none."""

    __slots__ = ("client_id", "protocol_version", "clean_start", "keep_alive", "username",
                 "password", "will", "properties")
    _fields = CONNECT
    packet_type = PacketType.CONNECT

    def __init__(
        self, client_id: str, *, protocol_version: int = 5, clean_start: bool = True,
        keep_alive: int = 60, username: str | None = None, password: bytes | None = None,
        will: Will | None = None, properties: Properties | None = None,
    ) -> None:
        self.client_id = client_id
        self.protocol_version = protocol_version
        self.clean_start = clean_start
        self.keep_alive = keep_alive
        self.username = username
        self.password = password
        self.will = will
        self.properties = properties

    @property
    def protocol_name(self) -> str:
        return "MQIsdp" if self.protocol_version == 3 else "MQTT"

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_connect(self)



class ConnAck(_PacketBase):
    """CONNACK (MQTT 3.1.1 §3.2, MQTT 5.0 §3.2).  At levels 3 and 4, ``reason_code`` is the
    connect return code (0-5)."""

    __slots__ = ("session_present", "reason_code", "properties")
    _fields = CONNACK
    packet_type = PacketType.CONNACK

    def __init__(
        self, *, session_present: bool = False, reason_code: int = 0,
        properties: Properties | None = None,
    ) -> None:
        self.session_present = session_present
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_connack(self, version)



class Publish(_PacketBase):
    """PUBLISH (MQTT 3.1.1 §3.3, MQTT 5.0 §3.3).  ``packet_id`` is present exactly when
    ``qos`` > 0.  A v5 PUBLISH that uses a Topic Alias may have an empty ``topic``."""

    __slots__ = ("topic", "payload", "qos", "retain", "dup", "packet_id", "properties")
    _fields = PUBLISH
    packet_type = PacketType.PUBLISH

    def __init__(
        self, topic: str, payload: bytes = b"", *, qos: int = 0, retain: bool = False,
        dup: bool = False, packet_id: int | None = None, properties: Properties | None = None,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return encode_publish(self, version)



def _ack_encode(ptype: int) -> Callable[..., bytes]:
    """The encode() method of the acknowledgement class of type ``ptype``: each class
    gets its own, so that its first byte is a closure variable rather than a class
    attribute looked up on every call (issue 5: this is a 250 ns operation)."""
    head = ACK_FIRST_BYTE[ptype] << 8 | 2  # first byte, Remaining Length 2

    def encode(self: _Ack, version: int = 5) -> bytes:
        # The usual acknowledgement, Success without properties, is the same 4 bytes at
        # every level (MQTT 5.0 §3.4.2.1: the reason code 0x00 is left out when there are
        # no properties): written in one step for a non-zero int packet identifier
        # [MQTT-2.2.1-3]; struct refuses one above 65,535 or below 0.  Anything else goes
        # to _publish.encode_ack, which checks every field and words the errors.
        pid = self.packet_id
        if (type(pid) is int and pid and self.reason_code == 0 and self.properties is None
                and (version == 4 or version == 5 or version == 3)):
            try:
                return _pack_ack(head, pid)
            except struct_error:
                pass
        return encode_ack(self, version)

    return encode


class _Ack(_PacketBase):
    """PUBACK, PUBREC, PUBREL and PUBCOMP: a packet identifier, and from MQTT 5.0 on a
    reason code and properties (MQTT 5.0 §3.4-§3.7)."""

    __slots__ = ("packet_id", "reason_code", "properties")
    _fields = ACK
    packet_type: PacketType

    def __init__(
        self, packet_id: int, *, reason_code: int = 0, properties: Properties | None = None
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties



class PubAck(_Ack):
    """PUBACK: the answer to a QoS 1 PUBLISH (MQTT 5.0 §3.4)."""

    __slots__ = ()
    packet_type = PacketType.PUBACK
    encode = _ack_encode(PacketType.PUBACK)


class PubRec(_Ack):
    """PUBREC: the first answer to a QoS 2 PUBLISH (MQTT 5.0 §3.5)."""

    __slots__ = ()
    packet_type = PacketType.PUBREC
    encode = _ack_encode(PacketType.PUBREC)


class PubRel(_Ack):
    """PUBREL: the answer to PUBREC; its first byte is 0x62 (MQTT 5.0 §3.6)."""

    __slots__ = ()
    packet_type = PacketType.PUBREL
    encode = _ack_encode(PacketType.PUBREL)


class PubComp(_Ack):
    """PUBCOMP: the answer to PUBREL, closing a QoS 2 exchange (MQTT 5.0 §3.7)."""

    __slots__ = ()
    packet_type = PacketType.PUBCOMP
    encode = _ack_encode(PacketType.PUBCOMP)


class Subscription(_Record):
    """One topic filter of a SUBSCRIBE with its options (MQTT 5.0 §3.8.3.1); before MQTT 5.0
    only ``qos`` exists."""

    __slots__ = ("topic_filter", "qos", "no_local", "retain_as_published", "retain_handling")
    _fields = SUBSCRIPTION

    def __init__(
        self, topic_filter: str, *, qos: int = 0, no_local: bool = False,
        retain_as_published: bool = False, retain_handling: int = 0,
    ) -> None:
        self.topic_filter = topic_filter
        self.qos = qos
        self.no_local = no_local
        self.retain_as_published = retain_as_published
        self.retain_handling = retain_handling



class Subscribe(_PacketBase):
    """SUBSCRIBE (MQTT 5.0 §3.8): a packet identifier and one or more Subscriptions."""

    __slots__ = ("packet_id", "subscriptions", "properties")
    _fields = SUBSCRIBE
    packet_type = PacketType.SUBSCRIBE

    def __init__(
        self, packet_id: int, subscriptions: Iterable[Subscription], *,
        properties: Properties | None = None,
    ) -> None:
        self.packet_id = packet_id
        self.subscriptions = list(subscriptions)
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_subscribe(self, version)



class SubAck(_PacketBase):
    """SUBACK (MQTT 5.0 §3.9): one reason code (before 5.0: return code) per topic filter."""

    __slots__ = ("packet_id", "reason_codes", "properties")
    _fields = SUBACK
    packet_type = PacketType.SUBACK

    def __init__(
        self, packet_id: int, reason_codes: Iterable[int], *,
        properties: Properties | None = None,
    ) -> None:
        self.packet_id = packet_id
        self.reason_codes = list(reason_codes)
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_suback(self, version)



class Unsubscribe(_PacketBase):
    """UNSUBSCRIBE (MQTT 5.0 §3.10): a packet identifier and one or more topic filters."""

    __slots__ = ("packet_id", "topic_filters", "properties")
    _fields = UNSUBSCRIBE
    packet_type = PacketType.UNSUBSCRIBE

    def __init__(
        self, packet_id: int, topic_filters: Iterable[str], *,
        properties: Properties | None = None,
    ) -> None:
        self.packet_id = packet_id
        self.topic_filters = list(topic_filters)
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_unsubscribe(self, version)



class UnsubAck(_PacketBase):
    """UNSUBACK (MQTT 5.0 §3.11): reason codes exist only in MQTT 5.0."""

    __slots__ = ("packet_id", "reason_codes", "properties")
    _fields = UNSUBACK
    packet_type = PacketType.UNSUBACK

    def __init__(
        self, packet_id: int, reason_codes: Iterable[int] = (), *,
        properties: Properties | None = None,
    ) -> None:
        self.packet_id = packet_id
        self.reason_codes = list(reason_codes)
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_unsuback(self, version)



class PingReq(_PacketBase):
    """PINGREQ (MQTT 5.0 §3.12): two bytes, C0 00."""

    __slots__ = ()
    packet_type = PacketType.PINGREQ

    def encode(self, version: int = 5) -> bytes:
        check_version(version)
        return b"\xc0\x00"



class PingResp(_PacketBase):
    """PINGRESP (MQTT 5.0 §3.13): two bytes, D0 00."""

    __slots__ = ()
    packet_type = PacketType.PINGRESP

    def encode(self, version: int = 5) -> bytes:
        check_version(version)
        return b"\xd0\x00"



class Disconnect(_PacketBase):
    """DISCONNECT (MQTT 5.0 §3.14); before MQTT 5.0 it carries nothing."""

    __slots__ = ("reason_code", "properties")
    _fields = DISCONNECT
    packet_type = PacketType.DISCONNECT

    def __init__(self, *, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_disconnect(self, version)



class Auth(_PacketBase):
    """AUTH (MQTT 5.0 §3.15), for extended authentication; MQTT 5.0 only."""

    __slots__ = ("reason_code", "properties")
    _fields = AUTH
    packet_type = PacketType.AUTH

    def __init__(self, *, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return _cold.encode_auth(self, version)



_ACKS = {4: PubAck, 5: PubRec, 6: PubRel, 7: PubComp}
_pack_ack = Struct(">HH").pack  # first byte and Remaining Length, packet identifier

class PreparedPublish:
    """A PUBLISH prepared for forwarding to many subscribers.

    A broker sends one incoming message to every matching subscriber, each with its own
    QoS (the lower of the message's and the subscription's), packet identifier, RETAIN flag
    (0 to established subscriptions [MQTT-3.3.1-9], 1 for retained messages sent because a
    subscription was just made [MQTT-3.3.1-8], as published under v5 Retain As Published),
    DUP flag (decided afresh [MQTT-3.3.1-3]) and, in MQTT 5.0, subscription identifiers.
    ``PreparedPublish(publish)`` validates and encodes the topic, the properties and the
    payload once; ``encode()`` then writes each subscriber's packet, copying those bytes
    once and re-validating nothing.

    Forwarded properties are the message's own minus the Topic Alias (an alias belongs to
    one connection, MQTT 5.0 §3.3.2.3.4) and minus any subscription identifiers (the
    subscriber's own are added by ``encode()``).  A level 3/4 subscriber gets no
    properties; a v5 subscriber of a level 3/4 message gets an empty property block.  The
    topic must be the real topic: resolve an incoming alias first.
    """

    __slots__ = ("publish", "_topic", "_expiry", "_props", "_payload")

    def __init__(self, publish: Publish) -> None:
        self.publish = publish
        self._topic, self._expiry, self._props, self._payload = forwarding_parts(publish)

    def encode(
        self,
        version: int = 5,
        *,
        qos: int = 0,
        packet_id: int | None = None,
        retain: bool = False,
        dup: bool = False,
        subscription_identifiers: Iterable[int] = (),
        message_expiry_interval: int | None = None,
    ) -> bytes:
        """The PUBLISH for one subscriber at protocol level ``version``.

        ``message_expiry_interval``, when given, replaces the message's (the server sends
        the received value minus the time the message waited [MQTT-3.3.2-6])."""
        return encode_forwarded(
            self._topic, self._expiry, self._props, self._payload, version, qos, packet_id,
            retain, dup, subscription_identifiers, message_expiry_interval)

    def __repr__(self) -> str:
        return f"PreparedPublish({self.publish!r})"


def encode(packet: Packet, version: int = 5) -> bytes:
    """Encode ``packet`` for protocol level ``version`` (a CONNECT uses its own level)."""
    return packet.encode(version)


# ---------------------------------------------------------------------------------------
# Decoding
#
# Speed (issue 5).  In CPython a Python-level call costs about as much as all the checks of
# a small PUBLISH, so the hot path runs in as few frames as possible: decode() and the
# StreamDecoder loop read the fixed header themselves when the Remaining Length takes one
# or two bytes (every packet under 16 KiB; _framing.read_header() is the general form,
# which they fall back to for longer lengths and for every error), then call the body
# decoder straight from the _DECODERS table.  The decoders build packets with
# object.__new__ and slot assignment: they have validated every field, so __init__ has
# nothing to add.

_NS = sys.modules[__name__]
_new = object.__new__

# The PUBLISH fixed header flags (MQTT 5.0 §3.3.1), by first byte: (QoS, RETAIN, DUP).
# _DECODERS has already refused QoS 3 [MQTT-3.3.1-4] and DUP on QoS 0 [MQTT-3.3.1-2].
_PUBLISH_FLAGS = tuple(((b >> 1) & 3, bool(b & 1), bool(b & 8)) for b in range(256))


def _decode_publish(data: Buffer, pos: int, end: int, b0: int, version: int) -> Publish:
    tstart = pos + 2
    if tstart > end:
        raise overrun("PUBLISH", "topic name", pos)
    pos = tstart + ((data[pos] << 8) | data[pos + 1])
    if pos > end:
        raise overrun("PUBLISH", "topic name", tstart - 2)
    raw = data[tstart:pos]
    is_bytes = type(raw) is bytes
    try:
        # bytes.decode() is the cheaper call; a memoryview has none.  Both reject what
        # [MQTT-1.5.4-1] forbids: ill-formed UTF-8, overlong forms, encoded surrogates.
        topic = raw.decode() if is_bytes else str(raw, "utf-8")  # type: ignore[union-attr]
    except UnicodeDecodeError as exc:
        raise utf8_error("PUBLISH", "topic name", exc, tstart, version) from None
    if "\x00" in topic:  # [MQTT-1.5.4-2]
        raise null_error("PUBLISH", "topic name", topic, tstart, version)
    if "+" in topic or "#" in topic:  # [MQTT-3.3.2-2]
        raise topic_name_wildcard_error("PUBLISH", topic, tstart, version)
    if not topic and version < 5:  # [MQTT-4.7.3-1]; MQTT 5.0 allows it with a Topic Alias
        raise MalformedPacket(
            "PUBLISH", "topic name is empty", offset=tstart - 2, rule=rule("topic_length", version)
        )
    qos, retain, dup = _PUBLISH_FLAGS[b0]
    packet_id = None
    if qos:
        if end - pos < 2:
            raise overrun("PUBLISH", "packet identifier", pos)
        packet_id = (data[pos] << 8) | data[pos + 1]
        if not packet_id:  # [MQTT-2.2.1-3]
            raise packet_id_zero_error("PUBLISH", pos, version)
        pos += 2
    properties = None
    if version == 5:
        if pos < end and data[pos] == 0:  # the common case: no properties
            pos += 1
        else:
            properties, pos = decode_properties(data, pos, end, PacketType.PUBLISH, "PUBLISH")
        if not topic and (properties is None or properties.topic_alias is None):
            raise ProtocolError(
                "PUBLISH",
                "topic name is empty and there is no topic alias",
                offset=tstart - 2,
                rule=rule("topic_alias_missing", version),
            )
    pkt = _new(Publish)
    pkt.topic = topic
    pkt.payload = data[pos:end] if is_bytes else bytes(data[pos:end])  # type: ignore[assignment]
    pkt.qos = qos
    pkt.retain = retain
    pkt.dup = dup
    pkt.packet_id = packet_id
    pkt.properties = properties
    return pkt


def _decode_ack(data: Buffer, pos: int, end: int, b0: int, version: int) -> _Ack:
    ptype = b0 >> 4
    if end - pos < 2:
        raise overrun(PACKET_NAMES[ptype], "packet identifier", pos)
    packet_id = (data[pos] << 8) | data[pos + 1]
    if not packet_id:  # [MQTT-2.2.1-3]
        raise packet_id_zero_error(PACKET_NAMES[ptype], pos, version)
    code = 0
    properties = None
    if version == 5:
        if end - pos > 2:  # MQTT 5.0 §3.4.2.1: Remaining Length 2 means Success
            code = data[pos + 2]
            if code not in REASON_CODES[ptype]:
                raise reason_code_error(PACKET_NAMES[ptype], code, pos + 2, version)
            if end - pos > 3:  # §3.4.2.2.1: under 4, no property length
                name = PACKET_NAMES[ptype]
                properties, p = decode_properties(data, pos + 3, end, ptype, name)
                if p != end:
                    raise length_mismatch(name, p, end)
    elif end - pos != 2:
        raise length_mismatch(PACKET_NAMES[ptype], pos + 2, end)
    pkt = _new(_ACKS[ptype])
    pkt.packet_id = packet_id
    pkt.reason_code = code
    pkt.properties = properties
    return pkt


def _decode_ping(data: Buffer, pos: int, end: int, b0: int, version: int) -> Any:
    """PINGREQ and PINGRESP: no variable header, no payload (MQTT 5.0 §3.12, §3.13)."""
    if pos != end:
        raise length_mismatch(PACKET_NAMES[b0 >> 4], pos, end)
    return PingReq() if b0 >> 4 == 12 else PingResp()


def _decode_cold(data: Buffer, pos: int, end: int, b0: int, version: int) -> Any:
    """The packet types of the shared _cold module, built with this module's classes."""
    return _cold.DECODERS[b0 >> 4](data, pos, end, b0, version, _NS)


#: packet type -> decoder of the body data[pos:end], whose first byte b0 has been checked.
_DECODE_BODY: tuple[Callable[[Buffer, int, int, int, int], Any], ...] = tuple(
    _decode_publish if t == 3
    else _decode_ack if 4 <= t <= 7
    else _decode_ping if t == 12 or t == 13
    else _decode_cold
    for t in range(16)
)

#: _DECODERS[v][b]: the body decoder for a packet that starts with byte b at level v, or
#: None when no packet may start with b (reserved type, wrong flags, QoS 3, DUP on QoS 0,
#: AUTH before 5.0; the shared first_byte_error() words the error).  One look-up on the
#: hot path both checks the first byte and finds the decoder.
_DECODERS: dict[int, tuple[Callable[[Buffer, int, int, int, int], Any] | None, ...]] = {
    v: tuple(None if first_byte_error(b, v, 0) else _DECODE_BODY[b >> 4] for b in range(256))
    for v in (3, 4, 5)
}


def decode_from(data: Any, offset: int = 0, *, version: int = 5) -> tuple[Packet, int] | None:
    """Decode the packet that starts at ``offset`` in ``data`` (bytes, bytearray or
    memoryview): (packet, offset just after it), or None when ``data`` ends before the
    packet does.  Bad bytes raise an MQTTWireError subclass, as soon as they are seen."""
    check_version(version)
    if type(data) is not bytes:
        data = as_buffer(data)
    n = len(data)
    if not 0 <= offset <= n:
        raise ValueError(f"offset {offset} is outside the data (0..{n})")
    if offset == n:
        return None
    header = read_header(data, offset, n, version)
    if header is None:
        return None
    body, end = header
    if end > n:
        return None
    b0 = data[offset]
    return _DECODE_BODY[b0 >> 4](data, body, end, b0, version), end


def decode(data: Any, *, version: int = 5) -> Packet:
    """Decode ``data``, which must hold exactly one packet."""
    try:  # one look-up both checks the level and finds its decoder table
        decoders = _DECODERS[version]
    except (KeyError, TypeError):
        check_version(version)  # raises
        raise
    if type(data) is not bytes:
        data = as_buffer(data)
    n = len(data)
    if n < 2:
        raise incomplete(data, n, version)
    # The fixed header, inline for a one- or two-byte Remaining Length (the general form
    # is read_header()'s).  One byte is always the shortest form; a second byte of 0 would
    # not be (MQTT 5.0 §1.5.5), so read_header() gets it and refuses it.
    b0 = data[0]
    decoder = decoders[b0]
    if decoder is None:
        raise first_byte_error(b0, version, 0)  # type: ignore[misc]
    b1 = data[1]
    if b1 < 0x80:
        body = 2
        end = 2 + b1
    elif n > 2 and 0 < data[2] < 0x80:
        body = 3
        end = 3 + ((b1 & 0x7F) | (data[2] << 7))
    else:
        header = read_header(data, 0, n, version)
        if header is None:
            raise incomplete(data, n, version)
        body, end = header
    if end == n:  # the whole input is one packet
        return decoder(data, body, end, b0, version)  # type: ignore[no-any-return]
    if end > n:
        raise incomplete(data, n, version)
    decoder(data, body, end, b0, version)  # a bad body is reported first
    raise MalformedPacket(
        PACKET_NAMES[b0 >> 4], f"{n - end} byte(s) after the end of the packet", offset=end
    )


class StreamDecoder:
    """Decodes a byte stream (one direction of a connection) into packets, whatever the
    chunking.

    ``version`` is the protocol level; None makes a server-side decoder that learns it from
    the CONNECT that must come first [MQTT-3.1.0-1] (and refuses a second one
    [MQTT-3.1.0-2]).  ``version`` stays readable and writable: a client-side decoder can be
    told the level after the fact.  ``max_packet_size`` (whole packet, fixed header
    included) is enforced from the fixed header alone, before the body is buffered.

    Memory: at most one incomplete packet is kept between calls.  After an error the
    decoder is broken for good: every later ``feed()`` raises the same error, since a
    stream that lost its framing cannot be trusted again.  The error's ``offset`` is its
    position in the whole stream, and its ``packets`` the packets that the failing call
    completed before the bad bytes.

    Not thread-safe: use one decoder per connection and thread.
    """

    __slots__ = (
        "version",
        "max_packet_size",
        "_learn",
        "_buffer",
        "_need",
        "_consumed",
        "_error",
        "_feeding",
    )

    def __init__(self, version: int | None = None, *, max_packet_size: int | None = None) -> None:
        if version is not None:
            check_version(version)
        if max_packet_size is not None and max_packet_size < 2:
            raise ValueError(f"max_packet_size must be at least 2, not {max_packet_size}")
        self.version = version
        self.max_packet_size = max_packet_size
        self._learn = version is None
        self._buffer = bytearray()  # the incomplete packet carried over to the next feed()
        self._need = 0  # its full size once its fixed header is known, else 0
        self._consumed = 0  # stream offset of self._buffer[0]
        self._error: MQTTWireError | None = None
        self._feeding = False

    def feed(self, chunk: Any) -> list[Packet]:
        """Add ``chunk`` to the stream; return the packets it completes, in order."""
        if self._error is not None:
            self._error.packets = []
            raise self._error
        if self._feeding:
            raise RuntimeError("StreamDecoder.feed() is not re-entrant")
        self._feeding = True
        try:
            return self._feed(chunk)
        finally:
            self._feeding = False

    def _feed(self, chunk: Any) -> list[Packet]:
        chunk = as_buffer(chunk)
        buf = self._buffer
        if buf:
            # Append (amortised O(1)) and parse nothing until the pending packet can be
            # complete: a large packet fed one byte at a time stays linear.
            buf += chunk
            if len(buf) < self._need:
                return []
            view = memoryview(buf)
            try:
                pos, out = self._parse(view)
            finally:
                view.release()  # decoded packets hold copies, never views of the buffer
            del buf[:pos]
        else:
            # Nothing pending: parse the chunk in place and keep only its incomplete tail.
            pos, out = self._parse(chunk)
            if pos < len(chunk):
                buf += chunk[pos:]
        return out

    def _parse(self, data: Buffer) -> tuple[int, list[Packet]]:
        """Decode the complete packets at the start of ``data``: (bytes used, packets)."""
        n = len(data)
        pos = 0
        out: list[Packet] = []
        append = out.append
        limit = self.max_packet_size
        learn = self._learn
        # A server-side decoder reads the CONNECT's fixed header at level 5 (the same at
        # every level); the CONNECT decoder takes the level from the packet itself.
        version: int = 5 if self.version is None else self.version
        decoders = _DECODERS[version]
        self._need = 0
        try:
            while pos < n:
                b0 = data[pos]
                if learn:
                    err = connect_order_error(b0, pos, self.version)
                    if err is not None:
                        raise err
                # The fixed header as in decode(): one- and two-byte Remaining Lengths
                # inline, the rest (and every error) through read_header().
                body = end = 0
                decoder = decoders[b0]
                if pos + 1 < n and decoder is not None:
                    b1 = data[pos + 1]
                    if b1 < 0x80:
                        body = pos + 2
                        end = body + b1
                    elif pos + 2 < n and 0 < data[pos + 2] < 0x80:
                        body = pos + 3
                        end = body + ((b1 & 0x7F) | (data[pos + 2] << 7))
                if not body:
                    header = read_header(data, pos, n, version)
                    if header is None:
                        break
                    body, end = header
                if limit is not None and end - pos > limit:
                    raise too_large(PACKET_NAMES[b0 >> 4], pos, end - pos, limit)
                if end > n:
                    self._need = end - pos
                    break
                packet = decoder(data, body, end, b0, version)  # type: ignore[misc]
                if learn and self.version is None:
                    self.version = version = packet.protocol_version
                    decoders = _DECODERS[version]
                append(packet)
                pos = end
        except MQTTWireError as exc:
            if exc.offset is not None:
                exc.offset += self._consumed
            exc.packets = out
            self._error = exc
            self._buffer = bytearray()
            raise
        self._consumed += pos
        return pos, out

    @property
    def buffered(self) -> int:
        """How many bytes of an incomplete packet are held."""
        return len(self._buffer)

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else f"{len(self._buffer)} bytes buffered"
        return (f"StreamDecoder(version={self.version!r}, "
                f"max_packet_size={self.max_packet_size!r}, {state})")
