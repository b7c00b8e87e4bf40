"""The compiled per-frame loop of :func:`mqttwire.capture.read_capture` (Cython codec only).

:class:`FastReader` does, in C, what ``_read_pure`` and the layers under it do for the
common case: it reads classic pcap records and pcapng Enhanced Packet Blocks from the file
buffer, parses Ethernet/VLAN/SLL/SLL2/null/raw, IPv4/IPv6 and TCP headers into C locals,
and when a segment carries the next in-order bytes of a known MQTT stream that is
decoding (or carries no bytes at all), it does the TCP bookkeeping, the MQTT fixed-header
framing, the call into the Cython ``StreamDecoder`` and the :class:`Record` objects itself.

Everything else is handed, whole, to the pure-Python code that is the reference: a frame
it does not recognise goes to ``_frame`` (link.py, tcp.py, mqtt_streams.py), a pcapng block
other than a plain EPB to ``_Pcapng.block``, a decoding error or a framing disagreement
to ``Direction.failed`` / ``decoded``, a packet other than PUBLISH, the four
acknowledgements, PINGREQ and PINGRESP to ``Direction.packet_records``, and the end of the file
to ``_finish``.  The hand-over needs no copying of state because there is one copy: the
TCP streams, connections and MQTT directions are the pure code's ``__slots__`` objects,
which this loop reads and writes in place, and nothing is decided here before every
condition of the fast case has been checked, so a hand-over always starts from untouched
state.

The slots shared so are declared in :mod:`mqttwire.capture.shared_slots`, from which
the pure classes build their ``__slots__``.  Each is reached through its member
descriptor's offset, looked up by name at import (with the descriptor's kind checked),
which is what the descriptor itself does, without its attribute look-up; a :class:`Record`
is allocated by its type and its 34 slots filled directly, the same values its
``__init__`` would store.  The import fails (and read_capture falls back to the pure loop)
if any of these classes is not as expected, or if this module uses a slot that
shared_slots does not list.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_XDECREF, Py_XINCREF
from libc.stdint cimport INT32_MAX, INT64_MAX, int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

# The C API declarations, shared with the codec (mqttwire/_cdefs.pxd).
from .._cdefs cimport (
    PyLong_AsLongLongAndOverflow,
    PyType_GenericAlloc,
    PyUnicode_AsUTF8AndSize,
    Py_False,
    Py_None,
    Py_True,
    object_slot_offset,
    read_varint,
)
from .._cdefs cimport slot_get as _get, slot_put as _put
# The codec's packet classes, whose fields _records reads as C struct members, without
# an attribute look-up each (declared in mqttwire/_speedups.pxd).
from .._speedups cimport Publish as _Publish, _Ack

import dataclasses

import mqttwire._speedups as CODEC

from .._constants import PACKET_NAMES
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

__all__ = ["CODEC", "COLUMN_KINDS", "ROW_CAPSULE", "TAKE_CAPSULE", "USED_SLOTS", "FastReader",
           "PacketColumns", "SectionPacker", "flow_key", "row_capsule", "slot_offset"]

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
    v = PyLong_AsLongLongAndOverflow(<object>value, &overflow)
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

# Record: its fields, in order, with their defaults.
cdef enum:
    F_KIND = 0
    F_CAPTURE, F_TS, F_FRAME, F_CONNECTION_ID, F_DIRECTION, F_SRC_IP, F_SRC_PORT,
    F_DST_IP, F_DST_PORT, F_STREAM_OFFSET, F_LENGTH, F_CLIENT_ID, F_PROTOCOL_VERSION,
    F_PACKET_TYPE, F_FLAGS, F_QOS, F_RETAIN, F_DUP, F_PACKET_ID, F_TOPIC, F_TOPIC_FROM_ALIAS,
    F_TOPIC_FILTERS, F_PAYLOAD_LENGTH, F_PAYLOAD, F_REASON_CODE, F_REASON_CODES,
    F_PROPERTIES, F_PACKET, F_ERROR, F_ERROR_OFFSET, F_END_REASON, F_VERSION_SOURCE,
    F_TRANSPORT
    NFIELDS  # 34

# The F_* order spelled out: must be shared_slots.RECORD_FIELDS (checked at import).
_RECORD_FIELDS = (
    "kind", "capture", "ts", "frame", "connection_id", "direction", "src_ip", "src_port",
    "dst_ip", "dst_port", "stream_offset", "length", "client_id", "protocol_version",
    "packet_type", "flags", "qos", "retain", "dup", "packet_id", "topic",
    "topic_from_alias", "topic_filters", "payload_length", "payload", "reason_code",
    "reason_codes", "properties", "packet", "error", "error_offset", "end_reason",
    "version_source", "transport",
)


cdef int _check_record() except -1:
    fields = dataclasses.fields(Record)
    if _RECORD_FIELDS != RECORD_FIELDS:
        raise ImportError("the F_* order here is not shared_slots.RECORD_FIELDS")
    if tuple(f.name for f in fields) != _RECORD_FIELDS:
        raise ImportError("Record's fields are not the ones this module fills")
    for f in fields[2:]:
        if f.default is not (False if f.name == "topic_from_alias" else None):
            raise ImportError(f"Record.{f.name} has an unexpected default")
    return 0


_check_record()
cdef Py_ssize_t R_OFF[NFIELDS]
for _i, _name in enumerate(_RECORD_FIELDS):
    R_OFF[_i] = _offset(Record, _name)
cdef PyTypeObject* RECORD_TYPE = <PyTypeObject*>Record

cdef object _PACKET = "packet"
# Every record made here is of a connection whose MQTT is straight on TCP: a WebSocket
# connection's TCP streams have a websocket.WsDirection as their user, which _segment
# never takes, so all of its records come from the pure code.
cdef object _TCP = "tcp"
cdef tuple _NAMES = PACKET_NAMES
cdef object _DECODING_MODE = DECODING


cdef object _new_record(PyObject** v):
    """A Record with the field values ``v[0:NFIELDS]`` (borrowed), as Record(...) makes."""
    cdef object rec = PyType_GenericAlloc(RECORD_TYPE, 0)
    cdef char* base = <char*><PyObject*>rec
    cdef int i
    for i in range(NFIELDS):
        Py_XINCREF(v[i])
        (<PyObject**>(base + R_OFF[i]))[0] = v[i]
    return rec


# ---------------------------------------------------------------------------------------
# Bytes


cdef inline uint32_t _be16(const uint8_t* p) noexcept:
    return (<uint32_t>p[0] << 8) | p[1]


cdef inline uint32_t _be32(const uint8_t* p) noexcept:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint32_t _u32(const uint8_t* p, bint big) noexcept:
    if big:
        return _be32(p)
    return (<uint32_t>p[3] << 24) | (<uint32_t>p[2] << 16) | (<uint32_t>p[1] << 8) | p[0]


# ---------------------------------------------------------------------------------------
# Link layer, IP and TCP: the common case only (link.py decides everything else)


ctypedef struct _Seg:
    int alen  # 4 or 16
    const uint8_t* src
    const uint8_t* dst
    uint32_t sport, dport, seq, ack, flags
    const uint8_t* payload
    Py_ssize_t caplen  # captured payload bytes
    Py_ssize_t wire_len  # payload bytes on the wire


cdef inline bint _tcp(const uint8_t* d, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t wire_end,
                      _Seg* s) noexcept:
    cdef Py_ssize_t hlen
    if end - pos < 20:
        return False
    hlen = (d[pos + 12] >> 4) * 4
    if hlen < 20 or pos + hlen > end:
        return False
    s.sport = _be16(d + pos)
    s.dport = _be16(d + pos + 2)
    s.seq = _be32(d + pos + 4)
    s.ack = _be32(d + pos + 8)
    s.flags = d[pos + 13]
    s.payload = d + pos + hlen
    s.caplen = end - pos - hlen
    s.wire_len = wire_end - pos - hlen
    return True


cdef inline bint _ipv4(const uint8_t* d, Py_ssize_t n, Py_ssize_t pos, _Seg* s) noexcept:
    cdef Py_ssize_t ihl, total, wire_end, end
    if n - pos < 20 or d[pos] >> 4 != 4:
        return False
    ihl = (d[pos] & 0x0F) * 4
    total = _be16(d + pos + 2)
    if ihl < 20 or (total and total < ihl):
        return False
    # As link.py: a total length of 0 (segmentation offload) means what was captured.
    wire_end = pos + total if total else n
    end = wire_end if wire_end < n else n
    # Not TCP, or a fragment (MF flag or fragment offset): link.py's business.
    if pos + ihl > end or d[pos + 9] != 6 or _be16(d + pos + 6) & 0x3FFF:
        return False
    s.alen = 4
    s.src = d + pos + 12
    s.dst = d + pos + 16
    return _tcp(d, pos + ihl, end, wire_end, s)


cdef inline bint _ipv6(const uint8_t* d, Py_ssize_t n, Py_ssize_t pos, _Seg* s) noexcept:
    cdef Py_ssize_t plen, wire_end, end
    if n - pos < 40 or d[pos] >> 4 != 6 or d[pos + 6] != 6:  # extension headers: link.py
        return False
    plen = _be16(d + pos + 4)
    wire_end = pos + 40 + plen if plen else n
    end = wire_end if wire_end < n else n
    s.alen = 16
    s.src = d + pos + 8
    s.dst = d + pos + 24
    return _tcp(d, pos + 40, end, wire_end, s)


cdef inline bint _by_ethertype(const uint8_t* d, Py_ssize_t n, uint32_t ethertype,
                               Py_ssize_t pos, _Seg* s) noexcept:
    if ethertype == 0x0800:
        return _ipv4(d, n, pos, s)
    if ethertype == 0x86DD:
        return _ipv6(d, n, pos, s)
    return False


cdef bint _parse(const uint8_t* d, Py_ssize_t n, int linktype, _Seg* s) noexcept:
    """The TCP segment in a frame, into ``s``: True in the common case that link.py
    parses the same way; False for everything else (which goes to link.py)."""
    cdef uint32_t ethertype, family
    cdef Py_ssize_t pos
    if linktype == 1:  # Ethernet, with any number of VLAN tags
        if n < 14:
            return False
        ethertype = _be16(d + 12)
        pos = 14
        while ethertype == 0x8100 or ethertype == 0x88A8 or ethertype == 0x9100:
            if n - pos < 4:
                return False
            ethertype = _be16(d + pos + 2)
            pos += 4
        return _by_ethertype(d, n, ethertype, pos, s)
    if linktype == 113:  # Linux SLL
        return n >= 16 and _by_ethertype(d, n, _be16(d + 14), 16, s)
    if linktype == 276:  # Linux SLL2
        return n >= 20 and _by_ethertype(d, n, _be16(d), 20, s)
    if linktype == 101 or linktype == 12 or linktype == 14:  # raw IP
        if n < 1:
            return False
        if d[0] >> 4 == 4:
            return _ipv4(d, n, 0, s)
        return _ipv6(d, n, 0, s)
    if linktype == 228:
        return _ipv4(d, n, 0, s)
    if linktype == 229:
        return _ipv6(d, n, 0, s)
    if linktype == 0 or linktype == 108:  # BSD null / OpenBSD loopback
        if n < 4:
            return False
        family = _be32(d)
        if family == 2 or family == 2 << 24:
            return _ipv4(d, n, 4, s)
        if (family == 10 or family == 24 or family == 28 or family == 30
                or family == 10 << 24 or family == 24 << 24 or family == 28 << 24
                or family == 30 << 24):
            return _ipv6(d, n, 4, s)
    return False


def flow_key(int linktype, data):
    """The key of the TCP connection of the frame ``data`` (of link type ``linktype``):
    its two ends (address and port) in a fixed order, the same both ways, as
    :func:`mqttwire.spark.split.flow_key` makes it from link.py's segment; None when
    the frame is not the common case that :func:`_parse` reads the way link.py does
    (then link.py must say what it is)."""
    cdef const uint8_t[::1] view = data
    cdef _Seg s
    cdef Py_ssize_t n = view.shape[0]
    cdef bytes a, b
    if n == 0 or not _parse(&view[0], n, linktype, &s):
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
    MAX_IFACES = 16

ctypedef struct _Iface:
    bint fast  # its timestamps convert in 64 bits (mul, div, shift, offset all fit)
    int linktype
    int64_t mul, div, offset_ns
    int shift



cdef Py_ssize_t _load_ifaces(_Iface* table, interfaces) except -1:
    """Copy a pcapng section's interfaces (pcap._Interface) into ``table`` (MAX_IFACES
    entries): each link type and, when they fit in 64 bits, its time conversion's terms.
    Returns how many interfaces the section has."""
    cdef _Iface* it
    cdef Py_ssize_t i, n = len(interfaces)
    for i in range(min(n, MAX_IFACES)):
        iface = interfaces[i]
        it = &table[i]
        it.linktype = iface.linktype
        it.fast = all(type(v) is int and -(1 << 62) < v < (1 << 62)
                      for v in (iface.mul, iface.div, iface.offset_ns, iface.shift))
        if it.fast:
            it.mul, it.div, it.offset_ns = iface.mul, iface.div, iface.offset_ns
            it.shift = iface.shift
            it.fast = it.mul > 0 and it.div > 0 and 0 <= it.shift < 64
    return n


cdef inline bint _epb_ns(const _Iface* it, const uint8_t* h, bint big, int64_t* ns) noexcept:
    """The time of the Enhanced Packet Block at ``h``, captured on ``it``, in ns, as
    _Interface.ns computes it, into ``ns``; False when that does not fit in 64 bits (the
    caller hands the block to the pure reader).  units * mul never exceeds 2**61."""
    cdef uint64_t units = (<uint64_t>_u32(h + 12, big) << 32) | _u32(h + 16, big)
    cdef int64_t ts
    if not it.fast or units > <uint64_t>(INT64_MAX // 4 // it.mul):
        return False
    if it.shift:
        ts = (<int64_t>units * it.mul) >> it.shift
    else:
        ts = <int64_t>units * it.mul // it.div
    if not -(1LL << 61) < ts + it.offset_ns < (1LL << 61):
        return False
    ns[0] = ts + it.offset_ns
    return True

cdef inline uint64_t _hash(_Seg* s) noexcept:
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


cdef class PacketColumns  # below: the columnar output of FastReader.fill


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
    cdef _Iface ifaces[MAX_IFACES]
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
        caplen = _u32(h + 8, self.big)
        if caplen > MAX_FRAME:
            raise _pcap_implausible(self.src, self.base + self.pos, caplen)
        if self.pos + 16 + <Py_ssize_t>caplen > self.n:
            _pcap_more_data(self.src, self.pos, caplen)
            self._reload()
            h = self.p
        self.index += 1
        self.ts = PyLong_FromLongLong(<int64_t>_u32(h, self.big) * 1_000_000_000
                                      + <int64_t>_u32(h + 4, self.big) * self.scale)
        start = self.pos + 16
        self.pos = start + caplen
        self._process(start, caplen, self.linktype)
        return True

    cdef int _load_interfaces(self) except -1:
        """Copy the current section's byte order and interfaces from the pcapng reader."""
        ng = self.ng
        self.big = ng.endian == ">"
        self.section_seen = ng.section_seen
        self.n_ifaces = _load_ifaces(self.ifaces, ng.interfaces)
        return 0

    cdef bint _pcapng_block(self) except -1:
        """Read and process the pcapng block at ``pos``: False at the end.  A plain EPB
        is read here; any other block, or an EPB with anything unusual (too short,
        lengths that disagree, an unknown interface, a timestamp that does not convert
        in 64 bits), goes to ``_Pcapng.block``, which raises the errors."""
        cdef const uint8_t* h = self.p + self.pos
        cdef uint32_t total, caplen, if_id
        cdef _Iface* it
        cdef int64_t ts
        if self.n - self.pos >= 32 and self.section_seen:
            total = _u32(h + 4, self.big)
            if (_u32(h, self.big) == 6 and total >= 32 and not total & 3
                    and total <= MAX_FRAME and total <= self.n - self.pos
                    and _u32(h + total - 4, self.big) == total):
                if_id = _u32(h + 8, self.big)
                caplen = _u32(h + 20, self.big)
                if if_id < self.n_ifaces and if_id < MAX_IFACES and caplen <= total - 32:
                    it = &self.ifaces[if_id]
                    if _epb_ns(it, h, self.big, &ts):
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
        cdef _Seg seg
        if not _parse(self.p + start, caplen, linktype, &seg) or not self._segment(&seg):
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

    cdef object _stream(self, _Seg* s):
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

    cdef bint _segment(self, _Seg* s) except -1:
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

    cdef list _framed(self, Py_ssize_t count):
        return [(self.fr_start[i], self.fr_b0[i], self.fr_size[i]) for i in range(count)]

    cdef int _decode(self, object direction, int64_t offset, const uint8_t* d,
                     Py_ssize_t n) except -1:
        """Direction.decode in C, for a direction that is decoding and framing."""
        cdef Py_ssize_t count = self._framing(direction, offset, d, n)
        cdef Py_ssize_t i
        cdef list packets
        data = PyBytes_FromStringAndSize(<const char*>d, n)
        try:
            packets = (<object>_get(direction, D_DEC)).feed(data)
        except MQTTWireError as exc:
            self._sync_frame()
            rest = direction.failed(exc, self._framed(count), self.ts, offset, data)
            if rest is not None:  # decoding resumes after a bad packet, in this segment
                direction.decode(rest[0], rest[1], self.ts)
            return 0
        if PyList_GET_SIZE(packets) != count:
            self._sync_frame()
            direction.decoded(packets, self._framed(count), self.ts)
            return 0
        if count:
            self._records(direction, packets, count)
        return 0

    cdef int _records(self, object direction, list packets, Py_ssize_t count) except -1:
        """Direction.packet_records in C for PUBLISH, PUBACK/PUBREC/PUBREL/PUBCOMP, PINGREQ
        and PINGRESP; the other packet types go to it one by one."""
        cdef PyObject* v[NFIELDS]
        cdef Py_ssize_t i
        cdef int b0, ptype
        cdef list out = self.out
        # Python objects all (Cython would infer C types for some): v points at them.
        cdef object conn, tcp_stream, ts, frame, limit, client_id, version, packet, offset
        cdef object length, flags, payload, qos, retain, dup, packet_id, payload_length
        cdef object cut, props, topic, alias, aliases, reason_code, source
        conn = <object>_get(direction, D_CONN)
        ts = self.ts
        frame = self.index
        limit = self.payload_limit
        v[F_KIND] = <PyObject*>_PACKET
        v[F_CAPTURE] = <PyObject*>self.capture
        v[F_TS] = <PyObject*>ts
        v[F_FRAME] = <PyObject*>frame
        v[F_CONNECTION_ID] = _get(conn, M_ID)
        v[F_DIRECTION] = _get(direction, D_NAME)
        v[F_SRC_IP] = _get(direction, D_SRC_IP)
        v[F_DST_IP] = _get(direction, D_DST_IP)
        tcp_stream = <object>_get(direction, D_STREAM)
        v[F_SRC_PORT] = _get(tcp_stream, S_SPORT)
        v[F_DST_PORT] = _get(tcp_stream, S_DPORT)
        client_id = <object>_get(conn, M_CLIENT_ID)
        version = <object>_get(conn, M_VERSION)
        source = <object>_get(conn, M_VERSION_SOURCE)
        v[F_VERSION_SOURCE] = <PyObject*>source
        v[F_TRANSPORT] = <PyObject*>_TCP
        for i in range(count):
            packet = <object>PyList_GET_ITEM(packets, i)
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
                out.append(_new_record(v))
            else:
                if PyList_GET_SIZE(out):
                    self._drain()
                self.sink.fast_record(v)
        return 0



