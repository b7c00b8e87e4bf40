"""The aggregates the run's summary shows (:mod:`.report`), computed by one of two engines
that give the same figures (tests/spark/test_pipeline.py compares them on the scenario
captures, whole and split):

- :class:`SparkAggregates`: Spark jobs over the tables' DataFrames, wherever they are;
- :class:`ArrowAggregates`: Arrow's streaming engine (Acero) over the Parquet files on the
  driver's own filesystem, when the driver can see them.

Why two: with the Spark jobs, most of the summary's time is the JVM's first Parquet reads
(class loading and compiling), which Arrow does not pay (benchmarks/history/capture.md
has the figures).  Both stream the rows and
keep only aggregates (a group per topic, per QoS and status, per latency value) and the
first rows of two lists; neither gathers the tables.

Every figure is a list of dicts (or a number); orders are total, so both engines give
the same rows: the "first" lists are ordered by time and then by columns that tell any
two rows apart.  The median latency is exact in both (Spark's ``median``; here
:func:`median_of_counts`, Spark's interpolation over the same value counts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    from pyspark.sql import DataFrame

__all__ = ["ArrowAggregates", "SparkAggregates", "median_of_counts"]

TOP = 10  # rows in the "top" and "first" lists

#: The order of the "first exchanges that did not complete" (messages) and of the "first
#: errors" (errors): by time, then columns that make it total.
UNFINISHED_ORDER = ("ts", "connection_id", "direction", "stream_offset")
ERRORS_ORDER = ("capture", "ts_ns", "connection_id", "direction", "stream_offset", "frame",
                "kind")
UNFINISHED_COLUMNS = ("capture", "connection_id", "client_id", "direction", "topic", "qos",
                      "packet_id", "status", "ack_reason_code", "puback_ts", "pubrec_ts",
                      "pubrel_ts")
ERRORS_COLUMNS = ("capture", "kind", "connection_id", "direction", "stream_offset",
                  "length", "error")
UNFINISHED_STATUS = ("incomplete", "failed")


def median_of_counts(counts: Sequence[tuple[float, int]]) -> float | None:
    """The exact median of values given as (value, how many) pairs, sorted by value,
    interpolated as Spark's ``percentile``/``median`` do: position (n - 1) / 2, and
    between two values ``(hi - p) * low + (p - lo) * high``.  None when there are none."""
    n = sum(c for _, c in counts)
    if not n:
        return None
    position = (n - 1) * 0.5
    lo, hi = math.floor(position), math.ceil(position)

    def at(index: int) -> float:
        seen = 0
        for value, count in counts:
            seen += count
            if seen > index:
                return value
        raise AssertionError("index beyond the counts")

    low = at(lo)
    if hi == lo:
        return low
    high = at(hi)
    if high == low:
        return low
    return (hi - position) * low + (position - lo) * high


class SparkAggregates:
    """The figures as Spark jobs over the tables (DataFrames by table name)."""

    def __init__(self, tables: dict[str, DataFrame]) -> None:
        self.tables = tables

    def rows(self, table: str) -> int:
        """The rows of ``table``."""
        return int(self.tables[table].count())

    def overview(self) -> list[dict[str, Any]]:
        """Rows by kind, packet type and protocol level: ``count``."""
        return _dicts(self.tables["packets"].groupBy("kind", "packet_type",
                                                     "protocol_version").count().collect())

    def error_kinds(self) -> list[dict[str, Any]]:
        """Rows of the errors table by kind: ``count`` (a capture that could not be
        opened is there only, not in packets)."""
        return _dicts(self.tables["errors"].groupBy("kind").count().collect())

    def known(self) -> list[dict[str, Any]]:
        """Connections by ``joined_mid_stream``, ``version_source`` and ``transport``:
        ``count``."""
        return _dicts(self.tables["connections"].groupBy(
            "joined_mid_stream", "version_source", "transport").count().collect())

    def top(self) -> list[dict[str, Any]]:
        """The TOP topics by PUBLISH packets (then by topic): messages, published,
        delivered, payload_bytes."""
        from pyspark.sql import functions as F

        direction = F.col("direction")
        return _dicts(
            self.tables["messages"].groupBy("topic")
            .agg(F.count(F.lit(1)).alias("messages"),
                 F.sum(F.when(direction == "c2s", 1).otherwise(0)).alias("published"),
                 F.sum(F.when(direction == "s2c", 1).otherwise(0)).alias("delivered"),
                 F.sum("payload_length").alias("payload_bytes"))
            .orderBy(F.desc("messages"), "topic").limit(TOP).collect())

    def qos(self) -> list[dict[str, Any]]:
        """Messages by QoS and status: n, median_ms, max_ms, first_us, last_us."""
        from pyspark.sql import functions as F

        return _dicts(
            self.tables["messages"].groupBy("qos", "status")
            .agg(F.count(F.lit(1)).alias("n"),
                 F.median("latency_ms").alias("median_ms"),
                 F.max("latency_ms").alias("max_ms"),
                 F.min(F.unix_micros("ts")).alias("first_us"),
                 F.max(F.unix_micros("ts")).alias("last_us"))
            .orderBy("qos", "status").collect())

    def retained_sent(self) -> int:
        """PUBLISH packets with RETAIN set from clients."""
        from pyspark.sql import functions as F

        return int(self.tables["messages"].where(
            F.col("retain") & (F.col("direction") == "c2s")).count())

    def unmatched_acks(self) -> int:
        """Acknowledgements that answer no PUBLISH of the captures (connections)."""
        from pyspark.sql import functions as F

        return int(self.tables["connections"].agg(F.sum("unmatched_acks")).collect()[0][0]
                   or 0)

    def unfinished(self) -> list[dict[str, Any]]:
        """The first TOP exchanges that did not complete."""
        from pyspark.sql import functions as F

        # times as microseconds since the epoch (Spark's rows would hold them in the
        # session's time zone)
        return _dicts(self.tables["messages"]
                      .where(F.col("status").isin(*UNFINISHED_STATUS))
                      .orderBy(*UNFINISHED_ORDER).limit(TOP)
                      .select(*[F.unix_micros(c).alias(c) if c.endswith("_ts") else c
                                for c in UNFINISHED_COLUMNS]).collect())

    def bad(self) -> list[dict[str, Any]]:
        """The captures with a "capture_error" row, sorted, each with its error (the
        least, should a capture have several): capture, error."""
        from pyspark.sql import functions as F

        return sorted(_dicts(self.tables["errors"].where(F.col("kind") == "capture_error")
                             .groupBy("capture").agg(F.min("error").alias("error"))
                             .collect()), key=lambda r: r["capture"])

    def first_errors(self) -> list[dict[str, Any]]:
        """The first TOP rows of the errors table."""
        return _dicts(self.tables["errors"].orderBy(*ERRORS_ORDER).limit(TOP)
                      .select(*ERRORS_COLUMNS).collect())

    def rate(self, lo: int, width: int) -> list[dict[str, Any]]:
        """PUBLISH packets per bucket of ``width`` microseconds from ``lo``, and
        direction: bucket, direction, count."""
        from pyspark.sql import functions as F

        bucket = F.floor((F.unix_micros("ts") - F.lit(lo)) / F.lit(width)).alias("bucket")
        return _dicts(self.tables["messages"].where(F.col("ts").isNotNull())
                      .groupBy(bucket, "direction").count().collect())


def _dicts(rows: list[Any]) -> list[dict[str, Any]]:
    return [r.asDict() for r in rows]


class ArrowAggregates:
    """The figures with Arrow over the tables' Parquet files under ``root`` (a local
    directory holding one directory per table, ``packets`` partitioned by capture)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _dataset(self, table: str) -> Any:
        import pyarrow.dataset as ds  # type: ignore[import-untyped]

        from .schema import TABLES

        # packets is partitioned by capture (a directory per capture, the column not in
        # the files); the others hold their whole schema.  Files whose names begin with
        # "_" or "." are not data (_SUCCESS), as in Spark.
        if table == "packets":
            return ds.dataset(f"{self.root}/{table}", format="parquet", partitioning="hive")
        return ds.dataset(f"{self.root}/{table}", format="parquet", schema=TABLES[table])

    def rows(self, table: str) -> int:
        """The rows of ``table`` (from the files' footers)."""
        return int(self._dataset(table).count_rows())

    def _aggregate(self, table: str, reads: Sequence[str], columns: dict[str, Any],
                   keys: Sequence[str], aggregates: list[tuple[Any, ...]],
                   where: Any = None) -> pa.Table:
        """Acero's streaming group-by over the rows of ``table`` that match ``where``,
        reading only the columns ``reads``: ``columns`` (name to expression) computed
        per row, grouped by ``keys`` (some of those names); ``aggregates`` as (column
        name or [], function, name), the function without the "hash_" that Acero wants
        when there are keys."""
        from pyarrow import acero

        nodes = [acero.Declaration("scan", acero.ScanNodeOptions(
            self._dataset(table), columns=list(reads), filter=where))]
        if where is not None:  # the scan's filter only skips what statistics rule out
            nodes.append(acero.Declaration("filter", acero.FilterNodeOptions(where)))
        nodes += [
            acero.Declaration("project", acero.ProjectNodeOptions(list(columns.values()),
                                                                  list(columns))),
            acero.Declaration("aggregate", acero.AggregateNodeOptions(
                [(column, f"hash_{function}" if keys else function, None, name)
                 for column, function, name in aggregates], keys=list(keys)))]
        return acero.Declaration.from_sequence(nodes).to_table(use_threads=True)

    def _counts(self, table: str, keys: Sequence[str], where: Any = None,
                reads: Sequence[str] = ()) -> pa.Table:
        """Rows of ``table`` matching ``where`` by ``keys``: column ``count``."""
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        return self._aggregate(table, [*keys, *reads], {k: pc.field(k) for k in keys}, keys,
                               [([], "count_all", "count")], where)

    def overview(self) -> list[dict[str, Any]]:
        return _rows(self._counts("packets", ("kind", "packet_type", "protocol_version")))

    def error_kinds(self) -> list[dict[str, Any]]:
        return _rows(self._counts("errors", ("kind",)))

    def known(self) -> list[dict[str, Any]]:
        return _rows(self._counts("connections",
                                  ("joined_mid_stream", "version_source", "transport")))

    def top(self) -> list[dict[str, Any]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        direction = pc.field("direction")  # never null in the messages table
        table = self._aggregate(
            "messages", ["topic", "direction", "payload_length"],
            {"topic": pc.field("topic"),
             "c2s": (direction == "c2s").cast(pa.int64()),
             "s2c": (direction == "s2c").cast(pa.int64()),
             "payload_length": pc.field("payload_length")},
            ["topic"],
            [([], "count_all", "messages"), ("c2s", "sum", "published"),
             ("s2c", "sum", "delivered"), ("payload_length", "sum", "payload_bytes")])
        order = _sort_indices(table, [("messages", "descending"), ("topic", "ascending")])
        return _rows(table.take(order[:TOP]).select(
            ["topic", "messages", "published", "delivered", "payload_bytes"]))

    def qos(self) -> list[dict[str, Any]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        # Counted per latency value too, for the exact median (as Spark does it).
        table = self._aggregate(
            "messages", ["qos", "status", "latency_ms", "ts"],
            {"qos": pc.field("qos"), "status": pc.field("status"),
             "latency_ms": pc.field("latency_ms"),
             "ts": pc.field("ts").cast(pa.int64())},  # microseconds since the epoch
            ["qos", "status", "latency_ms"],
            [([], "count_all", "n"), ("ts", "min", "first_us"), ("ts", "max", "last_us")])
        groups: dict[tuple[Any, Any], dict[str, Any]] = {}
        latencies: dict[tuple[Any, Any], list[tuple[float, int]]] = {}
        for r in table.to_pylist():
            key = (r["qos"], r["status"])
            g = groups.setdefault(key, {"qos": key[0], "status": key[1], "n": 0,
                                        "median_ms": None, "max_ms": None,
                                        "first_us": None, "last_us": None})
            g["n"] += r["n"]
            g["first_us"] = _least(g["first_us"], r["first_us"])
            g["last_us"] = _most(g["last_us"], r["last_us"])
            if r["latency_ms"] is not None:
                latencies.setdefault(key, []).append((r["latency_ms"], r["n"]))
        for key, counts in latencies.items():
            counts.sort()
            groups[key]["median_ms"] = median_of_counts(counts)
            groups[key]["max_ms"] = counts[-1][0]
        return [groups[key] for key in sorted(groups, key=_nulls_first)]

    def retained_sent(self) -> int:
        import pyarrow.compute as pc

        where = pc.field("retain") & (pc.field("direction") == "c2s")
        table = self._counts("messages", (), where, reads=("retain", "direction"))
        return int(table.column("count")[0].as_py())

    def unmatched_acks(self) -> int:
        import pyarrow.compute as pc

        table = self._aggregate("connections", ["unmatched_acks"],
                                {"unmatched_acks": pc.field("unmatched_acks")}, [],
                                [("unmatched_acks", "sum", "n")])
        return int(table.column("n")[0].as_py() or 0)

    def _first(self, table: str, order: Sequence[str], columns: Sequence[str],
               where: Any = None) -> list[dict[str, Any]]:
        """The first TOP rows of ``table`` by ``order``, kept batch by batch: never more
        than TOP rows and a batch at once."""
        import pyarrow as pa

        keys = [(name, "ascending") for name in order]
        held = None
        for batch in self._dataset(table).to_batches(
                columns=list(dict.fromkeys([*order, *columns])), filter=where):
            part = pa.Table.from_batches([batch])
            if held is not None:
                part = pa.concat_tables([held, part])
            held = part.take(_sort_indices(part, keys)[:TOP])
        if held is None:
            return []
        held = held.select(list(columns))
        return _rows(held.cast(pa.schema([  # times as microseconds since the epoch
            pa.field(f.name, pa.int64()) if pa.types.is_timestamp(f.type) else f
            for f in held.schema])))

    def unfinished(self) -> list[dict[str, Any]]:
        import pyarrow.compute as pc

        return self._first("messages", UNFINISHED_ORDER, UNFINISHED_COLUMNS,
                           pc.field("status").isin(list(UNFINISHED_STATUS)))

    def bad(self) -> list[dict[str, Any]]:
        import pyarrow.compute as pc

        table = self._aggregate("errors", ["capture", "kind", "error"],
                                {"capture": pc.field("capture"), "error": pc.field("error")},
                                ["capture"], [("error", "min", "error")],
                                pc.field("kind") == "capture_error")
        return sorted(_rows(table.select(["capture", "error"])), key=lambda r: r["capture"])

    def first_errors(self) -> list[dict[str, Any]]:
        return self._first("errors", ERRORS_ORDER, ERRORS_COLUMNS)

    def rate(self, lo: int, width: int) -> list[dict[str, Any]]:
        import pyarrow as pa
        import pyarrow.compute as pc

        ts = pc.field("ts")
        # ts >= lo, so the integer division is the floor
        bucket = pc.divide(pc.subtract(ts.cast(pa.int64()), lo), width)
        return _rows(self._aggregate("messages", ["ts", "direction"],
                                     {"bucket": bucket, "direction": pc.field("direction")},
                                     ["bucket", "direction"], [([], "count_all", "count")],
                                     ts.is_valid()))


def _sort_indices(table: pa.Table, keys: Sequence[tuple[str, str]]) -> pa.Array:
    """Indices that sort ``table`` by ``keys`` ((column, order) pairs) with nulls as
    Spark places them: first in ascending order, last in descending order.  (A null
    placement per key needs pyarrow 25; before each key comes its validity instead.)"""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns, sort_keys = {}, []
    for i, (name, order) in enumerate(keys):
        valid = pc.is_valid(table.column(name))
        # ascending: False (null) before True; descending: True before False
        columns[f"valid{i}"], columns[f"key{i}"] = valid, table.column(name)
        sort_keys += [(f"valid{i}", order), (f"key{i}", order)]
    return pc.sort_indices(pa.table(columns), sort_keys=sort_keys)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _most(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def _nulls_first(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A sort key putting None first, as Spark's ascending order does."""
    return tuple((value is not None, value) for value in key)
