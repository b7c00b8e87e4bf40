"""Where MQTT packets start, read from fixed headers without the codec: whether bytes can
start a packet, whether a stream starts with a CONNECT (and at which level), and the first
packet boundary of a window of a stream whose start the capture does not hold.

:mod:`.mqtt_streams` asks :func:`looks_like_connect` whether a connection on no MQTT port
is MQTT; :mod:`.direction` frames and resynchronises with the rest.  The Remaining Length
is read by _codec.framing.frame_header, the codec's lenient reader, and the first byte by
:func:`plausible_first_byte`'s rules, which let through what the codec then reports as one
bad packet.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .._codec.framing import frame_header
from .._errors import MQTTWireError

__all__ = ["connect_level", "first_boundary", "looks_like_connect", "plausible_first_byte"]


def plausible_first_byte(b0: int, version: int) -> bool:
    """Whether ``b0`` can start a packet at ``version``: a defined type and the flags the
    specification fixes for it (MQTT 3.1.1 §2.2.2, MQTT 5.0 §2.1.3)."""
    ptype = b0 >> 4
    flags = b0 & 0x0F
    if ptype == 0 or (ptype == 15 and version != 5):
        return False
    if ptype == 3:
        return flags & 0x06 != 0x06  # QoS 3 is malformed [MQTT-3.3.1-4]
    if ptype in (6, 8, 10):  # PUBREL, SUBSCRIBE, UNSUBSCRIBE: flags 0010
        return flags == 2
    return flags == 0


def looks_like_connect(data: Any) -> bool | None:
    """Whether ``data`` starts like a CONNECT: first byte 0x10, a Remaining Length, and
    the protocol name "MQTT" (levels 4, 5) or "MQIsdp" (level 3) with a level byte that
    goes with it.  None when ``data`` is too short to tell."""
    if not data:
        return None
    if data[0] != 0x10:
        return False
    header = frame_header(data, 0, len(data))
    if header is None:
        return None
    if header is False:
        return False
    pos = header[0]
    expected = (b"\x00\x04MQTT", b"\x00\x06MQIsdp")
    have = bytes(data[pos : pos + 9])
    for name, levels in zip(expected, ((4, 5), (3,))):
        size = len(name)
        if have[:size] == name[: len(have)]:
            if len(have) <= size:
                return None
            return have[size] in levels
    return False

def connect_level(head: bytes) -> int | None:
    """The protocol level byte of the CONNECT that ``head`` begins with, if it is one this
    codec knows (3, 4 or 5) and ``head`` holds it; else None."""
    if looks_like_connect(head):
        header = frame_header(head, 0, len(head))
        if header:
            pos = header[0]
            level = head[pos + 6] if head[pos + 2 : pos + 6] == b"MQTT" else head[pos + 8]
            return level
    return None


def _chain(buf: bytes, start: int, level: int, codec: ModuleType,
           limit: int) -> tuple[int, int, int] | None:
    """Frame ``buf`` from ``start`` to its end at ``level``: (packets that decode, packets
    that do not, PUBLISH packets among the first), or None when the framing breaks (an
    invalid or oversized Remaining Length) or the first packet does not decode.  A last
    packet cut by the end of ``buf`` is not counted."""
    n = len(buf)
    pos = start
    good = bad = publishes = 0
    while pos < n:
        header = frame_header(buf, pos, n)
        if header is None:
            break  # cut by the end of the window
        if header is False:
            return None
        size = header[0] + header[1]
        if size > limit:
            return None
        if pos + size > n:
            break
        b0 = buf[pos]
        ok = plausible_first_byte(b0, level)
        if ok:
            try:
                codec.decode_from(buf, pos, version=level)
            except MQTTWireError:
                ok = False
        if ok:
            good += 1
            publishes += b0 >> 4 == 3
        elif not good:
            return None
        else:
            bad += 1
        pos += size
    return good, bad, publishes


def first_boundary(buf: bytes, level: int, codec: ModuleType,
                   limit: int) -> tuple[int, int, int] | None:
    """Where the first packet starts in ``buf``, a window of a stream whose start is
    unknown, at ``level``: the first offset from which packets frame consistently to the
    end of ``buf``, with at least one packet and at most one bad packet in five.  Returns
    (offset, bad packets, PUBLISH packets), or None if no offset qualifies."""
    for start in range(len(buf)):
        if not plausible_first_byte(buf[start], level):
            continue
        found = _chain(buf, start, level, codec, limit)
        if found is not None and found[0] and found[1] * 4 <= found[0]:
            return start, found[1], found[2]
    return None
