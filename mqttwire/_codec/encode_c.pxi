# Included by _speedups.pyx (one extension module); the names other files use are declared
# in _speedups.pxd.
#
# Encoding in C: the output buffer (_Out), length-prefixed fields, property blocks,
# CONNECT, SUBSCRIBE, PUBLISH and the four acknowledgements, PreparedPublish and encode().
# The twin of _codec/encode.py, which hands everything to the shared reference encoders.

# ---------------------------------------------------------------------------------------
# Encoding the hot packets.  The fast path handles well-typed, valid packets in C; anything
# else (wrong types, invalid values, a lone surrogate, an empty v5 topic with an alias) is
# handed to the shared reference encoder (_codec.publish), which raises exactly the error _pure
# raises, or, for the valid rarities, encodes it.


cdef inline Py_ssize_t _varint_size(Py_ssize_t value) noexcept:
    if value < 0x80:
        return 1
    if value < 0x4000:
        return 2
    if value < 0x200000:
        return 3
    return 4


# The encoders write into an _Out: a buffer on the caller's stack that moves to the heap
# only when a packet outgrows it.  (Appending to a bytearray resizes it on every append,
# which cost more than the encoding itself.)  The caller frees it with _out_free in a
# finally clause.

cdef enum:
    _STACK = 512  # bytes of stack buffer per encoder: most packets fit

