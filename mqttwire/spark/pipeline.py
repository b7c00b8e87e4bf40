"""The pipeline: captures in, Parquet tables and a summary out.

How it runs:

1. The driver lists the inputs through Hadoop (:mod:`.inputs`); unreadable ones are kept,
   to be reported by name and to get an error row.
2. Each capture file up to the split size is one Spark task, but small files share
   tasks, packed by size as Spark's file sources pack them (:mod:`.packing`), a task
   decoding its files one after the other, each its own capture; each *set* of files
   that are pieces of one capture (a ring buffer, a split: :mod:`.sets`) is a task of its
   own, its files read in order as one capture.  The task
   decodes its file
   with :func:`~.batches.decode_capture` inside ``mapInArrow`` and returns Arrow batches
   of every table: the packets and errors, and the connections, messages and retained
   messages derived from them in the same pass (all of an MQTT connection is in one
   file, so the derivation needs no shuffle).  A file (or set) larger than the split size
   that tasks open by path is read in byte ranges by several tasks and decoded per TCP
   connection after a shuffle (:mod:`.split`), for the same tables; by default only on
   a cluster's master (:data:`CLUSTER_SPLIT_SIZE`).
   Files on a local or shared filesystem are *streamed*: the task gets the path and reads
   the file in chunks, so a capture of any size fits in bounded memory.  Files on other
   filesystems (hdfs:, s3a:, ...) come through Spark's ``binaryFile`` source, which hands
   the task the whole file and refuses files over 2 GiB.
3. With the output on a local path (one that every executor mounts, on a cluster), the
   task (a split file's decoding tasks too) writes its batches itself as Parquet part
   files of every table (:mod:`.parquet`; ``packets`` partitioned by capture) and returns only their
   names; the driver moves them into place (``writer="tasks"``).  Then a file of at least
   ``share_size`` bytes is read by several tasks, each keeping a share of its connections
   (:mod:`.connection_shares`), and the driver chooses the retained rows from theirs.  Otherwise (an
   ``hdfs:``/``s3a:`` output, or ``writer="spark"``) the task returns each
   batch *staged*: packed as one row (table name, the batch as a compressed Arrow IPC
   stream, :func:`~.batches.stage`); Spark persists these rows on disk only, and writes
   each table from them, its batches unpacked by a ``mapInArrow``
   (:func:`~.batches.unstage`).  The first way moves no row through the JVM: on the
   200 MB benchmark capture it saves the staging, persisting, unstaging and Spark's
   Parquet writer (benchmarks/history/capture.md).
4. A summary is printed and written to summary.md with a chart (:mod:`.report`), computed
   from the tables as written (Parquet reads only the columns each figure needs).

Why staged rows on disk: one decoding pass feeds five tables, so its output must be kept
between the writes, and one task's output is a whole capture file's worth.  Persisting
the decoded rows themselves (one struct column per table) at a memory level made Spark
build its columnar cache of the whole partition in the heap, with every struct value
serialised row by row: the heap needed grew with the size of the largest file (a 200 MB
capture ran out of a 1 GiB heap), and building the cache cost more than the decoding.
A staged row is one batch of at most 8192 rows, a few hundred kB: Spark streams them to
disk and back one by one (see the serialiser setting in :mod:`.startup`), so a task's
memory is bounded whatever the file's size, and the cache costs little to build.

:func:`read_tables` is steps 1 to 3 without the writes: the five tables as lazily
evaluated DataFrames, for a notebook or a ``spark-submit`` job; :func:`run_pipeline` (the
command) persists them, writes them and summarises them.

Only DataFrame operations run the pipeline (no SparkContext, RDD, accumulator or py4j),
so the same code runs on a classic session, local or on a cluster, and on a Spark Connect
session (:func:`~.startup.connect_session`), for the same tables.  The tasks are a
``spark.range`` of one row per task in as many partitions, each row the index of its
task in a list that the function carries (what ``parallelize`` with a slice per task
did), under ``mapInArrow``.  The tasks report their totals (files, bytes, records,
packets, errors) as rows of their output (:data:`STATS`), not through accumulators; the
progress lines come from small files that the writing tasks leave in the run's staging
directory, which the driver reads (when it sees the output: the tasks write the tables).
What the client of a Connect session cannot ask the JVM (the cores) comes from the conf
or a DataFrame job (:func:`~.startup.cores_of`).  On a Connect session the inputs are
the server's paths: the local listing and the grouping into sets run in a task
(:func:`on_server`), and the tables are written by Spark's writer (the client cannot
move the tasks' files into place on the server's filesystem).
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import json
import os
import pickle
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass, field, fields
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from .inputs import CaptureFile, Skipped, list_inputs, local_path, name_captures

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    from pyspark.sql import DataFrame, SparkSession

    from .batches import Batch, Decoding
    from .connection_shares import Share
    from .packing import Packing
    from .split import SplitRead
    from .startup import ClassArchive

__all__ = ["STATS", "TABLE_NAMES", "Counters", "PipelineOptions",
           "PipelineResult", "SHARE_SIZE", "Tables", "on_server", "read_tables",
           "run_pipeline"]

#: The tables written, in order (each to OUT/<name>).
TABLE_NAMES = ("packets", "connections", "messages", "retained", "errors")

#: What mapInArrow runs: Arrow batches in, Arrow batches out.
ArrowMap = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]

#: The table name of a task's report rows in its output, beside the tables' rows (staged,
#: or the WRITTEN rows of its files): its totals as JSON (:class:`Counters`).
STATS = "_stats"

#: The default ``share_size`` (.connection_shares): smaller files are read by one task
#: each.  A share pays only where the decoding is long next to a task's start and a second
#: reading of the file; measured on a 200 MB capture only (benchmarks/history/capture.md),
#: so a judgement.
SHARE_SIZE = 32 << 20

#: The driver JVM's just-in-time compiler stopped at its first tier (C1) when the tasks
#: write the tables on a local master: the JVM then only starts and schedules the tasks
#: (the summary's figures are Arrow's there: .figures), work too short for the
#: optimising compiler (C2) to pay back the CPU it takes from the tasks on the same
#: cores.  On make_capture.py's 200 MB, the
#: whole run took 8 to 12 s less CPU so (benchmarks/history/capture.md); where the JVM does the
#: heavy lifting (a split file's shuffle, Spark's Parquet writer) C1 measured slower, so
#: those runs keep the JVM's default.
QUICK_JIT = "-XX:TieredStopAtLevel=1"

#: The split size (.split) when none is given and the master is a cluster's (not local):
#: Hadoop's block size and Spark's ``maxPartitionBytes``.  On a local master a file is
#: not split unless asked: shares (.connection_shares) cost less there
#: (benchmarks/history/capture.md).
CLUSTER_SPLIT_SIZE = 128 << 20

#: binaryFile refuses files over 2 GiB (and Arrow's binary columns end there too).
BINARY_FILE_LIMIT = (1 << 31) - 1


@dataclass
class PipelineOptions:
    """What ``mqttwire pipeline`` was asked to do (see the CLI's help for each)."""

    inputs: Sequence[str]
    out: str
    master: str | None = None  # None: spark-submit's, else local[*]
    #: a Spark Connect server's URL (sc://HOST:PORT): the run is its session's
    remote: str | None = None
    ports: Sequence[int] = (1883,)
    payload_limit: int | None = None  # cut PUBLISH payloads to this; None keeps them whole
    version: int | None = None  # the level to assume where a CONNECT is missing
    reader: str = "auto"  # auto, stream, binaryfile
    #: bytes; larger files are split (.split); None: never; "auto": CLUSTER_SPLIT_SIZE
    #: on a master that is not local, else never (:meth:`split_for`)
    split_size: int | str | None = None
    #: bytes; a file at least this large is read by several tasks, each keeping a share
    #: of its connections, when the tasks write the tables (.connection_shares); None: never
    share_size: int | None = SHARE_SIZE
    writer: str = "auto"  # tasks, spark, auto (see _write_directly)
    progress_interval: float = 5.0
    summary_dir: str | None = None  # default: OUT when local, else the current directory
    driver_memory: str | None = None  # spark.driver.memory, e.g. "2g"; None: Spark's
    executor_memory: str | None = None  # spark.executor.memory; None: Spark's
    #: a directory for the driver JVM's class archive (.startup.ClassArchive); None: none
    jvm_cache: str | None = None
    #: which input files are pieces of one capture: auto, never, one (.sets)
    group: str = "auto"
    #: whether the JVM's start-up lines (its warnings, log4j's profile) reach stderr
    jvm_lines: bool = True

    def split_for(self, master: str) -> int | None:
        """The split size in bytes (None: never) for a run on ``master``."""
        if self.split_size != "auto":
            return cast("int | None", self.split_size)
        return None if master.startswith("local") else CLUSTER_SPLIT_SIZE

    def memory_conf(self) -> dict[str, str]:
        """The Spark settings of the memory options that were given."""
        conf = {"spark.driver.memory": self.driver_memory,
                "spark.executor.memory": self.executor_memory}
        return {key: value for key, value in conf.items() if value is not None}

    def session_conf(self, archive: ClassArchive | None = None) -> dict[str, str]:
        """The settings of a session that the pipeline makes for itself: the memory
        options, :data:`QUICK_JIT` when the master is local and the tasks will write the
        tables (a local output, no split, not the Spark writer), and ``archive``'s JVM
        option."""
        from .startup import default_master

        conf = self.memory_conf()
        master = self.master or default_master() or ""
        java = []
        if (master.startswith("local") and self.writer != "spark"
                and not self.split_for(master) and local_path(self.out) is not None):
            java.append(QUICK_JIT)
        if archive is not None:
            java.append(archive.java_option())
        if java:
            conf["spark.driver.extraJavaOptions"] = " ".join(java)
        return conf


@dataclass
class PipelineResult:
    """What a run did: the files, the totals and where the output is."""

    files: list[CaptureFile]
    records: int
    packets: int
    error_records: int
    elapsed: float
    summary_path: str
    chart_path: str | None
    summary_text: str
    counts: dict[str, int] = field(default_factory=dict)  # rows per table
    bad_captures: list[str] = field(default_factory=list)  # names, not read to the end
    #: Wall seconds of each phase, as the driver saw them: "list" (the inputs), "decode"
    #: (the tasks: reading, decoding, deriving, Arrow batches, then writing their Parquet
    #: files or staging to disk), "write" (moving the tasks' files into place, or Spark
    #: writing the five tables from the staged rows), "summary" (its figures and chart).
    timings: dict[str, float] = field(default_factory=dict)
    #: Why each of ``bad_captures`` could not be read to its end, by name.
    failures: dict[str, str] = field(default_factory=dict)
    #: The files of the input folders (and globs) that are not captures, not read.
    skipped: list[Skipped] = field(default_factory=list)


@dataclass
class Counters:
    """Totals of the decoding: what the tasks report (:data:`STATS` rows), summed."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    packets: int = 0
    errors: int = 0

    def add(self, other: Counters) -> None:
        for name in _COUNTER_NAMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def json(self) -> str:
        return json.dumps(astuple(self))

    @classmethod
    def parse(cls, text: str | builtins.bytes) -> Counters:
        return cls(*json.loads(text))

    @classmethod
    def of_reports(cls, texts: Iterable[str | builtins.bytes]) -> Counters:
        """The sum of reports (:meth:`json`)."""
        total = cls()
        for text in texts:
            total.add(cls.parse(text))
        return total


_COUNTER_NAMES = tuple(f.name for f in fields(Counters))


class _TaskTotals(Counters):
    """A task's running totals; with ``progress`` (a directory the driver reads), each
    capture's end is written there too, as this task's file (:func:`_progress_of`)."""

    def __init__(self, progress: str | None = None) -> None:
        super().__init__()
        self.progress = progress
        self.name = uuid.uuid4().hex

    def done(self) -> None:
        """A capture (or a range) finished: tell the driver's progress lines."""
        if self.progress is None:
            return
        with contextlib.suppress(OSError):  # progress is only shown: never fail for it
            os.makedirs(self.progress, exist_ok=True)
            path = os.path.join(self.progress, self.name)
            with open(path + ".part", "w") as f:
                f.write(self.json())
            os.replace(path + ".part", path + ".json")


def _progress_of(directory: str) -> Counters:
    """The totals the tasks wrote under ``directory`` so far (:class:`_TaskTotals`)."""
    total = Counters()
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError):
                    with open(os.path.join(directory, name)) as f:
                        total.add(Counters.parse(f.read()))
    return total


