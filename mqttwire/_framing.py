"""The fixed header (MQTT 5.0 §2.1) read in Python, and the error for input that ends
before its packet does: shared by both implementations.

``_pure`` reads every fixed header whose Remaining Length takes more than two bytes with
:func:`read_header` (shorter ones inline).  ``_speedups`` reads fixed headers in C and asks
:func:`incomplete` for the error when ``decode()`` is given too few bytes, so the two word
it the same way.
"""

from __future__ import annotations

from ._constants import PACKET_NAMES
from ._errors import IncompletePacket
from ._wire import Buffer, first_byte_error, remaining_length_error

__all__ = ["incomplete", "read_header"]

# _BAD_FIRST[v][b]: no packet may start with byte b at level v (first_byte_error words why).
_BAD_FIRST = {
    v: tuple(first_byte_error(b, v, 0) is not None for b in range(256)) for v in (3, 4, 5)
}


def read_header(data: Buffer, pos: int, n: int, version: int) -> tuple[int, int] | None:
    """Parse the fixed header at ``pos`` of ``data[:n]``: (body start, packet end), or
    None when more bytes are needed.  Raises as soon as the bytes present are wrong."""
    b0 = data[pos]
    if _BAD_FIRST[version][b0]:
        raise first_byte_error(b0, version, pos)  # type: ignore[misc]
    i = pos + 1
    length = 0
    shift = 0
    while True:
        if i >= n:
            return None
        byte = data[i]
        i += 1
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift == 28:  # a fifth byte is coming (MQTT 5.0 §1.5.5)
            raise remaining_length_error(pos + 1, 5, version, PACKET_NAMES[b0 >> 4])
    # A last byte of 0 after continuation bytes adds nothing: not the shortest form.
    if byte == 0 and i - pos > 2:
        raise remaining_length_error(pos + 1, i - pos - 1, version, PACKET_NAMES[b0 >> 4])
    return i, i + length


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
