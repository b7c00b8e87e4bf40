# Included by _speedups.pyx (one extension module); the names other files use are declared
# in _speedups.pxd.
#
# Decoding in C: PUBLISH and the acknowledgements, CONNECT, SUBSCRIBE, SUBACK, UNSUBSCRIBE
# and UNSUBACK (their property blocks read by _codec/properties_c.pxi, their strings by
# _codec/datatypes_c.pxi), the fixed header, decode() and decode_from().  The twin of
# _codec/decode.py.  _codec/stream_c.pxi reuses _header, _decode_body and _Input, which
# _speedups.pxd declares.

# ---------------------------------------------------------------------------------------
# Decoding.  Functions take (p, pos, end): p points at the start of the input, the packet
# body is p[pos:end], and nothing at or past `end` is ever read.


cdef object _decode_publish(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                            unsigned char b0, int version):
    cdef Py_ssize_t tstart, tend, i
    cdef unsigned int qos = (b0 >> 1) & 3
    cdef unsigned char classes = 0
    cdef Publish pkt
    cdef object properties = None, raw = None
    cdef object packet_id = None
    if end - pos < 2:
        raise overrun(_PUBLISH, _TOPIC_NAME, pos)
    tstart = pos + 2
    tend = tstart + ((p[pos] << 8) | p[pos + 1])
    if tend > end:
        raise overrun(_PUBLISH, _TOPIC_NAME, pos)
    for i in range(tstart, tend):
        classes |= _TOPIC_CLASS[p[i]]
    # Same order of checks as _pure: UTF-8, then U+0000, then wildcards.
    if not classes & 4:  # ASCII, so valid UTF-8: copy it into a compact ASCII string
        topic = PyUnicode_New(tend - tstart, 127)
        memcpy(PyUnicode_DATA(topic), p + tstart, tend - tstart)
    else:
        try:
            topic = PyUnicode_DecodeUTF8(<const char*>p + tstart, tend - tstart, NULL)
        except UnicodeDecodeError as exc:
            raise utf8_error(_PUBLISH, _TOPIC_NAME, exc, tstart, version) from None
    if classes & 1:
        raise null_error(_PUBLISH, _TOPIC_NAME, topic, tstart, version)
    if classes & 2:
        raise topic_name_wildcard_error(_PUBLISH, topic, tstart, version)
    if tend == tstart and version < 5:
        raise MalformedPacket(_PUBLISH, "topic name is empty", offset=tstart - 2,
                              rule=rule("topic_length", version))
    pos = tend
    if qos:
        if end - pos < 2:
            raise overrun(_PUBLISH, "packet identifier", pos)
        i = (p[pos] << 8) | p[pos + 1]
        if i == 0:
            raise packet_id_zero_error(_PUBLISH, pos, version)
        packet_id = i
        pos += 2
    if version == 5:
        if pos < end and p[pos] == 0:  # the common case: no properties
            pos += 1
        else:
            i = pos
            raw = _fast_block(p, &i, end, 3)  # kept as bytes until read
            if raw is _BAIL:
                raw = None
                properties, pos = _decode_properties(p, pos, end, 3, _PUBLISH)
            else:
                pos = i
        if tend == tstart and raw is not None:
            properties = _raw_properties(raw, 3)  # for the Topic Alias, below
            raw = None
        if tend == tstart and (properties is None or properties.topic_alias is None):
            raise ProtocolError(_PUBLISH, "topic name is empty and there is no topic alias",
                                offset=tstart - 2, rule=rule("topic_alias_missing", version))
    pkt = Publish.__new__(Publish)
    pkt.topic = topic
    pkt.payload = PyBytes_FromStringAndSize(<const char*>p + pos, end - pos)
    pkt.qos = qos
    pkt.retain = True if b0 & 1 else False
    pkt.dup = True if b0 & 8 else False
    pkt.packet_id = packet_id
    pkt._properties = properties
    pkt._raw = raw
    return pkt


