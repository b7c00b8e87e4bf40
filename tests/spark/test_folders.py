"""Folders as the pipeline's inputs, as a user runs ``mqttwire pipeline`` (and
``mqttwire dissect`` on the same inputs): captures recognised by content at the top and
in sub-folders (gzip-compressed too), the other files skipped and named once, the
``capture`` column naming every file by its path from the input, and one exit status
rule for both commands.  One Spark run (a JVM start) for all of it."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from spark_scenarios import capture_b

from mqttwire.capture import read_capture
from mqttwire.spark.inputs import CaptureFile

# pyarrow comes with the spark extra: every test here is marked spark, so that where the
# extra is missing (the wheel tests run `-m "not spark"`) they are deselected.
try:
    import pyarrow.dataset as ds

    from mqttwire.spark.parquet import partition_dir
    from mqttwire.spark.plan import tasks_of
except ModuleNotFoundError as exc:
    if exc.name != "pyarrow":
        raise

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample.pcapng"


def _inputs(root: Path) -> list[str]:
    """A folder of captures as users keep them, a file named by the user that is no
    capture, and a folder without captures."""
    top = root / "dir"
    (top / "sub" / "deeper").mkdir(parents=True)
    (top / ".git").mkdir()
    sample = SAMPLE.read_bytes()
    (top / "sample.pcapng").write_bytes(sample)
    (top / "sub" / "sample.pcapng").write_bytes(sample)  # the same base name
    capture_b(top / "sub" / "b.pcap")
    (top / "sub" / "deeper" / "sample.pcapng.gz").write_bytes(gzip.compress(sample))
    (top / "cut.pcapng").write_bytes(sample[:1000])  # the truncated sample
    (top / "README.md").write_text("# Captures\n\nFrom the lab.\n")
    (top / "LICENSE").write_text("MIT License\n")
    (top / "sub" / "config.yaml").write_text("broker: localhost\n")
    (top / "empty.pcap").write_bytes(b"")
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # hidden: not listed
    notes = root / "notes.txt"
    notes.write_text("These are notes, not a capture.\n")
    docs = root / "docs"
    docs.mkdir()
    (docs / "notes.yaml").write_text("a: 1\n")
    return [str(top), str(notes), str(docs)]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return subprocess.run([sys.executable, "-m", "mqttwire", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300, check=False)


SKIPPED = ("skipped 5 file(s) of the input folders that are not captures: dir/LICENSE, "
           "dir/README.md, dir/empty.pcap, dir/sub/config.yaml, docs/notes.yaml")
#: Why each input was not read to its end, by capture name: both commands say it so.
FAILURES = {
    "dir/cut.pcapng": "pcapng block claims 104 bytes but the file ends after 16 at "
                      "offset 984",
    "docs": "no capture file there (1 other file(s) skipped)",
    "notes.txt": "not a pcap or pcapng file (magic 54686573) at offset 0",
}
CAPTURES = ["dir/cut.pcapng", "dir/sample.pcapng", "dir/sub/b.pcap",
            "dir/sub/deeper/sample.pcapng.gz", "dir/sub/sample.pcapng", "docs", "notes.txt"]


@pytest.mark.once
def test_pipeline_and_dissect_on_a_folder(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    out = tmp_path / "out"
    proc = _run("pipeline", *inputs, "--out", str(out), "--master", "local[2]",
                "--progress", "0", cwd=tmp_path)
    # Exit status 1: inputs not read to their end, each named once with why.
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = [line for line in proc.stderr.splitlines() if line.startswith("mqttwire")]
    assert f"mqttwire: {SKIPPED}" in err
    said = {line.split(": ", 2)[1]: line.split(": ", 2)[2] for line in err
            if line.startswith("mqttwire pipeline: ") and ": " in line[19:]}
    assert said == FAILURES
    assert ("mqttwire pipeline: 3 of 7 input file(s) could not be read to the end; the "
            "tables hold what was read before each fault") in err
    assert "no input could be read" not in proc.stderr
    # The JVM's start-up lines (Java's incubator module, log4j's profile, no native
    # Hadoop) are left out without --verbose.
    from mqttwire.spark.startup import JVM_START_LINES

    assert not [line for line in proc.stderr.splitlines()
                if any(noise in line for noise in JVM_START_LINES)], proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith(
        "done: 7 files (3 unreadable or corrupt)")

    # The capture column: every file by its path from its input (two sample.pcapng
    # apart), in the partitions too; the skipped files nowhere; the folder without a
    # capture, which nothing opened, in errors only.
    packets = ds.dataset(out / "packets", format="parquet", partitioning="hive").to_table()
    assert sorted(p.name for p in (out / "packets").iterdir() if p.is_dir()) == sorted(
        partition_dir("capture", name) for name in CAPTURES if name != "docs")
    kinds = Counter(zip(packets.column("capture").to_pylist(),
                        packets.column("kind").to_pylist()))
    sample = sum(1 for r in read_capture(SAMPLE) if r.kind == "packet")
    for name in ("dir/sample.pcapng", "dir/sub/sample.pcapng",
                 "dir/sub/deeper/sample.pcapng.gz"):
        assert kinds[(name, "packet")] == sample
    assert kinds[("dir/cut.pcapng", "packet")] == 3  # what was there before the cut
    errors = ds.dataset(out / "errors", format="parquet").to_table().to_pylist()
    assert {r["capture"]: r["error"].removeprefix(f"{r['capture']}: ")
            for r in errors if r["kind"] == "capture_error"} == FAILURES
    assert not any(r["capture"].startswith(("dir/README", "dir/LICENSE", "dir/empty",
                                            "dir/sub/config")) for r in errors)
    # Connection ids stay unique across the captures of one base name.
    connections = ds.dataset(out / "connections", format="parquet").to_table().to_pylist()
    ids = [r["connection_id"] for r in connections]
    assert len(ids) == len(set(ids))
    per_capture = Counter(r["capture"] for r in connections)
    assert per_capture["dir/sample.pcapng"] == per_capture["dir/sub/sample.pcapng"] > 1
    assert all(i.startswith(f"{r['capture']}#") for i, r in zip(ids, connections))

    summary = (out / "summary.md").read_text()
    assert "5 files in the input folders are not captures" in summary
    assert "| dir/README.md | not a pcap or pcapng file (magic 23204361) |" in summary
    assert "| dir/empty.pcap | empty file |" in summary
    for name, why in FAILURES.items():
        assert f"- `{name}`: {why}" in summary

    # dissect: the same inputs, names, reasons and exit status.
    proc = _run("dissect", *inputs, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"mqttwire: {SKIPPED}"] + [
        f"mqttwire: {name}: {FAILURES[name]}" for name in ("dir/cut.pcapng", "notes.txt",
                                                           "docs")]
    printed = Counter(line.split()[1].split("#")[0] for line in proc.stdout.splitlines())
    assert printed == {name: kinds[(name, "packet")] + kinds[(name, "error")]
                       for name in CAPTURES if name not in ("docs", "notes.txt")}


def test_gzip_captures_are_one_task_each() -> None:
    """A gzip stream reads from its start only: never in shares (.connection_shares)."""
    plain = CaptureFile("file:/d/a.pcapng", 100 << 20, "a.pcapng", format="pcapng")
    packed = CaptureFile("file:/d/b.pcapng.gz", 100 << 20, "b.pcapng.gz", format="pcapng.gz")
    tasks = tasks_of([plain, packed], 32 << 20, 4, None)
    assert Counter(t.name for task in tasks for t in task) == {"a.pcapng": 3, "b.pcapng.gz": 1}


LISTING = """
import json, sys
from pyspark.sql import SparkSession
from mqttwire.spark import inputs

