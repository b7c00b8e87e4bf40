"""Read the frames of one byte range of a capture file: groundwork for splitting one big
pcap or pcapng file across several tasks.

:func:`plan_ranges` cuts ``[0, size)`` into ranges; :func:`read_range` reads the frames
whose record (pcap) or block (pcapng) *begins* in one range; :func:`check_chain` says
whether the ranges' results, taken together, are certainly the frames that
:func:`~mqttwire.capture.pcap.iter_frames` reads from the whole file.

How a range finds its first record
----------------------------------

Neither format has a delimiter, so a range that starts in the middle of the file has to
guess where a record or block begins ("resynchronise"):

- range 0, and any range that starts inside the file's head (the pcap file header, or the
  pcapng Section Header Block and the blocks that follow it up to the first packet
  block), knows its boundaries for certain: every task reads the head from offset 0;
- any other range scans forward from its start for the first offset where a record
  header (draft-ietf-opsawg-pcap, "Packet Record") or a block (draft-ietf-opsawg-pcapng,
  "General Block Structure") is plausible, and the records or blocks chained after it by
  their lengths are plausible too, for :data:`CHAIN` of them or to exactly the end of the
  file (the rules are in :class:`_PcapScan` and :class:`_PcapngScan`).  It is the idea of
  the splittable pcap readers for Hadoop (RAPCAP, forks of hadoop-pcap); being a guess, it
  can be fooled, for instance by a frame that carries a pcap file in its payload.

From the boundary it found (``sync``), a range follows the chain with the very parser
that :func:`~mqttwire.capture.pcap.iter_frames` uses, up to the first record or block
that begins at or after its end (``next``).

Why a wrong guess cannot go unnoticed
-------------------------------------

1. Range 0's chain starts at a certain boundary (offset 24 for pcap, 0 for pcapng), and a
   chain followed from a correct boundary is the file's chain: it visits exactly the
   records :func:`iter_frames` visits.  So range 0's frames and its ``next`` are correct.
2. If range *k*'s ``next`` is correct and range *k+1*'s ``sync`` equals it, range *k+1*
   started on the file's chain, so its frames and its ``next`` are correct too.  When
   the previous ``next`` lies beyond range *k+1* altogether (one frame longer than a
   range), no record begins in range *k+1*, and its ``sync`` must be None.
3. By induction, if every range passes that comparison and the last ``next`` is the
   file size, every range read the file's own chain: each frame comes exactly once, in
   file order, with the fields :func:`iter_frames` gives it (``number`` counted within
   the range: add the counts of the ranges before).

For pcapng, step 2 also needs the reader's state (byte order, interfaces) at ``sync`` to
be the file's there.  Every range starts with the head's; it stays right unless a Section
Header Block or Interface Description Block lies on the chain between the head and
``sync``.  Such a block begins in an earlier range, which, having read it on the chain,
reports it (``late_head_block``), so the check fails: except when that range is the last,
as nothing is read after it.

:func:`check_chain` makes these comparisons.  When it fails, or when a range raised
:class:`~mqttwire.capture.pcap.CaptureFormatError` (a wrong guess can run into garbage,
and a range cannot tell that from a corrupt file), the caller must read the whole file in
one pass instead; that pass then reports the real error, if there is one.  A wrong guess
never yields a silently wrong record; at worst it costs the fallback.

What falls back
---------------

Besides a fooled scan, files the rules do not expect: pcap records longer than the file's
SnapLen, times more than :data:`TS_BACK` before the first record or the previous one,
more than :data:`TS_FORWARD` after the previous one or :data:`TS_SPAN` after the first; a
pcapng Section Header Block or Interface Description Block after the first packet block
(files with interfaces added on the way, or concatenated files) unless it is in the last
range; a truncated or corrupt file, wherever the damage.
"""

from __future__ import annotations

import io
import re
import struct
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import BinaryIO, Final, cast

