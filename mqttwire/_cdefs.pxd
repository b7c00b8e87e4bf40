# The C declarations of the compiled modules, written once, and the pieces of C code they
# share (the slot accessors, read_varint): _speedups.pyx (with its include files),
# _topics_c.pyx, capture/loop_c.pyx, spark/columns_c.pyx and spark/derive_c.pyx cimport what
# they use from here.  This .pxd has no .pyx of its own and builds no module, so a cimport
# from it adds nothing at run time: each module's C code calls these functions and macros
# directly, and the inline functions are compiled into each module that uses them.
#
# Declared here rather than cimported from Cython's own cpython/*.pxd where those are not
# what we need: theirs take `char *` where CPython takes `const char *` (our readers hold
# `const unsigned char *` input), and some (the compact-ASCII macros, the member
# descriptor) are not declared there at all.

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_XDECREF, Py_XINCREF


cdef extern from "Python.h":
    # str internals, for the codec's zero-copy ASCII reads and writes (_speedups) and the
    # topic scans over a str's code points (_topics_c).  Extern functions are noexcept.
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object text)
    bint PyUnicode_IS_COMPACT_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    # The canonical storage's width (1, 2 or 4 bytes per code point), and one code point.
    int PyUnicode_KIND(object text)
    Py_UCS4 PyUnicode_READ(int kind, const void* data, Py_ssize_t index)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    bytes PyBytes_FromStringAndSize(const char* v, Py_ssize_t size)
    object PyObject_GenericGetDict(object o, void* context)
    int PyObject_GenericSetDict(object o, object value, void* context) except -1
    int PyObject_GenericSetAttr(object o, object name, object value) except -1
    # The same, where ``value`` may be NULL (a deletion).
    int generic_setattro "PyObject_GenericSetAttr"(
        PyObject* o, PyObject* name, PyObject* value) except -1
    # Allocation as object.__new__(cls) does it, without the call through the type
    # (_speedups: a Properties, a plain class with no __new__ of its own), and as
    # type.__call__ allocates before __init__ (capture/loop_c: a Record, filled slot by slot).
    object PyType_GenericNew(PyTypeObject* cls, PyObject* args, PyObject* kwds)
    object PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t nitems)
    # The type change of a decoded Properties once its values are built (_speedups).
    void Py_SET_TYPE(object o, PyTypeObject* t)
    # A range check that cannot overflow: both modules hand a too-large int to Python code.
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1
    # The singletons, compared by address when capture/loop_c reads a slot it borrowed.
    PyObject* Py_None
    PyObject* Py_True
    PyObject* Py_False
    # The version of the CPython headers the module is built against (one build per
    # version), where the object layout the code relies on differs between versions.
    const long PY_VERSION_HEX


# A __slots__ member descriptor and its entry (capture/loop_c and spark/columns_c reach the
# pure objects' slots by the offsets these give).
cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
        const char* doc
    int T_OBJECT_EX
    int READONLY

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    PyTypeObject PyMemberDescr_Type
    object PyDescr_NewMember(PyTypeObject* type, PyMemberDef* member)
    void PyType_Modified(PyTypeObject* type)
    ctypedef int (*setattrofunc)(PyObject* obj, PyObject* name, PyObject* value) except -1

# Two slots of a type object that Cython's PyTypeObject does not declare.
cdef extern from *:
    """
    static void mqttwire_set_setattro(PyTypeObject *type, setattrofunc f) {
        type->tp_setattro = f;
    }
    static PyObject *mqttwire_type_dict(PyTypeObject *type) { return type->tp_dict; }
    """
    void set_setattro "mqttwire_set_setattro"(PyTypeObject* type, setattrofunc f)
    PyObject* type_dict "mqttwire_type_dict"(PyTypeObject* type)  # borrowed


cdef inline PyMemberDef* slot_member(object descr) noexcept:
    """The entry of a ``__slots__`` member descriptor (its type, offset and flags), or NULL
    when ``descr`` is not one (object_slot_offset, below, reads the offset from it)."""
    if type(descr) is not <object><PyObject*>&PyMemberDescr_Type:
        return NULL
    return (<PyMemberDescrObject*>descr).d_member


cdef inline Py_ssize_t object_slot_offset(object descr, bint writable) noexcept:
    """The offset at which instances hold the object slot of member descriptor ``descr``:
    -1 if ``descr`` is not a slot's (slot_member), -2 if the slot is not an object slot
    or, when ``writable``, is read-only.  Each module raises its own error for these."""
    cdef PyMemberDef* member = slot_member(descr)
    if member == NULL:
        return -1
    if member.type != T_OBJECT_EX or (writable and member.flags & READONLY):
        return -2
    return member.offset


cdef inline PyObject* slot_get(object obj, Py_ssize_t off) noexcept:
    """The value of the object slot at offset ``off`` (slot_member), borrowed (NULL if it
    was never set)."""
    return (<PyObject**>((<char*><PyObject*>obj) + off))[0]


