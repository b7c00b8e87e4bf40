"""One capture split over many tasks (mqttwire.spark.split) gives the tables of a
whole-file read, table by table.

The first tests run the split steps in plain Python (no Spark: fast, so every split size
and both implementations): the range tasks, the shuffle (rows by a hash of their
connection key into a few "tasks", sorted in each), the per-connection decoding, then the
two rules that Spark applies over all tasks, written here independently: a connection's
number is the rank of the frame that opened it, and the retained message of a topic is
the latest by (frame, connection, arrival).  The Spark tests run read_tables itself.
"""

from __future__ import annotations

import io
import json
import sys
import zlib
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from spark_scenarios import capture_a, capture_b, capture_mixed, comparable_rows

from mqttwire.capture import read_capture
from mqttwire.capture.split import plan_ranges
from mqttwire.spark.derive import CaptureTables

# The split modules need pyarrow (the spark extra), so every test here is marked spark:
# where the extra is missing (the wheel tests run `-m "not spark"`), they are deselected
# and these names are never used.
try:
    from mqttwire.spark.batches import Decoding, table_batches
    from mqttwire.spark.split import (
        SEGMENTS,
        FileSplit,
        check_file,
        decode_rows,
        flow_key,
        range_rows,
    )
except ModuleNotFoundError as exc:
    if exc.name != "pyarrow":
        raise

pytestmark = pytest.mark.spark

ALL = sys.maxsize  # payloads kept whole, as the pipeline keeps them
SIZES = [64, 200, 1000, 4096]  # bytes per range: from smaller than one frame up


def whole_tables(raw: bytes, name: str, codec: ModuleType) -> dict[str, list[dict[str, Any]]]:
    """The tables of a whole-file read (the pipeline's one-task path)."""
    records = read_capture(io.BytesIO(raw), name=name, codec=codec, payload_limit=ALL,
                           stream_ends=True)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for table, batch in table_batches(records, CaptureTables(name)):
        out[table] += batch.to_pylist()
    return out


def read_ranges(raw: bytes, name: str, split_size: int
                ) -> tuple[FileSplit, list[dict[str, Any]], int]:
    """The range tasks of a file: its FileSplit, its segment rows, and how many ranges."""
    facts: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    ranges = plan_ranges(len(raw), split_size)
    for index, (start, end) in enumerate(ranges):
        for batch in range_rows(io.BytesIO(raw), name, index, start, end):
            for row in batch.to_pylist():
                if row["facts"] is None:
                    rows.append(row)
                else:
                    facts.append(json.loads(row["facts"]))
    return check_file(facts), rows, len(ranges)


def split_tables(raw: bytes, name: str, split_size: int, codec: ModuleType,
                 tasks: int = 3) -> dict[str, list[dict[str, Any]]]:
    """The tables of the split path, its Spark steps done in Python."""
    split, rows, _ = read_ranges(raw, name, split_size)
    assert split.problem is None, split.problem
    parts: list[list[dict[str, Any]]] = [[] for _ in range(tasks)]
    for row in rows:
        parts[zlib.crc32(row["flow"]) % tasks].append(row)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    how = Decoding((1883,), ALL, None)
    for part in parts:
        part.sort(key=lambda r: (r["flow"], r["range"], r["number"]))
        tuples = [tuple(r[field.name] for field in SEGMENTS) for r in part]
        for table, batch in decode_rows(name, tuples, split, how, codec=codec):
            out[table] += batch.to_pylist()
    # Connection numbers: the rank of the opening frame among all the capture's.
    opened = sorted(row["frame"] for row in out.pop("openings", []))
    assert len(opened) == len(set(opened)), "a frame opened two connections"
    ids = {f"{name}#@{frame}": f"{name}#{n}" for n, frame in enumerate(opened, 1)}
    # Retained: the latest event per topic, unless it removed the message.
    latest: dict[str, dict[str, Any]] = {}
    for event in out.pop("retain_events", []):
        order = (event.pop("order_frame"), event.pop("order_connection"),
                 event.pop("order_seen"))
        if event["topic"] not in latest or latest[event["topic"]]["order"] < order:
            latest[event["topic"]] = {"order": order, "row": event}
    assert not out["retained"], "a task chose retained messages itself"
    out["retained"] = [held["row"] for held in latest.values() if held["row"]["payload_length"]]
    for rows_ in out.values():
        for row in rows_:
            if row.get("connection_id") is not None:
                row["connection_id"] = ids[row["connection_id"]]
    return out


