"""The common records of :class:`mqttwire.spark.derive.CaptureTables`, in C: the compiled
half of derive.py, which holds the reference (``CaptureTables.add``) and decides when
this module is used.

Most records of a capture are PUBLISH and PUBACK packets of connections that are already
open, and for each the reference reads a dozen attributes and updates a few dicts: the
derived tables were the largest step of a decoding task (benchmarks/history/capture.md).
:meth:`Deriver.add_many` takes such a record itself: it reads the record's fields and the
connection's state at their slot offsets (as the member descriptors do, without the
attribute look-up) and makes or completes the messages row with the dict C API, exactly
as ``add`` would.  Every other record goes to ``CaptureTables.add``, in its place in the
order: a stream end, a gap or an error, a connection's first record or first time, a
changed client id or level, a packet other than PUBLISH and PUBACK, a PUBLISH whose
exchange is a retransmission (DUP), that reuses a pending packet id or that changes the
retained store, a PUBACK that does not simply complete the pending exchange of its
packet id, and any record of a connection with steps held for a record still to come
(CaptureTables._step: the two directions out of step).  Before it changes anything, a
record is checked to be one it takes, so handing it over is always
possible.  tests/spark/test_derive_compiled.py compares the rows both ways, and
tests/spark/test_derive.py runs its cases both ways.

What the records taken here change in a connection's state is partly kept here, in C,
until Python code may look at it (:meth:`Deriver._flush`): the packet and byte counters
(C integers added to the connection's slots then) and the pending QoS 1 and 2 exchanges
of the PUBLISHes taken here (entries of a hash table keyed by connection, direction
and packet id, that become the row dicts of ``_Conn.pending`` then, in the order
taken, after those already there).  Python code looks at a connection's state only in
``CaptureTables.add`` of a record of that connection and in ``CaptureTables.finish``:
the state is given back before each record handed over (of that connection), at the
end of :meth:`Deriver.add_many` and in :meth:`Deriver.materialize_all`.
"""

from cpython.dict cimport PyDict_Copy, PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF, Py_XINCREF
from cpython.float cimport PyFloat_FromDouble
from libc.stdint cimport int32_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy, memset
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New

from .._cdefs cimport Py_False, Py_None, Py_True, long_value, object_slot_offset
from .._cdefs cimport slot_get as _get, slot_put as _put, uint_in_range

cimport cython

from ..capture.shared_slots import RECORD_FIELDS

__all__ = ["CONN_SLOTS", "RECORD_SLOTS", "TAKE_CAPSULE", "Deriver"]

#: The name of the capsule of :meth:`Deriver.capsule` (the compiled capture loop's
#: arrow_c.TAKE_CAPSULE).
TAKE_CAPSULE = b"mqttwire.spark.derive_c.take"
cdef const char* _TAKE_NAME = "mqttwire.spark.derive_c.take"

# PacketColumns' row function (mqttwire.capture.arrow_c.row_capsule): a messages row
# written into Arrow columns from an array of its values, in the columns' order.
ctypedef int (*_row_fn)(object columns, PyObject** v) except -1
cdef const char* _ROW_NAME = "mqttwire.capture.arrow_c.row"

cdef extern from "Python.h":
    void* PyCapsule_GetPointer(object capsule, const char* name) except? NULL

# Fibonacci hashing: the top ``64 - shift`` bits of x times 2**64 / phi, a bucket index
# that mixes every bit of x (a pointer's low bits are its alignment, a packet id's high
# bits are mostly zero).
cdef extern from *:
    """
    static inline uint32_t mqttwire_mix(uint64_t x, int shift) {
        return (uint32_t)((x * 0x9E3779B97F4A7C15ULL) >> shift);
    }
    """
    uint32_t _mix "mqttwire_mix"(uint64_t x, int shift) noexcept nogil

#: The messages columns that a PUBLISH sets (CaptureTables._publish; the others are its
#: connection's template's), then those that its PUBACK sets (CaptureTables._done).
_PUBLISH_KEYS = ("direction", "ts", "frame", "stream_offset", "topic", "topic_from_alias",
                 "qos", "retain", "dup", "packet_id", "payload_length", "payload",
                 "status", "puback_ts", "ack_reason_code", "completed_ts", "latency_ms")
cdef object _COMPLETE = "complete"
cdef object _FAILED = "failed"
cdef object _INCOMPLETE = "incomplete"
cdef object _C2S = "c2s"
cdef object _S2C = "s2c"
# A held exchange's QoS level as the int object the row holds (0 to 2: small ints, the
# same objects as the record's).
cdef tuple _QOS = (0, 1, 2)

# The templates' values by column (message_columns): a direct-mapped cache keyed by the
# template dict (a strong reference, so that the values it points at stay alive; a
# template is never changed once made: CaptureTables._identity makes a new one).
ctypedef struct _Template:
    PyObject* template
    PyObject* values[64]

cdef enum:
    TEMPLATES = 64

# -- the state held in C ------------------------------------------------------------------
#
# Measured with callgrind (benchmarks: instructions a packet of small.pcap): as Python
# objects, a QoS 1 PUBLISH's pending entry (an object, its tuple key, the dict insertion)
# cost about 900 instructions and its completion 1,280 beyond its row, and the four
# counters' int additions and slot writes were paid on every record.  Here an entry is a
# struct in an array with a free list, found by a chained hash table of indices (slabs
# grow by realloc: indices, never pointers, are kept across an insertion).  A decoding
# task's work went from 8,079 to 6,770 instructions a packet (small.pcap: a third each
# QoS 0 PUBLISH, QoS 1 PUBLISH and PUBACK), about 280 of it the counters'.

