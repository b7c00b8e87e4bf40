# cython: language_level=3, freethreading_compatible=True
"""The Cython implementation of the mqttwire codec.

Same names, signatures and behaviour as ``mqttwire._pure`` (whose docstrings document
both).  The hot path works on ``const unsigned char *``: the fixed header, the Remaining
Length, the topic name, PUBLISH, the four acknowledgements and the StreamDecoder's framing
loop.  Property blocks, CONNECT, SUBSCRIBE, SUBACK, UNSUBSCRIBE and UNSUBACK are decoded in
C too, and PreparedPublish, property blocks, CONNECT and SUBSCRIBE encoded in C.  The rest
is shared Python: CONNACK, DISCONNECT and AUTH (``_cold``), and every error message
(``_wire`` builders).  The C readers and writers take valid packets only and hand
anything else to the shared reference code (``_cold``, ``_properties``, ``_publish``,
``_forwarding``, ``_framing``), which raises the error; so the two implementations cannot
word or order an error differently.  This module never imports ``_pure``: what the twins
share lives in those modules, under public names, and is the contract between them.

Every pointer read is preceded by an explicit length check (pointer indexing is never
bounds-checked, whatever the directives).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memchr, memcmp, memcpy, memmove

import types

from . import _cold
from ._constants import (
    MAX_REMAINING_LENGTH,
    PACKET_NAMES,
    REASON_CODES,
    V3_SUBACK_CODES,
    PacketType,
)
from ._errors import IncompletePacket, MalformedPacket, MQTTWireError, ProtocolError, rule
from ._fields import (
    ACK,
    AUTH,
    CONNACK,
    CONNECT,
    DISCONNECT,
    NO_FIELDS,
    PUBLISH,
    SUBACK,
    SUBSCRIBE,
    SUBSCRIPTION,
    UNSUBACK,
    UNSUBSCRIBE,
    WILL,
    fields_equal,
    fields_repr,
)
from ._ctopics import (
    Matches,
    TopicTree,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)
from ._forwarding import encode_forwarded, forwarding_parts
from ._framing import incomplete
from ._properties import (
    BOOLEAN_PROPERTIES,
    NONZERO_PROPERTIES,
    PROPERTY_NAMES,
    PROPERTY_TABLE,
    Properties,
    decode_properties,
)
from ._publish import encode_ack, encode_publish
from ._wire import (
    as_buffer,
    check_subscription_identifiers,
    check_version,
    connect_order_error,
    first_byte_error,
    length_mismatch,
    null_error,
    overrun,
    packet_id_zero_error,
    reason_code_error,
    remaining_length_error,
    too_large,
    topic_name_wildcard_error,
    utf8_error,
)

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object text)
    bint PyUnicode_IS_COMPACT_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)
    # Declared here with const pointers (Cython's own declarations take char *).
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    bytes PyBytes_FromStringAndSize(const char* v, Py_ssize_t size)
    object PyObject_GenericGetDict(object o, void* context)
    # Allocation as object.__new__(cls) does it, without the call through the type: the
    # Properties class is a plain class with no __new__ of its own.
    object PyType_GenericNew(PyTypeObject* cls, PyObject* args, PyObject* kwds)
    long long PyLong_AsLongLongAndOverflow(object value, int* overflow) except? -1

cdef extern from *:
    """
    #define MQTTWIRE_MAX_REMAINING_LENGTH 268435455
    """
    const Py_ssize_t MQTTWIRE_MAX_REMAINING_LENGTH

__all__ = [
    "Auth", "ConnAck", "Connect", "Disconnect", "PingReq", "PingResp", "PubAck", "PubComp",
    "Publish", "PubRec", "PubRel", "SubAck", "Subscribe", "Subscription", "UnsubAck",
    "Unsubscribe", "Will", "StreamDecoder", "PreparedPublish", "decode", "decode_from",
    "encode", "Matches", "TopicTree", "parse_shared", "topic_matches", "validate_topic_filter",
    "validate_topic_name",
]

# _BAD_FIRST[v - 3][b]: no packet at level v may start with byte b.  Filled from the shared
# first_byte_error() so the rule lives in one place; the error itself is worded there too.
cdef bint _BAD_FIRST[3][256]
# _ACK_CODE_OK[t - 4][c]: reason code c is defined for acknowledgement type t (MQTT 5.0).
cdef bint _ACK_CODE_OK[4][256]

# _TOPIC_CLASS[b]: 1 for U+0000, 2 for '+' or '#', 4 for a byte >= 0x80 (non-ASCII), else 0;
# one OR per topic byte tells which (rare) checks a topic name needs.
cdef unsigned char _TOPIC_CLASS[256]

cdef int _v, _b, _t
for _b in range(256):
    _TOPIC_CLASS[_b] = 1 if _b == 0 else 2 if _b in (0x2B, 0x23) else 4 if _b >= 0x80 else 0
for _v in range(3):
    for _b in range(256):
        _BAD_FIRST[_v][_b] = first_byte_error(_b, _v + 3, 0) is not None
for _t in range(4):
    for _b in range(256):
        _ACK_CODE_OK[_t][_b] = _b in REASON_CODES[_t + 4]

# The property table of _properties, as C arrays for the encoder's fast path:
# _PROP_KIND[id] (-1 unknown), _PROP_ALLOWED[id] (bit t: allowed in packet type t; bit 16:
# Will Properties), _PROP_FLAGS[id] (1: only 0 or 1; 2: not 0).
cdef int _PROP_KIND[128]
cdef unsigned int _PROP_ALLOWED[128]
cdef unsigned char _PROP_FLAGS[128]
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
cdef dict _PROPERTY_IDS = PROPERTY_NAMES

# Cached Python objects used on the hot path.
cdef PyTypeObject* _PROPERTIES = <PyTypeObject*>Properties  # kept alive by the import
cdef object _PUBLISH = "PUBLISH"
cdef tuple _ACK_NAMES = ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP")
cdef object _COLD_DECODERS = _cold.DECODERS
cdef object _TOPIC_NAME = "topic name"


cdef inline long long _uint(object value, long long top) noexcept:
    """``value`` when it is an int (not a bool, not a subclass) from 0 to ``top``, else -1.
    A range check without Python comparisons that cannot overflow: a value too large for
    a C integer must reach the reference code, which names it in its error."""
    cdef int overflow
    cdef long long v
    if type(value) is not int:
        return -1
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    return v if not overflow and 0 <= v <= top else -1


cdef object _V3 = 3, _V4 = 4, _V5 = 5


cdef inline int _check_version(object version) except -1:
    """_wire.check_version, with the usual arguments recognised in C first: this runs on
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


