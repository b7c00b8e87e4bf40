# Included by _speedups.pyx (one extension module); the names other files use are declared
# in _speedups.pxd.
#
# The packet classes, twins of _codec/packets.py.  Each class's C fields (its struct) are
# declared in _speedups.pxd, which the decoders and encoders use; its methods are here.
# Their encode() methods call the C encoders of _codec/encode_c.pxi, declared there too.

# ---------------------------------------------------------------------------------------
# Packet classes: twins of _pure's.  cdef classes, so that decoding fills C-level slots
# directly (no instance dict, no attribute lookups) and packets can sit on a freelist.


# encode() is a plain method (binding=False, a method_descriptor), not one of Cython's
# function objects (binding=True, the module's default): CPython's specialising interpreter
# turns a call of a method_descriptor into one direct C call (CALL_METHOD_DESCRIPTOR_FAST_
# WITH_KEYWORDS), and calls a Cython function object the generic way.  That call checks
# the object's exact type, so the four acknowledgements each define their own encode()
# (a subclass calling _Ack's would fall back to the generic call every time).  PUBLISH,
# the acknowledgements, SUBSCRIBE and CONNECT then get a C function in its place, which
# takes encode(version) and encode() without Cython's argument parsing and hands any other
# call to the method defined here (encode_method_c.pxi, MQTTWIRE_ENCODE_METHOD).  The first
# line of the docstring, "encode(self, version=5)" and "--", is the signature that inspect
# reads (__text_signature__); CPython shows the docstring without it, so __doc__ is None as
# before (benchmarks/peers.md, "encode() as a plain method").
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

    def __init__(self, topic, payload=b"", *, qos=0, retain=False, properties=None):
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self._properties = properties

    # A decoded packet keeps its property block (checked at decode time) in _raw and
    # makes the Properties, its values built, on the first read of ``properties``.
    @property
    def properties(self):
        if self._raw is not None:
            self._properties = _built_properties(self._raw, 16)
            self._raw = None
        return self._properties

    @properties.setter
    def properties(self, value):
        self._properties = value
        self._raw = None

    @properties.deleter
    def properties(self):  # as `del` on a public cdef attribute: None
        self._properties = None
        self._raw = None

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
        self._properties = properties

    # A decoded packet keeps its property block (checked at decode time) in _raw and
    # makes the Properties, its values built, on the first read of ``properties``.
    @property
    def properties(self):
        if self._raw is not None:
            self._properties = _built_properties(self._raw, 1)
            self._raw = None
        return self._properties

    @properties.setter
    def properties(self, value):
        self._properties = value
        self._raw = None

    @properties.deleter
    def properties(self):  # as `del` on a public cdef attribute: None
        self._properties = None
        self._raw = None

    @property
    def protocol_name(self):
        return "MQIsdp" if self.protocol_version == 3 else "MQTT"

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return _encode_connect(self)

    def __eq__(self, other):
        return fields_equal(self, other, CONNECT)

    def __repr__(self):
        return fields_repr(self, "Connect", CONNECT)


@cython.final
cdef class ConnAck(_PacketBase):
    """CONNACK (MQTT 3.1.1 §3.2, MQTT 5.0 §3.2).  At levels 3 and 4, ``reason_code`` is the
    connect return code (0-5)."""

    packet_type = PacketType.CONNACK

    def __init__(self, *, session_present=False, reason_code=0, properties=None):
        self.session_present = session_present
        self.reason_code = reason_code
        self.properties = properties

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return reference.encode_connack(self, version)

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

    packet_type = PacketType.PUBLISH

    def __init__(self, topic, payload=b"", *, qos=0, retain=False, dup=False,
                 packet_id=None, properties=None):
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self._properties = properties

    # A decoded packet keeps its property block (checked at decode time) in _raw and
    # makes the Properties, its values built, on the first read of ``properties``.
    @property
    def properties(self):
        if self._raw is not None:
            self._properties = _built_properties(self._raw, 3)
            self._raw = None
        return self._properties

    @properties.setter
    def properties(self, value):
        self._properties = value
        self._raw = None

    @properties.deleter
    def properties(self):  # as `del` on a public cdef attribute: None
        self._properties = None
        self._raw = None

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
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

    def __init__(self, packet_id, *, reason_code=0, properties=None):
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties

    def encode(self, version=5):  # each of the four defines its own: see PubAck
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

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return _encode_ack(self, version)


@cython.final
cdef class PubRec(_Ack):
    """PUBREC: the first answer to a QoS 2 PUBLISH (MQTT 5.0 §3.5)."""

    packet_type = PacketType.PUBREC

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return _encode_ack(self, version)