# The buffer and its appenders are C, so that the compiler inlines the appenders at every
# call whatever the Python headers make of the code around them: as Cython functions, GCC
# inlined _put into the encoders when built against 3.11's headers and called it when
# built against 3.12's (whose Py_INCREF/Py_DECREF are larger), 290 instructions more per
# CONNECT encode (benchmarks/peers.md, "CPython 3.12 and 3.13").
cdef extern from *:
    """
    #ifndef MQTTWIRE_ALWAYS_INLINE
    #if defined(__GNUC__)
    #define MQTTWIRE_ALWAYS_INLINE static inline __attribute__((always_inline))
    #else
    #define MQTTWIRE_ALWAYS_INLINE static inline
    #endif
    #endif
    typedef struct {
        unsigned char *p;     /* the stack buffer, or heap */
        Py_ssize_t n;         /* bytes written */
        Py_ssize_t cap;
        unsigned char *heap;  /* NULL until the stack buffer is outgrown */
    } mqttwire_out;

    static int mqttwire_out_grow(mqttwire_out *o, Py_ssize_t more) {
        Py_ssize_t cap = o->cap * 2;
        unsigned char *q;
        while (cap < o->n + more) cap *= 2;
        if (o->heap == NULL) {
            q = (unsigned char *)malloc(cap);
            if (q != NULL) memcpy(q, o->p, o->n);
        } else {
            q = (unsigned char *)realloc(o->heap, cap);
        }
        if (q == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        o->heap = q;
        o->p = q;
        o->cap = cap;
        return 0;
    }

    /* memcpy for the short fields of a packet (a client id, a topic, a property block)
       without the call: up to 16 bytes in two overlapping loads and stores */
    MQTTWIRE_ALWAYS_INLINE void mqttwire_copy(unsigned char *d, const void *src, Py_ssize_t n) {
        const unsigned char *s = (const unsigned char *)src;
        if (n > 16) {
            memcpy(d, s, (size_t)n);
        } else if (n >= 8) {
            uint64_t a, b;
            memcpy(&a, s, 8); memcpy(&b, s + n - 8, 8);
            memcpy(d, &a, 8); memcpy(d + n - 8, &b, 8);
        } else if (n >= 4) {
            uint32_t a, b;
            memcpy(&a, s, 4); memcpy(&b, s + n - 4, 4);
            memcpy(d, &a, 4); memcpy(d + n - 4, &b, 4);
        } else if (n > 0) {  /* 1 to 3 bytes: 0, n / 2 and n - 1 cover them */
            unsigned char a = s[0], b = s[n / 2], c = s[n - 1];
            d[0] = a; d[n / 2] = b; d[n - 1] = c;
        }
    }

    /* A Variable Byte Integer (MQTT 5.0 §1.5.5) at ``out``: its length, 1 to 4 */
    MQTTWIRE_ALWAYS_INLINE Py_ssize_t mqttwire_varint_write(unsigned char *out, Py_ssize_t v) {
        Py_ssize_t i = 0;
        for (; v >= 0x80; v >>= 7) out[i++] = (unsigned char)((v & 0x7F) | 0x80);
        out[i++] = (unsigned char)v;
        return i;
    }

    MQTTWIRE_ALWAYS_INLINE int mqttwire_put(mqttwire_out *o, const void *data, Py_ssize_t n) {
        if (o->n + n > o->cap && mqttwire_out_grow(o, n) < 0) return -1;
        memcpy(o->p + o->n, data, n);
        o->n += n;
        return 0;
    }

    /* the same for a field's bytes, short as a rule */
    MQTTWIRE_ALWAYS_INLINE int mqttwire_put_field(mqttwire_out *o, const void *data, Py_ssize_t n) {
        if (o->n + n > o->cap && mqttwire_out_grow(o, n) < 0) return -1;
        mqttwire_copy(o->p + o->n, data, n);
        o->n += n;
        return 0;
    }

    MQTTWIRE_ALWAYS_INLINE int mqttwire_put1(mqttwire_out *o, unsigned char byte) {
        if (o->n >= o->cap && mqttwire_out_grow(o, 1) < 0) return -1;
        o->p[o->n] = byte;
        o->n += 1;
        return 0;
    }

    MQTTWIRE_ALWAYS_INLINE int mqttwire_put_u16(mqttwire_out *o, Py_ssize_t value) {
        if (o->n + 2 > o->cap && mqttwire_out_grow(o, 2) < 0) return -1;
        o->p[o->n] = (unsigned char)(value >> 8);
        o->p[o->n + 1] = (unsigned char)(value & 0xFF);
        o->n += 2;
        return 0;
    }

    /* bytes with a length prefix: two bytes (Binary Data, ``varint`` 0), or a Variable
       Byte Integer (a property block, ``varint`` 1); 1, or 0 when it is not bytes of
       at most 65,535 (Binary Data) */
    MQTTWIRE_ALWAYS_INLINE int mqttwire_put_binary(mqttwire_out *o, PyObject *data, int varint) {
        Py_ssize_t n;
        if (Py_TYPE(data) != &PyBytes_Type) return 0;
        n = PyBytes_GET_SIZE(data);
        if (varint) {  /* a block: shorter than a packet, so 4 bytes of length at most */
            if (o->n + 4 > o->cap && mqttwire_out_grow(o, 4) < 0) return -1;
            o->n += mqttwire_varint_write(o->p + o->n, n);
        } else if (n > 0xFFFF) {
            return 0;
        } else if (mqttwire_put_u16(o, n) < 0) {
            return -1;
        }
        return mqttwire_put_field(o, PyBytes_AS_STRING(data), n) < 0 ? -1 : 1;
    }

    /* No U+0000 (MQTT 5.0 §1.5.4), and for a topic name no wildcard [MQTT-3.3.2-2] */
    MQTTWIRE_ALWAYS_INLINE int mqttwire_plain(const char *raw, Py_ssize_t n, int is_topic) {
        return memchr(raw, 0, (size_t)n) == NULL
            && (!is_topic || (memchr(raw, 0x2B, (size_t)n) == NULL
                              && memchr(raw, 0x23, (size_t)n) == NULL));
    }

    /* A length-prefixed UTF-8 string from an ASCII str, read in place: 1; 0 when it is
       not a str or not plain text (the caller lets the reference encoder decide); 2
       when it is a str but not ASCII (the caller encodes it to UTF-8 first) */
    MQTTWIRE_ALWAYS_INLINE int mqttwire_put_ascii(mqttwire_out *o, PyObject *text, int is_topic) {
        Py_ssize_t n;
        const char *raw;
        if (Py_TYPE(text) != &PyUnicode_Type) return 0;
        if (!PyUnicode_IS_COMPACT_ASCII(text)) return 2;
        n = PyUnicode_GET_LENGTH(text);
        raw = (const char *)PyUnicode_DATA(text);
        if (n > 0xFFFF || !mqttwire_plain(raw, n, is_topic)) return 0;
        if (mqttwire_put_u16(o, n) < 0 || mqttwire_put_field(o, raw, n) < 0) return -1;
        return 1;
    }
    """
    ctypedef struct _Out "mqttwire_out":
        unsigned char* p  # the stack buffer, or ``heap``
        Py_ssize_t n  # bytes written
        Py_ssize_t cap
        unsigned char* heap  # NULL until the stack buffer is outgrown
    int _put "mqttwire_put"(_Out* o, const void* data, Py_ssize_t n) except -1
    int _put1 "mqttwire_put1"(_Out* o, unsigned char byte) except -1
    int _put_u16 "mqttwire_put_u16"(_Out* o, Py_ssize_t value) except -1
    Py_ssize_t _write_varint "mqttwire_varint_write"(unsigned char* out,
                                                     Py_ssize_t value) noexcept
    # No U+0000, and for a topic name no wildcard (mqttwire_plain above).
    bint _plain_text "mqttwire_plain"(const char* raw, Py_ssize_t n, bint is_topic) noexcept
    # Borrowed arguments: Cython takes a reference to a field it passes as an object.
    int _put_binary "mqttwire_put_binary"(_Out* o, PyObject* data, int varint) except -1
    int _put_ascii "mqttwire_put_ascii"(_Out* o, PyObject* text, int is_topic) except -1