cdef tuple _decode_properties(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                              int ptype, object name):
    """The property block at ``pos``: (Properties or None, position after it).  The C
    reader takes valid blocks; anything it does not vouch for goes to the shared reader
    (on a copy of just the block), which raises exactly the error _pure raises."""
    cdef Py_ssize_t i = pos, length = 0, stop = end
    properties = _fast_properties(p, &i, end, ptype)
    if properties is not _BAIL:
        return properties, i
    # The block as its length says, and up to three bytes after it: what the shared reader
    # reads of a field that runs past the block to tell whether it would fit in the packet
    # (then the Property Length is to blame, not the Remaining Length); told where the
    # packet ends, it needs no more, so a PUBLISH payload is never copied.  A malformed
    # length, or a block that runs past `end`, is copied whole up to `end`.
    if read_varint(p, pos, end, &length, &i) == 1 and i + length <= end:
        stop = min(i + length + 3, end)
    block = PyBytes_FromStringAndSize(<const char*>p + pos, stop - pos)
    try:
        properties, used = decode_properties(block, 0, stop - pos, ptype, name, 5, end - pos)
    except MQTTWireError as exc:
        _shift(exc, pos)
        raise
    return properties, pos + used


cdef object _decode_ack(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                        unsigned char b0, int version):
    cdef int ptype = b0 >> 4
    cdef object name = _ACK_NAMES[ptype - 4]
    cdef unsigned int packet_id, code = 0
    cdef Py_ssize_t after
    cdef _Ack pkt
    cdef object properties = None
    if end - pos < 2:
        raise overrun(name, "packet identifier", pos)
    packet_id = (p[pos] << 8) | p[pos + 1]
    if packet_id == 0:
        raise packet_id_zero_error(name, pos, version)
    if version == 5:
        if end - pos > 2:  # MQTT 5.0 §3.4.2.1: Remaining Length 2 means Success
            code = p[pos + 2]
            if not _ACK_CODE_OK[ptype - 4][code]:
                raise reason_code_error(name, code, pos + 2, version)
            if end - pos > 3:  # §3.4.2.2.1: under 4, no property length
                properties, after = _decode_properties(p, pos + 3, end, ptype, name)
                if after != end:
                    raise length_mismatch(name, after, end)
    elif end - pos != 2:
        raise length_mismatch(name, pos + 2, end)
    if ptype == 4:
        pkt = PubAck.__new__(PubAck)
    elif ptype == 5:
        pkt = PubRec.__new__(PubRec)
    elif ptype == 6:
        pkt = PubRel.__new__(PubRel)
    else:
        pkt = PubComp.__new__(PubComp)
    pkt.packet_id = packet_id
    pkt.reason_code = code
    pkt.properties = properties
    return pkt


# _SUBACK_OK[v - 3][c]: SUBACK code c is defined at level v; _UNSUBACK_OK[c]: MQTT 5.0.
cdef bint _SUBACK_OK[3][256]
cdef bint _UNSUBACK_OK[256]
cdef int _code
for _code in range(256):
    _SUBACK_OK[0][_code] = _code in V3_SUBACK_CODES[3]
    _SUBACK_OK[1][_code] = _code in V3_SUBACK_CODES[4]
    _SUBACK_OK[2][_code] = _code in REASON_CODES[PacketType.SUBACK]
    _UNSUBACK_OK[_code] = _code in REASON_CODES[PacketType.UNSUBACK]


cdef inline int _packet_id(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end) noexcept:
    """The non-zero Packet Identifier at ``pos`` [MQTT-2.2.1-3], or -1."""
    cdef int packet_id
    if end - pos < 2:
        return -1
    packet_id = (p[pos] << 8) | p[pos + 1]
    return packet_id if packet_id else -1