spark = SparkSession.builder.master("local[1]").getOrCreate()


def listing():
    skipped = []
    files = inputs.list_inputs(spark, sys.argv[1:], skipped=skipped)
    return ([[f.name, f.format, f.problem] for f in files],
            [[s.name, s.reason] for s in skipped])


local = listing()
# As on hdfs: or s3a:, listed and every file's first bytes read through Spark's
# binaryFile source (DataFrame jobs).
inputs.local_path = lambda uri: None
remote = listing()
spark.stop()
print(json.dumps([local, remote]))
"""


@pytest.mark.once
def test_listing_reads_remote_files_through_spark(tmp_path: Path) -> None:
    """The listing of a remote folder (.inputs.SparkFiles: Spark's binaryFile source,
    DataFrame jobs, for the folders, globs and each file's first bytes) finds what the
    local listing (.inputs.LocalFiles: Python) finds."""
    import json

    inputs = _inputs(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", LISTING, *inputs], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    local, remote = json.loads(proc.stdout.strip().splitlines()[-1])
    assert local == remote
    files, skipped = local
    assert files == [
        ["dir/cut.pcapng", "pcapng", None], ["dir/sample.pcapng", "pcapng", None],
        ["dir/sub/b.pcap", "pcap", None],
        ["dir/sub/deeper/sample.pcapng.gz", "pcapng.gz", None],
        ["dir/sub/sample.pcapng", "pcapng", None],
        ["notes.txt", None, None],  # named: read, and its task says what it is
        ["docs", None, "no capture file there (1 other file(s) skipped)"]]
    assert [name for name, _ in skipped] == ["dir/LICENSE", "dir/README.md",
                                             "dir/empty.pcap", "dir/sub/config.yaml",
                                             "docs/notes.yaml"]


def test_a_task_decodes_a_gzip_capture_from_binaryfiles_buffer() -> None:
    """The binaryfile reader hands its task the file's bytes (a pyarrow BufferReader):
    a gzip-compressed capture gives the plain one's tables."""
    import pyarrow as pa

    from mqttwire.spark.decoding import decode_capture

    def tables(data: bytes) -> dict[str, list[dict[str, object]]]:
        rows: dict[str, list[dict[str, object]]] = {}
        for table, batch in decode_capture(pa.BufferReader(data), "s", payload_limit=4):
            rows.setdefault(table, []).extend(batch.to_pylist())
        return rows

    sample = SAMPLE.read_bytes()
    plain = tables(sample)
    assert plain["packets"] and plain["connections"]
    assert tables(gzip.compress(sample)) == plain
