"""Fixtures of the pipeline tests: the synthetic captures, and one local Spark run of the
pipeline over them (shared by every test that reads its tables, to keep Spark time down).

Tests marked ``spark`` are skipped, with the reason, only when there is no Java (under CI
that skip is a failure: the repository's conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import (
    PARTITION_NAMES,
    Written,
    capture_a,
    capture_b,
    capture_c,
    capture_mixed,
    ring_buffer,
    stage_tasks,
    table_rows,
)

NOT_A_CAPTURE = b"These are notes, not a capture.\n" * 4
#: The split size of the split runs: a few frames per range.
SPLIT_SIZE = 1000
#: The frames per file of the ring buffer (the mixed capture cut by editcap -c).
RING_FRAMES = 40


@dataclass
class Captures:
    """The inputs of a run: three captures, a file that is no capture, and a path that
    does not exist; and the "mixed" capture in both formats, for splitting."""

    a: Written
    b: Written
    c: Written
    notes: Path
    missing: Path
    mixed: list[Path]

    @property
    def inputs(self) -> list[str]:
        return [str(self.a.path), str(self.b.path), str(self.c.path), str(self.notes),
                str(self.missing)]


@pytest.fixture(scope="session")
def captures(tmp_path_factory: pytest.TempPathFactory) -> Captures:
    root = tmp_path_factory.mktemp("captures")
    notes = root / "notes.txt"
    notes.write_bytes(NOT_A_CAPTURE)
    return Captures(capture_a(root / "a.pcapng"), capture_b(root / "b.pcap"),
                    capture_c(root / "c.pcapng"), notes, root / "missing.pcap",
                    [capture_mixed(root / f"mixed.{fmt}", fmt) for fmt in ("pcap", "pcapng")])


@pytest.fixture(autouse=True)
def _needs_java(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("spark") is None:
        return
    from mqttwire.spark import JavaMissing, find_java

    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"Spark needs Java: {exc}")


@dataclass
class LocalRun:
    """The local pipeline's output directories and results, per reader (and "split":
    the stream reader with a split size of SPLIT_SIZE bytes); and the rows of the tables
    as read_tables gives them (stream reader, payloads whole), per table, as
    comparable_rows makes them, and the same for every input and the mixed captures with
    and without splitting ("whole", "split").  Only the parts that the selected tests
    read are made (parts_read); the others stay empty."""

    out: dict[str, Path]
    results: dict[str, Any]
    frames: dict[str, list[dict[str, Any]]]
    mixed: dict[str, dict[str, list[dict[str, Any]]]]
    #: The partition directories that Spark's writer made for PARTITION_NAMES.
    partition_dirs: list[str]
    #: Per output ("stream", "split"): the summary's figures by engine ("spark",
    #: "arrow": mqttwire.spark.aggregates), and the summary text written from the Spark
    #: engine's figures (the pipeline's own summary.md is the Arrow engine's).
    figures: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    spark_summaries: dict[str, str] = field(default_factory=dict)
    #: The number of tasks of each stage of the "split" run, and the session's
    #: spark.sql.shuffle.partitions.
    split_tasks: list[int] = field(default_factory=list)
    shuffle_partitions: int = 0
    #: A ring buffer (the mixed pcapng cut by editcap -c): its folder, among the inputs
    #: of ``mixed``, and the names of the captures that ``mixed["split"]`` split.
    ring: Path | None = None
    split_files: list[str] = field(default_factory=list)


#: The pipeline runs that local_run can make, by name (the reader, but for "split": the
#: stream reader with a split size of SPLIT_SIZE bytes; "spark-writer": the stream reader
#: with Spark's writer; "shares": the stream reader with every file read in shares).
RUNS = ("stream", "binaryfile", "split", "spark-writer", "shares")
#: Its other parts, and the runs each is made from: "figures" (LocalRun.figures and
#: spark_summaries), "read_tables" (LocalRun.frames), "mixed" (LocalRun.ring, mixed and
#: split_files), "partitions" (LocalRun.partition_dirs).
DERIVED: dict[str, tuple[str, ...]] = {
    "figures": ("stream", "split"),
    "read_tables": (),
    "mixed": (),
    "partitions": (),
}


def parts_read(items: list[pytest.Item]) -> set[str]:
    """The parts of local_run (RUNS, DERIVED) that ``items``, the session's selected
    tests, read: each test that uses the fixture names them with the marker
    ``local_run``; with the runs that the derived parts are made from.

    So a pass that deselects some tests does not pay for what only they read: the
    comparisons between readers, writers and split runs are marked ``once``, and the
    pure pass (scripts/test.sh) makes the stream run alone.  A test that uses the
    fixture without the marker, or names no part of it, is an error rather than a
    test that finds its part missing."""
    parts: set[str] = set()
    for item in items:
        if "local_run" not in getattr(item, "fixturenames", ()):
            continue
        named = {part for mark in item.iter_markers("local_run") for part in mark.args}
        if not named:
            pytest.fail(f"{item.nodeid} uses local_run without the marker local_run naming "
                        "the parts it reads (tests/spark/conftest.py)", pytrace=False)
        unknown = named - set(RUNS) - set(DERIVED)
        if unknown:
            pytest.fail(f"{item.nodeid}: no part of local_run is named {sorted(unknown)}; "
                        f"the parts: {list(RUNS) + list(DERIVED)}", pytrace=False)
        parts |= named
    for part in set(parts) & set(DERIVED):
        parts.update(DERIVED[part])
    return parts


@pytest.fixture(scope="session")
def local_run(captures: Captures, tmp_path_factory: pytest.TempPathFactory,
              request: pytest.FixtureRequest) -> Iterator[LocalRun]:
    """The pipeline run on local[2] over ``captures``, with each reader, and read_tables
    over them, on one Spark session (stopped before any other Spark starts): the parts
    that the selected tests read (parts_read), the others left empty."""
    from mqttwire.spark import (
        JavaMissing,
        PipelineOptions,
        find_java,
        read_tables,
        run_pipeline,
    )
    from mqttwire.spark.report import write_summary
    from mqttwire.spark.startup import make_session

    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"Spark needs Java: {exc}")
    parts = parts_read(request.session.items)
    spark = make_session("local[2]")
    run = LocalRun({}, {}, {}, {}, [])

    rows = table_rows

    try:
        # "stream" and "binaryfile" have their tasks write the tables (a local output
        # directory), "spark-writer" and "split" Spark's writer; "shares" is "stream"
        # with every capture file read by two tasks, each keeping a share of its
        # connections (every file is over a share size of 1 byte).
        tracker = spark.sparkContext.statusTracker()
        run.shuffle_partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        for reader in RUNS:
            if reader not in parts:
                continue
            out = tmp_path_factory.mktemp(f"out-{reader}")
            extra: dict[str, Any] = {"split_size": SPLIT_SIZE} if reader == "split" else {}
            if reader != "shares":
                extra["share_size"] = None
            else:
                extra["share_size"] = 1
            options = PipelineOptions(captures.inputs, str(out), master="local[2]",
                                      payload_limit=4, progress_interval=0,
                                      reader="binaryfile" if reader == "binaryfile"
                                      else "stream",
                                      writer="spark" if reader == "spark-writer" else "auto",
                                      **extra)
            jobs_before = set(tracker.getJobIdsForGroup())
            run.results[reader] = run_pipeline(options, spark=spark)
            run.out[reader] = out
            if reader == "split":
                run.split_tasks = stage_tasks(
                    tracker, set(tracker.getJobIdsForGroup()) - jobs_before)
        if "figures" in parts:
            for reader in DERIVED["figures"]:
                engines = figures_by_engine(spark, run.out[reader])
                run.figures[reader] = {name: figures_of(engine)
                                       for name, engine in engines.items()}
                result = run.results[reader]
                report = write_summary(
                    engines["spark"],
                    {k: v for k, v in result.counts.items() if k != "errors"},
                    str(tmp_path_factory.mktemp(f"summary-{reader}")),
                    options=PipelineOptions(captures.inputs, str(run.out[reader])),
                    files=result.files)
                run.spark_summaries[reader] = report.text
        if "read_tables" in parts:
            run.frames = rows(read_tables(spark, captures.inputs))
        if "mixed" in parts:
            run.ring = tmp_path_factory.mktemp("ring") / "ring"
            ring_buffer(captures.mixed[1].read_bytes(), run.ring, RING_FRAMES)
            inputs = (captures.inputs + [str(path) for path in captures.mixed]
                      + [str(run.ring)])
            # Payloads cut as the cluster test's runs cut them, to compare with theirs.
            split = read_tables(spark, inputs, split_size=SPLIT_SIZE, payload_limit=4)
            run.split_files = sorted(f.name for f in split.split.files) if split.split else []
            run.mixed = {"whole": rows(read_tables(spark, inputs, split_size=None,
                                                   payload_limit=4)),
                         "split": rows(split)}
        if "partitions" in parts:
            written = tmp_path_factory.mktemp("partitions") / "t"
            spark.createDataFrame([(name, 1) for name in PARTITION_NAMES],
                                  "capture string, x int"
                                  ).write.partitionBy("capture").parquet(str(written))
            run.partition_dirs = sorted(p.name for p in written.iterdir()
                                        if p.name.startswith("capture="))
    finally:
        spark.stop()
    yield run


def figures_by_engine(spark: Any, out: Path) -> dict[str, Any]:
    """Both figure engines over the tables written in ``out``."""
    from mqttwire.spark.aggregates import ArrowAggregates, SparkAggregates
    from mqttwire.spark.write import written_tables

    return {"spark": SparkAggregates(written_tables(spark, str(out))),
            "arrow": ArrowAggregates(str(out))}


def figures_of(engine: Any) -> dict[str, Any]:
    """Every figure of ``engine``; the lists of groups sorted (their order is free)."""
    from mqttwire.spark.report import rate_buckets

    got: dict[str, Any] = {name: getattr(engine, name)() for name in (
        "overview", "known", "top", "qos", "retained_sent", "unfinished", "bad",
        "first_errors")}
    got["rows"] = {table: engine.rows(table) for table in (
        "packets", "connections", "messages", "retained", "errors")}
    spans = [(r["first_us"], r["last_us"]) for r in got["qos"] if r["first_us"] is not None]
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    got["rate"] = engine.rate(lo, rate_buckets(lo, hi))
    got["rate_1us"] = engine.rate(lo, 1)
    for name in ("overview", "known", "rate", "rate_1us"):
        got[name] = sorted(got[name], key=repr)
    return got
