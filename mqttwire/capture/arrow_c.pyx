"""The packets table's Arrow buffers, filled from each record's fields without a Record
object (Cython codec only): :class:`PacketColumns`, which the compiled capture loop
(loop_c.pyx) fills as it decodes; mqttwire/capture/arrow.py assembles its buffers into
Arrow batches, and the spark pipeline's tasks use it through mqttwire/spark/columnar.py.
Where the compiled loop does not run, arrow.py builds the same table from the Records
(its reference path).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject, PyTypeObject
from libc.stdint cimport INT32_MAX, int8_t, int32_t, int64_t, uint8_t
from libc.string cimport memcpy, memset

from .._cdefs cimport (
    PyUnicode_AsUTF8AndSize,
    Py_False,
    Py_None,
    Py_True,
    long_value,
    object_slot_offset,
    utf8,
)
from .record_c cimport F_KIND, NFIELDS, check_record, field_names, new_record

from .record import Record
from .shared_slots import RECORD_FIELDS

__all__ = ["COLUMN_KINDS", "ROW_CAPSULE", "TAKE_CAPSULE", "PacketColumns", "row_capsule"]

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


cdef inline int _append(Col* col, const char* p, Py_ssize_t size) except -1:
    """Append ``size`` bytes at ``p`` to the string or binary column ``col``'s data."""
    cdef Py_ssize_t need = col.used + size
    if size > INT32_MAX - col.used:  # 32-bit offsets: the caller takes smaller batches
        raise OverflowError("more than 2 GiB of bytes in one column of a batch")
    if need > col.room:
        col.room = max(need, 2 * col.room, 65536)
        _grow_to(<void**>&col.data, col.room)
    memcpy(col.data + col.used, p, size)
    col.used = need
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

    def __init__(self, columns, json=None):
        cdef Py_ssize_t c
        cdef Col* col
        columns = list(columns)
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
        self.cap = cap
        return 0

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
        cdef bint packet = v[F_KIND] == <PyObject*>_PACKET or _is_str(v[F_KIND], "packet")
        if i == self.cap:
            self._room(2 * self.cap)
        if packet:
            self.packets += 1
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
                    raise TypeError(f"{self.names[c]}: not a str")
                p = utf8(<object>x, &size)
                _append(col, p, size)
                col.offs[i + 1] = <int32_t>col.used
            elif op == OP_I64 or op == OP_TS or op == OP_I32 or op == OP_I8:
                if type(<object>x) is not int:
                    raise TypeError(f"{self.names[c]}: not an int")
                overflow = 0
                y = long_value(<object>x, &overflow)
                if overflow:
                    raise OverflowError(f"{self.names[c]}: out of range")
                if op == OP_I64:
                    (<int64_t*>col.values)[i] = y
                elif op == OP_TS:
                    # Nanoseconds to microseconds, rounded down as Python's // does.
                    (<int64_t*>col.values)[i] = y // 1000
                elif op == OP_I32:
                    if y < -2147483648 or y > 2147483647:
                        raise OverflowError(f"{self.names[c]}: out of range")
                    (<int32_t*>col.values)[i] = <int32_t>y
                else:
                    if y < -128 or y > 127:
                        raise OverflowError(f"{self.names[c]}: out of range")
                    (<int8_t*>col.values)[i] = <int8_t>y
            elif op == OP_BOOL:
                if x == Py_True:
                    col.values[byte] |= bit
                elif x != Py_False:
                    raise TypeError(f"{self.names[c]}: not a bool")
            elif op == OP_BIN:
                if type(<object>x) is not bytes:
                    raise TypeError(f"{self.names[c]}: not bytes")
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
                    raise TypeError(f"{self.names[c]}: not a float")
                (<double*>col.values)[i] = PyFloat_AS_DOUBLE(<object>x)
        self.n = i + 1
        return 0

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

    def take_buffers(self):
        """The columns of the rows so far, and start again: for each column (null count,
        validity bitmap or None, values, offsets or None) as bytes; for an "o" column
        ("objects", {row: value}) of its values that are not None."""
        cdef Py_ssize_t c, n = self.n
        cdef Col* col
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
            memset(col.valid, 0, (n + 7) // 8)  # row sets bits only
            if col.kind == b"?":
                memset(col.values, 0, (n + 7) // 8)
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
