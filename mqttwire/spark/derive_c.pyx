"""The common records of :class:`mqttwire.spark.derive.CaptureTables`, in C: the compiled
half of derive.py, which holds the reference (``CaptureTables.add``) and decides when
this module is used.

Most records of a capture are PUBLISH and PUBACK packets of connections that are already
open, and for each the reference reads a dozen attributes and updates a few dicts: the
derived tables were the largest step of a decoding task (benchmarks/history/capture.md).
:meth:`Deriver.add_many` takes such a record itself: it reads the record's fields and the
connection's state at their slot offsets (as the member descriptors do, without the
attribute look-up) and makes or completes the messages row with the dict C API, exactly
as ``add`` would.  Every other record goes to ``CaptureTables.add``, in its place in the
order: a stream end, a gap or an error, a connection's first record or first time, a
changed client id or level, a packet other than PUBLISH and PUBACK, a PUBLISH whose
exchange is a retransmission (DUP), that reuses a pending packet id or that changes the
retained store, a PUBACK that does not simply complete the pending exchange of its
packet id, and any record of a connection with steps held for a record still to come
(CaptureTables._step: the two directions out of step).  Before it changes anything, a
record is checked to be one it takes, so handing it over is always
possible.  tests/spark/test_derive_compiled.py compares the rows both ways, and
tests/spark/test_derive.py runs its cases both ways.
"""

from cpython.dict cimport PyDict_Copy, PyDict_GetItemWithError
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_XDECREF, Py_XINCREF
from libc.string cimport memcpy, memset
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New

from .._cdefs cimport Py_False, Py_None, Py_True, object_slot_offset
from .._cdefs cimport slot_get as _get, slot_put as _put

cimport cython

from ..capture.shared_slots import RECORD_FIELDS

__all__ = ["CONN_SLOTS", "RECORD_SLOTS", "TAKE_CAPSULE", "Deriver"]

#: The name of the capsule of :meth:`Deriver.capsule` (the compiled capture loop's
#: arrow_c.TAKE_CAPSULE).
TAKE_CAPSULE = b"mqttwire.spark.derive_c.take"
cdef const char* _TAKE_NAME = "mqttwire.spark.derive_c.take"

# PacketColumns' row function (mqttwire.capture.arrow_c.row_capsule): a messages row
# written into Arrow columns from an array of its values, in the columns' order.
ctypedef int (*_row_fn)(object columns, PyObject** v) except -1
cdef const char* _ROW_NAME = "mqttwire.capture.arrow_c.row"

cdef extern from "Python.h":
    void* PyCapsule_GetPointer(object capsule, const char* name) except? NULL

#: The messages columns that a PUBLISH sets (CaptureTables._publish; the others are its
#: connection's template's), then those that its PUBACK sets (CaptureTables._done).
_PUBLISH_KEYS = ("direction", "ts", "frame", "stream_offset", "topic", "topic_from_alias",
                 "qos", "retain", "dup", "packet_id", "payload_length", "payload",
                 "status", "puback_ts", "ack_reason_code", "completed_ts", "latency_ms")
cdef object _COMPLETE = "complete"
cdef object _FAILED = "failed"
cdef object _INCOMPLETE = "incomplete"

# The templates' values by column (message_columns): a direct-mapped cache keyed by the
# template dict (a strong reference, so that the values it points at stay alive; a
# template is never changed once made: CaptureTables._identity makes a new one).
ctypedef struct _Template:
    PyObject* template
    PyObject* values[64]

cdef enum:
    TEMPLATES = 64


@cython.final
@cython.no_gc  # holds no cycle (a template dict, ints, str, bytes): not for the collector
cdef class _Held:
    """A QoS 1 exchange that the compiled path took, pending its PUBACK: its PUBLISH's
    values and its connection's messages template, instead of the row dict that
    CaptureTables._publish makes.  Made that dict (:meth:`row`) before any Python code
    may look at the connection's pending exchanges (Deriver._materialize)."""

    cdef object template, direction, ts, frame, offset, topic, alias, qos, retain, dup
    cdef object packet_id, payload_length, payload

    cdef dict row(self):
        cdef dict message = PyDict_Copy(self.template)
        message["direction"] = self.direction
        message["ts"] = self.ts
        message["frame"] = self.frame
        message["stream_offset"] = self.offset
        message["topic"] = self.topic
        message["topic_from_alias"] = self.alias
        message["qos"] = self.qos
        message["retain"] = self.retain
        message["dup"] = self.dup
        message["packet_id"] = self.packet_id
        message["payload_length"] = self.payload_length
        message["payload"] = self.payload
        message["status"] = _INCOMPLETE
        return message

