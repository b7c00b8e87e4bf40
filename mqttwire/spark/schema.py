"""The declared schemas of the pipeline's tables, as Arrow schemas.

The executors build Arrow record batches of each table's schema
(:mod:`mqttwire.spark.decoding`), which Spark gets converted (nothing is inferred); between
decoding and writing, Spark holds them packed in rows of :data:`STAGED`.  Times are
``timestamp[us, UTC]`` (Spark's TIMESTAMP has microseconds); the packets table also keeps
the exact capture time in nanoseconds, ``ts_ns``.
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

__all__ = [
           "CONNECTIONS",
           "ERRORS",
           "MESSAGES",
           "PACKETS",
           "RETAINED",
           "STAGED",
           "TABLES",
           "TIMESTAMP",
]

TIMESTAMP = pa.timestamp("us", tz="UTC")

#: ``capture`` (every table): the file's path from the input it was found through,
#: ``a.pcap`` for a file given by name, ``dir/sub/a.pcap`` for one under the folder
#: ``dir``, unique in the run (mqttwire/capture/files.py).
PACKETS = pa.schema([
    ("capture", pa.string()),
    # The file that holds the record's frame: the capture's own name, but for a capture
    # read from several files (a set: mqttwire.capture.sets), which of them.
    ("file", pa.string()),
    ("kind", pa.string()),  # packet, error, gap, fragment, capture_error
    ("ts", TIMESTAMP),
    ("ts_ns", pa.int64()),
    ("frame", pa.int64()),
    ("connection_id", pa.string()),
    ("direction", pa.string()),  # c2s, s2c
    ("transport", pa.string()),  # tcp, websocket (null for no connection; see Record)
    ("src_ip", pa.string()),
    ("src_port", pa.int32()),
    ("dst_ip", pa.string()),
    ("dst_port", pa.int32()),
    ("stream_offset", pa.int64()),
    ("length", pa.int64()),
    ("client_id", pa.string()),
    ("protocol_version", pa.int8()),
    ("version_source", pa.string()),  # connect, option, inferred, default (see Record)
    ("packet_type", pa.string()),
    ("flags", pa.int8()),
    ("dup", pa.bool_()),
    ("qos", pa.int8()),
    ("retain", pa.bool_()),
    ("packet_id", pa.int32()),
    ("topic", pa.string()),
    ("topic_from_alias", pa.bool_()),
    ("topic_filters", pa.list_(pa.string())),
    ("payload_length", pa.int64()),
    ("payload", pa.binary()),  # only with --payload-limit
    ("reason_code", pa.int32()),
    ("reason_codes", pa.list_(pa.int32())),
    ("properties", pa.string()),  # MQTT 5.0 properties as a JSON object
    ("error", pa.string()),
    ("error_offset", pa.int64()),
])

CONNECTIONS = pa.schema([
    ("capture", pa.string()),
    ("connection_id", pa.string()),
    ("client_ip", pa.string()),
    ("client_port", pa.int32()),
    ("server_ip", pa.string()),
    ("server_port", pa.int32()),
    ("transport", pa.string()),  # tcp, websocket: MQTT straight on TCP or in WebSocket
    ("client_id", pa.string()),
    ("protocol_version", pa.int8()),
    ("version_source", pa.string()),  # connect, option, inferred, default (see Record)
    ("joined_mid_stream", pa.bool_()),  # no CONNECT of it in the capture
    ("clean_start", pa.bool_()),
    ("keep_alive", pa.int32()),
    ("username_present", pa.bool_()),
    ("password_present", pa.bool_()),
    ("will_topic", pa.string()),
    ("will_qos", pa.int8()),
    ("will_retain", pa.bool_()),
    ("will_payload_length", pa.int64()),
    ("connect_ts", TIMESTAMP),
    ("connack_ts", TIMESTAMP),
    ("connack_reason_code", pa.int32()),
    ("session_present", pa.bool_()),
    ("first_ts", TIMESTAMP),
    ("last_ts", TIMESTAMP),
    ("close_ts", TIMESTAMP),  # the DISCONNECT, else the FIN or RST; null at end of capture
    ("close_reason", pa.string()),  # disconnect, fin, rst, eof (still open at the end)
    ("disconnect_by", pa.string()),  # client, server (MQTT 5.0), or null
    ("disconnect_reason_code", pa.int32()),
    ("tcp_end", pa.string()),  # fin, rst, eof
    ("tcp_closed_by", pa.string()),  # client or server, for a FIN
    ("packets_c2s", pa.int64()),
    ("packets_s2c", pa.int64()),
    ("bytes_c2s", pa.int64()),
    ("bytes_s2c", pa.int64()),
    ("errors", pa.int64()),
    ("gaps", pa.int64()),
    # Acknowledgements (PUBACK, PUBREC, PUBREL, PUBCOMP) that answer no PUBLISH of the
    # capture: sent before it began (joined mid-stream), lost, or repeated.
    ("unmatched_acks", pa.int64()),
])

MESSAGES = pa.schema([
    ("capture", pa.string()),
    ("connection_id", pa.string()),
    ("client_id", pa.string()),
    ("protocol_version", pa.int8()),
    ("direction", pa.string()),  # c2s: published by the client; s2c: delivered to it
    ("ts", TIMESTAMP),
    ("frame", pa.int64()),  # the PUBLISH's frame (packets.frame)
    ("stream_offset", pa.int64()),
    ("topic", pa.string()),
    ("topic_from_alias", pa.bool_()),
    ("qos", pa.int8()),
    ("retain", pa.bool_()),
    ("dup", pa.bool_()),
    ("packet_id", pa.int32()),
    ("payload_length", pa.int64()),
    ("payload", pa.binary()),
    ("status", pa.string()),  # null (QoS 0), complete, failed, incomplete
    ("retransmissions", pa.int32()),
    ("puback_ts", TIMESTAMP),
    ("pubrec_ts", TIMESTAMP),
    ("pubrel_ts", TIMESTAMP),
    ("pubcomp_ts", TIMESTAMP),
    ("ack_reason_code", pa.int32()),
    ("completed_ts", TIMESTAMP),
    ("latency_ms", pa.float64()),
])

RETAINED = pa.schema([
    ("capture", pa.string()),
    ("topic", pa.string()),
    ("connection_id", pa.string()),
    ("client_id", pa.string()),
    ("protocol_version", pa.int8()),
    ("ts", TIMESTAMP),
    ("qos", pa.int8()),
    ("payload_length", pa.int64()),
    ("payload", pa.binary()),
    ("stream_offset", pa.int64()),
])

#: The columns of ``errors``: the rows of ``packets`` that are not packets (kinds error,
#: gap, fragment, capture_error), with these columns.
ERRORS = pa.schema([PACKETS.field(name) for name in (
    "capture", "file", "kind", "ts", "ts_ns", "frame", "connection_id", "direction",
    "transport", "src_ip", "src_port", "dst_ip", "dst_port", "client_id", "protocol_version",
    "stream_offset", "length", "reason_code", "error", "error_offset")])

#: The tables that the executors build, by name.
TABLES = {"packets": PACKETS, "connections": CONNECTIONS, "messages": MESSAGES,
          "retained": RETAINED, "errors": ERRORS}

#: What the decoding tasks return: one row per Arrow batch of a table, ``data`` holding
#: the batch as an Arrow IPC stream (see :mod:`mqttwire.spark.tables` for why).
STAGED = pa.schema([("table", pa.string()), ("data", pa.binary())])
