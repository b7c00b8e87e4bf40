# Included by _speedups.pyx (one extension module); the names other files use are declared
# in _speedups.pxd.
#
# MQTT 5.0 property blocks (§2.2.2) in C, the twin of _codec/properties.py: the checking scan of
# a block at decode time, the block kept as one copy of its bytes, and the lazily built
# Properties (_DecodedProperties) whose values are made on first access.  The packet
# readers (_codec/decode_c.pxi), the packet classes (_codec/packets_c.pxi) and the
# encoders (_codec/encode_c.pxi, which copy a checked block as it is) use it.

# Every Properties holds each property in a slot of its own, None when absent
# (_codec/properties.py): _PROP_OFFSET[id] is where the slot of property ``id`` sits in an
# instance, _PROP_IDS the _PROP_COUNT defined identifiers in order (filled at import,
# below, once the slots' offsets can be read).
_PROP_COUNT = 0
_USER_PROPERTIES = "user_properties"
_SUBSCRIPTION_IDS = "subscription_identifiers"


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


cdef extern from *:
    """
    /* A Properties instance is its object header and then one pointer per slot: the 27
       properties and _wire (and __weakref__ on 3.11; 3.12 and later keep it before the
       header).  When _speedups has vouched for that layout at import (mqttwire_props_words
       set, below), a new instance is one copy of a template (None at each property, NULL
       at _wire and __weakref__) and freeing one clears the slots in a loop, where
       object.__new__ zeroes the object and fills it slot by slot and subtype_dealloc
       walks the slots' member table (and runs the trashcan, the finalizer checks and two
       changes of GC tracking).  benchmarks/peers.md, "Properties made and freed in one
       piece". */
    #define MQTTWIRE_PROPS_MAX 40
    static PyObject *mqttwire_props_template[MQTTWIRE_PROPS_MAX];
    static Py_ssize_t mqttwire_props_words = 0;  /* 0: layout not vouched for */
    static Py_ssize_t mqttwire_props_nones = 0;

    static PyObject *mqttwire_props_new(PyTypeObject *cls) {
        PyObject *obj = _PyObject_GC_New(cls);  /* not zeroed, not tracked */
        if (obj == NULL)
            return NULL;
        memcpy((char *)obj + sizeof(PyObject), mqttwire_props_template,
               (size_t)mqttwire_props_words * sizeof(PyObject *));
    #if PY_VERSION_HEX < 0x030C0000
        Py_SET_REFCNT(Py_None, Py_REFCNT(Py_None) + mqttwire_props_nones);
    #endif  /* 3.12 and later: None is immortal, its count is not kept */
        PyObject_GC_Track(obj);
        return obj;
    }

    static void mqttwire_props_dealloc(PyObject *self) {
        PyTypeObject *tp = Py_TYPE(self);
        PyObject **slot = (PyObject **)((char *)self + sizeof(PyObject));
        Py_ssize_t k, words = mqttwire_props_words;  /* read once: a DECREF may run code */
        PyObject_GC_UnTrack(self);
        if (*(PyObject **)((char *)self + tp->tp_weaklistoffset) != NULL)
            PyObject_ClearWeakRefs(self);  /* which leaves the list empty (NULL) */
        /* Nothing can reach the object any more (no weak reference, untracked), so the
           slots are released without being set to NULL.  None is skipped: on 3.12 and
           later it is immortal, on 3.11 its count drops once for all of them. */
    #if PY_VERSION_HEX < 0x030C0000
        Py_ssize_t nones = 0;
    #endif
        for (k = 0; k < words; k++) {
            PyObject *value = slot[k];
            if (value == Py_None) {
    #if PY_VERSION_HEX < 0x030C0000
                nones++;
    #endif
            } else if (value != NULL) {
                Py_DECREF(value);
            }
        }
    #if PY_VERSION_HEX < 0x030C0000
        Py_SET_REFCNT(Py_None, Py_REFCNT(Py_None) - nones);
    #endif
        tp->tp_free(self);
        Py_DECREF(tp);
    }

    static void mqttwire_props_set_word(Py_ssize_t k, PyObject *value) {
        mqttwire_props_template[k] = value;
    }

    static void mqttwire_props_set_dealloc(PyTypeObject *cls) {
        cls->tp_dealloc = mqttwire_props_dealloc;
    }
    static Py_ssize_t mqttwire_basicsize(PyTypeObject *cls) { return cls->tp_basicsize; }
    static Py_ssize_t mqttwire_weaklistoffset(PyTypeObject *cls) {
        return cls->tp_weaklistoffset;
    }
    static Py_ssize_t mqttwire_dictoffset(PyTypeObject *cls) { return cls->tp_dictoffset; }
    static int mqttwire_has_finalizer(PyTypeObject *cls) {
        return cls->tp_finalize != NULL || cls->tp_del != NULL;
    }
    """
    void _props_set_word "mqttwire_props_set_word"(Py_ssize_t k, PyObject* value)
    Py_ssize_t _props_words "mqttwire_props_words"
    Py_ssize_t _props_nones "mqttwire_props_nones"
    object _props_new "mqttwire_props_new"(PyTypeObject* cls)
    void _props_set_dealloc "mqttwire_props_set_dealloc"(PyTypeObject* cls)
    Py_ssize_t _basicsize "mqttwire_basicsize"(PyTypeObject* cls)
    Py_ssize_t _weaklistoffset "mqttwire_weaklistoffset"(PyTypeObject* cls)
    Py_ssize_t _dictoffset "mqttwire_dictoffset"(PyTypeObject* cls)
    bint _has_finalizer "mqttwire_has_finalizer"(PyTypeObject* cls)


