"""Capture file readers: classic pcap and pcapng, one frame at a time.

Both formats are read in chunks from any binary file object, so a capture of any size
streams through bounded memory.  Every length a file claims is checked against the bytes
that are really there before it is used: a frame is sliced out of data already read, and
reading more happens in chunks of at most :data:`CHUNK` bytes, so a lying length field costs
at most the size of the file, never what the field claims.

A file that cannot be read on raises :class:`CaptureFormatError`, which names the file and
the byte offset of the bad record or block; the frames before it have been yielded.

A gzip-compressed capture (``.pcap.gz``, ``.pcapng.gz``) is recognised by its content, as
the formats are (:func:`sniff`), and decompressed as it is read: the offsets in its errors
are then offsets in the decompressed data.  A gzip stream is read from its start to its
end only (it cannot seek), so a byte range of one cannot be read alone (see
mqttwire/spark/split.py, which reads such a file whole).

References: the pcap format (draft-ietf-opsawg-pcap, "PCAP Capture File Format") and the
pcapng format (draft-ietf-opsawg-pcapng, "PCAP Now Generic").
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

__all__ = ["CHUNK", "MAX_FRAME", "SNIFF_BYTES", "CaptureFormatError", "Frame", "Sniffed",
           "iter_frames", "sniff"]

CHUNK = 1 << 20
"""How much is read from the file at a time."""

MAX_FRAME = 1 << 28
"""The largest captured frame accepted (256 MiB); a longer length is corrupt."""


class CaptureFormatError(ValueError):
    """The capture file is not a pcap/pcapng file, or is corrupt or truncated.

    Attributes:
        capture: the file's name (or ``"<stream>"`` for an unnamed file object).
        offset: the byte offset in the file of the record or block that is wrong.
        what: what is wrong, in words.
    """

    def __init__(self, capture: str, offset: int, what: str) -> None:
        self.capture = capture
        self.offset = offset
        self.what = what
        super().__init__(f"{capture}: {what} at offset {offset}")


class Frame(NamedTuple):
    """One captured link-layer frame.

    Attributes:
        number: the frame's number in the file, from 1 (as Wireshark counts).
        offset: byte offset in the file of its record (pcap) or block (pcapng).
        ts: capture time, integer nanoseconds since the Unix epoch.
        linktype: the LINKTYPE_* value of its interface (1 Ethernet, 113 Linux SLL, ...).
        data: the captured bytes (a read-only view of immutable bytes).
        orig_len: the frame's length on the wire (more than ``len(data)`` when the
            capture was cut at the snapshot length).
        interface: the pcapng interface id (0 for classic pcap).
    """

    number: int
    offset: int
    ts: int
    linktype: int
    data: memoryview
    orig_len: int
    interface: int


_new_frame = tuple.__new__  # skips NamedTuple's Python-level __new__ on the hot path


class _Source:
    """A binary file read in chunks: ``buf[pos:]`` holds the bytes not consumed yet, and
    ``base`` is the file offset of ``buf[0]``."""

    __slots__ = ("base", "buf", "eof", "f", "inflated", "name", "pos", "view")

    def __init__(self, f: BinaryIO, name: str) -> None:
        self.f = f
        self.name = name
        self.buf = b""
        self.view = memoryview(self.buf)
        self.pos = 0
        self.base = 0
        self.eof = False
        self.inflated = False  # a gzip file: offsets are in the decompressed data

    def fill(self, n: int) -> bool:
        """Make at least ``n`` unconsumed bytes available; False if the file ends first.

        Reads in pieces of CHUNK bytes, so the memory used is bounded by what the file
        really holds, whatever ``n`` is.
        """
        parts = [self.buf[self.pos :]]
        have = len(parts[0])
        while have < n and not self.eof:
            piece = self.f.read(CHUNK)
            if not piece:
                self.eof = True
                break
            parts.append(piece)
            have += len(piece)
        self.base += self.pos
        self.buf = b"".join(parts) if len(parts) > 1 else parts[0]
        self.view = memoryview(self.buf)
        self.pos = 0
        return have >= n

    def error(self, offset: int, what: str) -> CaptureFormatError:
        if self.inflated:
            what = f"{what} (gzip file: offsets in the decompressed data)"
        return CaptureFormatError(self.name, offset, what)

    def inflate(self) -> None:
        """Read the rest of the file (from its first unconsumed byte) decompressed."""
        # Only read(n) is asked of ``f``: a _Gunzip stands in for the file.
        gunzip = _Gunzip(_Prefixed(self.buf[self.pos :], self.f), self.name)
        self.f = gunzip  # type: ignore[assignment]
        self.buf = b""
        self.view = memoryview(self.buf)
        self.pos = self.base = 0
        self.eof = False
        self.inflated = True


class _Prefixed:
    """``head`` (bytes already read from ``f``), then the rest of ``f``: for a reader that
    only calls read(n), as gzip's does in read mode (it never seeks back there, so a
    non-seekable stream works).  Counts the bytes it hands out."""

    __slots__ = ("f", "head", "read_bytes")

    def __init__(self, head: bytes, f: BinaryIO) -> None:
        self.head = head
        self.f = f
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        if self.head:
            data = self.head if n < 0 or n >= len(self.head) else self.head[:n]
            self.head = self.head[len(data) :]
        else:
            data = self.f.read(n)
        self.read_bytes += len(data)
        return data


class _Gunzip:
    """A gzip stream's decompressed bytes, read(n) only.  gzip's own errors (the data
    ends early, is corrupt, or fails its CRC) become :class:`CaptureFormatError`, so
    that both capture loops end the capture there as at any other fault; without this a
    truncated .gz would raise EOFError out of the reader."""

    __slots__ = ("inner", "name", "out", "raw")

    def __init__(self, raw: _Prefixed, name: str) -> None:
        self.raw = raw
        self.inner = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[call-overload]
        self.name = name
        self.out = 0  # decompressed bytes handed out

    def read(self, n: int = -1) -> bytes:
        try:
            # read1: what one step decompressed.  read(n) would gather n bytes first and
            # lose them all to the error of a truncated file.
            data: bytes = self.inner.read1(n)
        except EOFError:
            raise CaptureFormatError(
                self.name, self.out, f"gzip data truncated (the file ends after "
                f"{self.raw.read_bytes} compressed bytes; offsets in the decompressed "
                "data)") from None
        except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise CaptureFormatError(
                self.name, self.out, f"gzip data corrupt ({exc}; offsets in the "
                "decompressed data)") from None
        self.out += len(data)
        return data


# ---------------------------------------------------------------------------------------
# Classic pcap

_PCAP_MAGIC_US = 0xA1B2C3D4  # microsecond timestamps
_PCAP_MAGIC_NS = 0xA1B23C4D  # nanosecond timestamps


def _pcap_header(src: _Source, endian: str) -> tuple[int, int]:
    """Read the file header (24 bytes): (LinkType, position of the first record).

    Layout: magic u32, version major u16, minor u16, reserved u32 x2, snaplen u32, then
    LinkType in the low 16 bits of the last u32 (the upper bits hold an FCS length flag
    that does not matter here).
    """
    if not src.fill(24):
        raise src.error(0, "pcap file header truncated (24 bytes needed)")
    (link,) = struct.unpack_from(endian + "20xI", src.buf, 0)
    return link & 0xFFFF, 24


def _pcap_more_header(src: _Source, pos: int) -> bool:
    """Fewer than 16 bytes are left at ``pos``: refill ``src`` from there (its ``buf``
    then starts at the record header); False at a clean end of file."""
    src.pos = pos
    if not src.fill(16):
        if len(src.buf) - src.pos:
            raise src.error(src.base + src.pos, "pcap record header truncated")
        return False
    return True


def _pcap_more_data(src: _Source, pos: int, caplen: int) -> None:
    """The record at ``pos`` ends past the bytes read: refill ``src`` from there (its
    ``buf`` then starts at the record header and holds the whole record)."""
    src.pos = pos
    if not src.fill(16 + caplen):
        raise src.error(
            src.base,
            f"pcap record claims {caplen} bytes but the file ends after {len(src.buf) - 16}",
        )


def _pcap_implausible(src: _Source, offset: int, caplen: int) -> CaptureFormatError:
    return src.error(offset, f"pcap record length {caplen} is implausible (corrupt file)")


def _iter_pcap(src: _Source, endian: str, nanos: bool) -> Iterator[Frame]:
    linktype, pos = _pcap_header(src, endian)
    unpack = struct.Struct(endian + "IIII").unpack_from  # ts_sec, ts_frac, caplen, orig_len
    scale = 1 if nanos else 1000
    limit = MAX_FRAME
    index = 0
    # The hot loop keeps the chunk, its view and the position in locals, and writes the
    # position back to ``src`` only to read more.
    buf, view, base = src.buf, src.view, src.base
    n = len(buf)
    while True:
        if n - pos < 16:
            if not _pcap_more_header(src, pos):
                return
            buf, view, base, pos = src.buf, src.view, src.base, 0
            n = len(buf)
        ts_sec, ts_frac, caplen, orig_len = unpack(buf, pos)
        if caplen > limit:
            raise _pcap_implausible(src, base + pos, caplen)
        end = pos + 16 + caplen
        if end > n:
            _pcap_more_data(src, pos, caplen)
            buf, view, base, pos = src.buf, src.view, src.base, 0
            n = len(buf)
            end = 16 + caplen
        index += 1
        yield _new_frame(
            Frame,
            (index, base + pos, ts_sec * 1_000_000_000 + ts_frac * scale, linktype,
             view[pos + 16 : end], orig_len, 0),
        )
        pos = end


# ---------------------------------------------------------------------------------------
# pcapng

_SHB = 0x0A0D0D0A  # Section Header Block: a palindrome, so readable in either byte order
_BYTE_ORDER_MAGIC = 0x1A2B3C4D
_IDB = 1  # Interface Description Block
_OPB = 2  # (obsolete) Packet Block
_SPB = 3  # Simple Packet Block
_EPB = 6  # Enhanced Packet Block
_OPT_IF_TSRESOL = 9
_OPT_IF_TSOFFSET = 14


class _Interface:
    __slots__ = ("div", "linktype", "mul", "offset_ns", "shift", "snaplen")

    def __init__(self, linktype: int, snaplen: int) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        # Timestamp units to nanoseconds: ts * mul // div, or (ts * 10**9) >> shift for a
        # power-of-two resolution.  The default resolution is microseconds.
        self.mul = 1000
        self.div = 1
        self.shift = 0
        self.offset_ns = 0

    def set_resolution(self, tsresol: int) -> None:
        exponent = tsresol & 0x7F
        if tsresol & 0x80:  # 2**-exponent seconds
            self.mul, self.div, self.shift = 1_000_000_000, 1, exponent
        elif exponent <= 9:  # 10**-exponent seconds
            self.mul, self.div, self.shift = 10 ** (9 - exponent), 1, 0
        else:
            self.mul, self.div, self.shift = 1, 10 ** (exponent - 9), 0

    def ns(self, units: int) -> int:
        if self.shift:
            return ((units * self.mul) >> self.shift) + self.offset_ns
        return units * self.mul // self.div + self.offset_ns


def _parse_idb_options(iface: _Interface, buf: bytes, pos: int, end: int, endian: str) -> None:
    """Read if_tsresol and if_tsoffset from an IDB's options; ignore the others.

    Options are (code u16, length u16, value padded to 4 bytes), ended by opt_endofopt or
    by the end of the block; a malformed option list is ignored from that point on.
    """
    opt = struct.Struct(endian + "HH")
    while end - pos >= 4:
        code, length = opt.unpack_from(buf, pos)
        pos += 4
        if code == 0 or length > end - pos:
            return
        if code == _OPT_IF_TSRESOL and length >= 1:
            iface.set_resolution(buf[pos])
        elif code == _OPT_IF_TSOFFSET and length >= 8:
            (seconds,) = struct.unpack_from(endian + "q", buf, pos)
            iface.offset_ns = seconds * 1_000_000_000
        pos += (length + 3) & ~3


class _Pcapng:
    """A pcapng file being read, one block at a time (:meth:`block`).

    Attributes:
        src: the file.
        endian: the current section's byte order, "<" or ">".
        interfaces: the current section's interfaces, by id.
        index: the number of the last frame read.
    """

    __slots__ = ("endian", "epb", "head", "index", "interfaces", "section_seen", "src")

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.endian = "<"
        self.interfaces: list[_Interface] = []
        self.head = struct.Struct("<II")
        self.epb = struct.Struct("<IIIII")  # interface id, ts high, ts low, caplen, orig_len
        self.index = 0
        self.section_seen = False

    def block(self) -> Frame | bool:
        """Read the block at ``src.pos`` and move past it: its frame, True for a block
        that holds none, or False at the end of the file."""
        src = self.src
        pos = src.pos
        if len(src.buf) - pos < 12:
            if not src.fill(12):
                if len(src.buf) - src.pos:
                    raise src.error(src.base + src.pos, "pcapng block header truncated")
                return False
            pos = 0
        buf = src.buf
        block_type, total = self.head.unpack_from(buf, pos)
        offset = src.base + pos
        if block_type == _SHB:
            # The byte-order magic right after the length tells this section's byte order.
            (magic,) = struct.unpack_from("<I", buf, pos + 8)
            if magic == _BYTE_ORDER_MAGIC:
                self.endian = "<"
            elif magic == 0x4D3C2B1A:
                self.endian = ">"
            else:
                raise src.error(offset, f"pcapng byte-order magic 0x{magic:08x} is wrong")
            self.head = struct.Struct(self.endian + "II")
            self.epb = struct.Struct(self.endian + "IIIII")
            block_type, total = self.head.unpack_from(buf, pos)
            self.interfaces = []  # interface ids are numbered per section
            self.section_seen = True
        elif not self.section_seen:
            raise src.error(offset, "pcapng file does not start with a section header")
        endian = self.endian
        interfaces = self.interfaces
        if total < 12 or total & 3:
            raise src.error(offset, f"pcapng block length {total} is invalid")
        if total > MAX_FRAME:
            raise src.error(offset, f"pcapng block length {total} is implausible")
        if len(buf) - pos < total:
            if not src.fill(total):
                raise src.error(
                    offset,
                    f"pcapng block claims {total} bytes but the file ends after "
                    f"{len(src.buf) - src.pos}",
                )
            pos = 0
            buf = src.buf
        end = pos + total
        (trailer,) = struct.unpack_from(endian + "I", buf, end - 4)
        if trailer != total:
            raise src.error(
                offset, f"pcapng block length {total} does not match its trailer {trailer}"
            )
        body = pos + 8
        frame: Frame | bool = True
        if block_type == _EPB:
            if total < 32:
                raise src.error(offset, "pcapng enhanced packet block too short")
            if_id, ts_hi, ts_lo, caplen, orig_len = self.epb.unpack_from(buf, body)
            if caplen > total - 32:
                raise src.error(
                    offset, f"packet length {caplen} overruns its block of {total} bytes"
                )
            if if_id >= len(interfaces):
                raise src.error(offset, f"packet names undefined interface {if_id}")
            iface = interfaces[if_id]
            self.index += 1
            frame = _new_frame(
                Frame,
                (self.index, offset, iface.ns((ts_hi << 32) | ts_lo), iface.linktype,
                 src.view[body + 20 : body + 20 + caplen], orig_len, if_id),
            )
        elif block_type == _SPB:
            # No timestamp, no interface id (it is interface 0), no captured length: the
            # data is the smaller of the original length and the interface's snaplen.
            if not interfaces:
                raise src.error(offset, "simple packet block before any interface")
            (orig_len,) = struct.unpack_from(endian + "I", buf, body)
            iface = interfaces[0]
            caplen = min(orig_len, total - 16)
            if iface.snaplen:
                caplen = min(caplen, iface.snaplen)
            self.index += 1
            frame = _new_frame(
                Frame,
                (self.index, offset, 0, iface.linktype, src.view[body + 4 : body + 4 + caplen],
                 orig_len, 0),
            )
        elif block_type == _OPB:
            if total < 32:
                raise src.error(offset, "pcapng packet block too short")
            if_id, _drops, ts_hi, ts_lo, caplen, orig_len = struct.unpack_from(
                endian + "HHIIII", buf, body
            )
            if caplen > total - 32 or if_id >= len(interfaces):
                raise src.error(offset, "pcapng packet block is inconsistent")
            iface = interfaces[if_id]
            self.index += 1
            frame = _new_frame(
                Frame,
                (self.index, offset, iface.ns((ts_hi << 32) | ts_lo), iface.linktype,
                 src.view[body + 20 : body + 20 + caplen], orig_len, if_id),
            )
        elif block_type == _IDB:
            if total < 20:
                raise src.error(offset, "pcapng interface description block too short")
            linktype, _reserved, snaplen = struct.unpack_from(endian + "HHI", buf, body)
            iface = _Interface(linktype, snaplen)
            _parse_idb_options(iface, buf, body + 8, end - 4, endian)
            interfaces.append(iface)
        # Every other block type (statistics, name resolution, custom, ...) is skipped:
        # its length has been checked, so skipping it is safe.
        src.pos = end
        return frame


def _iter_pcapng(src: _Source) -> Iterator[Frame]:
    reader = _Pcapng(src)
    block = reader.block
    while True:
        frame = block()
        if frame is False:
            return
        if frame is not True:
            yield frame


# ---------------------------------------------------------------------------------------
# Public API


def iter_frames(f: BinaryIO, name: str | None = None) -> Iterator[Frame]:
    """Yield the frames of a pcap or pcapng capture read from the binary file ``f``.

    The format is recognised by its first four bytes: classic pcap in either byte order
    with microsecond or nanosecond timestamps, or pcapng (every section, in either byte
    order; several interfaces, each with its link type and timestamp resolution).

    Raises:
        CaptureFormatError: the file is not a capture, or is corrupt or truncated; it
            names the file and the offset.  The frames before the problem were yielded.
    """
    src = _Source(f, name or str(getattr(f, "name", "<stream>")))
    fmt, endian, nanos = _detect(src)
    if fmt == "pcapng":
        return _iter_pcapng(src)
    return _iter_pcap(src, endian, nanos)


def _detect(src: _Source) -> tuple[str, str, bool]:
    """The format by the file's first four bytes: ("pcapng", "<", False), or ("pcap",
    its byte order, whether its timestamps are in nanoseconds).  A gzip file is
    decompressed from here on (``src.inflate``) and its content's first bytes decide."""
    if not src.fill(4):
        raise src.error(0, _too_short(len(src.buf)))
    if src.buf[:2] == _GZIP_MAGIC:
        src.inflate()
        if not src.fill(4):
            raise src.error(0, f"gzip file holding no capture ({_too_short(len(src.buf))})")
        if src.buf[:2] == _GZIP_MAGIC:  # not read as a capture: say what it is
            raise src.error(0, "gzip file holding another gzip file, not a capture")
    magic = src.buf[:4]
    found = _magic_format(magic)
    if found is None:
        inside = "gzip file holding no " if src.inflated else "not a "
        raise src.error(0, f"{inside}pcap or pcapng file (magic {magic.hex()})")
    return found