cdef object _fast_connect(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end):
    """CONNECT (MQTT 3.1.1 §3.1, MQTT 5.0 §3.1), as reference.decode_connect reads it."""
    cdef int level, flags
    cdef Connect pkt
    cdef Will will = None
    cdef object properties = None, will_props = None, username = None, password = None
    # Protocol Name and Level: "MQTT" with 4 or 5, "MQIsdp" with 3 (MQTT 3.1).
    if end - pos >= 10 and memcmp(p + pos, b"\x00\x04MQTT", 6) == 0:
        level = p[pos + 6]
        if level != 4 and level != 5:
            return _BAIL
        pos += 7
    elif end - pos >= 12 and memcmp(p + pos, b"\x00\x06MQIsdp", 8) == 0:
        level = p[pos + 8]
        if level != 3:
            return _BAIL
        pos += 9
    else:
        return _BAIL
    if end - pos < 3:
        return _BAIL
    flags = p[pos]
    # Reserved bit 0 clear [MQTT-3.1.2-3]; will QoS and retain only with the will flag
    # [MQTT-3.1.2-11, -13, -15], will QoS not 3 [MQTT-3.1.2-14]; before 5.0 no password
    # without a user name [MQTT-3.1.2-22].
    if flags & 0x01 or (flags & 0x04 and flags & 0x18 == 0x18) or (
            not flags & 0x04 and flags & 0x38) or (
            level < 5 and flags & 0x40 and not flags & 0x80):
        return _BAIL
    keep_alive = (p[pos + 1] << 8) | p[pos + 2]
    pos += 3
    if level == 5:
        properties = _fast_block(p, &pos, end, 1)  # kept as bytes until read
        if properties is _BAIL:
            return _BAIL
    client_id = _read_str(p, &pos, end, 0)
    if client_id is _BAIL:
        return _BAIL
    if flags & 0x04:
        if level == 5:
            will_props = _fast_block(p, &pos, end, 16)  # 16: the Will Properties
            if will_props is _BAIL:
                return _BAIL
        topic = _read_str(p, &pos, end, 2)  # a topic name: no wildcards
        if topic is _BAIL or not topic:
            return _BAIL
        payload = _read_bin(p, &pos, end)
        if payload is _BAIL:
            return _BAIL
        will = Will.__new__(Will)
        will.topic = topic
        will.payload = payload
        will.qos = (flags >> 3) & 3
        will.retain = True if flags & 0x20 else False
        will._raw = will_props
    if flags & 0x80:
        username = _read_str(p, &pos, end, 0)
        if username is _BAIL:
            return _BAIL
    if flags & 0x40:
        password = _read_bin(p, &pos, end)
        if password is _BAIL:
            return _BAIL
    if pos != end:
        return _BAIL
    pkt = Connect.__new__(Connect)
    pkt.client_id = client_id
    pkt.protocol_version = level
    pkt.clean_start = True if flags & 0x02 else False
    pkt.keep_alive = keep_alive
    pkt.username = username
    pkt.password = password
    pkt.will = will
    pkt._raw = properties
    return pkt


cdef object _fast_filter(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end):
    """A topic filter: a non-empty UTF-8 string [MQTT-4.7.3-1]."""
    if end - pos[0] >= 2 and p[pos[0]] == 0 and p[pos[0] + 1] == 0:
        return _BAIL
    return _read_str(p, pos, end, 0)


cdef object _fast_subscribe(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                            int version):
    """SUBSCRIBE (MQTT 5.0 §3.8), as reference.decode_subscribe reads it."""
    cdef int packet_id = _packet_id(p, pos, end)
    cdef unsigned char options, reserved = 0xC0 if version == 5 else 0xFC
    cdef Py_ssize_t start
    cdef list subscriptions = []
    cdef Subscription sub
    cdef Subscribe pkt
    cdef object properties = None
    if packet_id < 0:
        return _BAIL
    pos += 2
    if version == 5:
        properties = _fast_properties(p, &pos, end, 8)
        if properties is _BAIL:
            return _BAIL
    while pos < end:
        start = pos + 2
        topic_filter = _fast_filter(p, &pos, end)
        if topic_filter is _BAIL or pos >= end:
            return _BAIL
        options = p[pos]
        pos += 1
        # MQTT 5.0 §3.8.3.1: reserved bits clear [MQTT-3.8.3-5], QoS and Retain Handling
        # not 3, no No Local on a shared subscription [MQTT-3.8.3-4]; 3.1.1 allows only
        # the QoS bits [MQTT-3-8.3-4].
        if options & reserved or options & 3 == 3 or options & 0x30 == 0x30 or (
                options & 0x04 and pos - start >= 8 and memcmp(p + start, b"$share/", 7) == 0):
            return _BAIL
        sub = Subscription.__new__(Subscription)
        sub.topic_filter = topic_filter
        sub.qos = options & 3
        sub.no_local = True if options & 0x04 else False
        sub.retain_as_published = True if options & 0x08 else False
        sub.retain_handling = (options >> 4) & 3
        subscriptions.append(sub)
    if not subscriptions:
        return _BAIL
    pkt = Subscribe.__new__(Subscribe)
    pkt.packet_id = packet_id
    pkt.subscriptions = subscriptions
    pkt.properties = properties
    return pkt


