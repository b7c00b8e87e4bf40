"""The packet classes of the pure-Python twin, re-exported by ``_pure``.

Twins of the cdef classes in ``_codec/packets_c.pxi``.  Each class's ``encode()`` calls
the shared reference encoder of its packet type (``_codec.publish``, ``reference``), except that the
four acknowledgements write the usual 4-byte form in one step; ``PreparedPublish`` and
``encode()`` are in ``_codec.encode``, the decoders in ``_codec.decode``, which builds these
classes.  This module imports no other ``_pure_*`` module, so the twin has no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from struct import Struct
from struct import error as struct_error
from typing import ClassVar, Union

from .._constants import PacketType
from . import reference
from .datatypes import check_version
from .fields import (
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
from .properties import Properties
from .publish import ACK_FIRST_BYTE, encode_ack, encode_publish

__all__ = [
    "Auth", "ConnAck", "Connect", "Disconnect", "PingReq", "PingResp", "PubAck", "PubComp",
    "Publish", "PubRec", "PubRel", "SubAck", "Subscribe", "Subscription", "UnsubAck",
    "Unsubscribe", "Will", "Packet",
]

Packet = Union[
    "Connect", "ConnAck", "Publish", "PubAck", "PubRec", "PubRel", "PubComp", "Subscribe",
    "SubAck", "Unsubscribe", "UnsubAck", "PingReq", "PingResp", "Disconnect", "Auth",
]

_pack_ack = Struct(">HH").pack  # first byte and Remaining Length, packet identifier


class _Record:
    """__eq__ and __repr__ of every packet class and of Will and Subscription, written
    once: each class names its field list (``_fields``, from the shared ``_codec.fields``
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
        return reference.encode_connect(self)


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
        return reference.encode_connack(self, version)


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
    attribute looked up on every call (issue 5: an operation short enough for that lookup
    to count; benchmarks/history/codec.md, "Measurements once in the sources")."""
    head = ACK_FIRST_BYTE[ptype] << 8 | 2  # first byte, Remaining Length 2

    def encode(self: _Ack, version: int = 5) -> bytes:
        # The usual acknowledgement, Success without properties, is the same 4 bytes at
        # every level (MQTT 5.0 §3.4.2.1: the reason code 0x00 is left out when there are
        # no properties): written in one step for a non-zero int packet identifier
        # [MQTT-2.2.1-3]; struct refuses one above 65,535 or below 0.  Anything else goes
        # to _codec.publish.encode_ack, which checks every field and words the errors.
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
        return reference.encode_subscribe(self, version)


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
        return reference.encode_suback(self, version)


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
        return reference.encode_unsubscribe(self, version)


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
        return reference.encode_unsuback(self, version)


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
        return reference.encode_disconnect(self, version)


class Auth(_PacketBase):
    """AUTH (MQTT 5.0 §3.15), for extended authentication; MQTT 5.0 only."""

    __slots__ = ("reason_code", "properties")
    _fields = AUTH
    packet_type = PacketType.AUTH

    def __init__(self, *, reason_code: int = 0, properties: Properties | None = None) -> None:
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version: int = 5) -> bytes:
        return reference.encode_auth(self, version)
