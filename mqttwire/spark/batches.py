"""Executor side: one capture file in, Arrow record batches of every table out.

:func:`decode_capture` streams a capture's records, with its TCP stream ends
(:func:`~mqttwire.capture.read_capture` with ``stream_ends``), through
:class:`~mqttwire.spark.derive.CaptureTables`, and yields batches of the
:data:`~mqttwire.spark.schema.DECODED` schema: each batch holds the rows of one table in
that table's struct column.  Only pyarrow is needed here, not pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

from ..capture import Record, read_capture
from .derive import CaptureTables, Row
from .schema import DECODED, TABLES, TIMESTAMP

__all__ = ["BATCH_ROWS", "FileStats", "decode_capture", "error_batch", "packet_row",
           "properties_json", "to_batch"]

#: Rows per Arrow batch: small enough to bound an executor's memory, large enough that
#: Arrow's per-batch costs do not matter.
BATCH_ROWS = 8192

_TIME_FIELDS = {name: [f.name for f in schema if f.type == TIMESTAMP]
                for name, schema in TABLES.items()}


@dataclass
class FileStats:
    """What decoding one capture produced (for progress reports)."""

    records: int = 0
    packets: int = 0
    errors: int = 0


def properties_json(props: Any) -> str | None:
    """MQTT 5.0 properties as a JSON object: snake_case names (as
    :class:`mqttwire.Properties` has them) to values; binary values as hex strings,
    user properties as a list of [key, value] pairs (keys may repeat, order matters)."""
    if props is None:
        return None
    out: dict[str, Any] = {}
    for name, value in props.items():
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).hex()
        elif name == "user_properties":
            value = [list(pair) for pair in value]
        out[name] = value
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False) if out else None


def packet_row(rec: Record) -> Row:
    """The ``packets`` row of a record (times still in nanoseconds)."""
    return {
        "capture": rec.capture, "kind": rec.kind, "ts": rec.ts, "ts_ns": rec.ts,
        "frame": rec.frame, "connection_id": rec.connection_id, "direction": rec.direction,
        "src_ip": rec.src_ip, "src_port": rec.src_port, "dst_ip": rec.dst_ip,
        "dst_port": rec.dst_port, "stream_offset": rec.stream_offset, "length": rec.length,
        "client_id": rec.client_id, "protocol_version": rec.protocol_version,
        "packet_type": rec.packet_type, "flags": rec.flags, "dup": rec.dup, "qos": rec.qos,
        "retain": rec.retain, "packet_id": rec.packet_id, "topic": rec.topic,
        "topic_from_alias": rec.topic_from_alias if rec.kind == "packet" else None,
        "topic_filters": rec.topic_filters, "payload_length": rec.payload_length,
        "payload": rec.payload, "reason_code": rec.reason_code,
        "reason_codes": rec.reason_codes, "properties": properties_json(rec.properties),
        "error": rec.error, "error_offset": rec.error_offset,
    }


def to_batch(table: str, rows: list[Row]) -> pa.RecordBatch:
    """A :data:`DECODED` batch holding ``rows`` of ``table``.  Converts the time columns
    from nanoseconds to microseconds in place."""
    for name in _TIME_FIELDS[table]:
        for row in rows:
            value = row[name]
            if value is not None:
                row[name] = value // 1000
    n = len(rows)
    columns = [pa.array([table] * n, pa.string())]
    for name in TABLES:
        struct_type = DECODED.field(name).type
        columns.append(pa.array(rows, type=struct_type) if name == table
                       else pa.nulls(n, struct_type))
    return pa.RecordBatch.from_arrays(columns, schema=DECODED)


def error_batch(capture: str, error: str) -> pa.RecordBatch:
    """The one ``packets`` row (kind "capture_error") of a capture that cannot be read."""
    return to_batch("packets", [packet_row(Record("capture_error", capture, error=error))])


def decode_capture(f: BinaryIO, name: str, *, ports: Iterable[int] = (1883,),
                   payload_limit: int | None = None, version: int | None = None,
                   stats: FileStats | None = None) -> Iterator[pa.RecordBatch]:
    """Decode the capture in ``f`` and yield :data:`DECODED` batches of all its tables:
    packets as they come, connections and messages as they finish, retained at the end.

    A corrupt file ends with a "capture_error" packets row (see
    :func:`~mqttwire.capture.read_capture`); ``stats``, if given, is updated.
    """
    stats = stats if stats is not None else FileStats()
    tables = CaptureTables(name)
    packets: list[Row] = []
    add = tables.add
    for rec in read_capture(f, name=name, ports=ports, payload_limit=payload_limit,
                            version=version, stream_ends=True):
        add(rec)
        if rec.kind != "end":  # the ends feed only the connections table
            stats.records += 1
            if rec.kind == "packet":
                stats.packets += 1
            else:
                stats.errors += 1
            packets.append(packet_row(rec))
            if len(packets) >= BATCH_ROWS:
                yield to_batch("packets", packets)
                packets = []
        if len(tables.messages) >= BATCH_ROWS:
            yield to_batch("messages", tables.messages)
            tables.messages = []
        if len(tables.connections) >= BATCH_ROWS:
            yield to_batch("connections", tables.connections)
            tables.connections = []
    retained = tables.finish()
    for table, rows in (("packets", packets), ("connections", tables.connections),
                        ("messages", tables.messages), ("retained", retained)):
        for start in range(0, len(rows), BATCH_ROWS):
            yield to_batch(table, rows[start : start + BATCH_ROWS])
