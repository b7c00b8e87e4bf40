# Included by _speedups.pyx (one extension module: these names are its own).
#
# Decoding in C: PUBLISH and the acknowledgements, the C readers of property blocks,
# CONNECT, SUBSCRIBE, SUBACK, UNSUBSCRIBE and UNSUBACK, the fixed header, decode() and
# decode_from().  The twin of _pure_decode.py.  _speedups_stream.pxi reuses _header,
# _decode_body and _Input.

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


# ---------------------------------------------------------------------------------------
# C readers for the MQTT 5.0 property block and for CONNECT, SUBSCRIBE, SUBACK, UNSUBSCRIBE
# and UNSUBACK.  They decode valid packets; at the first thing they do not vouch for they
# return _BAIL, and the caller hands the packet to the shared reference decoder (_cold,
# _properties), which raises exactly the error _pure raises, or decodes the valid rarity
# (a multi-byte property identifier, say, which the reference then refuses by name).  So
# the errors cannot differ between the twins, and the C code holds no error text.

cdef object _BAIL = object()

# _PROP_NAMES[id]: the Properties attribute of property ``id`` (None: unknown).
cdef list _PROP_NAMES = [None] * 128
for _b, (_name, _kind, _allowed) in PROPERTY_TABLE.items():
    _PROP_NAMES[_b] = _name
# _PROP_NAME_PTR[id]: the same, borrowed (the list keeps them alive), for _fill_values.
cdef PyObject* _PROP_NAME_PTR[128]
for _b in range(128):
    _PROP_NAME_PTR[_b] = <PyObject*>_PROP_NAMES[_b]
cdef object _USER_PROPERTIES = "user_properties"
cdef object _SUBSCRIPTION_IDS = "subscription_identifiers"

# _SUBACK_OK[v - 3][c]: SUBACK code c is defined at level v; _UNSUBACK_OK[c]: MQTT 5.0.
cdef bint _SUBACK_OK[3][256]
cdef bint _UNSUBACK_OK[256]
for _b in range(256):
    _SUBACK_OK[0][_b] = _b in V3_SUBACK_CODES[3]
    _SUBACK_OK[1][_b] = _b in V3_SUBACK_CODES[4]
    _SUBACK_OK[2][_b] = _b in REASON_CODES[PacketType.SUBACK]
    _UNSUBACK_OK[_b] = _b in REASON_CODES[PacketType.UNSUBACK]


cdef inline bint _read_varint(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                              Py_ssize_t* value) noexcept:
    """A Variable Byte Integer in its shortest form (MQTT 5.0 §1.5.5), at most 4 bytes.

    The same reading as _cdefs.read_varint, written out here on purpose: built on that
    function, this reader (several calls per CONNECT) measured 8 to 10% slower on CONNECT
    decode (benchmarks/README.md, "Refactor: files by concern")."""
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


cdef int _scan_properties(const unsigned char* p, Py_ssize_t i, Py_ssize_t stop,
                          int ptype) except -1:
    """Check the properties in p[i:stop] (MQTT 5.0 §2.2.2) as the shared decode_properties
    does, building nothing: 1 when valid, 0 for anything unusual (an unknown or misplaced
    identifier, a repeated one, a value out of range, a Response Topic with a wildcard,
    Authentication Data without a Method), which the caller hands to the shared reader.
    The values of a block it accepted are built later, by _fill_values, without these
    checks."""
    cdef Py_ssize_t value
    cdef int pid, kind
    cdef unsigned long long seen = 0, bit
    cdef unsigned int allowed_bit = 1u << ptype
    while i < stop:
        pid = p[i]
        if pid >= 0x80:
            return 0
        kind = _PROP_KIND[pid]
        if kind < 0 or not _PROP_ALLOWED[pid] & allowed_bit:
            return 0
        # Every defined identifier is below 0x2B, so one 64-bit mask tracks repeats.  Only
        # User Properties repeat, and Subscription Identifiers in PUBLISH (§3.3.2.3.8).
        bit = 1ULL << pid
        if seen & bit and pid != 0x26 and not (pid == 0x0B and ptype == 3):
            return 0
        seen |= bit
        i += 1
        if kind <= 3:  # BYTE, U16, U32, VARINT
            if kind == 0:
                if i >= stop:
                    return 0
                value = p[i]
                i += 1
            elif kind == 1:
                if stop - i < 2:
                    return 0
                value = (p[i] << 8) | p[i + 1]
                i += 2
            elif kind == 2:
                if stop - i < 4:
                    return 0
                value = ((<Py_ssize_t>p[i] << 24) | (p[i + 1] << 16) | (p[i + 2] << 8)
                         | p[i + 3])
                i += 4
            elif not _read_varint(p, &i, stop, &value):
                return 0
            if (_PROP_FLAGS[pid] & 1 and value > 1) or (_PROP_FLAGS[pid] & 2 and value == 0):
                return 0
        elif kind == 4:  # UTF-8; a Response Topic is a topic name [MQTT-3.3.2-14]
            if not _skip_str(p, &i, stop, 2 if pid == 0x08 else 0):
                return 0
        elif kind == 5:  # Binary Data
            if stop - i < 2 or stop - i - 2 < ((p[i] << 8) | p[i + 1]):
                return 0
            i += 2 + ((p[i] << 8) | p[i + 1])
        else:  # a User Property: a string pair
            if not (_skip_str(p, &i, stop, 0) and _skip_str(p, &i, stop, 0)):
                return 0
    if seen & (1ULL << 0x16) and not seen & (1ULL << 0x15):
        return 0  # Authentication Data without a Method (§3.1.2.11.10)
    return 1


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


