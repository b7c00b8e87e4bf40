"""The compiled per-frame loop of :func:`mqttwire.capture.read_capture` (Cython codec only).

:class:`FastReader` does, in C, what ``_read_pure`` and the layers under it do for the
common case: it reads classic pcap records and pcapng Enhanced Packet Blocks from the file
buffer, parses Ethernet/VLAN/SLL/SLL2/null/raw, IPv4/IPv6 and TCP headers into C locals
(link_c.pxd, shared with the split ranges' loop in sections_c.pyx), and when a segment
carries the next in-order bytes of a known MQTT stream that is decoding (or carries no
bytes at all), it does the TCP bookkeeping, the MQTT fixed-header framing, the call into
the Cython ``StreamDecoder`` and the :class:`Record` objects itself (or, given a
:class:`~mqttwire.capture.arrow_c.PacketColumns` by :meth:`FastReader.fill`, each
record's row in its Arrow columns, without the Record; there, the common PUBLISH and
PUBACK packets are read without the decoder: ``_direct``, capture/direct_c.pxd).

Everything else is handed, whole, to the pure-Python code that is the reference: a frame
it does not recognise goes to ``_frame`` (link.py, tcp.py, mqtt_streams.py,
direction.py), a pcapng block other than a plain EPB to ``_Pcapng.block``, a decoding
error or a framing disagreement to ``Direction.failed`` / ``decoded``, a packet other
than PUBLISH, the four acknowledgements, PINGREQ and PINGRESP to
``Direction.packet_records``, and the end of the file to ``_finish``.  The hand-over
needs no copying of state because there is one copy: the TCP streams, connections and
MQTT directions are the pure code's ``__slots__`` objects, which this loop reads and
writes in place, and nothing is decided here before every condition of the fast case has
been checked, so a hand-over always starts from untouched state.

The slots shared so are declared in :mod:`mqttwire.capture.shared_slots`, from which
the pure classes build their ``__slots__``.  Each is reached through its member
descriptor's offset, looked up by name at import (with the descriptor's kind checked),
which is what the descriptor itself does, without its attribute look-up; a :class:`Record`
is allocated by its type and its 34 slots filled directly, the same values its
``__init__`` would store.  The import fails (and read_capture falls back to the pure loop)
if any of these classes is not as expected, or if this module uses a slot that
shared_slots does not list.
"""

from cpython.bytearray cimport PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromSsize_t
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport Py_XDECREF, Py_XINCREF
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

# The C API declarations, shared with the codec (mqttwire/_cdefs.pxd).
from .._cdefs cimport (Py_False, Py_None, Py_True, long_value, object_slot_offset,
                       read_varint)
from .._cdefs cimport slot_get as _get, slot_put as _put
# The codec's packet classes, whose fields _records reads as C struct members, without
# an attribute look-up each, and its stream decoder, whose state _direct checks
# (declared in mqttwire/_speedups.pxd).
from .._speedups cimport Publish as _Publish, StreamDecoder as _Decoder, _Ack
# The frame's headers (link_c.pxd), the record's fields (record_c.pxd), the columns the
# loop fills without Records (arrow_c.pyx).
from .arrow_c cimport PacketColumns
from .direct_c cimport Direct, cached_topic, read_direct
from .link_c cimport MAX_IFACES, Iface, Seg, epb_ns, load_ifaces, parse_frame, u32
from .record_c cimport *

import mqttwire._speedups as CODEC

from .._constants import PACKET_NAMES, REASON_CODES, PacketType
from .._errors import MQTTWireError
from .loop import _finish, _frame
from .pcap import (
    MAX_FRAME,
    CaptureFormatError,
    _detect,
    _Pcapng,
    _pcap_header,
    _pcap_implausible,
    _pcap_more_data,
    _pcap_more_header,
    _Source,
)
from .direction import DECODING, Direction
from .mqtt_streams import Connection, MqttStreams
from .record import Record
from .shared_slots import RECORD_FIELDS, SHARED
from .tcp import TcpConnection, TcpStream

__all__ = ["CODEC", "USED_SLOTS", "FastReader", "flow_key", "slot_offset"]

#: (class name, slot) of every shared slot this module uses, as looked up at import.
USED_SLOTS = []


# ---------------------------------------------------------------------------------------
# Slots by offset


cdef Py_ssize_t _offset(type cls, str name, bint used=True) except -1:
    """The offset of the ``__slots__`` member ``name`` of ``cls`` in its instances: a
    slot that shared_slots lists for the class, and a writable object slot."""
    if name not in SHARED.get(cls.__name__, ()):
        raise ImportError(f"{cls.__name__}.{name} is not a shared slot "
                          "(mqttwire/capture/shared_slots.py)")
    cdef Py_ssize_t offset = object_slot_offset(cls.__dict__.get(name), True)
    if offset == -1:
        raise ImportError(f"{cls.__name__}.{name} is not a slot")
    if offset == -2:
        raise ImportError(f"{cls.__name__}.{name} is not a writable object slot")
    if used:
        USED_SLOTS.append((cls.__name__, name))
    return offset


def slot_offset(cls, name):
    """The offset of a shared slot, checked as at import (for the tests; not recorded
    in USED_SLOTS)."""
    return _offset(cls, name, False)


cdef inline bint _i64(PyObject* value, int64_t* out) noexcept:
    """A Python int slot as a C int64: False if unset, not an int, or out of range."""
    cdef int overflow = 0
    cdef long long v
    if value == NULL or type(<object>value) is not int:
        return False
    v = long_value(<object>value, &overflow)
    if overflow:
        return False
    out[0] = v
    return True