class _Progress:
    """A driver thread that prints the run's totals every ``interval`` seconds while
    decoding runs, as ``current()`` gives them."""

    def __init__(self, current: Callable[[], Counters], total_files: int, total_bytes: int,
                 interval: float, stream: Any = None) -> None:
        self.current = current
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.interval = interval
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqttwire-progress",
                                        daemon=True)

    def line(self) -> str:
        c = self.current()
        return (f"progress: {c.files}/{self.total_files} files, "
                f"{_mib(c.bytes)}/{_mib(self.total_bytes)}, "
                f"{c.packets:,} packets decoded, "
                f"{_clock(time.monotonic() - self.started)} elapsed")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.stream, flush=True)

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


# ---------------------------------------------------------------------------------------
# Executor side (these closures are pickled into the tasks)


def _file_task(name: str, opener: Callable[[], Any], size: int, how: Decoding,
               totals: _TaskTotals, share: Share | None = None, files: int = 1
               ) -> Iterator[Batch]:
    """Decode one capture file (``share`` of its connections: .shares) into its tables'
    batches; any failure to read it becomes its error row.  (A set of ``files`` files:
    ``opener`` gives their FileChain.)"""
    from .batches import FileStats, capture_error_batches, decode_capture

    stats = FileStats()
    first = share is None or share.index == 0  # the one task of the file that counts it
    opened = False
    try:
        with opener() as f:
            opened = True
            yield from decode_capture(f, name, ports=how.ports,
                                      payload_limit=how.payload_limit,
                                      version=how.version, stats=stats, share=share)
    except OSError as exc:
        if first:
            stats.errors += 1
            yield from capture_error_batches(name, f"cannot read the file: "
                                                   f"{exc.strerror or exc}", opened=opened)
    # A decoder bug must not cost the other files their results: it is reported as this
    # file's error row, with what to do about it.
    except Exception as exc:  # noqa: BLE001
        stats.errors += 1
        yield from capture_error_batches(
            name, f"decoding stopped by {type(exc).__name__}: {exc} "
                  "(an mqttwire bug: please report it with the capture)")
    if first:
        totals.files += files
        totals.bytes += size
    totals.records += stats.records
    totals.packets += stats.packets
    totals.errors += stats.errors
    totals.done()


