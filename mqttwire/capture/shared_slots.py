"""The state that the compiled capture loop shares with the pure-Python code.

``mqttwire/capture/loop_c.pyx`` reads and writes some slots of the pure code's objects
in place (one copy of the state, so that it can hand any frame to the pure code at any
point): the slots listed here, by class, and every field of :class:`~.record.Record`,
which it allocates and fills itself.  The classes build their ``__slots__`` from these
tuples, so the shared part is visible where they are defined.

The contract: renaming or retyping one of these slots, or a Record field, is a change to
loop_c.pyx too.  loop_c.pyx looks each slot up by name in its class at import (never by a
fixed offset), refuses at import a slot that is not listed here or not a writable object
slot, and a Record whose fields are not :data:`RECORD_FIELDS` in this order; read_capture
then falls back to the pure loop.  tests/capture/test_capture_shared_slots.py checks both sides.
"""

from __future__ import annotations

__all__ = ["CONNECTION", "DIRECTION", "RECORD_FIELDS", "SHARED", "TCP_CONNECTION",
           "TCP_STREAM"]

#: tcp.TcpStream: sequence bookkeeping of the in-order fast case.
TCP_STREAM = ("base", "conn", "dport", "ended", "fin", "high", "next", "peer", "pending",
              "sport", "user")
#: tcp.TcpConnection: whether its segments are dropped.
TCP_CONNECTION = ("ignored",)
#: direction.Direction: the MQTT framing state of one direction.
DIRECTION = ("aliases", "conn", "dec", "dst_ip", "end", "first", "hdr", "mode", "name",
             "remaining", "src_ip", "start", "stream", "unframed")
#: mqtt_streams.Connection: the connection's identity and level.
CONNECTION = ("client_id", "id", "version", "version_source")
#: record.Record's fields, in their order (the compiled loop fills them by position).
RECORD_FIELDS = (
    "kind", "capture", "ts", "frame", "connection_id", "direction", "src_ip", "src_port",
    "dst_ip", "dst_port", "stream_offset", "length", "client_id", "protocol_version",
    "packet_type", "flags", "qos", "retain", "dup", "packet_id", "topic",
    "topic_from_alias", "topic_filters", "payload_length", "payload", "reason_code",
    "reason_codes", "properties", "packet", "error", "error_offset", "end_reason",
    "version_source", "transport",
)

#: Every shared slot by class name.
SHARED = {"TcpStream": TCP_STREAM, "TcpConnection": TCP_CONNECTION,
          "Direction": DIRECTION, "Connection": CONNECTION, "Record": RECORD_FIELDS}
