"""Executor side: one capture file in, Arrow record batches of every table out.

:func:`decode_capture` streams a capture's records, with its TCP stream ends
(:func:`~mqttwire.capture.read_capture` with ``stream_ends``), through
:class:`~mqttwire.spark.derive.CaptureTables`, and yields ``(table, batch)`` pairs: each
batch has that table's own schema (:data:`~mqttwire.spark.schema.TABLES`).  The batches
are built column by column (:mod:`.columns`), never row by row.  Where the compiled
capture loop reads the capture (the Cython codec) and :mod:`.derive_c` is built, no
Record is made per packet: the loop fills the packets columns and feeds the derived
tables itself (:mod:`.columnar`); the tables are the same.

For Spark, :func:`stage` packs a batch into one row of the
:data:`~mqttwire.spark.schema.STAGED` schema (the batch as an Arrow IPC stream), and
:func:`unstage` unpacks such rows (see :mod:`mqttwire.spark.pipeline` for why).  Only
pyarrow is needed here, not pyspark.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter
from typing import Any, BinaryIO, NamedTuple

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

from .._implementation import impl
from ..capture import MqttStreams, Record, loop_c, read_chain, read_with
from ..capture.arrow import chain_files
from ..capture.sets import FileChain
from . import columnar
from .columns import Source, arrays
from .connection_shares import RETAIN_EVENTS, Share, ShareTables
from .derive import CaptureTables, Row
from .schema import ERRORS, PACKETS, STAGED, TABLES

__all__ = ["BATCH_ROWS", "Batch", "Decoding", "FileStats", "capture_error_batches",
           "decode_capture", "packets_batch", "properties_json", "retain_event_batches",
           "rows_batch", "stage", "table_batches", "unstage"]

#: Rows per Arrow batch: small enough to bound a task's memory (a batch is the unit that
#: the task holds, ships to the JVM and Spark stores), large enough that Arrow's per-batch
#: costs do not matter.
BATCH_ROWS = 8192

#: A batch of one table: (table name, batch with that table's schema).
Batch = tuple[str, pa.RecordBatch]


class Decoding(NamedTuple):
    """How the tasks decode (``read_capture``'s arguments of the same names)."""

    ports: tuple[int, ...]
    payload_limit: int | None
    version: int | None


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


#: The ``packets`` columns whose values are not the record's attribute of the same name
#: (``file``: where no FilesOf says, the capture is one file, its name the capture's).
_PACKET_ATTRIBUTES = {"ts_ns": "ts", "file": "capture"}

#: The file of each of some records of a set (:meth:`~mqttwire.capture.sets.FileChain.
#: files_of`), for the ``file`` column.
FilesOf = Callable[[Sequence[Record]], list[str]]


def _packet_values(name: str, records: list[Record]) -> list[Any] | None:
    """The values of ``packets`` column ``name`` where they are not an attribute's."""
    if name == "topic_from_alias":  # for packets only (a Record's default is False)
        if list(map(attrgetter("kind"), records)).count("packet") == len(records):
            return None
        return [r.topic_from_alias if r.kind == "packet" else None for r in records]
    if name == "properties":
        values = list(map(attrgetter("properties"), records))
        if values.count(None) == len(values):  # most packets have none: no JSON to make
            return values
        return [None if p is None else properties_json(p) for p in values]
    return None


def packets_batch(records: Sequence[Record], schema: pa.Schema = PACKETS,
                  files: FilesOf | None = None) -> pa.RecordBatch:
    """The ``packets`` rows of ``records`` (or the columns of ``schema``, a subset of
    :data:`PACKETS`'s, such as :data:`ERRORS`); ``files``: the file of each record, for
    a capture read from several files (else each record's file is its capture)."""
    records = list(records)
    sources: list[Source] = []
    for name in schema.names:
        values = (files(records) if name == "file" and files is not None
                  else _packet_values(name, records))
        sources.append(_PACKET_ATTRIBUTES.get(name, name) if values is None else values)
    return pa.RecordBatch.from_arrays(arrays(records, sources, schema), schema=schema)


def rows_batch(table: str, rows: Sequence[Row], schema: pa.Schema | None = None
               ) -> pa.RecordBatch:
    """A batch of ``table`` (a derived table: connections, messages, retained) from its
    rows, dicts keyed by column (:mod:`.derive`); ``schema``: another one than the
    table's."""
    schema = schema or TABLES[table]
    return pa.RecordBatch.from_arrays(
        arrays(rows, schema.names, schema, mapping=True), schema=schema)


def _record_batches(records: Sequence[Record], packets: int | None = None,
                    files: FilesOf | None = None) -> Iterator[Batch]:
    """``records`` (not "end") as ``packets``, and those that are not packets also as
    ``errors``; ``packets``: how many of them are packets, where the caller counted;
    ``files``: as :func:`packets_batch`'s."""
    yield "packets", packets_batch(records, PACKETS, files)
    if packets != len(records):
        errors = [r for r in records if r.kind != "packet"]
        if errors:
            yield "errors", packets_batch(errors, ERRORS, files)


def capture_error_batches(capture: str, error: str, *, opened: bool = True) -> list[Batch]:
    """The one "capture_error" row of a capture that cannot be read: in ``errors``, and
    in ``packets`` when it was opened (a fault found while reading it, which the
    packets' order places); a capture that could not be opened at all read no packet,
    and its row is in ``errors`` only."""
    records = [Record("capture_error", capture, error=error)]
    if not opened:
        return [("errors", packets_batch(records, ERRORS))]
    return list(_record_batches(records))


def decode_capture(f: BinaryIO | FileChain, name: str, *, ports: Iterable[int] = (1883,),
                   payload_limit: int | None = None, version: int | None = None,
                   stats: FileStats | None = None, share: Share | None = None
                   ) -> Iterator[Batch]:
    """Decode the capture in ``f`` (a file, or the files of a set read as one capture:
    :class:`~mqttwire.capture.sets.FileChain`, each packet's ``file`` its own) and
    yield ``(table, batch)`` for all its tables:
    packets (and errors) as they come, connections and messages as they finish,
    retained at the end; at most :data:`BATCH_ROWS` rows per batch.

    A corrupt file ends with a "capture_error" row (see
    :func:`~mqttwire.capture.read_capture`); ``stats``, if given, is updated (also when
    decoding stops with an exception).  ``share``: only the records of that share of
    the connections, and ``retain_events`` instead of ``retained`` (:mod:`.connection_shares`).
    """
    # A share's task ignores the other shares' connections as they open (not decoded),
    # and the records of no connection are the first share's.
    keep: Callable[[int], bool] | None = None
    first = True
    if share is not None and share.count > 1:
        keep, first = share.keeps, share.index == 0
    handler = MqttStreams(name, ports=ports, codec=impl, payload_limit=payload_limit,
                          version=version, stream_ends=True, keep=keep, unconnected=first)
    files: FilesOf | None = None
    if isinstance(f, FileChain):
        records = read_chain(f, handler)
        files = f.files_of
    else:
        records = read_with(f, handler)
    if columnar.AVAILABLE and isinstance(records, loop_c.FastReader):
        # The compiled loop reads it: no Record per packet (mqttwire/spark/columnar.py).
        return _columnar(records, name, stats, share if keep is not None else None,
                         f if isinstance(f, FileChain) else None)
    if keep is None:
        return table_batches(records, CaptureTables(name), stats, files)
    return _share_batches(records, name, stats, files)


def _columnar(reader: Any, name: str, stats: FileStats | None, share: Share | None,
              chain: FileChain | None) -> Iterator[Batch]:
    """decode_capture's batches through :mod:`.columnar`."""
    tables = CaptureTables(name) if share is None else ShareTables(name)
    yield from columnar.columnar_batches(
        reader, tables, stats if stats is not None else FileStats(),
        name if chain is None else chain_files(chain), BATCH_ROWS, _full_batches,
        rows_batch, GC_THRESHOLD)
    if share is not None:
        yield from retain_event_batches(tables)  # type: ignore[arg-type]


def _share_batches(records: Iterable[Record], name: str, stats: FileStats | None,
                   files: FilesOf | None) -> Iterator[Batch]:
    tables = ShareTables(name)
    yield from table_batches(records, tables, stats, files)
    yield from retain_event_batches(tables)


def retain_event_batches(tables: ShareTables) -> Iterator[Batch]:
    """The ``retain_events`` batches of a part of a capture's connections (a share, or
    the connections of a split capture that one task decoded), once it is finished."""
    events = tables.retain_events()
    for start in range(0, len(events), BATCH_ROWS):
        yield "retain_events", rows_batch("retain_events", events[start:start + BATCH_ROWS],
                                          RETAIN_EVENTS)


#: The cyclic garbage collector's first threshold while a capture decodes (CPython's
#: default: 700).  The decoding makes millions of short-lived objects that hold no cycles
#: (records, rows, packets), and tens of thousands live at once (a batch's worth); with
#: the default, the collector scans them every 700 allocations, a quarter of the
#: decoding's CPU (benchmarks/history/capture.md).
#: The collector still runs, less often.
GC_THRESHOLD = 100_000


def table_batches(records: Iterable[Record], tables: CaptureTables,
                  stats: FileStats | None = None, files: FilesOf | None = None
                  ) -> Iterator[Batch]:
    """The batches of every table of ``records`` (one capture's, with their stream ends,
    each connection's in capture order), derived through ``tables``: see
    :func:`decode_capture` (``files``: as :func:`packets_batch`'s)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
    try:
        yield from _table_batches(records, tables, stats, files)
    finally:
        gc.set_threshold(*thresholds)


def _full_batches(tables: CaptureTables) -> Iterator[Batch]:
    """Batches of exactly BATCH_ROWS of the finished connections and messages rows; the
    rest stays for later."""
    for table in ("connections", "messages"):
        rows: list[Row] = getattr(tables, table)
        full = len(rows) - len(rows) % BATCH_ROWS
        if full:
            for start in range(0, full, BATCH_ROWS):
                yield table, rows_batch(table, rows[start:start + BATCH_ROWS])
            setattr(tables, table, rows[full:])


def _table_batches(records: Iterable[Record], tables: CaptureTables,
                   stats: FileStats | None, files: FilesOf | None) -> Iterator[Batch]:
    stats = stats if stats is not None else FileStats()
    # The records come a chunk at a time (islice: the iteration stays in C), and the
    # derived tables take each chunk (CaptureTables.add_many: the common records in
    # compiled code), the stream ends among them in their places, before its packets
    # batch is yielded.  A chunk's kinds are counted, not tested record by record in
    # Python: a stream end is rare (two a connection) and feeds only the connections
    # table.
    add_many = tables.add_many
    kind = attrgetter("kind")
    it = iter(records)
    while True:
        chunk = list(islice(it, BATCH_ROWS))
        if not chunk:
            break
        add_many(chunk)
        kinds = list(map(kind, chunk))
        packets = kinds.count("packet")
        batch = chunk
        if packets != len(chunk):
            batch = [r for r in chunk if r.kind != "end"]
        stats.records += len(batch)
        stats.packets += packets
        stats.errors += len(batch) - packets
        if batch:
            yield from _record_batches(batch, packets, files)
        # The derived rows are looked at here, once a chunk, not after every record: at
        # most a chunk's worth of records adds to them meanwhile.
        yield from _full_batches(tables)
        # Free this chunk's records before the next chunk is made, so that the allocator
        # hands their memory, still in the CPU's cache, to the next records (holding two
        # chunks at once cost a sixth of a task's time).
        del chunk, batch
    retained = tables.finish()
    for table, rows in (("connections", tables.connections), ("messages", tables.messages),
                        ("retained", retained)):
        for start in range(0, len(rows), BATCH_ROWS):
            yield table, rows_batch(table, rows[start : start + BATCH_ROWS])


#: LZ4 makes the staged rows about 3 times smaller and is faster than writing them
#: uncompressed (measured on make_capture.py's traffic), so Spark stores and reads less.
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def stage(table: str, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` of ``table`` as one :data:`STAGED` row: the table's name and the batch
    as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=_IPC_OPTIONS) as writer:
        writer.write_batch(batch)
    data = sink.getvalue()
    offsets = pa.array([0, data.size], pa.int32()).buffers()[1]
    return pa.RecordBatch.from_arrays(
        [pa.array([table], pa.string()),
         pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data])], schema=STAGED)


def unstage(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The table batches packed by :func:`stage`, from batches whose first column is
    STAGED's ``data``."""
    for batch in batches:
        data = batch.column(0)
        for i in range(len(data)):
            yield from pa.ipc.open_stream(data[i].as_buffer())
