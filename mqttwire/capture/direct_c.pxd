# What the compiled capture loop (loop_c.pyx, FastReader._direct) reads of a packet itself,
# without the codec's StreamDecoder: a PUBLISH of QoS 0 or 1 without DUP, an ASCII topic
# name and no properties, and a PUBLISH's PUBACK without properties, each whole in one
# segment.  Only packets that the decoder would decode without an error, into exactly
# these values, are read: anything else (which the decoder then reads, and reports when
# it is wrong) makes read_direct return False.  Inline functions and types only:
# cimporting this file imports no module at run time.

from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF, Py_XINCREF
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcmp, memcpy

from .._cdefs cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_New, read_varint

# The packet's values: its type (3 PUBLISH, 4 PUBACK); for a PUBLISH its QoS and retain
# flag, its topic name and payload (offsets from the packet's first byte, and sizes);
# its packet identifier (0 for QoS 0); a PUBACK's reason code (0 when absent).
ctypedef struct Direct:
    int ptype, qos, retain, packet_id, code
    Py_ssize_t topic, topic_size, payload, payload_size


cdef inline bint read_direct(const uint8_t* q, Py_ssize_t size, int version,
                             const bint* puback_ok, Direct* out) noexcept:
    """Read the packet q[0:size] (whole, as the framing found it) at protocol level
    ``version`` (3 to 5) into ``out``, if it is one this path takes; ``puback_ok[c]``:
    c is a PUBACK reason code of MQTT 5.0 (§3.4.2.1)."""
    cdef Py_ssize_t hs, length, i, pos
    cdef int b0 = q[0]
    # The fixed header in its shortest form [MQTT-1.5.5-1] (else the decoder's error).
    if read_varint(q, 1, size, &length, &hs) != 1 or (q[hs - 1] == 0 and hs > 2):
        return False
    if b0 == 0x30 or b0 == 0x31 or b0 == 0x32 or b0 == 0x33:  # PUBLISH, QoS 0 or 1, no DUP
        out.ptype = 3
        out.qos = (b0 >> 1) & 1
        out.retain = b0 & 1
        if length < 2:
            return False
        out.topic = hs + 2
        out.topic_size = (q[hs] << 8) | q[hs + 1]
        if out.topic_size == 0 or out.topic_size + 2 > length:
            return False  # an empty topic name: an error, or a Topic Alias (properties)
        for i in range(out.topic, out.topic + out.topic_size):
            # Not ASCII, U+0000 [MQTT-1.5.4-2] or a wildcard [MQTT-3.3.2-2]: the decoder's.
            if q[i] == 0 or q[i] >= 0x80 or q[i] == 0x23 or q[i] == 0x2B:
                return False
        pos = out.topic + out.topic_size
        out.packet_id = 0
        if out.qos:
            if size - pos < 2:
                return False
            out.packet_id = (q[pos] << 8) | q[pos + 1]
            if out.packet_id == 0:  # [MQTT-2.2.1-3]
                return False
            pos += 2
        if version == 5:
            if pos >= size or q[pos] != 0:
                return False  # properties: the decoder reads them
            pos += 1
        out.payload = pos
        out.payload_size = size - pos
        out.code = 0
        return True
    if b0 == 0x40:  # PUBACK
        if length < 2:
            return False
        out.ptype = 4
        out.packet_id = (q[hs] << 8) | q[hs + 1]
        if out.packet_id == 0:
            return False
        out.code = 0
        if length != 2:
            # MQTT 5.0 §3.4.2.1: a reason code (with properties: the decoder's)
            if version < 5 or length != 3 or not puback_ok[q[hs + 2]]:
                return False
            out.code = q[hs + 2]
        return True
    return False


cdef inline object cached_topic(PyObject** cache, int bits, const uint8_t* p,
                                Py_ssize_t n):
    """The str of the ASCII topic name p[0:n], from ``cache`` (a direct-mapped cache of
    2**bits strong references, by the name's bytes) when it holds it: a topic that recurs
    (most do) is one object, not a new str per PUBLISH."""
    cdef uint64_t h = 1469598103934665603ULL
    cdef Py_ssize_t i
    cdef PyObject** slot
    cdef object text
    for i in range(n):
        h = (h ^ p[i]) * 1099511628211ULL
    slot = &cache[(h ^ (h >> 32)) & ((1 << bits) - 1)]
    if slot[0] != NULL:
        text = <object>slot[0]
        if PyUnicode_GET_LENGTH(text) == n and memcmp(PyUnicode_DATA(text), p, n) == 0:
            return text
    text = PyUnicode_New(n, 127)
    memcpy(PyUnicode_DATA(text), p, n)
    Py_XINCREF(<PyObject*>text)
    Py_XDECREF(slot[0])
    slot[0] = <PyObject*>text
    return text