# ---------------------------------------------------------------------------------------
# Packet classes: twins of _pure's.  cdef classes, so that decoding fills C-level slots
# directly (no instance dict, no attribute lookups) and packets can sit on a freelist.


cdef class _PacketBase:
    """encode_into() for every packet class; each class defines encode()."""

    def encode(self, version=5):  # pragma: no cover - overridden
        raise NotImplementedError

    def encode_into(self, bytearray buf not None, version=5):
        """Append the encoded packet to ``buf``; return the number of bytes written."""
        data = self.encode(version)
        buf += data
        return len(data)


@cython.final
@cython.freelist(8)
cdef class Will:
    """The will message of a CONNECT (MQTT 5.0 §3.1.2.5, §3.1.3.2-3.1.3.4)."""

    cdef public object topic, payload, qos, retain, properties

    def __init__(self, topic, payload=b"", *, qos=0, retain=False, properties=None):
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties

    # __eq__ and __repr__ from the class's field list (shared _fields module).  Written in
    # each class: Cython allows a freelist only on a class without a base class, so these
    # cannot come from a common base as in _pure.
    def __eq__(self, other):
        return fields_equal(self, other, WILL)

    def __repr__(self):
        return fields_repr(self, "Will", WILL)


@cython.final
cdef class Connect(_PacketBase):
    """CONNECT (MQTT 3.1.1 §3.1, MQTT 5.0 §3.1).  The protocol name is derived from
    ``protocol_version``: "MQIsdp" for level 3, "MQTT" otherwise.  The packet carries its
    own level, so ``encode()`` ignores its ``version`` argument and ``decode()`` needs none."""

    cdef public object client_id, protocol_version, clean_start, keep_alive, username
    cdef public object password, will, properties
    packet_type = PacketType.CONNECT

    def __init__(self, client_id, *, protocol_version=5, clean_start=True, keep_alive=60,
                 username=None, password=None, will=None, properties=None):
        self.client_id = client_id
        self.protocol_version = protocol_version
        self.clean_start = clean_start
        self.keep_alive = keep_alive
        self.username = username
        self.password = password
        self.will = will
        self.properties = properties

    @property
    def protocol_name(self):
        return "MQIsdp" if self.protocol_version == 3 else "MQTT"

    def encode(self, version=5):
        return _encode_connect(self)

    def __eq__(self, other):
        return fields_equal(self, other, CONNECT)

    def __repr__(self):
        return fields_repr(self, "Connect", CONNECT)


@cython.final
cdef class ConnAck(_PacketBase):
    """CONNACK (MQTT 3.1.1 §3.2, MQTT 5.0 §3.2).  At levels 3 and 4, ``reason_code`` is the
    connect return code (0-5)."""

    cdef public object session_present, reason_code, properties
    packet_type = PacketType.CONNACK

    def __init__(self, *, session_present=False, reason_code=0, properties=None):
        self.session_present = session_present
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version=5):
        return _cold.encode_connack(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, CONNACK)

    def __repr__(self):
        return fields_repr(self, "ConnAck", CONNACK)


# no_gc: a Publish holds strings, bytes, ints and a Properties, which cannot lead back to
# it, so it stays out of the cyclic GC; allocating 10,000 tracked packets in one feed()
# otherwise spends more on collections than on decoding.
@cython.final
@cython.no_gc
@cython.freelist(32)
cdef class Publish:
    """PUBLISH (MQTT 3.1.1 §3.3, MQTT 5.0 §3.3).  ``packet_id`` is present exactly when
    ``qos`` > 0.  A v5 PUBLISH that uses a Topic Alias may have an empty ``topic``."""

    cdef public object topic, payload, qos, retain, dup, packet_id, properties
    packet_type = PacketType.PUBLISH

    def __init__(self, topic, payload=b"", *, qos=0, retain=False, dup=False,
                 packet_id=None, properties=None):
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self.properties = properties

    def encode(self, version=5):
        return _encode_publish(self, version)

    def encode_into(self, bytearray buf not None, version=5):
        """Append the encoded packet to ``buf``; return the number of bytes written."""
        data = _encode_publish(self, version)
        buf += data
        return len(data)

    def __eq__(self, other):
        return fields_equal(self, other, PUBLISH)

    def __repr__(self):
        return fields_repr(self, "Publish", PUBLISH)


