"""The tables' files as the decoding tasks write them (mqttwire.spark.parquet), without
Spark: the part files, their row groups, the commit.  That Spark names partition
directories the same way, and that the tables match those of Spark's own writer, is
checked with real Spark in test_pipeline.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mqttwire.capture import Record

# These modules need pyarrow (the spark extra), so every test here is marked spark: where
# the extra is missing (the wheel tests run `-m "not spark"`), they are deselected and
# these names are never used.
try:
    import pyarrow.parquet as pq

    from mqttwire.spark.decoding import packets_batch, rows_batch
    from mqttwire.spark.parquet import (
        WRITTEN,
        PartFiles,
        commit,
        partition_dir,
        staging_root,
    )
    from mqttwire.spark.schema import PACKETS
except ModuleNotFoundError as exc:
    if exc.name != "pyarrow":
        raise

pytestmark = pytest.mark.spark
TABLES = ("packets", "connections", "messages", "retained", "errors")


def packets(capture: str, n: int, first_frame: int = 1) -> Any:
    return packets_batch([Record("packet", capture, frame=first_frame + i, ts=i * 1000,
                                 packet_type="PINGREQ") for i in range(n)])


def write(root: str, batches: Any) -> list[tuple[str, str, int]]:
    out = list(PartFiles(root).write(batches))
    assert all(batch.schema == WRITTEN for batch in out)
    return [tuple(row.values()) for batch in out for row in batch.to_pylist()]


def test_partition_dir_escapes_as_spark_does() -> None:
    # Hand-checked against Spark's ExternalCatalogUtils.escapePathName; test_pipeline.py
    # checks the same names against directories that Spark itself writes.
    assert partition_dir("capture", "a.pcap") == "capture=a.pcap"
    assert partition_dir("capture", "x:y=z%.pcap") == "capture=x%3Ay%3Dz%25.pcap"
    assert partition_dir("capture", "a b#c?'*[]^{}\\\x01\x7f") == (
        "capture=a b%23c%3F%27%2A%5B%5D%5E%7B}%5C%01%7F")
    assert partition_dir("capture", "é ü.pcapng") == "capture=é ü.pcapng"
    assert partition_dir("capture", "") == "capture=__HIVE_DEFAULT_PARTITION__"


def test_part_files_and_commit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "packets" / "capture=old.pcap").mkdir(parents=True)  # a previous run's
    (out / "summary.md").write_text("kept")
    root = staging_root(str(out))
    connections = rows_batch("connections", [])
    written = write(root, [("packets", packets("a:1.pcap", 3)), ("packets", packets("b", 2)),
                           ("packets", packets("a:1.pcap", 4, 10)),
                           ("connections", connections)])
    # One file per table and capture; an empty batch writes nothing.
    assert sorted((table, rel.split(os.sep, 1)[1], rows) for table, rel, rows in written) == [
        ("packets", f"packets/capture=a%3A1.pcap/part-00000-{written[0][1].split(os.sep)[0]}"
                    ".snappy.parquet", 7),
        ("packets", f"packets/capture=b/part-00001-{written[0][1].split(os.sep)[0]}"
                    ".snappy.parquet", 2)]
    # A second task attempt's files that were never reported are not committed.
    write(root, [("packets", packets("zombie", 5))])
    counts = commit(str(out), root, written, TABLES)
    assert counts == {"packets": 9, "connections": 0, "messages": 0, "retained": 0,
                      "errors": 0}
    assert not (out / "_temporary").exists()
    assert (out / "summary.md").read_text() == "kept"
    assert sorted(p.name for p in (out / "packets").iterdir()) == [
        "_SUCCESS", "capture=a%3A1.pcap", "capture=b"]
    for table in TABLES:
        assert (out / table / "_SUCCESS").exists()
    import pyarrow.dataset as ds

    data = ds.dataset(out / "packets", format="parquet", partitioning="hive").to_table()
    rows = sorted((str(r["capture"]), r["frame"]) for r in data.to_pylist())
    assert rows == sorted([("a:1.pcap", f) for f in (1, 2, 3, 10, 11, 12, 13)]
                          + [("b", 1), ("b", 2)])
    # The partition column lives in the directory names, not in the files; an empty
    # table is one file with the table's schema.
    (part,) = (out / "packets" / "capture=b").iterdir()
    assert pq.read_schema(part) == PACKETS.remove(0)
    (empty,) = [p for p in (out / "messages").iterdir() if p.suffix == ".parquet"]
    assert pq.read_table(empty).num_rows == 0
    assert pq.read_schema(empty).names == rows_batch("messages", []).schema.names


def test_batches_are_gathered_into_row_groups(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from mqttwire.spark import parquet

    batch = packets("a", 100)
    # Row groups of four batches (as written: without the partition column): 50 batches
    # make 12 groups of 4 and one of 2, not 50.
    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", batch.remove_column(0).nbytes * 4)
    root = staging_root(str(tmp_path))
    ((_, rel, rows),) = write(root, [("packets", batch)] * 50)
    meta = pq.ParquetFile(os.path.join(root, rel)).metadata
    assert (rows, meta.num_rows, meta.num_row_groups) == (5000, 5000, 13)


def test_only_string_columns_are_dictionary_encoded(tmp_path: Path) -> None:
    # The others (times, frames, offsets) have about as many values as rows.
    root = staging_root(str(tmp_path))
    ((_, rel, _),) = write(root, [("packets", packets("a", 100))])
    meta = pq.ParquetFile(os.path.join(root, rel)).metadata
    encodings = {meta.schema.column(i).name: meta.row_group(0).column(i).encodings
                 for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in encodings["packet_type"]
    assert "RLE_DICTIONARY" in encodings["direction"]
    assert "RLE_DICTIONARY" not in encodings["frame"]
    assert "RLE_DICTIONARY" not in encodings["ts"]
    assert "RLE_DICTIONARY" not in encodings["payload"]


def test_only_numbers_times_and_flags_have_statistics(tmp_path: Path) -> None:
    # Min/max rule row groups out only where the values rise through a capture (times,
    # frames); the text and payload columns are written without them.
    root = staging_root(str(tmp_path))
    batch = packets_batch([Record("packet", "a", frame=1 + i, ts=i * 1000, packet_type="PUBLISH",
                                  topic=f"t/{i}", payload=b"x" * i, qos=1, packet_id=1 + i)
                           for i in range(100)])
    ((_, rel, _),) = write(root, [("packets", batch)])
    group = pq.ParquetFile(os.path.join(root, rel)).metadata.row_group(0)
    stats = {group.column(i).path_in_schema: group.column(i).statistics
             for i in range(group.num_columns)}
    assert (stats["frame"].min, stats["frame"].max) == (1, 100)
    assert (stats["packet_id"].min, stats["packet_id"].max) == (1, 100)
    assert stats["ts"].has_min_max and stats["qos"].has_min_max
    for column in ("topic", "packet_type", "payload", "topic_filters.list.element"):
        assert stats[column] is None or not stats[column].has_min_max, column


def test_a_failing_task_closes_its_files(tmp_path: Path) -> None:
    def batches():
        yield "packets", packets("a", 3)
        raise OSError("disk full")

    root = staging_root(str(tmp_path))
    with pytest.raises(OSError, match="disk full"):
        write(root, batches())  # type: ignore[arg-type]


def test_an_error_in_the_writing_thread_fails_the_task(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups are written on a thread of their own: its error reaches the task."""
    from mqttwire.spark import parquet

    batch = packets("a", 100)
    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", 1)  # every batch a row group
    written: list[int] = []

    def failing(self: Any, group: list[Any]) -> None:
        written.append(len(group))
        if len(written) == 3:
            raise OSError("disk full")

    monkeypatch.setattr(parquet._Part, "write", failing)
    with pytest.raises(OSError, match="disk full"):
        write(staging_root(str(tmp_path)), [("packets", batch)] * 50)
    # The task stopped soon after, with at most PENDING_ROW_GROUPS more handed over.
    assert 3 <= len(written) <= 3 + parquet.PENDING_ROW_GROUPS + 1


def test_the_decoding_waits_for_the_writing_thread(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """At most PENDING_ROW_GROUPS row groups wait for the writing thread (bounded
    memory), however fast the batches come."""
    import threading

    from mqttwire.spark import parquet

    monkeypatch.setattr(parquet, "ROW_GROUP_BYTES", 1)
    release = threading.Event()
    handed = 0
    original = parquet._Part.write

    def slow(self: Any, group: list[Any]) -> None:
        release.wait(10)
        original(self, group)

    def batches() -> Any:
        nonlocal handed
        for _ in range(20):
            handed += 1
            if handed == parquet.PENDING_ROW_GROUPS + 3 and not release.is_set():
                # Nothing written yet: the decoding must not have got this far.
                raise AssertionError("more row groups handed over than allowed")
            yield "packets", packets("a", 10)

    monkeypatch.setattr(parquet._Part, "write", slow)
    timer = threading.Timer(0.5, release.set)
    timer.start()
    try:
        # Blocked at PENDING_ROW_GROUPS + 1 handed over until the timer releases it,
        # then the rest flows: every row written.
        ((_, rel, rows),) = write(staging_root(str(tmp_path)), batches())
    finally:
        timer.cancel()
    assert rows == 200
