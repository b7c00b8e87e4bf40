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
   names; the driver moves them into place (``writer="tasks"``).  These tasks run as a
   plain RDD job (``mapPartitions`` over the listing), not ``mapInArrow``: with nothing
   but file names coming back, the SQL plan and the JVM's Arrow conversions only cost
   time (about 2 s on a fresh JVM).  Then a file of at least
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

Why not Spark 4's Python Data Source API for step 2: it would stream files just the same
(one partition per file), but its readers cannot update accumulators, which the progress
report needs; a ``mapInArrow`` (or an RDD's ``mapPartitions``) over a
one-row-per-partition list of files can.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from .inputs import CaptureFile, Skipped, list_inputs, local_path

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    from pyspark import Accumulator, SparkContext
    from pyspark.sql import DataFrame, SparkSession

    from .batches import Batch, Decoding
    from .connection_shares import Share
    from .packing import Packing
    from .split import SplitRead
    from .startup import ClassArchive

__all__ = ["TABLE_NAMES", "Counters", "PipelineOptions",
           "PipelineResult", "SHARE_SIZE", "Tables", "read_tables", "run_pipeline"]

#: The tables written, in order (each to OUT/<name>).
TABLE_NAMES = ("packets", "connections", "messages", "retained", "errors")

#: What mapInArrow runs: Arrow batches in, Arrow batches out.
ArrowMap = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]
#: What a decoding task does with its tables' batches: stage them for Spark
#: (:func:`_stage_all`) or write them itself (:meth:`.parquet.PartFiles.write`).
Output = Callable[[Iterable["Batch"]], Iterator["pa.RecordBatch"]]

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


class Counters(NamedTuple):
    """Running totals of the decoding, as Spark accumulators that the tasks add to as
    each file finishes (read ``.value`` on the driver)."""

    files: Accumulator[int]
    bytes: Accumulator[int]
    records: Accumulator[int]
    packets: Accumulator[int]
    errors: Accumulator[int]


class _Progress:
    """The run's counters, and a driver thread that prints them every ``interval``
    seconds while decoding runs."""

    def __init__(self, counters: Counters, total_files: int, total_bytes: int,
                 interval: float, stream: Any = None) -> None:
        self.counters = counters
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.interval = interval
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqttwire-progress",
                                        daemon=True)

    def line(self) -> str:
        c = self.counters
        return (f"progress: {c.files.value}/{self.total_files} files, "
                f"{_mib(c.bytes.value)}/{_mib(self.total_bytes)}, "
                f"{c.packets.value:,} packets decoded, "
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
               counters: Counters, share: Share | None = None, files: int = 1
               ) -> Iterator[Batch]:
    """Decode one capture file (``share`` of its connections: .shares) into its tables'
    batches; any failure to read it becomes its error row.  (A set of ``files`` files:
    ``opener`` gives their FileChain.)"""
    from .batches import FileStats, capture_error_batches, decode_capture

    stats = FileStats()
    first = share is None or share.index == 0  # the one task of the file that counts it
    try:
        with opener() as f:
            yield from decode_capture(f, name, ports=how.ports,
                                      payload_limit=how.payload_limit,
                                      version=how.version, stats=stats, share=share)
    except OSError as exc:
        if first:
            stats.errors += 1
            yield from capture_error_batches(name, f"cannot read the file: "
                                                   f"{exc.strerror or exc}")
    # A decoder bug must not cost the other files their results: it is reported as this
    # file's error row, with what to do about it.
    except Exception as exc:  # noqa: BLE001
        stats.errors += 1
        yield from capture_error_batches(
            name, f"decoding stopped by {type(exc).__name__}: {exc} "
                  "(an mqttwire bug: please report it with the capture)")
    if first:
        counters.files.add(files)
        counters.bytes.add(size)
    counters.records.add(stats.records)
    counters.packets.add(stats.packets)
    counters.errors.add(stats.errors)


def _stage_all(batches: Iterable[Batch]) -> Iterator[pa.RecordBatch]:
    """A task's output as STAGED rows (:func:`~.batches.stage`): for :func:`read_tables`."""
    from .batches import stage

    for table, batch in batches:
        yield stage(table, batch)