def same_tables(got: dict[str, list[dict[str, Any]]],
                want: dict[str, list[dict[str, Any]]]) -> None:
    for table in ("packets", "connections", "messages", "retained", "errors"):
        assert comparable_rows(got.get(table, [])) == comparable_rows(want.get(table, [])), table


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("mixed")
    return {fmt: capture_mixed(root / f"mixed.{fmt}", fmt).read_bytes()
            for fmt in ("pcap", "pcapng")}


def test_the_mixed_capture_holds_what_it_says(mixed: dict[str, bytes],
                                               codec: ModuleType) -> None:
    """The scenario is what the split tests rely on: many connections, each kind of
    trouble present in the whole-file read."""
    tables = whole_tables(mixed["pcapng"], "m", codec)
    kinds = {row["kind"] for row in tables["packets"]}
    assert {"packet", "gap", "fragment"} <= kinds
    connections = {row["client_id"]: row for row in tables["connections"]}
    assert {"long", "late", "messy", "sniffed", "reuse", "open"} <= set(connections)
    assert connections["open"]["tcp_end"] == "eof"
    assert connections["sniffed"]["server_port"] == 8883
    assert sum(row["client_id"] == "reuse" for row in tables["connections"]) == 2
    assert any(row["joined_mid_stream"] and row["version_source"] == "inferred"
               for row in tables["connections"])
    # Nine TCP connections were opened (the web one, 6, is not MQTT, but numbered).
    assert sorted(row["connection_id"] for row in tables["connections"]) == [
        "m#1", "m#2", "m#3", "m#4", "m#5", "m#7", "m#8", "m#9"]
    assert {(row["topic"], row["payload"]) for row in tables["retained"]} == {
        ("r/x", b"last word"), ("r/y", b"y")}


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("split_size", SIZES)
def test_split_tables_equal_whole_file_tables(mixed: dict[str, bytes], fmt: str,
                                              split_size: int, codec: ModuleType) -> None:
    raw = mixed[fmt]
    split, _, ranges = read_ranges(raw, "m", split_size)
    assert ranges > 1 and split.problem is None
    same_tables(split_tables(raw, "m", split_size, codec), whole_tables(raw, "m", codec))


@pytest.mark.parametrize("tasks", [1, 2, 7])
def test_the_number_of_tasks_does_not_matter(mixed: dict[str, bytes], tasks: int,
                                             codec: ModuleType) -> None:
    raw = mixed["pcapng"]
    same_tables(split_tables(raw, "m", 200, codec, tasks),
                whole_tables(raw, "m", codec))


@pytest.mark.parametrize("make", [capture_a, capture_b], ids=["a", "b"])
def test_split_tables_of_the_pipeline_captures(make: Any, tmp_path: Path,
                                               codec: ModuleType) -> None:
    written = make(tmp_path / "x.cap")
    raw = written.path.read_bytes()
    for split_size in (100, 300):
        same_tables(split_tables(raw, "x", split_size, codec),
                    whole_tables(raw, "x", codec))


def test_a_truncated_file_is_read_whole(mixed: dict[str, bytes]) -> None:
    """A range that meets a format error makes the file fall back to one task, which
    reports the error as a whole-file read does."""
    raw = mixed["pcapng"][:-10]
    split, _, _ = read_ranges(raw, "m", 1000)
    assert split.problem is not None and split.problem.startswith("range ")


