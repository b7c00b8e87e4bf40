"""What runs on the executors: a task's decoding of its captures into the tables'
Arrow batches, and what it returns.

A task of the streaming reader gets its :class:`~.plan.Task` list (files, or shares of
a file: :mod:`.connection_shares`; a set of files: :mod:`.set_files`) and opens each by
path; a task of Spark's ``binaryFile`` source gets each file's content.  Either decodes each
capture with :func:`~.decoding.decode_capture` (any failure to read one becomes its error
row) and returns its batches as :class:`Out` says: *staged* rows for Spark
(:func:`~.decoding.stage`), or the WRITTEN rows of the Parquet files it wrote itself
(:mod:`.parquet`), then one row of its totals (:data:`STATS`, a :class:`Counters`).  The
functions here are pickled into the tasks: they import what they need when they run.
Only pyarrow is needed here, not pyspark.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import pickle
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    from pyspark.sql import SparkSession

    from .connection_shares import Share
    from .decoding import Batch, Decoding
    from .plan import Task

__all__ = ["STAGED_OUT", "STATS", "ArrowMap", "Counters", "Out", "TaskTotals",
           "binary_task", "file_task", "on_server", "stage_all", "staged_report",
           "stream_task", "written_report"]

#: What mapInArrow runs: Arrow batches in, Arrow batches out.
ArrowMap = Callable[[Iterator["pa.RecordBatch"]], Iterator["pa.RecordBatch"]]

#: The table name of a task's report rows in its output, beside the tables' rows (staged,
#: or the WRITTEN rows of its files): its totals as JSON (:class:`Counters`).
STATS = "_stats"


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


class TaskTotals(Counters):
    """A task's running totals; with ``progress`` (a directory the driver reads), each
    capture's end is written there too, as this task's file
    (:func:`~.progress.progress_of`)."""

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


def file_task(name: str, opener: Callable[[], Any], size: int, how: Decoding,
              totals: TaskTotals, share: Share | None = None, files: int = 1
              ) -> Iterator[Batch]:
    """Decode one capture file (``share`` of its connections: .connection_shares) into
    its tables' batches; any failure to read it becomes its error row.  (A set of
    ``files`` files: ``opener`` gives their FileChain.)"""
    from .decoding import FileStats, capture_error_batches, decode_capture

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
    except Exception as exc:
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
class Out:
    """What a decoding task returns: ``write`` turns its tables' batches into its output
    rows (staged rows for Spark, :func:`stage_all`, or the WRITTEN rows of the files it
    wrote itself, :meth:`.parquet.PartFiles.write`), ``report`` its totals into one row
    of the same schema (:data:`STATS`); ``progress``: a directory for the progress
    lines' files (:class:`TaskTotals`), or None."""

    write: Callable[[Iterable[Batch]], Iterator[pa.RecordBatch]]
    report: Callable[[Counters], pa.RecordBatch]
    progress: str | None = None


def stage_all(batches: Iterable[Batch]) -> Iterator[pa.RecordBatch]:
    """A task's output as STAGED rows (:func:`~.decoding.stage`): for
    :func:`~.tables.read_tables`."""
    from .decoding import stage

    for table, batch in batches:
        yield stage(table, batch)


def staged_report(totals: Counters) -> pa.RecordBatch:
    """A task's totals as a STAGED row."""
    import pyarrow as pa

    from .columns import arrays
    from .schema import STAGED

    return pa.RecordBatch.from_arrays(
        arrays([STATS], [[STATS], [totals.json().encode()]], STAGED), schema=STAGED)


def written_report(totals: Counters) -> pa.RecordBatch:
    """A task's totals as a WRITTEN row."""
    import pyarrow as pa

    from .columns import arrays
    from .parquet import WRITTEN

    return pa.RecordBatch.from_arrays(
        arrays([STATS], [[STATS], [totals.json()], [0]], WRITTEN), schema=WRITTEN)


STAGED_OUT = Out(stage_all, staged_report)


def _run_tasks(tasks: Iterable[Task], how: Decoding, totals: TaskTotals) -> Iterator[Batch]:
    """Open and stream each of a task's files (its share of the connections when
    ``shares`` > 1; a set's files as one capture) into its tables' batches; an input
    that cannot be read makes only its error row."""
    from .connection_shares import Share
    from .decoding import capture_error_batches

    for task in tasks:
        if task.problem is not None:
            totals.files += 1
            totals.errors += 1
            yield from capture_error_batches(task.name, task.problem, opened=False)
            totals.done()
            continue
        share = Share(task.share, task.shares) if task.shares > 1 else None
        if task.parts is not None:  # a set of files, read as one capture (.set_files)
            from .set_files import set_opener

            opener, files = set_opener(task.parts)
            yield from file_task(task.name, opener, task.size, how, totals, share, files)
            continue
        assert task.path is not None  # a task without a problem is a local file
        yield from file_task(task.name, partial(open, task.path, "rb"), task.size, how,
                             totals, share)


def stream_task(tasks: list[list[Task]], how: Decoding, out: Out) -> ArrowMap:
    """mapInArrow function over a range of task indexes (one a partition): each task's
    files decoded, ``out`` of their batches, then the task's report."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        totals = TaskTotals(out.progress)
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from out.write(_run_tasks(tasks[index], how, totals))
        yield out.report(totals)

    return run


def binary_task(names: dict[str, str], how: Decoding, out: Out) -> ArrowMap:
    """mapInArrow function over binaryFile's (path, content) rows."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        totals = TaskTotals(out.progress)

        def tables() -> Iterator[Batch]:
            for batch in batches:
                paths = batch.column(0).to_pylist()
                contents = batch.column(1)
                for i, uri in enumerate(paths):
                    content = contents[i].as_buffer()
                    name = names.get(uri) or uri.rsplit("/", 1)[-1]
                    yield from file_task(name, partial(pa.BufferReader, content),
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