@cython.no_gc  # as Publish: ints and a Properties only
@cython.freelist(16)
cdef class _Ack:
    """PUBACK, PUBREC, PUBREL and PUBCOMP: a packet identifier, and from MQTT 5.0 on a
    reason code and properties (MQTT 5.0 §3.4-§3.7)."""

    cdef public object packet_id, reason_code, properties

    def __init__(self, packet_id, *, reason_code=0, properties=None):
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version=5):
        return _encode_ack(self, version)

    def encode_into(self, bytearray buf not None, version=5):
        """Append the encoded packet to ``buf``; return the number of bytes written."""
        data = _encode_ack(self, version)
        buf += data
        return len(data)

    def __eq__(self, other):
        return fields_equal(self, other, ACK)

    def __repr__(self):
        return fields_repr(self, type(self).__name__, ACK)


@cython.final
cdef class PubAck(_Ack):
    """PUBACK: the answer to a QoS 1 PUBLISH (MQTT 5.0 §3.4)."""

    packet_type = PacketType.PUBACK


@cython.final
cdef class PubRec(_Ack):
    """PUBREC: the first answer to a QoS 2 PUBLISH (MQTT 5.0 §3.5)."""

    packet_type = PacketType.PUBREC


@cython.final
cdef class PubRel(_Ack):
    """PUBREL: the answer to PUBREC; its first byte is 0x62 (MQTT 5.0 §3.6)."""

    packet_type = PacketType.PUBREL


@cython.final
cdef class PubComp(_Ack):
    """PUBCOMP: the answer to PUBREL, closing a QoS 2 exchange (MQTT 5.0 §3.7)."""

    packet_type = PacketType.PUBCOMP


@cython.final
@cython.no_gc  # as Publish: its fields are a string, ints and bools
@cython.freelist(16)
cdef class Subscription:
    """One topic filter of a SUBSCRIBE with its options (MQTT 5.0 §3.8.3.1); before MQTT 5.0
    only ``qos`` exists."""

    cdef public object topic_filter, qos, no_local, retain_as_published, retain_handling

    def __init__(self, topic_filter, *, qos=0, no_local=False, retain_as_published=False,
                 retain_handling=0):
        self.topic_filter = topic_filter
        self.qos = qos
        self.no_local = no_local
        self.retain_as_published = retain_as_published
        self.retain_handling = retain_handling

    def __eq__(self, other):
        return fields_equal(self, other, SUBSCRIPTION)

    def __repr__(self):
        return fields_repr(self, "Subscription", SUBSCRIPTION)


@cython.final
cdef class Subscribe(_PacketBase):
    """SUBSCRIBE (MQTT 5.0 §3.8): a packet identifier and one or more Subscriptions."""

    cdef public object packet_id, subscriptions, properties
    packet_type = PacketType.SUBSCRIBE

    def __init__(self, packet_id, subscriptions, *, properties=None):
        self.packet_id = packet_id
        self.subscriptions = list(subscriptions)
        self.properties = properties

    def encode(self, version=5):
        return _encode_subscribe(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, SUBSCRIBE)

    def __repr__(self):
        return fields_repr(self, "Subscribe", SUBSCRIBE)


@cython.final
cdef class SubAck(_PacketBase):
    """SUBACK (MQTT 5.0 §3.9): one reason code (before 5.0: return code) per topic filter."""

    cdef public object packet_id, reason_codes, properties
    packet_type = PacketType.SUBACK

    def __init__(self, packet_id, reason_codes, *, properties=None):
        self.packet_id = packet_id
        self.reason_codes = list(reason_codes)
        self.properties = properties

    def encode(self, version=5):
        return _cold.encode_suback(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, SUBACK)

    def __repr__(self):
        return fields_repr(self, "SubAck", SUBACK)


@cython.final
cdef class Unsubscribe(_PacketBase):
    """UNSUBSCRIBE (MQTT 5.0 §3.10): a packet identifier and one or more topic filters."""

    cdef public object packet_id, topic_filters, properties
    packet_type = PacketType.UNSUBSCRIBE

    def __init__(self, packet_id, topic_filters, *, properties=None):
        self.packet_id = packet_id
        self.topic_filters = list(topic_filters)
        self.properties = properties

    def encode(self, version=5):
        return _cold.encode_unsubscribe(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, UNSUBSCRIBE)

    def __repr__(self):
        return fields_repr(self, "Unsubscribe", UNSUBSCRIBE)


@cython.final
cdef class UnsubAck(_PacketBase):
    """UNSUBACK (MQTT 5.0 §3.11): reason codes exist only in MQTT 5.0."""

    cdef public object packet_id, reason_codes, properties
    packet_type = PacketType.UNSUBACK

    def __init__(self, packet_id, reason_codes=(), *, properties=None):
        self.packet_id = packet_id
        self.reason_codes = list(reason_codes)
        self.properties = properties

    def encode(self, version=5):
        return _cold.encode_unsuback(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, UNSUBACK)

    def __repr__(self):
        return fields_repr(self, "UnsubAck", UNSUBACK)


@cython.final
cdef class PingReq(_PacketBase):
    """PINGREQ (MQTT 5.0 §3.12): two bytes, C0 00."""

    packet_type = PacketType.PINGREQ

    def encode(self, version=5):
        _check_version(version)
        return b"\xc0\x00"

    def __eq__(self, other):
        return fields_equal(self, other, NO_FIELDS)

    def __repr__(self):
        return fields_repr(self, "PingReq", NO_FIELDS)


