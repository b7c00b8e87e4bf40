# Included by _speedups.pyx (one extension module); the names other files use are declared
# in _speedups.pxd.
#
# The spec's data types read in C (MQTT 5.0 §1.5): the Variable Byte Integer inside a
# packet body, the UTF-8 Encoded String and Binary Data; what the property-block reader
# (_codec/properties_c.pxi) and the packet readers (_codec/decode_c.pxi) share.  The
# Python twin of these readers is _codec/datatypes.py.

# ---------------------------------------------------------------------------------------
# C readers for the MQTT 5.0 property block and for CONNECT, SUBSCRIBE, SUBACK, UNSUBSCRIBE
# and UNSUBACK.  They decode valid packets; at the first thing they do not vouch for they
# return _BAIL, and the caller hands the packet to the shared reference decoder (reference,
# _codec.properties), which raises exactly the error _pure raises, or decodes the valid rarity
# (a multi-byte property identifier, say, which the reference then refuses by name).  So
# the errors cannot differ between the twins, and the C code holds no error text.

_BAIL = object()


cdef inline bint _read_varint(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                              Py_ssize_t* value) noexcept:
    """A Variable Byte Integer in its shortest form (MQTT 5.0 §1.5.5), at most 4 bytes.

    The same reading as _cdefs.read_varint, written out here on purpose: built on that
    function, this reader (several calls per CONNECT) measured 8 to 10% slower on CONNECT
    decode (benchmarks/history/codec.md, "Refactor: files by
    concern")."""
    cdef Py_ssize_t i = pos[0], v = 0
    cdef int shift = 0
    cdef unsigned char byte
    while True:
        if i >= end or shift == 28:
            return False
        byte = p[i]
        i += 1
        v |= <Py_ssize_t>(byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if byte == 0 and i - pos[0] > 1:
        return False
    pos[0] = i
    value[0] = v
    return True


cdef object _read_str(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                      unsigned char refuse):
    """A UTF-8 Encoded String: well-formed, no U+0000 (MQTT 5.0 §1.5.4), and none of the
    byte classes in ``refuse`` (2: the wildcards of a topic name)."""
    cdef Py_ssize_t start = pos[0] + 2, stop, i
    cdef unsigned char classes = 0
    if end - pos[0] < 2:
        return _BAIL
    stop = start + ((p[pos[0]] << 8) | p[pos[0] + 1])
    if stop > end:
        return _BAIL
    for i in range(start, stop):
        classes |= _TOPIC_CLASS[p[i]]
    if classes & (1 | refuse):
        return _BAIL
    if classes & 4:  # non-ASCII: Python's codec refuses exactly what the rule refuses
        try:
            text = PyUnicode_DecodeUTF8(<const char*>p + start, stop - start, NULL)
        except UnicodeDecodeError:
            return _BAIL
    else:
        text = PyUnicode_New(stop - start, 127)
        memcpy(PyUnicode_DATA(text), p + start, stop - start)
    pos[0] = stop
    return text


cdef object _read_bin(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end):
    """Binary Data: a two-byte length, then the bytes (MQTT 5.0 §1.5.6)."""
    cdef Py_ssize_t start = pos[0] + 2, stop
    if end - pos[0] < 2:
        return _BAIL
    stop = start + ((p[pos[0]] << 8) | p[pos[0] + 1])
    if stop > end:
        return _BAIL
    pos[0] = stop
    return PyBytes_FromStringAndSize(<const char*>p + start, stop - start)


cdef bint _skip_str(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                    unsigned char refuse) except -1:
    """_read_str's checks without building the str: True (and *pos moved past it) when
    the UTF-8 Encoded String at *pos is one _read_str would return."""
    cdef Py_ssize_t start = pos[0] + 2, stop, i
    cdef unsigned char classes = 0
    if end - pos[0] < 2:
        return False
    stop = start + ((p[pos[0]] << 8) | p[pos[0] + 1])
    if stop > end:
        return False
    for i in range(start, stop):
        classes |= _TOPIC_CLASS[p[i]]
    if classes & (1 | refuse):
        return False
    if classes & 4:  # non-ASCII (rare): Python's codec is the judge, as in _read_str
        try:
            PyUnicode_DecodeUTF8(<const char*>p + start, stop - start, NULL)
        except UnicodeDecodeError:
            return False
    pos[0] = stop
    return True
