"""Pure-Python readers and writers for the MQTT data representations (MQTT 5.0 §1.5).

Shared by ``_pure`` (its whole codec) and the rest of ``_codec`` (``properties``,
``reference``, ``publish``, ``framing``, ``forwarding``: used by both implementations).
The Cython twin has C versions of the hot readers in ``datatypes_c.pxi``; the error
builders at the bottom are used by both, so the messages are the same.

Readers take ``(data, pos, end)``: ``data`` is ``bytes`` or a one-byte-per-item
``memoryview`` (see :func:`as_buffer`), ``end`` is where the enclosing packet or block ends.
A field that would run past ``end`` means the Remaining Length (or property length) does
not match the fields, which is a malformed packet, never a read past the packet.
"""

from __future__ import annotations

from struct import Struct
from typing import Any

from .._constants import MAX_REMAINING_LENGTH, PACKET_NAMES, REQUIRED_FLAGS
from .._errors import MalformedPacket, PacketTooLarge, ProtocolError, rule

Buffer = bytes | memoryview


def as_buffer(data: object) -> Buffer:
    """Return ``data`` as bytes or a C-contiguous unsigned-byte memoryview, without copying
    when it already is one (a non-contiguous view is copied once)."""
    if type(data) is bytes:
        return data
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"expected bytes, bytearray or memoryview, not {type(data).__name__}"
        ) from None
    if not view.c_contiguous:
        return view.tobytes()
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# ---------------------------------------------------------------------------------------
# Readers


#: How :func:`overrun` ends its message; the property block reader recognises its fields'
#: overruns by it (``_codec.properties.decode_properties``), to blame the Property Length instead
#: when the field still fits in the packet.
PAST_PACKET = " runs past the end of the packet (Remaining Length too small)"


def overrun(ptype: str, field: str, pos: int) -> MalformedPacket:
    """A field that does not fit in what is left of the packet."""
    return MalformedPacket(ptype, field + PAST_PACKET, offset=pos)


def read_byte(data: Buffer, pos: int, end: int, ptype: str, field: str) -> int:
    if pos >= end:
        raise overrun(ptype, field, pos)
    return data[pos]


def read_u16(data: Buffer, pos: int, end: int, ptype: str, field: str) -> int:
    if end - pos < 2:
        raise overrun(ptype, field, pos)
    return (data[pos] << 8) | data[pos + 1]


def read_u32(data: Buffer, pos: int, end: int, ptype: str, field: str) -> int:
    if end - pos < 4:
        raise overrun(ptype, field, pos)
    return int.from_bytes(data[pos : pos + 4], "big")


def read_varint(
    data: Buffer, pos: int, end: int, ptype: str, field: str, version: int
) -> tuple[int, int]:
    """A Variable Byte Integer inside a packet body: (value, position after it).

    The fixed header's Remaining Length is read by ``_codec.framing`` instead.  This keeps its own
    loop, on purpose: the pure property reader calls it for the block length and for every
    property identifier, and built on ``_codec.framing.frame_header`` it was slower
    (benchmarks/history/codec.md, "Measurements once in the sources"); ``_speedups``'
    property reader keeps its own loop for the same reason (``_read_varint``)."""
    value = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise overrun(ptype, field, pos)
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift == 28:
            raise MalformedPacket(
                ptype, f"{field} is longer than 4 bytes", offset=start,
                rule=rule("remaining_length", version),
            )
    if pos - start > 1 and byte == 0:
        raise MalformedPacket(
            ptype, f"{field} is not in its shortest form", offset=start,
            rule=rule("varint_minimal", version),
        )
    return value, pos


def read_binary(data: Buffer, pos: int, end: int, ptype: str, field: str) -> tuple[bytes, int]:
    """Binary Data: a two-byte length, then that many bytes (MQTT 5.0 §1.5.6)."""
    n = read_u16(data, pos, end, ptype, field)
    pos += 2
    if end - pos < n:
        raise overrun(ptype, field, pos - 2)
    return bytes(data[pos : pos + n]), pos + n


