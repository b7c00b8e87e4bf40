# A Record's fields as the compiled capture code holds them (loop_c.pyx, arrow_c.pyx): an
# array of NFIELDS borrowed pointers, in the order of shared_slots.RECORD_FIELDS (the F_*
# indices), and a Record made from such an array, slot by slot, as Record(...) fills it.
# Inline functions and types only: cimporting this file imports no module at run time.

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_XINCREF

from .._cdefs cimport PyType_GenericAlloc

cdef enum:
    F_KIND = 0
    F_CAPTURE, F_TS, F_FRAME, F_CONNECTION_ID, F_DIRECTION, F_SRC_IP, F_SRC_PORT,
    F_DST_IP, F_DST_PORT, F_STREAM_OFFSET, F_LENGTH, F_CLIENT_ID, F_PROTOCOL_VERSION,
    F_PACKET_TYPE, F_FLAGS, F_QOS, F_RETAIN, F_DUP, F_PACKET_ID, F_TOPIC, F_TOPIC_FROM_ALIAS,
    F_TOPIC_FILTERS, F_PAYLOAD_LENGTH, F_PAYLOAD, F_REASON_CODE, F_REASON_CODES,
    F_PROPERTIES, F_PACKET, F_ERROR, F_ERROR_OFFSET, F_END_REASON, F_VERSION_SOURCE,
    F_TRANSPORT
    NFIELDS  # 34


cdef inline tuple field_names():
    """The F_* order spelled out: must be shared_slots.RECORD_FIELDS and Record's fields
    (check_record)."""
    return (
        "kind", "capture", "ts", "frame", "connection_id", "direction", "src_ip", "src_port",
        "dst_ip", "dst_port", "stream_offset", "length", "client_id", "protocol_version",
        "packet_type", "flags", "qos", "retain", "dup", "packet_id", "topic",
        "topic_from_alias", "topic_filters", "payload_length", "payload", "reason_code",
        "reason_codes", "properties", "packet", "error", "error_offset", "end_reason",
        "version_source", "transport",
    )


cdef inline int check_record(object record_cls, tuple record_fields) except -1:
    """ImportError unless ``record_cls`` (the Record dataclass) has the fields of the F_*
    order, which ``record_fields`` (shared_slots.RECORD_FIELDS) must be too, with the
    defaults new_record's callers rely on (None, topic_from_alias False)."""
    import dataclasses

    names = field_names()
    fields = dataclasses.fields(record_cls)
    if names != record_fields:
        raise ImportError("the F_* order is not shared_slots.RECORD_FIELDS")
    if tuple([f.name for f in fields]) != names:
        raise ImportError("Record's fields are not the ones the compiled loop fills")
    for f in fields[2:]:
        if f.default is not (False if f.name == "topic_from_alias" else None):
            raise ImportError(f"Record.{f.name} has an unexpected default")
    return 0


cdef inline object new_record(PyTypeObject* record_type, const Py_ssize_t* offsets,
                              PyObject** v):
    """A Record with the field values ``v[0:NFIELDS]`` (borrowed), as Record(...) makes
    it: ``offsets``, each field's slot offset in the F_* order."""
    cdef object rec = PyType_GenericAlloc(record_type, 0)
    cdef char* base = <char*><PyObject*>rec
    cdef int i
    for i in range(NFIELDS):
        Py_XINCREF(v[i])
        (<PyObject**>(base + offsets[i]))[0] = v[i]
    return rec