# ---------------------------------------------------------------------------------------
# A split capture's range as a pcapng section per connection (sections.py; the pure
# twin: sections.sections_pure)


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
    cdef _Iface ifaces[MAX_IFACES]
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
        self.n_ifaces = _load_ifaces(self.ifaces, interfaces)
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
        cdef _Iface* it
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
                total = _u32(h + 4, self.big)
                if _u32(h, self.big) != 6 or total < 32 or total & 3 or total > MAX_FRAME:
                    return -1
                if total > n - pos:
                    return pos
                if _u32(h + total - 4, self.big) != total:
                    return -1
                if_id = _u32(h + 8, self.big)
                caplen = _u32(h + 20, self.big)
                if if_id >= self.n_ifaces or if_id >= MAX_IFACES or caplen > total - 32:
                    return -1
                it = &self.ifaces[if_id]
                if not _epb_ns(it, h, self.big, &ts):
                    return -1
                self.count += 1
                if self._frame(h + 28, caplen, it.linktype, ts, data, pos + 28) < 0:
                    return -1
                pos += total
            else:
                if n - pos < 16:
                    return pos
                h = p + pos
                caplen = _u32(h + 8, self.big)
                if caplen > MAX_FRAME:
                    return -1
                if pos + 16 + <Py_ssize_t>caplen > n:
                    return pos
                ts = (<int64_t>_u32(h, self.big) * 1_000_000_000
                      + <int64_t>_u32(h + 4, self.big) * self.scale)
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
        cdef _Seg s
        cdef uint8_t a[18]
        cdef uint8_t b[18]
        cdef uint8_t k[36]
        cdef int half
        cdef _Packed piece
        self.ts = ts
        self.have_ts = True
        if caplen and _parse(d, caplen, linktype, &s):
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
# Columns: the packets table's Arrow buffers, filled from each record's fields without a
# Record object (mqttwire/capture/arrow.py assembles them; the spark pipeline's tasks use
# them through mqttwire/spark/columnar.py)

