"""The compiled loop of :func:`mqttwire.capture.sections.range_sections` (Cython codec
only; the pure twin is :func:`mqttwire.capture.sections.sections_pure`): a split
capture's range as a pcapng section per connection.

:class:`SectionPacker` reads the range's classic pcap records or plain Enhanced Packet
Blocks from the file's bytes, finds each frame's TCP connection with the header parser
the capture loop uses (link_c.pxd), and gathers the frames by connection, as the pure
loop gathers ``read_range``'s frames.  Anything it does not read makes :meth:`feed`
return -1, and the caller reads the range with the pure loop.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from .link_c cimport MAX_IFACES, Iface, Seg, epb_ns, load_ifaces, parse_frame, u32

from .pcap import MAX_FRAME

__all__ = ["SectionPacker"]


cdef inline void _le32(uint8_t* p, uint32_t v) noexcept:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = v >> 24


cdef class _Packed:
    """One connection's frames of a range (as sections.Piece): the EPBs, the frames'
    numbers (int64, native order), the link types in interface order."""

    cdef bytearray body
    cdef bytearray numbers
    cdef list linktypes
    cdef int piece
    cdef int last_linktype
    cdef uint32_t last_iface

    def __cinit__(self, int piece):
        self.body = bytearray()
        self.numbers = bytearray()
        self.linktypes = []
        self.piece = piece
        self.last_linktype = -1
        self.last_iface = 0

    cdef int add(self, int64_t number, int64_t ts, int linktype, const uint8_t* d,
                 Py_ssize_t n) except -1:
        cdef Py_ssize_t pad = -n & 3
        cdef Py_ssize_t total = 32 + n + pad
        cdef Py_ssize_t old = PyByteArray_GET_SIZE(self.body)
        cdef uint8_t* p
        if linktype != self.last_linktype:
            if linktype in self.linktypes:
                self.last_iface = self.linktypes.index(linktype)
            else:
                self.last_iface = len(self.linktypes)
                self.linktypes.append(linktype)
            self.last_linktype = linktype
        PyByteArray_Resize(self.body, old + total)
        p = <uint8_t*>PyByteArray_AS_STRING(self.body) + old
        _le32(p, 6)
        _le32(p + 4, <uint32_t>total)
        _le32(p + 8, self.last_iface)
        _le32(p + 12, <uint32_t>(<uint64_t>ts >> 32))
        _le32(p + 16, <uint32_t>(<uint64_t>ts & 0xFFFFFFFFULL))
        _le32(p + 20, <uint32_t>n)
        _le32(p + 24, <uint32_t>n)
        memcpy(p + 28, d, n)
        memset(p + 28 + n, 0, pad)
        _le32(p + 28 + n + pad, <uint32_t>total)
        old = PyByteArray_GET_SIZE(self.numbers)
        PyByteArray_Resize(self.numbers, old + 8)
        memcpy(PyByteArray_AS_STRING(self.numbers) + old, &number, 8)
        return 0


cdef class SectionPacker:
    """The compiled loop of :func:`mqttwire.capture.sections.range_sections`: the frames
    of one range, fed as the file's bytes (:meth:`feed`), gathered by connection as
    ``sections.sections_pure`` gathers read_range's frames.  It reads classic pcap records
    (``ng`` false: the file's byte order, time resolution and link type) or plain
    Enhanced Packet Blocks (``ng``: the section's byte order and ``interfaces``, the
    pcap.py interfaces after the head); anything else makes :meth:`feed` return -1, and
    the caller reads the range with the pure loop.  ``other(linktype, data)``: the key
    of a frame the compiled parser does not read (link.py's), or None."""

    cdef bint ng, big
    cdef int64_t scale
    cdef int linktype
    cdef Iface ifaces[MAX_IFACES]
    cdef Py_ssize_t n_ifaces
    cdef int64_t end, size, piece_bytes, number, ts
    cdef bint have_ts
    cdef readonly long long count, last_parsed
    cdef readonly object next
    cdef readonly bint done
    cdef dict pieces
    cdef list ready
    cdef object other

    def __init__(self, bint ng, bint big, bint nanos, int linktype, interfaces,
                 int64_t end, int64_t size, int64_t piece_bytes, other):
        self.ng, self.big = ng, big
        self.scale = 1 if nanos else 1000
        self.linktype = linktype
        self.n_ifaces = load_ifaces(self.ifaces, interfaces)
        self.end, self.size, self.piece_bytes = end, size, piece_bytes
        self.count = self.last_parsed = 0
        self.next = None
        self.done = False
        self.have_ts = False
        self.pieces = {}
        self.ready = []
        self.other = other

    def __repr__(self):
        return (f"SectionPacker({'pcapng' if self.ng else 'pcap'}, frames={self.count}, "
                f"connections={len(self.pieces)}, done={self.done})")

    @property
    def last_ts(self):
        """The time of the last frame read (ns), None before the first."""
        return self.ts if self.have_ts else None

    def feed(self, data, int64_t base):
        """Read the records or blocks that begin in ``data`` (whose first byte is the
        file's byte ``base``, the start of a record or block): the number of bytes used
        (the start of the first not whole in ``data``), or -1 for one this loop does
        not read.  ``done`` once the range's last frame is read."""
        cdef const uint8_t[::1] view = data
        cdef Py_ssize_t n = view.shape[0]
        cdef Py_ssize_t pos = 0
        cdef const uint8_t* p
        cdef const uint8_t* h
        cdef uint32_t caplen, total, if_id
        cdef int64_t ts, after
        cdef Iface* it
        if self.done:
            return 0
        if n == 0:
            return 0
        p = &view[0]
        while True:
            if self.ng:
                if base + pos >= self.end or base + pos == self.size:
                    self.next = base + pos
                    self.done = True
                    return pos
                if n - pos < 8:
                    return pos
                h = p + pos
                total = u32(h + 4, self.big)
                if u32(h, self.big) != 6 or total < 32 or total & 3 or total > MAX_FRAME:
                    return -1
                if total > n - pos:
                    return pos
                if u32(h + total - 4, self.big) != total:
                    return -1
                if_id = u32(h + 8, self.big)
                caplen = u32(h + 20, self.big)
                if if_id >= self.n_ifaces or if_id >= MAX_IFACES or caplen > total - 32:
                    return -1
                it = &self.ifaces[if_id]
                if not epb_ns(it, h, self.big, &ts):
                    return -1
                self.count += 1
                if self._frame(h + 28, caplen, it.linktype, ts, data, pos + 28) < 0:
                    return -1
                pos += total
            else:
                if n - pos < 16:
                    return pos
                h = p + pos
                caplen = u32(h + 8, self.big)
                if caplen > MAX_FRAME:
                    return -1
                if pos + 16 + <Py_ssize_t>caplen > n:
                    return pos
                ts = (<int64_t>u32(h, self.big) * 1_000_000_000
                      + <int64_t>u32(h + 4, self.big) * self.scale)
                self.count += 1
                if self._frame(h + 16, caplen, self.linktype, ts, data, pos + 16) < 0:
                    return -1
                pos += 16 + caplen
                after = base + pos
                if after >= self.end or after == self.size:
                    self.next = after
                    self.done = True
                    return pos

    cdef int _frame(self, const uint8_t* d, Py_ssize_t caplen, int linktype, int64_t ts,
                    object data, Py_ssize_t start) except -2:
        """Frame number ``count``: its connection's piece gets it; -1 where the pure
        loop must decide (a frame that does not fit a pcapng block)."""
        cdef Seg s
        cdef uint8_t a[18]
        cdef uint8_t b[18]
        cdef uint8_t k[36]
        cdef int half
        cdef _Packed piece
        self.ts = ts
        self.have_ts = True
        if caplen and parse_frame(d, caplen, linktype, &s):
            half = s.alen + 2
            memcpy(a, s.src, s.alen)
            a[s.alen] = (s.sport >> 8) & 0xFF
            a[s.alen + 1] = s.sport & 0xFF
            memcpy(b, s.dst, s.alen)
            b[s.alen] = (s.dport >> 8) & 0xFF
            b[s.alen + 1] = s.dport & 0xFF
            if memcmp(a, b, half) <= 0:
                memcpy(k, a, half)
                memcpy(k + half, b, half)
            else:
                memcpy(k, b, half)
                memcpy(k + half, a, half)
            key = PyBytes_FromStringAndSize(<const char*>k, 2 * half)
        else:
            key = self.other(linktype, memoryview(data)[start : start + caplen])
            if key is None:
                return 0
        self.last_parsed = self.count
        if ts < 0 or caplen > MAX_FRAME - 64:
            return -1
        found = self.pieces.get(key)
        if found is None:
            piece = _Packed(0)
            self.pieces[key] = piece
        else:
            piece = <_Packed>found
        piece.add(self.count, ts, linktype, d, caplen)
        if PyByteArray_GET_SIZE(piece.body) >= self.piece_bytes:
            self.ready.append((key, piece))
            self.pieces[key] = _Packed(piece.piece + 1)
        return 0

    def sections(self, section):
        """The sections, in the pure loop's order: (key, piece, numbers, section),
        ``section(linktypes, body)`` making the pcapng section."""
        cdef _Packed piece
        out = []
        for key, piece in self.ready:
            out.append((key, piece.piece, bytes(piece.numbers),
                        section(piece.linktypes, piece.body)))
        for key, piece in self.pieces.items():
            if PyByteArray_GET_SIZE(piece.numbers):
                out.append((key, piece.piece, bytes(piece.numbers),
                            section(piece.linktypes, piece.body)))
        return out


# ---------------------------------------------------------------------------------------
