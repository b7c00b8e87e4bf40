"""One capture's packets table as Arrow: :func:`packets_table`, for pandas, DuckDB or
Polars users, without Spark (pyarrow is needed: the ``spark`` extra has it).

The table has the columns of the pipeline's ``packets`` table
(:data:`mqttwire.spark.schema.PACKETS`), one row per record that :func:`read_capture`
yields (stream ends aside), in the same order with the same values.

Where the compiled capture loop runs (:mod:`.loop_c`, the Cython codec), the rows are
never Records: the loop writes each packet's values into the columns' Arrow buffers as
it decodes them (:class:`~.arrow_c.PacketColumns`), and only the records the pure code
makes (a packet type the loop hands over, an error, a gap, a WebSocket connection) are
read from their objects.  Elsewhere the records are read and their columns built the
reference way (:func:`mqttwire.spark.decoding.packets_batch`).  Both give equal tables
(tests/capture/test_capture_arrow.py, and every read in tests/capture through its
conftest).
"""

from __future__ import annotations

import importlib
import os
from array import array
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO

from .mqtt_streams import MqttStreams

if TYPE_CHECKING:
    # pyarrow has no stubs, and the capture package is type-checked without it.
    import pyarrow as pa  # type: ignore[import-untyped, import-not-found, unused-ignore]

    from .sets import CaptureSet, FileChain


def _module(name: str) -> Any:
    """pyarrow, or a module of mqttwire.spark (which needs pyarrow), imported when used:
    the capture package needs neither, and is type-checked without them."""
    return importlib.import_module(name)

__all__ = ["BATCH_ROWS", "column_spec", "columns_batch", "packets_table", "sink"]

#: Rows per batch of :func:`packets_table` (the pipeline's BATCH_ROWS).
BATCH_ROWS = 8192

# Arrow type names to arrow_c.PacketColumns kinds; a list column keeps Python values.
_KINDS = {"int8": b"b", "int32": b"i", "int64": b"l", "timestamp[us, tz=UTC]": b"t",
          "bool": b"?", "string": b"s", "binary": b"y"}
#: The packets columns whose value is not the Record field of the same name.
_FIELDS = {"ts_ns": "ts"}
#: How PacketColumns takes these columns (1: packet records only; 2: through the json
#: callable).
_HOW = {"topic_from_alias": 1, "properties": 2}


def column_spec(schema: pa.Schema) -> list[tuple[str, bytes, int]]:
    """The :class:`~.arrow_c.PacketColumns` columns of ``schema`` (a subset of PACKETS's,
    in its order), its ``file`` column left out (:func:`columns_batch` adds it)."""
    spec = []
    for field in schema:
        if field.name == "file":
            continue
        kind = _KINDS.get(str(field.type), b"o")
        spec.append((_FIELDS.get(field.name, field.name), kind, _HOW.get(field.name, 0)))
    return spec


def sink(schema: pa.Schema | None = None) -> Any:
    """An empty :class:`~.arrow_c.PacketColumns` for ``schema`` (default PACKETS)."""
    from . import arrow_c

    packets = _module("mqttwire.spark.schema").PACKETS
    json = _module("mqttwire.spark.decoding").properties_json
    return arrow_c.PacketColumns(column_spec(schema or packets), json)


def columns_batch(buffers: list[Any], n: int, schema: pa.Schema,
                  files: Callable[[pa.Array], pa.Array] | str) -> pa.RecordBatch:
    """The batch of ``n`` rows from :meth:`~.arrow_c.PacketColumns.take_buffers`'s
    ``buffers`` (the columns of :func:`column_spec`); ``files``: the ``file`` column's one
    value, or a function of the ``frame`` column giving it."""
    pa = _module("pyarrow")

    arrays: list[Any] = []  # pyarrow arrays
    parts = iter(buffers)
    for field in schema:
        if field.name == "file":
            arrays.append(None)
            continue
        part = next(parts)
        if part[0] == "objects":
            if not part[1]:
                # Most batches have no SUBSCRIBE: pyarrow's list builder would append n
                # nulls one by one (3% of a task's time on the 200 MB capture).
                arrays.append(pa.nulls(n, type=field.type))
                continue
            arrays.append(_list_column(pa, field.type, n, part[1]))
            continue
        nulls, validity, values_, offsets = part
        bufs = [None if validity is None else pa.py_buffer(validity)]
        if offsets is not None:
            bufs.append(pa.py_buffer(offsets))
        bufs.append(pa.py_buffer(values_))
        arrays.append(pa.Array.from_buffers(field.type, n, bufs, null_count=nulls))
    if "file" in schema.names:
        i = schema.names.index("file")
        if isinstance(files, str):
            arrays[i] = _repeated(pa, files, n)
        else:
            arrays[i] = files(arrays[schema.names.index("frame")])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _repeated(pa: Any, text: str, n: int) -> Any:
    """A string column of ``n`` rows of ``text``: ``pa.repeat`` of the value taken from a
    one-row array made from its buffers.  Not of ``pa.scalar(text)``: pyarrow's first
    ``scalar`` (or ``array`` over a Python list) imports pandas, to ask whether the value
    is a pandas object, and a Spark Python worker needs pandas for nothing else (0.4 s of
    CPU at each worker's start)."""
    value = text.encode()
    one = pa.Array.from_buffers(pa.string(), 1, [
        None, pa.py_buffer(array("i", [0, len(value)])), pa.py_buffer(value)])
    return pa.repeat(one[0], n)


