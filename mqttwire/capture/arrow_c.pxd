# The declarations of arrow_c.pyx that the compiled capture loop (loop_c.pyx) uses: the
# PacketColumns class, whose row and fast_record it calls for each packet.

from cpython.object cimport PyObject
from libc.stdint cimport int32_t, uint8_t

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


cdef class PacketColumns:
    cdef Col* cols
    cdef Py_ssize_t ncols, n, cap
    cdef list objects  # per "o" column: {row: value}
    cdef object json
    cdef object tables, deriver
    cdef take_fn take
    cdef readonly long long fallbacks, side, fast, packets
    cdef readonly tuple names

    cdef int _room(self, Py_ssize_t cap) except -1
    cdef int row(self, PyObject** v) except -1
    cdef int fast_record(self, PyObject** v) except -1
    cdef bint take_row(self, PyObject** v) except -1
    cdef int add_fallback(self, PyObject** v) except -1