# The encoders' results: a bytes object of ``n`` bytes (1 <= n, no larger than a packet)
# allocated and initialised as bytesobject.c's _PyBytes_FromSize does it (obmalloc, the
# object header, the cached hash unset, the trailing NUL), without the checks that
# PyBytes_FromStringAndSize makes first (a negative size, the empty and one-character
# singletons, the overflow) and, in _bytes_of, with the copy inlined instead of a call to
# memcpy: about 40 of the 91 instructions a 4-byte result cost that way on 3.11
# (benchmarks/peers.md, "Issue 44, fourth pass").  ob_shash is deprecated from 3.11 but
# still read by hash(); -1 is "not computed".
cdef extern from *:
    """
    MQTTWIRE_ALWAYS_INLINE PyObject *mqttwire_bytes_new(Py_ssize_t n) {
        PyBytesObject *op = (PyBytesObject *)PyObject_Malloc(
            offsetof(PyBytesObject, ob_sval) + (size_t)n + 1);
        if (op == NULL) return PyErr_NoMemory();
        PyObject_InitVar((PyVarObject *)op, &PyBytes_Type, n);
    _Py_COMP_DIAG_PUSH
    _Py_COMP_DIAG_IGNORE_DEPR_DECLS
        op->ob_shash = -1;
    _Py_COMP_DIAG_POP
        op->ob_sval[n] = 0;
        return (PyObject *)op;
    }
    /* n a constant at the call, so that the copy is a few moves */
    MQTTWIRE_ALWAYS_INLINE PyObject *mqttwire_bytes_of(const void *src, Py_ssize_t n) {
        PyObject *op = mqttwire_bytes_new(n);
        if (op != NULL) memcpy(((PyBytesObject *)op)->ob_sval, src, (size_t)n);
        return op;
    }
    """
    bytes _bytes_new "mqttwire_bytes_new"(Py_ssize_t n)
    bytes _bytes_of "mqttwire_bytes_of"(const void* src, Py_ssize_t n)
    # _uint (_cdefs.uint_in_range) on a borrowed field: Cython takes a reference to a
    # field it passes as an object argument, and drops it after the call.
    long long _uint_at "mqttwire_uint_in_range"(PyObject* value, long long top) noexcept


cdef inline void _out_init(_Out* o, unsigned char* stack) noexcept:
    o.p = stack
    o.n = 0
    o.cap = _STACK
    o.heap = NULL


cdef inline void _out_free(_Out* o) noexcept:
    if o.heap != NULL:
        free(o.heap)
        o.heap = NULL


cdef inline const char* _utf8(object text, Py_ssize_t* n) except? NULL:
    """The UTF-8 form of a str, or NULL when it has none (a lone surrogate).  An ASCII str
    is its own UTF-8: its characters are read in place, with no encoding step and no
    exception handling on the common path."""
    cdef const char* raw
    if PyUnicode_IS_COMPACT_ASCII(text):
        n[0] = PyUnicode_GET_LENGTH(text)
        return <const char*>PyUnicode_DATA(text)
    try:
        raw = PyUnicode_AsUTF8AndSize(text, n)
    except UnicodeEncodeError:
        return NULL
    return raw


cdef int _utf8_field(_Out* out, object text, bint is_topic) except -1:
    """Append a length-prefixed UTF-8 string: 1, or 0 (nothing appended, nothing to trust)
    when it is not a plain str the decoder would accept; the caller then lets the shared
    encoder decide.  An ASCII str is appended in C."""
    cdef int done = _put_ascii(out, <PyObject*>text, is_topic)
    return _utf8_encoded(out, text, is_topic) if done == 2 else done


cdef int _utf8_encoded(_Out* out, object text, bint is_topic) except -1:
    """_utf8_field of a str that is not ASCII: encoded to UTF-8 first."""
    cdef const char* raw
    cdef Py_ssize_t n
    raw = _utf8(text, &n)
    if raw == NULL or n > 0xFFFF or not _plain_text(raw, n, is_topic):
        return 0
    _put_u16(out, n)
    _put(out, raw, n)
    return 1


cdef struct _Prop:
    int pid
    PyObject* value  # a strong reference, released by _release()


cdef int _collect(object props, _Prop* items, unsigned long long skip) except -2:
    """The properties present in a Properties (what Properties.items() gives), into
    ``items`` in identifier order, leaving out the identifiers set in ``skip``: their
    number.  The slots are read in identifier order, so no sorting is needed.  The caller
    releases the values with _release(): encoding allocates, an allocation may run a
    finalizer, and a finalizer could change the Properties under us."""
    cdef PyObject* value
    cdef int n = 0, pid, k
    for k in range(_PROP_COUNT):
        pid = _PROP_IDS[k]
        if skip >> pid & 1:
            continue
        value = slot_get(props, _PROP_OFFSET[pid])
        if (value == NULL or <object>value is None
                or (type(<object>value) is list and not <list>value)):
            continue
        items[n].pid = pid
        items[n].value = value
        Py_INCREF(<object>value)
        n += 1
    return n


cdef inline void _release(_Prop* items, int count) noexcept:
    cdef int k
    for k in range(count):
        Py_DECREF(<object>items[k].value)