_GZIP_MAGIC = b"\x1f\x8b"

SNIFF_BYTES = 8192
"""How many of a file's first bytes :func:`sniff` is given: enough for a gzip header
with a long stored file name before the capture's magic."""


def _too_short(n: int) -> str:
    return "empty file" if n == 0 else f"not a pcap or pcapng file (only {n} bytes)"


def _magic_format(magic: bytes) -> tuple[str, str, bool] | None:
    """The format of four bytes of magic (as :func:`_detect` returns it), or None."""
    if magic == b"\x0a\x0d\x0d\x0a":
        return "pcapng", "<", False
    for endian in "<>":
        (value,) = struct.unpack(endian + "I", magic)
        if value == _PCAP_MAGIC_US:
            return "pcap", endian, False
        if value == _PCAP_MAGIC_NS:
            return "pcap", endian, True
    return None


class Sniffed(NamedTuple):
    """What a file's first bytes say it is (:func:`sniff`).

    Attributes:
        format: "pcap", "pcapng", "pcap.gz" or "pcapng.gz"; None when not a capture.
        reason: why it is not a capture (None when it is), e.g. "empty file" or
            "not a pcap or pcapng file (magic 4c494345)".
    """

    format: str | None
    reason: str | None

    @property
    def gzip(self) -> bool:
        return self.format is not None and self.format.endswith(".gz")


