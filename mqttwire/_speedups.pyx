# cython: language_level=3, freethreading_compatible=True
"""The Cython implementation of the mqttwire codec.

Same names, signatures and behaviour as ``mqttwire._pure`` (whose docstrings document
both).  The hot path works on ``const unsigned char *``: the fixed header, the Remaining
Length, the topic name, PUBLISH, the four acknowledgements and the StreamDecoder's framing
loop.  Property blocks, CONNECT, SUBSCRIBE, SUBACK, UNSUBSCRIBE and UNSUBACK are decoded in
C too, and PreparedPublish, property blocks, CONNECT and SUBSCRIBE encoded in C.  The rest
is shared Python: CONNACK, DISCONNECT and AUTH (``reference``), and every error message
(``_codec.datatypes`` builders).  The C readers and writers take valid packets only and hand
anything else to the shared reference code (``reference``, ``_codec.properties``, ``_codec.publish``,
``_codec.forwarding``, ``_codec.framing``), which raises the error; so the two implementations cannot
word or order an error differently.  This module never imports ``_pure``: what the twins
share lives in those modules, under public names, and is the contract between them.

A decoded MQTT 5.0 property block is checked in full in C and kept as one copy of its
bytes: PUBLISH, CONNECT and Will hold it until ``properties`` is read, the other packets in
a ``_DecodedProperties`` that builds its values on first access.  Encoding and
PreparedPublish copy such a block as it is (``_codec.properties.wire_block`` says when they may).

Every pointer read is preceded by an explicit length check (pointer indexing is never
bounds-checked, whatever the directives).

This file holds the imports and the public names; the code is in the include files named
at the bottom (tables, data types, property blocks, packet classes, encoding, decoding,
StreamDecoder), one concern each, as ``_pure`` re-exports ``_codec.packets``, ``_codec.encode``, ``_codec.decode`` and
``_codec.stream``.  What those files share is declared in ``_speedups.pxd``; the C API
declarations are in ``_cdefs.pxd``, shared with ``_topics_c.pyx`` and ``capture/loop_c.pyx``.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.object cimport PyObject, PyObject_GenericGetAttr, PyTypeObject, Py_TYPE
from cpython.long cimport PyLong_AsSsize_t
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_FromOrdinal
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove

from ._cdefs cimport (
    MQTTWIRE_MAX_REMAINING_LENGTH,
    READONLY,
    T_OBJECT_EX,
    PyBytes_FromStringAndSize,
    PyDescr_NewMember,
    PyMemberDef,
    Py_None,
    PY_VERSION_HEX,
    Py_SET_TYPE,
    PyType_Modified,
    uint_in_range as _uint,
    PyObject_GenericSetAttr,
    PyType_GenericNew,
    generic_setattro,
    set_setattro,
    setattrofunc,
    type_dict,
    PyUnicode_AsUTF8AndSize,
    PyUnicode_DATA,
    PyUnicode_DecodeUTF8,
    PyUnicode_GET_LENGTH,
    PyUnicode_IS_COMPACT_ASCII,
    PyUnicode_New,
    object_slot_offset,
    read_varint,
    slot_get,
    slot_put,
)

import types

from ._codec import reference
from ._constants import (
    MAX_REMAINING_LENGTH,
    PACKET_NAMES,
    REASON_CODES,
    V3_SUBACK_CODES,
    PacketType,
)
from ._codec.docstrings import PREPARED_PUBLISH as _PREPARED_PUBLISH_DOC
from ._codec.docstrings import STREAM_DECODER as _STREAM_DECODER_DOC
from ._errors import IncompletePacket, MalformedPacket, MQTTWireError, ProtocolError, rule
from ._codec.fields import (
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
from ._topics_c import (
    Matches,
    TopicTree,
    parse_shared,
    topic_matches,
    validate_topic_filter,
    validate_topic_name,
)
from ._codec.forwarding import encode_forwarded, forwarding_parts
from ._codec.framing import incomplete
from ._codec.properties import (
    BOOLEAN_PROPERTIES,
    NONZERO_PROPERTIES,
    PROPERTY_TABLE,
    Properties,
    decode_properties,
)
from ._codec.publish import encode_ack, encode_publish
from ._codec.datatypes import (
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

__all__ = [
    "Auth", "ConnAck", "Connect", "Disconnect", "PingReq", "PingResp", "PubAck", "PubComp",
    "Publish", "PubRec", "PubRel", "SubAck", "Subscribe", "Subscription", "UnsubAck",
    "Unsubscribe", "Will", "StreamDecoder", "PreparedPublish", "decode", "decode_from",
    "encode", "Matches", "TopicTree", "parse_shared", "topic_matches", "validate_topic_filter",
    "validate_topic_name",
]


# The module's code, by concern.  `include` pastes each file in here, so they compile into
# this one extension: a call from one file to another stays a direct C call (a split into
# separate extension modules would turn them into calls through Python or a capsule).  Each
# file uses only the names it defines, the names imported above and the names declared in
# _speedups.pxd (which Cython reads before this file): the C tables, the cdef functions one
# file calls in another, the packet classes' C fields.  tests/codec/test_includes.py enforces it.
include "_codec/tables_c.pxi"  # C tables from the shared Python ones; version, int helpers
include "_codec/datatypes_c.pxi"  # the spec's data types read in C (twin of _codec.datatypes's readers)
include "_codec/properties_c.pxi"  # property blocks, lazily built Properties (_codec.properties)
include "_codec/packets_c.pxi"  # the 17 packet classes
include "_codec/encode_c.pxi"  # C encoders, PreparedPublish, encode()
include "_codec/encode_method_c.pxi"  # the packets' encode() as C methods
include "_codec/decode_c.pxi"  # C decoders, the fixed header, decode(), decode_from()
include "_codec/stream_c.pxi"  # StreamDecoder
