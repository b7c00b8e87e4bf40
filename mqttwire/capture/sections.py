"""A byte range of a capture file as one pcapng section per TCP connection: what a task
that reads one range of a split capture hands on (:mod:`mqttwire.spark.split`).

:func:`range_sections` reads the frames of ``[start, end)`` (:func:`~.ranges.read_range`)
and gathers those that hold a TCP segment or an IP fragment by connection
(:func:`flow_key`: the 4-tuple, the same both ways; every IP fragment has the empty
key).  Each connection's frames become a pcapng section (a Section Header Block, an
Interface Description Block per link type, then an Enhanced Packet Block per frame,
nanosecond times, :class:`Piece`), cut every ``piece_bytes``, with the frames' numbers
within the range.

Two loops do it with identical results (tests/capture/test_capture_sections.py): the
pure one (:func:`sections_pure`, over read_range's frames) and the compiled
one (``SectionPacker`` in :mod:`.sections_c`, over the file's bytes, with the parser of the
compiled capture loop).  The compiled loop takes classic pcap records and plain
Enhanced Packet Blocks; at anything else (another block, a record it cannot place, a
time before 1970, a truncated file) the range is read again by the pure loop, which
gives the result or the error.  The compiled loop hands the sections over once the
range is read, so a task holds its range's TCP frames in memory (about the split size:
128 MiB at the cluster default), where the pure loop hands each piece over as it fills.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

from .link import IPFragment, TcpSegment, parse_frame
from .pcap import MAX_FRAME
from .ranges import _TAIL, RangeRead, read_range
from .writers import pcapng_block

__all__ = ["Piece", "RangeSections", "flow_key", "range_sections", "section", "sections_pure"]

#: Bytes read from the file at a time by the compiled loop.
CHUNK = 8 << 20


def flow_key(seg: TcpSegment | IPFragment) -> bytes:
    """The key that brings a TCP connection's segments together: its two ends (address
    and port) in a fixed order, so that both directions have the same key.  Every IP
    fragment has the empty key (each is a record of its own)."""
    if not isinstance(seg, TcpSegment):
        return b""
    a = seg.src + seg.sport.to_bytes(2, "big")
    b = seg.dst + seg.dport.to_bytes(2, "big")
    return a + b if a <= b else b + a


def frame_key(linktype: int, data: Any) -> bytes | None:
    """The key of a frame's segment or fragment by link.py, or None when it holds
    neither."""
    seg = parse_frame(linktype, data)
    return None if seg is None else flow_key(seg)


#: The Section Header Block that starts every section (pcapng, little-endian: byte-order
#: magic, version 1.0, section length unknown).
SHB = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
#: An Enhanced Packet Block's head: type 6, total length, interface, time (high, low),
#: captured and original length.
_EPB_HEAD = struct.Struct("<IIIIIII")
_TRAILERS = [struct.Struct(f"<{pad}xI") for pad in range(4)]


def _idb(linktype: int) -> bytes:
    """An Interface Description Block with nanosecond times (option if_tsresol 9)."""
    return pcapng_block(1, struct.pack("<HHI", linktype, 0, 0)
                        + struct.pack("<HHB3xHH", 9, 1, 9, 0, 0))


def section(linktypes: list[int] | Any, body: bytes | bytearray) -> bytes:
    """A pcapng section: the SHB, an IDB per link type (interface ids in this order),
    then ``body`` (its Enhanced Packet Blocks)."""
    return SHB + b"".join(_idb(linktype) for linktype in linktypes) + body


class Piece:
    """One connection's frames of a range, as a pcapng section being written."""

    __slots__ = ("body", "interfaces", "numbers", "piece")

    def __init__(self, piece: int = 0) -> None:
        self.piece = piece
        self.numbers = array("q")
        self.body = bytearray()
        self.interfaces: dict[int, int] = {}  # link type -> interface id

    def __repr__(self) -> str:
        return (f"Piece(piece={self.piece}, frames={len(self.numbers)}, "
                f"bytes={len(self.body)})")

    def add(self, number: int, ts: int, linktype: int, data: Any) -> None:
        interface = self.interfaces.get(linktype)
        if interface is None:
            interface = self.interfaces[linktype] = len(self.interfaces)
        n = len(data)
        pad = -n & 3
        total = 32 + n + pad
        body = self.body
        body += _EPB_HEAD.pack(6, total, interface, ts >> 32, ts & 0xFFFFFFFF, n, n)
        body += data
        body += _TRAILERS[pad].pack(total)
        self.numbers.append(number)

    def value(self) -> tuple[bytes, bytes]:
        """The frames' numbers (int64, native order) and the section."""
        return self.numbers.tobytes(), section(self.interfaces, self.body)


#: One connection's piece of a range: key, piece number (from 0), the frames' numbers
#: within the range (int64, native order), the pcapng section.
Section = tuple[bytes, int, bytes, bytes]


