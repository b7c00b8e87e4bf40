"""One capture file over several Spark tasks: read in byte ranges, decoded per connection.

A capture larger than the split size (``read_tables``' ``split_size``) is read like this:

1. **Ranges** (one Spark job, run when the tables are defined): each task reads the
   frames of one byte range of the file (:func:`mqttwire.capture.split.read_range`,
   which finds where the range's first record begins), and returns each frame that holds
   a TCP segment or an IP fragment as a row keyed by its connection (the 4-tuple, the
   same for both directions: :func:`flow_key`) with its place in the file (range, number
   within the range), and one row of facts about the range (:func:`range_rows`).  The
   rows are kept on disk.
2. **The check** (driver): :func:`~mqttwire.capture.split.check_chain` proves, from the
   ranges' facts, that they read the file's own records; a file that fails it, or whose
   range met a format error, is read whole by one task instead (the ordinary path),
   which reports the real error if there is one.  A frame's number is its number within
   its range plus the frames of the ranges before.
3. **Per connection**: Spark's shuffle brings each connection's rows together
   (``repartition`` by capture and connection key, sorted by place in the file); each
   task feeds its rows, capture by capture, to the ordinary decoder (:func:`decode_rows`:
   :func:`~mqttwire.capture.read_with` over a pcapng stream made on the fly of those
   frames, then one last frame at the time of the capture's last frame, so that open
   streams end as in a whole-file read) and the ordinary
   :class:`~mqttwire.spark.derive.CaptureTables`.
4. **What spans connections**: a connection's number is its rank among all the
   capture's TCP connections by the frame that opened it.  Each task returns the frames
   that opened its connections (table ``openings``) and names connections
   "<capture>#@<that frame>" until :func:`renumber` (a join) gives them their number.
   The retained messages: each task returns its latest retained PUBLISH per topic with
   its :data:`~mqttwire.spark.derive.RetainOrder` (table ``retain_events``, as a share
   does: :mod:`.shares`), and :func:`retained` keeps the latest per topic over the tasks
   (an aggregation), as CaptureTables does.

The tables are the same as a whole-file read's (tests/spark/test_split.py compares them
table by table), with one limit: the reassembler forgets the oldest closed connections
past 65,536 (``TcpReassembler.max_closed``), and a task counts only its own; a late
segment of a closed connection, after more than 65,536 others closed, may be taken
differently.  One connection's traffic is always one task's: a capture of one busy
connection does not spread.
"""

from __future__ import annotations

import json
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, cast

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

from ..capture import IPFragment, MqttStreams, Record, TcpSegment, parse_frame, read_with
from ..capture.link import LINKTYPE_RAW
from ..capture.pcap import MAX_FRAME, CaptureFormatError
from ..capture.split import RangeRead, chain_problem, plan_ranges, read_range
from ..capture.synth import ipv4_packet, pcapng_block, tcp_header
from ..capture.tcp import RST
from .batches import (
    BATCH_ROWS,
    Batch,
    Decoding,
    FileStats,
    retain_event_batches,
    table_batches,
)
from .schema import RETAINED
from .shares import RETAIN_EVENTS, ShareTables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .inputs import CaptureFile

__all__ = ["EXTRA_TABLES", "OPENINGS", "RETAIN_EVENTS", "SEGMENTS", "FileSplit", "SplitRead",
           "check_file", "connection_ids", "decode_rows", "flow_key", "range_rows",
           "read_split", "renumber", "retained"]

#: What the range tasks return: one row per frame that holds a TCP segment or an IP
#: fragment, and one row per range with ``facts`` (JSON) set and the rest null.
SEGMENTS = pa.schema([
    ("capture", pa.string()),
    ("flow", pa.binary()),  # flow_key: the connection's 4-tuple, either direction
    ("range", pa.int32()),
    ("number", pa.int64()),  # the frame's number within its range, from 1
    ("ts", pa.int64()),  # ns since the epoch
    ("linktype", pa.int32()),
    ("data", pa.binary()),  # the frame as captured
    ("facts", pa.string()),
])

