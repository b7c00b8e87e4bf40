"""The five tables of some captures as DataFrames, from a :class:`~.plan.Plan`.

:func:`read_tables` lists the inputs (:func:`list_units`), makes the plan
(:func:`~.plan.make_plan`), reads the files to split in byte ranges (:mod:`.split`), and
gives the tables as lazily evaluated DataFrames (:class:`Tables`): the tasks
(:mod:`.tasks`) return every table's batches *staged*, packed as one row each (table
name, the batch as a compressed Arrow IPC stream: :func:`~.decoding.stage`), and each
table is its rows unpacked by a ``mapInArrow`` (:func:`~.decoding.unstage`).

Why staged rows: one decoding pass feeds five tables, so its output must be kept between
the writes (:meth:`Tables.persist`), and one task's output is a whole capture file's
worth.  Persisting the decoded rows themselves (one struct column per table) at a memory
level made Spark build its columnar cache of the whole partition in the heap, with every
struct value serialised row by row: the heap needed grew with the size of the largest
file, and building the cache cost more than the decoding.  A staged row is one batch of
at most 8192 rows, a few hundred kB: Spark streams them to disk and back one by one (see
the serialiser setting in :mod:`.startup`), so a task's memory is bounded whatever the
file's size.

Only DataFrame operations run here (no SparkContext, RDD or py4j), so the same code runs
on a classic session, local or on a cluster, and on a Spark Connect session.  The
streaming reader's tasks are a ``spark.range`` of one row per task in as many
partitions, each row the index of its task in the plan's list, which the function
carries.  On a Connect session the inputs are the server's paths: the local listing and
the grouping into sets run in a task (:func:`~.tasks.on_server`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..capture.files import Skipped
from .inputs import CaptureFile, list_inputs, local_path, name_captures
from .plan import Listing, Plan, check_reading, make_plan
from .set_files import group_inputs
from .tasks import STAGED_OUT, STATS, Counters, Out, binary_task, on_server, stream_task

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    from pyspark.sql import DataFrame, SparkSession

    from .packing import Packing
    from .split import SplitRead

__all__ = ["TABLE_NAMES", "Tables", "decoded", "list_units", "planned", "read_tables"]

#: The tables written, in order (each to OUT/<name>).
TABLE_NAMES = ("packets", "connections", "messages", "retained", "errors")


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
    #: each task's report (:data:`~.tasks.STATS`).
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
    are pieces of one capture (:mod:`.set_files`: auto, never, one).

    Listing the inputs runs on the driver now, and so does, for files to split, a Spark
    job that reads their ranges and checks them; the decoding waits for an action.  An
    unreadable input is not an exception: it is in ``files`` with its problem, and gets
    a "capture_error" row in ``errors``.  The files of folders (and globs) that are not
    captures are not read: ``skipped`` names them (:mod:`.inputs`)."""
    check_reading(reader, split_size, None, group)  # before Spark is used
    plan, split = planned(spark, inputs, ports=ports, payload_limit=payload_limit,
                          version=version, reader=reader, split_size=split_size,
                          group=group)
    return staged_tables(spark, plan, split)


def list_units(spark: SparkSession, inputs: Sequence[str], group: str, by_path: bool
               ) -> Listing:
    """The inputs listed (.inputs) and grouped into units of work (.set_files).  On a Spark
    Connect session the local paths are the server's: they are listed, and grouped, in a
    task (:func:`~.tasks.on_server`); the other URIs through DataFrames."""
    from .startup import is_connect

    skipped: list[Skipped] = []
    if not is_connect(spark):
        files = list_inputs(spark, inputs, skipped=skipped)
        return Listing(files, *group_inputs(files, group, by_path=by_path), skipped)
    local = [arg for arg in inputs if local_path(arg) is not None]
    listing = Listing([], [])
    if local:
        # One pickle: the units are (or hold) the very files of the list.
        listing = on_server(spark, _list_and_group, local, group, by_path)
        skipped += listing.skipped
    remote = [arg for arg in inputs if local_path(arg) is None]
    found = list_inputs(spark, remote, skipped=skipped) if remote else []
    files = listing.files + found
    name_captures(files)
    # Remote files are never grouped: only files that tasks open by path are (.set_files).
    return Listing(files, listing.units + found, listing.notes, skipped)