# A record's fields as an array of (borrowed) pointers, in RECORD_FIELDS order: as the
# compiled capture loop holds them before it makes a Record, and as add_many reads them
# out of a Record's slots.
cdef enum:
    MAX_FIELDS = 64

#: The record fields read here (all of them slots of the record class).
RECORD_SLOTS = ("kind", "ts", "frame", "connection_id", "direction", "length", "client_id",
                "protocol_version", "version_source", "packet_type", "qos", "retain", "dup",
                "packet_id", "topic", "topic_from_alias", "stream_offset", "payload_length",
                "payload", "reason_code")
#: The connection slots read and written here (see derive._Conn).
CONN_SLOTS = ("bytes_c2s", "bytes_s2c", "client_id", "frame_c2s", "frame_s2c", "held",
              "last_ts", "message", "older", "packets_c2s", "packets_s2c", "pending",
              "source", "version")

# A PUBACK or PUBREC reason code from 0x80 up is a failure (MQTT 5.0 §2.4): derive.REJECTED.
cdef int REJECTED = 0x80


cdef Py_ssize_t _offset(type cls, str name) except -1:
    """The offset of the writable object slot ``name`` in instances of ``cls``."""
    cdef Py_ssize_t offset = object_slot_offset(cls.__dict__.get(name), True)
    if offset == -1:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    if offset == -2:
        raise TypeError(f"{cls.__name__}.{name} is not a writable object slot")
    return offset


cdef inline bint _is(PyObject* value, str text) noexcept:
    """Whether ``value`` is the str ``text`` (the same object, or an equal str)."""
    return value == <PyObject*>text or (value != NULL and type(<object>value) is str
                                        and <str>value == text)