def _list_column(pa: Any, type_: Any, n: int, rows: dict[int, list[Any]]) -> Any:
    """A list column of ``n`` rows, ``rows`` the lists by row number (the other rows
    null), made from its buffers, as :func:`_repeated` makes its column: not by
    ``pa.array``, which imports pandas.  The items' column is
    :func:`mqttwire.spark.columns.arrays`'s (the compiled buffers)."""
    validity = bytearray((n + 7) // 8)
    offsets = array("i")
    items: list[Any] = []
    for i, value in sorted(rows.items()):
        # Rows up to i start where the items so far end (the null rows are empty).
        offsets.extend([len(items)] * (i + 1 - len(offsets)))
        validity[i >> 3] |= 1 << (i & 7)
        items.extend(value)
    offsets.extend([len(items)] * (n + 1 - len(offsets)))
    (child,) = _module("mqttwire.spark.columns").arrays(
        items, [items], pa.schema([("item", type_.value_type)]))
    return pa.Array.from_buffers(type_, n, [pa.py_buffer(validity), pa.py_buffer(offsets)],
                                 null_count=n - len(rows), children=[child])


def chain_files(chain: FileChain) -> Callable[[pa.Array], pa.Array]:
    """The ``file`` column of a set's rows from their ``frame`` column."""
    pa = _module("pyarrow")

    def files(frames: Any) -> Any:  # pyarrow arrays
        return pa.array(chain.files_of_frames(frames.to_pylist()), pa.string())
    return files


def packets_table(source: str | os.PathLike[str] | BinaryIO | CaptureSet, *,
                  ports: Iterable[int] = (1883,), payload_limit: int | None = None,
                  codec: ModuleType | None = None, version: int | None = None,
                  name: str | None = None, max_pending: int = 1 << 20) -> pa.Table:
    """The packets table of one capture (a path, a binary file, or a
    :class:`~.sets.CaptureSet` read as one capture) as a ``pyarrow.Table``: the columns
    of :data:`mqttwire.spark.schema.PACKETS`, a row per record of
    :func:`~mqttwire.capture.read_capture` with the same arguments (stream ends aside).
    ``file`` says which file of a set holds the row's frame (else the capture's name).

    For example, ``packets_table("a.pcap").to_pandas()``, or, in DuckDB,
    ``duckdb.sql("select topic, count(*) from t group by topic")`` with
    ``t = packets_table("a.pcap")``."""
    pa = _module("pyarrow")
    batches = list(packet_batches(source, ports=ports, payload_limit=payload_limit,
                                  codec=codec, version=version, name=name,
                                  max_pending=max_pending))
    return pa.Table.from_batches(batches, schema=_module("mqttwire.spark.schema").PACKETS)


def packet_batches(source: Any, *, ports: Iterable[int] = (1883,),
                   payload_limit: int | None = None, codec: ModuleType | None = None,
                   version: int | None = None, name: str | None = None,
                   max_pending: int = 1 << 20) -> Iterator[pa.RecordBatch]:
    """:func:`packets_table`'s batches, at most :data:`BATCH_ROWS` rows each."""
    from .._implementation import impl
    from .sets import CaptureSet

    codec = codec or impl
    if isinstance(source, CaptureSet):
        label = name or source.name
        handler = MqttStreams(label, ports=ports, codec=codec, payload_limit=payload_limit,
                              version=version, max_pending=max_pending)
        chain = source.open_chain()
        yield from _batches(None, chain, handler)
        return
    if isinstance(source, (str, os.PathLike)):
        label = name or os.path.basename(os.fspath(source))
        handler = MqttStreams(label, ports=ports, codec=codec, payload_limit=payload_limit,
                              version=version, max_pending=max_pending)
        with open(source, "rb") as f:
            yield from _batches(f, None, handler)
        return
    label = name or os.path.basename(str(getattr(source, "name", "<stream>")))
    handler = MqttStreams(label, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending)
    yield from _batches(source, None, handler)


def _batches(f: BinaryIO | None, chain: FileChain | None,
             handler: MqttStreams) -> Iterator[pa.RecordBatch]:
    from . import loop_c, read_chain, read_with

    packets = _module("mqttwire.spark.schema").PACKETS

    if loop_c is not None and handler.codec is loop_c.CODEC:
        reader = loop_c.FastReader(f, handler, chain)
        columns = sink(packets)
        files: Callable[[pa.Array], pa.Array] | str = (
            handler.capture if chain is None else chain_files(chain))
        more = True
        while more:
            more = reader.fill(columns, BATCH_ROWS)
            n = len(columns)
            if n:
                yield columns_batch(columns.take_buffers(), n, packets, files)
        return
    packets_batch = _module("mqttwire.spark.decoding").packets_batch
    if chain is None:
        assert f is not None  # one file, or the files of a set
        records = read_with(f, handler)
    else:
        records = read_chain(chain, handler)
    batch: list[Any] = []
    for rec in records:
        batch.append(rec)
        if len(batch) == BATCH_ROWS:
            yield packets_batch(batch, packets, None if chain is None else chain.files_of)
            batch = []
    if batch:
        yield packets_batch(batch, packets, None if chain is None else chain.files_of)
