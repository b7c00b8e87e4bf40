"""The tables written: by the tasks themselves, or by Spark from the staged rows.

With the output on a local path (one that every executor mounts, on a cluster), each
task (a split file's decoding tasks too) writes its batches itself as Parquet part files
of every table (:mod:`.parquet`; ``packets`` partitioned by capture) and returns only
their names; the driver moves them into place (:func:`write_directly`).  Then a file of
at least ``share_size`` bytes is read by several tasks, each keeping a share of its
connections (:mod:`.connection_shares`), and the driver chooses the retained rows from
theirs.  Otherwise (an ``hdfs:``/``s3a:`` output, ``writer="spark"``, or a Spark
Connect session, whose client cannot move the tasks' files into place on the server's
filesystem) the tasks return their batches staged (:mod:`.tables`), Spark persists them
on disk only and writes each table from them (:func:`write_through_spark`).  The first
way moves no row through the JVM: it saves the staging, persisting, unstaging and
Spark's Parquet writer (benchmarks/capture.md).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .progress import Progress, progress_dir
from .tables import TABLE_NAMES, Tables, decoded, staged_tables
from .tasks import STATS, Counters, Out, written_report

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .plan import Plan
    from .split import SplitRead

__all__ = ["write_directly", "write_tables", "write_through_spark", "written_tables"]


def written_tables(spark: SparkSession, target: str) -> dict[str, DataFrame]:
    """The tables as written under ``target``, read back (in their declared schemas)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from .schema import TABLES

    return {name: spark.read.schema(from_arrow_schema(TABLES[name])).parquet(f"{target}/{name}")
            for name in TABLE_NAMES}


def write_tables(tables: Tables, target: str) -> None:
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


def write_directly(spark: SparkSession, plan: Plan, split: SplitRead | None, target: str,
                   root: str, progress: Progress, phase: Callable[[str], None]
                   ) -> tuple[dict[str, int], Counters]:
    """The tasks decode and write their files themselves (:mod:`.parquet`) under
    ``root``; the driver commits them.  Returns the rows per table, as the tasks
    reported them, and the decoding's totals."""
    from .parquet import WRITTEN, PartFiles, commit, merge_events

    phase("list")
    try:
        reported: list[Any] = []  # WRITTEN rows
        out = Out(PartFiles(root).write, written_report, progress_dir(root))
        if plan.tasks or plan.binary or split is not None:
            progress.start()
            try:
                if plan.tasks or plan.binary:
                    reported = [tuple(row) for row in
                                decoded(spark, plan, out, WRITTEN).collect()]
                if split is not None:
                    reported += split.written(out)
            finally:
                progress.stop()
        totals = Counters.of_reports(row[1] for row in reported if row[0] == STATS)
        if split is not None:
            totals.add(split.read_totals())
        written = merge_events(root, [row for row in reported if not row[0].startswith("_")])
        phase("decode")
        counts = commit(target, root, written, TABLE_NAMES)
        phase("write")
        return counts, totals
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_through_spark(spark: SparkSession, plan: Plan, split: SplitRead | None,
                        target: str, phase: Callable[[str], None]) -> Counters:
    """The tasks stage their batches, Spark persists them and writes each table; the
    decoding's totals."""
    # Times as Parquet's INT64 TIMESTAMP(MICROS, UTC), as the tasks write them
    # (.parquet), not Spark's legacy INT96: the same files whichever path wrote them.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    tables = staged_tables(spark, plan, split)
    tables.persist()
    phase("list")
    try:
        # Decodes every file and persists the staged rows, of which the reports come back.
        totals = tables.totals()
        phase("decode")
        write_tables(tables, target)
        phase("write")
        return totals
    finally:
        tables.unpersist()