@cython.final
cdef class Deriver:
    """The compiled path of ``CaptureTables.add_many`` for records of the class
    ``record_cls`` and connection state of the class ``conn_cls`` (slots: RECORD_SLOTS,
    CONN_SLOTS); a TypeError when a slot is missing or not a writable object slot."""

    cdef type record_cls
    cdef type conn_cls
    # record fields: their indices in a fields array (RECORD_FIELDS order)
    cdef Py_ssize_t r_kind, r_ts, r_frame, r_conn, r_direction, r_length, r_client_id, r_version
    cdef Py_ssize_t r_source, r_ptype, r_qos, r_retain, r_dup, r_packet_id, r_topic
    cdef Py_ssize_t r_alias, r_offset, r_payload_length, r_payload, r_code
    # where each of RECORD_SLOTS is: its index in a fields array, its record slot offset
    cdef Py_ssize_t index[32]
    cdef Py_ssize_t slot[32]
    # messages columns (message_columns): where its rows go instead of dicts
    cdef object mcols
    cdef _row_fn mrow
    cdef tuple mkeys
    cdef Py_ssize_t nm
    cdef Py_ssize_t m_at[17]  # the index of each of _PUBLISH_KEYS among mkeys
    cdef _Template* templates
    # connection state
    cdef Py_ssize_t c_bytes_c2s, c_bytes_s2c, c_client_id, c_frame_c2s, c_frame_s2c
    cdef Py_ssize_t c_held, c_last_ts, c_message, c_older, c_packets_c2s, c_packets_s2c
    cdef Py_ssize_t c_pending, c_source, c_version
    # The capsule's function: the tables it was last given, their _conns and messages
    # (CaptureTables makes both once and never rebinds them).
    cdef object seen_tables
    cdef dict seen_conns
    cdef list seen_messages

    def __init__(self, type record_cls, type conn_cls):
        cdef Py_ssize_t i
        self.record_cls = record_cls
        self.conn_cls = conn_cls
        if len(RECORD_FIELDS) > MAX_FIELDS or any(name not in RECORD_FIELDS
                                                  for name in RECORD_SLOTS):
            raise TypeError("RECORD_SLOTS are not among shared_slots.RECORD_FIELDS")
        for i, name in enumerate(RECORD_SLOTS):
            self.index[i] = RECORD_FIELDS.index(name)
            self.slot[i] = _offset(record_cls, name)
        (self.r_kind, self.r_ts, self.r_frame, self.r_conn, self.r_direction, self.r_length,
         self.r_client_id, self.r_version, self.r_source, self.r_ptype, self.r_qos,
         self.r_retain, self.r_dup, self.r_packet_id, self.r_topic, self.r_alias,
         self.r_offset, self.r_payload_length, self.r_payload, self.r_code) = [
            RECORD_FIELDS.index(name) for name in RECORD_SLOTS]
        (self.c_bytes_c2s, self.c_bytes_s2c, self.c_client_id, self.c_frame_c2s,
         self.c_frame_s2c, self.c_held, self.c_last_ts, self.c_message, self.c_older,
         self.c_packets_c2s, self.c_packets_s2c, self.c_pending, self.c_source,
         self.c_version) = [_offset(conn_cls, name) for name in CONN_SLOTS]

    def __repr__(self):
        return f"<Deriver of {self.record_cls.__name__} records>"

    def add_many(self, tables, list records):
        """``tables.add(rec)`` for each record of ``records`` in order, the common ones
        done here (module docstring)."""
        cdef dict conns = tables._conns
        cdef list messages = tables.messages
        cdef PyObject* f[MAX_FIELDS]
        cdef Py_ssize_t i
        add = tables.add
        for rec in records:
            if type(rec) is not self.record_cls:
                add(rec)
                continue
            for i in range(len(RECORD_SLOTS)):
                f[self.index[i]] = _get(rec, self.slot[i])
            if not self._take(conns, messages, f):
                add(rec)

    def message_columns(self, columns, capsule, keys):
        """Write the messages rows into ``columns`` (mqttwire.capture.arrow_c.
        PacketColumns, whose columns are ``keys`` in order; ``capsule``: arrow_c.
        row_capsule()) instead of leaving dicts in ``tables.messages``: a QoS 0 PUBLISH
        taken here is written at once, without a dict; the rows of ``tables.messages``
        (CaptureTables' own, and the exchanges completed here) are moved into the
        columns before it, and by :meth:`drain`, so the order stays theirs."""
        keys = tuple(keys)
        if len(keys) > MAX_FIELDS or any(k not in keys for k in _PUBLISH_KEYS):
            raise ValueError("not the messages columns")
        self.mrow = <_row_fn>PyCapsule_GetPointer(capsule, _ROW_NAME)
        self.mcols = columns
        self.mkeys = keys
        self.nm = len(keys)
        for i, name in enumerate(_PUBLISH_KEYS):
            self.m_at[i] = keys.index(name)
        if self.templates == NULL:
            self.templates = <_Template*>PyMem_Malloc(sizeof(_Template) * TEMPLATES)
            if self.templates == NULL:
                raise MemoryError()
            memset(self.templates, 0, sizeof(_Template) * TEMPLATES)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.templates != NULL:
            for i in range(TEMPLATES):
                Py_XDECREF(self.templates[i].template)
            PyMem_Free(self.templates)

    cdef PyObject** _template(self, dict template) except NULL:
        """The values of ``template`` by column (the cache's entry)."""
        cdef _Template* t = &self.templates[(<size_t><PyObject*>template >> 6) % TEMPLATES]
        cdef Py_ssize_t i
        if t.template != <PyObject*>template:
            Py_XDECREF(t.template)
            t.template = NULL
            for i in range(self.nm):
                t.values[i] = PyDict_GetItemWithError(
                    template, <object>PyTuple_GET_ITEM(self.mkeys, i))
                if t.values[i] == NULL:
                    raise KeyError(self.mkeys[i])
            Py_XINCREF(<PyObject*>template)
            t.template = <PyObject*>template
        return t.values

    def materialize_all(self, tables):
        """Make the pending exchanges held here rows dicts, in every connection (before
        CaptureTables.finish)."""
        for conn in tables._conns.values():
            if type(conn) is self.conn_cls:
                self._materialize_conn(conn)

    cdef int _materialize(self, dict conns, PyObject** f) except -1:
        """Before CaptureTables.add takes the record of fields ``f``: the pending
        exchanges of its connection held here become the row dicts it expects."""
        cdef PyObject* conn_id = f[self.r_conn]
        cdef PyObject* found
        if conn_id == NULL or conn_id == Py_None:
            return 0
        found = PyDict_GetItemWithError(conns, <object>conn_id)
        if found != NULL and type(<object>found) is self.conn_cls:
            self._materialize_conn(<object>found)
        return 0

    cdef int _materialize_conn(self, object conn) except -1:
        pending = <object>_get(conn, self.c_pending)
        if type(pending) is not dict:
            return 0
        for key, value in list((<dict>pending).items()):
            if type(value) is _Held:
                (<dict>pending)[key] = (<_Held>value).row()  # same key: same place
        return 0

    def drain(self, tables):
        """Move the rows of ``tables.messages`` into the messages columns."""
        if self.mcols is not None:
            self._drain(tables.messages)

    cdef int _drain(self, list messages) except -1:
        cdef PyObject* v[MAX_FIELDS]
        cdef Py_ssize_t i, j
        for j in range(PyList_GET_SIZE(messages)):
            row = <object>PyList_GET_ITEM(messages, j)
            if type(row) is not dict:
                raise TypeError("a messages row is a dict")
            for i in range(self.nm):
                v[i] = PyDict_GetItemWithError(row, <object>PyTuple_GET_ITEM(self.mkeys, i))
                if v[i] == NULL:
                    raise KeyError(self.mkeys[i])
            self.mrow(self.mcols, v)
        del messages[:]
        return 0

    cdef int _write_publish(self, dict template, PyObject** f, object direction, object ts,
                            object qos, object frame) except -1:
        """The messages row of a QoS 0 PUBLISH, into the columns: the template's values
        with the PUBLISH's (as CaptureTables._publish makes the dict)."""
        cdef PyObject* v[MAX_FIELDS]
        memcpy(v, self._template(template), self.nm * sizeof(PyObject*))
        v[self.m_at[0]] = <PyObject*>direction
        v[self.m_at[1]] = <PyObject*>ts
        v[self.m_at[2]] = <PyObject*>frame
        v[self.m_at[3]] = f[self.r_offset]
        v[self.m_at[4]] = f[self.r_topic]
        v[self.m_at[5]] = f[self.r_alias]
        v[self.m_at[6]] = <PyObject*>qos
        v[self.m_at[7]] = f[self.r_retain]
        v[self.m_at[8]] = f[self.r_dup]
        v[self.m_at[9]] = f[self.r_packet_id]
        v[self.m_at[10]] = f[self.r_payload_length]
        v[self.m_at[11]] = f[self.r_payload]
        self.mrow(self.mcols, v)
        return 0

    def capsule(self):
        """The C function that takes one record's fields (an array of RECORD_FIELDS
        pointers) as :meth:`add_many` takes a record: ``int take(deriver, tables,
        PyObject** fields)``, 1 if taken, 0 if ``tables.add`` must take the record;
        in a capsule named TAKE_CAPSULE, for the compiled capture loop."""
        return PyCapsule_New(<void*>_take_fields, _TAKE_NAME, NULL)

    cdef bint _take(self, dict conns, list messages, PyObject** f) except -1:
        """Take the record of fields ``f`` if it is a common one (returns True), else
        change nothing and return False."""
        cdef PyObject* kind = f[self.r_kind]
        if not _is(kind, "packet"):
            return False
        cdef PyObject* conn_id = f[self.r_conn]
        if conn_id == NULL or conn_id == Py_None:
            return False
        cdef PyObject* found = PyDict_GetItemWithError(conns, <object>conn_id)
        if found == NULL or type(<object>found) is not self.conn_cls:
            return False
        conn = <object>found
        # The connection's identity as the last record left it: else CaptureTables.add
        # updates it (_identity).
        if (f[self.r_client_id] != _get(conn, self.c_client_id)
                or f[self.r_version] != _get(conn, self.c_version)
                or f[self.r_source] != _get(conn, self.c_source)):
            return False
        cdef PyObject* ts = f[self.r_ts]
        if ts == NULL or (ts != Py_None and _get(conn, self.c_last_ts) == Py_None):
            return False  # the connection's first time: its row's first_ts
        cdef PyObject* direction = f[self.r_direction]
        # The same str objects record after record: identity first, for both names.
        cdef bint c2s = direction == <PyObject*>"c2s" or (
            direction != <PyObject*>"s2c" and _is(direction, "c2s"))
        if not c2s and not _is(direction, "s2c"):
            return False
        cdef PyObject* ptype = f[self.r_ptype]
        cdef bint publish = ptype == <PyObject*>"PUBLISH" or (
            ptype != <PyObject*>"PUBACK" and _is(ptype, "PUBLISH"))
        cdef PyObject* retain
        cdef PyObject* dup
        cdef PyObject* qos
        if publish:
            qos = f[self.r_qos]
            retain = f[self.r_retain]
            dup = f[self.r_dup]
            if qos == NULL or (qos != Py_None and type(<object>qos) is not int):
                return False
            if (retain != Py_True and retain != Py_False) or (dup != Py_True and dup != Py_False):
                return False
            if dup == Py_True and qos != Py_None and <object>qos:
                return False  # perhaps a retransmission of a message in flight
            if c2s and retain == Py_True and f[self.r_topic] != Py_None:
                return False  # the retained store
        elif not _is(ptype, "PUBACK"):
            return False
        cdef PyObject* length = f[self.r_length]
        cdef PyObject* frame = f[self.r_frame]
        if length == NULL or frame == NULL or not self._fields_put(f, publish):
            return False
        if (type(<object>_get(conn, self.c_pending)) is not dict
                or type(<object>_get(conn, self.c_message)) is not dict
                or type(<object>_get(conn, self.c_held)) is not dict
                or type(<object>_get(conn, self.c_older)) is not dict):
            return False
        # Steps held for a record still to come: CaptureTables matches them by frame.
        if <dict>_get(conn, self.c_held):
            return False
        cdef dict pending = <dict>_get(conn, self.c_pending)
        cdef object key = None
        cdef object message = None
        if publish:
            if qos != Py_None and <object>qos:
                key = (<object>direction, <object>f[self.r_packet_id])
                if key in pending:
                    return False  # a packet id reused while pending (CaptureTables._supersede)
        else:
            # A PUBACK that completes the pending QoS 1 exchange of its packet id, with
            # no superseded exchange of that id it could answer; else CaptureTables._ack.
            key = ("s2c" if c2s else "c2s", <object>f[self.r_packet_id])
            older = <dict>_get(conn, self.c_older)
            if older and key in older:
                return False
            message = pending.get(key)
            if message is None:
                return False
            if type(message) is _Held:
                first = (<_Held>message).frame  # a QoS 1 exchange
            elif message["qos"] != 1:
                return False
            else:
                first = message["frame"]
            if frame != Py_None and first is not None and first > <object>frame:
                return False  # a later exchange under the same packet id
        # -- taken: from here on, as CaptureTables.add does ------------------------------
        if ts != Py_None:
            _put(conn, self.c_last_ts, <object>ts)
        _put(conn, self.c_frame_c2s if c2s else self.c_frame_s2c, <object>frame)
        size = 0 if length == Py_None or not <object>length else <object>length
        if c2s:
            _put(conn, self.c_packets_c2s, <object>_get(conn, self.c_packets_c2s) + 1)
            _put(conn, self.c_bytes_c2s, <object>_get(conn, self.c_bytes_c2s) + size)
        else:
            _put(conn, self.c_packets_s2c, <object>_get(conn, self.c_packets_s2c) + 1)
            _put(conn, self.c_bytes_s2c, <object>_get(conn, self.c_bytes_s2c) + size)
        if publish:
            self._publish(<dict>_get(conn, self.c_message), pending, messages, f, key,
                          <object>direction, <object>ts, <object>qos, <object>frame)
        else:
            self._puback(pending, messages, f, key, message, <object>ts)
        return True

    cdef bint _fields_put(self, PyObject** f, bint publish) noexcept:
        """Whether every other field read below holds a value (a slot can be unset)."""
        if f[self.r_packet_id] == NULL:
            return False
        if publish:
            return (f[self.r_topic] != NULL and f[self.r_alias] != NULL
                    and f[self.r_offset] != NULL
                    and f[self.r_payload_length] != NULL
                    and f[self.r_payload] != NULL)
        return f[self.r_code] != NULL

    cdef int _publish(self, dict template, dict pending, list messages, PyObject** f,
                      object key, object direction, object ts, object qos,
                      object frame) except -1:
        """CaptureTables._publish of a PUBLISH that is not a retransmission and leaves
        the retained store alone."""
        if qos is None or not qos:
            qos = 0
        cdef dict message
        cdef _Held held
        if not qos and self.mcols is not None:
            if PyList_GET_SIZE(messages):
                self._drain(messages)
            return self._write_publish(template, f, direction, ts, qos, frame)
        if self.mcols is not None and type(qos) is int and qos == 1:
            held = _Held.__new__(_Held)
            held.template = template
            held.direction = direction
            held.ts = ts
            held.frame = frame
            held.offset = <object>f[self.r_offset]
            held.topic = <object>f[self.r_topic]
            held.alias = <object>f[self.r_alias]
            held.qos = qos
            held.retain = <object>f[self.r_retain]
            held.dup = <object>f[self.r_dup]
            held.packet_id = <object>f[self.r_packet_id]
            held.payload_length = <object>f[self.r_payload_length]
            held.payload = <object>f[self.r_payload]
            pending[key] = held  # not pending before: checked by _take
            return 0
        message = PyDict_Copy(template)
        message["direction"] = direction
        message["ts"] = ts
        message["frame"] = frame
        message["stream_offset"] = <object>f[self.r_offset]
        message["topic"] = <object>f[self.r_topic]
        message["topic_from_alias"] = <object>f[self.r_alias]
        message["qos"] = qos
        message["retain"] = <object>f[self.r_retain]
        message["dup"] = <object>f[self.r_dup]
        packet_id = <object>f[self.r_packet_id]
        message["packet_id"] = packet_id
        message["payload_length"] = <object>f[self.r_payload_length]
        message["payload"] = <object>f[self.r_payload]
        if not qos:
            PyList_Append(messages, message)
            return 0
        message["status"] = "incomplete"
        pending[key] = message  # not pending before: checked by _take
        return 0

    cdef int _complete(self, dict pending, list messages, PyObject** f, object key,
                       _Held held, object ts) except -1:
        """CaptureTables._ack and _done of a PUBACK that completes ``held``: its row,
        written into the messages columns."""
        cdef PyObject* v[MAX_FIELDS]
        del pending[key]
        code = <object>f[self.r_code]
        status = _FAILED if code is not None and code >= REJECTED else _COMPLETE
        latency = None
        if ts is not None and held.ts is not None:
            latency = (ts - held.ts) / 1e6
        if PyList_GET_SIZE(messages):
            self._drain(messages)
        memcpy(v, self._template(held.template), self.nm * sizeof(PyObject*))
        v[self.m_at[0]] = <PyObject*>held.direction
        v[self.m_at[1]] = <PyObject*>held.ts
        v[self.m_at[2]] = <PyObject*>held.frame
        v[self.m_at[3]] = <PyObject*>held.offset
        v[self.m_at[4]] = <PyObject*>held.topic
        v[self.m_at[5]] = <PyObject*>held.alias
        v[self.m_at[6]] = <PyObject*>held.qos
        v[self.m_at[7]] = <PyObject*>held.retain
        v[self.m_at[8]] = <PyObject*>held.dup
        v[self.m_at[9]] = <PyObject*>held.packet_id
        v[self.m_at[10]] = <PyObject*>held.payload_length
        v[self.m_at[11]] = <PyObject*>held.payload
        v[self.m_at[12]] = <PyObject*>status
        v[self.m_at[13]] = <PyObject*>ts
        v[self.m_at[14]] = <PyObject*>code
        v[self.m_at[15]] = <PyObject*>ts
        v[self.m_at[16]] = <PyObject*>latency
        self.mrow(self.mcols, v)
        return 0

    cdef int _puback(self, dict pending, list messages, PyObject** f, object key,
                     object message, object ts) except -1:
        """CaptureTables._ack and _done of a PUBACK that completes ``message``, the
        pending exchange of ``key`` (checked by _take)."""
        if type(message) is _Held:
            return self._complete(pending, messages, f, key, <_Held>message, ts)
        del pending[key]
        message["puback_ts"] = ts
        code = <object>f[self.r_code]
        message["ack_reason_code"] = code
        message["status"] = ("failed" if code is not None and code >= REJECTED
                             else "complete")
        message["completed_ts"] = ts
        if ts is not None and message["ts"] is not None:
            message["latency_ms"] = (ts - message["ts"]) / 1e6
        PyList_Append(messages, message)
        return 0


cdef int _take_fields(object deriver, object tables, PyObject** f) except -1:
    """Deriver.capsule's function: Deriver._take on the fields ``f``; a record it does not
    take goes to CaptureTables.add, which must find its connection's pending exchanges
    as dicts."""
    cdef Deriver d = <Deriver>deriver
    if tables is not d.seen_tables:
        d.seen_conns = tables._conns
        d.seen_messages = tables.messages
        d.seen_tables = tables
    cdef dict conns = d.seen_conns
    if d._take(conns, d.seen_messages, f):
        return 1
    if d.mcols is not None:
        d._materialize(conns, f)
    return 0