cdef int _encode_properties(_Out* out, _Prop* items, int count, int ptype) except -1:
    """Append the properties ``items`` (without the block's length prefix) as
    _codec.properties.encode_properties writes them: 1, or 0 when they are not all well-typed
    and valid (the caller then hands the whole packet to the reference encoder, which
    raises its exact error)."""
    cdef int pid, kind, k
    cdef unsigned int allowed_bit = 1u << ptype
    cdef long long v
    cdef bint has_method = False, has_data = False
    cdef unsigned char buf[5]
    for k in range(count):
        pid = items[k].pid
        value = <object>items[k].value
        kind = _PROP_KIND[pid]
        if not _PROP_ALLOWED[pid] & allowed_bit:
            return 0
        if kind <= 2:  # BYTE, U16, U32
            v = _uint(value, 0xFF if kind == 0 else 0xFFFF if kind == 1 else 0xFFFFFFFF)
            if v < 0:
                return 0
            if (_PROP_FLAGS[pid] & 1 and v > 1) or (_PROP_FLAGS[pid] & 2 and v == 0):
                return 0
            buf[0] = pid
            if kind == 0:
                buf[1] = <unsigned char>v
                _put(out, buf, 2)
            elif kind == 1:
                buf[1] = <unsigned char>(v >> 8)
                buf[2] = <unsigned char>(v & 0xFF)
                _put(out, buf, 3)
            else:
                buf[1] = <unsigned char>(v >> 24)
                buf[2] = <unsigned char>((v >> 16) & 0xFF)
                buf[3] = <unsigned char>((v >> 8) & 0xFF)
                buf[4] = <unsigned char>(v & 0xFF)
                _put(out, buf, 5)
        elif kind == 3:  # VARINT: the Subscription Identifiers, one or more
            if type(value) is not list or (len(<list>value) > 1 and ptype != 3):
                return 0
            for ident in <list>value:
                v = _uint(ident, MQTTWIRE_MAX_REMAINING_LENGTH)
                if v <= 0:
                    return 0
                buf[0] = pid
                _put(out, buf, 1 + _write_varint(buf + 1, v))
        elif kind == 4:  # UTF-8 string; a Response Topic is a topic name [MQTT-3.3.2-14]
            _put1(out, pid)
            if not _utf8_field(out, value, pid == 0x08):
                return 0
            has_method |= pid == 0x15
        elif kind == 5:  # Binary Data
            _put1(out, pid)
            if not _put_binary(out, <PyObject*>value, 0):
                return 0
            has_data |= pid == 0x16
        else:  # User Properties: (name, value) string pairs, in order
            if type(value) is not list:
                return 0
            for pair in <list>value:
                if type(pair) is not tuple or len(<tuple>pair) != 2:
                    return 0
                _put1(out, pid)
                if not (_utf8_field(out, (<tuple>pair)[0], False)
                        and _utf8_field(out, (<tuple>pair)[1], False)):
                    return 0
    if has_data and not has_method:
        return 0
    return 1


cdef inline int _append_block(_Out* out, PyObject* props, int ptype) except -1:
    """Append a v5 property block (length prefix, then properties) of a borrowed
    Properties or None: 1, or 0 when the properties are not all well-typed and valid.
    The block an earlier encode of this packet type kept is copied here; anything else
    is _append_any's."""
    cdef PyObject* kept
    cdef PyTypeObject* cls = Py_TYPE(<object>props)
    if cls is _DECODED or cls is _PROPERTIES:
        kept = _kept_block(<object>props, ptype)
        if kept != NULL:
            return _put_binary(out, kept, 1)
    return _append_any(out, <object>props, ptype)


cdef int _append_any(_Out* out, object props, int ptype) except -1:
    """Append a v5 property block (length prefix, then properties): 1, or 0 when the
    properties are not all well-typed and valid (the caller then hands the packet to the
    reference encoder).  A block that the Properties holds for this packet type (decoded,
    or written by an earlier encode) is copied as it is; one written here is kept."""
    cdef _Prop items[32]
    cdef int count = 0
    cdef unsigned char stack[_STACK]
    cdef unsigned char prefix[4]
    cdef _Out block
    cdef PyTypeObject* cls
    if props is not None:
        cls = Py_TYPE(props)
        if cls is _DECODED or cls is _PROPERTIES:
            wire = _reusable_block(props, ptype)
            if wire is not None:
                _put(out, prefix, _write_varint(prefix, PyBytes_GET_SIZE(wire)))
                _put(out, PyBytes_AS_STRING(wire), PyBytes_GET_SIZE(wire))
                return 1
            _materialize(props)  # decoded for another packet type: build the values
        else:
            return 0
        count = _collect(props, items, 0)
        if count < 0:
            return 0
    if count == 0:  # an empty Properties counts as none
        _put1(out, 0)
        return 1
    _out_init(&block, stack)
    try:
        if not _encode_properties(&block, items, count, ptype):
            return 0
        _put(out, prefix, _write_varint(prefix, block.n))
        _put(out, block.p, block.n)
        _keep_block(props, block.p, block.n, ptype)
    finally:
        _out_free(&block)
        _release(items, count)
    return 1


cdef object _encode_connect(Connect pkt):
    """CONNECT (MQTT 5.0 §3.1) for well-typed, valid fields; anything else is handed to the
    shared reference.encode_connect, which raises exactly the reference's error."""
    cdef unsigned char stack[_STACK]
    cdef _Out body
    _out_init(&body, stack)
    try:
        if _connect_body(pkt, &body):
            data = _frame(0x10, &body)
            if data is not None:
                return data
    finally:
        _out_free(&body)
    return reference.encode_connect(pkt)


cdef inline int _text_at(_Out* out, PyObject* text, bint is_topic) except -1:
    """_utf8_field of a borrowed field."""
    cdef int done = _put_ascii(out, text, is_topic)
    return _utf8_encoded(out, <object>text, is_topic) if done == 2 else done