cdef object _fast_unsubscribe(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                              int version):
    """UNSUBSCRIBE (MQTT 5.0 §3.10), as reference.decode_unsubscribe reads it."""
    cdef int packet_id = _packet_id(p, pos, end)
    cdef list filters = []
    cdef Unsubscribe pkt
    cdef object properties = None
    if packet_id < 0:
        return _BAIL
    pos += 2
    if version == 5:
        properties = _fast_properties(p, &pos, end, 10)
        if properties is _BAIL:
            return _BAIL
    while pos < end:
        topic_filter = _fast_filter(p, &pos, end)
        if topic_filter is _BAIL:
            return _BAIL
        filters.append(topic_filter)
    if not filters:
        return _BAIL
    pkt = Unsubscribe.__new__(Unsubscribe)
    pkt.packet_id = packet_id
    pkt.topic_filters = filters
    pkt.properties = properties
    return pkt


cdef object _fast_suback(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                         int ptype, int version):
    """SUBACK (MQTT 5.0 §3.9) and UNSUBACK (§3.11): a packet identifier, properties (5.0)
    and one known code per topic filter (before 5.0, UNSUBACK has no codes)."""
    cdef int packet_id = _packet_id(p, pos, end)
    cdef const bint* known = &_UNSUBACK_OK[0]
    cdef list codes = []
    cdef object properties = None
    if ptype == 9:
        known = &_SUBACK_OK[version - 3][0]
    if packet_id < 0:
        return _BAIL
    pos += 2
    if ptype == 11 and version < 5:
        if pos != end:
            return _BAIL
    else:
        if version == 5:
            properties = _fast_properties(p, &pos, end, ptype)
            if properties is _BAIL:
                return _BAIL
        if pos >= end:
            return _BAIL
        while pos < end:
            if not known[p[pos]]:
                return _BAIL
            codes.append(p[pos])
            pos += 1
    if ptype == 9:
        pkt = SubAck.__new__(SubAck)
        (<SubAck>pkt).packet_id = packet_id
        (<SubAck>pkt).reason_codes = codes
        (<SubAck>pkt).properties = properties
    else:
        pkt = UnsubAck.__new__(UnsubAck)
        (<UnsubAck>pkt).packet_id = packet_id
        (<UnsubAck>pkt).reason_codes = codes
        (<UnsubAck>pkt).properties = properties
    return pkt


cdef object _decode_body(const unsigned char* p, Py_ssize_t start, Py_ssize_t body,
                         Py_ssize_t end, int version):
    """Decode the packet at p[start:end] whose body starts at ``body``."""
    cdef unsigned char b0 = p[start]
    cdef int ptype = b0 >> 4
    if ptype == 3:
        return _decode_publish(p, body, end, b0, version)
    if 4 <= ptype <= 7:
        return _decode_ack(p, body, end, b0, version)
    if ptype == 12 or ptype == 13:
        if body != end:
            raise length_mismatch(PACKET_NAMES[ptype], body, end)
        return PingReq.__new__(PingReq) if ptype == 12 else PingResp.__new__(PingResp)
    if ptype == 1:
        packet = _fast_connect(p, body, end)
    elif ptype == 8:
        packet = _fast_subscribe(p, body, end, version)
    elif ptype == 9 or ptype == 11:
        packet = _fast_suback(p, body, end, ptype, version)
    elif ptype == 10:
        packet = _fast_unsubscribe(p, body, end, version)
    else:
        packet = _BAIL
    if packet is not _BAIL:
        return packet
    # The rest, and what the C readers do not vouch for: the shared decoder reads a copy
    # of just this packet.
    packet = PyBytes_FromStringAndSize(<const char*>p + start, end - start)
    try:
        return _REFERENCE_DECODERS[ptype](packet, body - start, end - start, b0, version, _NS)
    except MQTTWireError as exc:
        _shift(exc, start)
        raise