cdef object _new_properties(PyTypeObject* cls):
    """A new ``cls`` (Properties or _DecodedProperties) with every property slot None, as
    _codec.properties._blank makes one: the allocation alone (Properties.__new__ is not
    run), then the slots."""
    cdef int k
    cdef char* base
    if _props_words:  # the layout checked at import: one copy of the template
        return _props_new(cls)
    props = PyType_GenericNew(cls, NULL, NULL)
    base = <char*><PyObject*>props
    for k in range(_PROP_COUNT):  # fresh slots are NULL: a store each, nothing to release
        Py_INCREF(None)
        (<PyObject**>(base + _PROP_OFFSET[_PROP_IDS[k]]))[0] = <PyObject*>None
    return props


cdef object _raw_properties(bytes raw, int ptype):
    """The Properties of a checked block from _fast_block: a _DecodedProperties, which
    builds its values on first access."""
    props = _new_properties(_DECODED)
    slot_put(props, _WIRE_SLOT, (raw, _PTYPE_INTS[ptype]))
    return props


cdef object _built_properties(bytes raw, int ptype):
    """The Properties of a checked block from _fast_block, its values built now: for the
    packets that keep the bare block until ``properties`` is read (PUBLISH, CONNECT, Will),
    whose reader is about to read a value.  Each value is stored in its slot."""
    props = _new_properties(_PROPERTIES)
    _fill_values(props, raw)
    # The bare block, no (block, kind) tuple to make: wire_block (and _reusable_block)
    # check it for the packet type it is reused for, and compare the lists, not copied
    # (reading them is what the caller is about to do), with the block's own.
    slot_put(props, _WIRE_SLOT, raw)
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


