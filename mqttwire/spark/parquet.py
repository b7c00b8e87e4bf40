"""The tables' Parquet files written by the decoding tasks themselves, and their commit.

When the output directory is on a filesystem that the executors mount (a local path, as
for the streaming reader's inputs), ``mqttwire pipeline`` does not hand the decoded
batches to Spark to write: each task writes its own part files of every table with
pyarrow (:class:`PartFiles`), under a directory of its own in
``OUT/_temporary/``, and returns one row per file (:data:`WRITTEN`).  The driver then
moves the files that the successful tasks reported into the tables' directories
(:func:`commit`); files of failed or duplicate task attempts are never reported and go
with ``_temporary``.  The batches never cross into the JVM, so nothing is staged,
persisted, read back or converted again (benchmarks/history/capture.md has the figures).

The layout is Spark's: ``OUT/<table>/part-*.parquet``, ``packets`` partitioned by
capture into ``capture=<name>`` directories, the name escaped as Spark escapes partition
values (:func:`partition_dir`), and a ``_SUCCESS`` file per table; a table without rows
gets one empty file with its schema, as Spark writes one.  Readers (Spark, pyarrow,
DuckDB, pandas) see the same tables as if Spark had written them; times are written as
Parquet's INT64 TIMESTAMP(MICROS, UTC) rather than Spark's legacy INT96.  Row groups keep
min/max statistics for the numbers, times and flags, not for the text and payload columns
(:func:`_statistics_columns`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from .columns import arrays
from .connection_shares import merge_retained
from .schema import TABLES

__all__ = ["PARTITIONED", "PENDING_ROW_GROUPS", "ROW_GROUP_BYTES", "WRITTEN", "PartFiles",
           "commit", "merge_events", "partition_dir", "staging_root"]

#: The table written in one directory per capture, and its partition column.
PARTITIONED = {"packets": "capture"}

#: What a writing task returns: one row per file: its table, its path relative to the
#: run's staging root (``<task>/<table>/[capture=<name>/]part-...``; without its first
#: part, its path relative to OUT once committed) and its rows.
WRITTEN = pa.schema([("table", pa.string()), ("path", pa.string()), ("rows", pa.int64())])

#: A table's batches are gathered up to this size before they are written as one row
#: group: the decoder's batches (8,192 rows) would make row groups too small for readers
#: to skip or scan well; this bounds a task's buffered output to 5 tables x 32 MiB.
ROW_GROUP_BYTES = 32 << 20

# Spark's ExternalCatalogUtils.escapePathName: these characters of a partition value are
# written as %XX (upper-case hex); every other character, non-ASCII included, is kept.
# Spark and pyarrow's hive partitioning both turn any %XX back into its character.
_ESCAPED = frozenset([chr(c) for c in range(1, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def partition_dir(column: str, value: str) -> str:
    """The directory of one partition value, as Spark names it (``capture=a%3Ab``)."""
    if not value:
        return f"{column}=__HIVE_DEFAULT_PARTITION__"
    return column + "=" + "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def staging_root(target: str) -> str:
    """A new directory under ``target/_temporary`` for one run's task files (readers
    skip names starting with ``_``)."""
    return os.path.join(target, "_temporary", f"mqttwire-{uuid.uuid4().hex}")


#: Row groups handed to the writing thread and not yet written, at most: the decoding
#: waits beyond that, which bounds the memory they hold (with ROW_GROUP_BYTES).
PENDING_ROW_GROUPS = 2


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth Parquet's dictionary encoding: the strings (topics, client ids,
    directions, packet types: few distinct values).  The others (times, offsets, packet
    ids, payloads) have nearly as many values as rows, so trying a dictionary first costs
    CPU for nothing, for files hardly smaller (benchmarks/history/capture.md)."""
    return [f.name for f in schema if pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type)]