#: The value kinds of a column, one byte each (as spark/columns_c.KINDS): int8, int32,
#: int64, timestamp in microseconds from nanoseconds, bool, double, string, binary; "o"
#: keeps the Python values in a list (the list columns, which only rare packets fill).
COLUMN_KINDS = b"bilt?dsyo"

# What a column holds beyond its field's value.
cdef enum:
    AS_FIELD = 0  # the field's value
    AS_PACKET_ONLY = 1  # the value for packet records, else null (topic_from_alias)
    AS_JSON = 2  # the field's value through the json callable, None staying null

# The function a deriver offers (a capsule named TAKE_CAPSULE): take a record's fields
# (RECORD_FIELDS order) into the derived tables, 1 if taken, 0 to have tables.add take
# the record itself; -1 with an exception set.
ctypedef int (*_take_fn)(object deriver, object tables, PyObject** v) except -1
TAKE_CAPSULE = b"mqttwire.spark.derive_c.take"
cdef const char* _TAKE_NAME = "mqttwire.spark.derive_c.take"

cdef extern from "Python.h":
    void* PyCapsule_GetPointer(object capsule, const char* name) except? NULL
    object PyCapsule_New(void* pointer, const char* name, void* destructor)
    double PyFloat_AS_DOUBLE(object value)

