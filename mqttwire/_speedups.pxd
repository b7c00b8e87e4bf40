# What the include files of _speedups.pyx share (Cython includes a module's own .pxd in it
# before the .pyx): the C state and the C functions that one file of mqttwire/_codec/*_c.pxi
# defines and another uses.  Each include uses only the names it defines, the names
# _speedups.pyx imports (and cimports from _cdefs.pxd) and the names declared here;
# tests/codec/test_includes.py fails on any other use of a name across files.
#
# Declarations only, each with the exact signature and exception spec of its definition:
# the definitions (and the filling of the tables, at import) stay in the file named above
# each group.  Functions defined `inline` there are declared plainly here, as Cython
# allows; they stay inline.  Cython also lists what a .pxd declares in the module's
# __pyx_capi__ (for other modules to cimport, which none does); the calls within the
# module are the same direct C calls as without it, in the same generated C.  The one cost
# is the compiler's: an exported function's address escapes, so GCC no longer specialises
# it for its callers' constant arguments (a decode runs 3 to 7 instructions more, an
# encode none: benchmarks/history/codec.md, "Refactor: the include files' shared names").

from cpython.object cimport PyObject, PyTypeObject


# ---------------------------------------------------------------------------------------
# _codec/tables_c.pxi: C tables filled at import from the shared Python tables, and the
# small helpers every part uses.

# _BAD_FIRST[v - 3][b]: no packet at level v may start with byte b (first_byte_error).
cdef bint _BAD_FIRST[3][256]
# _ACK_CODE_OK[t - 4][c]: reason code c is defined for acknowledgement type t (MQTT 5.0).
cdef bint _ACK_CODE_OK[4][256]
# _TOPIC_CLASS[b]: 1 for U+0000, 2 for '+' or '#', 4 for a byte >= 0x80 (non-ASCII), else 0.
cdef unsigned char _TOPIC_CLASS[256]
# The property table of _codec.properties: _PROP_KIND[id] (-1 unknown), _PROP_ALLOWED[id]
# (bit t: allowed in packet type t; bit 16: Will Properties), _PROP_FLAGS[id] (1: only 0
# or 1; 2: not 0).
cdef int _PROP_KIND[128]
cdef unsigned int _PROP_ALLOWED[128]
cdef unsigned char _PROP_FLAGS[128]
cdef PyTypeObject* _PROPERTIES  # _codec.properties.Properties
# Cached Python objects of the decoders.
cdef object _PUBLISH
cdef tuple _ACK_NAMES
cdef object _REFERENCE_DECODERS
cdef object _TOPIC_NAME

cdef int _check_version(object version) except -1
cdef void _shift(object exc, Py_ssize_t delta)


# ---------------------------------------------------------------------------------------
# _codec/datatypes_c.pxi: the spec's data types read in C.

cdef object _BAIL  # what a C reader returns for anything it does not vouch for

cdef bint _read_varint(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                       Py_ssize_t* value) noexcept
cdef object _read_str(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                      unsigned char refuse)
cdef object _read_bin(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end)
cdef bint _skip_str(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                    unsigned char refuse) except -1


# ---------------------------------------------------------------------------------------
# _codec/properties_c.pxi: property blocks and the lazily built Properties.

cdef PyTypeObject* _DECODED  # _DecodedProperties
cdef Py_ssize_t _PROP_OFFSET[128]  # property id -> its slot's offset in a Properties
cdef int _PROP_IDS[32]  # the defined property ids, in order
cdef int _PROP_COUNT  # how many
cdef Py_ssize_t _WIRE_SLOT  # the offset of Properties._wire in an instance
cdef tuple _PTYPE_INTS  # the packet types (16: WILL) as int objects
cdef object _USER_PROPERTIES, _SUBSCRIPTION_IDS  # the two list-valued attribute names

cdef int _scan_properties(const unsigned char* p, Py_ssize_t i, Py_ssize_t stop,
                          int ptype) except -1
cdef object _fast_block(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                        int ptype)
cdef object _raw_properties(bytes raw, int ptype)
cdef object _built_properties(bytes raw, int ptype)
cdef object _new_properties(PyTypeObject* cls)
cdef int _fill_values(object props, bytes block) except -1
cdef object _fast_properties(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                             int ptype)
cdef int _materialize(object props) except -1
cdef object _reusable_block(object props, int ptype)
cdef int _keep_block(object props, const unsigned char* data, Py_ssize_t n,
                     int ptype) except -1
cdef PyObject* _kept_block(object props, int ptype) noexcept