#: The frame that opened each TCP connection of a split capture (MQTT or not).
OPENINGS = pa.schema([("capture", pa.string()), ("frame", pa.int64())])

#: The tables that a split decode returns besides the five (with the schemas of these).
EXTRA_TABLES = {"openings": OPENINGS, "retain_events": RETAIN_EVENTS}


# ---------------------------------------------------------------------------------------
# Step 1: a range's frames


def flow_key(seg: TcpSegment | IPFragment) -> bytes:
    """The key that brings a TCP connection's segments together: its two ends (address
    and port) in a fixed order, so that both directions have the same key.  Every IP
    fragment has the empty key (each is a record of its own)."""
    if not isinstance(seg, TcpSegment):
        return b""
    a = seg.src + seg.sport.to_bytes(2, "big")
    b = seg.dst + seg.dport.to_bytes(2, "big")
    return a + b if a <= b else b + a


def range_rows(f: BinaryIO, capture: str, index: int, start: int,
               end: int) -> Iterator[pa.RecordBatch]:
    """The :data:`SEGMENTS` rows of range ``index`` (``[start, end)``) of the capture in
    ``f``: its frames that hold a TCP segment or IP fragment, then the row of its facts
    (the :class:`~mqttwire.capture.split.RangeRead` attributes that
    :func:`~mqttwire.capture.split.chain_problem` checks, the time of its last frame, the
    number of its last frame that holds a segment or fragment, and ``problem`` when it
    cannot be used)."""
    facts: dict[str, Any] = {"range": index, "start": start, "end": end}
    columns: tuple[list[Any], ...] = ([], [], [], [], [])
    flows, numbers, times, linktypes, datas = columns
    last_ts = None
    last_parsed = 0
    try:
        result = read_range(f, start, end, capture)
        for number, _offset, ts, linktype, data, _orig_len, _iface in result:
            last_ts = ts
            seg = parse_frame(linktype, data)
            if seg is None:
                continue
            last_parsed = number
            if not 0 <= ts < 1 << 63 or len(data) > MAX_FRAME - 64:
                facts["problem"] = (f"frame {number} of the range does not fit a pcapng "
                                    "block (a time before 1970, or too long)")
                break
            flows.append(flow_key(seg))
            numbers.append(number)
            times.append(ts)
            linktypes.append(linktype)
            datas.append(bytes(data))
            if len(numbers) >= BATCH_ROWS:
                yield _segments_batch(capture, index, columns)
                for column in columns:
                    column.clear()
        facts.update({name: getattr(result, name) for name in _CHECKED})
        facts.update(last_ts=last_ts, last_parsed=last_parsed)
    except CaptureFormatError as exc:
        facts["problem"] = str(exc)
    if numbers:
        yield _segments_batch(capture, index, columns)
    yield pa.RecordBatch.from_arrays(
        [pa.array([capture], pa.string())]
        + [pa.nulls(1, field.type) for field in list(SEGMENTS)[1:-1]]
        + [pa.array([json.dumps(facts)], pa.string())], schema=SEGMENTS)

#: The RangeRead attributes that chain_problem reads.
_CHECKED = ("size", "format", "first", "start", "end", "sync", "next", "count",
            "late_head_block")


def _segments_batch(capture: str, index: int, columns: tuple[list[Any], ...]
                    ) -> pa.RecordBatch:
    flows, numbers, times, linktypes, datas = columns
    n = len(numbers)
    return pa.RecordBatch.from_arrays(
        [pa.array([capture] * n, pa.string()), pa.array(flows, pa.binary()),
         pa.array([index] * n, pa.int32()), pa.array(numbers, pa.int64()),
         pa.array(times, pa.int64()), pa.array(linktypes, pa.int32()),
         pa.array(datas, pa.binary()), pa.nulls(n, pa.string())], schema=SEGMENTS)


# ---------------------------------------------------------------------------------------
# Step 2: the check