@cython.final
cdef class PingResp(_PacketBase):
    """PINGRESP (MQTT 5.0 §3.13): two bytes, D0 00."""

    packet_type = PacketType.PINGRESP

    def encode(self, version=5):
        _check_version(version)
        return b"\xd0\x00"

    def __eq__(self, other):
        return fields_equal(self, other, NO_FIELDS)

    def __repr__(self):
        return fields_repr(self, "PingResp", NO_FIELDS)


@cython.final
cdef class Disconnect(_PacketBase):
    """DISCONNECT (MQTT 5.0 §3.14); before MQTT 5.0 it carries nothing."""

    cdef public object reason_code, properties
    packet_type = PacketType.DISCONNECT

    def __init__(self, *, reason_code=0, properties=None):
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version=5):
        return _cold.encode_disconnect(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, DISCONNECT)

    def __repr__(self):
        return fields_repr(self, "Disconnect", DISCONNECT)


@cython.final
cdef class Auth(_PacketBase):
    """AUTH (MQTT 5.0 §3.15), for extended authentication; MQTT 5.0 only."""

    cdef public object reason_code, properties
    packet_type = PacketType.AUTH

    def __init__(self, *, reason_code=0, properties=None):
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version=5):
        return _cold.encode_auth(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, AUTH)

    def __repr__(self):
        return fields_repr(self, "Auth", AUTH)


# The classes the shared cold decoders build packets with.
cdef object _NS = types.SimpleNamespace(
    Connect=Connect, Will=Will, ConnAck=ConnAck, Subscribe=Subscribe,
    Subscription=Subscription, SubAck=SubAck, Unsubscribe=Unsubscribe, UnsubAck=UnsubAck,
    Disconnect=Disconnect, Auth=Auth,
)

# ---------------------------------------------------------------------------------------
# Encoding the hot packets.  The fast path handles well-typed, valid packets in C; anything
# else (wrong types, invalid values, a lone surrogate, an empty v5 topic with an alias) is
# handed to the shared reference encoder (_publish), which raises exactly the error _pure
# raises, or, for the valid rarities, encodes it.


cdef inline Py_ssize_t _varint_size(Py_ssize_t value) noexcept:
    if value < 0x80:
        return 1
    if value < 0x4000:
        return 2
    if value < 0x200000:
        return 3
    return 4


cdef inline Py_ssize_t _write_varint(unsigned char* out, Py_ssize_t value) noexcept:
    cdef Py_ssize_t i = 0
    while True:
        if value < 0x80:
            out[i] = <unsigned char>value
            return i + 1
        out[i] = <unsigned char>((value & 0x7F) | 0x80)
        value >>= 7
        i += 1


# The encoders write into an _Out: a buffer on the caller's stack that moves to the heap
# only when a packet outgrows it.  (Appending to a bytearray resizes it on every append,
# which cost more than the encoding itself.)  The caller frees it with _out_free in a
# finally clause.

cdef enum:
    _STACK = 512  # bytes of stack buffer per encoder: most packets fit

cdef struct _Out:
    unsigned char* p  # the stack buffer, or ``heap``
    Py_ssize_t n  # bytes written
    Py_ssize_t cap
    unsigned char* heap  # NULL until the stack buffer is outgrown


cdef inline void _out_init(_Out* o, unsigned char* stack) noexcept:
    o.p = stack
    o.n = 0
    o.cap = _STACK
    o.heap = NULL


cdef inline void _out_free(_Out* o) noexcept:
    if o.heap != NULL:
        free(o.heap)
        o.heap = NULL