def _list_and_group(inputs: list[str], group: str, by_path: bool) -> Listing:
    """Local inputs listed and grouped where this runs: a Spark Connect server's task
    (:func:`list_units`)."""
    skipped: list[Skipped] = []
    files = list_inputs(None, inputs, skipped=skipped)
    return Listing(files, *group_inputs(files, group, by_path=by_path), skipped)


class _Cores:
    """The cores of ``spark`` (:func:`~.startup.cores_of`), asked once, when a step
    first needs them."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.value: int | None = None

    def __call__(self) -> int:
        if self.value is None:
            from .startup import cores_of

            self.value = cores_of(self.spark)
        return self.value


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


def planned(spark: SparkSession, inputs: Sequence[str], *, ports: Sequence[int] = (1883,),
            payload_limit: int | None = None, version: int | None = None,
            reader: str = "auto", split_size: int | None = None,
            share_size: int | None = None, group: str = "auto",
            progress: str | None = None) -> tuple[Plan, SplitRead | None]:
    """The plan of ``inputs`` on ``spark`` (listed, then :func:`~.plan.make_plan`),
    and the files to split read in byte ranges and checked (a Spark job, :mod:`.split`;
    those that fail the check are read whole instead), or None.  ``progress``: a
    directory for the range tasks' progress files."""
    from .split import read_split

    cores = _Cores(spark)
    plan = make_plan(list_units(spark, inputs, group, reader != "binaryfile"),
                     reader=reader, ports=ports, payload_limit=payload_limit,
                     version=version, split_size=split_size, share_size=share_size,
                     cores=cores, packing=lambda: _packing(spark, cores))
    if not plan.split or split_size is None:
        return plan, None
    split = read_split(spark, plan.split, split_size, plan.how, plan.cores, progress)
    return plan.reading_whole(split.fallback), split


def decoded(spark: SparkSession, plan: Plan, out: Out, out_schema: pa.Schema) -> DataFrame:
    """What the tasks of the files that ``plan`` reads whole return: ``out`` of every
    table's batches, in ``out_schema``, and each task's report."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(out_schema)
    parts: list[DataFrame] = []
    if plan.tasks:
        # A range of task indexes, one a partition: each task its own Spark task.
        parts.append(spark.range(len(plan.tasks), numPartitions=len(plan.tasks))
                     .mapInArrow(stream_task(plan.tasks, plan.how, out), schema))
    if plan.binary:
        # Spark packs small files into shared tasks by its own rule and settings, the
        # ones the streaming reader follows (.packing); a task decodes each in turn.
        raw = spark.read.format("binaryFile").load([f.uri for f in plan.binary])
        parts.append(raw.select("path", "content").mapInArrow(
            binary_task(plan.names, plan.how, out), schema))
    if not parts:
        return spark.createDataFrame([], schema)
    return union(parts)


def union(parts: list[DataFrame]) -> DataFrame:
    """The rows of ``parts`` (at least one), by column name."""
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part)
    return rows


def staged_tables(spark: SparkSession, plan: Plan, split: SplitRead | None) -> Tables:
    """The five tables of ``plan``'s files, staged (see the module docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from .decoding import unstage
    from .schema import STAGED, TABLES
    from .split import RETAIN_EVENTS, retained

    parts = [decoded(spark, plan, STAGED_OUT, STAGED)] if plan.tasks or plan.binary else []
    if split is not None and split.files:
        parts.append(split.staged(spark))
    staged = union(parts) if parts else spark.createDataFrame([], from_arrow_schema(STAGED))

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
                  errors=table("errors"), files=plan.files, staged=staged,
                  split=split, skipped=plan.skipped)