class FileSplit(NamedTuple):
    """What the ranges of one file showed: the number of each range's first frame less
    one, the time of the file's last frame and the number of its last frame that holds a
    segment or fragment (when and where a whole-file read ends the open streams); or
    ``problem``, why the file must be read whole."""

    offsets: list[int]
    end_ts: int
    end_frame: int
    problem: str | None = None


def check_file(facts: Sequence[dict[str, Any]]) -> FileSplit:
    """:class:`FileSplit` from the facts rows of one file's ranges (any order)."""
    facts = sorted(facts, key=lambda fact: fact["range"])
    problem = next((fact["problem"] for fact in facts if fact.get("problem")), None)
    if problem is None:
        problem = chain_problem(cast(Sequence[RangeRead],
                                     [SimpleNamespace(**fact) for fact in facts]))
    if problem is not None:
        return FileSplit([], 0, 0, problem)
    offsets = []
    total = end_ts = end_frame = 0
    for fact in facts:
        offsets.append(total)
        if fact["last_ts"] is not None:
            end_ts = fact["last_ts"]
        if fact["last_parsed"]:
            end_frame = total + fact["last_parsed"]
        total += fact["count"]
    return FileSplit(offsets, end_ts, end_frame)


# ---------------------------------------------------------------------------------------
# Step 3: per connection

#: The Section Header Block of the streams made for the decoder (pcapng, little-endian:
#: byte-order magic, version 1.0, section length unknown).
_SHB = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
#: A frame that holds a TCP segment and changes nothing (a RST of no connection), ending
#: each stream: the decoder then ends the open streams at its time and frame, as at the
#: end of a whole file.
_END_FRAME = ipv4_packet(bytes(4), bytes(4), tcp_header(bytes(4), bytes(4), 0, 0, 0, 0,
                                                        RST, b""))
#: An Enhanced Packet Block's fields before the data: interface, time (high, low),
#: captured and original length.
_EPB_HEAD = struct.Struct("<IIIII")


def _idb(linktype: int) -> bytes:
    """An Interface Description Block with nanosecond times (option if_tsresol 9)."""
    return pcapng_block(1, struct.pack("<HHI", linktype, 0, 0)
                        + struct.pack("<HHB3xHH", 9, 1, 9, 0, 0))


def _epb(interface: int, ts: int, data: bytes) -> bytes:
    return pcapng_block(6, _EPB_HEAD.pack(interface, ts >> 32, ts & 0xFFFFFFFF, len(data),
                                          len(data)) + data)