cdef int _fill_values(object props, bytes block) except -1:
    """Put the values of ``block``, a property block that _scan_properties accepted at
    decode time, into the slots of ``props`` (a Properties made by _new_properties), in
    one pass, as decode_properties stores them: each in its slot, User Properties as a
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
    cdef Py_ssize_t npairs = 0
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
                slot_put(props, _PROP_OFFSET[pid], _ascii_or_utf8(p + i, n))
            else:
                slot_put(props, _PROP_OFFSET[pid],
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
            if pairs is None:
                # The list made at its final size, the pairs counted ahead (one growth of
                # the list's array, a realloc, costs more than the count).
                pairs = _new_list(_count_pairs(p, i + 4 + n + m, stop) + 1)
                slot_put(props, _PROP_OFFSET[0x26], pairs)
                npairs = 0
            i += 4 + n + m
            if npairs < PyList_GET_SIZE(pairs):
                Py_INCREF(pair)
                PyList_SET_ITEM(pairs, npairs, pair)
                npairs += 1
            else:  # more than counted: only a block that no decode checked
                return _unchecked_block()
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
                    slot_put(props, _PROP_OFFSET[0x0B], ids)
                else:
                    ids.append(value)
                continue
            slot_put(props, _PROP_OFFSET[pid], value)
    if pairs is not None and npairs != PyList_GET_SIZE(pairs):
        return _unchecked_block()  # fewer than counted: the list would hold NULLs
    return pairs is not None or ids is not None


cdef Py_ssize_t _count_pairs(const unsigned char* p, Py_ssize_t i, Py_ssize_t stop) noexcept:
    """How many User Properties the block p[i:stop] holds, by its identifiers and lengths
    alone (a block that does not parse counts what it parsed: _fill_values then finds a
    different number and refuses it)."""
    cdef Py_ssize_t count = 0
    cdef int pid, kind
    while i < stop:
        pid = p[i]
        i += 1
        if pid >= 0x80 or _PROP_KIND[pid] < 0:
            break
        kind = _PROP_KIND[pid]
        if kind == 0:
            i += 1
        elif kind == 1:
            i += 2
        elif kind == 2:
            i += 4
        elif kind == 3:
            while i < stop and p[i] & 0x80:
                i += 1
            i += 1
        else:  # UTF-8 or Binary Data: a two-byte length; a User Property: two of them
            if stop - i < 2:
                break
            i += 2 + ((p[i] << 8) | p[i + 1])
            if kind == 6:
                count += 1
                if stop - i < 2:
                    break
                i += 2 + ((p[i] << 8) | p[i + 1])
    return count


cdef extern from "Python.h":
    list _new_list "PyList_New"(Py_ssize_t size)
    Py_ssize_t PyList_GET_SIZE(list l)
    void PyList_SET_ITEM(list l, Py_ssize_t i, object o)  # steals a reference


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
    read).  The block stays for encoding and forwarding (_codec.properties.wire_block, which
    checks the lists against it before reusing it)."""
    cdef PyObject* wire
    if <PyTypeObject*>Py_TYPE(props) is not _DECODED:
        return 0
    wire = slot_get(props, _WIRE_SLOT)
    # The type changes first: a read of this object while the values are built (from a
    # finalizer that an allocation runs, say) must not build them a second time.
    _set_type(props, _PROPERTIES)
    if wire == NULL or type(<object>wire) is not tuple:
        return 0  # nothing to build (not made by _raw_properties)
    block = (<tuple>wire)[0]
    kind = (<tuple>wire)[1]  # both owned: building may run code that sets the slot
    if type(block) is not bytes:
        return _unchecked_block()
    if _fill_values(props, block):
        # The lists are not copied: see _built_properties.
        slot_put(props, _WIRE_SLOT, (block, kind, None))
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


_DECODED = <PyTypeObject*>_DecodedProperties  # kept alive by the module
# A _DecodedProperties becomes a Properties by a change of type (_set_type), which is sound
# only while the two have the same layout (the subclass adds no slot).  Python's own check
# of a __class__ assignment says whether they do, once, here.
object.__setattr__(PyType_GenericNew(_DECODED, NULL, NULL), "__class__", Properties)


cdef Py_ssize_t _slot_offset(str name) except -1:
    """Where the Properties slot ``name`` sits in an instance, from its member descriptor
    (the slots are declared in _codec.properties.Properties.__slots__)."""
    cdef Py_ssize_t offset = object_slot_offset(Properties.__dict__.get(name), True)
    if offset == -1:
        raise ImportError(f"Properties.{name} is not a slot")
    if offset == -2:
        raise ImportError(f"Properties.{name} is not a writable object slot")
    return offset


