"""Decoding in the pure-Python twin, re-exported by ``_pure``: ``decode()``,
``decode_from()`` and the body decoders that ``_codec.stream`` also uses.

Twin of ``_codec/decode_c.pxi``.  PUBLISH, the acknowledgements and PINGREQ/PINGRESP are
decoded here; the other packet types by the shared ``reference`` decoders, with the classes of
``packets``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._constants import PACKET_NAMES, REASON_CODES, PacketType
from .._errors import MalformedPacket, ProtocolError, rule
from . import packets, reference
from .datatypes import (
    Buffer,
    as_buffer,
    check_version,
    first_byte_error,
    length_mismatch,
    null_error,
    overrun,
    packet_id_zero_error,
    reason_code_error,
    topic_name_wildcard_error,
    utf8_error,
)
from .framing import incomplete, read_header
from .packets import Packet, PingReq, PingResp, PubAck, PubComp, Publish, PubRec, PubRel, _Ack
from .properties import decode_properties

__all__ = ["FIRST_BYTE_DECODERS", "decode", "decode_from"]


# ---------------------------------------------------------------------------------------
# Decoding
#
# Speed (issue 5).  In CPython a Python-level call costs about as much as all the checks of
# a small PUBLISH, so the hot path runs in as few frames as possible: decode() and the
# StreamDecoder loop read the fixed header themselves when the Remaining Length takes one
# or two bytes (every packet under 16 KiB; _codec.framing.read_header() is the general form,
# which they fall back to for longer lengths and for every error), then call the body
# decoder straight from the FIRST_BYTE_DECODERS table.  This inline copy is deliberate:
# the call to read_header() alone cost about two fifths of the whole decode() with the
# header inline (benchmarks/history/codec.md, "Measurements once in the sources").  The
# decoders build packets with
# object.__new__ and slot assignment: they have validated every field, so __init__ has
# nothing to add.

_NS = packets  # the classes the shared reference decoders build
_new = object.__new__
_ACKS = {4: PubAck, 5: PubRec, 6: PubRel, 7: PubComp}

# The PUBLISH fixed header flags (MQTT 5.0 §3.3.1), by first byte: (QoS, RETAIN, DUP).
# FIRST_BYTE_DECODERS has already refused QoS 3 [MQTT-3.3.1-4] and DUP on QoS 0 [MQTT-3.3.1-2].
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
    """The packet types of the shared reference module, built with this module's classes."""
    return reference.DECODERS[b0 >> 4](data, pos, end, b0, version, _NS)


#: packet type -> decoder of the body data[pos:end], whose first byte b0 has been checked.
_DECODE_BODY: tuple[Callable[[Buffer, int, int, int, int], Any], ...] = tuple(
    _decode_publish if t == 3
    else _decode_ack if 4 <= t <= 7
    else _decode_ping if t == 12 or t == 13
    else _decode_cold
    for t in range(16)
)

#: FIRST_BYTE_DECODERS[v][b]: the body decoder for a packet that starts with byte b at level v, or
#: None when no packet may start with b (reserved type, wrong flags, QoS 3, DUP on QoS 0,
#: AUTH before 5.0; the shared first_byte_error() words the error).  One look-up on the
#: hot path both checks the first byte and finds the decoder.
FIRST_BYTE_DECODERS: dict[int, tuple[Callable[[Buffer, int, int, int, int], Any] | None, ...]] = {
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
        decoders = FIRST_BYTE_DECODERS[version]
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
