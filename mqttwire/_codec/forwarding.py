"""Forwarding one PUBLISH to many subscribers: the reference code behind
``PreparedPublish``, shared by both implementations.

:func:`forwarding_parts` validates a PUBLISH once and encodes the parts that every
subscriber's copy shares; :func:`encode_forwarded` writes one subscriber's packet from
them.  ``_pure.PreparedPublish`` is built on both.  ``_speedups.PreparedPublish`` prepares
and writes well-typed, valid input in C and hands anything else here, so the two accept
the same input and raise the same errors.

A module of its own, above ``properties`` and ``datatypes``: it needs both, and
``properties`` needs ``datatypes``, so it cannot live in ``datatypes`` without an import
cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._constants import MAX_REMAINING_LENGTH
from .._errors import MalformedPacket, ProtocolError, rule
from .datatypes import (
    check_packet_id,
    check_subscription_identifiers,
    check_version,
    encode_utf8,
    encode_varint,
    pack_u16,
    topic_name_wildcard_error,
    varint_size,
)
from .properties import Properties, encode_properties, forwarded_block, wire_block

__all__ = ["encode_forwarded", "forwarding_parts"]


def forwarding_parts(publish: Any) -> tuple[bytes, int | None, bytes, bytes]:
    """Validate a PUBLISH for forwarding and encode its invariant parts once: (topic with
    its length prefix, message expiry interval or None, the other forwarded properties as
    a property block without its length, payload).

    Forwarded properties are the message's own minus the Topic Alias (an alias belongs to
    one connection, MQTT 5.0 §3.3.2.3.4), the Subscription Identifiers (each subscriber
    gets its own, §3.3.2.3.8) and the Message Expiry Interval (which the server lowers by
    the time the message waited [MQTT-3.3.2-6])."""
    name = "PUBLISH"
    topic = publish.topic
    raw_topic = encode_utf8(topic, name, "topic name", 5)
    if not topic:
        raise MalformedPacket(
            name,
            "cannot forward an empty topic name (resolve the topic alias first)",
            rule=rule("topic_length", 5),
        )
    if "+" in topic or "#" in topic:
        err = topic_name_wildcard_error(name, topic, 0, 5)
        err.offset = None
        raise err
    payload = publish.payload
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name}: payload must be bytes, not {type(payload).__name__}")
    expiry = None
    block = b""
    props = publish.properties
    wire = wire_block(props, 3) if isinstance(props, Properties) else None
    if wire is not None:
        # A decoded (or already encoded) PUBLISH property block: copy what is forwarded
        # from it, building no property value.
        expiry, block = forwarded_block(wire)
    elif props:
        kept = {
            k: v
            for k, v in props.items()
            if k not in ("topic_alias", "subscription_identifiers", "message_expiry_interval")
        }
        expiry = props.message_expiry_interval
        encoded = encode_properties(Properties(**kept), 3, name)
        block = encoded[varint_size(len(encoded) - 1) :]  # drop the length prefix
    return raw_topic, expiry, block, bytes(payload)


def encode_forwarded(
    topic: bytes, expiry: int | None, props: bytes, payload: bytes, version: int, qos: int,
    packet_id: int | None, retain: bool, dup: bool, subscription_identifiers: Iterable[int],
    message_expiry_interval: int | None,
) -> bytes:
    """One subscriber's PUBLISH from the parts of :func:`forwarding_parts`
    (``PreparedPublish.encode``; the arguments after the parts are its own)."""
    check_version(version)
    name = "PUBLISH"
    if qos != 0 and qos != 1 and qos != 2:
        raise MalformedPacket(
            name, f"QoS is {qos!r}, not 0, 1 or 2", rule=rule("qos_bits", version)
        )
    if dup and not qos:
        raise MalformedPacket(
            name, "DUP set on a QoS 0 message", rule=rule("dup_qos0", version)
        )
    parts = [topic]
    if qos:
        parts.append(pack_u16(check_packet_id(packet_id, name, version)))
    elif packet_id is not None:
        raise ProtocolError(name, "a QoS 0 message has no packet identifier")
    if version == 5:
        if message_expiry_interval is not None:
            expiry = message_expiry_interval
        block = b""
        if expiry is not None:
            if not isinstance(expiry, int) or not 0 <= expiry <= 0xFFFF_FFFF:
                raise ProtocolError(
                    name,
                    f"message expiry interval {expiry!r} is not in 0..4294967295",
                    rule=rule("property_value", 5),
                )
            block = b"\x02" + expiry.to_bytes(4, "big")
        block += props + check_subscription_identifiers(subscription_identifiers)
        parts.append(encode_varint(len(block)))
        parts.append(block)
    parts.append(payload)
    body = b"".join(parts)
    length = len(body)
    if length > MAX_REMAINING_LENGTH:
        raise MalformedPacket(
            name, f"packet too long to encode: Remaining Length {length} exceeds 268,435,455"
        )
    b0 = 0x30 | (0x08 if dup else 0) | (qos << 1) | (1 if retain else 0)
    return bytes((b0,)) + encode_varint(length) + body