_WIRE_SLOT = _slot_offset("_wire")
for _pid, _entry in PROPERTY_TABLE.items():  # identifier order
    _PROP_OFFSET[_pid] = _slot_offset(_entry[0])
    _PROP_IDS[_PROP_COUNT] = _pid
    _PROP_COUNT += 1
_PTYPE_INTS = tuple(range(17))

cdef void _vouch_for_layout() noexcept:
    """Use _props_new and the loop dealloc for Properties and _DecodedProperties when an
    instance is what they assume: after the object header, only pointers, each a property
    slot, _wire, or (3.11) __weakref__; no instance dict, no finalizer, no items.  Else
    the generic allocation and subtype_dealloc stay (mqttwire_props_words stays 0)."""
    global _props_words, _props_nones
    cdef Py_ssize_t head = sizeof(PyObject), size = _basicsize(_PROPERTIES)
    cdef Py_ssize_t words = (size - head) // <Py_ssize_t>sizeof(PyObject*), off, k
    cdef Py_ssize_t weak = _weaklistoffset(_PROPERTIES), nones = 0
    cdef int j
    cdef bint known
    if (words <= 0 or words > 40 or head + words * <Py_ssize_t>sizeof(PyObject*) != size
            or _dictoffset(_PROPERTIES) != 0 or _has_finalizer(_PROPERTIES)
            or _has_finalizer(_DECODED) or _basicsize(_DECODED) != size
            or (<object>_PROPERTIES).__itemsize__ != 0 or weak == 0):
        return
    for k in range(words):
        off = head + k * <Py_ssize_t>sizeof(PyObject*)
        known = off == weak or off == _WIRE_SLOT
        _props_set_word(k, NULL)
        for j in range(_PROP_COUNT):
            if _PROP_OFFSET[_PROP_IDS[j]] == off:
                known = True
                _props_set_word(k, Py_None)
                nones += 1
        if not known:
            return
    if nones != _PROP_COUNT:
        return
    _props_nones = nones
    _props_words = words
    _props_set_dealloc(_PROPERTIES)
    _props_set_dealloc(_DECODED)


_vouch_for_layout()
# The __class__ check of _DecodedProperties again, with the dealloc each class now has.
object.__setattr__(_new_properties(_DECODED), "__class__", Properties)
  # the packet types (16: WILL) as int objects
cdef tuple _NO_ARGS = ()


cdef inline void _set_type(object obj, PyTypeObject* cls) noexcept:
    """obj.__class__ = cls, for classes of the same layout (checked at import)."""
    cdef PyTypeObject* old = Py_TYPE(obj)
    Py_INCREF(<object>cls)
    Py_SET_TYPE(obj, cls)
    Py_DECREF(<object>old)


# The block an encode may copy as it is, and the block an encode keeps for its next one
# (_codec.properties.wire_block): _codec/encode_c.pxi calls these.

cdef PyObject* _kept_block(object props, int ptype) noexcept:
    """The block an earlier encode kept for packet type ``ptype`` in a Properties' _wire
    slot, (block, ptype) with no list to compare: borrowed, or NULL for anything else,
    which _reusable_block then reads.  A CONNECT's two blocks come this way on every
    encode of the same packet, for a tenth of what _reusable_block takes to find them."""
    cdef PyObject* wire = slot_get(props, _WIRE_SLOT)
    if (wire == NULL or type(<object>wire) is not tuple
            or PyTuple_GET_SIZE(<object>wire) != 2
            or PyTuple_GET_ITEM(<object>wire, 1) != PyTuple_GET_ITEM(_PTYPE_INTS, ptype)):
        return NULL
    wire = PyTuple_GET_ITEM(<object>wire, 0)
    return wire if type(<object>wire) is bytes else NULL


