"""One capture file over several Spark tasks: read in byte ranges, each connection's
frames brought together in a few rows, decoded per connection.

A capture larger than the split size (``read_tables``' ``split_size``) is read like this:

1. **Ranges**: each task reads the frames of one byte range of the file and gathers
   those that hold a TCP segment or an IP fragment by connection
   (:func:`mqttwire.capture.sections.range_sections`: the compiled loop where it is
   built, its pure twin otherwise; the 4-tuple, the same for both directions, is the
   key: :func:`flow_key`; every IP fragment has the empty key).  It returns **one row
   per connection and range** (:func:`range_rows`): the connection's frames of the
   range as one pcapng section and their numbers within the range as an array; a row
   is cut at :data:`PIECE_BYTES`.  Plus one row of facts about the range, with each
   connection key's first frame there.  What crosses the JVM is a few rows of large
   byte strings, not a row per frame: on the 200 MB benchmark capture (16 connections,
   9 ranges), 153 rows instead of 1.17 million (benchmarks/history/capture.md).
2. **The shuffle** (a DataFrame's ``repartition`` by capture and connection key, then
   ``sortWithinPartitions`` by capture, connection, range and piece: the rows are few,
   and the JVM only moves their bytes) brings each connection's rows into one
   partition; the result is kept on the executors' disks (``localCheckpoint``,
   ``DISK_ONLY``), which every later job reads instead of running the ranges again.
3. **The check** (driver, which collects the facts rows):
   :func:`~mqttwire.capture.ranges.check_chain` proves, from the ranges' facts, that
   they read the file's own records; a file that fails it, or whose range met a format
   error, is read whole by one task instead (the ordinary path), which reports the real
   error if there is one.  A frame's number is its number within its range plus the
   frames of the ranges before.
4. **The connection numbers**: a connection's number is its rank among all the
   capture's TCP connections by the frame that opened it, which only the reassembler
   can tell, and which must be known before the tables are written.  The driver
   guesses them from the facts (:func:`guessed_numbers`: each key's first frame opened
   its one connection), which is right for most captures.
5. **Per connection** (one job over the shuffle output): each task feeds its rows,
   capture by capture, to the ordinary decoder (:func:`decode_rows`:
   :func:`~mqttwire.capture.read_with`, compiled loop or pure, over the rows' sections
   one after the other, then one last frame at the time of the capture's last frame, so
   that open streams end as in a whole-file read), with the guessed connection numbers,
   and the ordinary derived tables; then it writes its tables as the whole-file tasks
   do (:mod:`.parquet`), and reports the frames that opened its connections.  When
   those are not the guess (a 4-tuple used again, a first segment that opens nothing),
   the files written are dropped and the job runs again with the numbers found
   (:meth:`SplitRead.written`): the shuffle output read twice, as it always was before.
   Staged for Spark's writer instead (:meth:`SplitRead.staged`), the frames that opened
   the connections are found first by a job of their own (:func:`openings_task`: the
   reader and reassembler over the rows, each connection ignored as it opens, as a
   share's task ignores the other shares' connections, :mod:`.connection_shares`).  The retained
   messages: each task returns its latest retained PUBLISH per topic with its
   :data:`~mqttwire.spark.derive.RetainOrder` (table ``retain_events``, as a share
   does: :mod:`.connection_shares`), and the latest per topic over the tasks is kept.

The tables are the same as a whole-file read's (tests/spark/test_split.py compares them
table by table, with both codecs), with one limit: the reassembler forgets the oldest
closed connections past 65,536 (``TcpReassembler.max_closed``), and a task counts only
its own; a late segment of a closed connection, after more than 65,536 others closed,
may be taken differently.  One connection's traffic is always one task's: a capture of
one busy connection does not spread.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, cast

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

from ..capture import MqttStreams, Record, read_with
from ..capture.link import LINKTYPE_RAW
from ..capture.pcap import CaptureFormatError
from ..capture.ranges import RangeRead, chain_problem, plan_ranges
from ..capture.sections import Piece, flow_key, range_sections
from ..capture.sets import FileChain
from ..capture.tcp import RST
from ..capture.writers import ipv4_packet, tcp_header
from .connection_shares import RETAIN_EVENTS, ShareTables
from .decoding import Batch, Decoding, FilesOf, FileStats, retain_event_batches, table_batches
from .tasks import STAGED_OUT, Counters, TaskTotals

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame, SparkSession

    from .inputs import CaptureFile

__all__ = ["FACTS", "PIECE_BYTES", "RETAIN_EVENTS", "ROWS", "FileSplit", "SplitRead",
           "check_file", "decode_rows", "flow_key", "guessed_numbers", "openings_of",
           "range_rows", "read_split", "retained"]

#: The connection key of a range's facts row (a connection's key is empty, 12 or 36
#: bytes long).
FACTS = b"facts"

#: A connection's frames of one range are cut into rows of about this many bytes: a
#: row is one value in the JVM and in a Python worker, which hold it whole.
PIECE_BYTES = 32 << 20

#: A shuffled row's key: capture, connection key, range, piece (from 0).
Key = tuple[str, bytes, int, int]
#: A shuffled row's value: the frames' numbers within the range (array of int64, native
#: order) and their pcapng section; for a facts row, None and the facts as JSON.
Value = tuple["bytes | None", "bytes | str"]
Row = tuple[Key, Value]


# ---------------------------------------------------------------------------------------
# Step 1: a range's rows

def range_rows(f: BinaryIO, capture: str, index: int, start: int, end: int,
               piece_bytes: int = PIECE_BYTES, member: int = 0,
               label: str | None = None, compiled: bool = True) -> Iterator[Row]:
    """The rows of range ``index`` (``[start, end)``) of the capture in ``f``: a row per
    connection (and per ``piece_bytes`` of its frames) holding its frames that hold a
    TCP segment or IP fragment (:func:`~mqttwire.capture.sections.range_sections`),
    then the row of the range's facts (key ``(capture, FACTS, index, 0)``: the
    :class:`~mqttwire.capture.ranges.RangeRead` attributes that
    :func:`~mqttwire.capture.ranges.chain_problem` checks, the time of its last frame,
    the number of its last frame that holds a segment or fragment, ``problem`` when it
    cannot be used, and ``first_frames``: each connection's first frame there, by key in hex,
    from which the driver guesses the connections' numbers).  ``member``: for a set of
    files read as one capture, which of its files ``f`` is (its ranges are numbered on
    from the earlier files'), and ``label`` its name, for the errors.  ``compiled``:
    whether the compiled loop reads the range (where it is built), else the pure
    one."""
    facts: dict[str, Any] = {"range": index, "start": start, "end": end, "member": member}
    first: dict[str, int] = {}
    result = range_sections(f, start, end, label or capture, piece_bytes, compiled)
    rows = size = 0
    try:
        for key, piece, numbers, section in result:
            if not piece and key:
                first[key.hex()] = array("q", numbers[:8])[0]
            rows += 1
            size += len(numbers) + len(section)
            yield (capture, key, index, piece), (numbers, section)
        facts.update(rows=rows + 1, bytes=size)
        read = result.read
        assert read is not None
        facts.update({name: getattr(read, name) for name in _CHECKED})
        facts.update(last_ts=result.last_ts, last_parsed=result.last_parsed,
                     first_frames=first)
        if result.problem is not None:
            facts["problem"] = result.problem
    except CaptureFormatError as exc:
        facts["problem"] = str(exc)
    yield (capture, FACTS, index, 0), (None, json.dumps(facts))

#: The RangeRead attributes that chain_problem reads.
_CHECKED = ("size", "format", "first", "start", "end", "sync", "next", "count",
            "late_head_block")


# ---------------------------------------------------------------------------------------
# Step 4: the check


class FileSplit(NamedTuple):
    """What the ranges of one file (or set of files) showed: the number of each range's
    first frame less one, the time of the capture's last frame and the number of its
    last frame that holds a segment or fragment (when and where a whole-file read ends
    the open streams); or ``problem``, why the file must be read whole.  For a set,
    ``names`` are its files' and ``starts`` the numbers of their first frames."""

    offsets: list[int]
    end_ts: int
    end_frame: int
    problem: str | None = None
    names: tuple[str, ...] = ()
    starts: tuple[int, ...] = ()

    def files_of(self) -> FilesOf | None:
        """The file of each of some records, for a set (as its FileChain says)."""
        if len(self.names) < 2:
            return None
        chain = FileChain([(name, _no_opener) for name in self.names])
        chain.starts, chain.names = list(self.starts), list(self.names)
        return chain.files_of


def _no_opener() -> BinaryIO:
    raise AssertionError("a split set's files are not opened through its FileChain")


def check_file(facts: Sequence[dict[str, Any]], names: Sequence[str] = ()) -> FileSplit:
    """:class:`FileSplit` from the facts rows of one file's ranges (any order), or of
    a set's (``names``: its files, in order; each file's ranges are checked as a file's
    chain)."""
    facts = sorted(facts, key=lambda fact: fact["range"])
    problem = next((fact["problem"] for fact in facts if fact.get("problem")), None)
    if problem is None:
        for member, ranges in groupby(facts, key=lambda fact: fact.get("member", 0)):
            problem = chain_problem(cast("Sequence[RangeRead]",
                                         [SimpleNamespace(**fact) for fact in ranges]))
            if problem is not None:
                if names:  # a set's
                    problem = f"{names[member]}: {problem}"
                break
    if problem is not None:
        return FileSplit([], 0, 0, problem)
    offsets = []
    starts: list[int] = []
    total = end_ts = end_frame = 0
    for fact in facts:
        if fact.get("member", 0) == len(starts):
            starts.append(total + 1)
        offsets.append(total)
        if fact["last_ts"] is not None:
            end_ts = fact["last_ts"]
        if fact["last_parsed"]:
            end_frame = total + fact["last_parsed"]
        total += fact["count"]
    return FileSplit(offsets, end_ts, end_frame, None, tuple(names), tuple(starts))


# ---------------------------------------------------------------------------------------
# Steps 3 and 5: per connection

#: A frame that holds a TCP segment and changes nothing (a RST of no connection), ending
#: each stream: the decoder then ends the open streams at its time and frame, as at the
#: end of a whole file.
_END_FRAME = ipv4_packet(bytes(4), bytes(4), tcp_header(bytes(4), bytes(4), 0, 0, 0, 0,
                                                        RST, b""))
#: The place of a frame: its range shifted by this many bits, plus its number there.
_PLACE_BITS = 40


def _end_section(ts: int) -> bytes:
    piece = Piece()
    piece.add(0, ts, LINKTYPE_RAW, _END_FRAME)
    return piece.value()[1]


class _Sections:
    """A binary file read from the rows' sections, one after the other, then the end
    section; ``numbers`` gets each frame's number as its section is reached (``number``
    turns a row's range and its numbers there into the numbers kept)."""

    def __init__(self, rows: Iterable[Row], end: bytes, end_number: int,
                 number: Callable[[int, bytes], array[int]]) -> None:
        self.numbers = array("q")
        self._pieces = self._sections(rows, end, end_number, number)
        self._buf = memoryview(b"")

    def _sections(self, rows: Iterable[Row], end: bytes, end_number: int,
                  number: Callable[[int, bytes], array[int]]) -> Iterator[bytes]:
        for (_capture, _flow, index, _piece), (numbers, section) in rows:
            self.numbers.extend(number(index, cast(bytes, numbers)))
            yield cast(bytes, section)
        self.numbers.append(end_number)
        yield end

    def read(self, n: int = -1) -> bytes:
        # The reader asks for large chunks: a section is handed over as it is, without
        # joining it to the next (a copy of the capture's bytes saved).
        if not self._buf:
            piece = next(self._pieces, None)
            if piece is None:
                return b""
            self._buf = memoryview(piece)
        if n < 0 or n >= len(self._buf):
            out, self._buf = self._buf, memoryview(b"")
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        whole = cast(bytes, out.obj)  # a piece: the bytes the memoryview was made on
        return out.tobytes() if len(out) != len(whole) else whole


def _handler(capture: str, how: Decoding, codec: ModuleType | None,
             openings: list[int], decode: bool = True) -> MqttStreams:
    if codec is None:
        from .._implementation import impl

        codec = impl
    return MqttStreams(capture, ports=how.ports, codec=codec,
                       payload_limit=how.payload_limit, version=how.version,
                       stream_ends=True, openings=openings,
                       keep=None if decode else _none, unconnected=decode)


def _none(number: int) -> bool:
    return False


def _places(index: int, numbers: bytes) -> array[int]:
    out = array("q", numbers)
    shift = index << _PLACE_BITS
    return array("q", [shift + n for n in out]) if shift else out


def openings_of(capture: str, rows: Iterable[Row], how: Decoding,
                codec: ModuleType | None = None) -> list[tuple[int, int]]:
    """Step 3: the places (range, number within it) of the frames that opened the TCP
    connections of ``rows`` (some connections' rows of ``capture``, each connection's in
    order).  The connections are followed as :func:`decode_rows` follows them, but
    ignored as they open, as a share's task ignores the other shares' (.connection_shares): their
    ends are still tracked, so the frames that open them are the same, and none of
    their bytes is decoded."""
    openings: list[int] = []
    handler = _handler(capture, how, codec, openings, decode=False)
    stream = _Sections(rows, _end_section(0), 0, _places)
    for _ in read_with(cast(BinaryIO, stream), handler):
        pass
    mask = (1 << _PLACE_BITS) - 1
    return [(place >> _PLACE_BITS, place & mask)
            for place in (stream.numbers[frame - 1] for frame in openings)]


def decode_rows(capture: str, rows: Iterable[Row], split: FileSplit,
                numbers: dict[int, int], how: Decoding, stats: FileStats | None = None,
                codec: ModuleType | None = None, opened: list[int] | None = None
                ) -> Iterator[Batch]:
    """Step 5: the table batches (the five tables, ``retain_events`` instead of
    ``retained``) of some connections of ``capture``: ``rows`` are their rows, each
    connection's in order (others may come between); ``numbers`` the number of every
    connection of the capture by the frame (in the file) that opened it.  ``codec``: as
    read_capture's.  ``opened`` gets the frames (in the file) that opened the
    connections, once the batches are all made: a connection whose frame is not in
    ``numbers`` (a wrong guess, :func:`guessed_numbers`) is named ``capture#0``, and
    its frame tells the caller to decode again."""
    openings: list[int] = []
    handler = _handler(capture, how, codec, openings)
    offsets = split.offsets

    def number(index: int, found: bytes) -> array[int]:
        out = array("q", found)
        offset = offsets[index]
        return array("q", [offset + n for n in out]) if offset else out

    stream = _Sections(rows, _end_section(split.end_ts), split.end_frame, number)
    frames = stream.numbers
    ids: dict[str, str] = {}
    prefix = len(capture) + 1

    def named(local: str) -> str:
        frame = frames[openings[int(local[prefix:]) - 1] - 1]
        name = ids[local] = f"{capture}#{numbers.get(frame, 0)}"
        return name

    def records() -> Iterator[Record]:
        for rec in read_with(cast(BinaryIO, stream), handler):
            if rec.frame:
                rec.frame = frames[rec.frame - 1]
            local = rec.connection_id
            if local is not None:
                rec.connection_id = ids.get(local) or named(local)
            yield rec

    tables = ShareTables(capture)
    yield from table_batches(records(), tables, stats, split.files_of())
    yield from retain_event_batches(tables)
    if opened is not None:
        opened.extend(frames[frame - 1] for frame in openings)


def guessed_numbers(facts: Sequence[dict[str, Any]], split: FileSplit) -> dict[int, int]:
    """The numbers of a capture's connections as its ranges' facts suggest them, before
    any reassembly: each connection key's first frame in the file opened it (so one
    connection per key, opened by its first segment).  Most captures are so; where the
    reassembler opens connections otherwise (a 4-tuple used again, a first segment that
    opens nothing), the decoding finds frames not in the guess and runs again with the
    frames it found (:meth:`SplitRead.written`)."""
    first: dict[str, int] = {}
    for fact in facts:
        offset = split.offsets[fact["range"]]
        for key, number in fact.get("first_frames", {}).items():
            frame = offset + number
            if frame < first.get(key, frame + 1):
                first[key] = frame
    return {frame: n for n, frame in enumerate(sorted(first.values()), 1)}


# ---------------------------------------------------------------------------------------
# Executor side: the tasks

#: The range tasks' rows (:data:`Row` as columns): a connection's frames of one range
#: (``flow`` its key, ``numbers`` and ``section``), or a range's facts (``flow``
#: :data:`FACTS`, no ``numbers``, ``section`` the facts as JSON).
ROWS = pa.schema([("capture", pa.string()), ("flow", pa.binary()), ("range", pa.int32()),
                  ("piece", pa.int32()), ("numbers", pa.binary()), ("section", pa.binary())])
#: The DataFrame schema of :data:`ROWS`.
ROWS_DDL = ("capture string, flow binary, range int, piece int, numbers binary, "
            "section binary")
#: What the openings job returns (:func:`openings_task`).
OPENINGS_DDL = "capture string, range long, number long"


def _row_batch(row: Row) -> pa.RecordBatch:
    (capture, flow, index, piece), (numbers, section) = row
    data = section.encode() if isinstance(section, str) else section
    return pa.RecordBatch.from_arrays(
        [pa.array([capture], pa.string()), pa.array([flow], pa.binary()),
         pa.array([index], pa.int32()), pa.array([piece], pa.int32()),
         pa.array([numbers], pa.binary()), pa.array([data], pa.binary())], schema=ROWS)


def _rows_of(batches: Iterable[pa.RecordBatch]) -> Iterator[Row]:
    """The :data:`Row` tuples of batches of :data:`ROWS` (a facts row's JSON as text)."""
    for batch in batches:
        columns = [batch.column(i) for i in range(6)]
        for i in range(batch.num_rows):
            capture, flow, index, piece, numbers = (columns[j][i].as_py() for j in range(5))
            section = columns[5][i].as_py()
            if flow == FACTS:
                yield (capture, flow, index, piece), (None, section.decode())
            else:
                yield (capture, flow, index, piece), (numbers, section)


def _range_task(tasks: list[list[tuple[Any, ...]]], progress: str | None
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function over a range of task indexes: each task's (name, path, range,
    start, end, last, member, label) rows read, a :data:`ROWS` batch per row."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        totals = TaskTotals(progress)
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for name, path, index, start, end, last, member, label in tasks[task]:
                    with open(path, "rb") as f:
                        for row in range_rows(f, name, index, start, end, member=member,
                                              label=label):
                            yield _row_batch(row)
                    totals.bytes += end - start
                    totals.files += 1 if last else 0
                    totals.done()
    return run


def _by_capture(rows: Iterable[Row]) -> Iterator[tuple[str, Iterator[Row]]]:
    """A partition's rows (sorted by key) by capture, the facts rows left out."""
    return groupby((row for row in rows if row[0][1] != FACTS), key=lambda row: row[0][0])


def openings_task(how: Decoding) -> Callable[[Iterator[pa.RecordBatch]],
                                             Iterator[pa.RecordBatch]]:
    """mapInArrow function over a partition of shuffled rows (:data:`ROWS`): (capture,
    range, number) of each connection's opening frame."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for capture, group in _by_capture(_rows_of(batches)):
            found = openings_of(capture, group, how)
            if found:
                yield pa.RecordBatch.from_pydict(
                    {"capture": [capture] * len(found),
                     "range": [index for index, _ in found],
                     "number": [number for _, number in found]},
                    schema=pa.schema([("capture", pa.string()), ("range", pa.int64()),
                                      ("number", pa.int64())]))
    return run


def _decode_task(splits: dict[str, FileSplit], numbers: dict[str, dict[int, int]],
                 how: Decoding, out: Any, report_openings: bool
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function over a partition of shuffled rows: ``out`` (the pipeline's
    task output: its ``write`` and ``report``) of its good files' table batches, then
    the task's report; with ``report_openings``, a WRITTEN row (table ``_opened``) of
    (capture, frame) of every connection's opening frame, as JSON."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        totals = TaskTotals(out.progress)
        opened: list[tuple[str, int]] = []

        def tables() -> Iterator[Batch]:
            for capture, group in _by_capture(_rows_of(batches)):
                if capture in splits:
                    stats = FileStats()
                    frames: list[int] = []
                    yield from decode_rows(capture, group, splits[capture],
                                           numbers[capture], how, stats, opened=frames)
                    opened.extend((capture, frame) for frame in frames)
                    totals.records += stats.records
                    totals.packets += stats.packets
                    totals.errors += stats.errors
                    totals.done()

        yield from out.write(tables())
        yield out.report(totals)
        if report_openings:
            from .parquet import WRITTEN

            yield pa.RecordBatch.from_arrays(
                [pa.array([OPENED]), pa.array([json.dumps(opened)]),
                 pa.array([0], pa.int64())], schema=WRITTEN)
    return run


#: The table name of a decoding task's row of the frames that opened its connections.
OPENED = "_opened"


# ---------------------------------------------------------------------------------------
# Driver side


@dataclass
class SplitRead:
    """The split files of a run, once their ranges were read, shuffled and checked."""

    #: The files read in ranges and decoded per connection.
    files: list[CaptureFile]
    #: The files whose ranges failed the check: to be read whole.
    fallback: list[CaptureFile]
    #: The shuffled rows (every file's, :data:`ROWS`), sorted by key in each partition,
    #: kept on the executors' disks (a local checkpoint).
    shuffled: DataFrame
    splits: dict[str, FileSplit]
    #: Per good file, the number of each connection by the frame that opened it: as
    #: guessed from the ranges' facts (:func:`guessed_numbers`) until a decoding found
    #: otherwise (``exact``).
    numbers: dict[str, dict[int, int]]
    how: Decoding
    #: The rows of the range tasks and their bytes (what crosses the shuffle).
    shuffle_rows: int = 0
    shuffle_bytes: int = 0
    #: Whether ``numbers`` are the reassembler's own (found by a decoding or by the
    #: openings job, :meth:`exact_numbers`), not a guess.
    exact: bool = False
    #: How many times the connections were decoded (1, or 2 after a wrong guess).
    decodings: int = 0

    def line(self) -> str:
        """What was split, for stderr."""
        return (f"{len(self.files)} capture(s) split, {self.shuffle_rows:,} rows "
                f"({self.shuffle_bytes / (1 << 20):.1f} MiB) through the shuffle"
                + (", decoded twice (connections not opened by their first frames)"
                   if self.decodings > 1 else "")
                + (f"; read whole: {', '.join(f.name for f in self.fallback)}"
                   if self.fallback else ""))

    def read_totals(self) -> Any:
        """The files and bytes that the range tasks read (of the files split; those
        read whole instead count where they are read), as the pipeline's Counters."""
        from .set_files import SetFile

        return Counters(files=sum(len(f.members) if isinstance(f, SetFile) else 1
                                  for f in self.files),
                        bytes=sum(f.size for f in self.files))

    def written(self, out: Any) -> list[tuple[Any, ...]]:
        """Run step 5, each task writing its files (``out``: the pipeline's task output,
        PartFiles.write); their WRITTEN rows and reports.  One read of the shuffle output
        when the guessed connection numbers were right (the tasks report the frames that
        opened them); else the files written are dropped (never committed) and the
        connections decoded again with the numbers found."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from .parquet import WRITTEN

        if not self.files:
            return []
        while True:
            task = _decode_task(self.splits, self.numbers, self.how, out, True)
            rows = [tuple(row) for row in self.shuffled.mapInArrow(
                task, from_arrow_schema(WRITTEN)).collect()]
            self.decodings += 1
            # A set: a task run again (a retry, speculation) reports its frames again.
            opened: dict[str, set[int]] = {name: set() for name in self.splits}
            for row in rows:
                if row[0] == OPENED:
                    for capture, frame in json.loads(row[1]):
                        opened[capture].add(frame)
            numbers = {name: {frame: n for n, frame in enumerate(sorted(frames), 1)}
                       for name, frames in opened.items()}
            if self.exact or numbers == self.numbers:
                return [row for row in rows if row[0] != OPENED]
            self.numbers, self.exact = numbers, True

    def exact_numbers(self) -> None:
        """The connection numbers by the reassembler (a job over the shuffle output
        that finds the frames that opened them, step 3), for :meth:`staged`, which
        cannot decode again."""
        if self.exact or not self.files:
            return
        opened: dict[str, list[int]] = {name: [] for name in self.splits}
        for capture, index, number in self.shuffled.mapInArrow(
                openings_task(self.how), OPENINGS_DDL).collect():
            if capture in self.splits:
                opened[capture].append(self.splits[capture].offsets[index] + number)
        self.numbers = {name: {frame: n for n, frame in enumerate(sorted(frames), 1)}
                        for name, frames in opened.items()}
        self.exact = True

    def staged(self, spark: SparkSession) -> DataFrame:
        """Step 5 as a lazy DataFrame of STAGED rows (:func:`~.decoding.stage`) and the
        tasks' reports, with the connection numbers found first
        (:meth:`exact_numbers`)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        from .schema import STAGED

        self.exact_numbers()
        task = _decode_task(self.splits, self.numbers, self.how, STAGED_OUT, False)
        return self.shuffled.mapInArrow(task, from_arrow_schema(STAGED))


def read_split(spark: SparkSession, files: list[CaptureFile], split_size: int,
               how: Decoding, cores: int, progress: str | None = None) -> SplitRead:
    """Steps 1, 2 and 4 of the module docstring for ``files`` (local paths, each larger
    than ``split_size``), as DataFrame jobs: the range tasks run, their rows are
    shuffled by connection, sorted and kept on the executors' disks (a local
    checkpoint, which the later jobs read), and the driver reads the facts rows; the
    connection numbers are guessed from the facts (:func:`guessed_numbers`); step 5
    waits for :meth:`SplitRead.written` (which checks the guess) or
    :meth:`SplitRead.staged`.  ``cores``: Spark's default parallelism; ``progress``:
    a directory for the progress lines (the pipeline's)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from .inputs import local_path
    from .set_files import SetFile

    listing = []
    names: dict[str, list[str]] = {}
    for f in files:
        members = f.members if isinstance(f, SetFile) else [f]
        names[f.name] = [m.name for m in members] if isinstance(f, SetFile) else []
        index = 0
        for member, m in enumerate(members):
            ranges = plan_ranges(m.size, split_size)
            for i, (start, end) in enumerate(ranges):
                listing.append((f.name, local_path(m.uri), index, start, end,
                                i == len(ranges) - 1, member, m.name))
                index += 1
    # A task reads about split_size bytes (several small files of a set, or a range);
    # the shuffle has a partition per range, at most four per core (a set of many small
    # files has more ranges than connections).  The ranges are dealt into the tasks in
    # order, as parallelize() slices a list.
    total = sum(f.size for f in files)
    count = min(len(listing), max(cores, -(-total // split_size)))
    tasks = [listing[i * len(listing) // count:(i + 1) * len(listing) // count]
             for i in range(count)]
    partitions = max(cores, min(len(listing), 4 * cores))
    # mapInArrow's input batches of one row each: a connection's rows are up to
    # PIECE_BYTES, and Arrow's binary columns end at 2 GiB a batch.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1")
    ranged = spark.range(count, numPartitions=count).mapInArrow(
        _range_task(tasks, progress), ROWS_DDL)
    # Checkpointed lazily: the facts job below computes every partition, keeps it on
    # disk and collects the facts rows in the same pass (eagerly, a count would compute
    # them and the facts job read them all back).
    shuffled = (ranged.repartition(partitions, "capture", "flow")
                .sortWithinPartitions("capture", "flow", "range", "piece")
                .localCheckpoint(eager=False, storageLevel=StorageLevel.DISK_ONLY))
    facts: dict[str, list[dict[str, Any]]] = {f.name: [] for f in files}
    for capture, fact in (shuffled.where(F.col("flow") == F.lit(FACTS))
                          .select("capture", "section").collect()):
        facts[capture].append(json.loads(bytes(fact)))
    splits = {name: check_file(found, names[name]) for name, found in facts.items()}
    good = [f for f in files if splits[f.name].problem is None]
    fallback = [f for f in files if splits[f.name].problem is not None]
    numbers = {f.name: guessed_numbers(facts[f.name], splits[f.name]) for f in good}
    rows = sum(fact.get("rows", 0) for found in facts.values() for fact in found)
    size = sum(fact.get("bytes", 0) for found in facts.values() for fact in found)
    return SplitRead(good, fallback, shuffled,
                     {f.name: splits[f.name] for f in good}, numbers, how, rows, size)


def retained(events: DataFrame) -> DataFrame:
    """The retained table of split captures from their ``retain_events``: per capture
    and topic, the latest retained PUBLISH by RetainOrder, unless it removed the
    message (an empty payload)."""
    from pyspark.sql import functions as F

    from .schema import RETAINED

    names = [field.name for field in RETAINED]
    order = F.struct("order_frame", "order_connection", "order_seen")
    latest = events.groupBy("capture", "topic").agg(
        F.max_by(F.struct(*names), order).alias("_latest"))
    return (latest.select(*[F.col("_latest")[name].alias(name) for name in names])
            .where(F.coalesce(F.col("payload_length"), F.lit(0)) > 0))