def _statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns whose min/max statistics the files keep: numbers, times and flags,
    which a reader's filter can use to skip row groups (times rise through a capture).
    The text, binary and list columns are left out: in capture order their values are
    not sorted, so a row group's range spans nearly all of them and rules nothing out,
    while computing it compares every value (a fifth of a task's Parquet writing:
    benchmarks/capture.md)."""
    return [f.name for f in schema if not (
        pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
        or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
        or pa.types.is_list(f.type))]


class _Part:
    """One open part file: a table's rows in one directory, gathered into row groups,
    which ``write`` (the task's writing thread) writes."""

    __slots__ = ("buffered", "bytes", "path", "rows", "writer")

    def __init__(self, path: str) -> None:
        self.path = path
        self.writer: pq.ParquetWriter | None = None
        self.buffered: list[pa.RecordBatch] = []
        self.bytes = 0
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> list[pa.RecordBatch] | None:
        """Take ``batch``; return the row group to write when it is full."""
        self.buffered.append(batch)
        self.bytes += batch.nbytes
        self.rows += batch.num_rows
        return self.take() if self.bytes >= ROW_GROUP_BYTES else None

    def take(self) -> list[pa.RecordBatch]:
        taken, self.buffered, self.bytes = self.buffered, [], 0
        return taken

    def write(self, batches: list[pa.RecordBatch]) -> None:
        """Write one row group (the file is created with the first)."""
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        if self.writer is None:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            self.writer = pq.ParquetWriter(
                self.path, table.schema, compression="snappy",
                use_dictionary=_dictionary_columns(table.schema),
                write_statistics=_statistics_columns(table.schema))
        self.writer.write_table(table, row_group_size=table.num_rows)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class PartFiles:
    """One task's part files of every table, in a directory of its own under ``root``
    (:func:`staging_root`): :meth:`write` takes ``(table, batch)`` pairs and returns the
    :data:`WRITTEN` rows of the files once every batch is written."""

    def __init__(self, root: str) -> None:
        self.root = root

    def write(self, batches: Iterable[tuple[str, pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
        task = uuid.uuid4().hex  # one directory per task attempt: retries never collide
        parts: dict[tuple[str, str | None], _Part] = {}
        #: The partition directory of each partitioned table's latest batch.
        latest: dict[str, str] = {}
        # pyarrow encodes, compresses and writes without the GIL, so one thread writing
        # the row groups (in order: one thread) runs beside the decoding on a second core.
        pool = ThreadPoolExecutor(1, thread_name_prefix="mqttwire-parquet")
        pending: list[Future[None]] = []

        def write(part: _Part, group: list[pa.RecordBatch] | None) -> None:
            if group:
                pending.append(pool.submit(part.write, group))
                while len(pending) > PENDING_ROW_GROUPS or (pending and pending[0].done()):
                    pending.pop(0).result()  # raises the writing's error, if any

        try:
            for table, batch in batches:
                if not batch.num_rows:
                    continue
                directory = None
                column = PARTITIONED.get(table)
                if column is not None:
                    # A batch holds rows of one capture (decoding.decode_capture).
                    i = batch.schema.get_field_index(column)
                    directory = partition_dir(column, batch.column(i)[0].as_py())
                    batch = batch.remove_column(i)
                    # A task that decodes several small captures (.packing) decodes them
                    # one after the other: once the next begins, the last one's rows are
                    # all there, so they are written now (a row group of their file)
                    # rather than every capture's rows being held until the task ends.
                    previous = latest.get(table)
                    if previous is not None and previous != directory:
                        done = parts[table, previous]
                        write(done, done.take())
                    latest[table] = directory
                part = parts.get((table, directory))
                if part is None:
                    name = f"part-{len(parts):05d}-{task}.snappy.parquet"
                    rel = os.path.join(*filter(None, (table, directory, name)))
                    part = parts[table, directory] = _Part(os.path.join(self.root, task, rel))
                write(part, part.add(batch))
            for part in parts.values():
                write(part, part.take())
            while pending:
                pending.pop(0).result()
            for part in parts.values():
                part.close()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            for part in parts.values():
                part.close()
            raise
        finally:
            pool.shutdown()
        rows = [(table, os.path.relpath(part.path, self.root), part.rows)
                for (table, _), part in parts.items()]
        if rows:
            yield pa.RecordBatch.from_arrays(
                arrays(rows, [list(column) for column in zip(*rows)], WRITTEN),
                schema=WRITTEN)


def merge_events(root: str, written: Iterable[tuple[str, str, int]]
                 ) -> list[tuple[str, str, int]]:
    """``written`` with the ``retain_events`` files of tasks that read shares of a file
    (.connection_shares) replaced by the one retained file chosen from them (written under
    ``root`` as a task's file would be)."""
    rows: list[tuple[str, str, int]] = [(table, rel, n) for table, rel, n in written]
    events = [rel for table, rel, _ in rows if table == "retain_events"]
    rows = [row for row in rows if row[0] != "retain_events"]
    if events:
        table = merge_retained(pa.concat_tables(
            pq.read_table(os.path.join(root, rel)) for rel in events))
        rel = os.path.join(f"merged-{uuid.uuid4().hex}", "retained",
                           f"part-00000-{uuid.uuid4().hex}.snappy.parquet")
        if table.num_rows:
            os.makedirs(os.path.dirname(os.path.join(root, rel)))
            pq.write_table(table, os.path.join(root, rel), compression="snappy")
            rows.append(("retained", rel, table.num_rows))
    return rows


def _file_schema(table: str) -> pa.Schema:
    """The columns of ``table``'s files (without the partition column)."""
    schema = TABLES[table]
    column = PARTITIONED.get(table)
    return schema.remove(schema.get_field_index(column)) if column else schema


def commit(target: str, root: str, written: Iterable[tuple[str, str, int]],
           tables: Iterable[str]) -> dict[str, int]:
    """Move the files that the tasks wrote under ``root`` (their :data:`WRITTEN` rows)
    into
    ``target/<table>/``, replacing each table's directory as Spark's overwrite mode does;
    every table gets a ``_SUCCESS`` file.  Returns the rows per table."""
    by_table: dict[str, list[tuple[str, int]]] = {table: [] for table in tables}
    for table, rel, rows in written:
        by_table[table].append((rel, rows))
    counts = {}
    for table, files in by_table.items():
        directory = os.path.join(target, table)
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        for rel, _ in files:
            final = os.path.join(target, rel.split(os.sep, 1)[1])
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(os.path.join(root, rel), final)
        if not files:
            pq.write_table(_file_schema(table).empty_table(),
                           os.path.join(directory, "part-00000-empty.snappy.parquet"),
                           compression="snappy")
        open(os.path.join(directory, "_SUCCESS"), "wb").close()
        counts[table] = sum(rows for _, rows in files)
    shutil.rmtree(root, ignore_errors=True)
    parent = os.path.dirname(root)
    if os.path.isdir(parent) and not os.listdir(parent):
        os.rmdir(parent)
    return counts