from .pcap import (
    _BYTE_ORDER_MAGIC,
    _EPB,
    _IDB,
    _OPB,
    _SHB,
    _SPB,
    MAX_FRAME,
    CaptureFormatError,
    Frame,
    _detect,
    _Interface,
    _iter_pcap,
    _pcap_header,
    _Pcapng,
    _Source,
)

__all__ = [
    "CHAIN",
    "TS_BACK",
    "TS_FORWARD",
    "TS_SPAN",
    "RangeRead",
    "chain_problem",
    "check_chain",
    "plan_ranges",
    "read_range",
]

CHAIN: Final = 8
"""How many records or blocks, from a candidate boundary on, must be plausible (unless the
chain reaches exactly the end of the file first) for a range to start there."""

TS_BACK: Final = 3600 * 1_000_000_000
"""How far (ns) a pcap record's time may go back from the previous one's in a chain (or,
for the chain's first, from the file's first record's)."""

TS_FORWARD: Final = 86400 * 1_000_000_000
"""How far (ns) a pcap record's time may jump forward from the previous one's."""

TS_SPAN: Final = 366 * 86400 * 1_000_000_000
"""How far (ns) after the file's first record a pcap record's time may be."""

# The block types a pcapng resync accepts (draft-ietf-opsawg-pcapng, "Block Type Codes"):
# SHB, IDB, obsolete Packet Block, Simple Packet Block, Name Resolution Block, Interface
# Statistics Block, Enhanced Packet Block, systemd Journal Export Block, Decryption
# Secrets Block, and the two Custom Blocks (copiable / not copiable).
_KNOWN_BLOCKS: Final = frozenset({_SHB, _IDB, _OPB, _SPB, 4, 5, _EPB, 9, 0x0A, 0x0BAD,
                                  0x40000BAD})
_PCAP_HEAD: Final = 24  # the pcap file header (draft-ietf-opsawg-pcap, "File Header")
_SCAN_PIECE: Final = 1 << 16  # how much of the file a scan looks at in one go
_TAIL: Final = 1 << 14  # the largest read past a range's end (see _At)


