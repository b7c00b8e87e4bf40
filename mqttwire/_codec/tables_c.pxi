# Included by _speedups.pyx (one extension module); the names other files use are declared
# in _speedups.pxd.
#
# The C tables the hot paths index, each filled at import from the shared Python table
# that defines the rule (_codec.datatypes.first_byte_error, _constants.REASON_CODES, the property table
# of _codec.properties), so a rule is written once; and the small helpers every part uses: the
# int range check, the protocol-version check, the offset shift of a shared decoder's
# error.

# _BAD_FIRST (declared with the other tables in _speedups.pxd) is filled from the shared
# first_byte_error() so the rule lives in one place; the error itself is worded there too.
# _TOPIC_CLASS: one OR per topic byte tells which (rare) checks a topic name needs.
cdef int _v, _b, _t
for _b in range(256):
    _TOPIC_CLASS[_b] = 1 if _b == 0 else 2 if _b in (0x2B, 0x23) else 4 if _b >= 0x80 else 0
for _v in range(3):
    for _b in range(256):
        _BAD_FIRST[_v][_b] = first_byte_error(_b, _v + 3, 0) is not None
for _t in range(4):
    for _b in range(256):
        _ACK_CODE_OK[_t][_b] = _b in REASON_CODES[_t + 4]

# The property table of _codec.properties, as C arrays for the encoder's fast path and the
# block scan (_PROP_KIND, _PROP_ALLOWED, _PROP_FLAGS: see _speedups.pxd).
for _b in range(128):
    _PROP_KIND[_b] = -1
    _PROP_ALLOWED[_b] = 0
    _PROP_FLAGS[_b] = 0
for _b, (_name, _kind, _allowed) in PROPERTY_TABLE.items():
    _PROP_KIND[_b] = _kind
    for _t in _allowed:
        _PROP_ALLOWED[_b] |= 1u << _t
    _PROP_FLAGS[_b] = (1 if _b in BOOLEAN_PROPERTIES else 0) | (
        2 if _b in NONZERO_PROPERTIES else 0)

# Cached Python objects used on the hot path.
_PROPERTIES = <PyTypeObject*>Properties  # kept alive by the import
_PUBLISH = "PUBLISH"
_ACK_NAMES = ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP")
_REFERENCE_DECODERS = reference.DECODERS
_TOPIC_NAME = "topic name"


cdef object _V3 = 3, _V4 = 4, _V5 = 5


cdef inline int _check_version(object version) except -1:
    """_codec.datatypes.check_version, with the usual arguments recognised in C first: this runs on
    every encode and decode, where a Python call would cost more than the whole check.
    Anything else goes to check_version, which accepts it or words the one error."""
    cdef long long v
    # CPython keeps one object per small int, so the usual arguments are these very
    # objects: three pointer comparisons before any conversion.
    if version is _V5:
        return 5
    if version is _V4:
        return 4
    if version is _V3:
        return 3
    v = _uint(version, 5)
    if v >= 3:  # an equal int that is not the cached object (C code can make one)
        return <int>v
    if type(version) is not int and (version == 5 or version == 4 or version == 3):
        return <int>version  # e.g. an IntEnum member
    check_version(version)  # raises
    return -1  # not reached


cdef inline void _shift(object exc, Py_ssize_t delta):
    """Errors from the shared Python decoders carry offsets relative to the bytes they were
    given; move them to the caller's frame of reference."""
    if exc.offset is not None:
        exc.offset += delta