@cython.final
cdef class PubRel(_Ack):
    """PUBREL: the answer to PUBREC; its first byte is 0x62 (MQTT 5.0 §3.6)."""

    packet_type = PacketType.PUBREL

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return _encode_ack(self, version)


@cython.final
cdef class PubComp(_Ack):
    """PUBCOMP: the answer to PUBREL, closing a QoS 2 exchange (MQTT 5.0 §3.7)."""

    packet_type = PacketType.PUBCOMP

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return _encode_ack(self, version)


@cython.final
@cython.no_gc  # as Publish: its fields are a string, ints and bools
@cython.freelist(16)
cdef class Subscription:
    """One topic filter of a SUBSCRIBE with its options (MQTT 5.0 §3.8.3.1); before MQTT 5.0
    only ``qos`` exists."""

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

    packet_type = PacketType.SUBSCRIBE

    def __init__(self, packet_id, subscriptions, *, properties=None):
        self.packet_id = packet_id
        self.subscriptions = list(subscriptions)
        self.properties = properties

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return _encode_subscribe(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, SUBSCRIBE)

    def __repr__(self):
        return fields_repr(self, "Subscribe", SUBSCRIBE)


@cython.final
cdef class SubAck(_PacketBase):
    """SUBACK (MQTT 5.0 §3.9): one reason code (before 5.0: return code) per topic filter."""

    packet_type = PacketType.SUBACK

    def __init__(self, packet_id, reason_codes, *, properties=None):
        self.packet_id = packet_id
        self.reason_codes = list(reason_codes)
        self.properties = properties

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return reference.encode_suback(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, SUBACK)

    def __repr__(self):
        return fields_repr(self, "SubAck", SUBACK)


@cython.final
cdef class Unsubscribe(_PacketBase):
    """UNSUBSCRIBE (MQTT 5.0 §3.10): a packet identifier and one or more topic filters."""

    packet_type = PacketType.UNSUBSCRIBE

    def __init__(self, packet_id, topic_filters, *, properties=None):
        self.packet_id = packet_id
        self.topic_filters = list(topic_filters)
        self.properties = properties

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return reference.encode_unsubscribe(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, UNSUBSCRIBE)

    def __repr__(self):
        return fields_repr(self, "Unsubscribe", UNSUBSCRIBE)


@cython.final
cdef class UnsubAck(_PacketBase):
    """UNSUBACK (MQTT 5.0 §3.11): reason codes exist only in MQTT 5.0."""

    packet_type = PacketType.UNSUBACK

    def __init__(self, packet_id, reason_codes=(), *, properties=None):
        self.packet_id = packet_id
        self.reason_codes = list(reason_codes)
        self.properties = properties

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return reference.encode_unsuback(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, UNSUBACK)

    def __repr__(self):
        return fields_repr(self, "UnsubAck", UNSUBACK)


@cython.final
cdef class PingReq(_PacketBase):
    """PINGREQ (MQTT 5.0 §3.12): two bytes, C0 00."""

    packet_type = PacketType.PINGREQ

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
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

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        _check_version(version)
        return b"\xd0\x00"

    def __eq__(self, other):
        return fields_equal(self, other, NO_FIELDS)

    def __repr__(self):
        return fields_repr(self, "PingResp", NO_FIELDS)


@cython.final
cdef class Disconnect(_PacketBase):
    """DISCONNECT (MQTT 5.0 §3.14); before MQTT 5.0 it carries nothing."""

    packet_type = PacketType.DISCONNECT

    def __init__(self, *, reason_code=0, properties=None):
        self.reason_code = reason_code
        self.properties = properties

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return reference.encode_disconnect(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, DISCONNECT)

    def __repr__(self):
        return fields_repr(self, "Disconnect", DISCONNECT)


@cython.final
cdef class Auth(_PacketBase):
    """AUTH (MQTT 5.0 §3.15), for extended authentication; MQTT 5.0 only."""

    packet_type = PacketType.AUTH

    def __init__(self, *, reason_code=0, properties=None):
        self.reason_code = reason_code
        self.properties = properties

    @cython.binding(False)
    def encode(self, version=5):
        "encode(self, version=5)\n--\n\n"
        return reference.encode_auth(self, version)

    def __eq__(self, other):
        return fields_equal(self, other, AUTH)

    def __repr__(self):
        return fields_repr(self, "Auth", AUTH)