@dataclass(frozen=True)
class _Out:
    """What a decoding task returns: ``write`` turns its tables' batches into its output
    rows (staged rows for Spark, :func:`_stage_all`, or the WRITTEN rows of the files it
    wrote itself, :meth:`.parquet.PartFiles.write`), ``report`` its totals into one row
    of the same schema (:data:`STATS`); ``progress``: a directory for the progress
    lines' files (:class:`_TaskTotals`), or None."""

    write: Callable[[Iterable[Batch]], Iterator[pa.RecordBatch]]
    report: Callable[[Counters], pa.RecordBatch]
    progress: str | None = None


def _stage_all(batches: Iterable[Batch]) -> Iterator[pa.RecordBatch]:
    """A task's output as STAGED rows (:func:`~.batches.stage`): for :func:`read_tables`."""
    from .batches import stage

    for table, batch in batches:
        yield stage(table, batch)


def _staged_report(totals: Counters) -> pa.RecordBatch:
    """A task's totals as a STAGED row."""
    import pyarrow as pa

    from .schema import STAGED

    return pa.RecordBatch.from_arrays([pa.array([STATS]), pa.array([totals.json().encode()],
                                                                    pa.binary())],
                                      schema=STAGED)


def _written_report(totals: Counters) -> pa.RecordBatch:
    """A task's totals as a WRITTEN row."""
    import pyarrow as pa

    from .parquet import WRITTEN

    return pa.RecordBatch.from_arrays([pa.array([STATS]), pa.array([totals.json()]),
                                       pa.array([0], pa.int64())], schema=WRITTEN)


STAGED_OUT = _Out(_stage_all, _staged_report)


#: A row of the streaming reader's listing: (name, path, size, problem, share, shares,
#: parts): ``parts`` the files of a set (.sets.SetFile.parts), else None.
Listed = tuple[str, "str | None", int, "str | None", int, int, "str | None"]


def _listed_files(rows: Iterable[Listed], how: Decoding, totals: _TaskTotals
                  ) -> Iterator[Batch]:
    """Open and stream each listed file (its share of the connections when ``shares`` >
    1) into its tables' batches."""
    from .batches import capture_error_batches
    from .connection_shares import Share

    for name, path, size, problem, index, count, parts in rows:
        if problem is not None:
            totals.files += 1
            totals.errors += 1
            yield from capture_error_batches(name, problem, opened=False)
            totals.done()
            continue
        share = Share(index, count) if count > 1 else None
        if parts is not None:  # a set of files, read as one capture (.sets)
            from .sets import set_opener

            opener, files = set_opener(parts)
            yield from _file_task(name, opener, size, how, totals, share, files)
            continue
        yield from _file_task(name, partial(open, path, "rb"), size, how, totals, share)