cdef object _reusable_block(object props, int ptype):
    """_codec.properties.wire_block in C: the block a Properties (or a _DecodedProperties) holds
    when it may be copied into a packet of type ``ptype`` as it is, else None."""
    cdef PyObject* slot = slot_get(props, _WIRE_SLOT)
    cdef tuple wire
    cdef Py_ssize_t j
    if slot != NULL and type(<object>slot) is bytes:
        # The bare block of a Properties built when a packet's ``properties`` was read:
        # valid for ptype if the decoder's scan accepts it for ptype; the lists, built
        # from it without a copy, compared with the block's own.
        block = <bytes>slot
        if not _scan_properties(<const unsigned char*>PyBytes_AS_STRING(block), 0,
                                PyBytes_GET_SIZE(block), ptype):
            return None
        if (_list_value(props, _SUBSCRIPTION_IDS) is not None
                or _list_value(props, _USER_PROPERTIES) is not None):
            again = _new_properties(_PROPERTIES)
            _fill_values(again, block)
            if (_list_value(props, _SUBSCRIPTION_IDS) != _list_value(again, _SUBSCRIPTION_IDS)
                    or _list_value(props, _USER_PROPERTIES)
                    != _list_value(again, _USER_PROPERTIES)):
                return None
        return block
    if slot == NULL or type(<object>slot) is not tuple:
        return None
    wire = <tuple>slot
    if len(wire) < 2 or type(wire[0]) is not bytes or _uint(wire[1], 16) != ptype:
        return None
    if len(wire) == 2 or Py_TYPE(props) is _DECODED:
        return wire[0]  # no list to check, or no value built yet (so none changed)
    if len(wire) > 3:
        # Lists changed in place since the block was taken: the block is stale.
        for j in range(2, len(wire) - 1, 2):
            value = _list_value(props, wire[j])
            if value is None or value != wire[j + 1]:
                return None
    else:
        # (block, kind, None): lists built from the block without a copy (a decoded
        # block whose values were read), compared with the block's own, decoded again.
        again = _new_properties(_PROPERTIES)
        _fill_values(again, wire[0])
        if (_list_value(props, _SUBSCRIPTION_IDS) != _list_value(again, _SUBSCRIPTION_IDS)
                or _list_value(props, _USER_PROPERTIES) != _list_value(again, _USER_PROPERTIES)):
            return None
    return wire[0]


cdef object _list_value(object props, object name):
    """The value of the list property ``name`` (user_properties or
    subscription_identifiers) of a Properties; None for any other name."""
    cdef PyObject* value
    if name == _USER_PROPERTIES:
        value = slot_get(props, _PROP_OFFSET[0x26])
    elif name == _SUBSCRIPTION_IDS:
        value = slot_get(props, _PROP_OFFSET[0x0B])
    else:
        return None
    return None if value == NULL else <object>value


cdef tuple _list_copies(object props):
    """(name, copy, ...) of the list values of a Properties (_codec.properties has the
    same): what _reusable_block compares to notice a list changed in place."""
    lists = ()
    ids = _list_value(props, _SUBSCRIPTION_IDS)
    if ids is not None:
        lists = (_SUBSCRIPTION_IDS, list(ids))
    pairs = _list_value(props, _USER_PROPERTIES)
    if pairs is not None:
        lists += (_USER_PROPERTIES, list(pairs))
    return lists


cdef int _keep_block(object props, const unsigned char* data, Py_ssize_t n,
                     int ptype) except -1:
    """Keep the block just written for a user-built Properties, for its next encode as
    the same packet type.  Only values the C encoder accepted are here (int, str, bytes,
    and lists of tuples of str or of ints): none can change in place but the lists,
    whose copies are kept too."""
    if Py_TYPE(props) is not _PROPERTIES:
        return 0
    lists = _list_copies(props)
    slot_put(props, _WIRE_SLOT,
              (PyBytes_FromStringAndSize(<const char*>data, n), _PTYPE_INTS[ptype]) + lists)
    return 0
