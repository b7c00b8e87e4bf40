"""The command's run: ``mqttwire pipeline`` from its options to the summary.

How it runs:

1. The driver lists the inputs (:mod:`.inputs`; unreadable ones are kept, to be reported
   by name and to get an error row) and makes the plan (:mod:`.plan`): which tasks read
   which files, whole, in shares, packed or in byte ranges.
2. The tasks (:mod:`.tasks`) decode their captures with :func:`~.decoding.decode_capture`
   inside ``mapInArrow`` into Arrow batches of every table: the packets and errors, and
   the connections, messages and retained messages derived from them in the same pass
   (all of an MQTT connection is in one file, so the derivation needs no shuffle); a
   file read in byte ranges is decoded per TCP connection after a shuffle (:mod:`.split`).
   Files on a local or shared filesystem are *streamed*: the task gets the path and reads
   the file in chunks, so a capture of any size fits in bounded memory.  Files on other
   filesystems (hdfs:, s3a:, ...) come through Spark's ``binaryFile`` source.
3. The tables are written (:mod:`.write`): by the tasks themselves, or by Spark from
   the staged rows (:mod:`.tables`).
4. A summary is printed and written to summary.md with a chart (:mod:`.report`), computed
   from the tables as written (Parquet reads only the columns each figure needs:
   :mod:`.aggregates`).

:func:`~.tables.read_tables` is steps 1 and 2 without the writes.  Only DataFrame
operations run the pipeline (no SparkContext, RDD, accumulator or py4j), so the same
code runs on a classic session, local or on a cluster, and on a Spark Connect session
(:func:`~.startup.connect_session`), for the same tables.  The tasks report their totals
(files, bytes, records, packets, errors) as rows of their output, not through
accumulators; the progress lines come from small files that the writing tasks leave in
the run's staging directory (:mod:`.progress`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from .inputs import CaptureFile, Skipped, local_path
from .plan import CLUSTER_SPLIT_SIZE, SHARE_SIZE, check_reading
from .progress import Progress, mib, progress_dir, progress_of
from .tables import TABLE_NAMES, planned
from .write import write_directly, write_through_spark, written_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .startup import ClassArchive

__all__ = ["IMPORTS_AHEAD", "INTERPRETED_PLANS", "NO_UI", "QUICK_JIT", "PipelineOptions",
           "PipelineResult", "run_pipeline"]

#: The driver JVM's just-in-time compiler stopped at its first tier (C1) when the tasks
#: write the tables on a local master: the JVM then only starts and schedules the tasks
#: (the summary's figures are Arrow's there: .aggregates), work too short for the
#: optimising compiler (C2) to pay back the CPU it takes from the tasks on the same
#: cores (benchmarks/capture.md); where the JVM does the heavy lifting (a split file's
#: shuffle, Spark's Parquet writer) C1 measured slower, so those runs keep the JVM's
#: default.
QUICK_JIT = "-XX:TieredStopAtLevel=1"

#: Spark's whole-stage code generation off in the same runs as :data:`QUICK_JIT`: the
#: plans there (a range of shares, the tasks' Arrow batches, their files' rows) are a few
#: rows each, for which compiling Java code per stage (Janino) costs the JVM more than it
#: saves (benchmarks/capture.md).
INTERPRETED_PLANS = {"spark.sql.codegen.wholeStage": "false"}

#: Spark's web UI off in the sessions the pipeline makes for itself: a batch run has its
#: own progress lines and summary, and the UI's web server is about a sixth of the
#: driver JVM's start-up, which delays every task (benchmarks/capture.md, "The Spark
#: session's start").  ``--spark-ui`` keeps it.
NO_UI = {"spark.ui.enabled": "false"}


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
    writer: str = "auto"  # tasks, spark, auto (see .write)
    progress_interval: float = 5.0
    summary_dir: str | None = None  # default: OUT when local, else the current directory
    driver_memory: str | None = None  # spark.driver.memory, e.g. "2g"; None: Spark's
    executor_memory: str | None = None  # spark.executor.memory; None: Spark's
    #: a directory for the driver JVM's class archive (.startup.ClassArchive); None: none
    jvm_cache: str | None = None
    #: which input files are pieces of one capture: auto, never, one (.set_files)
    group: str = "auto"
    #: whether the JVM's start-up lines (its warnings, log4j's profile) reach stderr
    jvm_lines: bool = True
    #: whether a session the pipeline makes for itself serves Spark's web UI (see
    #: :data:`NO_UI`)
    spark_ui: bool = False

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
        options, :data:`NO_UI` unless :attr:`spark_ui` (or under spark-submit, whose
        ``--conf`` decides), :data:`QUICK_JIT` and :data:`INTERPRETED_PLANS` when the
        master is local and the tasks will write the tables (a local output, no split, not
        the Spark writer), and ``archive``'s JVM option."""
        from .startup import default_master, under_spark_submit

        conf = self.memory_conf()
        if not self.spark_ui and not under_spark_submit():
            conf.update(NO_UI)
        master = self.master or default_master() or ""
        java = []
        if (master.startswith("local") and self.writer != "spark"
                and not self.split_for(master) and local_path(self.out) is not None):
            java.append(QUICK_JIT)
            conf.update(INTERPRETED_PLANS)
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


