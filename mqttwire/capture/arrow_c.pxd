# The declarations of arrow_c.pyx that the compiled capture loop (loop_c.pyx) uses: the
# PacketColumns class, whose row, fast_record and take_direct it calls for each packet.

from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t

from .direct_c cimport Direct

# The function a deriver offers (a capsule named TAKE_CAPSULE): take a record's fields
# (RECORD_FIELDS order) into the derived tables, 1 if taken, 0 to have tables.add take
# the record itself; -1 with an exception set.
ctypedef int (*take_fn)(object deriver, object tables, PyObject** v) except -1

# One column: its kind (arrow_c.COLUMN_KINDS), what it holds, and its Arrow buffers.
ctypedef struct Col:
    char kind
    int field
    int how
    int op  # how row writes it (arrow_c.pyx: OP_*)
    Py_ssize_t nulls
    uint8_t* valid
    char* values  # fixed-width values, or a bool bitmap
    int32_t* offs
    char* data  # string or binary bytes
    Py_ssize_t used, room  # of data


cdef enum:
    # The fields of a row's context (arrow_c.pyx, CTX_FIELDS), and the size of the
    # cache of contexts that rows are matched against (a power of 2).
    NCTX = 12
    CTX_BITS = 8
    CTX_SLOTS = 1 << CTX_BITS

# A context: its values (strong references, so that an address matched is the same
# object, never a new one at a freed one's place), and its row in the table of contexts
# of batch ``gen`` (a later batch: none yet).
ctypedef struct Ctx:
    PyObject* key[NCTX]
    int32_t index
    long long gen


cdef class PacketColumns:
    cdef Col* cols  # the columns written row by row (the context columns: in ctx)
    cdef Py_ssize_t ncols, n, cap
    cdef list objects  # per "o" column: {row: value}
    cdef object json
    cdef object tables, deriver
    cdef take_fn take
    cdef readonly long long fallbacks, side, fast, packets
    cdef readonly tuple names
    cdef tuple row_names  # of cols
    cdef tuple layout  # per column: its index in cols, or -1 - its index in ctx
    # The context columns: a table of the distinct contexts of the batch, and each row's
    # index into it; the cache that finds a row's context (last: the last one found).
    cdef PacketColumns ctx
    cdef int32_t* ctx_index
    cdef Ctx* slots
    cdef Ctx* last
    cdef long long gen
    # Whether the columns are the packets layout that _direct_row writes (DIRECT_LAYOUT),
    # and the last time it converted (a strong reference) and its value.
    cdef bint fixed
    # Whether the columns are the messages layout that _message_row writes (MESSAGE_KINDS).
    cdef readonly bint message_layout
    cdef object ts_obj
    cdef int64_t ts_val

    cdef int _room(self, Py_ssize_t cap) except -1
    cdef int row(self, PyObject** v) except -1
    cdef int32_t _context(self, PyObject** v) except -1
    cdef int fast_record(self, PyObject** v) except -1
    cdef bint take_row(self, PyObject** v) except -1
    cdef int _message_row(self, PyObject** v) except -1
    cdef int _direct_row(self, PyObject** v, const uint8_t* q, Direct* r, long long frame,
                         long long offset, Py_ssize_t length, Py_ssize_t cut) except -1
    cdef bint _time(self, PyObject* ts) except -1
    cdef bint direct_only(self, PyObject* ts) except -1
    cdef bint take_direct(self, PyObject** v, const uint8_t* q, Direct* r, long long frame,
                          long long offset, Py_ssize_t length, Py_ssize_t cut) except -1
    cdef int add_fallback(self, PyObject** v) except -1