# ---------------------------------------------------------------------------------------
# _codec/packets_c.pxi: the packet classes and their C fields (the struct of each class:
# a field is added here, its __init__ and methods there).  The decorators (final,
# freelist, no_gc) are on the definitions.

# Where a class's instances hold a field (encode_method_c.pxi reads the acknowledgements'
# fields at their offsets).
cdef Py_ssize_t _field_offset(type cls, str name) except -1

cdef class _PacketBase:
    pass

cdef class Will:
    cdef public object topic, payload, qos, retain
    cdef object _properties
    cdef bytes _raw  # the Will Properties block of a decoded CONNECT, until read

cdef class Connect(_PacketBase):
    cdef public object client_id, protocol_version, clean_start, keep_alive, username
    cdef public object password, will
    cdef object _properties
    cdef bytes _raw  # the property block of a decoded CONNECT, until read

cdef class ConnAck(_PacketBase):
    cdef public object session_present, reason_code, properties

cdef class Publish:
    cdef public object topic, payload, qos, retain, dup, packet_id
    cdef object _properties
    cdef bytes _raw  # the property block of a decoded PUBLISH, until read

cdef class _Ack:
    cdef public object packet_id, reason_code, properties

cdef class PubAck(_Ack):
    pass

cdef class PubRec(_Ack):
    pass

cdef class PubRel(_Ack):
    pass

cdef class PubComp(_Ack):
    pass

cdef class Subscription:
    cdef public object topic_filter, qos, no_local, retain_as_published, retain_handling

cdef class Subscribe(_PacketBase):
    cdef public object packet_id, subscriptions, properties

cdef class SubAck(_PacketBase):
    cdef public object packet_id, reason_codes, properties

cdef class Unsubscribe(_PacketBase):
    cdef public object packet_id, topic_filters, properties

cdef class UnsubAck(_PacketBase):
    cdef public object packet_id, reason_codes, properties

cdef class PingReq(_PacketBase):
    pass

cdef class PingResp(_PacketBase):
    pass

cdef class Disconnect(_PacketBase):
    cdef public object reason_code, properties

cdef class Auth(_PacketBase):
    cdef public object reason_code, properties

cdef object _NS  # the classes the shared Python decoders build packets with


# ---------------------------------------------------------------------------------------
# _codec/encode_c.pxi: the C encoders the packet classes' encode() methods call.

cdef object _encode_connect(Connect pkt)
cdef object _encode_subscribe(Subscribe pkt, object version_obj)
cdef object _encode_publish_any(Publish pkt, object version_obj)
cdef object _encode_ack(_Ack pkt, object version_obj)

# _codec/encode_method_c.pxi: PUBLISH's encoder (the common packet in C, the rest to
# _encode_publish_any).

cdef object _encode_publish(Publish pkt, object version_obj)


# ---------------------------------------------------------------------------------------
# _codec/decode_c.pxi: the fixed header, the body decoders and the input view, which
# StreamDecoder (_codec/stream_c.pxi) reuses.

cdef object _decode_body(const unsigned char* p, Py_ssize_t start, Py_ssize_t body,
                         Py_ssize_t end, int version)
cdef int _header(const unsigned char* p, Py_ssize_t pos, Py_ssize_t n, int version,
                 Py_ssize_t* body, Py_ssize_t* end) except -1

cdef class _Input:
    cdef Py_buffer view
    cdef bint has_view
    cdef object keep
    cdef const unsigned char* p
    cdef Py_ssize_t n

    cdef int open(self, object data) except -1
    cdef void release(self) noexcept


# ---------------------------------------------------------------------------------------
# _codec/stream_c.pxi: the stream decoder's state.  Declared here so that the compiled
# capture loop (mqttwire/capture/loop_c.pyx) can tell when a direction's decoder holds
# nothing (no bytes buffered, no error, its level known) and read the packets of a
# segment itself, advancing ``_consumed`` by what it read, as ``_parse`` would.

cdef class StreamDecoder:
    cdef public object version
    cdef public object max_packet_size
    cdef bint _learn
    cdef bytearray _buffer  # the incomplete packet carried over to the next feed()
    cdef Py_ssize_t _need  # its full size once its fixed header is known, else 0
    cdef long long _consumed  # stream offset of _buffer[0]
    cdef object _error
    cdef bint _feeding

    cdef list _feed(self, object chunk)
    cdef Py_ssize_t _parse(self, const unsigned char* p, Py_ssize_t n, list out) except -1