#: A row of the streaming reader's listing: (name, path, size, problem, share, shares,
#: parts): ``parts`` the files of a set (.sets.SetFile.parts), else None.
Listed = tuple[str, "str | None", int, "str | None", int, int, "str | None"]


def _listed_files(rows: Iterable[Listed], how: Decoding, counters: Counters
                  ) -> Iterator[Batch]:
    """Open and stream each listed file (its share of the connections when ``shares`` >
    1) into its tables' batches."""
    from .batches import capture_error_batches
    from .connection_shares import Share

    for name, path, size, problem, index, count, parts in rows:
        if problem is not None:
            counters.files.add(1)
            counters.errors.add(1)
            yield from capture_error_batches(name, problem)
            continue
        share = Share(index, count) if count > 1 else None
        if parts is not None:  # a set of files, read as one capture (.sets)
            from .sets import set_opener

            opener, files = set_opener(parts)
            yield from _file_task(name, opener, size, how, counters, share, files)
            continue
        yield from _file_task(name, partial(open, path, "rb"), size, how, counters, share)


def _stream_task(how: Decoding, counters: Counters, out: Output) -> ArrowMap:
    """mapInArrow function over listing rows (:data:`Listed`); ``out`` turns the task's
    table batches into what the task returns."""
    def rows(batches: Iterator[pa.RecordBatch]) -> Iterator[Listed]:
        for batch in batches:
            yield from zip(*(c.to_pylist() for c in batch.columns))

    return lambda batches: out(_listed_files(rows(batches), how, counters))


def _rdd_task(how: Decoding, counters: Counters, out: Output
              ) -> Callable[[Iterable[Listed]], Iterator[tuple[Any, ...]]]:
    """The same over an RDD's partition of listing rows, returning ``out``'s rows as
    tuples (for :func:`_write_directly`, whose tasks return only a row per file)."""
    def task(rows: Iterable[Listed]) -> Iterator[tuple[Any, ...]]:
        for batch in out(_listed_files(rows, how, counters)):
            yield from zip(*(c.to_pylist() for c in batch.columns))

    return task


def _rdd_tasks(how: Decoding, counters: Counters, out: Output
               ) -> Callable[[Iterable[list[Listed]]], Iterator[tuple[Any, ...]]]:
    """:func:`_rdd_task` over a partition of tasks (:func:`_tasks`: one each partition),
    each a list of listing rows."""
    task = _rdd_task(how, counters, out)
    return lambda tasks: task(chain.from_iterable(tasks))


def _binary_task(names: dict[str, str], how: Decoding, counters: Counters,
                 out: Output) -> ArrowMap:
    """mapInArrow function over binaryFile's (path, content) rows."""
    def tables(batches: Iterator[pa.RecordBatch]) -> Iterator[Batch]:
        import pyarrow as pa

        for batch in batches:
            paths = batch.column(0).to_pylist()
            contents = batch.column(1)
            for i, uri in enumerate(paths):
                content = contents[i].as_buffer()
                name = names.get(uri) or uri.rsplit("/", 1)[-1]
                yield from _file_task(name, partial(pa.BufferReader, content), content.size,
                                      how, counters)

    return lambda batches: out(tables(batches))


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
             counters: Counters, out: Output, out_schema: pa.Schema) -> DataFrame:
    """What the tasks return (``out`` of every table's batches, in ``out_schema``), one
    task per file."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(out_schema)
    stream, binary = _plan(files, reader)
    parts: list[DataFrame] = []
    if stream:
        # parallelize() with one slice per element gives each task (a list of listing
        # rows: small files packed together) its own partition.
        sc = spark.sparkContext
        tasks = _tasks(sc, stream, None, _packing(sc, spark))
        rdd = sc.parallelize(tasks, len(tasks)).flatMap(lambda rows: rows)
        listing = spark.createDataFrame(
            rdd, "name string, path string, size long, problem string, share int, "
                 "shares int, parts string")
        parts.append(listing.mapInArrow(_stream_task(how, counters, out), schema))
    if binary:
        # Spark packs small files into shared tasks by its own rule and settings, the
        # ones the streaming reader follows (.packing); a task decodes each in turn.
        names = {f.uri: f.name for f in binary}
        raw = spark.read.format("binaryFile").load([f.uri for f in binary])
        parts.append(raw.select("path", "content").mapInArrow(
            _binary_task(names, how, counters, out), schema))
    return _union(parts)


def _listing(sc: SparkContext, stream: list[CaptureFile], share_size: int | None
             ) -> list[Listed]:
    """The streaming reader's tasks, a row each: every file, or every share of a file of
    at least ``share_size`` bytes (.connection_shares), largest first so that one big file does not
    start last."""
    from .connection_shares import share_count
    from .sets import SetFile

    cores = sc.defaultParallelism
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


def _packing(sc: SparkContext, session: SparkSession | None) -> Packing:
    """Spark's file packing settings (.packing): the session's SQL conf when there is a
    session, else the context's conf (what spark-submit or the builder set)."""
    from .packing import Packing

    if session is not None:
        conf = session.conf
        return Packing.from_conf(lambda key: conf.get(key, None), sc.defaultParallelism)
    spark_conf = sc.getConf()
    return Packing.from_conf(lambda key: spark_conf.get(key), sc.defaultParallelism)


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


