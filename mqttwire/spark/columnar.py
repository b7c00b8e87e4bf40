"""A decoding task's tables without a Record per packet: the compiled capture loop writes
the packets table's Arrow buffers as it decodes (:class:`mqttwire.capture.arrow_c.
PacketColumns`) and hands each packet's fields, as the array it holds them in, to the
derived tables' compiled function (:meth:`mqttwire.spark.derive_c.Deriver.capsule`).

The messages rows of QoS 0 PUBLISHes taken there are written into the messages table's
Arrow columns at once, without a dict, and so are those of the QoS 1 exchanges it
completes (held in C until their acknowledgement); the other rows (exchanges handed back
to CaptureTables as dicts, and those CaptureTables makes) are moved into them in their
order.

A packet becomes a Record only where the derived tables need what only
:meth:`~.derive.CaptureTables.add` does (a connection's first packet, a retained
PUBLISH, an acknowledgement that does not simply complete its exchange...): counted in
:attr:`Counts.fallbacks`.  The records the pure code makes (packets the loop hands
over, errors, gaps, stream ends, WebSocket connections) are taken as they are:
:attr:`Counts.side`.

:func:`mqttwire.spark.decoding.decode_capture` takes this path where the compiled loop
reads the capture and :mod:`.derive_c` is built; the batches are those of
:func:`~mqttwire.spark.decoding.table_batches` over the same records, cut at other rows
(tests/capture/test_capture_columnar.py and tests/capture/conftest.py compare the
tables).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

from ..capture import Record, loop_c
from ..capture.arrow import columns_batch, sink
from . import derive
from .schema import ERRORS, MESSAGES, PACKETS

try:
    from ..capture import arrow_c
except ImportError:  # built without the extension: AVAILABLE is False
    arrow_c = None  # type: ignore[assignment]

__all__ = ["AVAILABLE", "Counts", "columnar_batches", "last_counts"]

#: Whether the columnar path can run (the compiled loop and the compiled derived tables).
AVAILABLE = loop_c is not None and derive.COMPILED


@dataclass
class Counts:
    """How the records of a columnar decoding went: ``fast`` records of the compiled loop
    (never Records), of which ``fallbacks`` were made Records for the derived tables
    and ``direct`` were read by the loop itself, without the codec's packet object;
    ``side`` records that the pure code made."""

    fast: int = 0
    fallbacks: int = 0
    side: int = 0
    direct: int = 0


#: The counts of the last columnar decoding in this process (for the benchmarks).
last_counts = Counts()


def _errors(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of a packets batch that are not packets, with the errors columns."""
    # Imported here, not with the module: a clean capture has no such rows, and
    # pyarrow.compute's import is a sizeable part of a Spark worker's start.
    import pyarrow.compute as pc  # type: ignore[import-untyped]  # no stubs

    rows = batch.filter(pc.not_equal(batch.column(PACKETS.get_field_index("kind")), "packet"))
    return pa.RecordBatch.from_arrays([rows.column(name) for name in ERRORS.names],
                                      schema=ERRORS)


def _message_spec() -> list[tuple[str, bytes, int, int]]:
    """The PacketColumns columns of the messages table: its values by index."""
    kinds = {"int8": b"b", "int32": b"i", "int64": b"l", "timestamp[us, tz=UTC]": b"t",
             "bool": b"?", "double": b"d", "string": b"s", "binary": b"y"}
    return [(f.name, kinds[str(f.type)], 0, i) for i, f in enumerate(MESSAGES)]


def _message_batches(messages: Any, rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of ``messages`` (PacketColumns) as batches of at most ``rows`` rows."""
    n = len(messages)
    if not n:
        return
    batch = columns_batch(messages.take_buffers(), n, MESSAGES, "")
    for start in range(0, n, rows):
        yield "messages", batch.slice(start, rows)


def columnar_batches(reader: Any, tables: derive.CaptureTables, stats: Any,
                     files: Callable[[pa.Array], pa.Array] | str, rows: int,
                     full_batches: Callable[[derive.CaptureTables], Iterator[Any]],
                     rows_batch: Callable[..., pa.RecordBatch], gc_threshold: int
                     ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The batches of every table of the capture that ``reader`` (a
    :class:`~mqttwire.capture.loop_c.FastReader` whose handler gives stream ends) reads,
    derived through ``tables``: as :func:`mqttwire.spark.decoding.table_batches` yields
    them (``full_batches``, ``rows_batch``: its helpers), packets batches of about
    ``rows`` rows; ``files``: the ``file`` column's one value, or its function of the
    ``frame`` column (a set)."""
    columns = sink(PACKETS)
    # A deriver of its own: the messages rows go into this decoding's columns.
    deriver = derive.derive_c.Deriver(Record, derive._Conn)
    columns.derive_into(tables, deriver, deriver.capsule())
    messages = arrow_c.PacketColumns(_message_spec())
    deriver.message_columns(messages, arrow_c.row_capsule(), MESSAGES.names)
    counts = Counts()
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], gc_threshold), *thresholds[1:])
    try:
        more = True
        while more:
            more = reader.fill(columns, rows)
            n = len(columns)
            if n:
                packets = columns.packets
                batch = columns_batch(columns.take_buffers(), n, PACKETS, files)
                stats.records += n
                stats.packets += packets
                stats.errors += n - packets
                yield "packets", batch
                if packets != n:
                    yield "errors", _errors(batch)
            deriver.drain(tables)
            if len(messages) >= rows:
                yield from _message_batches(messages, rows)
            yield from full_batches(tables)  # the connections (messages: drained)
        deriver.materialize_all(tables)
        retained = tables.finish()
        deriver.drain(tables)
        yield from _message_batches(messages, rows)
        for table, done in (("connections", tables.connections), ("retained", retained)):
            for start in range(0, len(done), rows):
                yield table, rows_batch(table, done[start:start + rows])
    finally:
        gc.set_threshold(*thresholds)
        counts.fast, counts.fallbacks, counts.side = (columns.fast, columns.fallbacks,
                                                      columns.side)
        counts.direct = reader.direct
        last_counts.__dict__.update(counts.__dict__)