def _count(n: int, noun: str) -> str:
    """``n`` (with thousands separators) and the noun, singular or plural as it asks."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


#: What the driver imports once Spark has started (pyspark's context: pandas, pyarrow;
#: then the run's own modules and the summary's chart): imported on a thread while the
#: JVM starts, when the driver only waits (:func:`_import_ahead`).
IMPORTS_AHEAD = ("pandas", "pyarrow", "pyarrow.parquet", "pyarrow.dataset",
                 "mqttwire.spark.decoding", "mqttwire.spark.parquet", "matplotlib.figure")


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
    check_reading(options.reader, options.split_for("local"), options.share_size,
                  options.group)  # before Spark
    out = out or sys.stdout
    own_session = spark is None
    archive = None
    ahead: threading.Thread | None = None
    if spark is None:
        try:
            if options.remote is not None:
                ahead = _import_ahead()
                spark = connect_session(options.remote)
            else:
                # The JVM's start is the run's longest wait, and it begins once pyspark.sql
                # is imported: that comes first, alone (an import on another thread would
                # share the interpreter with it); the run's other modules are imported
                # while the JVM starts (:func:`_import_ahead`, and below).
                import pyspark.sql  # noqa: F401

                ahead = _import_ahead()
                if options.jvm_cache is not None and not jvm_running():
                    archive = ClassArchive(options.jvm_cache)
                hidden = (jvm_lines_hidden() if not options.jvm_lines
                          else contextlib.nullcontext())
                with hidden:
                    spark = make_session(options.master or default_master(),
                                         conf=options.session_conf(archive))
        except BaseException:
            if ahead is not None:
                ahead.join()
            raise
    from ..capture.files import skipped_line
    from .aggregates import ArrowAggregates, SparkAggregates
    from .parquet import staging_root
    from .report import write_summary

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
        # Shares (.connection_shares) only where the tasks write: the driver merges
        # their retained rows from what they wrote.
        plan, split = planned(spark, options.inputs, ports=options.ports,
                              payload_limit=options.payload_limit, version=options.version,
                              reader=options.reader, split_size=options.split_for(master),
                              share_size=options.share_size if root else None,
                              group=options.group,
                              progress=progress_dir(root) if root else None)
        files = plan.files
        if plan.skipped:
            print(skipped_line(len(plan.skipped), [s.name for s in plan.skipped]),
                  file=sys.stderr)
        for line in plan.sets + plan.notes:  # capture sets (.set_files)
            print(f"mqttwire: {line}", file=sys.stderr)
        if split is not None:
            print(f"mqttwire: {split.line()}", file=sys.stderr)
        total = sum(f.size for f in files)
        where = f"Spark Connect {options.remote or 'session'}, master" if connect else "master"
        print(f"mqttwire: {len(files)} capture file(s), {mib(total)}, {where} "
              f"{master}", file=sys.stderr)
        if root is not None and local_target is not None:
            progress = Progress(partial(progress_of, progress_dir(root)), len(files),
                                total, options.progress_interval)
            counts, totals = write_directly(spark, plan, split, local_target, root, progress,
                                            phase)
        else:
            totals = write_through_spark(spark, plan, split, target, phase)
            counts = {}
        figures: ArrowAggregates | SparkAggregates
        if local_target is not None and not connect and (counts or master.startswith("local")):
            # The driver sees the files (it committed them, or it ran the tasks):
            # Arrow reads them without Spark's first-read costs (.aggregates).
            figures = ArrowAggregates(local_target)
            if own_session:
                # Spark has done its part: it stops while Arrow summarises.
                stopping = threading.Thread(target=spark.stop, name="mqttwire-stop-spark")
                stopping.start()
        else:
            figures = SparkAggregates(written_tables(spark, target))
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
              f"{mib(total)}, {_count(totals.packets, 'packet')}, "
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
        if archive is not None:
            writing = archive.writing is not None
            if archive.finish():
                print(f"mqttwire: wrote the JVM's class archive {archive.path}",
                      file=sys.stderr)
            elif writing:
                print(f"mqttwire: the JVM's class archive {archive.path} was not written "
                      f"(the JVM did not write a usable one); the next run tries again",
                      file=sys.stderr)
            elif archive.unwritable is not None:
                print(f"mqttwire: no class archive written (--jvm-cache): "
                      f"{archive.unwritable}", file=sys.stderr)
