"""Arrow column buffers from Python objects, in C: the compiled half of
:mod:`mqttwire.spark.columns`, which holds the reference (``pa.array`` over a list of the
values) and decides when this module is used.

The pipeline's tables are built from Python objects (a capture's :class:`Record` objects
and the derived tables' row dicts), and turning millions of them into Arrow columns was
most of a decoding task's time: one list of values per column, then ``pa.array`` reading
the list back.  :func:`buffers` reads each value once, straight from the object, and
writes it into its column's Arrow buffers (validity bitmap, values, offsets: the layouts
of the Arrow columnar format's "Fixed-size primitive" and "Variable-size binary" types)
for the column types the tables use.  It goes row by row, every column at once, so that
each object is fetched into the CPU cache once.

A column it cannot take as it is (a type code it does not know, a value of another Python
type than the column's or out of its range, more than 2 GiB of bytes in one column) comes
back as None, and the caller builds that column the reference way, so that every such
case behaves exactly as ``pa.array`` does.  tests/spark/test_columns.py compares the two.

An attribute that is a ``__slots__`` member of the objects' class (every object of the
list being of that very class) is read at its offset, as the member descriptor itself
reads it, without the attribute look-up; any other attribute by ``getattr``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItemWithError
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.object cimport PyObject
from libc.stdint cimport INT32_MAX, int8_t, int32_t, int64_t, uint8_t
from libc.string cimport memcpy, memset

from .._cdefs cimport (
    PyLong_AsLongLongAndOverflow,
    PyUnicode_AsUTF8AndSize,
    object_slot_offset,
)

cimport cython

__all__ = ["KINDS", "buffers"]

#: The type codes :func:`buffers` takes (one byte per column), by Arrow type name.
KINDS = {"int8": b"b", "int32": b"i", "int64": b"l", "timestamp[us, tz=UTC]": b"t",
         "bool": b"?", "double": b"d", "string": b"s", "binary": b"y"}

# Where a column's values come from (see buffers).
cdef enum:
    FROM_LIST, FROM_ATTRIBUTE, FROM_SLOT, FROM_KEY


@cython.final  # its methods are called directly (no virtual table), and can be inlined
cdef class _Column:
    """The buffers of one column as its values come, row by row."""

    cdef char kind
    cdef int how
    cdef object source  # the list of values, the attribute name or the dict key
    cdef Py_ssize_t offset  # FROM_SLOT: the member's offset in the objects
    cdef bint declined  # a value it cannot take: the reference way builds the column
    cdef Py_ssize_t nulls, total
    cdef bytes validity, values, offsets
    cdef uint8_t* valid
    cdef uint8_t* out
    cdef int32_t* offs
    cdef char* data  # the bytes of a string or binary column, growing
    cdef Py_ssize_t capacity

    def __dealloc__(self):
        PyMem_Free(self.data)

    cdef int start(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t width = 1 if self.kind == b"b" else 4 if self.kind == b"i" else 8
        self.validity = PyBytes_FromStringAndSize(NULL, (n + 7) // 8)
        self.valid = <uint8_t*>PyBytes_AS_STRING(self.validity)
        memset(self.valid, 0, (n + 7) // 8)
        if self.kind == b"s" or self.kind == b"y":
            self.offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4)
            self.offs = <int32_t*>PyBytes_AS_STRING(self.offsets)
            self.offs[0] = 0
            return 0
        if self.kind == b"?":
            self.values = PyBytes_FromStringAndSize(NULL, (n + 7) // 8)
            memset(PyBytes_AS_STRING(self.values), 0, (n + 7) // 8)
        else:
            self.values = PyBytes_FromStringAndSize(NULL, n * width)
            memset(PyBytes_AS_STRING(self.values), 0, n * width)
        self.out = <uint8_t*>PyBytes_AS_STRING(self.values)
        return 0

    cdef int add(self, const char* p, Py_ssize_t size) except -1:
        """Append ``size`` bytes to a string or binary column's data."""
        cdef Py_ssize_t need = self.total + size, capacity
        cdef char* grown
        if need > self.capacity:
            capacity = max(need, 2 * self.capacity, 4096)
            grown = <char*>PyMem_Realloc(self.data, capacity)
            if grown == NULL:
                raise MemoryError()
            self.data = grown
            self.capacity = capacity
        memcpy(self.data + self.total, p, size)
        self.total = need
        return 0

    cdef inline int put(self, Py_ssize_t i, object v) except -1:
        """Row ``i``'s value; sets ``declined`` when it cannot take it."""
        cdef long long x
        cdef int overflow
        cdef Py_ssize_t size
        cdef const char* p
        cdef char kind = self.kind
        if v is None:
            self.nulls += 1
            if self.offs != NULL:
                self.offs[i + 1] = <int32_t>self.total
            return 0
        self.valid[i >> 3] |= 1 << (i & 7)
        if kind == b"s" or kind == b"y":
            if kind == b"s":
                if type(v) is not str:
                    self.declined = True
                    return 0
                try:
                    p = PyUnicode_AsUTF8AndSize(v, &size)
                except UnicodeError:  # a lone surrogate: the reference way says so
                    self.declined = True
                    return 0
            else:
                if type(v) is not bytes:
                    self.declined = True
                    return 0
                p = PyBytes_AS_STRING(v)
                size = PyBytes_GET_SIZE(v)
            if size > INT32_MAX - self.total:  # 32-bit offsets
                self.declined = True
                return 0
            self.add(p, size)
            self.offs[i + 1] = <int32_t>self.total
        elif kind == b"?":
            if v is True:
                self.out[i >> 3] |= 1 << (i & 7)
            elif v is not False:
                self.declined = True
        elif kind == b"d":
            if type(v) is not float:
                self.declined = True
                return 0
            (<double*>self.out)[i] = PyFloat_AS_DOUBLE(v)
        else:
            if type(v) is not int:
                self.declined = True
                return 0
            x = PyLong_AsLongLongAndOverflow(v, &overflow)
            if overflow:
                self.declined = True
            elif kind == b"b":
                if x < -128 or x > 127:
                    self.declined = True
                else:
                    (<int8_t*>self.out)[i] = <int8_t>x
            elif kind == b"i":
                if x < -2147483648 or x > 2147483647:
                    self.declined = True
                else:
                    (<int32_t*>self.out)[i] = <int32_t>x
            elif kind == b"t":
                # Nanoseconds to Spark's microseconds, rounded down as Python's // does
                # (Cython's // on C integers floors too, without the cdivision directive).
                (<int64_t*>self.out)[i] = x // 1000
            else:
                (<int64_t*>self.out)[i] = x
        return 0

    cdef object result(self):
        if self.declined:
            return None
        if self.offs != NULL:
            self.values = PyBytes_FromStringAndSize(self.data, self.total)
        return self.nulls, (self.validity if self.nulls else None), self.values, self.offsets


