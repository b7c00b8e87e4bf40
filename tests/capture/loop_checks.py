"""The checks that compare the compiled capture loop with the pure one, shared by this
directory's conftest.py and its tests (imported by this module's own name: a module
named "conftest" may be tests/spark's when both directories run in one process)."""

from __future__ import annotations

import dataclasses
import importlib
import io
import os
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import pytest

from mqttwire.capture import MqttStreams, Record
from mqttwire.capture.loop import _read_pure, _read_pure_chain
from mqttwire.capture.sets import FileChain

__all__ = ["assert_same_records", "bytes_chain", "cython_codec", "fast_expected",
           "record_values", "reference_chain_records", "reference_records"]

FIELDS = [f.name for f in dataclasses.fields(Record)]


def cython_codec() -> ModuleType:
    """mqttwire._speedups, imported when a test needs it: where it is not built, the
    ImportError fails that test (a pure-Python pass deselects those tests with
    --no-c-extensions), and the other tests of this directory still run."""
    return importlib.import_module("mqttwire._speedups")


def fast_expected(codec: ModuleType) -> bool:
    """Whether read_capture must take the compiled loop with ``codec``: with the Cython
    codec, unless a pure-Python run was asked for (then the module is not even loaded)."""
    return codec.__name__ == "mqttwire._speedups" and not os.environ.get("MQTTWIRE_PURE_PYTHON")


def record_values(rec: Record) -> list[tuple[str, type, Any]]:
    """Every field with its type, so that 1 and True, or 0 and None, differ."""
    assert type(rec) is Record
    return [(name, type(getattr(rec, name)), getattr(rec, name)) for name in FIELDS]


def assert_same_records(fast: list[Record], reference: list[Record]) -> None:
    assert len(fast) == len(reference)
    for a, b in zip(fast, reference):
        assert record_values(a) == record_values(b)
        assert repr(a) == repr(b)


def reference_records(raw: bytes, name: str, ports: Iterable[int], payload_limit: int | None,
                      codec: ModuleType, version: int | None, max_pending: int,
                      stream_ends: bool, keep: Callable[[int], bool] | None = None,
                      unconnected: bool = True) -> list[Record]:
    """The pure loop's records for the capture ``raw``, whatever the codec."""
    handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending, stream_ends=stream_ends,
                          keep=keep, unconnected=unconnected)
    return list(_read_pure(io.BytesIO(raw), handler))


def bytes_chain(raws: list[tuple[str, bytes | OSError]]) -> FileChain:
    """A set's files, (name, contents) each, as a FileChain over memory (an OSError for
    contents: the file cannot be opened, with that error)."""
    def opener(raw: bytes | OSError) -> Callable[[], io.BytesIO]:
        def open_it() -> io.BytesIO:
            if isinstance(raw, OSError):
                raise raw
            return io.BytesIO(raw)
        return open_it

    return FileChain([(label, opener(raw)) for label, raw in raws])


def reference_chain_records(chain: FileChain, name: str, ports: Iterable[int],
                            payload_limit: int | None, codec: ModuleType,
                            version: int | None, max_pending: int,
                            stream_ends: bool) -> list[Record]:
    """The pure loop's records for a set's files, whatever the codec."""
    handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending, stream_ends=stream_ends)
    return list(_read_pure_chain(chain, handler))


def reference_packets_table(records: list[Record], files: Callable[[Record], str] | None = None
                            ) -> Any:
    """The packets table of ``records`` (stream ends left out) built the reference way:
    each column a list of the records' values, through ``pa.array``
    (mqttwire.spark.columns.reference_array); ``files``: each record's file (else its
    capture's name)."""
    import pyarrow as pa

    from mqttwire.spark.columns import reference_array
    from mqttwire.spark.decoding import properties_json
    from mqttwire.spark.schema import PACKETS

    rows = [r for r in records if r.kind != "end"]
    columns = []
    for field in PACKETS:
        name = field.name
        if name == "file":
            values = [files(r) if files else r.capture for r in rows]
        elif name == "ts_ns":
            values = [r.ts for r in rows]
        elif name == "topic_from_alias":
            values = [r.topic_from_alias if r.kind == "packet" else None for r in rows]
        elif name == "properties":
            values = [None if r.properties is None else properties_json(r.properties)
                      for r in rows]
        else:
            values = [getattr(r, name) for r in rows]
        columns.append(reference_array(values, field))
    return pa.Table.from_arrays(columns, schema=PACKETS)


def columnar_packets_table(reader: Any, handler: MqttStreams, chain: FileChain | None = None,
                           rows: int = 5) -> Any:
    """The packets table that the compiled loop ``reader`` writes into columns
    (FastReader.fill), in batches of about ``rows`` rows (small, so that batch
    boundaries fall everywhere)."""
    import pyarrow as pa

    from mqttwire.capture.arrow import chain_files, columns_batch, sink
    from mqttwire.spark.schema import PACKETS

    columns = sink(PACKETS)
    files: Any = handler.capture if chain is None else chain_files(chain)
    batches = []
    more = True
    while more:
        more = reader.fill(columns, rows)
        n = len(columns)
        if n:
            batches.append(columns_batch(columns.take_buffers(), n, PACKETS, files))
    return pa.Table.from_batches(batches, schema=PACKETS)