class _Pieces:
    """A binary file read from an iterator of byte strings."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._buf = bytearray()

    def read(self, n: int = -1) -> bytes:
        buf = self._buf
        while n < 0 or len(buf) < n:
            piece = next(self._pieces, None)
            if piece is None:
                break
            buf += piece
        if n < 0 or n >= len(buf):
            out = bytes(buf)
            buf.clear()
        else:
            out = bytes(buf[:n])
            del buf[:n]
        return out


class _SplitTables(ShareTables):
    """CaptureTables for part of a capture's connections, as a share's (the latest
    retained PUBLISH per topic is chosen over all the parts), with connection ids
    "<capture>#@<frame that opened it>"."""

    def _connection_rank(self, connection_id: str | None) -> int:
        return int(connection_id.rsplit("#@", 1)[1]) if connection_id else 0


def decode_rows(capture: str, rows: Iterable[Sequence[Any]], split: FileSplit,
                how: Decoding, stats: FileStats | None = None,
                codec: ModuleType | None = None) -> Iterator[Batch]:
    """The table batches (the five tables, with placeholder connection ids, and the
    :data:`EXTRA_TABLES`) of some connections of ``capture``: ``rows`` are their
    :data:`SEGMENTS` rows, each connection's in file order (others may come between).
    ``codec``: as read_capture's."""
    if codec is None:
        from .._impl import impl

        codec = impl
    numbers = array("q")  # the file's number of each frame of the stream, from 1
    openings: list[int] = []
    handler = MqttStreams(capture, ports=how.ports, codec=codec,
                          payload_limit=how.payload_limit, version=how.version,
                          stream_ends=True, openings=openings)

    def stream() -> Iterator[bytes]:
        yield _SHB
        interfaces: dict[int, int] = {}
        for row in rows:
            linktype = row[5]
            interface = interfaces.get(linktype)
            if interface is None:
                interface = interfaces[linktype] = len(interfaces)
                yield _idb(linktype)
            numbers.append(split.offsets[row[2]] + row[3])
            yield _epb(interface, row[4], row[6])
        if LINKTYPE_RAW not in interfaces:
            interfaces[LINKTYPE_RAW] = len(interfaces)
            yield _idb(LINKTYPE_RAW)
        numbers.append(split.end_frame)
        yield _epb(interfaces[LINKTYPE_RAW], split.end_ts, _END_FRAME)

    ids: dict[str, str] = {}
    prefix = capture + "#"

    def placeholder(local: str) -> str:
        frame = numbers[openings[int(local[len(prefix):]) - 1] - 1]
        name = ids[local] = f"{capture}#@{frame}"
        return name

    def records() -> Iterator[Record]:
        for rec in read_with(cast(BinaryIO, _Pieces(stream())), handler):
            if rec.frame:
                rec.frame = numbers[rec.frame - 1]
            local = rec.connection_id
            if local is not None:
                rec.connection_id = ids.get(local) or placeholder(local)
            yield rec

    tables = _SplitTables(capture)
    yield from table_batches(records(), tables, stats)
    yield from retain_event_batches(tables)
    if openings:
        frames = [numbers[frame - 1] for frame in openings]
        yield "openings", pa.RecordBatch.from_arrays(
            [pa.array([capture] * len(frames), pa.string()), pa.array(frames, pa.int64())],
            schema=OPENINGS)


# ---------------------------------------------------------------------------------------
# Executor side: the tasks


def _range_task(counters: Any) -> Callable[[Iterator[pa.RecordBatch]],
                                           Iterator[pa.RecordBatch]]:
    """mapInArrow function over (name, path, range, start, end, last) rows."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for name, path, index, start, end, last in zip(
                    *(c.to_pylist() for c in batch.columns)):
                with open(path, "rb") as f:
                    yield from range_rows(f, name, index, start, end)
                counters.bytes.add(end - start)
                if last:
                    counters.files.add(1)
    return run


def _decode_task(splits: dict[str, FileSplit], how: Decoding,
                 counters: Any) -> Callable[[Iterator[pa.RecordBatch]],
                                            Iterator[pa.RecordBatch]]:
    """mapInArrow function over a partition of SEGMENTS rows sorted by capture, flow
    and place: staged batches of every table."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from .batches import stage

        def rows() -> Iterator[tuple[Any, ...]]:
            for batch in batches:
                yield from zip(*(c.to_pylist() for c in batch.columns))

        stats = FileStats()
        for capture, group in groupby(rows(), key=lambda row: row[0]):
            for table, batch in decode_rows(capture, group, splits[capture], how, stats):
                yield stage(table, batch)
        counters.records.add(stats.records)
        counters.packets.add(stats.packets)
        counters.errors.add(stats.errors)
    return run


# ---------------------------------------------------------------------------------------
# Driver side


@dataclass
class SplitRead:
    """The split files of a run, once their ranges were read and checked."""

    #: The files read in ranges and decoded per connection.
    files: list[CaptureFile]
    #: The files whose ranges failed the check: to be read whole.
    fallback: list[CaptureFile]
    #: Every table's batches of the split files (STAGED), placeholder ids included.
    staged: DataFrame | None
    #: The range tasks' rows, kept on disk until :meth:`unpersist`.
    segments: DataFrame

    def unpersist(self) -> None:
        self.segments.unpersist()