cdef object _fast_block(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                        int ptype):
    """The property block at *pos (MQTT 5.0 §2.2.2), checked as the shared
    decode_properties checks it: None when empty, else a copy of the block's properties
    (bytes, without the length prefix); *pos moves past the block.  _BAIL for anything
    _scan_properties does not vouch for.

    The copy is the only thing kept: never a view of the input, which may be a large
    receive buffer that the packet must not keep alive."""
    cdef Py_ssize_t i = pos[0], length, stop
    if not _read_varint(p, &i, end, &length):
        return _BAIL
    if length == 0:
        pos[0] = i
        return None
    stop = i + length
    if stop > end:
        return _BAIL
    if not _scan_properties(p, i, stop, ptype):
        return _BAIL
    pos[0] = stop
    return PyBytes_FromStringAndSize(<const char*>p + i, length)


cdef object _raw_properties(bytes raw, int ptype):
    """The Properties of a checked block from _fast_block: a _DecodedProperties, which
    builds its values on first access."""
    props = PyType_GenericNew(_DECODED, NULL, NULL)
    _slot_put(props, _WIRE_SLOT, (raw, _PTYPE_INTS[ptype]))
    return props


cdef object _built_properties(bytes raw, int ptype):
    """The Properties of a checked block from _fast_block, its values built now: for the
    packets that keep the bare block until ``properties`` is read (PUBLISH, CONNECT, Will),
    whose reader is about to read a value.

    Made as object.__new__ makes it, with its own array of attribute values (CPython's
    shared-key instances), and filled attribute by attribute: no dict is made unless
    something asks for ``__dict__``, and reading a value is the fast instance-attribute
    read.  This measured 200 instructions fewer on a PUBLISH read than filling a dict
    (benchmarks/peers.md, "Reading the properties")."""
    props = _PROPERTIES.tp_new(<type><PyObject*>_PROPERTIES, <PyObject*>_NO_ARGS, NULL)
    if _fill_values(props, None, raw):
        # Lists are not copied (reading them is what the caller is about to do): the None
        # tells wire_block to compare them with the block itself before reusing it.
        _slot_put(props, _WIRE_SLOT, (raw, _PTYPE_INTS[ptype], None))
    else:
        _slot_put(props, _WIRE_SLOT, (raw, _PTYPE_INTS[ptype]))
    return props


cdef inline object _ascii_or_utf8(const unsigned char* p, Py_ssize_t n):
    """The str of n bytes of UTF-8 that _scan_properties accepted: copied into a compact
    ASCII str when no byte has its high bit set (the common case), else decoded."""
    cdef Py_ssize_t j
    cdef unsigned char high = 0
    for j in range(n):
        high |= p[j]
    if high & 0x80:
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
    if n == 1:
        return PyUnicode_FromOrdinal(p[0])  # CPython's cached one-character str
    text = PyUnicode_New(n, 127)
    memcpy(PyUnicode_DATA(text), p, n)
    return text


cdef inline int _put_value(object props, dict d, object name, object value) except -1:
    """Store a built value: as an attribute of ``props`` (bypassing Properties.__setattr__,
    which would drop the block) when ``d`` is None, else in ``d``."""
    if d is None:
        return PyObject_GenericSetAttr(props, name, value)
    d[name] = value
    return 0