def sniff(head: bytes) -> Sniffed:
    """Whether a file whose first bytes are ``head`` (up to :data:`SNIFF_BYTES` of them;
    fewer only when the file is shorter) is a capture, by its magic number: pcap in
    either byte order (a1b2c3d4, microseconds; a1b23c4d, nanoseconds), pcapng (0a0d0d0a),
    or one of those compressed with gzip (1f8b, then the magic of the decompressed
    data).  The same test as the readers make, without reading further: a file that
    passes may still be truncated or corrupt after its first bytes."""
    if len(head) < 4:
        return Sniffed(None, _too_short(len(head)))
    if head[:2] == _GZIP_MAGIC:
        try:
            inner = zlib.decompressobj(wbits=31).decompress(head, 4)  # gzip framing
        except zlib.error as exc:
            return Sniffed(None, f"gzip data corrupt ({exc})")
        if len(inner) < 4:
            return Sniffed(None, f"gzip file holding no capture in its first {len(head)} "
                                 "bytes")
        found = _magic_format(inner)
        if found is None:
            return Sniffed(None, f"gzip file holding no pcap or pcapng file (magic "
                                 f"{inner.hex()})")
        return Sniffed(found[0] + ".gz", None)
    found = _magic_format(head[:4])
    if found is None:
        return Sniffed(None, f"not a pcap or pcapng file (magic {head[:4].hex()})")
    return Sniffed(found[0], None)