#: The name of :func:`row_capsule`'s capsule.
ROW_CAPSULE = b"mqttwire.capture.loop_c.row"
cdef const char* _ROW_NAME = "mqttwire.capture.loop_c.row"


ctypedef struct _Col:
    char kind
    int field
    int how
    Py_ssize_t nulls
    uint8_t* valid
    char* values  # fixed-width values, or a bool bitmap
    int32_t* offs
    char* data  # string or binary bytes
    Py_ssize_t used, room  # of data


cdef int _grow_to(void** p, Py_ssize_t size) except -1:
    cdef void* q = PyMem_Realloc(p[0], size if size > 0 else 1)
    if q == NULL:
        raise MemoryError()
    p[0] = q
    return 0


cdef inline int _width(char kind) noexcept:
    return 1 if kind == b"b" else 4 if kind == b"i" else 8


cdef class PacketColumns:
    """The rows of a table of records (the packets table), column by column, in Arrow's
    buffer layouts: ``columns[c]`` is (field name, kind byte, how) with ``how`` 0 for the
    field's value, 1 for the value of packet records only (null for others) and 2 for
    the value through ``json`` (None staying null); or (column name, kind byte, 0,
    index) for a row of other values than a record's, ``index`` its place in the array
    of values that :func:`row_capsule`'s function takes (the derived messages table's
    columns, filled by mqttwire/spark/derive_c.pyx).  The compiled loop fills it as it
    decodes (:meth:`FastReader.fill`), from the same values it would put in a Record; a
    record made by the pure code is taken by :meth:`add_record`.

    With ``tables`` and a deriver (:meth:`derive_into`), every record (kind "end" too,
    which has no row) is also given to the derived tables: to the deriver's compiled
    function first, else, as a Record, to ``tables.add``.  :attr:`fallbacks` counts the
    records of the fast path that had to be made as Records for ``tables.add``;
    :attr:`side` the records that the pure code made."""

    cdef _Col* cols
    cdef Py_ssize_t ncols, n, cap
    cdef list objects  # per "o" column: {row: value}
    cdef object json
    cdef object tables, deriver
    cdef _take_fn take
    cdef readonly long long fallbacks, side, fast, packets
    cdef readonly tuple names

    def __cinit__(self):
        self.cols = NULL

    def __init__(self, columns, json=None):
        cdef Py_ssize_t c
        cdef _Col* col
        columns = list(columns)
        self.ncols = len(columns)
        self.cols = <_Col*>PyMem_Realloc(NULL, sizeof(_Col) * max(self.ncols, 1))
        if self.cols == NULL:
            raise MemoryError()
        memset(self.cols, 0, sizeof(_Col) * max(self.ncols, 1))
        self.objects = []
        self.json = json
        names = []
        for c, spec in enumerate(columns):
            name, kind, how = spec[:3]
            col = &self.cols[c]
            if len(kind) != 1 or kind not in COLUMN_KINDS:
                raise ValueError(f"column {name}: kind {kind!r} is not one of {COLUMN_KINDS!r}")
            if len(spec) == 4:
                if not 0 <= spec[3] < 64 or how != AS_FIELD:
                    raise ValueError(f"column {name}: a value index from 0 to 63, taken as it is")
                col.field = spec[3]
            elif name not in _RECORD_FIELDS:
                raise ValueError(f"column {name}: not a Record field")
            else:
                col.field = _RECORD_FIELDS.index(name)
            if how == AS_JSON and json is None:
                raise ValueError(f"column {name}: no json callable")
            col.kind = (<bytes>kind)[0]
            col.how = how
            names.append(name)
            self.objects.append({})
        self.names = tuple(names)
        self._room(1024)

    def __dealloc__(self):
        cdef Py_ssize_t c
        if self.cols != NULL:
            for c in range(self.ncols):
                PyMem_Free(self.cols[c].valid)
                PyMem_Free(self.cols[c].values)
                PyMem_Free(self.cols[c].offs)
                PyMem_Free(self.cols[c].data)
            PyMem_Free(self.cols)

    def __len__(self):
        return self.n

    def derive_into(self, tables, deriver, capsule):
        """Give every record to ``tables`` as well: to ``capsule``'s function (named
        TAKE_CAPSULE) with ``deriver`` first, else to ``tables.add``.  None: to none."""
        if tables is None:
            self.tables = self.deriver = None
            self.take = NULL
            return
        self.take = <_take_fn>PyCapsule_GetPointer(capsule, _TAKE_NAME)
        self.tables = tables
        self.deriver = deriver

    cdef int _room(self, Py_ssize_t cap) except -1:
        cdef Py_ssize_t c
        cdef _Col* col
        for c in range(self.ncols):
            col = &self.cols[c]
            if col.kind == b"o":
                continue
            _grow_to(<void**>&col.valid, (cap + 7) // 8)
            if col.kind == b"s" or col.kind == b"y":
                _grow_to(<void**>&col.offs, (cap + 1) * 4)
                col.offs[0] = 0
            elif col.kind == b"?":
                _grow_to(<void**>&col.values, (cap + 7) // 8)
            else:
                _grow_to(<void**>&col.values, cap * _width(col.kind))
        self.cap = cap
        return 0

    cdef int _data(self, _Col* col, const char* p, Py_ssize_t size) except -1:
        cdef Py_ssize_t need = col.used + size
        if size > INT32_MAX - col.used:  # 32-bit offsets: the caller takes smaller batches
            raise OverflowError("more than 2 GiB of bytes in one column of a batch")
        if need > col.room:
            col.room = max(need, 2 * col.room, 65536)
            _grow_to(<void**>&col.data, col.room)
        memcpy(col.data + col.used, p, size)
        col.used = need
        return 0

    cdef int row(self, PyObject** v) except -1:
        """Append the row of the record whose fields are ``v`` (RECORD_FIELDS order)."""
        cdef Py_ssize_t i = self.n, c, size
        cdef _Col* col
        cdef PyObject* x
        cdef long long y
        cdef int overflow
        cdef const char* p
        cdef uint8_t bit = 1 << (i & 7)
        cdef Py_ssize_t byte = i >> 3
        if i == self.cap:
            self._room(2 * self.cap)
        if v[F_KIND] == <PyObject*>_PACKET or _is_str(v[F_KIND], "packet"):
            self.packets += 1
        for c in range(self.ncols):
            col = &self.cols[c]
            x = v[col.field]
            if col.how == AS_PACKET_ONLY and not (
                    v[F_KIND] == <PyObject*>_PACKET or _is_str(v[F_KIND], "packet")):
                x = NULL
            if col.kind == b"o":
                if x != NULL and x != Py_None:
                    (<dict>PyList_GET_ITEM(self.objects, c))[i] = <object>x
                continue
            if bit == 1:
                col.valid[byte] = 0
                if col.kind == b"?":
                    col.values[byte] = 0
            if x == NULL or x == Py_None:
                col.nulls += 1
                if col.offs != NULL:
                    col.offs[i + 1] = <int32_t>col.used
                elif col.kind != b"?":
                    memset(col.values + i * _width(col.kind), 0, _width(col.kind))
                continue
            col.valid[byte] |= bit
            if col.how == AS_JSON:
                text = self.json(<object>x)
                if text is None:
                    col.valid[byte] &= ~bit
                    col.nulls += 1
                    col.offs[i + 1] = <int32_t>col.used
                    continue
                p = PyUnicode_AsUTF8AndSize(text, &size)
                self._data(col, p, size)
                col.offs[i + 1] = <int32_t>col.used
            elif col.kind == b"s":
                if type(<object>x) is not str:
                    raise TypeError(f"{self.names[c]}: not a str")
                p = PyUnicode_AsUTF8AndSize(<object>x, &size)
                self._data(col, p, size)
                col.offs[i + 1] = <int32_t>col.used
            elif col.kind == b"y":
                if type(<object>x) is not bytes:
                    raise TypeError(f"{self.names[c]}: not bytes")
                self._data(col, PyBytes_AS_STRING(<object>x), PyBytes_GET_SIZE(<object>x))
                col.offs[i + 1] = <int32_t>col.used
            elif col.kind == b"?":
                if x == Py_True:
                    col.values[byte] |= bit
                elif x != Py_False:
                    raise TypeError(f"{self.names[c]}: not a bool")
            elif col.kind == b"d":
                if type(<object>x) is not float:
                    raise TypeError(f"{self.names[c]}: not a float")
                (<double*>col.values)[i] = PyFloat_AS_DOUBLE(<object>x)
            else:
                if type(<object>x) is not int:
                    raise TypeError(f"{self.names[c]}: not an int")
                y = PyLong_AsLongLongAndOverflow(<object>x, &overflow)
                if overflow:
                    raise OverflowError(f"{self.names[c]}: out of range")
                if col.kind == b"b":
                    if y < -128 or y > 127:
                        raise OverflowError(f"{self.names[c]}: out of range")
                    (<int8_t*>col.values)[i] = <int8_t>y
                elif col.kind == b"i":
                    if y < -2147483648 or y > 2147483647:
                        raise OverflowError(f"{self.names[c]}: out of range")
                    (<int32_t*>col.values)[i] = <int32_t>y
                elif col.kind == b"t":
                    # Nanoseconds to microseconds, rounded down as Python's // does.
                    (<int64_t*>col.values)[i] = y // 1000
                else:
                    (<int64_t*>col.values)[i] = y
        self.n = i + 1
        return 0

    cdef int fast_record(self, PyObject** v) except -1:
        """A record of the compiled loop, never made as a Record unless the derived
        tables need it."""
        self.fast += 1
        self.row(v)
        if self.tables is not None and not self.take(self.deriver, self.tables, v):
            self.fallbacks += 1
            self.tables.add(_new_record(v))
        return 0

    def add_record(self, rec):
        """A Record (of the pure code): its row, unless it is a stream end, and its
        derived tables' part."""
        cdef PyObject* v[NFIELDS]
        cdef char* base
        cdef int i
        if type(rec) is not Record:
            raise TypeError("add_record takes a Record")
        base = <char*><PyObject*>rec
        for i in range(NFIELDS):
            v[i] = (<PyObject**>(base + R_OFF[i]))[0]
        self.side += 1
        if not _is_str(v[F_KIND], "end"):
            self.row(v)
        if self.tables is not None and not self.take(self.deriver, self.tables, v):
            self.tables.add(rec)

    def take_buffers(self):
        """The columns of the rows so far, and start again: for each column (null count,
        validity bitmap or None, values, offsets or None) as bytes; for an "o" column
        ("objects", {row: value}) of its values that are not None."""
        cdef Py_ssize_t c, n = self.n
        cdef _Col* col
        out = []
        for c in range(self.ncols):
            col = &self.cols[c]
            if col.kind == b"o":
                out.append(("objects", self.objects[c]))
                self.objects[c] = {}
                continue
            validity = (PyBytes_FromStringAndSize(<char*>col.valid, (n + 7) // 8)
                        if col.nulls else None)
            if col.offs != NULL:
                values = PyBytes_FromStringAndSize(col.data, col.used)
                offsets = PyBytes_FromStringAndSize(<char*>col.offs, (n + 1) * 4)
            elif col.kind == b"?":
                values = PyBytes_FromStringAndSize(col.values, (n + 7) // 8)
                offsets = None
            else:
                values = PyBytes_FromStringAndSize(col.values, n * _width(col.kind))
                offsets = None
            out.append((col.nulls, validity, values, offsets))
            col.nulls = 0
            col.used = 0
        self.n = 0
        self.packets = 0
        return out


cdef inline bint _is_str(PyObject* value, str text) noexcept:
    """Whether ``value`` is the str ``text`` (the same object, or an equal str)."""
    return value == <PyObject*>text or (value != NULL and type(<object>value) is str
                                        and <str>value == text)


cdef int _row(object columns, PyObject** v) except -1:
    return (<PacketColumns>columns).row(v)


def row_capsule():
    """The C function that appends a row to a :class:`PacketColumns`: ``int row(columns,
    PyObject** values)``, the values in the order of its columns' indices; in a capsule
    named ROW_CAPSULE (for the derived tables' compiled code)."""
    return PyCapsule_New(<void*>_row, _ROW_NAME, NULL)