def _stream_task(tasks: list[list[Listed]], how: Decoding, out: _Out) -> ArrowMap:
    """mapInArrow function over a range of task indexes (one a partition): each task's
    listing rows (:data:`Listed`) decoded, ``out`` of their batches, then the task's
    report."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        totals = _TaskTotals(out.progress)
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from out.write(_listed_files(tasks[index], how, totals))
        yield out.report(totals)

    return run


def _binary_task(names: dict[str, str], how: Decoding, out: _Out) -> ArrowMap:
    """mapInArrow function over binaryFile's (path, content) rows."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        totals = _TaskTotals(out.progress)

        def tables() -> Iterator[Batch]:
            for batch in batches:
                paths = batch.column(0).to_pylist()
                contents = batch.column(1)
                for i, uri in enumerate(paths):
                    content = contents[i].as_buffer()
                    name = names.get(uri) or uri.rsplit("/", 1)[-1]
                    yield from _file_task(name, partial(pa.BufferReader, content),
                                          content.size, how, totals)

        yield from out.write(tables())
        yield out.report(totals)

    return run


def _server_call(payload: bytes) -> ArrowMap:
    """mapInArrow function of :func:`on_server`."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for _ in batches:
            pass
        function, args = pickle.loads(payload)
        result = pickle.dumps(function(*args))
        yield pa.RecordBatch.from_arrays([pa.array([result], pa.binary())], ["result"])

    return run


def on_server(spark: SparkSession, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` run where ``spark``'s tasks run, in one task (a DataFrame
    job), its result pickled back: for a Spark Connect session, whose client does not
    see the server's files (the local listing and the grouping of the inputs)."""
    rows = (spark.range(1, numPartitions=1)
            .mapInArrow(_server_call(pickle.dumps((function, args))), "result binary")
            .collect())
    return pickle.loads(rows[0][0])


# ---------------------------------------------------------------------------------------
# Driver side


def _plan(files: list[CaptureFile], reader: str) -> tuple[list[CaptureFile], list[CaptureFile]]:
    """Split the files between the streaming reader and binaryFile."""
    stream: list[CaptureFile] = []
    binary: list[CaptureFile] = []
    for f in files:
        local = local_path(f.uri) is not None
        if f.problem is not None:
            stream.append(f)
        elif reader == "binaryfile" or (reader == "auto" and not local):
            if f.size > BINARY_FILE_LIMIT:
                f.problem = ("over 2 GiB, too large for Spark's binaryFile source: put it "
                             "on a filesystem that every executor mounts (or a local path)")
                stream.append(f)
            else:
                binary.append(f)
        elif not local:
            f.problem = "not a local path: the streaming reader opens files by path"
            stream.append(f)
        else:
            stream.append(f)
    return stream, binary


def _decoded(spark: SparkSession, files: list[CaptureFile], how: Decoding, reader: str,
             out: _Out, out_schema: pa.Schema, cores: Callable[[], int],
             share_size: int | None = None) -> DataFrame:
    """What the tasks return (``out`` of every table's batches, in ``out_schema``, and
    each task's report), one task per file, or per share of a file of at least
    ``share_size`` bytes (.connection_shares), small files packed together (.packing)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(out_schema)
    stream, binary = _plan(files, reader)
    parts: list[DataFrame] = []
    if stream:
        # A range of task indexes, one a partition: each task its own Spark task, as
        # parallelize() with a slice per element made them.
        tasks = _tasks(cores(), stream, share_size, _packing(spark, cores))
        parts.append(spark.range(len(tasks), numPartitions=len(tasks))
                     .mapInArrow(_stream_task(tasks, how, out), schema))
    if binary:
        # Spark packs small files into shared tasks by its own rule and settings, the
        # ones the streaming reader follows (.packing); a task decodes each in turn.
        names = {f.uri: f.name for f in binary}
        raw = spark.read.format("binaryFile").load([f.uri for f in binary])
        parts.append(raw.select("path", "content").mapInArrow(
            _binary_task(names, how, out), schema))
    return _union(parts)


def _listing(cores: int, stream: list[CaptureFile], share_size: int | None
             ) -> list[Listed]:
    """The streaming reader's tasks, a row each: every file, or every share of a file of
    at least ``share_size`` bytes (.connection_shares; at most ``cores`` shares), largest
    first so that one big file does not start last."""
    from .connection_shares import share_count
    from .sets import SetFile

    rows: list[Listed] = []
    for f in sorted(stream, key=lambda f: -f.size):
        # A gzip stream reads from its start only: each share would decompress the whole
        # file, so it is one task.
        count = (1 if f.problem is not None or f.gzip
                 else share_count(f.size, share_size, cores))
        parts = f.parts() if isinstance(f, SetFile) else None
        rows += [(f.name, local_path(f.uri), f.size, f.problem, index, count, parts)
                 for index in range(count)]
    return rows


def _packing(spark: SparkSession, cores: Callable[[], int]) -> Packing:
    """Spark's file packing settings (.packing) from the session's conf (which holds
    the SQL settings and, on a classic session, the SparkConf's: spark-submit's
    ``--conf``, spark-defaults.conf); ``cores`` is asked only when the conf does not
    name the minimum number of tasks."""
    from .packing import Packing

    conf = spark.conf
    values = {key: conf.get(key, None) for key in (
        "spark.sql.files.maxPartitionBytes", "spark.sql.files.openCostInBytes",
        "spark.sql.files.minPartitionNum", "spark.sql.leafNodeDefaultParallelism",
        "spark.sql.files.maxPartitionNum")}
    named = values["spark.sql.files.minPartitionNum"] or \
        values["spark.sql.leafNodeDefaultParallelism"]
    return Packing.from_conf(values.get, 1 if named else cores())


def _packable(f: CaptureFile, share_size: int | None, cores: int) -> bool:
    """Whether ``f`` may share a task with other files: a plain file read whole by one
    task, or an input that cannot be read (its task only makes its error row).  A set
    (.sets), a gzip file (its size says little of its decoding) and a file read in
    shares (.connection_shares) stay units of their own."""
    from .connection_shares import share_count
    from .sets import SetFile

    if f.problem is not None:
        return True
    return (not isinstance(f, SetFile) and not f.gzip
            and share_count(f.size, share_size, cores) == 1)


def _tasks(cores: int, stream: list[CaptureFile], share_size: int | None,
           packing: Packing | None) -> list[list[Listed]]:
    """The streaming reader's tasks, each a list of listing rows (:func:`_listing`): the
    small files packed by ``packing`` (.packing; None: a task each), the others a task
    each (a task per share); the largest tasks first, so that one big task does not
    start last."""
    if packing is None:
        return [[row] for row in _listing(cores, stream, share_size)]
    alone = [f for f in stream if not _packable(f, share_size, cores)]
    tasks = [[row] for row in _listing(cores, alone, share_size)]
    rows = _listing(cores, [f for f in stream if _packable(f, share_size, cores)], None)
    tasks += [[rows[i] for i in task] for task in packing.pack([row[2] for row in rows])]
    tasks.sort(key=lambda task: -sum(row[2] for row in task))  # stable
    return tasks


def _count(n: int, noun: str) -> str:
    """``n`` (with thousands separators) and the noun, singular or plural as it asks."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _union(parts: list[DataFrame]) -> DataFrame:
    staged = parts[0]
    for part in parts[1:]:
        staged = staged.unionByName(part)
    return staged