# A connection with state held here (the entries of Deriver.states).
ctypedef struct _State:
    PyObject* conn          # a strong reference (its address is the key); NULL: free
    int32_t hnext           # the next entry of its hash bucket, or of the free list
    int32_t first, last     # its exchanges (Deriver.exchanges), in the order taken
    long long packets[2]    # counted here, not yet in its slots: [c2s, s2c]
    long long bytes[2]

# The values of a pending exchange's PUBLISH that are objects (strong references), by
# index: the connection's messages template, then the record's fields.
cdef enum:
    E_TEMPLATE, E_TS, E_FRAME, E_OFFSET, E_TOPIC, E_ALIAS, E_PACKET_ID, E_PAYLOAD_LENGTH
    E_PAYLOAD, E_VALUES

# A pending QoS 1 or 2 exchange whose PUBLISH was taken here (Deriver.exchanges).
ctypedef struct _Exchange:
    int32_t state           # its connection's entry of Deriver.states; -1: free
    uint32_t key            # its PUBLISH's direction (S2C_KEY or 0) | packet id
    int32_t hnext           # the next entry of its hash bucket, or of the free list
    int32_t prev, next      # its connection's exchanges, in the order taken
    int qos
    bint retain, dup
    PyObject* values[E_VALUES]

cdef enum:
    S2C_KEY = 0x10000  # in _Exchange.key: its PUBLISH went from the server
    FIRST_ROOM = 16  # entries and buckets of each table to start with

# The bookkeeping of one of those tables: an array of entries with a free list, and the
# buckets of its hash table (entry indices; ``1 << bits`` of them, at least as many as
# the entries in use).
ctypedef struct _Slab:
    int32_t* buckets
    int bits
    int32_t live, room, free


cdef int _slab_buckets(_Slab* t, int bits) except -1:
    """New empty buckets, ``1 << bits`` of them (the caller puts the entries back)."""
    cdef int32_t* b = <int32_t*>PyMem_Malloc(sizeof(int32_t) << bits)
    if b == NULL:
        raise MemoryError()
    memset(b, 0xFF, sizeof(int32_t) << bits)  # every bucket -1: empty
    PyMem_Free(t.buckets)
    t.buckets = b
    t.bits = bits
    return 0


cdef inline uint64_t _state_hash(PyObject* conn) noexcept:
    return <uint64_t><uintptr_t>conn


cdef inline uint64_t _exchange_hash(int32_t state, uint32_t key) noexcept:
    return (<uint64_t>state << 17) | key

# A PUBACK or PUBREC reason code from 0x80 up is a failure (MQTT 5.0 §2.4): derive.REJECTED;
# as an object too, so that a completion compares it without making the int.
cdef int REJECTED = 0x80
cdef object _REJECTED = REJECTED
# A record's length that the byte counters add in C: below 2**31 (an MQTT packet is at most
# 268,435,460 bytes, MQTT 5.0 §1.5.5), so that no sum of 2**32 records overflows a long
# long; a larger one goes to CaptureTables.add.
cdef long long MAX_LENGTH = (<long long>1) << 31
# The times whose differences _latency takes in C (nanoseconds since the epoch: 2**62 is
# the year 2116), so that the difference cannot overflow.
cdef long long MAX_TIME = (<long long>1) << 62

# A record's fields as an array of (borrowed) pointers, in RECORD_FIELDS order: as the
# compiled capture loop holds them before it makes a Record, and as add_many reads them
# out of a Record's slots.
cdef enum:
    MAX_FIELDS = 64

#: The record fields read here (all of them slots of the record class).
RECORD_SLOTS = ("kind", "ts", "frame", "connection_id", "direction", "length", "client_id",
                "protocol_version", "version_source", "packet_type", "qos", "retain", "dup",
                "packet_id", "topic", "topic_from_alias", "stream_offset", "payload_length",
                "payload", "reason_code")
#: The connection slots read and written here (see derive._Conn).
CONN_SLOTS = ("bytes_c2s", "bytes_s2c", "client_id", "frame_c2s", "frame_s2c", "held",
              "last_ts", "message", "older", "packets_c2s", "packets_s2c", "pending",
              "source", "version")


cdef Py_ssize_t _offset(type cls, str name) except -1:
    """The offset of the writable object slot ``name`` in instances of ``cls``."""
    cdef Py_ssize_t offset = object_slot_offset(cls.__dict__.get(name), True)
    if offset == -1:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    if offset == -2:
        raise TypeError(f"{cls.__name__}.{name} is not a writable object slot")
    return offset


cdef inline bint _is(PyObject* value, str text) noexcept:
    """Whether ``value`` is the str ``text`` (the same object, or an equal str)."""
    return value == <PyObject*>text or (value != NULL and type(<object>value) is str
                                        and <str>value == text)


cdef inline bint _later(PyObject* a, PyObject* b) except -1:
    """``a > b`` as Python compares them: in C where both are ints of a C long long (the
    frames of a capture)."""
    cdef int overflow = 0
    cdef long long x, y
    if type(<object>a) is int and type(<object>b) is int:
        x = long_value(<object>a, &overflow)
        y = long_value(<object>b, &overflow)
        if not overflow:
            return x > y
    return <object>a > <object>b