cdef int _connect_body(Connect pkt, _Out* body) except -1:
    # The fields are read borrowed: Cython took a reference to each and dropped it after
    # (on 3.12 and 3.13 an immortality check both ways).
    cdef PyObject* will = <PyObject*>pkt.will
    cdef PyObject* username = <PyObject*>pkt.username
    cdef PyObject* password = <PyObject*>pkt.password
    cdef PyObject* none = <PyObject*>None
    cdef int version = <int>_uint_at(<PyObject*>pkt.protocol_version, 5), flags = 0
    cdef long long keep = _uint_at(<PyObject*>pkt.keep_alive, 0xFFFF), will_qos
    cdef Will w = None
    if version < 3 or keep < 0:
        return 0
    if will != none:
        if type(<object>will) is not Will:
            return 0
        w = <Will>will
        will_qos = _uint_at(<PyObject*>w.qos, 2)
        if will_qos < 0 or not w.topic or (version < 5 and (w._raw is not None
                                                           or w._properties)):
            return 0
        flags |= 0x04 | (<int>will_qos << 3) | (0x20 if w.retain else 0)
    if username != none:
        flags |= 0x80
    if password != none:
        if username == none and version < 5:
            return 0
        flags |= 0x40
    if pkt.clean_start:
        flags |= 0x02
    if version < 5 and (pkt._raw is not None or pkt._properties):
        return 0
    # Protocol Name (MQIsdp for 3.1, MQTT after), Protocol Level, Connect Flags, Keep Alive
    if version == 3:
        _put(body, b"\x00\x06MQIsdp", 8)
    else:
        _put(body, b"\x00\x04MQTT", 6)
    _put1(body, version)
    _put1(body, flags)
    _put_u16(body, keep)
    # The fields, not the properties attribute (a getter that would make the Properties
    # of a decoded block); a decoded block (bytes, else None) is copied as it came.
    if version == 5 and not (_put_binary(body, <PyObject*>pkt._raw, 1)
                             or _append_block(body, <PyObject*>pkt._properties, 1)):
        return 0
    if not _text_at(body, <PyObject*>pkt.client_id, False):
        return 0
    if w is not None:
        if version == 5 and not (_put_binary(body, <PyObject*>w._raw, 1)
                                 or _append_block(body, <PyObject*>w._properties, 16)):
            return 0  # 16 above: the Will Properties
        if not _text_at(body, <PyObject*>w.topic, True):  # a topic name: no wildcards, no U+0000
            return 0
        if not _put_binary(body, <PyObject*>w.payload, 0):
            return 0
    if username != none and not _text_at(body, username, False):
        return 0
    if password != none and not _put_binary(body, password, 0):
        return 0
    return 1


cdef object _encode_subscribe(Subscribe pkt, object version_obj):
    """SUBSCRIBE (MQTT 5.0 §3.8) for well-typed, valid fields; anything else is handed to
    the shared reference.encode_subscribe, which raises exactly the reference's error."""
    cdef unsigned char stack[_STACK]
    cdef _Out body
    _out_init(&body, stack)
    try:
        if _subscribe_body(pkt, version_obj, &body):
            data = _frame(0x82, &body)  # flags 0010 [MQTT-3.8.1-1]
            if data is not None:
                return data
    finally:
        _out_free(&body)
    return reference.encode_subscribe(pkt, version_obj)


cdef int _subscribe_body(Subscribe pkt, object version_obj, _Out* body) except -1:
    cdef object packet_id = pkt.packet_id, subscriptions = pkt.subscriptions
    cdef object topic_filter, no_local, as_published
    cdef int version = <int>_uint(version_obj, 5)
    cdef long long pid = _uint(packet_id, 0xFFFF), qos, handling
    cdef unsigned char options
    cdef Subscription sub
    if version < 3 or pid <= 0 or type(subscriptions) is not list or not subscriptions:
        return 0
    _put_u16(body, pid)
    if version == 5:
        if not _append_block(body, <PyObject*>pkt.properties, 8):
            return 0
    elif pkt.properties:
        return 0
    for item in <list>subscriptions:
        if type(item) is not Subscription:
            return 0
        sub = item
        topic_filter, no_local = sub.topic_filter, sub.no_local
        as_published = sub.retain_as_published
        qos = _uint(sub.qos, 2)
        handling = _uint(sub.retain_handling, 2)
        # A Retain Handling above 2 is refused at 5.0 and unused before; either way the
        # reference encoder decides (so a non-int and a huge int are handed over too).
        if type(topic_filter) is not str or qos < 0 or handling < 0 or (
                type(no_local) is not bool or type(as_published) is not bool):
            return 0
        options = <unsigned char>qos
        if version == 5:
            if no_local and (<str>topic_filter).startswith("$share/"):
                return 0
            options |= ((0x04 if no_local else 0) | (0x08 if as_published else 0)
                        | (<unsigned char>handling << 4))
        elif no_local or as_published or handling:  # options other than QoS: 5.0 only
            return 0
        if not topic_filter or not _utf8_field(body, topic_filter, False):
            return 0  # a filter is at least one character [MQTT-4.7.3-1]
        _put1(body, options)
    return 1