cdef int _fill_values(object props, dict d, bytes block) except -1:
    """Put the values of ``block``, a property block that _scan_properties accepted at
    decode time, into ``props`` or the dict ``d`` (_put_value), in one pass, as
    decode_properties stores them: each under its attribute name, User Properties as a
    list of (name, value) pairs and Subscription Identifiers as a list of ints, both in
    wire order.  1 when the block holds either list, else 0.

    The block was checked when it was decoded, so this pass checks only what keeps it from
    reading outside the block (a block is an immutable copy, but the _wire slot can be set
    from Python).  What it raises (SystemError, or UnicodeDecodeError for bytes that are
    not UTF-8) comes only from a block that no decode checked."""
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(block)
    cdef Py_ssize_t i = 0, stop = PyBytes_GET_SIZE(block), n, m, value
    cdef int pid, kind
    cdef list pairs = None, ids = None
    while i < stop:
        pid = p[i]
        i += 1
        if pid >= 0x80 or _PROP_KIND[pid] < 0:
            return _unchecked_block()
        kind = _PROP_KIND[pid]
        if kind == 4 or kind == 5:  # UTF-8 or Binary Data: a two-byte length
            if stop - i < 2:
                return _unchecked_block()
            n = (p[i] << 8) | p[i + 1]
            i += 2
            if stop - i < n:
                return _unchecked_block()
            if kind == 4:
                _put_value(props, d, <object>_PROP_NAME_PTR[pid], _ascii_or_utf8(p + i, n))
            else:
                _put_value(props, d, <object>_PROP_NAME_PTR[pid],
                           PyBytes_FromStringAndSize(<const char*>p + i, n))
            i += n
        elif kind == 6:  # a User Property: two strings
            if stop - i < 2:
                return _unchecked_block()
            n = (p[i] << 8) | p[i + 1]
            if stop - i - 2 < n + 2:
                return _unchecked_block()
            m = (p[i + 2 + n] << 8) | p[i + 3 + n]
            if stop - i - 4 - n < m:
                return _unchecked_block()
            pair = (_ascii_or_utf8(p + i + 2, n), _ascii_or_utf8(p + i + 4 + n, m))
            i += 4 + n + m
            if pairs is None:
                pairs = [pair]
                _put_value(props, d, _USER_PROPERTIES, pairs)
            else:
                pairs.append(pair)
        else:  # BYTE, U16, U32, VARINT
            if kind == 0:
                if i >= stop:
                    return _unchecked_block()
                value = p[i]
                i += 1
            elif kind == 1:
                if stop - i < 2:
                    return _unchecked_block()
                value = (p[i] << 8) | p[i + 1]
                i += 2
            elif kind == 2:
                if stop - i < 4:
                    return _unchecked_block()
                value = ((<Py_ssize_t>p[i] << 24) | (p[i + 1] << 16) | (p[i + 2] << 8)
                         | p[i + 3])
                i += 4
            else:  # a Subscription Identifier
                if not _read_varint(p, &i, stop, &value):
                    return _unchecked_block()
                if ids is None:
                    ids = [value]
                    _put_value(props, d, _SUBSCRIPTION_IDS, ids)
                else:
                    ids.append(value)
                continue
            _put_value(props, d, <object>_PROP_NAME_PTR[pid], value)
    return pairs is not None or ids is not None


cdef int _unchecked_block() except -1:
    # Only a block that no decode checked gets here (one set in the _wire slot by hand).
    raise SystemError("mqttwire: a property block checked at decode time did not decode")


cdef object _fast_properties(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                             int ptype):
    """_fast_block's block as a _DecodedProperties (None when empty, _BAIL as there)."""
    raw = _fast_block(p, pos, end, ptype)
    if raw is None or raw is _BAIL:
        return raw
    return _raw_properties(raw, ptype)


