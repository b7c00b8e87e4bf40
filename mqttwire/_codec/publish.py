"""The reference encoders of PUBLISH and of the four acknowledgements (PUBACK, PUBREC,
PUBREL, PUBCOMP), shared by both implementations.

``_pure`` encodes these packets with them.  ``_speedups`` writes well-typed, valid packets
in C and hands every other packet (a wrong type, a value out of range, anything it would
have to word an error for) to these functions, which encode it or raise.  So both
implementations accept the same packets and raise the same error, with the same message,
for the same bad one.  The functions read the fields of either implementation's packet
objects.
"""

from __future__ import annotations

from typing import Any

from .._constants import MAX_REMAINING_LENGTH, PACKET_NAMES, REASON_CODES, PacketType
from .._errors import MalformedPacket, ProtocolError, rule
from .datatypes import (
    check_packet_id,
    check_version,
    encode_utf8,
    encode_varint,
    pack_u16,
    topic_name_wildcard_error,
)
from .framing import frame
from .properties import encode_properties

__all__ = ["ACK_FIRST_BYTE", "encode_ack", "encode_publish"]

#: The first byte (type and flags, MQTT 5.0 §2.1.2) of each acknowledgement, by packet
#: type: PUBREL's flags are 0010 [MQTT-3.6.1-1], the others' 0000.
ACK_FIRST_BYTE = {4: 0x40, 5: 0x50, 6: 0x62, 7: 0x70}


def encode_publish(pkt: Any, version: int) -> bytes:
    """Encode the PUBLISH ``pkt`` at protocol level ``version``, or raise the error that
    both implementations raise for it."""
    check_version(version)
    name = "PUBLISH"
    qos = pkt.qos
    if qos != 0 and qos != 1 and qos != 2:
        raise MalformedPacket(
            name, f"QoS is {qos!r}, not 0, 1 or 2", rule=rule("qos_bits", version)
        )
    topic = pkt.topic
    raw_topic = encode_utf8(topic, name, "topic name", version)
    if "+" in topic or "#" in topic:
        err = topic_name_wildcard_error(name, topic, 0, version)
        err.offset = None
        raise err
    if not topic and (version < 5 or pkt.properties is None or pkt.properties.topic_alias is None):
        if version < 5:
            raise MalformedPacket(name, "topic name is empty", rule=rule("topic_length", version))
        raise ProtocolError(
            name,
            "topic name is empty and there is no topic alias",
            rule=rule("topic_alias_missing", version),
        )
    if pkt.dup and not qos:
        raise MalformedPacket(name, "DUP set on a QoS 0 message", rule=rule("dup_qos0", version))
    payload = pkt.payload
    if type(payload) is not bytes:
        if not isinstance(payload, (bytearray, memoryview)):
            raise TypeError(f"{name}: payload must be bytes, not {type(payload).__name__}")
        payload = bytes(payload)
    packet_id = b""
    if qos:
        packet_id = pack_u16(check_packet_id(pkt.packet_id, name, version))
    elif pkt.packet_id is not None:
        raise ProtocolError(name, "a QoS 0 message has no packet identifier")
    properties = b""
    if version == 5:
        properties = (
            b"\x00" if pkt.properties is None
            else encode_properties(pkt.properties, PacketType.PUBLISH, name)
        )
    elif pkt.properties:
        raise ProtocolError(name, f"properties exist only in MQTT 5.0, not at level {version}")
    length = len(raw_topic) + len(packet_id) + len(properties) + len(payload)
    if length > MAX_REMAINING_LENGTH:
        raise MalformedPacket(
            name, f"packet too long to encode: Remaining Length {length} exceeds 268,435,455"
        )
    b0 = 0x30 | (0x08 if pkt.dup else 0) | (qos << 1) | (1 if pkt.retain else 0)
    # One join: the payload is copied once, into the packet.
    return b"".join((bytes((b0,)), encode_varint(length), raw_topic, packet_id, properties,
                     payload))


def encode_ack(pkt: Any, version: int) -> bytes:
    """Encode the acknowledgement ``pkt`` (its ``packet_type`` says which) at protocol
    level ``version``, or raise the error that both implementations raise for it."""
    check_version(version)
    ptype = pkt.packet_type
    name = PACKET_NAMES[ptype]
    pid = pack_u16(check_packet_id(pkt.packet_id, name, version))
    code = pkt.reason_code
    first = ACK_FIRST_BYTE[ptype]
    if version < 5:
        if code:
            raise ProtocolError(
                name, f"reason codes exist only in MQTT 5.0, not at level {version}"
            )
        if pkt.properties:
            raise ProtocolError(name, f"properties exist only in MQTT 5.0, not at level {version}")
        return bytes((first, 2)) + pid
    if code not in REASON_CODES[ptype]:
        raise MalformedPacket(
            name, f"reason code {code!r} is not defined for {name}", rule=rule("reason_code", 5)
        )
    if pkt.properties:  # MQTT 5.0 §3.4.2.1: leave out what is not needed
        props = encode_properties(pkt.properties, ptype, name)
        return frame(first, pid + bytes((code,)) + props, name)
    if code:
        return bytes((first, 3)) + pid + bytes((code,))
    return bytes((first, 2)) + pid