def _tasks(sc: SparkContext, stream: list[CaptureFile], share_size: int | None,
           packing: Packing | None) -> list[list[Listed]]:
    """The streaming reader's tasks, each a list of listing rows (:func:`_listing`): the
    small files packed by ``packing`` (.packing; None: a task each), the others a task
    each (a task per share); the largest tasks first, so that one big task does not
    start last."""
    if packing is None:
        return [[row] for row in _listing(sc, stream, share_size)]
    cores = sc.defaultParallelism
    alone = [f for f in stream if not _packable(f, share_size, cores)]
    tasks = [[row] for row in _listing(sc, alone, share_size)]
    rows = _listing(sc, [f for f in stream if _packable(f, share_size, cores)], None)
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
    #: Running totals, filled as actions decode the captures.
    counters: Counters
    #: Every table's batches, staged in one DataFrame (see the module docstring).
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
    return _tables(spark, _Plan.make(_Spark(spark.sparkContext, spark), inputs, ports,
                                     payload_limit, version, reader, split_size,
                                     group=group))


def _tables(spark: SparkSession, plan: _Plan) -> Tables:
    """The five tables of ``plan``'s files, staged (see the module docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from .batches import unstage
    from .schema import STAGED, TABLES
    from .split import RETAIN_EVENTS, retained

    files, counters, whole, split = plan.files, plan.counters, plan.whole, plan.split
    parts = [plan.decoded(spark, _stage_all, STAGED)] if whole else []
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
                  errors=table("errors"), files=files, counters=counters, staged=staged,
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


class _Spark:
    """The run's Spark: its context, and a SQL session made when a step first asks for
    one.  A run whose tasks read local files and write the tables runs no SQL, and on a
    fresh JVM a session takes about 1.2 s to make (benchmarks/history/capture.md)."""

    def __init__(self, context: SparkContext, session: SparkSession | None = None) -> None:
        self.context = context
        self._session = session

    def __repr__(self) -> str:
        return f"_Spark({self.context.master!r}, session={self._session is not None})"

    @property
    def session(self) -> SparkSession:
        if self._session is None:
            from pyspark.sql import SparkSession

            self._session = SparkSession.builder.getOrCreate()  # on self.context
        return self._session

    @property
    def existing(self) -> SparkSession | None:
        """The session if there is one already (without making one)."""
        return self._session

    def stop(self) -> None:
        """Stop the session, if one was made, and the context."""
        if self._session is not None:
            self._session.stop()
        else:
            self.context.stop()


@dataclass
class _Plan:
    """The inputs of a run, listed, and how the tasks will read them."""

    files: list[CaptureFile]
    counters: Counters
    how: Decoding
    reader: str
    #: The files read whole, one task each (a set of files, .sets, is one SetFile).
    whole: list[CaptureFile]
    #: The files read in byte ranges (the range reads done and checked), or None.
    split: SplitRead | None
    #: Files at least this large are read in shares when the tasks write (.connection_shares).
    share_size: int | None = None
    #: The files of the input folders (and globs) that are not captures, not read.
    skipped: list[Skipped] = field(default_factory=list)
    #: The sets of files read as one capture (.sets.set_lines), and the grouping's notes.
    sets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def make(cls, spark: _Spark, inputs: Sequence[str], ports: Sequence[int],
             payload_limit: int | None, version: int | None, reader: str,
             split_size: int | None, share_size: int | None = None, *,
             group: str = "auto") -> _Plan:
        from .batches import Decoding
        from .sets import SetFile, group_inputs, set_lines
        from .split import read_split

        skipped: list[Skipped] = []
        files = list_inputs(spark.context, inputs, skipped=skipped)
        # Files that are pieces of one capture: one unit each set (.sets).
        units, notes = group_inputs(files, group, by_path=reader != "binaryfile")
        sc = spark.context
        counters = Counters(*(sc.accumulator(0) for _ in Counters._fields))
        # read_capture keeps no payload without a limit: the pipeline keeps them whole.
        limit = sys.maxsize if payload_limit is None else payload_limit
        how = Decoding(tuple(ports), limit, version)
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
                split = read_split(spark.context, big, split_size, how, counters)
                whole = [f for f in units if all(f is not g for g in split.files)]
        return cls(files, counters, how, reader, whole, split, share_size, skipped=skipped,
                   sets=set_lines(units), notes=notes)

    def decoded(self, spark: SparkSession, out: Output, schema: pa.Schema) -> DataFrame:
        """The tasks of the files read whole, returning ``out`` of their batches."""
        return _decoded(spark, self.whole, self.how, self.reader, self.counters, out, schema)

    def written(self, spark: _Spark, out: Output) -> list[tuple[Any, ...]]:
        """Run the tasks of the files read whole, each writing its own files (``out``:
        :meth:`.parquet.PartFiles.write`), large files in shares (.connection_shares); their
        :data:`~.parquet.WRITTEN` rows.  The streaming reader's tasks are a plain RDD
        job: their input is a short list and their output a row per file, so a SQL
        plan and Arrow conversions in the JVM would do nothing useful, and on a fresh
        JVM they cost about 2 s (benchmarks/history/capture.md); nor do they need a SQL session."""
        from .parquet import WRITTEN

        stream, binary = _plan(self.whole, self.reader)
        rows: list[tuple[Any, ...]] = []
        if stream:
            sc = spark.context
            tasks = _tasks(sc, stream, self.share_size, _packing(sc, spark.existing))
            rows += (sc.parallelize(tasks, len(tasks))
                     .mapPartitions(_rdd_tasks(self.how, self.counters, out)).collect())
        if binary:
            rows += _decoded(spark.session, binary, self.how, self.reader, self.counters,
                             out, WRITTEN).collect()
        return rows


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


def _write_directly(spark: _Spark, plan: _Plan, target: str, progress: _Progress,
                    phase: Callable[[str], None]) -> dict[str, int]:
    """The tasks decode and write their files themselves (:mod:`.parquet`); the driver
    commits them.  Returns the rows per table, as the tasks reported them."""
    from .parquet import PartFiles, commit, merge_events, staging_root

    root = staging_root(target)
    phase("list")
    try:
        reported: list[Any] = []  # WRITTEN rows
        if plan.whole or plan.split is not None:
            progress.start()
            try:
                if plan.whole:
                    reported = plan.written(spark, PartFiles(root).write)
                if plan.split is not None:
                    reported += plan.split.written(PartFiles(root).write)
            finally:
                progress.stop()
        written = merge_events(root, reported)
        phase("decode")
        counts = commit(target, root, written, TABLE_NAMES)
        phase("write")
        return counts
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _write_through_spark(spark: SparkSession, plan: _Plan, target: str,
                         progress: _Progress, phase: Callable[[str], None]) -> None:
    """The tasks stage their batches, Spark persists them and writes each table."""
    # Times as Parquet's INT64 TIMESTAMP(MICROS, UTC), as the tasks write them
    # (.parquet), not Spark's legacy INT96: the same files whichever path wrote them.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    decoded = _tables(spark, plan)
    decoded.persist()
    phase("list")
    try:
        progress.start()
        try:
            decoded.staged.count()  # decodes every file and persists the staged rows
        finally:
            progress.stop()
        phase("decode")
        _write_tables(decoded, target)
        phase("write")
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
    use (else one is made for ``options.master`` and stopped at the end)."""
    from ..capture.files import skipped_line
    from .figures import ArrowFigures, SparkFigures
    from .report import write_summary
    from .startup import ClassArchive, default_master, jvm_running, make_context

    if options.writer not in ("auto", "tasks", "spark"):
        raise ValueError(f"writer must be auto, tasks or spark, not {options.writer!r}")
    if options.writer == "tasks" and local_path(options.out) is None:
        raise ValueError(f"writer 'tasks' needs the output on a local path, not "
                         f"{options.out!r}: use writer 'spark' or 'auto'")
    _check_reading(options.reader, options.split_for("local"), options.share_size,
                   options.group)  # before Spark
    out = out or sys.stdout
    own_session = spark is None
    archive = None
    ahead: threading.Thread | None = None
    if spark is None:
        if options.jvm_cache is not None and not jvm_running():
            archive = ClassArchive(options.jvm_cache)
        ahead = _import_ahead()
        try:
            run = _Spark(make_context(options.master or default_master(),
                                      conf=options.session_conf(archive)))
        except BaseException:
            ahead.join()
            raise
    else:
        run = _Spark(spark.sparkContext, spark)
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
        plan = _Plan.make(run, options.inputs, options.ports, options.payload_limit,
                          options.version, options.reader,
                          options.split_for(str(run.context.master)),
                          options.share_size, group=options.group)
        files = plan.files
        if plan.skipped:
            print(skipped_line(len(plan.skipped), [s.name for s in plan.skipped]),
                  file=sys.stderr)
        for line in plan.sets + plan.notes:  # capture sets (.sets)
            print(f"mqttwire: {line}", file=sys.stderr)
        if plan.split is not None:
            print(f"mqttwire: {plan.split.line()}", file=sys.stderr)
        total = sum(f.size for f in files)
        print(f"mqttwire: {len(files)} capture file(s), {_mib(total)}, master "
              f"{run.context.master}", file=sys.stderr)
        progress = _Progress(plan.counters, len(files), total, options.progress_interval)
        target = options.out.rstrip("/")
        local_target = local_path(target)
        if local_target is not None and options.writer != "spark":
            counts = _write_directly(run, plan, local_target, progress, phase)
        else:
            _write_through_spark(run.session, plan, target, progress, phase)
            counts = {}
        figures: ArrowFigures | SparkFigures
        if local_target is not None and (counts or str(run.context.master).startswith("local")):
            # The driver sees the files (it committed them, or it ran the tasks):
            # Arrow reads them without Spark's first-read costs (.figures).
            figures = ArrowFigures(local_target)
            if own_session:
                # Spark has done its part: it stops (about 1 s) while Arrow summarises.
                stopping = threading.Thread(target=run.stop, name="mqttwire-stop-spark")
                stopping.start()
        else:
            figures = SparkFigures(_written(run.session, target))
        if not counts:  # else the tasks reported them; errors: the summary counts them
            counts = {name: figures.rows(name) for name in TABLE_NAMES if name != "errors"}
        summary_dir = options.summary_dir or local_target or "."
        report = write_summary(figures, counts, summary_dir, options=options, files=files,
                               skipped=plan.skipped, sets=plan.sets, notes=plan.notes)
        counts = report.counts
        bad = report.bad_captures
        phase("summary")
        elapsed = time.monotonic() - started
        print(report.text, file=out)
        c = progress.counters
        print(f"done: {_count(len(files), 'file')} ({len(bad)} unreadable or corrupt), "
              f"{_mib(total)}, {_count(c.packets.value, 'packet')}, "
              f"{_count(c.errors.value, 'error/gap record')}, "
              f"{_count(counts.get('connections', 0), 'connection')}, "
              f"{_count(counts.get('messages', 0), 'message')}, in {elapsed:.1f} s; "
              f"tables in {target}/, summary in {report.path}", file=out)
        print("mqttwire: wall seconds by phase: "
              + ", ".join(f"{name} {seconds:.1f}" for name, seconds in timings.items()),
              file=sys.stderr)
        return PipelineResult(files, c.records.value, c.packets.value, c.errors.value,
                              elapsed, report.path, report.chart_path, report.text, counts,
                              bad, timings, report.failures, plan.skipped)
    finally:
        if ahead is not None:
            ahead.join()  # not left importing as the interpreter exits
        if stopping is not None:
            stopping.join()
        elif own_session:
            run.stop()
        if archive is not None and archive.finish():
            print(f"mqttwire: wrote the JVM's class archive {archive.path}", file=sys.stderr)