def read_utf8(
    data: Buffer, pos: int, end: int, ptype: str, field: str, version: int
) -> tuple[str, int]:
    """A UTF-8 Encoded String: a two-byte length, then well-formed UTF-8 without U+0000
    (MQTT 3.1.1 §1.5.3, MQTT 5.0 §1.5.4).  Python's UTF-8 codec rejects ill-formed
    sequences, overlong forms and encoded surrogates, which is exactly what the rule asks.
    The length is read here rather than by read_u16: one call less per string, which the
    pure property reader measured (every string property and User Property pair)."""
    if end - pos < 2:
        raise overrun(ptype, field, pos)
    n = (data[pos] << 8) | data[pos + 1]
    pos += 2
    if end - pos < n:
        raise overrun(ptype, field, pos - 2)
    try:
        text = str(data[pos : pos + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise utf8_error(ptype, field, exc, pos, version) from None
    if "\x00" in text:
        raise null_error(ptype, field, text, pos, version)
    return text, pos + n


# ---------------------------------------------------------------------------------------
# Writers


# One-byte bytes objects, so that the common one-byte Variable Byte Integer (values under
# 128: most Remaining Lengths and property lengths) is a tuple look-up, not an allocation.
_BYTES = tuple(bytes((i,)) for i in range(256))
pack_u16 = Struct(">H").pack  # a Two Byte Integer (MQTT 5.0 §1.5.2)


def encode_varint(value: int) -> bytes:
    """The shortest Variable Byte Integer for ``value`` (0..268,435,455)."""
    if value < 0x80:
        return _BYTES[value] if value >= 0 else bytes((value,))  # the latter raises
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint_size(value: int) -> int:
    return 1 if value < 0x80 else 2 if value < 0x4000 else 3 if value < 0x200000 else 4


def encode_utf8(text: object, ptype: str, field: str, version: int) -> bytes:
    """Length-prefixed UTF-8, refusing what a decoder would refuse."""
    if not isinstance(text, str):
        raise TypeError(f"{ptype}: {field} must be str, not {type(text).__name__}")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MalformedPacket(
            ptype, f"{field} contains a lone surrogate U+{ord(text[exc.start]):04X}",
            rule=rule("utf8_well_formed", version),
        ) from None
    if "\x00" in text:
        raise MalformedPacket(
            ptype, f"{field} contains U+0000", rule=rule("utf8_null", version)
        )
    if len(raw) > 0xFFFF:
        raise MalformedPacket(ptype, f"{field} is longer than 65,535 bytes ({len(raw)})")
    return pack_u16(len(raw)) + raw


def encode_binary(data: object, ptype: str, field: str) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{ptype}: {field} must be bytes, not {type(data).__name__}")
    raw = bytes(data)
    if len(raw) > 0xFFFF:
        raise MalformedPacket(ptype, f"{field} is longer than 65,535 bytes ({len(raw)})")
    return pack_u16(len(raw)) + raw


def check_version(version: object) -> int:
    """The protocol level argument of every encoder, decoder and topic function: 3 (MQTT
    3.1), 4 (3.1.1) or 5 (5.0).  The one check and the one message for a bad level, in
    both implementations and both topic twins (the Cython twins test the usual values in C
    first and call this for anything else, so that it alone words the error).  A caller's
    mistake, not bad bytes: ValueError, not an MQTTWireError."""
    if version != 5 and version != 4 and version != 3:
        raise ValueError(f"protocol version must be 3, 4 or 5, not {version!r}")
    return version


def check_packet_id(packet_id: object, ptype: str, version: int) -> int:
    """Encoding side of [MQTT-2.3.1-1] / [MQTT-2.2.1-3]: an int from 1 to 65,535."""
    if type(packet_id) is int and 0 < packet_id <= 0xFFFF:  # the common case, one test
        return packet_id
    if packet_id is None:
        raise ProtocolError(
            ptype, "packet identifier missing (required for QoS > 0 and for this packet type)",
            rule=rule("packet_id_nonzero", version),
        )
    if not isinstance(packet_id, int) or isinstance(packet_id, bool):
        raise TypeError(f"{ptype}: packet_id must be an int, not {type(packet_id).__name__}")
    if not 0 < packet_id <= 0xFFFF:
        raise ProtocolError(
            ptype, f"packet identifier {packet_id} is not in 1..65535",
            rule=rule("packet_id_nonzero", version),
        )
    return packet_id


def check_remaining_length(ptype: str, length: int) -> None:
    if length > MAX_REMAINING_LENGTH:
        raise MalformedPacket(
            ptype, f"packet too long to encode: Remaining Length {length} exceeds 268,435,455"
        )


# ---------------------------------------------------------------------------------------
# Error builders shared with the Cython twin and the topic functions.


def utf8_error(
    ptype: str, field: str, exc: UnicodeDecodeError, start: int, version: int
) -> MalformedPacket:
    """``exc`` came from decoding the string whose first byte is at ``start``."""
    return MalformedPacket(
        ptype, f"{field} is not well-formed UTF-8 ({exc.reason})",
        offset=start + exc.start, rule=rule("utf8_well_formed", version),
    )


def null_error(ptype: str, field: str, text: str, start: int, version: int) -> MalformedPacket:
    index = len(text[: text.index("\x00")].encode("utf-8"))
    return MalformedPacket(
        ptype, f"{field} contains U+0000", offset=start + index,
        rule=rule("utf8_null", version),
    )


def packet_id_zero_error(ptype: str, pos: int, version: int) -> ProtocolError:
    return ProtocolError(
        ptype, "packet identifier is 0", offset=pos, rule=rule("packet_id_nonzero", version)
    )


def topic_name_wildcard_error(
    ptype: str, text: str, start: int, version: int
) -> MalformedPacket:
    """A topic name holding '+' or '#' (its first byte at ``start``) [MQTT-3.3.2-2]."""
    first = min(i for i in (text.find("+"), text.find("#")) if i >= 0)
    index = len(text[:first].encode("utf-8"))
    return MalformedPacket(
        ptype, f"topic name contains wildcard {text[first]!r}", offset=start + index,
        rule=rule("topic_name_wildcard", version),
    )


def reason_code_error(ptype: str, code: int, pos: int, version: int) -> MalformedPacket:
    return MalformedPacket(
        ptype, f"reason code 0x{code:02X} is not defined for {ptype}", offset=pos,
        rule=rule("reason_code", version),
    )


def first_byte_error(b0: int, version: int, pos: int) -> MalformedPacket | None:
    """The error for a first byte whose type or flags no packet may have, or None.

    Checked as soon as the byte arrives, so a stream of garbage fails at once."""
    ptype = b0 >> 4
    if ptype == 0:
        return MalformedPacket(
            "RESERVED", f"packet type 0 is reserved (first byte 0x{b0:02X})", offset=pos,
            rule=rule("packet_type_reserved", version),
        )
    name = PACKET_NAMES[ptype]
    if ptype == 15 and version < 5:
        return MalformedPacket(
            name, f"AUTH does not exist before MQTT 5.0 (first byte 0x{b0:02X})",
            offset=pos, rule=rule("auth_v5_only", version),
        )
    if ptype == 3:
        qos = (b0 >> 1) & 3
        if qos == 3:
            return MalformedPacket(
                name, f"both QoS bits set (first byte 0x{b0:02X})", offset=pos,
                rule=rule("qos_bits", version),
            )
        if b0 & 0x08 and qos == 0:
            return MalformedPacket(
                name, f"DUP set on a QoS 0 message (first byte 0x{b0:02X})", offset=pos,
                rule=rule("dup_qos0", version),
            )
        return None
    required = REQUIRED_FLAGS[ptype]
    if b0 & 0x0F != required:
        return MalformedPacket(
            name,
            f"fixed header flags are 0x{b0 & 0x0F:X}, must be 0x{required:X} "
            f"(first byte 0x{b0:02X})",
            offset=pos, rule=rule("fixed_header_flags", version),
        )
    return None


def remaining_length_error(pos: int, nbytes: int, version: int, name: str) -> MalformedPacket:
    """A Remaining Length at ``pos`` that has a fifth byte, or is not in its shortest
    form (``nbytes`` is how many bytes it took)."""
    if nbytes > 4:
        return MalformedPacket(
            name, "Remaining Length is longer than 4 bytes", offset=pos,
            rule=rule("remaining_length", version),
        )
    return MalformedPacket(
        name, "Remaining Length is not in its shortest form", offset=pos,
        rule=rule("varint_minimal", version),
    )


def length_mismatch(name: str, pos: int, end: int) -> MalformedPacket:
    """Bytes left inside a packet after its last field."""
    return MalformedPacket(
        name, f"{end - pos} unexpected byte(s) after the last field (Remaining Length too "
        "large)", offset=pos,
    )


def too_large(name: str, pos: int, size: int, limit: int) -> PacketTooLarge:
    return PacketTooLarge(
        name, f"packet of {size} bytes exceeds the maximum packet size {limit}", offset=pos,
    )


def short_repr(value: object) -> str:
    """repr() that keeps a large payload from flooding a log line."""
    if isinstance(value, bytes) and len(value) > 64:
        return f"{value[:48]!r}...({len(value)} bytes)"
    return repr(value)


def same_kind(a: object, b: object) -> bool:
    """Packets of the two implementations compare equal when their fields do, so a Cython
    decode can be compared with a Python one directly."""
    return type(a) is type(b) or (
        type(a).__name__ == type(b).__name__
        and type(b).__module__ in ("mqttwire._pure", "mqttwire._speedups")
    )


def connect_order_error(b0: int, pos: int, version: int | None) -> ProtocolError | None:
    """For a server-side decoder (created with version=None): the first packet must be
    CONNECT [MQTT-3.1.0-1] and there must not be a second [MQTT-3.1.0-2]."""
    is_connect = b0 >> 4 == 1
    if version is None and not is_connect:
        return ProtocolError(
            PACKET_NAMES[b0 >> 4], "the first packet on a connection must be CONNECT",
            offset=pos, rule=rule("first_packet_connect", 5),
        )
    if version is not None and is_connect:
        return ProtocolError(
            "CONNECT", "a second CONNECT on the same connection", offset=pos,
            rule=rule("second_connect", version),
        )
    return None


def check_subscription_identifiers(identifiers: Any) -> bytes:
    """The Subscription Identifier properties for a forwarded PUBLISH (one per matching
    subscription, MQTT 5.0 §3.3.2.3.8): each 1..268,435,455."""
    out = b""
    for ident in identifiers:
        if not isinstance(ident, int) or isinstance(ident, bool):
            raise TypeError(
                f"PUBLISH: subscription identifier must be an int, not {type(ident).__name__}"
            )
        if not 0 < ident <= MAX_REMAINING_LENGTH:
            raise ProtocolError(
                "PUBLISH",
                f"subscription identifier {ident} is not in 1..268,435,455",
                rule=rule("property_value", 5),
            )
        out += b"\x0b" + encode_varint(ident)
    return out
