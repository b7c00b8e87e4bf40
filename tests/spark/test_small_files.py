"""Small capture files share tasks (mqttwire.spark.packing): packed by size as Spark's
file sources pack them, each still decoded as a capture of its own, so the tables are
the ones of a task per file.

The packing rule and the plan's units are checked without Spark; then one Spark session
runs the pipeline over 100 small captures in a folder, once with a task per file (a
maxPartitionBytes of 1 byte) and packed through each way the tables are made (the tasks
writing them, Spark writing them, the binaryFile reader), every table compared row for
row, and the decoding tasks counted with Spark's StatusTracker.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import (
    capture_a,
    capture_b,
    capture_c,
    capture_mixed,
    read_rows,
    stage_tasks,
)

from mqttwire.spark.inputs import CaptureFile
from mqttwire.spark.packing import Packing, parse_bytes
from mqttwire.spark.plan import tasks_of
from mqttwire.spark.set_files import SetFile
from mqttwire.spark.tables import TABLE_NAMES

pytestmark = pytest.mark.spark

MIB = 1 << 20
#: The folder's captures: copies of the scenario captures under distinct names.
FILES = 100  # the 200 in benchmarks/capture.md; here half, for CI's time


def test_spark_byte_strings() -> None:
    assert parse_bytes("134217728") == 128 * MIB
    assert parse_bytes("128m") == parse_bytes("128MB") == parse_bytes(" 128mb ") == 128 * MIB
    assert parse_bytes("4k") == 4096
    assert parse_bytes("1g") == 1 << 30
    for bad in ("", "1.5m", "12 parsecs", "-1"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_settings_from_the_conf_else_spark_defaults() -> None:
    assert Packing.from_conf(lambda key: None, 8) == Packing(128 * MIB, 4 * MIB, 8, None)
    conf = {"spark.sql.files.maxPartitionBytes": "64m",
            "spark.sql.files.openCostInBytes": "1048576",
            "spark.sql.leafNodeDefaultParallelism": "3",
            "spark.sql.files.maxPartitionNum": "10"}
    assert Packing.from_conf(conf.get, 8) == Packing(64 * MIB, MIB, 3, 10)
    conf["spark.sql.files.minPartitionNum"] = "5"  # before leafNodeDefaultParallelism
    assert Packing.from_conf(conf.get, 8).min_partitions == 5


def test_packing_follows_sparks_rule() -> None:
    packing = Packing(128 * MIB, 4 * MIB, 2)
    # 200 files of 20 kB: each counts 4 MiB + 20 kB, and a file fits while the task's
    # count before it plus its own size is at most maxSplitBytes (128 MiB: the total
    # over 2 cores is more), so a task takes 32 of them.
    tasks = packing.pack([20_000] * 200)
    assert [len(task) for task in tasks] == [32] * 6 + [8]
    assert sorted(i for task in tasks for i in task) == list(range(200))
    # Few small files still spread over the cores: maxSplitBytes is their total over
    # minPartitionNum (here 2 x (4 MiB + 1 kB) / 2), so one file a task.
    assert len(packing.pack([1000, 1000])) == 2
    # Largest first; a file that would take the task over the limit starts the next.
    assert Packing(10 * MIB, MIB, 1).pack([MIB, 8 * MIB, 3 * MIB, 2 * MIB]) == [
        [1], [2, 3, 0]]
    # A file over the limit is a task of its own; a limit of 1 byte: a task per file.
    assert Packing(10 * MIB, MIB, 1).pack([20 * MIB, MIB]) == [[0], [1]]
    assert Packing(1, 4 * MIB, 1).pack([5, 5, 0]) == [[0], [1], [2]]
    # maxPartitionNum: packed again with the total over that many tasks.
    assert len(Packing(128 * MIB, 4 * MIB, 1, 3).pack([1000] * 200)) == 3
    assert Packing().pack([]) == []


def test_sets_gzip_files_and_shares_stay_units_of_their_own() -> None:
    small = [CaptureFile(f"file:/d/s{i}.pcap", 1000, f"s{i}.pcap", format="pcap")
             for i in range(10)]
    missing = CaptureFile("/d/missing.pcap", 0, "missing.pcap", problem="no such file")
    packed = CaptureFile("file:/d/z.pcap.gz", 1000, "z.pcap.gz", format="pcap.gz")
    members = [CaptureFile(f"file:/d/r_0000{i}_20261126120000.pcap", 1000,
                           f"r_0000{i}_20261126120000.pcap", format="pcap") for i in (1, 2)]
    ring = SetFile(members[0].uri, 2000, members[0].name, format="pcap", members=members)
    big = CaptureFile("file:/d/big.pcap", 100 * MIB, "big.pcap", format="pcap")
    stream = [*small, missing, packed, ring, big]
    tasks = tasks_of(stream, 32 * MIB, 2, Packing(128 * MIB, 4 * MIB, 2))
    names = [[t.name for t in task] for task in tasks]
    # big.pcap in shares (3 of 32 MiB, at most the 2 cores), the largest tasks first;
    # the set and the gzip file alone; the small files and the missing one packed (over
    # 2 cores: maxSplitBytes is half their total).
    assert names[:2] == [["big.pcap"], ["big.pcap"]]
    assert sorted(map(sorted, names[2:])) == sorted(
        [["r_00001_20261126120000.pcap"], ["z.pcap.gz"],
         sorted(f"s{i}.pcap" for i in range(6)),
         sorted([*(f"s{i}.pcap" for i in range(6, 10)), "missing.pcap"])])
    assert {(t.share, t.shares) for t in tasks[0] + tasks[1]} == {(0, 2), (1, 2)}
    # Without packing (None), every file (every share) a task of its own.
    assert len(tasks_of(stream, 32 * MIB, 2, None)) == len(stream) + 1


@dataclass
class Runs:
    """The outputs per run, and the tasks of each stage of its jobs."""

    out: dict[str, Path] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, list[int]] = field(default_factory=dict)


def _folder(root: Path) -> Path:
    """FILES small captures in one folder: the scenario captures copied round, each
    under a name of its own (so a capture of its own in the tables)."""
    scenarios = root / "scenarios"
    scenarios.mkdir()
    made = [capture_a(scenarios / "a.pcapng").path, capture_b(scenarios / "b.pcap").path,
            capture_c(scenarios / "c.pcapng").path,
            capture_mixed(scenarios / "m.pcap", "pcap"),
            capture_mixed(scenarios / "m.pcapng", "pcapng")]
    folder = root / "ring"
    folder.mkdir()
    for i in range(FILES):
        source = Path(made[i % len(made)])
        shutil.copyfile(source, folder / f"{source.stem}-{i:03d}{source.suffix}")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """The pipeline over the folder on local[2]: "per-file" with a task per file,
    "tasks" packed with the tasks writing the tables, "spark" packed with Spark's writer,
    "binaryfile" packed by Spark's binaryFile source.  Group "never": the copies' names
    are alike but for their numbers, so "auto" would look at them as a possible set."""
    from mqttwire.spark import PipelineOptions, run_pipeline
    from mqttwire.spark.startup import make_session

    folder = _folder(tmp_path_factory.mktemp("small"))
    spark = make_session("local[2]")
    tracker = spark.sparkContext.statusTracker()
    runs = Runs()
    try:
        for run in ("per-file", "tasks", "spark", "binaryfile"):
            if run == "per-file":
                spark.conf.set("spark.sql.files.maxPartitionBytes", "1")
            else:
                spark.conf.unset("spark.sql.files.maxPartitionBytes")
            out = tmp_path_factory.mktemp(f"out-{run}")
            options = PipelineOptions([str(folder)], str(out), master="local[2]",
                                      progress_interval=0, group="never",
                                      reader="binaryfile" if run == "binaryfile"
                                      else "stream",
                                      writer="spark" if run == "spark" else "auto")
            before = set(tracker.getJobIdsForGroup())
            runs.results[run] = run_pipeline(options, spark=spark)
            runs.out[run] = out
            runs.tasks[run] = stage_tasks(tracker, set(tracker.getJobIdsForGroup()) - before)
    finally:
        spark.stop()
    yield runs


@pytest.mark.once
def test_a_task_per_file_when_the_limit_is_one_byte(runs: Runs) -> None:
    assert runs.tasks["per-file"] == [FILES]
    assert len(runs.results["per-file"].files) == FILES


@pytest.mark.parametrize("run", ["tasks", "spark", "binaryfile"])
@pytest.mark.once
def test_small_files_share_tasks_and_give_the_same_tables(runs: Runs, run: str) -> None:
    # 100 files of a few kB, each counted with a 4 MiB open cost: 32 a task, 4 tasks.
    # The files' decoding is the run's first stage; but binaryFile's first is Spark
    # listing the 100 paths (a parallel listing job, for over 32 paths).
    stages = runs.tasks[run][1:] if run == "binaryfile" else runs.tasks[run]
    assert stages[0] == 4, runs.tasks[run]
    whole, packed = runs.out["per-file"], runs.out[run]
    for table in TABLE_NAMES:
        rows = read_rows(packed, table)
        assert rows == read_rows(whole, table), table
    assert len({row["capture"] for row in read_rows(packed, "packets")}) == FILES
    a, b = runs.results[run], runs.results["per-file"]
    assert (a.records, a.packets, a.error_records, a.counts, a.bad_captures) == (
        b.records, b.packets, b.error_records, b.counts, b.bad_captures)
    assert (a.summary_text.replace(str(packed), "OUT")
            == b.summary_text.replace(str(whole), "OUT"))


@pytest.mark.once
def test_a_task_writes_a_capture_file_per_capture(runs: Runs) -> None:
    """The tasks that write the tables write each capture's packets when the next capture
    begins (not at the task's end): still one file per capture directory."""
    packets = runs.out["tasks"] / "packets"
    directories = [d for d in packets.iterdir() if d.is_dir()]
    assert len(directories) == FILES
    assert all(len(list(d.glob("*.parquet"))) == 1 for d in directories)