def read_split(spark: SparkSession, files: list[CaptureFile], split_size: int,
               how: Decoding, counters: Any) -> SplitRead:
    """Steps 1 and 2 of the module docstring for ``files`` (local paths, each larger
    than ``split_size``), and step 3 as a lazy DataFrame."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from .inputs import local_path
    from .schema import STAGED

    rows = []
    for f in files:
        ranges = plan_ranges(f.size, split_size)
        rows += [(f.name, local_path(f.uri), index, start, end, index == len(ranges) - 1)
                 for index, (start, end) in enumerate(ranges)]
    listing = spark.createDataFrame(
        spark.sparkContext.parallelize(rows, len(rows)),
        "name string, path string, range int, start long, end long, last boolean")
    segments = listing.mapInArrow(_range_task(counters), from_arrow_schema(SEGMENTS))
    segments.persist(StorageLevel.DISK_ONLY)
    facts: dict[str, list[dict[str, Any]]] = {f.name: [] for f in files}
    for row in segments.where(F.col("facts").isNotNull()).select("capture", "facts").collect():
        facts[row["capture"]].append(json.loads(row["facts"]))
    splits = {name: check_file(found) for name, found in facts.items()}
    good = [f for f in files if splits[f.name].problem is None]
    fallback = [f for f in files if splits[f.name].problem is not None]
    for f in fallback:  # its bytes are counted again when it is read whole
        counters.files.add(-1)
        counters.bytes.add(-f.size)
    staged = None
    if good:
        names = [f.name for f in good]
        parts = max(spark.sparkContext.defaultParallelism,
                    sum(len(splits[n].offsets) for n in names))
        staged = (segments.where(F.col("facts").isNull() & F.col("capture").isin(names))
                  .repartition(parts, "capture", "flow")
                  .sortWithinPartitions("capture", "flow", "range", "number")
                  .mapInArrow(_decode_task({n: splits[n] for n in names},
                                           how, counters),
                              from_arrow_schema(STAGED)))
    return SplitRead(good, fallback, staged, segments)


def connection_ids(openings: DataFrame) -> DataFrame:
    """The connection ids of split captures from their ``openings``: ``_placeholder``
    ("<capture>#@<frame>") and ``_id`` ("<capture>#<n>", n the rank of the frame that
    opened the connection among the capture's)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rank = F.row_number().over(Window.partitionBy("capture").orderBy("frame"))
    # One partition: the ids are a row per connection and every table joins them by
    # broadcast.  The window's shuffle leaves spark.sql.shuffle.partitions (200) of
    # them, which adaptive execution does not coalesce once the ids are cached
    # (Tables.persist): then every table's join read 200 partitions, mostly empty, in
    # 200 tasks.
    return openings.select(
        F.concat(F.col("capture"), F.lit("#@"), F.col("frame").cast("string"))
        .alias("_placeholder"),
        F.concat(F.col("capture"), F.lit("#"), rank.cast("string")).alias("_id"),
    ).coalesce(1)


def renumber(table: DataFrame, ids: DataFrame) -> DataFrame:
    """``table`` with the placeholder connection ids of split captures replaced by their
    numbers (``ids``, from :func:`connection_ids`; other ids are kept)."""
    from pyspark.sql import functions as F

    joined = table.join(F.broadcast(ids), table["connection_id"] == ids["_placeholder"],
                        "left")
    return joined.select(*[
        F.coalesce(ids["_id"], table["connection_id"]).alias(name)
        if name == "connection_id" else table[name] for name in table.columns])


def retained(events: DataFrame) -> DataFrame:
    """The retained table of split captures from their ``retain_events``: per capture
    and topic, the latest retained PUBLISH by RetainOrder, unless it removed the
    message (an empty payload)."""
    from pyspark.sql import functions as F

    names = [field.name for field in RETAINED]
    order = F.struct("order_frame", "order_connection", "order_seen")
    latest = events.groupBy("capture", "topic").agg(
        F.max_by(F.struct(*names), order).alias("_latest"))
    return (latest.select(*[F.col("_latest")[name].alias(name) for name in names])
            .where(F.coalesce(F.col("payload_length"), F.lit(0)) > 0))