cdef bytes _frame(unsigned char b0, _Out* body):
    """First byte, Remaining Length, then ``body``: written once into the result."""
    cdef Py_ssize_t n
    cdef bytes result
    cdef unsigned char* out
    if body.n > MQTTWIRE_MAX_REMAINING_LENGTH:
        return None  # the reference encoder raises PacketTooLarge
    result = _bytes_new(1 + _varint_size(body.n) + body.n)
    out = <unsigned char*>PyBytes_AS_STRING(result)
    out[0] = b0
    n = 1 + _write_varint(out + 1, body.n)
    memcpy(out + n, body.p, body.n)
    return result


cdef object _encode_publish_any(Publish pkt, object version_obj):
    cdef int version = _check_version(version_obj)
    cdef object qos_obj = pkt.qos
    cdef object topic = pkt.topic
    cdef object payload = pkt.payload
    cdef object pid_obj = pkt.packet_id
    cdef object props
    cdef _Prop items[32]
    cdef int count = 0
    cdef unsigned char stack[_STACK]
    cdef _Out block
    cdef const char* topic_utf8
    cdef Py_ssize_t topic_len
    cdef PyTypeObject* cls
    cdef long qos = <long>_uint(qos_obj, 2), packet_id = 0

    if qos < 0 or type(topic) is not str or type(payload) is not bytes or (
            pkt.dup and qos == 0):
        return encode_publish(pkt, version)
    if qos:
        packet_id = <long>_uint(pid_obj, 0xFFFF)
        if packet_id <= 0:
            return encode_publish(pkt, version)
    elif pid_obj is not None:
        return encode_publish(pkt, version)
    topic_utf8 = _utf8(topic, &topic_len)
    if topic_utf8 == NULL or topic_len == 0 or topic_len > 0xFFFF or not _plain_text(
            topic_utf8, topic_len, True):
        return encode_publish(pkt, version)
    raw = pkt._raw
    props = pkt._properties
    _out_init(&block, stack)
    try:
        if raw is not None:  # decoded, properties not read: copied as it is
            if version != 5:
                return encode_publish(pkt, version)  # which refuses it
            _put(&block, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw))
        elif props is not None:
            cls = Py_TYPE(props)
            if cls is not _DECODED and cls is not _PROPERTIES:
                return encode_publish(pkt, version)
            wire = _reusable_block(props, 3)
            if wire is not None:  # decoded, or encoded before: copied as it is
                if version != 5:
                    return encode_publish(pkt, version)  # which refuses it
                _put(&block, PyBytes_AS_STRING(wire), PyBytes_GET_SIZE(wire))
            else:
                _materialize(props)
                count = _collect(props, items, 0)
                if count < 0:
                    return encode_publish(pkt, version)
                # An empty Properties counts as none; properties before 5.0 are refused.
                if count and (version != 5 or not _encode_properties(&block, items, count, 3)):
                    return encode_publish(pkt, version)
                if count:
                    _keep_block(props, block.p, block.n, 3)
        return _write_publish(pkt, version, qos, packet_id, topic_utf8, topic_len, payload,
                              &block)
    finally:
        _out_free(&block)
        _release(items, count)


cdef object _write_publish(Publish pkt, int version, long qos, long packet_id,
                           const char* topic_utf8, Py_ssize_t topic_len, bytes payload,
                           _Out* props):
    """The PUBLISH, its fields already checked, its property block (without its length
    prefix) in ``props``."""
    cdef Py_ssize_t props_len = props.n, payload_len = PyBytes_GET_SIZE(payload)
    cdef Py_ssize_t body = 2 + topic_len + (2 if qos else 0) + payload_len, total, n
    cdef unsigned char* out
    if version == 5:
        body += _varint_size(props_len) + props_len
    if body > MQTTWIRE_MAX_REMAINING_LENGTH:
        return encode_publish(pkt, version)
    total = 1 + _varint_size(body) + body
    result = _bytes_new(total)
    out = <unsigned char*>PyBytes_AS_STRING(result)
    # 0x30 == PUBLISH << 4; then DUP (bit 3), QoS (bits 2-1), RETAIN (bit 0).
    out[0] = 0x30 | (0x08 if pkt.dup else 0) | (qos << 1) | (1 if pkt.retain else 0)
    n = 1 + _write_varint(out + 1, body)
    out[n] = <unsigned char>(topic_len >> 8)
    out[n + 1] = <unsigned char>(topic_len & 0xFF)
    memcpy(out + n + 2, topic_utf8, topic_len)
    n += 2 + topic_len
    if qos:
        out[n] = <unsigned char>(packet_id >> 8)
        out[n + 1] = <unsigned char>(packet_id & 0xFF)
        n += 2
    if version == 5:
        n += _write_varint(out + n, props_len)
        memcpy(out + n, props.p, props_len)
        n += props_len
    memcpy(out + n, PyBytes_AS_STRING(payload), payload_len)
    return result