cdef int _materialize(object props) except -1:
    """Build the values of a _DecodedProperties from its block and make it a plain
    Properties (which it then is for good: every later read is an ordinary attribute
    read).  The block stays for encoding and forwarding (_properties.wire_block, which
    checks the lists against it before reusing it)."""
    cdef PyObject* wire
    if <PyTypeObject*>Py_TYPE(props) is not _DECODED:
        return 0
    wire = _slot_get(props, _WIRE_SLOT)
    # The type changes first: a read of this object while the values are built (from a
    # finalizer that an allocation runs, say) must not build them a second time.
    _set_type(props, _PROPERTIES)
    if wire == NULL or type(<object>wire) is not tuple:
        return 0  # nothing to build (not made by _raw_properties)
    block = (<tuple>wire)[0]
    kind = (<tuple>wire)[1]  # both owned: building may run code that sets the slot
    if type(block) is not bytes:
        return _unchecked_block()
    if _fill_values(props, PyObject_GenericGetDict(props, NULL), block):
        # The lists are not copied: see _built_properties.
        _slot_put(props, _WIRE_SLOT, (block, kind, None))
    return 0


class _DecodedProperties(Properties):
    """A Properties decoded from the wire whose values are not built yet.

    It holds one copy of its property block, checked at decode time as the shared reader
    checks it.  The first attribute read of any kind (a property, ``items()``, ``==``,
    ``repr``, pickling, setting a property) builds every value, in C, and turns the object
    into a plain ``Properties``; ``type()`` is the only thing that shows the difference
    before that.  Encoding and forwarding copy the block without building the values."""

    __slots__ = ()

    def __getattribute__(self, name):
        _materialize(self)
        return PyObject_GenericGetAttr(self, name)


cdef PyTypeObject* _DECODED = <PyTypeObject*>_DecodedProperties  # kept alive by the module
# A _DecodedProperties becomes a Properties by a change of type (_set_type), which is sound
# only while the two have the same layout (the subclass adds no slot).  Python's own check
# of a __class__ assignment says whether they do, once, here.
object.__setattr__(PyType_GenericNew(_DECODED, NULL, NULL), "__class__", Properties)


cdef Py_ssize_t _slot_offset(str name) except -1:
    """Where the Properties slot ``name`` sits in an instance, from its member descriptor
    (the slots are declared in _properties.Properties.__slots__)."""
    cdef Py_ssize_t offset = object_slot_offset(Properties.__dict__.get(name), True)
    if offset == -1:
        raise ImportError(f"Properties.{name} is not a slot")
    if offset == -2:
        raise ImportError(f"Properties.{name} is not a writable object slot")
    return offset


cdef Py_ssize_t _WIRE_SLOT = _slot_offset("_wire")
cdef tuple _PTYPE_INTS = tuple(range(17))  # the packet types (16: WILL) as int objects
cdef tuple _NO_ARGS = ()


cdef inline PyObject* _slot_get(object obj, Py_ssize_t off) noexcept:
    """The slot's value, borrowed (NULL when it was never set)."""
    return (<PyObject**>((<char*><PyObject*>obj) + off))[0]


cdef inline void _slot_put(object obj, Py_ssize_t off, object value) noexcept:
    """Store ``value`` in the slot, as its descriptor's setter does."""
    cdef PyObject** slot = <PyObject**>((<char*><PyObject*>obj) + off)
    cdef PyObject* old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject*>value
    if old != NULL:
        Py_DECREF(<object>old)


cdef inline void _set_type(object obj, PyTypeObject* cls) noexcept:
    """obj.__class__ = cls, for classes of the same layout (checked at import)."""
    cdef PyTypeObject* old = Py_TYPE(obj)
    Py_INCREF(<object>cls)
    Py_SET_TYPE(obj, cls)
    Py_DECREF(<object>old)


cdef inline int _packet_id(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end) noexcept:
    """The non-zero Packet Identifier at ``pos`` [MQTT-2.2.1-3], or -1."""
    cdef int packet_id
    if end - pos < 2:
        return -1
    packet_id = (p[pos] << 8) | p[pos + 1]
    return packet_id if packet_id else -1


cdef object _fast_connect(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end):
    """CONNECT (MQTT 3.1.1 §3.1, MQTT 5.0 §3.1), as _cold.decode_connect reads it."""
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
    """SUBSCRIBE (MQTT 5.0 §3.8), as _cold.decode_subscribe reads it."""
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
    """UNSUBSCRIBE (MQTT 5.0 §3.10), as _cold.decode_unsubscribe reads it."""
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
        return _COLD_DECODERS[ptype](packet, body - start, end - start, b0, version, _NS)
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

    cdef Py_buffer view
    cdef bint has_view
    cdef object keep
    cdef const unsigned char* p
    cdef Py_ssize_t n

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


def decode(data, *, version=5):
    """Decode ``data``, which must hold exactly one packet."""
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