@dataclass(frozen=True)
class Tables:
    """The five tables of some captures as lazily evaluated DataFrames
    (:func:`read_tables`), in the schemas of :mod:`.schema`.

    All five come from one decoding of the captures: without :meth:`persist`, every
    Spark action on a table decodes the captures again.  ``tables["packets"]`` and
    iteration over ``(name, DataFrame)`` pairs (:meth:`items`) work as on a dict."""

    packets: DataFrame
    connections: DataFrame
    messages: DataFrame
    retained: DataFrame
    errors: DataFrame
    #: The inputs as listed, one per file, with the problem of each unreadable one.
    files: list[CaptureFile]
    #: Every table's batches, staged in one DataFrame (see the module docstring), and
    #: each task's report (:data:`STATS`).
    staged: DataFrame
    #: The files split over several tasks (:mod:`.split`), or None.
    split: SplitRead | None = None
    #: The files of the input folders (and globs) that are not captures, not read.
    skipped: list[Skipped] = field(default_factory=list)

    def __repr__(self) -> str:
        return (f"<Tables {', '.join(TABLE_NAMES)} of {len(self.files)} input file(s): "
                f"{', '.join(f.name for f in self.files[:3])}"
                f"{', ...' if len(self.files) > 3 else ''}>")

    def __getitem__(self, name: str) -> DataFrame:
        if name not in TABLE_NAMES:
            raise KeyError(f"no table {name!r}: the tables are {', '.join(TABLE_NAMES)}")
        return getattr(self, name)  # type: ignore[no-any-return]

    def items(self) -> list[tuple[str, DataFrame]]:
        return [(name, getattr(self, name)) for name in TABLE_NAMES]

    def persist(self) -> Tables:
        """Keep the decoded captures (on disk, whatever their size: see the module
        docstring) for every later action on any of the five tables; returns self."""
        from pyspark import StorageLevel

        # On disk only: a memory level would unroll a task's whole output (a whole
        # capture file) in the heap before spilling it.
        self.staged.persist(StorageLevel.DISK_ONLY)
        return self

    def unpersist(self) -> Tables:
        self.staged.unpersist()
        return self

    def totals(self) -> Counters:
        """The decoding's totals (files, bytes, records, packets, errors), from the
        tasks' reports: an action (which decodes the captures, unless persisted)."""
        from pyspark.sql import functions as F

        reports = self.staged.where(F.col("table") == STATS).select("data").collect()
        total = Counters.of_reports(row[0] for row in reports)
        if self.split is not None:
            total.add(self.split.read_totals())
        return total


def read_tables(spark: SparkSession, inputs: Sequence[str], *,
                ports: Sequence[int] = (1883,), payload_limit: int | None = None,
                version: int | None = None, reader: str = "auto",
                split_size: int | None = None, group: str = "auto") -> Tables:
    """The five tables of ``inputs`` (capture files, folders or globs, local or any
    Hadoop URI) as lazily evaluated DataFrames on ``spark``: what ``mqttwire pipeline``
    writes, before it writes them.  The options are the pipeline's (PipelineOptions):
    ``payload_limit`` cuts payloads (None keeps them whole), ``version`` is the level
    assumed where a CONNECT is missing (None infers it), ``reader`` is how tasks read
    files, ``split_size`` the size (bytes) above which a file that the tasks open by
    path is read by several tasks (:mod:`.split`; None: never), ``group`` which files
    are pieces of one capture (:mod:`.sets`: auto, never, one).

    Listing the inputs runs on the driver now, and so does, for files to split, a Spark
    job that reads their ranges and checks them; the decoding waits for an action.  An
    unreadable input is not an exception: it is in ``files`` with its problem, and gets
    a "capture_error" row in ``errors`` and ``packets``.  The files of folders (and
    globs) that are not captures are not read: ``skipped`` names them (:mod:`.inputs`)."""
    _check_reading(reader, split_size, None, group)  # before Spark is used
    return _tables(spark, _Plan.make(spark, inputs, ports, payload_limit, version, reader,
                                     split_size, group=group))