def test_a_range_without_records_of_its_own(mixed: dict[str, bytes]) -> None:
    """Ranges smaller than one frame: most hold no record start, and the chain still
    proves itself."""
    split, rows, ranges = read_ranges(mixed["pcap"], "m", 16)
    assert split.problem is None
    assert ranges > 3 * len(split.offsets) // 4 and len(rows) > 100
    assert split.offsets == sorted(split.offsets)


def test_flow_key_is_the_same_both_ways() -> None:
    from mqttwire.capture import parse_frame
    from mqttwire.capture.link import LINKTYPE_RAW
    from mqttwire.capture.synth import TcpFlow

    f = TcpFlow(("10.0.0.1", 5000), ("10.0.0.2", 1883))
    a, b, _ = f.open()
    key_a = flow_key(parse_frame(LINKTYPE_RAW, memoryview(f.ip(a))))  # type: ignore[arg-type]
    key_b = flow_key(parse_frame(LINKTYPE_RAW, memoryview(f.ip(b))))  # type: ignore[arg-type]
    assert key_a == key_b == bytes([10, 0, 0, 1]) + (5000).to_bytes(2, "big") + bytes(
        [10, 0, 0, 2]) + (1883).to_bytes(2, "big")
    other = TcpFlow(("10.0.0.1", 5001), ("10.0.0.2", 1883))
    assert flow_key(parse_frame(LINKTYPE_RAW, memoryview(other.ip(other.open()[0])))) != key_a  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# With Spark: read_tables and the pipeline (the runs of conftest.py's local_run)

SPARK_TABLES = ("packets", "connections", "messages", "retained", "errors")


def test_read_tables_split_equals_whole(local_run: Any) -> None:
    """Every input of the pipeline tests (a truncated capture, which falls back to one
    task, a text file and a missing path among them) and the mixed captures, split into
    ranges of a few frames and decoded per connection by Spark: the same five tables."""
    whole, split = local_run.mixed["whole"], local_run.mixed["split"]
    assert {row["capture"] for row in whole["connections"]} >= {"mixed.pcap",
                                                                 "mixed.pcapng"}
    for table in SPARK_TABLES:
        assert split[table] == whole[table], table


def test_split_stages_do_not_run_a_task_per_shuffle_partition(local_run: Any) -> None:
    """The split run's stages have a task per range or per connection group, not one per
    spark.sql.shuffle.partitions (200).  The connection ids, made by a window over a
    shuffle, were cached with 200 partitions, mostly empty, and every table's join read
    them in 200 tasks: a 5 KiB capture took 14 s to write instead of 6."""
    assert local_run.split_tasks, "no stage of the split run was seen"
    assert max(local_run.split_tasks) < local_run.shuffle_partitions, local_run.split_tasks


def test_pipeline_split_writes_the_same_tables_and_summary(local_run: Any) -> None:
    from spark_scenarios import read_rows

    for table in SPARK_TABLES:
        assert read_rows(local_run.out["split"], table) == read_rows(
            local_run.out["stream"], table), table
    split, whole = local_run.results["split"], local_run.results["stream"]
    assert (split.packets, split.records, split.counts) == (
        whole.packets, whole.records, whole.counts)
    summary = (local_run.out["split"] / "summary.md").read_text()
    assert summary.replace(str(local_run.out["split"]), "OUT") == (
        local_run.out["stream"] / "summary.md").read_text().replace(
            str(local_run.out["stream"]), "OUT")


@pytest.mark.parametrize("split_size", [0, -5, 1.5, "128m"])
def test_read_tables_refuses_a_bad_split_size(split_size: Any) -> None:
    from mqttwire.spark import read_tables

    with pytest.raises(ValueError, match="split_size must be a positive number of bytes"):
        read_tables(None, ["x.pcap"], split_size=split_size)  # type: ignore[arg-type]