# TcpStream
cdef Py_ssize_t S_BASE = _offset(TcpStream, "base")
cdef Py_ssize_t S_CONN = _offset(TcpStream, "conn")
cdef Py_ssize_t S_ENDED = _offset(TcpStream, "ended")
cdef Py_ssize_t S_FIN = _offset(TcpStream, "fin")
cdef Py_ssize_t S_HIGH = _offset(TcpStream, "high")
cdef Py_ssize_t S_NEXT = _offset(TcpStream, "next")
cdef Py_ssize_t S_PEER = _offset(TcpStream, "peer")
cdef Py_ssize_t S_PENDING = _offset(TcpStream, "pending")
cdef Py_ssize_t S_SPORT = _offset(TcpStream, "sport")
cdef Py_ssize_t S_DPORT = _offset(TcpStream, "dport")
cdef Py_ssize_t S_USER = _offset(TcpStream, "user")
# TcpConnection
cdef Py_ssize_t C_IGNORED = _offset(TcpConnection, "ignored")
# Direction
cdef Py_ssize_t D_MODE = _offset(Direction, "mode")
cdef Py_ssize_t D_UNFRAMED = _offset(Direction, "unframed")
cdef Py_ssize_t D_DEC = _offset(Direction, "dec")
cdef Py_ssize_t D_END = _offset(Direction, "end")
cdef Py_ssize_t D_START = _offset(Direction, "start")
cdef Py_ssize_t D_FIRST = _offset(Direction, "first")
cdef Py_ssize_t D_REMAINING = _offset(Direction, "remaining")
cdef Py_ssize_t D_HDR = _offset(Direction, "hdr")
cdef Py_ssize_t D_CONN = _offset(Direction, "conn")
cdef Py_ssize_t D_STREAM = _offset(Direction, "stream")
cdef Py_ssize_t D_NAME = _offset(Direction, "name")
cdef Py_ssize_t D_SRC_IP = _offset(Direction, "src_ip")
cdef Py_ssize_t D_DST_IP = _offset(Direction, "dst_ip")
cdef Py_ssize_t D_ALIASES = _offset(Direction, "aliases")
# Connection
cdef Py_ssize_t M_ID = _offset(Connection, "id")
cdef Py_ssize_t M_CLIENT_ID = _offset(Connection, "client_id")
cdef Py_ssize_t M_VERSION = _offset(Connection, "version")
cdef Py_ssize_t M_VERSION_SOURCE = _offset(Connection, "version_source")

# Record: its fields (record_c.pxd), checked against Record and shared_slots.
check_record(Record, RECORD_FIELDS)
cdef Py_ssize_t R_OFF[NFIELDS]
for _i, _name in enumerate(field_names()):
    R_OFF[_i] = _offset(Record, _name)
cdef PyTypeObject* RECORD_TYPE = <PyTypeObject*>Record

cdef object _PACKET = "packet"
# Every record made here is of a connection whose MQTT is straight on TCP: a WebSocket
# connection's TCP streams have a websocket.WsDirection as their user, which _segment
# never takes, so all of its records come from the pure code.
cdef object _TCP = "tcp"
cdef tuple _NAMES = PACKET_NAMES
cdef object _DECODING_MODE = DECODING

# _PUBACK_OK[c]: c is a PUBACK reason code of MQTT 5.0 (§3.4.2.1), as the codec's table.
cdef bint _PUBACK_OK[256]
for _i in range(256):
    _PUBACK_OK[_i] = _i in REASON_CODES[PacketType.PUBACK]

# The size of _direct's cache of topic names (direct_c.cached_topic): 2**TOPIC_BITS.
cdef enum:
    TOPIC_BITS = 8


def flow_key(int linktype, data):
    """The key of the TCP connection of the frame ``data`` (of link type ``linktype``):
    its two ends (address and port) in a fixed order, the same both ways, as
    :func:`mqttwire.spark.split.flow_key` makes it from link.py's segment; None when
    the frame is not the common case that :func:`parse_frame` reads the way link.py does
    (then link.py must say what it is)."""
    cdef const uint8_t[::1] view = data
    cdef Seg s
    cdef Py_ssize_t n = view.shape[0]
    cdef bytes a, b
    if n == 0 or not parse_frame(&view[0], n, linktype, &s):
        return None
    a = (<const char*>s.src)[:s.alen] + bytes(((s.sport >> 8) & 0xFF, s.sport & 0xFF))
    b = (<const char*>s.dst)[:s.alen] + bytes(((s.dport >> 8) & 0xFF, s.dport & 0xFF))
    return a + b if a <= b else b + a


# ---------------------------------------------------------------------------------------
# Known streams: a direct-mapped cache from the 4-tuple to its TcpStream (a miss asks the
# reassembler's own table)

ctypedef struct _Slot:
    PyObject* stream  # a strong reference, or NULL
    int alen
    uint32_t sport, dport
    uint8_t src[16]
    uint8_t dst[16]

cdef enum:
    CACHE_BITS = 12

cdef inline uint64_t _hash(Seg* s) noexcept:
    cdef uint64_t h = 1469598103934665603ULL
    cdef int i
    for i in range(s.alen):
        h = (h ^ s.src[i]) * 1099511628211ULL
        h = (h ^ s.dst[i]) * 1099511628211ULL
    h = (h ^ ((<uint64_t>s.sport << 16) | s.dport)) * 1099511628211ULL
    return h ^ (h >> 29)


# ---------------------------------------------------------------------------------------
# The reader

cdef enum:
    ST_START, ST_PCAP, ST_PCAPNG, ST_DONE