def _tables(spark: SparkSession, plan: _Plan) -> Tables:
    """The five tables of ``plan``'s files, staged (see the module docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from .batches import unstage
    from .schema import STAGED, TABLES
    from .split import RETAIN_EVENTS, retained

    files, whole, split = plan.files, plan.whole, plan.split
    parts = [plan.decoded(spark, STAGED_OUT, STAGED)] if whole else []
    if split is not None and split.files:
        parts.append(split.staged(spark))
    staged = _union(parts) if parts else spark.createDataFrame([], from_arrow_schema(STAGED))

    def unstaged(name: str) -> DataFrame:
        schema = TABLES.get(name) or RETAIN_EVENTS
        return (staged.where(F.col("table") == name).select("data")
                .mapInArrow(unstage, from_arrow_schema(schema)))

    def table(name: str) -> DataFrame:
        rows = unstaged(name)
        if name == "retained" and split is not None and split.files:
            # The split files' tasks each return their latest retained PUBLISH per
            # topic, not the capture's (.split).
            rows = rows.unionByName(retained(unstaged("retain_events")))
        return rows

    return Tables(packets=table("packets"), connections=table("connections"),
                  messages=table("messages"), retained=table("retained"),
                  errors=table("errors"), files=files, staged=staged,
                  split=split, skipped=plan.skipped)


def _check_reading(reader: str, split_size: int | None, share_size: int | None,
                   group: str = "auto") -> None:
    """Raise ValueError for a bad ``reader``, ``split_size``, ``share_size`` or
    ``group``."""
    from ..capture.sets import GROUP_MODES

    if reader not in ("auto", "stream", "binaryfile"):
        raise ValueError(f"reader must be auto, stream or binaryfile, not {reader!r}")
    if group not in GROUP_MODES:
        raise ValueError(f"group must be one of {', '.join(GROUP_MODES)}, not {group!r}")
    if group == "one" and reader == "binaryfile":
        raise ValueError("group 'one' needs the files opened by path (the stream reader), "
                         "not the binaryFile reader")
    for option, value in (("split_size", split_size), ("share_size", share_size)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{option} must be a positive number of bytes or None, "
                             f"not {value!r}")


class _Cores:
    """The cores of the run's Spark (:func:`~.startup.cores_of`), asked once, when a
    step first needs them."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.value: int | None = None

    def __call__(self) -> int:
        if self.value is None:
            from .startup import cores_of

            self.value = cores_of(self.spark)
        return self.value


@dataclass
class _Plan:
    """The inputs of a run, listed, and how the tasks will read them."""

    files: list[CaptureFile]
    how: Decoding
    reader: str
    #: The files read whole, one task each (a set of files, .sets, is one SetFile).
    whole: list[CaptureFile]
    #: The files read in byte ranges (the range reads done and checked), or None.
    split: SplitRead | None
    cores: Callable[[], int]
    #: Files at least this large are read in shares when the tasks write (.connection_shares).
    share_size: int | None = None
    #: The files of the input folders (and globs) that are not captures, not read.
    skipped: list[Skipped] = field(default_factory=list)
    #: The sets of files read as one capture (.sets.set_lines), and the grouping's notes.
    sets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def make(cls, spark: SparkSession, inputs: Sequence[str], ports: Sequence[int],
             payload_limit: int | None, version: int | None, reader: str,
             split_size: int | None, share_size: int | None = None, *,
             group: str = "auto", progress: str | None = None) -> _Plan:
        from .batches import Decoding
        from .sets import SetFile, set_lines
        from .split import read_split

        skipped: list[Skipped] = []
        files, units, notes = _resolve(spark, inputs, group, reader != "binaryfile",
                                       skipped)
        # read_capture keeps no payload without a limit: the pipeline keeps them whole.
        limit = sys.maxsize if payload_limit is None else payload_limit
        how = Decoding(tuple(ports), limit, version)
        cores = _Cores(spark)
        whole = units
        split = None
        if split_size is not None and reader != "binaryfile":
            # Not a gzip file: its ranges cannot be read without all that precedes them.
            # A set of files (a ring buffer) is read the same way, each of its files in
            # ranges of its own.
            big = [f for f in units if f.problem is None and f.size > split_size
                   and all(local_path(m.uri) is not None and not m.gzip
                           for m in (f.members if isinstance(f, SetFile) else [f]))]
            if big:
                split = read_split(spark, big, split_size, how, cores(), progress)
                whole = [f for f in units if all(f is not g for g in split.files)]
        return cls(files, how, reader, whole, split, cores, share_size, skipped=skipped,
                   sets=set_lines(units), notes=notes)

    def decoded(self, spark: SparkSession, out: _Out, schema: pa.Schema) -> DataFrame:
        """The tasks of the files read whole, returning ``out`` of their batches."""
        return _decoded(spark, self.whole, self.how, self.reader, out, schema, self.cores)

    def written(self, spark: SparkSession, out: _Out) -> list[tuple[Any, ...]]:
        """Run the tasks of the files read whole, each writing its own files (``out``:
        :meth:`.parquet.PartFiles.write`), large files in shares (.connection_shares); their
        :data:`~.parquet.WRITTEN` rows, and their reports."""
        from .parquet import WRITTEN

        frame = _decoded(spark, self.whole, self.how, self.reader, out, WRITTEN, self.cores,
                         self.share_size)
        return [tuple(row) for row in frame.collect()]