cdef object _encode_ack(_Ack pkt, object version_obj):
    # The fields are read and checked in place (borrowed, no reference taken), the class by
    # its pointer: on 3.12 and 3.13 each reference taken and dropped costs an immortality
    # check both ways.
    cdef int version = _check_version(version_obj)
    cdef long packet_id = <long>_uint_at(<PyObject*>pkt.packet_id, 0xFFFF)
    cdef long code = <long>_uint_at(<PyObject*>pkt.reason_code, 0xFF)
    cdef PyTypeObject* cls = Py_TYPE(pkt)
    cdef unsigned char buf[5]
    cdef int ptype
    # The class, not its packet_type attribute: a type lookup and an IntEnum conversion
    # cost as much as the rest of this function.
    if cls == <PyTypeObject*>PubAck:
        ptype = 4
    elif cls == <PyTypeObject*>PubRec:
        ptype = 5
    elif cls == <PyTypeObject*>PubRel:
        ptype = 6
    else:
        ptype = 7
    if packet_id <= 0 or code < 0 or pkt.properties:
        return encode_ack(pkt, version)
    if code and (version != 5 or not _ACK_CODE_OK[ptype - 4][code]):
        return encode_ack(pkt, version)
    # 0x40 PUBACK, 0x50 PUBREC, 0x62 PUBREL (flags 0010, [MQTT-3.6.1-1]), 0x70 PUBCOMP
    buf[0] = <unsigned char>((ptype << 4) | (2 if ptype == 6 else 0))
    buf[2] = <unsigned char>(packet_id >> 8)
    buf[3] = <unsigned char>(packet_id & 0xFF)
    if code:  # MQTT 5.0 §3.4.2.1: the shortest form that carries the reason code
        buf[1] = 3
        buf[4] = <unsigned char>code
        return _bytes_of(buf, 5)
    buf[1] = 2
    return _bytes_of(buf, 4)


cdef tuple _forwarding_parts(object publish):
    """_codec.forwarding.forwarding_parts for well-typed, valid publishes; None for the rest."""
    cdef object props, payload = publish.payload, expiry = None
    cdef _Prop items[32]
    cdef int count = 0
    cdef long long wire_expiry = -1
    cdef unsigned char topic_stack[_STACK]
    cdef unsigned char props_stack[_STACK]
    cdef _Out topic, block
    cdef PyTypeObject* cls
    if type(payload) is not bytes or not publish.topic:
        return None
    if type(publish) is Publish:
        props = (<Publish>publish)._properties
    else:
        props = publish.properties
    wire = None
    if type(publish) is Publish and (<Publish>publish)._raw is not None:
        wire = (<Publish>publish)._raw  # decoded, properties not read
    elif props is not None:
        cls = Py_TYPE(props)
        if cls is not _DECODED and cls is not _PROPERTIES:
            return None
        wire = _reusable_block(props, 3)  # a PUBLISH block, decoded or encoded before
        if wire is None:
            _materialize(props)
            expiry = props.message_expiry_interval
            # Everything but what each subscriber gets anew: Message Expiry Interval
            # (0x02), Subscription Identifiers (0x0B) and the connection's own Topic Alias
            # (0x23).
            count = _collect(props, items, (1ULL << 0x02) | (1ULL << 0x0B) | (1ULL << 0x23))
            if count < 0:
                return None
    _out_init(&topic, topic_stack)
    _out_init(&block, props_stack)
    try:
        if not _utf8_field(&topic, publish.topic, True):  # a topic name: no wildcards
            return None
        if wire is not None:
            wire_expiry = _forwarded_block(&block, wire)
            if wire_expiry < -1:
                return None
            if wire_expiry >= 0:
                expiry = wire_expiry
        elif count and not _encode_properties(&block, items, count, 3):
            return None
        return (PyBytes_FromStringAndSize(<char*>topic.p, topic.n), expiry,
                PyBytes_FromStringAndSize(<char*>block.p, block.n), payload)
    finally:
        _out_free(&topic)
        _out_free(&block)
        _release(items, count)


cdef long long _forwarded_block(_Out* out, bytes wire) except? -3:
    """_codec.properties.forwarded_block in C: append the properties of a valid PUBLISH block
    that are forwarded as they are (all but the Message Expiry Interval, the Subscription
    Identifiers and the Topic Alias, which each subscriber gets anew), property by
    property, building no value.  Returns the Message Expiry Interval, -1 when there is
    none, -2 when the block is not one this walk understands (the caller then leaves it
    to the reference code)."""
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(wire)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(wire), i = 0, start
    cdef long long expiry = -1
    cdef int pid, kind, k
    while i < n:
        start = i
        pid = p[i]
        i += 1
        if pid >= 0x80 or _PROP_KIND[pid] < 0:
            return -2
        kind = _PROP_KIND[pid]
        if kind == 0:  # BYTE
            i += 1
        elif kind == 1:  # U16
            i += 2
        elif kind == 2:  # U32
            i += 4
        elif kind == 3:  # VARINT
            while i < n and p[i] & 0x80:
                i += 1
            i += 1
        else:  # UTF-8 or Binary Data: a two-byte length; a User Property: two of them
            for k in range(2 if kind == 6 else 1):
                if n - i < 2:
                    return -2
                i += 2 + ((p[i] << 8) | p[i + 1])
        if i > n:
            return -2
        if pid == 0x02:
            expiry = ((<long long>p[start + 1] << 24) | (p[start + 2] << 16)
                      | (p[start + 3] << 8) | p[start + 4])
        elif pid != 0x0B and pid != 0x23:
            _put(out, p + start, i - start)
    return expiry