def plan_ranges(size: int, split_size: int) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` that cover ``[0, size)``, in order, each
    ``split_size`` bytes long except the last (one range when ``size <= split_size``,
    and ``[(0, 0)]`` for an empty file, so that reading it reports what is wrong).

    Raises:
        ValueError: ``size`` is negative or ``split_size`` is not positive (or either is
            not an int).
    """
    for label, value in (("size", size), ("split_size", split_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{label} must be an int, not {type(value).__name__}")
    if size < 0:
        raise ValueError(f"size must be >= 0, not {size}")
    if split_size < 1:
        raise ValueError(f"split_size must be >= 1, not {split_size}")
    if size == 0:
        return [(0, 0)]
    return [(start, min(start + split_size, size)) for start in range(0, size, split_size)]


class _At:
    """A file read from a given offset on, seeking before every read, so that the scan
    and any number of ranges can share one file object.

    pcap.py's :class:`_Source` asks for :data:`~mqttwire.capture.pcap.CHUNK` bytes at a
    time; past ``limit`` (the end of the range) this gives it at most :data:`_TAIL` bytes
    per read (it reads on until it has what it needs), so that a small range does not read
    a megabyte beyond its end to finish its last record."""

    __slots__ = ("f", "limit", "pos")

    def __init__(self, f: BinaryIO, pos: int, limit: int) -> None:
        self.f = f
        self.pos = pos
        self.limit = limit

    def read(self, n: int) -> bytes:
        self.f.seek(self.pos)
        data = self.f.read(min(n, max(self.limit - self.pos, _TAIL)))
        self.pos += len(data)
        return data


def _source_at(f: BinaryIO, offset: int, limit: int, name: str) -> _Source:
    """A pcap.py reader source whose first byte is the file's byte ``offset``."""
    src = _Source(cast(BinaryIO, _At(f, offset, limit)), name)
    src.base = offset
    return src


class _Pages:
    """Random access to a file through a few cached pages: the scan reads record headers
    here and there (a chain jumps over frames), and needs only a few bytes of each."""

    PAGE: Final = 1 << 16
    KEEP: Final = 32

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f = f
        self.size = size
        self.cache: OrderedDict[int, bytes] = OrderedDict()

    def page(self, index: int) -> bytes:
        page = self.cache.get(index)
        if page is not None:
            self.cache.move_to_end(index)
            return page
        self.f.seek(index * self.PAGE)
        parts = []
        want = self.PAGE
        while want:
            piece = self.f.read(want)
            if not piece:
                break
            parts.append(piece)
            want -= len(piece)
        page = b"".join(parts)
        self.cache[index] = page
        if len(self.cache) > self.KEEP:
            self.cache.popitem(last=False)
        return page

    def get(self, offset: int, n: int) -> bytes:
        """The bytes ``[offset, offset + n)``, fewer where the file ends."""
        n = max(0, min(n, self.size - offset))
        first, last = offset // self.PAGE, (offset + n - 1) // self.PAGE
        skip = offset - first * self.PAGE
        if n == 0:
            return b""
        if first == last:
            return self.page(first)[skip : skip + n]
        return b"".join(self.page(i) for i in range(first, last + 1))[skip : skip + n]


class _PcapScan:
    """The plausibility rules for classic pcap records (draft-ietf-opsawg-pcap, "Packet
    Record": Timestamp (Seconds), Timestamp (Microseconds or nanoseconds), Captured Packet
    Length, Original Packet Length; all u32 in the file header's byte order)."""

    def __init__(self, pages: _Pages, endian: str, nanos: bool, snaplen: int,
                 floor: int | None) -> None:
        self.pages = pages
        self.size = pages.size
        self.unpack_from = struct.Struct(endian + "IIII").unpack_from
        self.scale = 1 if nanos else 1000
        # The fraction of a second is below 10**6 (us) or 10**9 (ns) in a valid record.
        self.frac_limit = 1_000_000_000 if nanos else 1_000_000
        # "Captured Packet Length ... MUST NOT be greater than SnapLen" (File Header); a
        # SnapLen of 0 breaks that rule's premise, so only MAX_FRAME bounds it then.
        self.maxcap = snaplen if 0 < snaplen <= MAX_FRAME else MAX_FRAME
        # The file's first record's time: a record more than TS_BACK older, or TS_SPAN
        # newer, is not plausible.  The first rule turns away runs of zero bytes, which
        # otherwise chain as empty 16-byte records of 1970; the second, for instance, the
        # tail of a TCP header (window 0xffff, checksum, urgent pointer 0) and zero
        # payload bytes, which read big-endian as an empty record of 2106 that ends
        # exactly at the end of the file.
        self.floor = floor

    def record(self, offset: int, ts_frac: int, caplen: int, orig_len: int) -> bool:
        """Whether a record header with these fields is plausible at ``offset``."""
        return (ts_frac < self.frac_limit and caplen <= orig_len and caplen <= self.maxcap
                and offset + 16 + caplen <= self.size)

    def chain(self, offset: int) -> bool:
        """Whether CHAIN records from ``offset`` on (or all of them up to exactly the end
        of the file) are plausible, with their times within reason of each other."""
        previous = self.floor
        for count in range(CHAIN):
            if offset == self.size:
                return count > 0
            head = self.pages.get(offset, 16)
            if len(head) < 16:
                return False
            ts_sec, ts_frac, caplen, orig_len = self.unpack_from(head, 0)
            if not self.record(offset, ts_frac, caplen, orig_len):
                return False
            ts = ts_sec * 1_000_000_000 + ts_frac * self.scale
            if previous is not None:
                if ts < previous - TS_BACK:
                    return False
                if ts > previous + (TS_FORWARD if count else TS_SPAN):
                    return False
            previous = ts
            offset += 16 + caplen
        return True

    def find(self, start: int, stop: int) -> int | None:
        """The first offset in ``[start, stop)`` where a plausible chain begins."""
        unpack_from = self.unpack_from
        record = self.record
        pos = start
        while pos < stop:
            piece = self.pages.get(pos, min(_SCAN_PIECE, stop - pos) + 15)
            count = min(stop - pos, len(piece) - 15)
            if count <= 0:
                return None
            for i in range(count):
                _sec, ts_frac, caplen, orig_len = unpack_from(piece, i)
                if record(pos + i, ts_frac, caplen, orig_len) and self.chain(pos + i):
                    return pos + i
            pos += count
        return None


class _PcapngScan:
    """The plausibility rules for pcapng blocks (draft-ietf-opsawg-pcapng, "General Block
    Structure": Block Type, Block Total Length, body, Block Total Length again)."""

    def __init__(self, pages: _Pages, endian: str, interfaces: int) -> None:
        self.pages = pages
        self.size = pages.size
        self.endian = endian
        self.interfaces = interfaces
        self.head = struct.Struct(endian + "II")
        self.u32 = struct.Struct(endian + "I")
        # A block begins at a multiple of 4 (its total length is one, and the file's
        # first block begins at 0), so only those offsets are looked at: where one of the
        # known block types is written, found by a regular expression in C.
        types = b"|".join(re.escape(struct.pack(endian + "I", t)) for t in sorted(_KNOWN_BLOCKS))
        self.candidates = re.compile(b"(?=" + types + b")")

    def block(self, offset: int, interfaces: int) -> tuple[int, int] | None:
        """The type and total length of a plausible block at ``offset`` (where the
        section has ``interfaces`` interfaces), or None."""
        head = self.pages.get(offset, 28)  # type, length and an EPB's fixed fields
        if len(head) < 12:
            return None
        block_type: int
        total: int
        block_type, total = self.head.unpack_from(head, 0)
        # "Block Total Length ... MUST be a multiple of 4" and counts the 12 bytes of type
        # and both lengths; the trailing copy must match the leading one.
        if (block_type not in _KNOWN_BLOCKS or total < 12 or total & 3 or total > MAX_FRAME
                or offset + total > self.size):
            return None
        (trailer,) = self.u32.unpack(self.pages.get(offset + total - 4, 4))
        if trailer != total:
            return None
        found = block_type, total
        if block_type == _SHB:
            # A new section in the same byte order (another one fails the length check).
            magic = self.u32.unpack_from(head, 8)[0]
            return found if total >= 28 and magic == _BYTE_ORDER_MAGIC else None
        if block_type == _IDB:
            return found if total >= 20 else None
        if block_type == _EPB or block_type == _OPB:
            # Interface id, timestamp, captured length: the id names a known interface and
            # the captured data fits in the block.
            if total < 32:
                return None
            if block_type == _EPB:
                (if_id,) = self.u32.unpack_from(head, 8)
            else:
                (if_id,) = struct.unpack_from(self.endian + "H", head, 8)
            (caplen,) = self.u32.unpack_from(head, 20)
            return found if if_id < interfaces and caplen <= total - 32 else None
        if block_type == _SPB:
            return found if interfaces and total >= 16 else None
        return found

    def chain(self, offset: int) -> bool:
        """Whether CHAIN blocks from ``offset`` on (or all of them up to exactly the end
        of the file) are plausible."""
        interfaces = self.interfaces
        for count in range(CHAIN):
            if offset == self.size:
                return count > 0
            found = self.block(offset, interfaces)
            if found is None:
                return False
            block_type, total = found
            # Interface ids are numbered per section, from the section's IDBs on.
            if block_type == _SHB:
                interfaces = 0
            elif block_type == _IDB:
                interfaces += 1
            offset += total
        return True

    def find(self, start: int, stop: int) -> int | None:
        """The first offset (a multiple of 4) in ``[start, stop)`` where a plausible
        chain begins."""
        pos = (start + 3) & ~3
        while pos < stop:
            piece = self.pages.get(pos, min(_SCAN_PIECE, stop - pos) + 3)
            count = min(stop - pos, len(piece) - 3)
            if count <= 0:
                return None
            for match in self.candidates.finditer(piece, 0, count + 3):
                i = match.start()
                if i >= count:
                    break
                if not i & 3 and self.chain(pos + i):
                    return pos + i
            pos += (count + 3) & ~3
        return None


class RangeRead:
    """The frames of the records (pcap) or blocks (pcapng) that begin in one byte range
    ``[start, end)`` of a capture, made by :func:`read_range`.

    Iterate over it once to get the frames (:class:`~mqttwire.capture.pcap.Frame`, with
    ``number`` counted from 1 within the range: add the frames of the earlier ranges for
    the file's numbering); ``next`` is known once the iteration has ended.

    Attributes:
        capture: the file's name.
        format: ``"pcap"`` or ``"pcapng"``.
        start, end: the range.
        size: the file's size in bytes.
        first: the offset of the file's first record or block (24 for pcap, 0 for
            pcapng): where the chain of range 0 begins, for certain.
        sync: the offset of the first record or block of the range (found by a scan when
            the range starts after the file's head), or None when none begins in it.
        next: after the iteration, the offset of the first record or block of the chain
            that begins at or after ``end``, or the file size at the end of the file; None
            before, or when ``sync`` is None.
        count: how many frames have been yielded.
        late_head_block: pcapng only: the offset of the first Section Header Block or
            Interface Description Block met after the head, or None.
    """

    capture: str
    format: str
    start: int
    end: int
    size: int
    first: int
    sync: int | None
    next: int | None
    count: int
    late_head_block: int | None

    def __init__(self, f: BinaryIO, start: int, end: int, name: str | None = None) -> None:
        for label, value in (("start", start), ("end", end)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{label} must be an int, not {type(value).__name__}")
        if not 0 <= start <= end:
            raise ValueError(f"range [{start}, {end}) is not a range of the file")
        self.capture = name or str(getattr(f, "name", "<stream>"))
        self.start, self.end = start, end
        self.next = None
        self.count = 0
        self.late_head_block = None
        self._f = f
        self._used = False
        f.seek(0, io.SEEK_END)
        self.size = size = f.tell()
        src = _source_at(f, 0, 0, self.capture)
        self.format, self._endian, self._nanos = _detect(src)
        # Boundaries known for certain from reading the head; the chain goes on from
        # ``_head_end`` (pcap: the first record; pcapng: the first packet block).
        self._known: list[int] = []
        self._interfaces: list[_Interface] = []
        self._state: dict[str, object] = {}
        scan: _PcapScan | _PcapngScan | None
        if self.format == "pcap":
            scan = self._open_pcap(src)
        else:
            scan = self._open_pcapng(src)
        if scan is None:  # the range starts inside the head: its boundaries are known
            bounds = self._known + ([self._head_end] if self._head_end < size else [])
            self.sync = next((b for b in bounds if start <= b < min(end, size)), None)
            return
        # A range after the head: resynchronise.  A record or block beginning before
        # ``start`` is at most ``longest`` bytes long, so the file's next boundary is
        # before ``start + longest``: finding none there (in a file that goes on) means
        # the file is corrupt or not as the rules expect.
        stop = min(end, size, start + self._longest)
        self.sync = scan.find(start, stop)
        if self.sync is None and start + self._longest <= min(end, size):
            raise CaptureFormatError(
                self.capture, start,
                f"no {self.format} record boundary found in the {self._longest} bytes "
                "from this offset")

    def _open_pcap(self, src: _Source) -> _PcapScan | None:
        """Read the file header; the scan for this range's first record, if it needs one."""
        self.first = self._head_end = _PCAP_HEAD
        _pcap_header(src, self._endian)  # checks that the 24 bytes are there
        self._header = bytes(src.buf[:_PCAP_HEAD])
        # File Header: magic, major, minor, reserved1, reserved2, SnapLen, LinkType.
        (snaplen,) = struct.unpack_from(self._endian + "16xI", self._header, 0)
        if self.start <= self._head_end:
            return None
        floor = None
        if src.fill(_PCAP_HEAD + 16):
            ts_sec, ts_frac = struct.unpack_from(self._endian + "II", src.buf, _PCAP_HEAD)
            floor = ts_sec * 1_000_000_000 + ts_frac * (1 if self._nanos else 1000)
        self._longest = 16 + min(snaplen, MAX_FRAME) if snaplen else 16 + MAX_FRAME
        return _PcapScan(_Pages(self._f, self.size), self._endian, self._nanos, snaplen, floor)

    def _open_pcapng(self, src: _Source) -> _PcapngScan | None:
        """Read the head; the scan for this range's first block, if it needs one."""
        # The head: the Section Header Block at 0 and every block up to the first packet
        # block (normally the Interface Description Blocks), read as iter_frames reads
        # them; the reader then holds the byte order and the interfaces.
        self.first = 0
        reader = _Pcapng(src)
        packet_blocks = (_EPB, _SPB, _OPB)
        while True:
            offset = src.base + src.pos
            # Look at the block type first, so that a large first packet block is left
            # to the range it begins in.  (An SHB's type reads the same in either order.)
            if offset and src.fill(4):
                (block_type,) = struct.unpack_from(reader.endian + "I", src.buf, src.pos)
                if block_type in packet_blocks:
                    self._head_end = offset
                    break
            if reader.block() is False:
                self._head_end = offset  # the file size: no packet block at all
                break
            self._known.append(offset)
        self._endian = reader.endian
        self._interfaces = list(reader.interfaces)
        # The reader's whole state after the head (byte order, its structs, interfaces,
        # ...), for the reader that reads this range's blocks: all but its file and count.
        self._state = {name: getattr(reader, name) for name in _Pcapng.__slots__
                       if name not in ("src", "index")}
        if self.start <= self._head_end:
            return None
        self._longest = MAX_FRAME  # pcap.py's limit on a block's total length
        return _PcapngScan(_Pages(self._f, self.size), self._endian, len(self._interfaces))

    def __iter__(self) -> Iterator[Frame]:
        if self._used:
            raise RuntimeError("a RangeRead can be iterated only once")
        self._used = True
        if self.sync is None:
            return iter(())
        if self.format == "pcap":
            return self._pcap_frames(self.sync)
        if self.sync < self._head_end and self._head_end >= self.end:
            # The range holds head blocks only: the chain's next boundary is known.
            self.next = next((b for b in self._known if b >= self.end), self._head_end)
            return iter(())
        return self._pcapng_frames(max(self.sync, self._head_end))

    def _pcap_frames(self, sync: int) -> Iterator[Frame]:
        # pcap.py's _iter_pcap reads the file header from its source, then the records
        # after it: give it a source that holds the real 24 header bytes, placed (by
        # ``base``) right before ``sync``, whose next byte read from the file is the one at
        # ``sync``.  The frames and their offsets are then exactly iter_frames' own.
        src = _source_at(self._f, sync, self.end, self.capture)
        src.buf = self._header
        src.view = memoryview(self._header)
        src.base = sync - _PCAP_HEAD
        end = self.end
        for frame in _iter_pcap(src, self._endian, self._nanos):
            self.count += 1
            after = frame.offset + 16 + len(frame.data)  # where the next record begins
            if after >= end or after == self.size:
                self.next = after
                yield frame
                return
            yield frame

    def _pcapng_frames(self, offset: int) -> Iterator[Frame]:
        src = _source_at(self._f, offset, self.end, self.capture)
        reader = _Pcapng(src)
        for name, value in self._state.items():
            setattr(reader, name, value)
        reader.interfaces = list(self._interfaces)  # its own list, to see IDBs added
        block = reader.block
        end = self.end
        while True:
            offset = src.base + src.pos
            if offset >= end:
                self.next = offset
                return
            interfaces = reader.interfaces
            known = len(interfaces)
            item = block()
            if item is False:
                self.next = offset  # a clean end of file: the file size
                return
            if self.late_head_block is None and (
                    reader.interfaces is not interfaces or len(interfaces) != known):
                # An SHB starts a new interface list, an IDB adds to it: later ranges,
                # which know only the head's, would read on wrongly.
                self.late_head_block = offset
            if item is not True:
                self.count += 1
                yield item


def read_range(f: BinaryIO, start: int, end: int, name: str | None = None) -> RangeRead:
    """The frames whose record (pcap) or block (pcapng) begins in ``[start, end)`` of
    the capture in the seekable binary file ``f``, and where the range's chain of records
    began and ended (see :class:`RangeRead` and this module's docstring).

    The file's head (pcap file header; pcapng Section Header Block and the blocks before
    the first packet block) is read from offset 0; ``sync`` is found here (scanning if
    the range starts after the head); the frames are read when the result is iterated.
    ``f`` may be shared: every read seeks first.

    Raises:
        ValueError: ``start``/``end`` are not a range (``0 <= start <= end``).
        CaptureFormatError: the file is not a capture, its head is corrupt, no boundary
            can be found where one must be, or (while iterating) the chain runs into a
            corrupt or truncated record or block; it names the file and the offset.
    """
    return RangeRead(f, start, end, name)


def chain_problem(results: Sequence[RangeRead]) -> str | None:
    """Why the results of reading a file's ranges (in order, each iterated to its end)
    are not certainly the file's frames, or None when they are: the ranges cover the
    file, range 0 starts at the file's first record or block, each range's ``sync`` is
    the previous range's ``next`` (or None when that lies beyond the range), the last
    ``next`` is the file size, and no pcapng range but the last met an SHB or IDB after
    the head."""
    if not results:
        return "no ranges"
    size = results[0].size
    expected = results[0].first  # where the chain of records begins, for certain
    position = 0
    for index, result in enumerate(results):
        where = f"range {index} [{result.start}, {result.end})"
        if result.size != size or result.format != results[0].format:
            return f"{where} was read from another file"
        if result.start != position or result.end < result.start:
            return f"{where} does not follow the previous range (which ends at {position})"
        position = result.end
        if result.late_head_block is not None and index < len(results) - 1:
            # The later ranges read with the head's interfaces and byte order, which may
            # no longer be the file's there (in the last range, it was read on the chain).
            return (f"{where} met a section header or interface description block at "
                    f"{result.late_head_block}, after the file's head")
        if expected < result.end:
            if result.sync != expected:
                return f"{where} started at {result.sync}, not at the record at {expected}"
            if result.next is None:
                return f"{where} was not read to its end"
            if result.next < result.end or result.next > size:
                return f"{where} ended at {result.next}, outside [{result.end}, {size}]"
            expected = result.next
        elif result.sync is not None:
            return f"{where} started at {result.sync}, but no record begins in it"
    if position != size:
        return f"the ranges end at {position}, not at the file size {size}"
    # The chain ends at the file size: the last range's next is between its end (the file
    # size) and the file size, or lies beyond the last range, at most at the file size.
    return None


def check_chain(results: Sequence[RangeRead]) -> bool:
    """Whether the ranges' frames, in order, are certainly the file's frames (see
    :func:`chain_problem`, which says why not)."""
    return chain_problem(results) is None