def _resolve(spark: SparkSession, inputs: Sequence[str], group: str, by_path: bool,
             skipped: list[Skipped]) -> tuple[list[CaptureFile], list[CaptureFile], list[str]]:
    """The inputs listed (.inputs) and grouped into units of work (.sets): the files,
    the units, the grouping's notes; ``skipped`` gets the files of folders that are not
    captures.  On a Spark Connect session the local paths are the server's: they are
    listed, and grouped, in a task (:func:`on_server`); the other URIs through
    DataFrames."""
    from .sets import group_inputs
    from .startup import is_connect

    if not is_connect(spark):
        listed = list_inputs(spark, inputs, skipped=skipped)
        return (listed, *group_inputs(listed, group, by_path=by_path))
    local = [arg for arg in inputs if local_path(arg) is not None]
    files: list[CaptureFile] = []
    units: list[CaptureFile] = []
    notes: list[str] = []
    if local:
        # One pickle: the units are (or hold) the very files of the list.
        files, left, units, notes = on_server(spark, _list_and_group, local, group,
                                              by_path)
        skipped += left
    remote = [arg for arg in inputs if local_path(arg) is None]
    if remote:  # never grouped: only files that tasks open by path are (.sets)
        found = list_inputs(spark, remote, skipped=skipped)
        files += found
        units += found
        name_captures(files)
    return files, units, notes


def _list_and_group(inputs: list[str], group: str, by_path: bool
                    ) -> tuple[list[CaptureFile], list[Skipped], list[CaptureFile], list[str]]:
    """Local inputs listed (.inputs.list_inputs) and grouped (.sets.group_inputs) where
    this runs: a Spark Connect server's task (:func:`_resolve`)."""
    from .sets import group_inputs

    skipped: list[Skipped] = []
    files = list_inputs(None, inputs, skipped=skipped)
    units, notes = group_inputs(files, group, by_path=by_path)
    return files, skipped, units, notes


def _written(spark: SparkSession, target: str) -> dict[str, DataFrame]:
    """The tables as written under ``target``, read back (in their declared schemas)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from .schema import TABLES

    return {name: spark.read.schema(from_arrow_schema(TABLES[name])).parquet(f"{target}/{name}")
            for name in TABLE_NAMES}


def _write_tables(tables: Tables, target: str) -> None:
    """Write every table (from the persisted staged rows), as concurrent Spark jobs:
    with few capture files, each table is a few tasks, and this way they share the cores
    (a single file's packets and messages are written side by side, not one after the
    other)."""
    def write(name: str) -> None:
        writer = tables[name].write.mode("overwrite")
        if name == "packets":
            writer = writer.partitionBy("capture")
        writer.parquet(f"{target}/{name}")

    with ThreadPoolExecutor(len(TABLE_NAMES)) as pool:
        for done in [pool.submit(write, name) for name in TABLE_NAMES]:
            done.result()


def _write_directly(spark: SparkSession, plan: _Plan, target: str, root: str,
                    progress: _Progress, phase: Callable[[str], None]
                    ) -> tuple[dict[str, int], Counters]:
    """The tasks decode and write their files themselves (:mod:`.parquet`) under
    ``root``; the driver commits them.  Returns the rows per table, as the tasks
    reported them, and the decoding's totals."""
    from .parquet import PartFiles, commit, merge_events

    phase("list")
    try:
        reported: list[Any] = []  # WRITTEN rows
        out = _Out(PartFiles(root).write, _written_report, _progress_dir(root))
        if plan.whole or plan.split is not None:
            progress.start()
            try:
                if plan.whole:
                    reported = plan.written(spark, out)
                if plan.split is not None:
                    reported += plan.split.written(out)
            finally:
                progress.stop()
        totals = Counters.of_reports(row[1] for row in reported if row[0] == STATS)
        if plan.split is not None:
            totals.add(plan.split.read_totals())
        written = merge_events(root, [row for row in reported if not row[0].startswith("_")])
        phase("decode")
        counts = commit(target, root, written, TABLE_NAMES)
        phase("write")
        return counts, totals
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _progress_dir(root: str) -> str:
    """Where the writing tasks leave their totals for the progress lines."""
    return os.path.join(root, "_progress")


def _write_through_spark(spark: SparkSession, plan: _Plan, target: str,
                         phase: Callable[[str], None]) -> Counters:
    """The tasks stage their batches, Spark persists them and writes each table; the
    decoding's totals."""
    # Times as Parquet's INT64 TIMESTAMP(MICROS, UTC), as the tasks write them
    # (.parquet), not Spark's legacy INT96: the same files whichever path wrote them.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    decoded = _tables(spark, plan)
    decoded.persist()
    phase("list")
    try:
        # Decodes every file and persists the staged rows, of which the reports come back.
        totals = decoded.totals()
        phase("decode")
        _write_tables(decoded, target)
        phase("write")
        return totals
    finally:
        decoded.unpersist()


#: What the driver imports once Spark has started (pyspark's context: pandas, pyarrow;
#: then the run's own modules and the summary's chart): imported on a thread while the
#: JVM starts, when the driver only waits (:func:`_import_ahead`).
IMPORTS_AHEAD = ("pandas", "pyarrow", "pyarrow.parquet", "pyarrow.dataset",
                 "mqttwire.spark.batches", "mqttwire.spark.parquet", "matplotlib.figure")


def _import_ahead() -> threading.Thread:
    """Import :data:`IMPORTS_AHEAD` on a thread (an import the main thread needs meanwhile
    waits for it: the import lock), so that they are loaded when the run needs them."""
    def run() -> None:
        for name in IMPORTS_AHEAD:
            # Whatever fails here fails again, and is reported, where the run imports it.
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=run, name="mqttwire-import-ahead", daemon=True)
    thread.start()
    return thread