cdef int _header(const unsigned char* p, Py_ssize_t pos, Py_ssize_t n, int version,
                 Py_ssize_t* body, Py_ssize_t* end) except -1:
    """Parse the fixed header at ``pos``: 1 with *body and *end set, or 0 when more bytes
    are needed.  Raises as soon as the bytes present are wrong."""
    cdef unsigned char b0 = p[pos]
    cdef Py_ssize_t i, length
    cdef int found
    if _BAD_FIRST[version - 3][b0]:
        raise first_byte_error(b0, version, pos)
    found = read_varint(p, pos + 1, n, &length, &i)
    if found == 0:
        return 0
    if found < 0:  # a fifth byte is coming (MQTT 5.0 §1.5.5)
        raise remaining_length_error(pos + 1, 5, version, PACKET_NAMES[b0 >> 4])
    # A last byte of 0 after continuation bytes adds nothing: not the shortest form.
    if p[i - 1] == 0 and i - pos > 2:
        raise remaining_length_error(pos + 1, i - pos - 1, version, PACKET_NAMES[b0 >> 4])
    body[0] = i
    end[0] = i + length
    return 1


cdef class _Input:
    """A read-only C view of a decode() argument: bytes directly, any other buffer through
    a PyBUF_SIMPLE export held until release() (which also keeps a bytearray from being
    resized meanwhile).  A non-contiguous memoryview is copied once, as _pure does."""

    # Its C fields and the signatures of open() and release() are in _speedups.pxd
    # (StreamDecoder uses them).

    cdef int open(self, object data) except -1:
        if type(data) is bytes:
            self.keep = data
            self.p = <const unsigned char*>PyBytes_AS_STRING(data)
            self.n = PyBytes_GET_SIZE(data)
            return 0
        try:
            PyObject_GetBuffer(data, &self.view, PyBUF_SIMPLE)
        except BufferError:
            data = as_buffer(data)  # raises TypeError for non-buffers
            return self.open(data if type(data) is bytes else bytes(data))
        self.has_view = True
        self.p = <const unsigned char*>self.view.buf
        self.n = self.view.len
        return 0

    cdef void release(self) noexcept:
        if self.has_view:
            PyBuffer_Release(&self.view)
            self.has_view = False


cdef object _decode_from(const unsigned char* p, Py_ssize_t n, object offset, int v):
    cdef Py_ssize_t pos, body, end
    if not 0 <= offset <= n:
        raise ValueError(f"offset {offset} is outside the data (0..{n})")
    pos = offset
    if pos == n:
        return None
    if not _header(p, pos, n, v, &body, &end) or end > n:
        return None
    return _decode_body(p, pos, body, end, v), end


def decode_from(data, offset=0, *, version=5):
    """Decode the packet that starts at ``offset`` in ``data`` (bytes, bytearray or
    memoryview): (packet, offset just after it), or None when ``data`` ends before the
    packet does.  Bad bytes raise an MQTTWireError subclass, as soon as they are seen."""
    cdef int v = _check_version(version)
    cdef _Input inp
    if type(data) is bytes:
        return _decode_from(<const unsigned char*>PyBytes_AS_STRING(data),
                            PyBytes_GET_SIZE(data), offset, v)
    inp = _Input()
    inp.open(data)
    try:
        return _decode_from(inp.p, inp.n, offset, v)
    finally:
        inp.release()


cdef object _decode_one(const unsigned char* p, Py_ssize_t n, object data, int v):
    cdef Py_ssize_t body, end
    if n == 0 or not _header(p, 0, n, v, &body, &end) or end > n:
        raise incomplete(as_buffer(data), n, v)
    packet = _decode_body(p, 0, body, end, v)
    if end != n:
        raise MalformedPacket(PACKET_NAMES[p[0] >> 4],
                              f"{n - end} byte(s) after the end of the packet", offset=end)
    return packet