cdef object _subscription_ids(object idents):
    """The Subscription Identifier properties of one subscriber's copy (MQTT 5.0
    §3.3.2.3.8: identifier 0x0B, then a Variable Byte Integer in 1..268,435,455), when
    ``idents`` is a list or tuple of such ints; None for anything else, which the
    reference code (check_subscription_identifiers) then accepts or refuses."""
    cdef unsigned char stack[_STACK]
    cdef unsigned char buf[5]
    cdef _Out o
    cdef long long v
    if type(idents) is not tuple and type(idents) is not list:
        return None
    _out_init(&o, stack)
    try:
        for ident in idents:
            v = _uint(ident, MQTTWIRE_MAX_REMAINING_LENGTH)
            if v <= 0:
                return None
            buf[0] = 0x0B
            _put(&o, buf, 1 + _write_varint(buf + 1, v))
        return PyBytes_FromStringAndSize(<char*>o.p, o.n)
    finally:
        _out_free(&o)


@cython.final
cdef class PreparedPublish:
    # The docstring, shared with the pure twin (a class-body assignment: see _codec.docstrings).
    __doc__ = _PREPARED_PUBLISH_DOC

    cdef public object publish
    # The parts of _codec.forwarding.forwarding_parts; handed to _codec.forwarding.encode_forwarded
    # when it takes over (see encode()).
    cdef readonly bytes _topic, _props, _payload
    cdef readonly object _expiry

    def __init__(self, publish):
        self.publish = publish
        parts = _forwarding_parts(publish)
        if parts is None:  # anything unusual: the reference prepares it, or raises
            parts = forwarding_parts(publish)
        self._topic, self._expiry, self._props, self._payload = parts

    def encode(self, version=5, *, qos=0, packet_id=None, retain=False, dup=False,
               subscription_identifiers=(), message_expiry_interval=None):
        """The PUBLISH for one subscriber at protocol level ``version``.

        ``message_expiry_interval``, when given, replaces the message's (the server sends
        the received value minus the time the message waited [MQTT-3.3.2-6])."""
        cdef int v = _check_version(version)
        cdef long q = 0, pid = 0
        cdef object expiry = self._expiry if message_expiry_interval is None else message_expiry_interval
        cdef bytes sub_ids = b""
        cdef Py_ssize_t block = 0, body = -1, total, n, size
        cdef unsigned long e = 0
        cdef unsigned char* out
        # Well-typed, in-range arguments take the C path; anything else goes to the shared
        # reference encoder, which raises exactly _pure's error (or encodes the rarity).
        if type(qos) is int and 0 <= qos <= 2 and not (dup and not qos):
            q = qos
            if q and type(packet_id) is int and 1 <= packet_id <= 0xFFFF:
                pid = packet_id
            elif q or packet_id is not None:
                q = -1
            if v == 5 and expiry is not None:
                if type(expiry) is int and 0 <= expiry <= 0xFFFFFFFF:
                    e = expiry
                else:
                    q = -1
            if q >= 0 and v == 5 and subscription_identifiers:
                ids = _subscription_ids(subscription_identifiers)
                if ids is None:
                    q = -1  # the reference code accepts or refuses them
                else:
                    sub_ids = ids
            if q >= 0:
                if v == 5:
                    block = (0 if expiry is None else 5) + len(self._props) + len(sub_ids)
                    body = len(self._topic) + (2 if q else 0) + _varint_size(block) + block
                else:
                    body = len(self._topic) + (2 if q else 0)
                body += len(self._payload)
        if body < 0 or body > MQTTWIRE_MAX_REMAINING_LENGTH:
            return encode_forwarded(
                self._topic, self._expiry, self._props, self._payload, version, qos,
                packet_id, retain, dup, subscription_identifiers, message_expiry_interval)
        total = 1 + _varint_size(body) + body
        result = _bytes_new(total)
        out = <unsigned char*>PyBytes_AS_STRING(result)
        out[0] = 0x30 | (0x08 if dup else 0) | (q << 1) | (1 if retain else 0)
        n = 1 + _write_varint(out + 1, body)
        size = len(self._topic)
        memcpy(out + n, PyBytes_AS_STRING(self._topic), size)
        n += size
        if q:
            out[n] = <unsigned char>(pid >> 8)
            out[n + 1] = <unsigned char>(pid & 0xFF)
            n += 2
        if v == 5:
            n += _write_varint(out + n, block)
            if expiry is not None:
                out[n] = 0x02  # Message Expiry Interval, a four-byte integer
                out[n + 1] = <unsigned char>(e >> 24)
                out[n + 2] = <unsigned char>((e >> 16) & 0xFF)
                out[n + 3] = <unsigned char>((e >> 8) & 0xFF)
                out[n + 4] = <unsigned char>(e & 0xFF)
                n += 5
            size = len(self._props)
            memcpy(out + n, PyBytes_AS_STRING(self._props), size)
            n += size
            size = len(sub_ids)
            memcpy(out + n, PyBytes_AS_STRING(sub_ids), size)
            n += size
        memcpy(out + n, PyBytes_AS_STRING(self._payload), len(self._payload))
        return result

    def __repr__(self):
        return f"PreparedPublish({self.publish!r})"


def encode(packet, version=5):
    """Encode ``packet`` for protocol level ``version`` (a CONNECT uses its own level)."""
    return packet.encode(version)
