"""The fixed header (MQTT 5.0 §2.1) read and written in Python, and the error for input
that ends before its packet does: shared by both implementations and the capture reader.

This is the one Python reader of a fixed header's Remaining Length: :func:`frame_header`
(the lenient form, as framing needs it; ``capture.direction`` uses it) and
:func:`read_header` on top of it (the codec's checks).  ``_pure`` reads every fixed header
whose Remaining Length takes more than two bytes with :func:`read_header`, and shorter ones
inline in its hot loops (``_codec.decode.decode``, ``_codec.stream``; measured, see there).
``_speedups`` reads fixed headers in C (``_cdefs.read_varint``) and asks :func:`incomplete`
for the error when ``decode()`` is given too few bytes, so the two word it the same way.
A Variable Byte Integer inside a packet body (a property length, a Subscription
Identifier) is read by ``_codec.datatypes.read_varint``, which names the field in its errors.
"""

from __future__ import annotations

from typing import Any, Literal

from .._constants import PACKET_NAMES
from .._errors import IncompletePacket
from .datatypes import (
    Buffer,
    check_remaining_length,
    encode_varint,
    first_byte_error,
    remaining_length_error,
)

__all__ = ["frame", "frame_header", "incomplete", "read_header"]

# _BAD_FIRST[v][b]: no packet may start with byte b at level v (first_byte_error words why).
_BAD_FIRST = {
    v: tuple(first_byte_error(b, v, 0) is not None for b in range(256)) for v in (3, 4, 5)
}


def frame_header(data: Any, pos: int, n: int) -> tuple[int, int] | Literal[False] | None:
    """The fixed header at ``data[pos]`` as framing needs it, reading nothing at or past
    ``n``: (its length in bytes, the Remaining Length); None when ``n`` comes first; False
    when the Remaining Length's fourth byte has the continuation bit set (a fifth would be
    needed, and a Variable Byte Integer has at most four, MQTT 5.0 §1.5.5).

    It checks nothing else: :func:`read_header` adds the first-byte and shortest-form
    checks, and the capture reader (``capture.direction``) frames with it as it is and
    leaves those to the codec.  The Python twin of ``_cdefs.read_varint``, with the same
    three outcomes."""
    length = 0
    shift = 0
    i = pos + 1
    while True:
        if i >= n:
            return None
        byte = data[i]
        i += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return i - pos, length
        shift += 7
        if shift == 28:
            return False


def read_header(data: Buffer, pos: int, n: int, version: int) -> tuple[int, int] | None:
    """Parse the fixed header at ``pos`` of ``data[:n]``: (body start, packet end), or
    None when more bytes are needed.  Raises as soon as the bytes present are wrong."""
    b0 = data[pos]
    if _BAD_FIRST[version][b0]:
        raise first_byte_error(b0, version, pos)  # type: ignore[misc]
    header = frame_header(data, pos, n)
    if header is None:
        return None
    if header is False:  # a fifth byte is coming (MQTT 5.0 §1.5.5)
        raise remaining_length_error(pos + 1, 5, version, PACKET_NAMES[b0 >> 4])
    size, length = header
    body = pos + size
    # A last byte of 0 after continuation bytes adds nothing: not the shortest form.
    if size > 2 and data[body - 1] == 0:
        raise remaining_length_error(pos + 1, size - 1, version, PACKET_NAMES[b0 >> 4])
    return body, body + length


def incomplete(data: Buffer, n: int, version: int) -> IncompletePacket:
    """The error for ``decode()`` given the ``n`` bytes of ``data``, fewer than the packet
    needs (or raises the error of a bad fixed header among them)."""
    if n == 0:
        return IncompletePacket("packet", "no bytes", offset=0)
    name = PACKET_NAMES[data[0] >> 4]
    header = read_header(data, 0, n, version)
    if header is None:
        return IncompletePacket(name, "incomplete fixed header", offset=n)
    return IncompletePacket(
        name, f"incomplete packet: {header[1]} bytes needed, {n} given", offset=n
    )


def frame(b0: int, body: bytes | bytearray, name: str) -> bytes:
    """A packet: the fixed header (first byte ``b0``, the Remaining Length of ``body``,
    checked against the protocol's maximum) and ``body``, as bytes (one copy of the body).
    The encoders of both implementations write fixed headers in Python with it."""
    n = len(body)
    check_remaining_length(name, n)
    return bytes((b0,)) + encode_varint(n) + body