def assert_same_tables(fast: Any, reference: Any) -> None:
    """Two packets tables equal value for value (column by column, for a readable
    failure)."""
    assert fast.schema == reference.schema
    assert fast.num_rows == reference.num_rows
    for name in fast.schema.names:
        a, b = fast[name].combine_chunks(), reference[name].combine_chunks()
        assert a.equals(b), (name, a.to_pylist()[:20], b.to_pylist()[:20])


def check_columnar(make_fast: Callable[[], Any], reference: list[Record],
                   files: Callable[[Record], str] | None = None) -> None:
    """The compiled loop's columnar table (``make_fast()``) equals the reference table of
    ``reference``; where the reference way cannot build one (a value out of its column's
    range, such as a time past 2262 in a damaged capture), the columnar way raises too."""
    import pyarrow as pa

    try:
        expected = reference_packets_table(reference, files)
    except (pa.ArrowInvalid, OverflowError):
        with pytest.raises((pa.ArrowInvalid, OverflowError)):
            make_fast()
        return
    assert_same_tables(make_fast(), expected)


def reference_tables(records: list[Record], name: str, share: Any = None,
                     files: Callable[[Record], str] | None = None) -> dict[str, Any]:
    """Every table of a decoding task (packets, errors, connections, messages, retained;
    or retain_events for a share) from the pure loop's ``records`` (read with stream
    ends), the reference way: CaptureTables.add record by record (never its compiled
    add_many), each column through ``pa.array``."""
    import pyarrow as pa

    from mqttwire.spark.columns import reference_array
    from mqttwire.spark.connection_shares import RETAIN_EVENTS, ShareTables
    from mqttwire.spark.derive import CaptureTables
    from mqttwire.spark.schema import ERRORS, TABLES

    tables = CaptureTables(name) if share is None else ShareTables(name)
    for rec in records:
        tables.add(rec)
    retained = tables.finish()
    packets = reference_packets_table(records, files)
    out = {"packets": packets,
           "errors": packets.filter(pa.compute.not_equal(packets["kind"], "packet"))
           .select(ERRORS.names).cast(ERRORS)}
    rows = {"connections": tables.connections, "messages": tables.messages}
    if share is None:
        rows["retained"] = retained
    else:
        rows["retain_events"] = tables.retain_events()
    for table, done in rows.items():
        schema = RETAIN_EVENTS if table == "retain_events" else TABLES[table]
        out[table] = pa.Table.from_arrays(
            [reference_array([row[f.name] for row in done], f) for f in schema],
            schema=schema)
    return out


def decoded_tables(batches: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """decode_capture's batches gathered into one table each (those it made none of:
    empty)."""
    import pyarrow as pa

    from mqttwire.spark.connection_shares import RETAIN_EVENTS
    from mqttwire.spark.schema import TABLES

    schemas = dict(TABLES, retain_events=RETAIN_EVENTS)
    got: dict[str, list[Any]] = {}
    for table, batch in batches:
        got.setdefault(table, []).append(batch)
    return {table: pa.Table.from_batches(got.get(table, []), schema=schemas[table])
            for table in schemas}


def assert_same_decoded(fast: dict[str, Any], reference: dict[str, Any]) -> None:
    """The tables of reference_tables equal those decode_capture made."""
    for table, expected in reference.items():
        assert_same_tables(fast[table], expected)


def check_decoded(raw: bytes | FileChain, make_chain: Callable[[], FileChain] | None,
                  name: str, ports: Iterable[int], payload_limit: int | None,
                  version: int | None, share: Any = None) -> None:
    """decode_capture's tables of ``raw`` (a capture's bytes; or, with ``make_chain``, a
    set's files) through the columnar path (the compiled loop's columns and derived
    tables, no Record per packet) equal the reference tables of the pure loop's
    records (read with the Cython codec, with stream ends)."""
    import pyarrow as pa

    from mqttwire.spark import columnar, decoding

    assert columnar.AVAILABLE  # with the Cython codec: built, else a failure
    ports = list(ports)
    keep = None if share is None or share.count == 1 else share.keeps
    unconnected = share is None or share.count == 1 or share.index == 0
    if make_chain is None:
        reference = reference_records(raw, name, ports, payload_limit, cython_codec(),
                                      version, 1 << 20, True, keep, unconnected)
        files = None
        source: Any = io.BytesIO(raw)  # type: ignore[arg-type]
    else:
        handler = MqttStreams(name, ports=ports, codec=cython_codec(),
                              payload_limit=payload_limit, version=version,
                              stream_ends=True, keep=keep, unconnected=unconnected)
        used = make_chain()
        reference = list(_read_pure_chain(used, handler))
        files = lambda r: used.file_of(r.frame)  # noqa: E731
        source = make_chain()
    try:
        expected = reference_tables(reference, name, share, files)
    except (pa.ArrowInvalid, OverflowError):
        with pytest.raises((pa.ArrowInvalid, OverflowError)):
            list(decoding.decode_capture(source, name, ports=ports,
                                         payload_limit=payload_limit, version=version,
                                         share=share))
        return
    decoded = decoding.decode_capture(source, name, ports=ports, payload_limit=payload_limit,
                                      version=version, share=share)
    assert_same_decoded(decoded_tables(decoded), expected)