cdef class FastReader:
    """Iterate over the records of a capture, as ``_read_pure(f, handler)`` does; or,
    given ``chain`` (and None for ``f``), over the files of a set as one capture, as
    ``_read_pure_chain(chain, handler)`` does: at a file's clean end, the next file is
    opened and read on with the same state (streams, frame numbers, time); only the
    last file's end ends the streams."""

    cdef object f, handler, reassembler, streams, out, src, ng, view, buf
    cdef object capture, payload_limit
    cdef object chain  # the files of a set (sets.FileChain), or None for one file
    cdef object label  # the file's name in CaptureFormatError
    cdef int state
    cdef Py_ssize_t out_pos
    # the chunk being read: buf (bytes) as p[0:n], base its file offset, pos the reader's
    cdef const uint8_t* p
    cdef Py_ssize_t n, pos, base
    cdef long long index
    cdef long long tcp_frame  # the last TCP frame done here: MqttStreams.frame to be
    cdef bint frame_dirty  # ... when MqttStreams.frame is not that yet
    cdef object ts  # the current frame's time (ns, an int, as the pure loop has it)
    cdef int64_t scale
    cdef bint section_seen  # pcapng: as _Pcapng.section_seen
    cdef int linktype
    cdef bint big  # pcapng: the section's byte order is big-endian
    cdef Iface ifaces[MAX_IFACES]
    cdef Py_ssize_t n_ifaces
    cdef _Slot* cache
    # the framing of the current segment: (start, first byte, size) per packet
    cdef int64_t* fr_start
    cdef int64_t* fr_size
    cdef uint8_t* fr_b0
    cdef Py_ssize_t fr_cap
    # fill: the columns the records go to instead of ``out``, and how many rows it wants
    cdef PacketColumns sink
    cdef Py_ssize_t want
    cdef PyObject* topics[1 << TOPIC_BITS]  # _direct's topic cache (strong references)
    cdef readonly long long direct  # packets that _direct read without the decoder

    def __cinit__(self):
        self.cache = <_Slot*>PyMem_Realloc(NULL, sizeof(_Slot) << CACHE_BITS)
        if self.cache == NULL:
            raise MemoryError()
        memset(self.cache, 0, sizeof(_Slot) << CACHE_BITS)

    def __init__(self, f, handler not None, chain=None):
        if type(handler) is not MqttStreams:
            raise TypeError("handler must be a MqttStreams")
        if (f is None) == (chain is None):
            raise TypeError("give a file or a chain of files, not both")
        self.f = f
        self.chain = chain
        self.label = handler.capture
        self.handler = handler
        self.reassembler = handler.reassembler
        self.streams = self.reassembler._streams
        self.out = handler.out
        self.capture = handler.capture
        self.payload_limit = handler.payload_limit
        self.ts = 0
        self.state = ST_START

    def __dealloc__(self):
        cdef int i
        if self.cache != NULL:
            for i in range(1 << CACHE_BITS):
                Py_XDECREF(self.cache[i].stream)
            PyMem_Free(self.cache)
        PyMem_Free(self.fr_start)
        PyMem_Free(self.fr_size)
        PyMem_Free(self.fr_b0)
        for i in range(1 << TOPIC_BITS):
            Py_XDECREF(self.topics[i])

    def __iter__(self):
        return self

    def __next__(self):
        cdef list out = self.out
        while True:
            if self.out_pos < PyList_GET_SIZE(out):
                self.out_pos += 1
                return <object>PyList_GET_ITEM(out, self.out_pos - 1)
            if self.out_pos:
                del out[:]
                self.out_pos = 0
            if self.state == ST_DONE:
                raise StopIteration
            self._run()

    # -- the file ---------------------------------------------------------------------

    cdef int _reload(self) except -1:
        """Take the chunk, its view and position back from ``src`` after it read."""
        src = self.src
        self.buf = src.buf
        self.view = src.view
        self.base = src.base
        self.pos = src.pos
        self.p = <const uint8_t*>PyBytes_AS_STRING(self.buf)
        self.n = PyBytes_GET_SIZE(self.buf)
        return 0

    cdef int _run(self) except -1:
        """Process frames until some records are out, or the capture ends."""
        cdef list out = self.out
        try:
            while True:
                if self.state == ST_START:
                    if self.chain is not None:
                        opened = self.chain.open_next(self.index)
                        if opened is None:
                            break
                        self.f, self.label = opened
                    self._open()
                if self.state == ST_PCAP:
                    while self._more():
                        if not self._pcap_frame():
                            break
                else:
                    while self._more():
                        if not self._pcapng_block():
                            break
                if PyList_GET_SIZE(out) or (self.sink is not None
                                            and self.sink.n >= self.want):
                    return 0
                if self.chain is None:
                    break
                self.state = ST_START  # the file ended cleanly: on to the set's next
            failure = None
        except CaptureFormatError as exc:
            failure = exc if self.chain is None else self.chain.failed(exc)
        if self.chain is not None:
            self.chain.close()
        self.state = ST_DONE
        self._sync_frame()
        _finish(self.handler, self.ts, failure)
        return 0

    cdef bint _more(self) except -1:
        """Whether to read on: no record out yet; with a sink, the records the pure code
        made moved into it (in their order) and fewer rows than it wants."""
        if self.sink is None:
            return PyList_GET_SIZE(self.out) == 0
        self._drain()
        return self.sink.n < self.want

    cdef int _drain(self) except -1:
        """Move the records of ``out`` (the pure code's) into the sink, in order."""
        cdef list out = self.out
        cdef Py_ssize_t i
        if PyList_GET_SIZE(out):
            for i in range(PyList_GET_SIZE(out)):
                self.sink.add_record(<object>PyList_GET_ITEM(out, i))
            del out[:]
        return 0

    def fill(self, PacketColumns sink not None, Py_ssize_t rows):
        """Read on into ``sink`` instead of yielding records, until it holds at least
        ``rows`` rows or the capture has ended; returns False once it has.  Not to be
        mixed with iterating over the reader."""
        if self.out_pos:
            raise RuntimeError("fill after iterating over the reader")
        self.sink = sink
        self.want = rows
        try:
            self._drain()
            while self.state != ST_DONE and sink.n < rows:
                self._run()
                self._drain()
        finally:
            self.sink = None
        return self.state != ST_DONE

    cdef int _open(self) except -1:
        self.state = ST_DONE  # if the header is bad, _run finishes
        self.src = src = _Source(self.f, self.label)
        fmt, endian, nanos = _detect(src)
        if fmt == "pcapng":
            self.ng = _Pcapng(src)
            self._reload()
            self._load_interfaces()
            self.state = ST_PCAPNG
        else:
            self.linktype, pos = _pcap_header(src, endian)
            self.big = endian == ">"
            self.scale = 1 if nanos else 1000
            self._reload()
            self.pos = pos
            self.state = ST_PCAP
        return 0

    cdef bint _pcap_frame(self) except -1:
        """Read and process the classic pcap record at ``pos``: False at the end."""
        cdef const uint8_t* h
        cdef uint32_t caplen
        cdef Py_ssize_t start
        if self.n - self.pos < 16:
            if not _pcap_more_header(self.src, self.pos):
                return False
            self._reload()
        h = self.p + self.pos
        caplen = u32(h + 8, self.big)
        if caplen > MAX_FRAME:
            raise _pcap_implausible(self.src, self.base + self.pos, caplen)
        if self.pos + 16 + <Py_ssize_t>caplen > self.n:
            _pcap_more_data(self.src, self.pos, caplen)
            self._reload()
            h = self.p
        self.index += 1
        self.ts = PyLong_FromLongLong(<int64_t>u32(h, self.big) * 1_000_000_000
                                      + <int64_t>u32(h + 4, self.big) * self.scale)
        start = self.pos + 16
        self.pos = start + caplen
        self._process(start, caplen, self.linktype)
        return True

    cdef int _load_interfaces(self) except -1:
        """Copy the current section's byte order and interfaces from the pcapng reader."""
        ng = self.ng
        self.big = ng.endian == ">"
        self.section_seen = ng.section_seen
        self.n_ifaces = load_ifaces(self.ifaces, ng.interfaces)
        return 0

    cdef bint _pcapng_block(self) except -1:
        """Read and process the pcapng block at ``pos``: False at the end.  A plain EPB
        is read here; any other block, or an EPB with anything unusual (too short,
        lengths that disagree, an unknown interface, a timestamp that does not convert
        in 64 bits), goes to ``_Pcapng.block``, which raises the errors."""
        cdef const uint8_t* h = self.p + self.pos
        cdef uint32_t total, caplen, if_id
        cdef Iface* it
        cdef int64_t ts
        if self.n - self.pos >= 32 and self.section_seen:
            total = u32(h + 4, self.big)
            if (u32(h, self.big) == 6 and total >= 32 and not total & 3
                    and total <= MAX_FRAME and total <= self.n - self.pos
                    and u32(h + total - 4, self.big) == total):
                if_id = u32(h + 8, self.big)
                caplen = u32(h + 20, self.big)
                if if_id < self.n_ifaces and if_id < MAX_IFACES and caplen <= total - 32:
                    it = &self.ifaces[if_id]
                    if epb_ns(it, h, self.big, &ts):
                        self.index += 1
                        self.ts = PyLong_FromLongLong(ts)
                        self.pos += total
                        self._process(self.pos - total + 28, caplen, it.linktype)
                        return True
        src = self.src
        src.pos = self.pos
        self.ng.index = self.index
        frame = self.ng.block()
        self.index = self.ng.index
        self._reload()
        if frame is False:
            return False
        if frame is True:
            self._load_interfaces()
            return True
        self.ts = frame.ts
        self._sync_frame()
        _frame(self.handler, frame.number, frame.ts, frame.linktype, frame.data)
        return True

    # -- one frame --------------------------------------------------------------------

    cdef int _process(self, Py_ssize_t start, Py_ssize_t caplen, int linktype) except -1:
        """Process the frame at p[start:start + caplen] (number ``index``, time ``ts``)."""
        cdef Seg seg
        if not parse_frame(self.p + start, caplen, linktype, &seg) or not self._segment(&seg):
            self._sync_frame()
            _frame(self.handler, self.index, self.ts, linktype,
                   self.view[start : start + caplen])
        return 0

    cdef int _sync_frame(self) except -1:
        """Before pure code runs: MqttStreams.frame is the number of the last frame that
        held a TCP segment (the pure loop sets it for each), as records made there use."""
        if self.frame_dirty:
            self.handler.frame = self.tcp_frame
            self.frame_dirty = False
        return 0

    cdef inline void _tcp_frame(self) noexcept:
        self.tcp_frame = self.index
        self.frame_dirty = True

    cdef object _stream(self, Seg* s):
        """The live TcpStream of the segment's 4-tuple, or None (unknown or ended: the
        reassembler decides)."""
        cdef _Slot* slot = &self.cache[_hash(s) & ((1 << CACHE_BITS) - 1)]
        cdef object st
        if (slot.stream != NULL and slot.alen == s.alen and slot.sport == s.sport
                and slot.dport == s.dport and memcmp(slot.src, s.src, s.alen) == 0
                and memcmp(slot.dst, s.dst, s.alen) == 0):
            st = <object>slot.stream
        else:
            key = (PyBytes_FromStringAndSize(<const char*>s.src, s.alen), s.sport,
                   PyBytes_FromStringAndSize(<const char*>s.dst, s.alen), s.dport)
            st = self.streams.get(key)
            if st is None:
                return None
            Py_XDECREF(slot.stream)
            Py_XINCREF(<PyObject*>st)
            slot.stream = <PyObject*>st
            slot.alen = s.alen
            slot.sport = s.sport
            slot.dport = s.dport
            memcpy(slot.src, s.src, s.alen)
            memcpy(slot.dst, s.dst, s.alen)
        # A stream stays in the reassembler's table until it ends, and it is marked ended
        # when the reassembler forgets it (tcp.py, _unregister): live means it is the one.
        if _get(st, S_ENDED) != Py_False:
            return None
        return st

    cdef bint _segment(self, Seg* s) except -1:
        """TcpReassembler.add and MqttStreams.on_data for a segment without SYN, FIN or
        RST that is the next in-order data of a decoding MQTT direction, or no data at
        all, or of an ignored connection: True if done here; False, with nothing
        changed, to hand it over."""
        cdef int64_t nxt, high, end
        cdef uint32_t base
        cdef int64_t peer_base, peer_next, scratch
        cdef PyObject* v
        if s.flags & 0x07:  # FIN, SYN, RST
            return False
        st = self._stream(s)
        if st is None:
            return False
        if _get(<object>_get(st, S_CONN), C_IGNORED) != Py_False:
            # A connection that is not MQTT, or not this task's share: tcp.py drops its
            # segments, watching only for FIN and RST.
            self._tcp_frame()
            return True
        v = _get(st, S_BASE)
        if v == Py_None or not _i64(v, &nxt):
            return False
        base = <uint32_t>nxt
        if (PyList_GET_SIZE(<object>_get(st, S_PENDING)) or _get(st, S_FIN) != Py_None
                or not _i64(_get(st, S_NEXT), &nxt) or not _i64(_get(st, S_HIGH), &high)):
            return False
        if s.flags & 0x10:  # ACK: one of bytes not delivered yet means a gap (tcp.py)
            peer = <object>_get(st, S_PEER)
            v = _get(peer, S_BASE)
            if v != Py_None and _get(peer, S_ENDED) == Py_False:
                if not _i64(v, &peer_base) or not _i64(_get(peer, S_NEXT), &peer_next):
                    return False
                if <uint32_t>(s.ack - <uint32_t>peer_base - <uint32_t>peer_next) - 1 < 0x7FFFFFFF:
                    return False
        if not s.wire_len:
            self._tcp_frame()
            return True  # nothing else in tcp.py applies to it
        if s.caplen != s.wire_len or <uint32_t>(s.seq - base - <uint32_t>nxt):
            return False  # cut short by the capture, or not the next bytes
        direction = <object>_get(st, S_USER)
        if (type(direction) is not Direction
                or _get(direction, D_MODE) != <PyObject*>_DECODING_MODE
                or _get(direction, D_UNFRAMED) != Py_False
                or not _i64(_get(direction, D_REMAINING), &scratch)
                or not _i64(_get(direction, D_START), &scratch)):
            return False
        # The fast case: from here on, the state changes.
        self._tcp_frame()
        end = nxt + s.wire_len
        if end > high:
            _put(st, S_HIGH, PyLong_FromLongLong(end))
        _put(st, S_NEXT, PyLong_FromLongLong(end))
        _put(direction, D_END, PyLong_FromLongLong(end))
        self._decode(direction, nxt, s.payload, s.caplen)
        return True

    # -- MQTT -------------------------------------------------------------------------

    cdef int _grow(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = max(need, 2 * self.fr_cap, 64)
        cdef void* a = PyMem_Realloc(self.fr_start, cap * sizeof(int64_t))
        if a == NULL:
            raise MemoryError()
        self.fr_start = <int64_t*>a
        a = PyMem_Realloc(self.fr_size, cap * sizeof(int64_t))
        if a == NULL:
            raise MemoryError()
        self.fr_size = <int64_t*>a
        a = PyMem_Realloc(self.fr_b0, cap)
        if a == NULL:
            raise MemoryError()
        self.fr_b0 = <uint8_t*>a
        self.fr_cap = cap
        return 0

    cdef Py_ssize_t _framing(self, object direction, int64_t offset, const uint8_t* d,
                             Py_ssize_t n) except -1:
        """Direction._frame in C: the packets that d[0:n] (at stream ``offset``)
        completes, into fr_start/fr_b0/fr_size; returns how many."""
        cdef Py_ssize_t pos = 0, count = 0, hl, hn, size, length
        cdef int64_t remaining, start
        cdef int first, b0, found
        cdef uint8_t h[5]
        cdef const uint8_t* q
        cdef object hdr = <object>_get(direction, D_HDR)
        _i64(_get(direction, D_REMAINING), &remaining)  # ints: checked by _segment
        _i64(_get(direction, D_START), &start)
        first = <object>_get(direction, D_FIRST)
        hl = PyBytes_GET_SIZE(hdr)
        if n // 2 + 2 > self.fr_cap:
            self._grow(n // 2 + 2)
        while pos < n:
            if remaining:
                if remaining > n - pos:
                    remaining -= n - pos
                    break
                pos += remaining
                remaining = 0
                self.fr_start[count] = start
                self.fr_b0[count] = first
                self.fr_size[count] = offset + pos - start
                count += 1
                start = offset + pos
                continue
            if hl:  # the header began in an earlier segment
                memcpy(h, PyBytes_AS_STRING(hdr), hl)
                hn = hl + min(5 - hl, n - pos)
                memcpy(h + hl, d + pos, hn - hl)
                q = h
            else:
                q = d + pos
                hn = n - pos
            # As Direction._frame reads it with _codec.framing.frame_header: (size, Remaining
            # Length), more bytes needed, or too long
            found = read_varint(q, 1, hn, &length, &size)
            b0 = q[0]
            if found < 0:  # the codec will reject it; stop framing
                _put(direction, D_UNFRAMED, True)
                break
            if not found:  # the header goes on in the next segment
                hdr = PyBytes_FromStringAndSize(<const char*>q, hn)
                break
            remaining = length
            first = b0
            pos += size - hl
            if hl:
                hdr = b""
                hl = 0
            if not remaining:
                self.fr_start[count] = start
                self.fr_b0[count] = b0
                self.fr_size[count] = size
                count += 1
                start = offset + pos
        _put(direction, D_REMAINING, PyLong_FromLongLong(remaining))
        _put(direction, D_START, PyLong_FromLongLong(start))
        _put(direction, D_FIRST, PyLong_FromLong(first))
        _put(direction, D_HDR, hdr)
        return count

    cdef list _framed(self, Py_ssize_t first, Py_ssize_t count):
        return [(self.fr_start[i], self.fr_b0[i], self.fr_size[i]) for i in range(first, count)]

    cdef int _decode(self, object direction, int64_t offset, const uint8_t* d,
                     Py_ssize_t n) except -1:
        """Direction.decode in C, for a direction that is decoding and framing: with a
        sink, the packets that _direct reads itself, the others through the decoder."""
        cdef Py_ssize_t count = self._framing(direction, offset, d, n)
        cdef Py_ssize_t first = 0, done, skip
        cdef list packets
        if count and self.sink is not None:
            if self.fr_start[0] < offset:
                first = self._complete(direction, offset, d, n, count)
                if first < 0:
                    return 0  # the decoder failed: the pure code took the segment
            done = self._direct(direction, offset, d, first, count)
            if done > first or first:
                # The decoder is where it would be after those packets: go on after them.
                first = done
                skip = self.fr_start[first - 1] + self.fr_size[first - 1] - offset
                if skip == n:
                    return 0
                offset += skip
                d += skip
                n -= skip
        data = PyBytes_FromStringAndSize(<const char*>d, n)
        try:
            packets = (<object>_get(direction, D_DEC)).feed(data)
        except MQTTWireError as exc:
            self._sync_frame()
            rest = direction.failed(exc, self._framed(first, count), self.ts, offset, data)
            if rest is not None:  # decoding resumes after a bad packet, in this segment
                direction.decode(rest[0], rest[1], self.ts)
            return 0
        if PyList_GET_SIZE(packets) != count - first:
            self._sync_frame()
            direction.decoded(packets, self._framed(first, count), self.ts)
            return 0
        if count > first:
            self._records(direction, packets, first, count)
        return 0

    cdef Py_ssize_t _complete(self, object direction, int64_t offset, const uint8_t* d,
                              Py_ssize_t n, Py_ssize_t count) except -2:
        """The segment's first packet was begun in an earlier one: when the decoder
        knows its size, feed it just the rest of that packet, so that _direct may read
        the packets after it.  Returns how many packets are done (0 or 1), or -1 when
        the decoder failed on it (the pure code then took the whole segment, as it
        would have taken it in one piece: the error is the same)."""
        cdef Py_ssize_t stop = self.fr_start[0] + self.fr_size[0] - offset
        cdef list packets
        decoder = <object>_get(direction, D_DEC)
        if (count < 2 or type(decoder) is not _Decoder or (<_Decoder>decoder)._need
                != PyByteArray_GET_SIZE((<_Decoder>decoder)._buffer) + stop):
            return 0
        try:
            packets = decoder.feed(PyBytes_FromStringAndSize(<const char*>d, stop))
        except MQTTWireError as exc:
            self._sync_frame()
            data = PyBytes_FromStringAndSize(<const char*>d, n)
            rest = direction.failed(exc, self._framed(0, count), self.ts, offset, data)
            if rest is not None:
                direction.decode(rest[0], rest[1], self.ts)
            return -1
        # _need was the packet's size and this completes it: the decoder made it, alone
        if PyList_GET_SIZE(packets) != 1:  # not as the framing says: the pure code says why
            self._sync_frame()
            direction.decoded(packets, self._framed(0, 1), self.ts)
        else:
            self._records(direction, packets, 0, 1)
        return 1

    cdef Py_ssize_t _direct(self, object direction, int64_t offset, const uint8_t* d,
                            Py_ssize_t first, Py_ssize_t count) except -1:
        """The fast path of the fast path, for fill: the leading packets of the segment
        d (at stream ``offset``, framed as fr_* 0 to ``count``) that are whole in it and
        are a PUBLISH of QoS 0 or 1 without DUP, with an ASCII topic name and no
        properties, or a PUBACK without properties, read here into their record's
        values without the decoder and its packet object.  Only packets that the
        decoder would decode without an error, into exactly these values, are taken:
        the first one that is anything else ends it (the decoder takes it and the rest,
        from where these leave the stream).  From packet ``first`` on; returns the
        index of the first packet it did not take."""
        cdef PyObject* v[NFIELDS]
        cdef Py_ssize_t i, limit = -1
        cdef int version, overflow = 0
        cdef const uint8_t* q
        cdef Direct r
        cdef _Decoder dec
        cdef object conn, frame, packet, offset_obj, length_obj, flags, qos_obj
        cdef object pid_obj, topic, payload_length, cut, code_obj
        cdef long long level, frame_no = self.index
        cdef Py_ssize_t cut_size
        cdef bint bare
        memset(v, 0, sizeof(v))  # a field not set below is never read
        decoder = <object>_get(direction, D_DEC)
        if first == count or type(decoder) is not _Decoder:
            return first
        dec = <_Decoder>decoder
        # The decoder holds nothing and knows its level: what it would do with these
        # packets depends on nothing else (StreamDecoder._parse).
        if (dec._error is not None or dec._feeding or PyByteArray_GET_SIZE(dec._buffer)
                or dec.max_packet_size is not None or type(dec.version) is not int
                or self.fr_start[first] < offset):
            return first
        level = long_value(dec.version, &overflow)
        if overflow or level < 3 or level > 5:
            return first
        version = <int>level
        if self.payload_limit is not None:
            if type(self.payload_limit) is not int or self.payload_limit < 0:
                return first
            limit = min(self.payload_limit, <object>PY_SSIZE_T_MAX)
        conn = self._context(direction, v)
        frame = frame_no
        v[F_FRAME] = <PyObject*>frame
        v[F_TOPIC_FROM_ALIAS] = Py_False
        v[F_TOPIC_FILTERS] = v[F_REASON_CODES] = v[F_PROPERTIES] = Py_None
        v[F_ERROR] = v[F_ERROR_OFFSET] = v[F_END_REASON] = Py_None
        v[F_PACKET] = Py_None  # made only where a Record of it is needed
        # Without derived tables (packets_table) the sink writes the row from the C
        # values alone: then no Python value is made for a packet (its fields stay NULL).
        bare = self.sink.direct_only(v[F_TS])
        for i in range(first, count):
            q = d + (self.fr_start[i] - offset)
            if not read_direct(q, self.fr_size[i], version, _PUBACK_OK, &r):
                return i
            cut_size = -1 if r.ptype != 3 or limit < 0 else min(limit, r.payload_size)
            if not bare:
                pid_obj = PyLong_FromLong(r.packet_id) if r.packet_id else None
                v[F_PACKET_ID] = <PyObject*>pid_obj
                if r.ptype == 3:
                    topic = cached_topic(self.topics, TOPIC_BITS, q + r.topic, r.topic_size)
                    qos_obj = PyLong_FromLong(r.qos)
                    payload_length = PyLong_FromSsize_t(r.payload_size)
                    cut = None if cut_size < 0 else PyBytes_FromStringAndSize(
                        <const char*>q + r.payload, cut_size)
                    v[F_QOS] = <PyObject*>qos_obj
                    v[F_RETAIN] = Py_True if r.retain else Py_False
                    v[F_TOPIC] = <PyObject*>topic
                    v[F_PAYLOAD_LENGTH] = <PyObject*>payload_length
                    v[F_PAYLOAD] = <PyObject*>cut
                    v[F_DUP] = Py_False
                    v[F_REASON_CODE] = Py_None
                else:
                    code_obj = PyLong_FromLong(r.code)
                    v[F_QOS] = v[F_RETAIN] = v[F_DUP] = v[F_TOPIC] = Py_None
                    v[F_PAYLOAD_LENGTH] = v[F_PAYLOAD] = Py_None
                    v[F_REASON_CODE] = <PyObject*>code_obj
                offset_obj = PyLong_FromLongLong(self.fr_start[i])
                length_obj = PyLong_FromSsize_t(self.fr_size[i])
                flags = PyLong_FromLong(q[0] & 0x0F)
                v[F_STREAM_OFFSET] = <PyObject*>offset_obj
                v[F_LENGTH] = <PyObject*>length_obj
                v[F_FLAGS] = <PyObject*>flags
                v[F_PACKET_TYPE] = <PyObject*>_NAMES[r.ptype]
            # As StreamDecoder._parse leaves it after the packet.
            dec._consumed += self.fr_size[i]
            self.direct += 1
            if PyList_GET_SIZE(self.out):
                self._drain()
            # The packets row from these C values, the derived tables from v (bare: none).
            if not self.sink.take_direct(v, q, &r, frame_no, self.fr_start[i],
                                         self.fr_size[i], cut_size):
                # The derived tables need its Record: with the packet, as the decoder
                # makes it.
                packet = CODEC.decode(PyBytes_FromStringAndSize(
                    <const char*>q, self.fr_size[i]), version=version)
                v[F_PACKET] = <PyObject*>packet
                self.sink.add_fallback(v)
                v[F_PACKET] = Py_None
        return count

    cdef object _context(self, object direction, PyObject** v):
        """Fill the fields of ``v`` that every packet record of ``direction`` shares in
        this frame (frame and packet fields aside); returns its connection."""
        conn = <object>_get(direction, D_CONN)
        v[F_KIND] = <PyObject*>_PACKET
        v[F_CAPTURE] = <PyObject*>self.capture
        v[F_TS] = <PyObject*>self.ts
        v[F_CONNECTION_ID] = _get(conn, M_ID)
        v[F_DIRECTION] = _get(direction, D_NAME)
        v[F_SRC_IP] = _get(direction, D_SRC_IP)
        v[F_DST_IP] = _get(direction, D_DST_IP)
        tcp_stream = <object>_get(direction, D_STREAM)
        v[F_SRC_PORT] = _get(tcp_stream, S_SPORT)
        v[F_DST_PORT] = _get(tcp_stream, S_DPORT)
        v[F_CLIENT_ID] = _get(conn, M_CLIENT_ID)
        v[F_PROTOCOL_VERSION] = _get(conn, M_VERSION)
        v[F_VERSION_SOURCE] = _get(conn, M_VERSION_SOURCE)
        v[F_TRANSPORT] = <PyObject*>_TCP
        return conn

    cdef int _records(self, object direction, list packets, Py_ssize_t first,
                      Py_ssize_t count) except -1:
        """Direction.packet_records in C for PUBLISH, PUBACK/PUBREC/PUBREL/PUBCOMP, PINGREQ
        and PINGRESP; the other packet types go to it one by one.  ``packets`` are the
        decoder's of the framed packets ``first`` to ``count``."""
        cdef PyObject* v[NFIELDS]
        cdef Py_ssize_t i
        cdef int b0, ptype
        cdef list out = self.out
        # Python objects all (Cython would infer C types for some): v points at them.
        cdef object conn, ts, frame, limit, client_id, version, packet, offset
        cdef object length, flags, payload, qos, retain, dup, packet_id, payload_length
        cdef object cut, props, topic, alias, aliases, reason_code, source
        conn = self._context(direction, v)
        ts = self.ts
        frame = self.index
        limit = self.payload_limit
        v[F_FRAME] = <PyObject*>frame
        client_id = <object>_get(conn, M_CLIENT_ID)
        version = <object>_get(conn, M_VERSION)
        for i in range(first, count):
            packet = <object>PyList_GET_ITEM(packets, i - first)
            b0 = self.fr_b0[i]
            ptype = b0 >> 4
            if not (3 <= ptype <= 7 or ptype == 12 or ptype == 13):
                self._sync_frame()
                direction.packet_records([packet], [(self.fr_start[i], b0, self.fr_size[i])], ts)
                client_id = <object>_get(conn, M_CLIENT_ID)
                version = <object>_get(conn, M_VERSION)
                source = <object>_get(conn, M_VERSION_SOURCE)
                v[F_VERSION_SOURCE] = <PyObject*>source
                continue
            offset = PyLong_FromLongLong(self.fr_start[i])
            length = PyLong_FromLongLong(self.fr_size[i])
            flags = PyLong_FromLong(b0 & 0x0F)
            v[F_STREAM_OFFSET] = <PyObject*>offset
            v[F_LENGTH] = <PyObject*>length
            v[F_CLIENT_ID] = <PyObject*>client_id
            v[F_PROTOCOL_VERSION] = <PyObject*>version
            v[F_PACKET_TYPE] = <PyObject*>_NAMES[ptype]
            v[F_FLAGS] = <PyObject*>flags
            v[F_TOPIC_FROM_ALIAS] = Py_False
            v[F_TOPIC_FILTERS] = Py_None
            v[F_REASON_CODES] = Py_None
            v[F_PACKET] = <PyObject*>packet
            v[F_ERROR] = Py_None
            v[F_ERROR_OFFSET] = Py_None
            v[F_END_REASON] = Py_None
            if ptype == 3:  # PUBLISH
                if type(packet) is _Publish:
                    payload = (<_Publish>packet).payload
                    qos = (<_Publish>packet).qos
                    retain = (<_Publish>packet).retain
                    dup = (<_Publish>packet).dup
                    packet_id = (<_Publish>packet).packet_id
                    topic = (<_Publish>packet).topic
                    # Its properties property, without the call where the block is read
                    # (or there is none).
                    if (<_Publish>packet)._raw is None:
                        props = (<_Publish>packet)._properties
                    else:
                        props = packet.properties
                else:
                    payload = packet.payload
                    qos = packet.qos
                    retain = packet.retain
                    dup = packet.dup
                    packet_id = packet.packet_id
                    props = packet.properties
                    topic = packet.topic
                payload_length = len(payload)
                cut = None if limit is None else bytes(payload[:limit])
                v[F_TOPIC_FROM_ALIAS] = Py_False
                if props is not None:
                    alias = props.topic_alias
                    if alias is not None:
                        aliases = <object>_get(direction, D_ALIASES)
                        if topic:
                            aliases[alias] = topic
                        else:
                            topic = aliases.get(alias)
                            v[F_TOPIC_FROM_ALIAS] = Py_True
                v[F_QOS] = <PyObject*>qos
                v[F_RETAIN] = <PyObject*>retain
                v[F_DUP] = <PyObject*>dup
                v[F_PACKET_ID] = <PyObject*>packet_id
                v[F_TOPIC] = <PyObject*>topic
                v[F_PAYLOAD_LENGTH] = <PyObject*>payload_length
                v[F_PAYLOAD] = <PyObject*>cut
                v[F_REASON_CODE] = Py_None
                v[F_PROPERTIES] = <PyObject*>props
            else:
                v[F_QOS] = v[F_RETAIN] = v[F_DUP] = v[F_TOPIC] = Py_None
                v[F_PAYLOAD_LENGTH] = v[F_PAYLOAD] = Py_None
                if ptype <= 7:  # PUBACK, PUBREC, PUBREL, PUBCOMP
                    if isinstance(packet, _Ack):
                        packet_id = (<_Ack>packet).packet_id
                        reason_code = (<_Ack>packet).reason_code
                        props = (<_Ack>packet).properties
                    else:
                        packet_id = packet.packet_id
                        reason_code = packet.reason_code
                        props = packet.properties
                    v[F_PACKET_ID] = <PyObject*>packet_id
                    v[F_REASON_CODE] = <PyObject*>reason_code
                    v[F_PROPERTIES] = <PyObject*>props
                else:  # PINGREQ, PINGRESP
                    v[F_PACKET_ID] = v[F_REASON_CODE] = v[F_PROPERTIES] = Py_None
            if self.sink is None:
                out.append(new_record(RECORD_TYPE, R_OFF, v))
            else:
                if PyList_GET_SIZE(out):
                    self._drain()
                self.sink.fast_record(v)
        return 0