# ---------------------------------------------------------------------------------------
# Field reads at the speed of __slots__.  Cython gives each `cdef public object` field a
# getset descriptor, whose getter CPython calls as a C function on every read (about 190
# instructions on 3.11); a member descriptor of type T_OBJECT_EX, what __slots__ makes, is
# read inline by CPython's specialising interpreter (about 45).  So each field below gets
# a read-only member descriptor over its C slot in place of its getset, and the class's
# writes go through _set_field, which, like Cython's setter, stores None for a deletion:
# the C code never finds NULL in a field.  (Read-only, so that no one can store NULL
# through the descriptor itself.)  Publish's, Connect's and Will's `properties` stay
# properties: they build a decoded block's values on first read.

# Each class's fields, from its shared field list (_codec.fields); _Ack's serve its four
# subclasses.  Not the `properties` that a class builds on first read.
cdef dict _FIELDS = {
    cls: tuple(name for name, _ in fields
               if not (name == "properties" and cls in (Publish, Connect, Will)))
    for cls, fields in ((Will, WILL), (Connect, CONNECT), (ConnAck, CONNACK),
                        (Publish, PUBLISH), (_Ack, ACK), (Subscription, SUBSCRIPTION),
                        (Subscribe, SUBSCRIBE), (SubAck, SUBACK), (Unsubscribe, UNSUBSCRIBE),
                        (UnsubAck, UNSUBACK), (Disconnect, DISCONNECT), (Auth, AUTH))
}
# Per class that has instances: field name -> offset of its slot.
cdef dict _SLOTS = {}
cdef list _NAMES = []  # the member entries' names (bytes), alive as long as the module


cdef int _set_field(PyObject* obj, PyObject* name, PyObject* value) except -1:
    """tp_setattro of the classes in _FIELDS: a field's slot directly, anything else the
    generic way (which raises for a name the class does not have)."""
    # borrowed references, no exception: this runs on every write of an attribute
    cdef PyObject* slots = PyDict_GetItem(_SLOTS, <object>Py_TYPE(<object>obj))
    cdef PyObject* offset = NULL
    if slots != NULL:
        offset = PyDict_GetItem(<object>slots, <object>name)
    if offset == NULL:
        return generic_setattro(obj, name, value)
    cdef PyObject** slot = <PyObject**>(<char*>obj + PyLong_AsSsize_t(<object>offset))
    cdef PyObject* old = slot[0]
    if value == NULL:
        value = Py_None
    Py_INCREF(<object>value)
    slot[0] = value
    Py_XDECREF(old)  # after the store: a finaliser that runs here sees the new value
    return 0


cdef Py_ssize_t _field_offset(type cls, str name) except -1:
    """Where ``cls``'s instances hold the field ``name``: a sentinel is set through the
    field's getset and found among the instance's pointers."""
    cdef object inst = cls.__new__(cls)
    cdef object sentinel = object()
    setattr(inst, name, sentinel)
    cdef char* base = <char*><PyObject*>inst
    cdef Py_ssize_t offset = sizeof(PyObject)
    while offset + <Py_ssize_t>sizeof(PyObject*) <= (<PyTypeObject*>cls).tp_basicsize:
        if (<PyObject**>(base + offset))[0] == <PyObject*>sentinel:
            setattr(inst, name, None)
            return offset
        offset += sizeof(PyObject*)
    raise ImportError(f"{cls.__name__}.{name}: its slot was not found")


cdef void _fields_as_members() except *:
    cdef Py_ssize_t n = sum(len(names) for names in _FIELDS.values())
    # The entries live as long as the module (the descriptors point at them).
    cdef PyMemberDef* member = <PyMemberDef*>malloc(n * sizeof(PyMemberDef))
    if member == NULL:
        raise MemoryError()
    for cls, names in _FIELDS.items():
        concrete = cls.__subclasses__() or [cls]  # _Ack's four, else the class itself
        slots = {}
        for name in names:
            _NAMES.append(name.encode())
            member.name = _NAMES[-1]
            member.type = T_OBJECT_EX
            member.offset = _field_offset(concrete[0], name)
            member.flags = READONLY
            member.doc = NULL
            (<dict>type_dict(<PyTypeObject*>cls))[name] = PyDescr_NewMember(
                <PyTypeObject*>cls, member)
            slots[name] = member.offset
            member += 1
        for klass in concrete:
            _SLOTS[klass] = slots
            set_setattro(<PyTypeObject*>klass, <setattrofunc>_set_field)
            PyType_Modified(<PyTypeObject*>klass)
        PyType_Modified(<PyTypeObject*>cls)


_fields_as_members()


# The classes the shared cold decoders build packets with.
_NS = types.SimpleNamespace(
    Connect=Connect, Will=Will, ConnAck=ConnAck, Subscribe=Subscribe,
    Subscription=Subscription, SubAck=SubAck, Unsubscribe=Unsubscribe, UnsubAck=UnsubAck,
    Disconnect=Disconnect, Auth=Auth,
)