cdef int _out_grow(_Out* o, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap = o.cap * 2
    cdef unsigned char* q
    while cap < o.n + more:
        cap *= 2
    if o.heap == NULL:
        q = <unsigned char*>malloc(cap)
        if q != NULL:
            memcpy(q, o.p, o.n)
    else:
        q = <unsigned char*>realloc(o.heap, cap)
    if q == NULL:
        raise MemoryError()
    o.heap = q
    o.p = q
    o.cap = cap
    return 0


cdef inline int _put(_Out* o, const void* data, Py_ssize_t n) except -1:
    if o.n + n > o.cap:
        _out_grow(o, n)
    memcpy(o.p + o.n, data, n)
    o.n += n
    return 0


cdef inline int _put1(_Out* o, unsigned char byte) except -1:
    if o.n >= o.cap:
        _out_grow(o, 1)
    o.p[o.n] = byte
    o.n += 1
    return 0


cdef inline int _put_u16(_Out* o, Py_ssize_t value) except -1:
    if o.n + 2 > o.cap:
        _out_grow(o, 2)
    o.p[o.n] = <unsigned char>(value >> 8)
    o.p[o.n + 1] = <unsigned char>(value & 0xFF)
    o.n += 2
    return 0


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


cdef inline bint _plain_text(const char* raw, Py_ssize_t n, bint is_topic) noexcept:
    """No U+0000 (MQTT 5.0 §1.5.4), and for a topic name no wildcard [MQTT-3.3.2-2]."""
    if memchr(raw, 0, n) != NULL:
        return False
    return not is_topic or (memchr(raw, 0x2B, n) == NULL and memchr(raw, 0x23, n) == NULL)


cdef int _utf8_field(_Out* out, object text, bint is_topic) except -1:
    """Append a length-prefixed UTF-8 string: 1, or 0 (nothing appended, nothing to trust)
    when it is not a plain str the decoder would accept; the caller then lets the shared
    encoder decide."""
    cdef const char* raw
    cdef Py_ssize_t n
    if type(text) is not str:
        return 0
    raw = _utf8(text, &n)
    if raw == NULL or n > 0xFFFF or not _plain_text(raw, n, is_topic):
        return 0
    _put_u16(out, n)
    _put(out, raw, n)
    return 1


cdef inline int _binary_field(_Out* out, object data) except -1:
    """Append length-prefixed Binary Data: 1, or 0 when it is not bytes of at most 65,535."""
    cdef Py_ssize_t n
    if type(data) is not bytes:
        return 0
    n = PyBytes_GET_SIZE(data)
    if n > 0xFFFF:
        return 0
    _put_u16(out, n)
    _put(out, PyBytes_AS_STRING(data), n)
    return 1


cdef struct _Prop:
    int pid
    PyObject* value  # a strong reference, released by _release()


cdef int _collect(object props, _Prop* items, unsigned long long skip) except -2:
    """The properties present in a Properties (what Properties.items() gives), into
    ``items`` in identifier order, leaving out the identifiers set in ``skip``: their
    number, or -1 when the instance dict holds something that is not a property.  The
    caller releases the values with _release(): encoding allocates, an allocation may run
    a finalizer, and a finalizer could change the Properties under us."""
    cdef dict d = PyObject_GenericGetDict(props, NULL)
    cdef Py_ssize_t i = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef int n = 0, pid, j
    while PyDict_Next(d, &i, &key, &value):
        if <object>value is None or (type(<object>value) is list and not <list>value):
            continue
        ident = _PROPERTY_IDS.get(<object>key)
        if ident is None:
            _release(items, n)
            return -1
        pid = ident
        if skip >> pid & 1:
            continue
        j = n  # insertion sort: a packet carries a handful of properties
        while j > 0 and items[j - 1].pid > pid:
            items[j] = items[j - 1]
            j -= 1
        items[j].pid = pid
        items[j].value = value
        Py_INCREF(<object>value)
        n += 1
    return n


cdef inline void _release(_Prop* items, int count) noexcept:
    cdef int k
    for k in range(count):
        Py_DECREF(<object>items[k].value)


cdef int _encode_properties(_Out* out, _Prop* items, int count, int ptype) except -1:
    """Append the properties ``items`` (without the block's length prefix) as
    _properties.encode_properties writes them: 1, or 0 when they are not all well-typed
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
            if not _binary_field(out, value):
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


cdef int _append_block(_Out* out, object props, int ptype) except -1:
    """Append a v5 property block (length prefix, then properties): 1, or 0 when the
    properties are not all well-typed and valid (the caller then hands the packet to the
    reference encoder)."""
    cdef _Prop items[32]
    cdef int count = 0
    cdef unsigned char stack[_STACK]
    cdef unsigned char prefix[4]
    cdef _Out block
    if props is not None:
        if type(props) is not Properties:
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
    finally:
        _out_free(&block)
        _release(items, count)
    return 1


cdef object _encode_connect(Connect pkt):
    """CONNECT (MQTT 5.0 §3.1) for well-typed, valid fields; anything else is handed to the
    shared _cold.encode_connect, which raises exactly the reference's error."""
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
    return _cold.encode_connect(pkt)


cdef int _connect_body(Connect pkt, _Out* body) except -1:
    cdef object level = pkt.protocol_version, keep_alive = pkt.keep_alive, will = pkt.will
    cdef object username = pkt.username, password = pkt.password
    cdef int version = <int>_uint(level, 5), flags = 0
    cdef long long keep = _uint(keep_alive, 0xFFFF), will_qos
    cdef Will w = None
    if version < 3 or keep < 0:
        return 0
    if will is not None:
        if type(will) is not Will:
            return 0
        w = will
        will_qos = _uint(w.qos, 2)
        if will_qos < 0 or not w.topic or (version < 5 and w.properties):
            return 0
        flags |= 0x04 | (<int>will_qos << 3) | (0x20 if w.retain else 0)
    if username is not None:
        flags |= 0x80
    if password is not None:
        if username is None and version < 5:
            return 0
        flags |= 0x40
    if pkt.clean_start:
        flags |= 0x02
    if version < 5 and pkt.properties:
        return 0
    # Protocol Name (MQIsdp for 3.1, MQTT after), Protocol Level, Connect Flags, Keep Alive
    if version == 3:
        _put(body, b"\x00\x06MQIsdp", 8)
    else:
        _put(body, b"\x00\x04MQTT", 6)
    _put1(body, version)
    _put1(body, flags)
    _put_u16(body, keep)
    if version == 5 and not _append_block(body, pkt.properties, 1):
        return 0
    if not _utf8_field(body, pkt.client_id, False):
        return 0
    if w is not None:
        if version == 5 and not _append_block(body, w.properties, 16):
            return 0  # 16 above: the Will Properties
        if not _utf8_field(body, w.topic, True):  # a topic name: no wildcards, no U+0000
            return 0
        if not _binary_field(body, w.payload):
            return 0
    if username is not None and not _utf8_field(body, username, False):
        return 0
    if password is not None and not _binary_field(body, password):
        return 0
    return 1


cdef object _encode_subscribe(Subscribe pkt, object version_obj):
    """SUBSCRIBE (MQTT 5.0 §3.8) for well-typed, valid fields; anything else is handed to
    the shared _cold.encode_subscribe, which raises exactly the reference's error."""
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
    return _cold.encode_subscribe(pkt, version_obj)


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
        if not _append_block(body, pkt.properties, 8):
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
    result = PyBytes_FromStringAndSize(NULL, 1 + _varint_size(body.n) + body.n)
    out = <unsigned char*>PyBytes_AS_STRING(result)
    out[0] = b0
    n = 1 + _write_varint(out + 1, body.n)
    memcpy(out + n, body.p, body.n)
    return result


cdef object _encode_publish(Publish pkt, object version_obj):
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
    props = pkt.properties
    if props is not None:
        if type(props) is not Properties:
            return encode_publish(pkt, version)
        count = _collect(props, items, 0)
        if count < 0:
            return encode_publish(pkt, version)
    _out_init(&block, stack)
    try:
        # An empty Properties counts as none; properties before 5.0 are refused.
        if count and (version != 5 or not _encode_properties(&block, items, count, 3)):
            return encode_publish(pkt, version)
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
    result = PyBytes_FromStringAndSize(NULL, total)
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
    cdef int version = _check_version(version_obj)
    cdef object pid_obj = pkt.packet_id
    cdef object code_obj = pkt.reason_code
    cdef long packet_id, code
    cdef unsigned char buf[5]
    cdef int ptype
    cdef type cls = type(pkt)
    # The class, not its packet_type attribute: a type lookup and an IntEnum conversion
    # cost as much as the rest of this function.
    ptype = 4 if cls is PubAck else 5 if cls is PubRec else 6 if cls is PubRel else 7
    packet_id = <long>_uint(pid_obj, 0xFFFF)
    code = <long>_uint(code_obj, 0xFF)
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
        return PyBytes_FromStringAndSize(<char*>buf, 5)
    buf[1] = 2
    return PyBytes_FromStringAndSize(<char*>buf, 4)


cdef tuple _forwarding_parts(object publish):
    """_forwarding.forwarding_parts for well-typed, valid publishes; None for the rest."""
    cdef object props = publish.properties, payload = publish.payload, expiry = None
    cdef _Prop items[32]
    cdef int count = 0
    cdef unsigned char topic_stack[_STACK]
    cdef unsigned char props_stack[_STACK]
    cdef _Out topic, block
    if type(payload) is not bytes or not publish.topic:
        return None
    if props is not None:
        if type(props) is not Properties:
            return None
        expiry = props.message_expiry_interval
        # Everything but what each subscriber gets anew: Message Expiry Interval (0x02),
        # Subscription Identifiers (0x0B) and the connection's own Topic Alias (0x23).
        count = _collect(props, items, (1ULL << 0x02) | (1ULL << 0x0B) | (1ULL << 0x23))
        if count < 0:
            return None
    _out_init(&topic, topic_stack)
    _out_init(&block, props_stack)
    try:
        if not _utf8_field(&topic, publish.topic, True):  # a topic name: no wildcards
            return None
        if count and not _encode_properties(&block, items, count, 3):
            return None
        return (PyBytes_FromStringAndSize(<char*>topic.p, topic.n), expiry,
                PyBytes_FromStringAndSize(<char*>block.p, block.n), payload)
    finally:
        _out_free(&topic)
        _out_free(&block)
        _release(items, count)


@cython.final
cdef class PreparedPublish:
    """A PUBLISH prepared for forwarding to many subscribers.

    A broker sends one incoming message to every matching subscriber, each with its own
    QoS (the lower of the message's and the subscription's), packet identifier, RETAIN flag
    (0 to established subscriptions [MQTT-3.3.1-9], 1 for retained messages sent because a
    subscription was just made [MQTT-3.3.1-8], as published under v5 Retain As Published),
    DUP flag (decided afresh [MQTT-3.3.1-3]) and, in MQTT 5.0, subscription identifiers.
    ``PreparedPublish(publish)`` validates and encodes the topic, the properties and the
    payload once; ``encode()`` then writes each subscriber's packet, copying those bytes
    once and re-validating nothing.

    Forwarded properties are the message's own minus the Topic Alias (an alias belongs to
    one connection, MQTT 5.0 §3.3.2.3.4) and minus any subscription identifiers (the
    subscriber's own are added by ``encode()``).  A level 3/4 subscriber gets no
    properties; a v5 subscriber of a level 3/4 message gets an empty property block.  The
    topic must be the real topic: resolve an incoming alias first.
    """

    cdef public object publish
    # The parts of _forwarding.forwarding_parts; handed to _forwarding.encode_forwarded
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
            if q >= 0:
                if v == 5:
                    if subscription_identifiers:
                        sub_ids = check_subscription_identifiers(subscription_identifiers)
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
        result = PyBytes_FromStringAndSize(NULL, total)
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


# ---------------------------------------------------------------------------------------
# Decoding.  Functions take (p, pos, end): p points at the start of the input, the packet
# body is p[pos:end], and nothing at or past `end` is ever read.


cdef object _decode_publish(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                            unsigned char b0, int version):
    cdef Py_ssize_t tstart, tend, i
    cdef unsigned int qos = (b0 >> 1) & 3
    cdef unsigned char classes = 0
    cdef Publish pkt
    cdef object properties = None
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
            properties, pos = _decode_properties(p, pos, end, 3, _PUBLISH)
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
    pkt.properties = properties
    return pkt


cdef tuple _decode_properties(const unsigned char* p, Py_ssize_t pos, Py_ssize_t end,
                              int ptype, object name):
    """The property block at ``pos``: (Properties or None, position after it).  The C
    reader takes valid blocks; anything it does not vouch for goes to the shared reader
    (on a copy of just the block), which raises exactly the error _pure raises."""
    cdef Py_ssize_t i = pos, length = 0, shift = 0, stop = end
    properties = _fast_properties(p, &i, end, ptype)
    if properties is not _BAIL:
        return properties, i
    while i < end and shift < 28:
        length |= (p[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not p[i - 1] & 0x80:
            if i + length <= end:
                stop = i + length
            break
    # A malformed length or block is copied whole up to `end`.
    block = PyBytes_FromStringAndSize(<const char*>p + pos, stop - pos)
    try:
        properties, used = decode_properties(block, 0, stop - pos, ptype, name)
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
    """A Variable Byte Integer in its shortest form (MQTT 5.0 §1.5.5), at most 4 bytes."""
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


cdef object _fast_properties(const unsigned char* p, Py_ssize_t* pos, Py_ssize_t end,
                             int ptype):
    """The property block at *pos (MQTT 5.0 §2.2.2) as the shared decode_properties reads
    it: None when empty, else a Properties; *pos moves past the block.  _BAIL for
    anything unusual: an unknown or misplaced identifier, a repeated one, a value out of
    range, a Response Topic with a wildcard, Authentication Data without a Method."""
    cdef Py_ssize_t i = pos[0], length, stop, value
    cdef int pid, kind
    cdef unsigned long long seen = 0, bit
    cdef unsigned int allowed_bit = 1u << ptype
    cdef dict d
    if not _read_varint(p, &i, end, &length):
        return _BAIL
    if length == 0:
        pos[0] = i
        return None
    stop = i + length
    if stop > end:
        return _BAIL
    props = PyType_GenericNew(_PROPERTIES, NULL, NULL)
    d = PyObject_GenericGetDict(props, NULL)
    while i < stop:
        pid = p[i]
        if pid >= 0x80:
            return _BAIL
        kind = _PROP_KIND[pid]
        if kind < 0 or not _PROP_ALLOWED[pid] & allowed_bit:
            return _BAIL
        # Every defined identifier is below 0x2B, so one 64-bit mask tracks repeats.  Only
        # User Properties repeat, and Subscription Identifiers in PUBLISH (§3.3.2.3.8).
        bit = 1ULL << pid
        if seen & bit and pid != 0x26 and not (pid == 0x0B and ptype == 3):
            return _BAIL
        seen |= bit
        i += 1
        name = _PROP_NAMES[pid]
        if kind <= 3:  # BYTE, U16, U32, VARINT
            if kind == 0:
                if i >= stop:
                    return _BAIL
                value = p[i]
                i += 1
            elif kind == 1:
                if stop - i < 2:
                    return _BAIL
                value = (p[i] << 8) | p[i + 1]
                i += 2
            elif kind == 2:
                if stop - i < 4:
                    return _BAIL
                value = ((<Py_ssize_t>p[i] << 24) | (p[i + 1] << 16) | (p[i + 2] << 8)
                         | p[i + 3])
                i += 4
            elif not _read_varint(p, &i, stop, &value):
                return _BAIL
            if (_PROP_FLAGS[pid] & 1 and value > 1) or (_PROP_FLAGS[pid] & 2 and value == 0):
                return _BAIL
            if kind == 3:
                ids = d.get(_SUBSCRIPTION_IDS)
                if ids is None:
                    d[_SUBSCRIPTION_IDS] = [value]
                else:
                    (<list>ids).append(value)
            else:
                d[name] = value
        elif kind == 4:  # UTF-8; a Response Topic is a topic name [MQTT-3.3.2-14]
            text = _read_str(p, &i, stop, 2 if pid == 0x08 else 0)
            if text is _BAIL:
                return _BAIL
            d[name] = text
        elif kind == 5:
            data = _read_bin(p, &i, stop)
            if data is _BAIL:
                return _BAIL
            d[name] = data
        else:  # a User Property: a string pair
            key = _read_str(p, &i, stop, 0)
            if key is _BAIL:
                return _BAIL
            text = _read_str(p, &i, stop, 0)
            if text is _BAIL:
                return _BAIL
            pairs = d.get(_USER_PROPERTIES)
            if pairs is None:
                d[_USER_PROPERTIES] = [(key, text)]
            else:
                (<list>pairs).append((key, text))
    if seen & (1ULL << 0x16) and not seen & (1ULL << 0x15):
        return _BAIL  # Authentication Data without a Method (§3.1.2.11.10)
    pos[0] = stop
    return props


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
        properties = _fast_properties(p, &pos, end, 1)
        if properties is _BAIL:
            return _BAIL
    client_id = _read_str(p, &pos, end, 0)
    if client_id is _BAIL:
        return _BAIL
    if flags & 0x04:
        if level == 5:
            will_props = _fast_properties(p, &pos, end, 16)  # 16: the Will Properties
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
        will.properties = will_props
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
    pkt.properties = properties
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
    cdef unsigned char b0 = p[pos], byte = 0
    cdef Py_ssize_t i = pos + 1, length = 0
    cdef int shift = 0
    if _BAD_FIRST[version - 3][b0]:
        raise first_byte_error(b0, version, pos)
    while True:
        if i >= n:
            return 0
        byte = p[i]
        i += 1
        length |= <Py_ssize_t>(byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift == 28:  # a fifth byte is coming (MQTT 5.0 §1.5.5)
            raise remaining_length_error(pos + 1, 5, version, PACKET_NAMES[b0 >> 4])
    # A last byte of 0 after continuation bytes adds nothing: not the shortest form.
    if byte == 0 and i - pos > 2:
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


@cython.final
cdef class StreamDecoder:
    """Decodes a byte stream (one direction of a connection) into packets, whatever the
    chunking.

    ``version`` is the protocol level; None makes a server-side decoder that learns it from
    the CONNECT that must come first [MQTT-3.1.0-1] (and refuses a second one
    [MQTT-3.1.0-2]).  ``version`` stays readable and writable: a client-side decoder can be
    told the level after the fact.  ``max_packet_size`` (whole packet, fixed header
    included) is enforced from the fixed header alone, before the body is buffered.

    Memory: at most one incomplete packet is kept between calls.  After an error the
    decoder is broken for good: every later ``feed()`` raises the same error, since a
    stream that lost its framing cannot be trusted again.  The error's ``offset`` is its
    position in the whole stream, and its ``packets`` the packets that the failing call
    completed before the bad bytes.

    Not thread-safe: use one decoder per connection and thread.
    """

    cdef public object version
    cdef public object max_packet_size
    cdef bint _learn
    cdef bytearray _buffer  # the incomplete packet carried over to the next feed()
    cdef Py_ssize_t _need  # its full size once its fixed header is known, else 0
    cdef long long _consumed  # stream offset of _buffer[0]
    cdef object _error
    cdef bint _feeding

    def __init__(self, version=None, *, max_packet_size=None):
        if version is not None:
            _check_version(version)
        if max_packet_size is not None and max_packet_size < 2:
            raise ValueError(f"max_packet_size must be at least 2, not {max_packet_size}")
        self.version = version
        self.max_packet_size = max_packet_size
        self._learn = version is None
        self._buffer = bytearray()
        self._need = 0
        self._consumed = 0
        self._error = None
        self._feeding = False

    def feed(self, chunk):
        """Add ``chunk`` to the stream; return the packets it completes, in order."""
        if self._error is not None:
            self._error.packets = []
            raise self._error
        if self._feeding:
            raise RuntimeError("StreamDecoder.feed() is not re-entrant")
        self._feeding = True
        try:
            return self._feed(chunk)
        finally:
            self._feeding = False

    cdef list _feed(self, object chunk):
        cdef _Input inp = _Input()
        cdef Py_ssize_t have, pos
        cdef list out
        inp.open(chunk)
        try:
            have = PyByteArray_GET_SIZE(self._buffer)
            if have:
                # Append (amortised O(1)) and parse nothing until the pending packet can
                # be complete: a large packet fed one byte at a time stays linear.
                if inp.n:
                    PyByteArray_Resize(self._buffer, have + inp.n)
                    memcpy(PyByteArray_AS_STRING(self._buffer) + have, inp.p, inp.n)
                have += inp.n
                if have < self._need:
                    return []
                out = []
                pos = self._parse(<const unsigned char*>PyByteArray_AS_STRING(self._buffer),
                                  have, out)
                if pos:  # compact: keep only the incomplete tail
                    memmove(PyByteArray_AS_STRING(self._buffer),
                            PyByteArray_AS_STRING(self._buffer) + pos, have - pos)
                    PyByteArray_Resize(self._buffer, have - pos)
            else:
                # Nothing pending: parse the chunk in place and keep only its tail.
                out = []
                pos = self._parse(inp.p, inp.n, out)
                if pos < inp.n:
                    PyByteArray_Resize(self._buffer, inp.n - pos)
                    memcpy(PyByteArray_AS_STRING(self._buffer), inp.p + pos, inp.n - pos)
            return out
        finally:
            inp.release()

    cdef Py_ssize_t _parse(self, const unsigned char* p, Py_ssize_t n, list out) except -1:
        """Decode the complete packets at the start of p[0:n] into ``out``; return the
        number of bytes they used."""
        cdef Py_ssize_t pos = 0, body, end, limit = -1
        cdef int version
        cdef unsigned char b0
        if self.max_packet_size is not None:
            limit = self.max_packet_size
        self._need = 0
        try:
            while pos < n:
                b0 = p[pos]
                # A server-side decoder wants CONNECT first and only once: the shared
                # builder words the error when (in C terms) the order is wrong.
                if self._learn and ((b0 >> 4 == 1) == (self.version is not None)):
                    raise connect_order_error(b0, pos, self.version)
                version = 5 if self.version is None else self.version
                if not _header(p, pos, n, version, &body, &end):
                    break
                if limit >= 0 and end - pos > limit:
                    raise too_large(PACKET_NAMES[b0 >> 4], pos, end - pos, limit)
                if end > n:
                    self._need = end - pos
                    break
                packet = _decode_body(p, pos, body, end, version)
                if self.version is None:
                    self.version = packet.protocol_version
                out.append(packet)
                pos = end
        except MQTTWireError as exc:
            _shift(exc, self._consumed)
            exc.packets = out
            self._error = exc
            self._buffer = bytearray()
            raise
        self._consumed += pos
        return pos

    @property
    def buffered(self):
        """How many bytes of an incomplete packet are held."""
        return len(self._buffer)

    def __repr__(self):
        state = "failed" if self._error is not None else f"{len(self._buffer)} bytes buffered"
        return (f"StreamDecoder(version={self.version!r}, "
                f"max_packet_size={self.max_packet_size!r}, {state})")