cdef object _latency(PyObject* ts, PyObject* first):
    """CaptureTables._done's latency_ms: ``(ts - first) / 1e6``, None where either is
    None; in C where both are ints below 2**62 (a time in nanoseconds: its difference is
    exact, and its conversion to a double rounds as int.__truediv__ does)."""
    cdef int overflow = 0
    cdef long long x, y
    if ts == Py_None or first == Py_None:
        return None
    if type(<object>ts) is int and type(<object>first) is int:
        x = long_value(<object>ts, &overflow)
        y = long_value(<object>first, &overflow)
        if not overflow and -MAX_TIME < x < MAX_TIME and -MAX_TIME < y < MAX_TIME:
            return PyFloat_FromDouble(<double>(x - y) / 1e6)
    return (<object>ts - <object>first) / 1e6


@cython.final
cdef class Deriver:
    """The compiled path of ``CaptureTables.add_many`` for records of the class
    ``record_cls`` and connection state of the class ``conn_cls`` (slots: RECORD_SLOTS,
    CONN_SLOTS); a TypeError when a slot is missing or not a writable object slot."""

    cdef type record_cls
    cdef type conn_cls
    # record fields: their indices in a fields array (RECORD_FIELDS order)
    cdef Py_ssize_t r_kind, r_ts, r_frame, r_conn, r_direction, r_length, r_client_id, r_version
    cdef Py_ssize_t r_source, r_ptype, r_qos, r_retain, r_dup, r_packet_id, r_topic
    cdef Py_ssize_t r_alias, r_offset, r_payload_length, r_payload, r_code
    # where each of RECORD_SLOTS is: its index in a fields array, its record slot offset
    cdef Py_ssize_t index[32]
    cdef Py_ssize_t slot[32]
    # messages columns (message_columns): where its rows go instead of dicts
    cdef object mcols
    cdef _row_fn mrow
    cdef tuple mkeys
    cdef Py_ssize_t nm
    cdef Py_ssize_t m_at[17]  # the index of each of _PUBLISH_KEYS among mkeys
    cdef _Template* templates
    # connection state
    cdef Py_ssize_t c_bytes_c2s, c_bytes_s2c, c_client_id, c_frame_c2s, c_frame_s2c
    cdef Py_ssize_t c_held, c_last_ts, c_message, c_older, c_packets_c2s, c_packets_s2c
    cdef Py_ssize_t c_pending, c_source, c_version
    # The capsule's function: the tables it was last given, their _conns and messages
    # (CaptureTables makes both once and never rebinds them).
    cdef object seen_tables
    cdef dict seen_conns
    cdef list seen_messages
    # The state held in C (module docstring): the connections', and their exchanges'.
    cdef _State* states
    cdef _Slab ss
    cdef _Exchange* exchanges
    cdef _Slab xs
    # The connection whose state _state_find found last, and its entry.
    cdef PyObject* last_conn
    cdef int32_t last_state

    def __cinit__(self):
        self.states = NULL
        self.exchanges = NULL
        self.ss.buckets = self.xs.buckets = NULL
        self.ss.bits = self.xs.bits = 0
        self.ss.live = self.ss.room = self.xs.live = self.xs.room = 0
        self.ss.free = self.xs.free = -1
        self.last_conn = NULL
        self.last_state = -1

    def __init__(self, type record_cls, type conn_cls):
        cdef Py_ssize_t i
        self.record_cls = record_cls
        self.conn_cls = conn_cls
        if len(RECORD_FIELDS) > MAX_FIELDS or any(name not in RECORD_FIELDS
                                                  for name in RECORD_SLOTS):
            raise TypeError("RECORD_SLOTS are not among shared_slots.RECORD_FIELDS")
        for i, name in enumerate(RECORD_SLOTS):
            self.index[i] = RECORD_FIELDS.index(name)
            self.slot[i] = _offset(record_cls, name)
        (self.r_kind, self.r_ts, self.r_frame, self.r_conn, self.r_direction, self.r_length,
         self.r_client_id, self.r_version, self.r_source, self.r_ptype, self.r_qos,
         self.r_retain, self.r_dup, self.r_packet_id, self.r_topic, self.r_alias,
         self.r_offset, self.r_payload_length, self.r_payload, self.r_code) = [
            RECORD_FIELDS.index(name) for name in RECORD_SLOTS]
        (self.c_bytes_c2s, self.c_bytes_s2c, self.c_client_id, self.c_frame_c2s,
         self.c_frame_s2c, self.c_held, self.c_last_ts, self.c_message, self.c_older,
         self.c_packets_c2s, self.c_packets_s2c, self.c_pending, self.c_source,
         self.c_version) = [_offset(conn_cls, name) for name in CONN_SLOTS]

    def __repr__(self):
        return f"<Deriver of {self.record_cls.__name__} records>"

    def __dealloc__(self):
        cdef Py_ssize_t i, j
        if self.templates != NULL:
            for i in range(TEMPLATES):
                Py_XDECREF(self.templates[i].template)
            PyMem_Free(self.templates)
        # State never given back (a decoding abandoned half-way): only its references.
        for i in range(self.xs.room):
            if self.exchanges[i].state >= 0:
                for j in range(E_VALUES):
                    Py_XDECREF(self.exchanges[i].values[j])
        for i in range(self.ss.room):
            Py_XDECREF(self.states[i].conn)
        PyMem_Free(self.exchanges)
        PyMem_Free(self.states)
        PyMem_Free(self.xs.buckets)
        PyMem_Free(self.ss.buckets)

    def add_many(self, tables, list records):
        """``tables.add(rec)`` for each record of ``records`` in order, the common ones
        done here (module docstring)."""
        cdef dict conns = tables._conns
        cdef list messages = tables.messages
        cdef PyObject* f[MAX_FIELDS]
        cdef Py_ssize_t i
        add = tables.add
        try:
            for rec in records:
                if type(rec) is not self.record_cls:
                    conn_id = getattr(rec, "connection_id", None)
                    self._flush_id(conns, <PyObject*>conn_id)
                    add(rec)
                    continue
                for i in range(len(RECORD_SLOTS)):
                    f[self.index[i]] = _get(rec, self.slot[i])
                if not self._take(conns, messages, f):
                    self._flush_id(conns, f[self.r_conn])
                    add(rec)
        finally:
            # The caller may look at the tables' connections between two calls.
            self._flush_all()

    def message_columns(self, columns, capsule, keys):
        """Write the messages rows into ``columns`` (mqttwire.capture.arrow_c.
        PacketColumns, whose columns are ``keys`` in order; ``capsule``: arrow_c.
        row_capsule()) instead of leaving dicts in ``tables.messages``: a QoS 0 PUBLISH
        and a QoS 1 exchange taken here are written at once, without a dict; the rows
        of ``tables.messages`` (CaptureTables' own, and the exchanges completed here
        that Python code saw pending) are moved into the columns before it, and by
        :meth:`drain`, so the order stays theirs."""
        keys = tuple(keys)
        if len(keys) > MAX_FIELDS or any(k not in keys for k in _PUBLISH_KEYS):
            raise ValueError("not the messages columns")
        self.mrow = <_row_fn>PyCapsule_GetPointer(capsule, _ROW_NAME)
        self.mcols = columns
        self.mkeys = keys
        self.nm = len(keys)
        for i, name in enumerate(_PUBLISH_KEYS):
            self.m_at[i] = keys.index(name)
        if self.templates == NULL:
            self.templates = <_Template*>PyMem_Malloc(sizeof(_Template) * TEMPLATES)
            if self.templates == NULL:
                raise MemoryError()
            memset(self.templates, 0, sizeof(_Template) * TEMPLATES)

    cdef PyObject** _template(self, dict template) except NULL:
        """The values of ``template`` by column (the cache's entry)."""
        cdef _Template* t = &self.templates[(<size_t><PyObject*>template >> 6) % TEMPLATES]
        cdef Py_ssize_t i
        if t.template != <PyObject*>template:
            Py_XDECREF(t.template)
            t.template = NULL
            for i in range(self.nm):
                t.values[i] = PyDict_GetItemWithError(
                    template, <object>PyTuple_GET_ITEM(self.mkeys, i))
                if t.values[i] == NULL:
                    raise KeyError(self.mkeys[i])
            Py_XINCREF(<PyObject*>template)
            t.template = <PyObject*>template
        return t.values

    def materialize_all(self, tables):
        """Give back the state held here of every connection (before
        CaptureTables.finish): its counters and its pending exchanges, as row dicts."""
        self._flush_all()

    # -- the state held in C -----------------------------------------------------------

    cdef inline int32_t _state_find(self, PyObject* conn) noexcept:
        """The entry of ``conn`` in ``states``, or -1."""
        cdef int32_t i
        if conn == self.last_conn:
            return self.last_state
        if not self.ss.live:
            return -1
        i = self.ss.buckets[_mix(_state_hash(conn), 64 - self.ss.bits)]
        while i >= 0 and self.states[i].conn != conn:
            i = self.states[i].hnext
        if i >= 0:
            self.last_conn = conn
            self.last_state = i
        return i

    cdef int32_t _state_new(self, PyObject* conn) except -1:
        """A new entry for ``conn`` (which has none), with nothing counted or pending."""
        cdef int32_t i, room
        cdef uint32_t b
        if self.ss.free < 0:
            room = max(FIRST_ROOM, 2 * self.ss.room)
            p = <_State*>PyMem_Realloc(self.states, sizeof(_State) * room)
            if p == NULL:
                raise MemoryError()
            self.states = p
            memset(&self.states[self.ss.room], 0, sizeof(_State) * (room - self.ss.room))
            for i in range(self.ss.room, room):
                self.states[i].hnext = i + 1 if i + 1 < room else -1
            self.ss.free = self.ss.room
            self.ss.room = room
        if self.ss.buckets == NULL or self.ss.live + 1 > (1 << self.ss.bits):
            _slab_buckets(&self.ss, max(4, self.ss.bits + 1))
            for i in range(self.ss.room):
                if self.states[i].conn != NULL:
                    b = _mix(_state_hash(self.states[i].conn), 64 - self.ss.bits)
                    self.states[i].hnext = self.ss.buckets[b]
                    self.ss.buckets[b] = i
        i = self.ss.free
        self.ss.free = self.states[i].hnext
        Py_INCREF(<object>conn)
        self.states[i].conn = conn
        self.states[i].first = self.states[i].last = -1
        self.states[i].packets[0] = self.states[i].packets[1] = 0
        self.states[i].bytes[0] = self.states[i].bytes[1] = 0
        b = _mix(_state_hash(conn), 64 - self.ss.bits)
        self.states[i].hnext = self.ss.buckets[b]
        self.ss.buckets[b] = i
        self.ss.live += 1
        self.last_conn = conn
        self.last_state = i
        return i

    cdef int _state_free(self, int32_t i) except -1:
        """Drop the entry ``i`` (its exchanges already given back)."""
        cdef PyObject* conn = self.states[i].conn
        cdef int32_t* at = &self.ss.buckets[_mix(_state_hash(conn), 64 - self.ss.bits)]
        while at[0] != i:
            at = &self.states[at[0]].hnext
        at[0] = self.states[i].hnext
        self.states[i].conn = NULL
        self.states[i].hnext = self.ss.free
        self.ss.free = i
        self.ss.live -= 1
        if self.last_state == i:
            self.last_conn = NULL
        Py_DECREF(<object>conn)
        return 0

    cdef inline int32_t _exchange_find(self, int32_t state, uint32_t key) noexcept:
        """The pending exchange of connection entry ``state`` and ``key``, or -1."""
        cdef int32_t i
        if not self.xs.live:
            return -1
        i = self.xs.buckets[_mix(_exchange_hash(state, key), 64 - self.xs.bits)]
        while i >= 0 and (self.exchanges[i].key != key or self.exchanges[i].state != state):
            i = self.exchanges[i].hnext
        return i

    cdef int32_t _exchange_new(self, int32_t state, uint32_t key) except -1:
        """A new exchange of ``state`` and ``key`` (it has none), last of its connection's;
        its values are the caller's to set."""
        cdef int32_t i, room, last
        cdef uint32_t b
        if self.xs.free < 0:
            room = max(FIRST_ROOM, 2 * self.xs.room)
            p = <_Exchange*>PyMem_Realloc(self.exchanges, sizeof(_Exchange) * room)
            if p == NULL:
                raise MemoryError()
            self.exchanges = p
            memset(&self.exchanges[self.xs.room], 0,
                   sizeof(_Exchange) * (room - self.xs.room))
            for i in range(self.xs.room, room):
                self.exchanges[i].state = -1
                self.exchanges[i].hnext = i + 1 if i + 1 < room else -1
            self.xs.free = self.xs.room
            self.xs.room = room
        if self.xs.buckets == NULL or self.xs.live + 1 > (1 << self.xs.bits):
            _slab_buckets(&self.xs, max(4, self.xs.bits + 1))
            for i in range(self.xs.room):
                if self.exchanges[i].state >= 0:
                    b = _mix(_exchange_hash(self.exchanges[i].state, self.exchanges[i].key),
                             64 - self.xs.bits)
                    self.exchanges[i].hnext = self.xs.buckets[b]
                    self.xs.buckets[b] = i
        i = self.xs.free
        self.xs.free = self.exchanges[i].hnext
        b = _mix(_exchange_hash(state, key), 64 - self.xs.bits)
        self.exchanges[i].hnext = self.xs.buckets[b]
        self.xs.buckets[b] = i
        self.xs.live += 1
        self.exchanges[i].state = state
        self.exchanges[i].key = key
        last = self.states[state].last
        self.exchanges[i].prev = last
        self.exchanges[i].next = -1
        if last >= 0:
            self.exchanges[last].next = i
        else:
            self.states[state].first = i
        self.states[state].last = i
        return i

    cdef int _exchange_free(self, int32_t i) except -1:
        """Drop the exchange ``i`` (completed, or given back) and its references."""
        cdef _Exchange* e = &self.exchanges[i]
        cdef int32_t* at = &self.xs.buckets[_mix(_exchange_hash(e.state, e.key),
                                                 64 - self.xs.bits)]
        cdef PyObject* values[E_VALUES]
        cdef int j
        while at[0] != i:
            at = &self.exchanges[at[0]].hnext
        at[0] = e.hnext
        if e.prev >= 0:
            self.exchanges[e.prev].next = e.next
        else:
            self.states[e.state].first = e.next
        if e.next >= 0:
            self.exchanges[e.next].prev = e.prev
        else:
            self.states[e.state].last = e.prev
        memcpy(values, e.values, sizeof(values))
        e.state = -1
        e.hnext = self.xs.free
        self.xs.free = i
        self.xs.live -= 1
        for j in range(E_VALUES):  # last: a value freed here frees no entry of ours
            Py_XDECREF(values[j])
        return 0

    cdef dict _exchange_row(self, int32_t i):
        """The pending row of exchange ``i``, as CaptureTables._publish makes it."""
        cdef PyObject** v = self.exchanges[i].values
        cdef dict message = PyDict_Copy(<object>v[E_TEMPLATE])
        message["direction"] = _S2C if self.exchanges[i].key & S2C_KEY else _C2S
        message["ts"] = <object>v[E_TS]
        message["frame"] = <object>v[E_FRAME]
        message["stream_offset"] = <object>v[E_OFFSET]
        message["topic"] = <object>v[E_TOPIC]
        message["topic_from_alias"] = <object>v[E_ALIAS]
        message["qos"] = _QOS[self.exchanges[i].qos]
        message["retain"] = True if self.exchanges[i].retain else False
        message["dup"] = True if self.exchanges[i].dup else False
        message["packet_id"] = <object>v[E_PACKET_ID]
        message["payload_length"] = <object>v[E_PAYLOAD_LENGTH]
        message["payload"] = <object>v[E_PAYLOAD]
        message["status"] = _INCOMPLETE
        return message

    cdef int _flush(self, int32_t i) except -1:
        """Give back what is held here of the connection of entry ``i``: add its counts
        to its slots, and put its pending exchanges in ``_Conn.pending`` as the rows
        CaptureTables._publish would have put there, in the order taken (after those
        already there: a record handed over gives back its connection's state first, so
        every exchange Python code put there came before these)."""
        conn = <object>self.states[i].conn
        cdef _State* s = &self.states[i]
        cdef int32_t x
        if s.packets[0]:
            _put(conn, self.c_packets_c2s, <object>_get(conn, self.c_packets_c2s) + s.packets[0])
        if s.packets[1]:
            _put(conn, self.c_packets_s2c, <object>_get(conn, self.c_packets_s2c) + s.packets[1])
        if s.bytes[0]:
            _put(conn, self.c_bytes_c2s, <object>_get(conn, self.c_bytes_c2s) + s.bytes[0])
        if s.bytes[1]:
            _put(conn, self.c_bytes_s2c, <object>_get(conn, self.c_bytes_s2c) + s.bytes[1])
        if self.states[i].first >= 0:
            pending = <object>_get(conn, self.c_pending)
            while self.states[i].first >= 0:
                x = self.states[i].first
                key = (_S2C if self.exchanges[x].key & S2C_KEY else _C2S,
                       <object>self.exchanges[x].values[E_PACKET_ID])
                pending[key] = self._exchange_row(x)
                self._exchange_free(x)
        self._state_free(i)
        return 0

    cdef int _flush_id(self, dict conns, PyObject* conn_id) except -1:
        """_flush the connection of id ``conn_id``, if it has state held here."""
        cdef PyObject* found
        cdef int32_t i
        if not self.ss.live or conn_id == NULL or conn_id == Py_None:
            return 0
        found = PyDict_GetItemWithError(conns, <object>conn_id)
        if found != NULL:
            i = self._state_find(found)
            if i >= 0:
                self._flush(i)
        return 0

    cdef int _flush_all(self) except -1:
        cdef int32_t i
        for i in range(self.ss.room):
            if self.states[i].conn != NULL:
                self._flush(i)
        return 0

    # -- the messages rows -------------------------------------------------------------

    def drain(self, tables):
        """Move the rows of ``tables.messages`` into the messages columns."""
        if self.mcols is not None:
            self._drain(tables.messages)

    cdef int _drain(self, list messages) except -1:
        cdef PyObject* v[MAX_FIELDS]
        cdef Py_ssize_t i, j
        for j in range(PyList_GET_SIZE(messages)):
            row = <object>PyList_GET_ITEM(messages, j)
            if type(row) is not dict:
                raise TypeError("a messages row is a dict")
            for i in range(self.nm):
                v[i] = PyDict_GetItemWithError(row, <object>PyTuple_GET_ITEM(self.mkeys, i))
                if v[i] == NULL:
                    raise KeyError(self.mkeys[i])
            self.mrow(self.mcols, v)
        del messages[:]
        return 0

    cdef int _write_publish(self, dict template, PyObject** f, object direction, object ts,
                            object qos, object frame) except -1:
        """The messages row of a QoS 0 PUBLISH, into the columns: the template's values
        with the PUBLISH's (as CaptureTables._publish makes the dict)."""
        cdef PyObject* v[MAX_FIELDS]
        memcpy(v, self._template(template), self.nm * sizeof(PyObject*))
        v[self.m_at[0]] = <PyObject*>direction
        v[self.m_at[1]] = <PyObject*>ts
        v[self.m_at[2]] = <PyObject*>frame
        v[self.m_at[3]] = f[self.r_offset]
        v[self.m_at[4]] = f[self.r_topic]
        v[self.m_at[5]] = f[self.r_alias]
        v[self.m_at[6]] = <PyObject*>qos
        v[self.m_at[7]] = f[self.r_retain]
        v[self.m_at[8]] = f[self.r_dup]
        v[self.m_at[9]] = f[self.r_packet_id]
        v[self.m_at[10]] = f[self.r_payload_length]
        v[self.m_at[11]] = f[self.r_payload]
        self.mrow(self.mcols, v)
        return 0

    def capsule(self):
        """The C function that takes one record's fields (an array of RECORD_FIELDS
        pointers) as :meth:`add_many` takes a record: ``int take(deriver, tables,
        PyObject** fields)``, 1 if taken, 0 if ``tables.add`` must take the record;
        in a capsule named TAKE_CAPSULE, for the compiled capture loop."""
        return PyCapsule_New(<void*>_take_fields, _TAKE_NAME, NULL)

    # -- a record ----------------------------------------------------------------------

    cdef bint _take(self, dict conns, list messages, PyObject** f) except -1:
        """Take the record of fields ``f`` if it is a common one (returns True), else
        change nothing and return False."""
        cdef PyObject* kind = f[self.r_kind]
        if not _is(kind, "packet"):
            return False
        cdef PyObject* conn_id = f[self.r_conn]
        if conn_id == NULL or conn_id == Py_None:
            return False
        cdef PyObject* found = PyDict_GetItemWithError(conns, <object>conn_id)
        if found == NULL or type(<object>found) is not self.conn_cls:
            return False
        conn = <object>found
        # The connection's identity as the last record left it: else CaptureTables.add
        # updates it (_identity).
        if (f[self.r_client_id] != _get(conn, self.c_client_id)
                or f[self.r_version] != _get(conn, self.c_version)
                or f[self.r_source] != _get(conn, self.c_source)):
            return False
        cdef PyObject* ts = f[self.r_ts]
        if ts == NULL or (ts != Py_None and _get(conn, self.c_last_ts) == Py_None):
            return False  # the connection's first time: its row's first_ts
        cdef PyObject* direction = f[self.r_direction]
        # The same str objects record after record: identity first, for both names.
        cdef bint c2s = direction == <PyObject*>"c2s" or (
            direction != <PyObject*>"s2c" and _is(direction, "c2s"))
        if not c2s and not _is(direction, "s2c"):
            return False
        cdef PyObject* ptype = f[self.r_ptype]
        cdef bint publish = ptype == <PyObject*>"PUBLISH" or (
            ptype != <PyObject*>"PUBACK" and _is(ptype, "PUBLISH"))
        cdef PyObject* retain
        cdef PyObject* dup
        cdef PyObject* qos
        cdef long long q = 0
        if publish:
            qos = f[self.r_qos]
            retain = f[self.r_retain]
            dup = f[self.r_dup]
            if qos == NULL:
                return False
            if qos != Py_None:
                q = uint_in_range(<object>qos, 2)  # an exact int (a level above 2: Python's)
                if q < 0:
                    return False
            if (retain != Py_True and retain != Py_False) or (dup != Py_True and dup != Py_False):
                return False
            if dup == Py_True and q:
                return False  # perhaps a retransmission of a message in flight
            if c2s and retain == Py_True and f[self.r_topic] != Py_None:
                return False  # the retained store
        elif not _is(ptype, "PUBACK"):
            return False
        cdef PyObject* length = f[self.r_length]
        cdef PyObject* frame = f[self.r_frame]
        cdef long long size = 0
        if length == NULL or frame == NULL or not self._fields_put(f, publish):
            return False
        if length != Py_None:
            size = uint_in_range(<object>length, MAX_LENGTH)  # else Python's int addition
            if size < 0:
                return False
        if (type(<object>_get(conn, self.c_pending)) is not dict
                or type(<object>_get(conn, self.c_message)) is not dict
                or type(<object>_get(conn, self.c_held)) is not dict
                or type(<object>_get(conn, self.c_older)) is not dict):
            return False
        # Steps held for a record still to come: CaptureTables matches them by frame.
        if <dict>_get(conn, self.c_held):
            return False
        cdef dict pending = <dict>_get(conn, self.c_pending)
        cdef int32_t state = self._state_find(found)
        cdef int32_t exchange = -1
        cdef long long packet_id = -1
        cdef uint32_t key = 0
        cdef object pykey = None
        cdef object message = None
        cdef PyObject* first
        if publish:
            if q:
                packet_id = uint_in_range(<object>f[self.r_packet_id], 0xFFFF)
                # Its exchange is held here (pending: a packet id of 16 bits, not pending
                # here nor in _Conn.pending), else a packet id reused while pending
                # (CaptureTables._supersede) or not an MQTT one: Python's.
                if packet_id < 0:
                    return False
                key = <uint32_t>packet_id | (0 if c2s else S2C_KEY)
                if state >= 0 and self._exchange_find(state, key) >= 0:
                    return False
                if pending and (<object>direction, <object>f[self.r_packet_id]) in pending:
                    return False
        else:
            # A PUBACK that completes the pending QoS 1 exchange of its packet id, with
            # no superseded exchange of that id it could answer; else CaptureTables._ack.
            packet_id = uint_in_range(<object>f[self.r_packet_id], 0xFFFF)
            older = <dict>_get(conn, self.c_older)
            if older:
                pykey = ("s2c" if c2s else "c2s", <object>f[self.r_packet_id])
                if pykey in older:
                    return False
            if packet_id >= 0 and state >= 0:
                key = <uint32_t>packet_id | (S2C_KEY if c2s else 0)
                exchange = self._exchange_find(state, key)
            if exchange >= 0:  # its PUBLISH was taken here
                if self.exchanges[exchange].qos != 1:
                    return False
                first = self.exchanges[exchange].values[E_FRAME]
                if frame != Py_None and first != Py_None and _later(first, frame):
                    return False  # a later exchange under the same packet id
            else:  # pending where Python code saw it, if anywhere
                if not pending:
                    return False
                if pykey is None:
                    pykey = ("s2c" if c2s else "c2s", <object>f[self.r_packet_id])
                message = pending.get(pykey)
                if message is None or message["qos"] != 1:
                    return False
                if frame != Py_None and message["frame"] is not None \
                        and message["frame"] > <object>frame:
                    return False  # a later exchange under the same packet id
        # -- taken: from here on, as CaptureTables.add does ------------------------------
        if state < 0:
            state = self._state_new(found)
        if ts != Py_None:
            _put(conn, self.c_last_ts, <object>ts)
        _put(conn, self.c_frame_c2s if c2s else self.c_frame_s2c, <object>frame)
        self.states[state].packets[0 if c2s else 1] += 1
        self.states[state].bytes[0 if c2s else 1] += size
        if publish:
            self._publish(<dict>_get(conn, self.c_message), messages, f, state, key,
                          <object>direction, <object>ts, q, <object>frame)
        elif exchange >= 0:
            self._complete(messages, f, exchange, <object>ts)
        else:
            self._puback(pending, messages, f, pykey, message, <object>ts)
        return True

    cdef bint _fields_put(self, PyObject** f, bint publish) noexcept:
        """Whether every other field read below holds a value (a slot can be unset)."""
        if f[self.r_packet_id] == NULL:
            return False
        if publish:
            return (f[self.r_topic] != NULL and f[self.r_alias] != NULL
                    and f[self.r_offset] != NULL
                    and f[self.r_payload_length] != NULL
                    and f[self.r_payload] != NULL)
        return f[self.r_code] != NULL

    cdef int _publish(self, dict template, list messages, PyObject** f, int32_t state,
                      uint32_t key, object direction, object ts, long long q,
                      object frame) except -1:
        """CaptureTables._publish of a PUBLISH that is not a retransmission and leaves
        the retained store alone: a QoS 0 row, or a pending exchange held here."""
        cdef dict message
        cdef int32_t x
        cdef int j
        cdef PyObject** v
        if not q:
            if self.mcols is not None:
                if PyList_GET_SIZE(messages):
                    self._drain(messages)
                return self._write_publish(template, f, direction, ts, 0, frame)
            message = PyDict_Copy(template)
            message["direction"] = direction
            message["ts"] = ts
            message["frame"] = frame
            message["stream_offset"] = <object>f[self.r_offset]
            message["topic"] = <object>f[self.r_topic]
            message["topic_from_alias"] = <object>f[self.r_alias]
            message["qos"] = 0
            message["retain"] = <object>f[self.r_retain]
            message["dup"] = <object>f[self.r_dup]
            message["packet_id"] = <object>f[self.r_packet_id]
            message["payload_length"] = <object>f[self.r_payload_length]
            message["payload"] = <object>f[self.r_payload]
            PyList_Append(messages, message)
            return 0
        x = self._exchange_new(state, key)  # not pending before: checked by _take
        self.exchanges[x].qos = <int>q
        self.exchanges[x].retain = f[self.r_retain] == Py_True
        self.exchanges[x].dup = f[self.r_dup] == Py_True
        v = self.exchanges[x].values
        v[E_TEMPLATE] = <PyObject*>template
        v[E_TS] = <PyObject*>ts
        v[E_FRAME] = <PyObject*>frame
        v[E_OFFSET] = f[self.r_offset]
        v[E_TOPIC] = f[self.r_topic]
        v[E_ALIAS] = f[self.r_alias]
        v[E_PACKET_ID] = f[self.r_packet_id]
        v[E_PAYLOAD_LENGTH] = f[self.r_payload_length]
        v[E_PAYLOAD] = f[self.r_payload]
        for j in range(E_VALUES):
            Py_INCREF(<object>v[j])
        return 0

    cdef int _complete(self, list messages, PyObject** f, int32_t x, object ts) except -1:
        """CaptureTables._ack and _done of a PUBACK that completes exchange ``x``, held
        here: its row, written into the messages columns (or its dict, made and
        completed)."""
        cdef PyObject* v[MAX_FIELDS]
        cdef PyObject** e = self.exchanges[x].values
        cdef dict message
        code = <object>f[self.r_code]
        status = _FAILED if code is not None and code >= _REJECTED else _COMPLETE
        latency = _latency(<PyObject*>ts, e[E_TS])
        if PyList_GET_SIZE(messages) and self.mcols is not None:
            self._drain(messages)
        if self.mcols is None:
            message = self._exchange_row(x)
            message["puback_ts"] = ts
            message["ack_reason_code"] = code
            message["status"] = status
            message["completed_ts"] = ts
            if latency is not None:
                message["latency_ms"] = latency
            PyList_Append(messages, message)
            return self._exchange_free(x)
        memcpy(v, self._template(<dict>e[E_TEMPLATE]), self.nm * sizeof(PyObject*))
        v[self.m_at[0]] = <PyObject*>(_S2C if self.exchanges[x].key & S2C_KEY else _C2S)
        v[self.m_at[1]] = e[E_TS]
        v[self.m_at[2]] = e[E_FRAME]
        v[self.m_at[3]] = e[E_OFFSET]
        v[self.m_at[4]] = e[E_TOPIC]
        v[self.m_at[5]] = e[E_ALIAS]
        v[self.m_at[6]] = PyTuple_GET_ITEM(_QOS, self.exchanges[x].qos)
        v[self.m_at[7]] = Py_True if self.exchanges[x].retain else Py_False
        v[self.m_at[8]] = Py_True if self.exchanges[x].dup else Py_False
        v[self.m_at[9]] = e[E_PACKET_ID]
        v[self.m_at[10]] = e[E_PAYLOAD_LENGTH]
        v[self.m_at[11]] = e[E_PAYLOAD]
        v[self.m_at[12]] = <PyObject*>status
        v[self.m_at[13]] = <PyObject*>ts
        v[self.m_at[14]] = <PyObject*>code
        v[self.m_at[15]] = <PyObject*>ts
        v[self.m_at[16]] = <PyObject*>latency
        self.mrow(self.mcols, v)
        return self._exchange_free(x)

    cdef int _puback(self, dict pending, list messages, PyObject** f, object key,
                     object message, object ts) except -1:
        """CaptureTables._ack and _done of a PUBACK that completes ``message``, the
        pending exchange of ``key`` that Python code saw (checked by _take)."""
        del pending[key]
        message["puback_ts"] = ts
        code = <object>f[self.r_code]
        message["ack_reason_code"] = code
        message["status"] = ("failed" if code is not None and code >= REJECTED
                             else "complete")
        message["completed_ts"] = ts
        if ts is not None and message["ts"] is not None:
            message["latency_ms"] = (ts - message["ts"]) / 1e6
        PyList_Append(messages, message)
        return 0


cdef int _take_fields(object deriver, object tables, PyObject** f) except -1:
    """Deriver.capsule's function: Deriver._take on the fields ``f``; a record it does not
    take goes to CaptureTables.add, which must find its connection's state given back."""
    cdef Deriver d = <Deriver>deriver
    if tables is not d.seen_tables:
        d.seen_conns = tables._conns
        d.seen_messages = tables.messages
        d.seen_tables = tables
    cdef dict conns = d.seen_conns
    if d._take(conns, d.seen_messages, f):
        return 1
    d._flush_id(conns, f[d.r_conn])
    return 0