def run_pipeline(options: PipelineOptions, *, spark: SparkSession | None = None,
                 out: Any = None) -> PipelineResult:
    """Run the pipeline (see the module docstring); print progress to stderr and the
    summary and totals to ``out`` (default stdout).  ``spark``: an existing session to
    use, classic or Spark Connect (else one is made for ``options.master``, or on the
    Connect server ``options.remote``, and stopped at the end)."""
    from ..capture.files import skipped_line
    from .figures import ArrowFigures, SparkFigures
    from .parquet import staging_root
    from .report import write_summary
    from .startup import (
        ClassArchive,
        connect_session,
        default_master,
        is_connect,
        jvm_lines_hidden,
        jvm_running,
        make_session,
        master_of,
    )

    if options.writer not in ("auto", "tasks", "spark"):
        raise ValueError(f"writer must be auto, tasks or spark, not {options.writer!r}")
    if options.writer == "tasks" and local_path(options.out) is None:
        raise ValueError(f"writer 'tasks' needs the output on a local path, not "
                         f"{options.out!r}: use writer 'spark' or 'auto'")
    if options.master is not None and options.remote is not None:
        raise ValueError("give a master or a Spark Connect server (remote), not both")
    _check_reading(options.reader, options.split_for("local"), options.share_size,
                   options.group)  # before Spark
    out = out or sys.stdout
    own_session = spark is None
    archive = None
    ahead: threading.Thread | None = None
    if spark is None:
        ahead = _import_ahead()
        try:
            if options.remote is not None:
                spark = connect_session(options.remote)
            else:
                if options.jvm_cache is not None and not jvm_running():
                    archive = ClassArchive(options.jvm_cache)
                hidden = (jvm_lines_hidden() if not options.jvm_lines
                          else contextlib.nullcontext())
                with hidden:
                    spark = make_session(options.master or default_master(),
                                         conf=options.session_conf(archive))
        except BaseException:
            ahead.join()
            raise
    connect = is_connect(spark)
    if connect and options.writer == "tasks":
        raise ValueError("writer 'tasks' needs a classic session: on Spark Connect the "
                         "client cannot move the tasks' files into place; use writer "
                         "'spark' or 'auto'")
    master = master_of(spark)
    stopping: threading.Thread | None = None  # the session stopping, beside the summary
    started = time.monotonic()
    timings: dict[str, float] = {}
    lap = started

    def phase(name: str) -> None:
        nonlocal lap
        now = time.monotonic()
        timings[name] = round(now - lap, 3)
        lap = now

    try:
        target = options.out.rstrip("/")
        local_target = local_path(target)
        # The tasks write the tables when the output is a local path that the driver
        # (this process) sees: not over Spark Connect, whose server does the writing.
        tasks_write = local_target is not None and options.writer != "spark" and not connect
        root = staging_root(local_target) if tasks_write and local_target else None
        plan = _Plan.make(spark, options.inputs, options.ports, options.payload_limit,
                          options.version, options.reader, options.split_for(master),
                          options.share_size, group=options.group,
                          progress=_progress_dir(root) if root else None)
        files = plan.files
        if plan.skipped:
            print(skipped_line(len(plan.skipped), [s.name for s in plan.skipped]),
                  file=sys.stderr)
        for line in plan.sets + plan.notes:  # capture sets (.sets)
            print(f"mqttwire: {line}", file=sys.stderr)
        if plan.split is not None:
            print(f"mqttwire: {plan.split.line()}", file=sys.stderr)
        total = sum(f.size for f in files)
        where = f"Spark Connect {options.remote or 'session'}, master" if connect else "master"
        print(f"mqttwire: {len(files)} capture file(s), {_mib(total)}, {where} "
              f"{master}", file=sys.stderr)
        if root is not None and local_target is not None:
            progress = _Progress(partial(_progress_of, _progress_dir(root)), len(files),
                                 total, options.progress_interval)
            counts, totals = _write_directly(spark, plan, local_target, root, progress, phase)
        else:
            totals = _write_through_spark(spark, plan, target, phase)
            counts = {}
        figures: ArrowFigures | SparkFigures
        if local_target is not None and not connect and (counts or master.startswith("local")):
            # The driver sees the files (it committed them, or it ran the tasks):
            # Arrow reads them without Spark's first-read costs (.figures).
            figures = ArrowFigures(local_target)
            if own_session:
                # Spark has done its part: it stops (about 1 s) while Arrow summarises.
                stopping = threading.Thread(target=spark.stop, name="mqttwire-stop-spark")
                stopping.start()
        else:
            figures = SparkFigures(_written(spark, target))
        if not counts:  # else the tasks reported them; errors: the summary counts them
            counts = {name: figures.rows(name) for name in TABLE_NAMES if name != "errors"}
        # On Spark Connect the output is the server's: the summary goes there when this
        # machine sees it too (the same machine, a shared mount), else here.
        seen = local_target if local_target is not None and (
            not connect or os.path.isdir(local_target)) else None
        summary_dir = options.summary_dir or seen or "."
        report = write_summary(figures, counts, summary_dir, options=options, files=files,
                               skipped=plan.skipped, sets=plan.sets, notes=plan.notes)
        counts = report.counts
        bad = report.bad_captures
        phase("summary")
        elapsed = time.monotonic() - started
        print(report.text, file=out)
        print(f"done: {_count(len(files), 'file')} ({len(bad)} unreadable or corrupt), "
              f"{_mib(total)}, {_count(totals.packets, 'packet')}, "
              f"{_count(totals.errors, 'error/gap record')}, "
              f"{_count(counts.get('connections', 0), 'connection')}, "
              f"{_count(counts.get('messages', 0), 'message')}, in {elapsed:.1f} s; "
              f"tables in {target}/, summary in {report.path}", file=out)
        print("mqttwire: wall seconds by phase: "
              + ", ".join(f"{name} {seconds:.1f}" for name, seconds in timings.items()),
              file=sys.stderr)
        return PipelineResult(files, totals.records, totals.packets, totals.errors,
                              elapsed, report.path, report.chart_path, report.text, counts,
                              bad, timings, report.failures, plan.skipped)
    finally:
        if ahead is not None:
            ahead.join()  # not left importing as the interpreter exits
        if stopping is not None:
            stopping.join()
        elif own_session:
            spark.stop()
        if archive is not None and archive.finish():
            print(f"mqttwire: wrote the JVM's class archive {archive.path}", file=sys.stderr)
