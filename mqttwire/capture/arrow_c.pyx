"""The packets table's Arrow buffers, filled from each record's fields without a Record
object (Cython codec only): :class:`PacketColumns`, which the compiled capture loop
(loop_c.pyx) fills as it decodes; mqttwire/capture/arrow.py assembles its buffers into
Arrow batches, and the spark pipeline's tasks use it through mqttwire/spark/columnar.py.
Where the compiled loop does not run, arrow.py builds the same table from the Records
(its reference path).  The columns a direction's records share are written once per
batch and context, not per row (CTX_FIELDS).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_XDECREF, Py_XINCREF
from libc.stdint cimport INT32_MAX, int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from .._cdefs cimport (
    PyUnicode_AsUTF8AndSize,
    PyUnicode_GET_LENGTH,
    Py_False,
    Py_None,
    Py_True,
    long_value,
    object_slot_offset,
    utf8,
)
from .record_c cimport *

from .record import Record
from .shared_slots import RECORD_FIELDS

__all__ = ["COLUMN_KINDS", "DIRECT_LAYOUT", "MESSAGE_KINDS", "ROW_CAPSULE", "TAKE_CAPSULE",
           "PacketColumns", "row_capsule"]

check_record(Record, RECORD_FIELDS)
cdef tuple _FIELD_NAMES = field_names()
# Each field's slot offset in a Record (for add_record, and the Records of the fallbacks).
cdef Py_ssize_t R_OFF[NFIELDS]
for _i, _name in enumerate(_FIELD_NAMES):
    R_OFF[_i] = object_slot_offset(Record.__dict__.get(_name), True)
    if R_OFF[_i] < 0:
        raise ImportError(f"Record.{_name} is not a writable object slot")
cdef PyTypeObject* RECORD_TYPE = <PyTypeObject*>Record
cdef object _PACKET = "packet"

# A row's context: the fields that every record of a direction of a connection shares
# (FastReader._context fills them once a segment; the client id and level change when a
# CONNECT is seen or the level is inferred).  A column of one of them (written as its
# field's value) is not written row by row: each row holds the index of its context in
# a table of the batch's distinct contexts (a PacketColumns of its own), and the column
# is that table's column taken at those indices when the batch's buffers are taken
# (_taken, in C: pyarrow's take of the same columns cost 690 instructions a packet, as
# much as it saved).  A context is told apart by its values' addresses, which the cache
# holds references to, so that an address is never a freed value's.  Decoding the
# benchmarks' small.pcap (decode_capture, callgrind): 7,961 instructions a packet
# before, 7,419 after.
cdef int CTX_FIELDS[NCTX]
CTX_FIELDS[:] = [F_CONNECTION_ID, F_DIRECTION, F_CLIENT_ID, F_PROTOCOL_VERSION,
                 F_VERSION_SOURCE, F_KIND, F_CAPTURE, F_SRC_IP, F_SRC_PORT, F_DST_IP,
                 F_DST_PORT, F_TRANSPORT]
cdef frozenset _CTX_NAMES = frozenset([_FIELD_NAMES[CTX_FIELDS[_i]] for _i in range(NCTX)])


cdef inline bint _same(PyObject** k, PyObject** v) noexcept:
    """Whether the context ``k`` (CTX_FIELDS order) is the one of the record ``v``: the
    same objects (its values are str, int or None, never changed in place)."""
    return (k[0] == v[F_CONNECTION_ID] and k[1] == v[F_DIRECTION] and k[2] == v[F_CLIENT_ID]
            and k[3] == v[F_PROTOCOL_VERSION] and k[4] == v[F_VERSION_SOURCE]
            and k[5] == v[F_KIND] and k[6] == v[F_CAPTURE] and k[7] == v[F_SRC_IP]
            and k[8] == v[F_SRC_PORT] and k[9] == v[F_DST_IP] and k[10] == v[F_DST_PORT]
            and k[11] == v[F_TRANSPORT])


cdef inline Py_ssize_t _slot_of(PyObject** v) noexcept:
    """The cache slot of the record ``v``'s context: a hash of the addresses of the
    values that tell apart the contexts of a capture (its other values are the same for
    all of a connection's records, but for the kind of a few)."""
    cdef uint64_t h = <uint64_t><size_t>v[F_CONNECTION_ID] >> 4
    h = (h * 0x9E3779B97F4A7C15ULL) ^ (<uint64_t><size_t>v[F_DIRECTION] >> 4)
    h = (h * 0x9E3779B97F4A7C15ULL) ^ (<uint64_t><size_t>v[F_CLIENT_ID] >> 4)
    h = (h * 0x9E3779B97F4A7C15ULL) ^ (<uint64_t><size_t>v[F_KIND] >> 4)
    h *= 0x9E3779B97F4A7C15ULL
    return <Py_ssize_t>(h >> (64 - CTX_BITS))  # the best mixed bits of the product


# The packets table's own columns (arrow.column_spec(PACKETS) less the context columns),
# in order: the layout that PacketColumns._direct_row writes straight from the C values
# of a packet the compiled loop read itself (loop_c.pyx, FastReader._direct), each
# column by its place, without row's per-column op, type test and conversion (about 50
# instructions a column).  Columns of another layout are written by row.  Decoding the
# benchmarks' small.pcap (decode_capture, callgrind): 6,156 instructions a packet
# before, 5,380 after (the packets row of such a packet: about 340).
DIRECT_LAYOUT = (
    ("ts", b"t", 0), ("ts", b"l", 0), ("frame", b"l", 0), ("stream_offset", b"l", 0),
    ("length", b"l", 0), ("packet_type", b"s", 0), ("flags", b"b", 0), ("dup", b"?", 0),
    ("qos", b"b", 0), ("retain", b"?", 0), ("packet_id", b"i", 0), ("topic", b"s", 0),
    ("topic_from_alias", b"?", 1), ("topic_filters", b"o", 0),
    ("payload_length", b"l", 0), ("payload", b"y", 0), ("reason_code", b"i", 0),
    ("reason_codes", b"o", 0), ("properties", b"s", 2), ("error", b"s", 0),
    ("error_offset", b"l", 0))
cdef enum:
    DL_TS, DL_TS_NS, DL_FRAME, DL_OFFSET, DL_LENGTH, DL_PTYPE, DL_FLAGS, DL_DUP, DL_QOS
    DL_RETAIN, DL_PID, DL_TOPIC, DL_ALIAS, DL_FILTERS, DL_PAYLOAD_LENGTH, DL_PAYLOAD
    DL_CODE, DL_CODES, DL_PROPS, DL_ERROR, DL_ERROR_OFFSET

# The messages table's columns (mqttwire/spark/columnar.py, _message_spec: each column
# the value of its index, in MESSAGES order) by kind: the layout that
# PacketColumns._message_row writes column by column with each column's op known when
# compiled, not decided per value in a loop as row does (about 60 instructions a
# column, much of it the loop's dispatch; the derived tables' compiled code writes a
# messages row per PUBLISH).  Decoding the benchmarks' small.pcap (decode_capture,
# callgrind): 5,380 instructions a packet before, 4,904 after (a messages row: about
# 1,575 before, 940 after).
MESSAGE_KINDS = b"sssbstlls?b??ilysittttitd"

#: The value kinds of a column, one byte each (as spark/columns_c.KINDS): int8, int32,
#: int64, timestamp in microseconds from nanoseconds, bool, double, string, binary; "o"
#: keeps the Python values in a list (the list columns, which only rare packets fill).
COLUMN_KINDS = b"bilt?dsyo"

# What a column holds beyond its field's value.
cdef enum:
    AS_FIELD = 0  # the field's value
    AS_PACKET_ONLY = 1  # the value for packet records, else null (topic_from_alias)
    AS_JSON = 2  # the field's value through the json callable, None staying null

# How row writes a column's value (its kind and how, decided once).
cdef enum:
    OP_STR, OP_I64, OP_TS, OP_I32, OP_I8, OP_BOOL, OP_BIN, OP_JSON, OP_F64, OP_OBJ

TAKE_CAPSULE = b"mqttwire.spark.derive_c.take"
cdef const char* _TAKE_NAME = "mqttwire.spark.derive_c.take"

cdef extern from "Python.h":
    void* PyCapsule_GetPointer(object capsule, const char* name) except? NULL
    object PyCapsule_New(void* pointer, const char* name, void* destructor)
    double PyFloat_AS_DOUBLE(object value)

#: The name of :func:`row_capsule`'s capsule.
ROW_CAPSULE = b"mqttwire.capture.arrow_c.row"
cdef const char* _ROW_NAME = "mqttwire.capture.arrow_c.row"


cdef int _grow_to(void** p, Py_ssize_t size) except -1:
    cdef void* q = PyMem_Realloc(p[0], size if size > 0 else 1)
    if q == NULL:
        raise MemoryError()
    p[0] = q
    return 0


cdef inline int _width(char kind) noexcept:
    return 1 if kind == b"b" else 4 if kind == b"i" else 8


cdef int _make_room(Col* col, Py_ssize_t size) except -1:
    """Room for ``size`` more bytes in ``col``'s data (_append's rare path, out of line
    so that the common one is small enough to inline)."""
    cdef Py_ssize_t need = col.used + size
    if size > INT32_MAX - col.used:  # 32-bit offsets: the caller takes smaller batches
        raise OverflowError("more than 2 GiB of bytes in one column of a batch")
    if need > col.room:
        col.room = max(need, 2 * col.room, 65536)
        _grow_to(<void**>&col.data, col.room)
    return 0


cdef inline int _append(Col* col, const char* p, Py_ssize_t size) except -1:
    """Append ``size`` bytes at ``p`` to the string or binary column ``col``'s data."""
    if size > col.room - col.used or size > INT32_MAX - col.used:
        _make_room(col, size)
    memcpy(col.data + col.used, p, size)
    col.used += size
    return 0


# One value of row ``i`` (``byte``, ``bit``: its validity bit) written as row writes it:
# a null leaves the validity bit 0 (the bitmaps are zeroed ahead) and stores 0, or no
# bytes.
cdef inline void _put_i64(Col* col, Py_ssize_t i, Py_ssize_t byte, uint8_t bit,
                          int64_t y) noexcept:
    col.valid[byte] |= bit
    (<int64_t*>col.values)[i] = y


cdef inline void _put_i32(Col* col, Py_ssize_t i, Py_ssize_t byte, uint8_t bit,
                          int32_t y) noexcept:
    col.valid[byte] |= bit
    (<int32_t*>col.values)[i] = y


cdef inline void _put_i8(Col* col, Py_ssize_t i, Py_ssize_t byte, uint8_t bit,
                         int8_t y) noexcept:
    col.valid[byte] |= bit
    (<int8_t*>col.values)[i] = y


cdef inline void _put_bool(Col* col, Py_ssize_t byte, uint8_t bit, bint y) noexcept:
    col.valid[byte] |= bit
    if y:
        col.values[byte] |= bit


cdef inline int _put_bytes(Col* col, Py_ssize_t i, Py_ssize_t byte, uint8_t bit,
                           const char* p, Py_ssize_t size) except -1:
    col.valid[byte] |= bit
    _append(col, p, size)
    col.offs[i + 1] = <int32_t>col.used
    return 0


cdef inline void _null_i64(Col* col, Py_ssize_t i) noexcept:
    col.nulls += 1
    (<int64_t*>col.values)[i] = 0


cdef inline void _null_i32(Col* col, Py_ssize_t i) noexcept:
    col.nulls += 1
    (<int32_t*>col.values)[i] = 0


cdef inline void _null_i8(Col* col, Py_ssize_t i) noexcept:
    col.nulls += 1
    (<int8_t*>col.values)[i] = 0


cdef inline void _null_bytes(Col* col, Py_ssize_t i) noexcept:
    col.nulls += 1
    col.offs[i + 1] = <int32_t>col.used


# The messages layout's writers, one per kind, small enough to be inlined into
# _message_row at each column (one function for every kind, its op a constant, was not
# inlined and cost more than row's loop); row's errors raised out of line by _bad.
cdef enum:
    BAD_STR, BAD_INT, BAD_RANGE, BAD_BOOL, BAD_BYTES, BAD_FLOAT


cdef int _bad(PacketColumns self, Py_ssize_t c, int what) except -1:
    """Raise the error row raises for column ``c``'s value."""
    name = self.row_names[c]
    if what == BAD_STR:
        raise TypeError(f"{name}: not a str")
    if what == BAD_INT:
        raise TypeError(f"{name}: not an int")
    if what == BAD_RANGE:
        raise OverflowError(f"{name}: out of range")
    if what == BAD_BOOL:
        raise TypeError(f"{name}: not a bool")
    if what == BAD_BYTES:
        raise TypeError(f"{name}: not bytes")
    raise TypeError(f"{name}: not a float")


cdef inline int _m_str(PacketColumns self, Py_ssize_t c, Py_ssize_t i, Py_ssize_t byte,
                       uint8_t bit, PyObject* x) except -1:
    cdef Col* col = &self.cols[c]
    cdef Py_ssize_t size
    cdef const char* p
    if x == NULL or x == Py_None:
        col.nulls += 1
        col.offs[i + 1] = <int32_t>col.used
        return 0
    if type(<object>x) is not str:
        return _bad(self, c, BAD_STR)
    col.valid[byte] |= bit
    p = utf8(<object>x, &size)
    _append(col, p, size)
    col.offs[i + 1] = <int32_t>col.used
    return 0


cdef inline int _m_bin(PacketColumns self, Py_ssize_t c, Py_ssize_t i, Py_ssize_t byte,
                       uint8_t bit, PyObject* x) except -1:
    cdef Col* col = &self.cols[c]
    if x == NULL or x == Py_None:
        col.nulls += 1
        col.offs[i + 1] = <int32_t>col.used
        return 0
    if type(<object>x) is not bytes:
        return _bad(self, c, BAD_BYTES)
    col.valid[byte] |= bit
    _append(col, PyBytes_AS_STRING(<object>x), PyBytes_GET_SIZE(<object>x))
    col.offs[i + 1] = <int32_t>col.used
    return 0


cdef inline int _m_bool(PacketColumns self, Py_ssize_t c, Py_ssize_t byte, uint8_t bit,
                        PyObject* x) except -1:
    cdef Col* col = &self.cols[c]
    if x == NULL or x == Py_None:
        col.nulls += 1
        return 0
    if x == Py_True:
        col.values[byte] |= bit
    elif x != Py_False:
        return _bad(self, c, BAD_BOOL)
    col.valid[byte] |= bit
    return 0


cdef inline int _m_f64(PacketColumns self, Py_ssize_t c, Py_ssize_t i, Py_ssize_t byte,
                       uint8_t bit, PyObject* x) except -1:
    cdef Col* col = &self.cols[c]
    if x == NULL or x == Py_None:
        col.nulls += 1
        (<int64_t*>col.values)[i] = 0
        return 0
    if type(<object>x) is not float:
        return _bad(self, c, BAD_FLOAT)
    col.valid[byte] |= bit
    (<double*>col.values)[i] = PyFloat_AS_DOUBLE(<object>x)
    return 0


cdef inline int _m_int(PacketColumns self, Py_ssize_t c, PyObject* x, long long* y) except -1:
    """1 with ``y`` set for an int column's value, 0 for None (null); row's errors."""
    cdef int overflow = 0
    if x == NULL or x == Py_None:
        return 0
    if type(<object>x) is not int:
        return _bad(self, c, BAD_INT)
    y[0] = long_value(<object>x, &overflow)
    if overflow:
        return _bad(self, c, BAD_RANGE)
    return 1


cdef inline int _m_i64(PacketColumns self, Py_ssize_t c, Py_ssize_t i, Py_ssize_t byte,
                       uint8_t bit, PyObject* x, bint ts) except -1:
    cdef Col* col = &self.cols[c]
    cdef long long y = 0
    if not _m_int(self, c, x, &y):
        col.nulls += 1
        (<int64_t*>col.values)[i] = 0
        return 0
    col.valid[byte] |= bit
    # A time: nanoseconds to microseconds, rounded down as Python's // does.
    (<int64_t*>col.values)[i] = y // 1000 if ts else y
    return 0


cdef inline int _m_i32(PacketColumns self, Py_ssize_t c, Py_ssize_t i, Py_ssize_t byte,
                       uint8_t bit, PyObject* x) except -1:
    cdef Col* col = &self.cols[c]
    cdef long long y = 0
    if not _m_int(self, c, x, &y):
        col.nulls += 1
        (<int32_t*>col.values)[i] = 0
        return 0
    if y < -2147483648 or y > 2147483647:
        return _bad(self, c, BAD_RANGE)
    col.valid[byte] |= bit
    (<int32_t*>col.values)[i] = <int32_t>y
    return 0


cdef inline int _m_i8(PacketColumns self, Py_ssize_t c, Py_ssize_t i, Py_ssize_t byte,
                      uint8_t bit, PyObject* x) except -1:
    cdef Col* col = &self.cols[c]
    cdef long long y = 0
    if not _m_int(self, c, x, &y):
        col.nulls += 1
        (<int8_t*>col.values)[i] = 0
        return 0
    if y < -128 or y > 127:
        return _bad(self, c, BAD_RANGE)
    col.valid[byte] |= bit
    (<int8_t*>col.values)[i] = <int8_t>y
    return 0


cdef class PacketColumns:
    """The rows of a table of records (the packets table), column by column, in Arrow's
    buffer layouts: ``columns[c]`` is (field name, kind byte, how) with ``how`` 0 for the
    field's value, 1 for the value of packet records only (null for others) and 2 for
    the value through ``json`` (None staying null); or (column name, kind byte, 0,
    index) for a row of other values than a record's, ``index`` its place in the array
    of values that :func:`row_capsule`'s function takes (the derived messages table's
    columns, filled by mqttwire/spark/derive_c.pyx).  The compiled loop fills it as it
    decodes (:meth:`mqttwire.capture.loop_c.FastReader.fill`), from the same values it
    would put in a Record; a record made by the pure code is taken by
    :meth:`add_record`.

    With ``tables`` and a deriver (:meth:`derive_into`), every record (kind "end" too,
    which has no row) is also given to the derived tables: to the deriver's compiled
    function first, else, as a Record, to ``tables.add``.  :attr:`fallbacks` counts the
    records of the fast path that had to be made as Records for ``tables.add``;
    :attr:`side` the records that the pure code made."""

    def __cinit__(self):
        self.cols = NULL
        self.slots = NULL
        self.ctx_index = NULL

    def __init__(self, columns, json=None, bint contexts=True):
        cdef Py_ssize_t c
        cdef Col* col
        columns = [tuple(spec) for spec in columns]
        if self.cols != NULL:
            raise RuntimeError("PacketColumns is initialised once")
        # The context columns (contexts: False for the table of contexts itself).
        shared, own, layout = [], [], []
        for spec in columns:
            if (contexts and len(spec) == 3 and spec[0] in _CTX_NAMES
                    and spec[2] == AS_FIELD and spec[1] in (b"s", b"l", b"i", b"b")):
                layout.append(-1 - len(shared))
                shared.append(spec)
            else:
                layout.append(len(own))
                own.append(spec)
        self.names = tuple([spec[0] for spec in columns])
        self.layout = tuple(layout)
        if shared:
            self.ctx = PacketColumns(shared, None, False)
            self.slots = <Ctx*>PyMem_Realloc(NULL, sizeof(Ctx) * CTX_SLOTS)
            if self.slots == NULL:
                raise MemoryError()
            memset(self.slots, 0, sizeof(Ctx) * CTX_SLOTS)  # gen 0: no context
            self.last = self.slots
            self.gen = 1
        # (Kinds as bytes, as DIRECT_LAYOUT has them: a spec may give a bytearray.)
        self.fixed = self.ctx is not None and tuple(
            [(spec[0], bytes(spec[1]), spec[2]) if len(spec) == 3 else spec
             for spec in own]) == DIRECT_LAYOUT
        self.message_layout = self.ctx is None and len(own) == len(MESSAGE_KINDS) and all(
            [len(spec) == 4 and spec[2] == AS_FIELD and spec[3] == c
             and bytes(spec[1]) == MESSAGE_KINDS[c:c + 1] for c, spec in enumerate(own)])
        columns = own
        self.ncols = len(columns)
        self.cols = <Col*>PyMem_Realloc(NULL, sizeof(Col) * max(self.ncols, 1))
        if self.cols == NULL:
            raise MemoryError()
        memset(self.cols, 0, sizeof(Col) * max(self.ncols, 1))
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
            elif name not in _FIELD_NAMES:
                raise ValueError(f"column {name}: not a Record field")
            else:
                col.field = _FIELD_NAMES.index(name)
            if how == AS_JSON and json is None:
                raise ValueError(f"column {name}: no json callable")
            col.kind = (<bytes>kind)[0]
            col.how = how
            col.op = (OP_JSON if how == AS_JSON else
                      {b"b": OP_I8, b"i": OP_I32, b"l": OP_I64, b"t": OP_TS, b"?": OP_BOOL,
                       b"d": OP_F64, b"s": OP_STR, b"y": OP_BIN, b"o": OP_OBJ}[kind])
            names.append(name)
            self.objects.append({})
        self.row_names = tuple(names)
        self._room(1024)

    def __dealloc__(self):
        cdef Py_ssize_t c, k
        if self.slots != NULL:
            for c in range(CTX_SLOTS):
                for k in range(NCTX):
                    Py_XDECREF(self.slots[c].key[k])
            PyMem_Free(self.slots)
        PyMem_Free(self.ctx_index)
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
        self.take = <take_fn>PyCapsule_GetPointer(capsule, _TAKE_NAME)
        self.tables = tables
        self.deriver = deriver

    cdef int _room(self, Py_ssize_t cap) except -1:
        """Room for ``cap`` rows; the bitmaps' new bytes zeroed (row sets bits only)."""
        cdef Py_ssize_t c, old = (self.cap + 7) // 8, size = (cap + 7) // 8
        cdef Col* col
        for c in range(self.ncols):
            col = &self.cols[c]
            if col.kind == b"o":
                continue
            _grow_to(<void**>&col.valid, size)
            memset(col.valid + old, 0, size - old)
            if col.kind == b"s" or col.kind == b"y":
                _grow_to(<void**>&col.offs, (cap + 1) * 4)
                col.offs[0] = 0
            elif col.kind == b"?":
                _grow_to(<void**>&col.values, size)
                memset(col.values + old, 0, size - old)
            else:
                _grow_to(<void**>&col.values, cap * _width(col.kind))
        if self.ctx is not None:
            _grow_to(<void**>&self.ctx_index, cap * sizeof(int32_t))
        self.cap = cap
        return 0

    cdef int32_t _context(self, PyObject** v) except -1:
        """The index of the record ``v``'s context in this batch's table of contexts
        (row has found it is not the last one found): the one of its cache slot, else
        added to the table (direct-mapped: a context whose slot another one took is
        added again, which only makes the table longer)."""
        cdef Ctx* e = &self.slots[_slot_of(v)]
        cdef Py_ssize_t k
        cdef PyObject* x
        if e.gen != self.gen or not _same(e.key, v):
            if not _same(e.key, v):
                for k in range(NCTX):
                    x = v[CTX_FIELDS[k]]
                    Py_XINCREF(x)
                    Py_XDECREF(e.key[k])
                    e.key[k] = x
            e.gen = 0  # until its row is written (row may raise)
            e.index = <int32_t>self.ctx.n
            self.ctx.row(v)
            e.gen = self.gen
        self.last = e
        return e.index

    cdef int row(self, PyObject** v) except -1:
        """Append the row of the record whose fields are ``v`` (RECORD_FIELDS order)."""
        cdef Py_ssize_t i = self.n, c, size
        cdef Col* col
        cdef PyObject* x
        cdef long long y
        cdef int overflow, op
        cdef const char* p
        cdef uint8_t bit = 1 << (i & 7)
        cdef Py_ssize_t byte = i >> 3
        cdef Ctx* e
        cdef bint packet = v[F_KIND] == <PyObject*>_PACKET or _is_str(v[F_KIND], "packet")
        if i == self.cap:
            self._room(2 * self.cap)
        if packet:
            self.packets += 1
        if self.ctx is not None:
            e = self.last  # mostly the context of the row before
            self.ctx_index[i] = (e.index if e.gen == self.gen and _same(e.key, v)
                                 else self._context(v))
        for c in range(self.ncols):
            col = &self.cols[c]
            x = v[col.field]
            op = col.op
            if x == NULL or x == Py_None or (col.how == AS_PACKET_ONLY and not packet):
                # null: the validity bit stays 0 (the bitmaps are zeroed ahead); a
                # fixed-width value 0, a string or binary value empty
                if op == OP_OBJ:
                    continue
                col.nulls += 1
                if col.offs != NULL:
                    col.offs[i + 1] = <int32_t>col.used
                elif op == OP_I8:
                    (<int8_t*>col.values)[i] = 0
                elif op == OP_I32:
                    (<int32_t*>col.values)[i] = 0
                elif op != OP_BOOL:  # the 8-byte kinds
                    (<int64_t*>col.values)[i] = 0
                continue
            if op == OP_OBJ:
                (<dict>PyList_GET_ITEM(self.objects, c))[i] = <object>x
                continue
            col.valid[byte] |= bit
            if op == OP_STR:
                if type(<object>x) is not str:
                    raise TypeError(f"{self.row_names[c]}: not a str")
                p = utf8(<object>x, &size)
                _append(col, p, size)
                col.offs[i + 1] = <int32_t>col.used
            elif op == OP_I64 or op == OP_TS or op == OP_I32 or op == OP_I8:
                if type(<object>x) is not int:
                    raise TypeError(f"{self.row_names[c]}: not an int")
                overflow = 0
                y = long_value(<object>x, &overflow)
                if overflow:
                    raise OverflowError(f"{self.row_names[c]}: out of range")
                if op == OP_I64:
                    (<int64_t*>col.values)[i] = y
                elif op == OP_TS:
                    # Nanoseconds to microseconds, rounded down as Python's // does.
                    (<int64_t*>col.values)[i] = y // 1000
                elif op == OP_I32:
                    if y < -2147483648 or y > 2147483647:
                        raise OverflowError(f"{self.row_names[c]}: out of range")
                    (<int32_t*>col.values)[i] = <int32_t>y
                else:
                    if y < -128 or y > 127:
                        raise OverflowError(f"{self.row_names[c]}: out of range")
                    (<int8_t*>col.values)[i] = <int8_t>y
            elif op == OP_BOOL:
                if x == Py_True:
                    col.values[byte] |= bit
                elif x != Py_False:
                    raise TypeError(f"{self.row_names[c]}: not a bool")
            elif op == OP_BIN:
                if type(<object>x) is not bytes:
                    raise TypeError(f"{self.row_names[c]}: not bytes")
                _append(col, PyBytes_AS_STRING(<object>x), PyBytes_GET_SIZE(<object>x))
                col.offs[i + 1] = <int32_t>col.used
            elif op == OP_JSON:
                text = self.json(<object>x)
                if text is None:
                    col.valid[byte] &= ~bit
                    col.nulls += 1
                    col.offs[i + 1] = <int32_t>col.used
                    continue
                p = PyUnicode_AsUTF8AndSize(text, &size)
                _append(col, p, size)
                col.offs[i + 1] = <int32_t>col.used
            else:  # OP_F64
                if type(<object>x) is not float:
                    raise TypeError(f"{self.row_names[c]}: not a float")
                (<double*>col.values)[i] = PyFloat_AS_DOUBLE(<object>x)
        self.n = i + 1
        return 0

    cdef int _message_row(self, PyObject** v) except -1:
        """:meth:`row` for the messages layout (``message_layout``: column ``c`` is the
        value ``v[c]``, of kind MESSAGE_KINDS[c]), each column written by its op's
        code alone: the same buffers, the same errors in the same order."""
        cdef Py_ssize_t i = self.n
        cdef Py_ssize_t byte = i >> 3
        cdef uint8_t bit = 1 << (i & 7)
        if i == self.cap:
            self._room(2 * self.cap)
        if v[F_KIND] == <PyObject*>_PACKET or _is_str(v[F_KIND], "packet"):
            self.packets += 1  # (as row counts them, whatever the columns)
        _m_str(self, 0, i, byte, bit, v[0])  # capture
        _m_str(self, 1, i, byte, bit, v[1])  # connection_id
        _m_str(self, 2, i, byte, bit, v[2])  # client_id
        _m_i8(self, 3, i, byte, bit, v[3])  # protocol_version
        _m_str(self, 4, i, byte, bit, v[4])  # direction
        _m_i64(self, 5, i, byte, bit, v[5], True)  # ts
        _m_i64(self, 6, i, byte, bit, v[6], False)  # frame
        _m_i64(self, 7, i, byte, bit, v[7], False)  # stream_offset
        _m_str(self, 8, i, byte, bit, v[8])  # topic
        _m_bool(self, 9, byte, bit, v[9])  # topic_from_alias
        _m_i8(self, 10, i, byte, bit, v[10])  # qos
        _m_bool(self, 11, byte, bit, v[11])  # retain
        _m_bool(self, 12, byte, bit, v[12])  # dup
        _m_i32(self, 13, i, byte, bit, v[13])  # packet_id
        _m_i64(self, 14, i, byte, bit, v[14], False)  # payload_length
        _m_bin(self, 15, i, byte, bit, v[15])  # payload
        _m_str(self, 16, i, byte, bit, v[16])  # status
        _m_i32(self, 17, i, byte, bit, v[17])  # retransmissions
        _m_i64(self, 18, i, byte, bit, v[18], True)  # puback_ts
        _m_i64(self, 19, i, byte, bit, v[19], True)  # pubrec_ts
        _m_i64(self, 20, i, byte, bit, v[20], True)  # pubrel_ts
        _m_i64(self, 21, i, byte, bit, v[21], True)  # pubcomp_ts
        _m_i32(self, 22, i, byte, bit, v[22])  # ack_reason_code
        _m_i64(self, 23, i, byte, bit, v[23], True)  # completed_ts
        _m_f64(self, 24, i, byte, bit, v[24])  # latency_ms
        self.n = i + 1
        return 0

    cdef int _direct_row(self, PyObject** v, const uint8_t* q, Direct* r, long long frame,
                         long long offset, Py_ssize_t length, Py_ssize_t cut) except -1:
        """Append the row of a packet that the compiled loop read itself (FastReader.
        _direct): ``q``, its bytes, read into ``r``; ``frame``, ``offset``, ``length``
        its record's values; ``cut`` the size of its payload value (a PUBLISH's), -1
        for none.  The same row as :meth:`row` writes from the record's fields ``v``
        (which the context columns and the time are still read from), written from those
        C values into the packets layout (``fixed``), else by :meth:`row`."""
        cdef Py_ssize_t i = self.n
        cdef Py_ssize_t byte = i >> 3
        cdef uint8_t bit = 1 << (i & 7)
        cdef Col* c = self.cols
        cdef Ctx* e
        cdef PyObject* ts = v[F_TS]
        if not self.fixed or not self._time(ts):
            return self.row(v)  # (its error, for a time it cannot hold)
        if i == self.cap:
            self._room(2 * self.cap)
        self.packets += 1
        e = self.last  # mostly the context of the row before
        self.ctx_index[i] = (e.index if e.gen == self.gen and _same(e.key, v)
                             else self._context(v))
        if ts == Py_None:
            _null_i64(&c[DL_TS], i)
            _null_i64(&c[DL_TS_NS], i)
        else:
            # Nanoseconds to microseconds, rounded down as Python's // does.
            _put_i64(&c[DL_TS], i, byte, bit, self.ts_val // 1000)
            _put_i64(&c[DL_TS_NS], i, byte, bit, self.ts_val)
        _put_i64(&c[DL_FRAME], i, byte, bit, frame)
        _put_i64(&c[DL_OFFSET], i, byte, bit, offset)
        _put_i64(&c[DL_LENGTH], i, byte, bit, length)
        _put_i8(&c[DL_FLAGS], i, byte, bit, q[0] & 0x0F)
        if r.ptype == 3:  # PUBLISH
            _put_bytes(&c[DL_PTYPE], i, byte, bit, "PUBLISH", 7)
            _put_bool(&c[DL_DUP], byte, bit, False)
            _put_i8(&c[DL_QOS], i, byte, bit, <int8_t>r.qos)
            _put_bool(&c[DL_RETAIN], byte, bit, r.retain)
            if r.packet_id:
                _put_i32(&c[DL_PID], i, byte, bit, r.packet_id)
            else:
                _null_i32(&c[DL_PID], i)
            _put_bytes(&c[DL_TOPIC], i, byte, bit, <const char*>q + r.topic, r.topic_size)
            _put_i64(&c[DL_PAYLOAD_LENGTH], i, byte, bit, r.payload_size)
            if cut >= 0:
                _put_bytes(&c[DL_PAYLOAD], i, byte, bit, <const char*>q + r.payload, cut)
            else:
                _null_bytes(&c[DL_PAYLOAD], i)
            _null_i32(&c[DL_CODE], i)
        else:  # PUBACK
            _put_bytes(&c[DL_PTYPE], i, byte, bit, "PUBACK", 6)
            c[DL_DUP].nulls += 1
            _null_i8(&c[DL_QOS], i)
            c[DL_RETAIN].nulls += 1
            _put_i32(&c[DL_PID], i, byte, bit, r.packet_id)
            _null_bytes(&c[DL_TOPIC], i)
            _null_i64(&c[DL_PAYLOAD_LENGTH], i)
            _null_bytes(&c[DL_PAYLOAD], i)
            _put_i32(&c[DL_CODE], i, byte, bit, r.code)
        _put_bool(&c[DL_ALIAS], byte, bit, False)  # a packet's: False, not null
        # topic_filters and reason_codes (None): nothing, as row leaves an "o" column.
        _null_bytes(&c[DL_PROPS], i)
        _null_bytes(&c[DL_ERROR], i)
        _null_i64(&c[DL_ERROR_OFFSET], i)
        self.n = i + 1
        return 0

    cdef bint _time(self, PyObject* ts) except -1:
        """Whether ``ts`` (a record's time) is None or an int that the packets layout's
        time columns hold, converted (``ts_val``); else :meth:`row` must write the row.
        A frame's packets share their time: converted once (the object kept, so that its
        address is never a later one's)."""
        cdef int overflow = 0
        cdef long long t
        if ts == NULL:
            return False
        if ts == Py_None or ts == <PyObject*>self.ts_obj:
            return True
        if type(<object>ts) is not int:
            return False
        t = long_value(<object>ts, &overflow)
        if overflow:
            return False
        self.ts_obj = <object>ts
        self.ts_val = t
        return True

    cdef bint direct_only(self, PyObject* ts) except -1:
        """Whether :meth:`take_direct` of a packet of this time would read nothing of its
        record's fields but the context ones: no derived tables to take them, and
        :meth:`_direct_row` writing from C values (the packets layout, a time it holds).
        The compiled loop then makes no Python value for the packet."""
        return self.tables is None and self.fixed and self._time(ts)

    cdef bint take_direct(self, PyObject** v, const uint8_t* q, Direct* r, long long frame,
                          long long offset, Py_ssize_t length, Py_ssize_t cut) except -1:
        """:meth:`take_row` of a packet that the compiled loop read itself
        (:meth:`_direct_row`'s arguments)."""
        self.fast += 1
        self._direct_row(v, q, r, frame, offset, length, cut)
        return self.tables is None or self.take(self.deriver, self.tables, v)

    cdef int fast_record(self, PyObject** v) except -1:
        """A record of the compiled loop, never made as a Record unless the derived
        tables need it."""
        if not self.take_row(v):
            self.add_fallback(v)
        return 0

    cdef bint take_row(self, PyObject** v) except -1:
        """The row of a record of the compiled loop, and its part of the derived tables
        where their compiled function takes it: False if it did not, and the caller
        must give them the record (:meth:`add_fallback`)."""
        self.fast += 1
        self.row(v)
        return self.tables is None or self.take(self.deriver, self.tables, v)

    cdef int add_fallback(self, PyObject** v) except -1:
        """Give the derived tables the record of fields ``v`` as a Record."""
        self.fallbacks += 1
        self.tables.add(new_record(RECORD_TYPE, R_OFF, v))
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

    def append(self, values):
        """Append a row of ``values`` (a sequence, one value per column index: the
        columns of (name, kind, 0, index) specs) as the derived tables' compiled code
        does through :func:`row_capsule`'s function (for checks of that path)."""
        cdef PyObject* v[64]
        cdef Py_ssize_t k
        values = tuple(values)
        if len(values) > 64:
            raise ValueError("at most 64 values")
        for k in range(64):
            v[k] = <PyObject*>values[k] if k < len(values) else NULL
        _row(self, v)

    @property
    def direct_layout(self):
        """Whether the columns are the packets table's layout (DIRECT_LAYOUT), which the
        compiled loop's directly read packets are written into from C values."""
        return self.fixed

    @property
    def contexts(self):
        """How many rows the table of contexts of the rows so far has (0 without
        context columns)."""
        return 0 if self.ctx is None else self.ctx.n

    def take_buffers(self):
        """The columns of the rows so far, and start again: for each column (null count,
        validity bitmap or None, values, offsets or None) as bytes; for an "o" column
        ("objects", {row: value}) of its values that are not None.  A context column's
        are its table of contexts' column taken at the rows' contexts (_taken)."""
        cdef Py_ssize_t c, n = self.n
        cdef Col* col
        cdef list out = []
        cdef list shared = []
        if self.ctx is not None:
            for c in range(self.ctx.ncols):
                shared.append(_taken(&self.ctx.cols[c], self.ctx.n, self.ctx_index, n))
            self.ctx.take_buffers()  # (its own buffers: m rows, not the table's)
            self.gen += 1  # the contexts cached are rows of that table: none of the next
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
            memset(col.valid, 0, (n + 7) // 8)  # row sets bits only
            if col.kind == b"?":
                memset(col.values, 0, (n + 7) // 8)
            col.nulls = 0
            col.used = 0
        self.n = 0
        self.packets = 0
        if self.ctx is None:
            return out
        return [out[j] if j >= 0 else shared[-1 - j] for j in self.layout]


cdef bint _constant(Col* t, Py_ssize_t m) noexcept:
    """Whether the string column ``t`` of a table of ``m`` contexts has one value (the
    capture, the kind, the transport, mostly the level's source): null or the same
    bytes in every row."""
    cdef Py_ssize_t k, size = t.offs[1] - t.offs[0]
    cdef bint valid = t.valid[0] & 1
    for k in range(1, m):
        if ((t.valid[k >> 3] >> (k & 7)) & 1) != valid or t.offs[k + 1] - t.offs[k] != size:
            return False
        if memcmp(t.data + t.offs[k], t.data, size):
            return False
    return True


cdef tuple _taken(Col* t, Py_ssize_t m, const int32_t* idx, Py_ssize_t n):
    """The column ``t`` of a table of ``m`` contexts taken at the rows' indices ``idx``
    (n rows): (null count, validity bitmap or None, values, offsets or None), the
    buffers that writing each row's value would have made (a null: 0, or no bytes).
    About 27 instructions a value, most of them a string's memcpy: a string column of
    one value is filled by doubling instead (callgrind, benchmarks' small.pcap)."""
    cdef Py_ssize_t i, nulls = 0, size = (n + 7) // 8, done, step
    cdef int32_t k
    cdef int64_t o = 0
    cdef uint8_t* bits
    cdef int32_t* offs
    cdef char* out
    validity = offsets = None
    if t.offs != NULL and m and _constant(t, m):
        o = t.offs[1] - t.offs[0]
        if o * n > INT32_MAX:
            raise OverflowError("more than 2 GiB of bytes in one column of a batch")
        if not t.valid[0] & 1:
            validity = PyBytes_FromStringAndSize(NULL, size)
            memset(PyBytes_AS_STRING(validity), 0, size)
            nulls = n
        offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4)
        offs = <int32_t*>PyBytes_AS_STRING(offsets)
        for i in range(n + 1):
            offs[i] = <int32_t>(i * o)
        values = PyBytes_FromStringAndSize(NULL, n * o)
        out = PyBytes_AS_STRING(values)
        done = min(o, n * o)
        if done:
            memcpy(out, t.data, done)
        while done < n * o:
            step = min(done, n * o - done)
            memcpy(out + done, out, step)
            done += step
        return (nulls, validity, values, offsets)
    if t.nulls:  # (a null: its row of the table has the value 0, or no bytes)
        validity = PyBytes_FromStringAndSize(NULL, size)
        bits = <uint8_t*>PyBytes_AS_STRING(validity)
        memset(bits, 0, size)
        for i in range(n):
            k = idx[i]
            if t.valid[k >> 3] & (1 << (k & 7)):
                bits[i >> 3] |= 1 << (i & 7)
            else:
                nulls += 1
        if not nulls:
            validity = None
    if t.offs != NULL:
        offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4)
        offs = <int32_t*>PyBytes_AS_STRING(offsets)
        offs[0] = 0
        for i in range(n):
            k = idx[i]
            o += t.offs[k + 1] - t.offs[k]
            if o > INT32_MAX:  # 32-bit offsets: the caller takes smaller batches
                raise OverflowError("more than 2 GiB of bytes in one column of a batch")
            offs[i + 1] = <int32_t>o
        values = PyBytes_FromStringAndSize(NULL, o)
        out = PyBytes_AS_STRING(values)
        for i in range(n):
            k = idx[i]
            memcpy(out + offs[i], t.data + t.offs[k], offs[i + 1] - offs[i])
    else:
        values = PyBytes_FromStringAndSize(NULL, n * _width(t.kind))
        out = PyBytes_AS_STRING(values)
        if t.kind == b"b":
            for i in range(n):
                (<int8_t*>out)[i] = (<int8_t*>t.values)[idx[i]]
        elif t.kind == b"i":
            for i in range(n):
                (<int32_t*>out)[i] = (<int32_t*>t.values)[idx[i]]
        else:
            for i in range(n):
                (<int64_t*>out)[i] = (<int64_t*>t.values)[idx[i]]
    return (nulls, validity, values, offsets)


cdef inline bint _is_str(PyObject* value, str text) noexcept:
    """Whether ``value`` is the str ``text`` (the same object, or an equal str)."""
    # (Lengths first: a messages row's first value, the capture's name, is tested
    # every row, and the comparison's call cost about 80 instructions.)
    return value == <PyObject*>text or (
        value != NULL and type(<object>value) is str
        and PyUnicode_GET_LENGTH(<object>value) == PyUnicode_GET_LENGTH(text)
        and <str>value == text)


cdef int _row(object columns, PyObject** v) except -1:
    if (<PacketColumns>columns).message_layout:
        return (<PacketColumns>columns)._message_row(v)
    return (<PacketColumns>columns).row(v)


def row_capsule():
    """The C function that appends a row to a :class:`PacketColumns`: ``int row(columns,
    PyObject** values)``, the values in the order of its columns' indices; in a capsule
    named ROW_CAPSULE (for the derived tables' compiled code)."""
    return PyCapsule_New(<void*>_row, _ROW_NAME, NULL)