cdef object _decode(object data, object version):
    cdef int v = _check_version(version)
    cdef _Input inp
    if type(data) is bytes:
        return _decode_one(<const unsigned char*>PyBytes_AS_STRING(data),
                           PyBytes_GET_SIZE(data), data, v)
    inp = _Input()
    inp.open(data)
    try:
        return _decode_one(inp.p, inp.n, data, v)
    finally:
        inp.release()


# decode() is called with a keyword (version=).  Cython's function parses that keyword on
# every call (__Pyx_ParseKeywords, a reference taken to each argument and dropped), and
# CPython 3.13 does not specialise any call with keywords (CALL_KW), so that there every
# call also goes the generic way into Cython's dispatch.  The module's ``decode`` is a
# builtin made here over a C function that takes decode(data) and decode(data,
# version=...) straight to _decode, the keyword recognised by identity (the caller's
# name is the interned "version"); any other call (a positional version, another
# keyword, the keyword under a name that is not the interned one) goes to Cython's
# function, kept aside, which parses it and words the errors as before.  The builtin has
# Cython's name, docstring (its signature for inspect first) and module.  3.11 and 3.12
# call it directly (CALL_BUILTIN_FAST_WITH_KEYWORDS); 3.13 through PyObject_Vectorcall.
# benchmarks/peers.md, "Issue 44, fifth pass".
cdef extern from *:
    """
    static PyObject *(*mqttwire_decode_body)(PyObject *, PyObject *);
    static PyObject *mqttwire_decode_parsed;   /* Cython's decode, for any other call */
    static PyObject *mqttwire_decode_version;  /* the interned "version" */
    static PyObject *mqttwire_decode_five;     /* the default version */

    static PyObject *mqttwire_decode_fast(PyObject *self, PyObject *const *args,
                                          Py_ssize_t nargs, PyObject *kwnames) {
        if (nargs == 1) {
            if (kwnames == NULL) return mqttwire_decode_body(args[0], mqttwire_decode_five);
            if (PyTuple_GET_SIZE(kwnames) == 1
                    && PyTuple_GET_ITEM(kwnames, 0) == mqttwire_decode_version)
                return mqttwire_decode_body(args[0], args[1]);
        }
        return PyObject_Vectorcall(mqttwire_decode_parsed, args, (size_t)nargs, kwnames);
    }

    static PyMethodDef mqttwire_decode_def = {
        NULL, (PyCFunction)(void (*)(void))mqttwire_decode_fast, METH_FASTCALL | METH_KEYWORDS,
        NULL};

    /* The builtin over mqttwire_decode_fast, with the name, docstring and module of
       ``parsed`` (a builtin function that Cython made), which it keeps for the module's
       life. */
    static PyObject *mqttwire_decode_make(PyObject *parsed, void *body) {
        PyCFunctionObject *f = (PyCFunctionObject *)parsed;
        if (!PyCFunction_Check(parsed)) {
            PyErr_SetString(PyExc_ImportError, "decode is not a builtin function");
            return NULL;
        }
        mqttwire_decode_version = PyUnicode_InternFromString("version");
        mqttwire_decode_five = PyLong_FromLong(5);
        if (mqttwire_decode_version == NULL || mqttwire_decode_five == NULL) return NULL;
        Py_INCREF(parsed);
        mqttwire_decode_parsed = parsed;
        mqttwire_decode_body = (PyObject *(*)(PyObject *, PyObject *))body;
        mqttwire_decode_def.ml_name = f->m_ml->ml_name;
        mqttwire_decode_def.ml_doc = f->m_ml->ml_doc;
        return PyCFunction_NewEx(&mqttwire_decode_def, NULL, f->m_module);
    }
    """
    object _decode_make "mqttwire_decode_make"(object parsed, void* body)


@cython.binding(False)
def decode(data, *, version=5):
    """decode(data, *, version=5)
--

Decode ``data``, which must hold exactly one packet."""
    return _decode(data, version)


decode = _decode_make(decode, <void*>_decode)