def sections_pure(read: RangeRead, out: RangeSections, piece_bytes: int
                   ) -> Iterator[tuple[bytes, int, bytes, bytes]]:
    """The reference loop of :func:`range_sections` (the compiled one: ``SectionPacker``
    in :mod:`.sections_c`): the frames
    of ``read`` gathered by connection, a section per connection and ``piece_bytes``
    (``out`` gets the range's last time, last parsed frame and problem)."""
    pieces: dict[bytes, Piece] = {}
    for number, _offset, ts, linktype, data, _orig_len, _iface in read:
        out.last_ts = ts
        seg = parse_frame(linktype, data)
        if seg is None:
            continue
        key = flow_key(seg)
        out.last_parsed = number
        if not 0 <= ts < 1 << 63 or len(data) > MAX_FRAME - 64:
            out.problem = (f"frame {number} of the range does not fit a pcapng block (a "
                           "time before 1970, or too long)")
            break
        piece = pieces.get(key)
        if piece is None:
            piece = pieces[key] = Piece()
        piece.add(number, ts, linktype, data)
        if len(piece.body) >= piece_bytes:
            yield (key, piece.piece, *piece.value())
            pieces[key] = Piece(piece.piece + 1)
    for key, piece in pieces.items():
        if piece.numbers:
            yield (key, piece.piece, *piece.value())


class RangeSections:
    """Iterate once over the sections of one range (:func:`range_sections`); then
    ``read`` is the :class:`~.ranges.RangeRead` (``count``, ``next``, ... for
    :func:`~.ranges.chain_problem`), ``last_ts`` the time of the range's last frame (None
    without frames), ``last_parsed`` the number of its last frame that holds a segment
    or fragment (0 without), and ``problem`` says why the range cannot be used (a frame
    that does not fit a pcapng block), else None.  ``compiled`` tells which loop read
    it (True when the compiled loop did, all of it)."""

    def __init__(self, f: BinaryIO, start: int, end: int, name: str | None,
                 piece_bytes: int, compiled: bool) -> None:
        self.f, self.start, self.end, self.name = f, start, end, name
        self.piece_bytes = piece_bytes
        self.want_compiled = compiled
        self.read: RangeRead | None = None
        self.last_ts: int | None = None
        self.last_parsed = 0
        self.problem: str | None = None
        self.compiled = False

    def __repr__(self) -> str:
        return (f"RangeSections({self.name!r}, [{self.start}, {self.end}), "
                f"compiled={self.compiled}, problem={self.problem!r})")

    def __iter__(self) -> Iterator[Section]:
        if self.want_compiled and SectionPacker is not None:
            done = self._compiled()
            if done is not None:
                self.compiled = True
                return iter(done)
        self.read = read_range(self.f, self.start, self.end, self.name)
        return sections_pure(self.read, self, self.piece_bytes)

    def _compiled(self) -> list[Section] | None:
        """The sections by the compiled loop, or None where it gives up (the pure loop
        then reads the range from its start)."""
        read = read_range(self.f, self.start, self.end, self.name)
        found = _packer(read, self.piece_bytes)
        if found is None:
            return None
        packer, base = found  # base: the file offset of buf[0]
        f = self.f
        buf = b""
        while True:
            # To the range's end, then a little at a time (its last record's rest).
            have = base + len(buf)
            f.seek(have)
            more = f.read(min(CHUNK, max(self.end - have, _TAIL)))
            if not more:
                return None  # the file ends inside a record: the pure loop says how
            buf = buf + more if buf else more
            used = packer.feed(buf, base)
            if used < 0:
                return None
            if packer.done:
                break
            buf = buf[used:]
            base += used
        read.count, read.next = packer.count, packer.next
        read._used = True
        self.read = read
        self.last_ts = packer.last_ts
        self.last_parsed = packer.last_parsed
        return cast("list[Section]", packer.sections(section))


def _packer(read: RangeRead, piece_bytes: int) -> tuple[Any, int] | None:
    """A compiled packer for the frames of ``read`` and the offset it starts at (as
    read_range's iteration starts), or None where the range has no frames to read (the
    pure loop knows what to say)."""
    if read.sync is None:
        return None
    if read.format == "pcap":
        # File Header: LinkType in the low 16 bits of the last u32 (as pcap.py reads it).
        linktype = struct.unpack_from(read._endian + "20xI", read._header, 0)[0] & 0xFFFF
        return SectionPacker(False, read._endian == ">", read._nanos, linktype, [],
                             read.end, read.size, piece_bytes, frame_key), read.sync
    if read.sync < read._head_end and read._head_end >= read.end:
        return None  # head blocks only
    return SectionPacker(True, read._endian == ">", False, 0, read._interfaces, read.end,
                         read.size, piece_bytes, frame_key), max(read.sync, read._head_end)


def range_sections(f: BinaryIO, start: int, end: int, name: str | None = None,
                   piece_bytes: int = 32 << 20, compiled: bool = True) -> RangeSections:
    """The sections of the frames of ``[start, end)`` of the capture in ``f`` (see
    :class:`RangeSections`), by the compiled loop where it is built and ``compiled``.

    Raises (while iterating):
        CaptureFormatError: as :func:`~.ranges.read_range`.
    """
    return RangeSections(f, start, end, name, piece_bytes, compiled)


SectionPacker: Any
try:
    from .sections_c import SectionPacker
except ImportError:  # not built: the pure loop
    SectionPacker = None