cdef inline void slot_put(object obj, Py_ssize_t off, object value) noexcept:
    """Store ``value`` in the object slot at offset ``off``, as ``obj.<slot> = value``
    does."""
    cdef PyObject** slot = <PyObject**>((<char*><PyObject*>obj) + off)
    cdef PyObject* old = slot[0]
    Py_XINCREF(<PyObject*>value)
    slot[0] = <PyObject*>value
    Py_XDECREF(old)


# An exact int's value as a C long long (``overflow`` set, -1 returned, when it does not
# fit), and a str's UTF-8: the one-digit int and the ASCII str read from the object as
# CPython's own code reads them, any other through the C API's call, a call that costs
# more from 3.12 on (the new int layout).  long_value's callers check the exact type
# first.
#
# uint_in_range: ``value`` when it is an int (not a bool, not a subclass) from 0 to
# ``top``, else -1: a range check without Python comparisons that cannot overflow (a value
# too large for a C integer must reach the reference code, which names it in its error).
# Every packet field but a few 4-byte ones is an int of one digit (below 2**30).
#
# Written in C to be inlined at every call: GCC stopped inlining the Cython function into
# the encoders when built against 3.12's headers (larger Py_INCREF/Py_DECREF).  The
# codec's encoders use uint_in_range; the compiled capture code's Arrow columns
# (capture/arrow_c.pyx), which convert every value of every row, long_value and utf8.
cdef extern from *:
    """
    #include <limits.h>
    #if defined(__GNUC__)
    #define MQTTWIRE_ALWAYS_INLINE static inline __attribute__((always_inline))
    #else
    #define MQTTWIRE_ALWAYS_INLINE static inline
    #endif
    MQTTWIRE_ALWAYS_INLINE long long mqttwire_long_value(PyObject *v, int *overflow) {
    #if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)v)) {
            return (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
        }
    #else
        if (Py_SIZE(v) == 0) return 0;
        if (Py_SIZE(v) == 1) return (long long)((PyLongObject *)v)->ob_digit[0];
        if (Py_SIZE(v) == -1) return -(long long)((PyLongObject *)v)->ob_digit[0];
    #endif
        return PyLong_AsLongLongAndOverflow(v, overflow);
    }
    MQTTWIRE_ALWAYS_INLINE long long mqttwire_uint_in_range(PyObject *v, long long top) {
        long long x;
        int overflow = 0;
        if (Py_TYPE(v) != &PyLong_Type) return -1;
        x = mqttwire_long_value(v, &overflow);
        return (!overflow && x >= 0 && x <= top) ? x : -1;
    }
    MQTTWIRE_ALWAYS_INLINE const char *mqttwire_utf8(PyObject *s, Py_ssize_t *size) {
        if (PyUnicode_IS_COMPACT_ASCII(s)) {
            *size = PyUnicode_GET_LENGTH(s);
            return (const char *)PyUnicode_DATA(s);
        }
        return PyUnicode_AsUTF8AndSize(s, size);
    }
    """
    long long uint_in_range "mqttwire_uint_in_range"(object value, long long top) noexcept
    long long long_value "mqttwire_long_value"(object value, int* overflow) noexcept
    const char* utf8 "mqttwire_utf8"(object text, Py_ssize_t* size) except NULL


# MQTT 5.0 §1.5.5: the largest Remaining Length, 268,435,455 (_constants.MAX_REMAINING_LENGTH
# for Python code), as a C constant the compiler can fold.
cdef extern from *:
    """
    #define MQTTWIRE_MAX_REMAINING_LENGTH 268435455
    """
    const Py_ssize_t MQTTWIRE_MAX_REMAINING_LENGTH


# The Variable Byte Integer (MQTT 5.0 §1.5.5) read in C: the Remaining Length of every fixed
# header (_speedups' decoders and StreamDecoder, capture/loop_c's framing loop) and the
# length of a property block that _speedups hands to the shared reader.  Written once so
# that the rule about the fourth byte cannot drift between them; what each caller does
# with the outcome (raise, hand over, wait for the next segment) and the shortest-form
# check, which the capture loop leaves to the codec, stay with the caller.  (The property
# reader's _read_varint keeps its own copy of the loop: see its docstring.)
cdef inline int read_varint(const unsigned char* p, Py_ssize_t i, Py_ssize_t end,
                            Py_ssize_t* value, Py_ssize_t* after) noexcept nogil:
    """The Variable Byte Integer at p[i], reading no byte at or past ``end``: 1 with *value
    and *after (the index just after it) set; 0 when ``end`` comes first; -1 when its
    fourth byte has the continuation bit set (a fifth byte would be needed, and an MQTT
    Variable Byte Integer has at most four)."""
    cdef Py_ssize_t v = 0
    cdef int shift = 0
    cdef unsigned char byte
    while True:
        if i >= end:
            return 0
        byte = p[i]
        i += 1
        v |= <Py_ssize_t>(byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift == 28:
            return -1
    value[0] = v
    after[0] = i
    return 1