cdef Py_ssize_t _slot_offset(type cls, str name):
    """The offset of ``cls``'s ``__slots__`` member ``name`` (an object slot), else -1."""
    descr = None
    for klass in cls.__mro__:
        if name in klass.__dict__:
            descr = klass.__dict__[name]
            break
    return max(object_slot_offset(descr, False), -1)


def buffers(list objs, list sources, bytes kinds, bint mapping):
    """The Arrow buffers of columns of ``objs``: for column ``c``, ``sources[c]`` is a
    list of its values (one per object), or else the name of the attribute (or, when
    ``mapping``, the dict key) that holds it in each object; ``kinds[c]`` its type code
    (:data:`KINDS`; any other byte: None).  Each column comes as (null count, validity
    bitmap or None, values, offsets or None), or None when it must be built the
    reference way."""
    cdef Py_ssize_t n = PyList_GET_SIZE(objs), i, c, ncols = len(sources)
    cdef list columns = []
    cdef _Column col
    cdef object obj, v
    cdef PyObject* item
    cdef type cls = None
    if len(kinds) != ncols:
        raise ValueError("one type code per column")
    if n:
        cls = type(objs[0])
        for obj in objs:
            if mapping and type(obj) is not dict:
                raise TypeError("buffers(mapping=True) takes dicts")
            if type(obj) is not cls:
                cls = None  # several classes: attributes by getattr
                break
    for c in range(ncols):
        col = _Column()
        col.kind = kinds[c]
        col.source = sources[c]
        if type(col.source) is list:
            if PyList_GET_SIZE(col.source) != n:
                raise ValueError("a column's values are not one per object")
            col.how = FROM_LIST
        elif type(col.source) is not str:
            raise TypeError("a column's source is a list or a str")
        elif mapping:
            col.how = FROM_KEY
        else:
            col.how = FROM_ATTRIBUTE
            if cls is not None:
                col.offset = _slot_offset(cls, col.source)
                if col.offset >= 0:
                    col.how = FROM_SLOT
        col.declined = col.kind not in b"bilt?dsy"
        if not col.declined:
            col.start(n)
        columns.append(col)
    for i in range(n):
        obj = <object>PyList_GET_ITEM(objs, i)
        for c in range(ncols):
            col = <_Column>PyList_GET_ITEM(columns, c)
            if col.declined:
                continue
            if col.how == FROM_SLOT:
                item = (<PyObject**>((<char*><PyObject*>obj) + col.offset))[0]
                v = getattr(obj, col.source) if item == NULL else <object>item
            elif col.how == FROM_KEY:
                item = PyDict_GetItemWithError(obj, col.source)
                if item == NULL:
                    raise KeyError(col.source)
                v = <object>item
            elif col.how == FROM_LIST:
                v = <object>PyList_GET_ITEM(col.source, i)
            else:
                v = getattr(obj, col.source)
            col.put(i, v)
    return [col.result() for col in columns]
