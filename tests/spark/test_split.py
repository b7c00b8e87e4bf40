"""One capture split over many tasks (mqttwire.spark.split) gives the tables of a
whole-file read, table by table.

The first tests run the split steps in plain Python (no Spark: fast, so every split size
and both implementations): the range tasks, the shuffle (rows by a hash of their
connection key into a few "tasks", sorted in each), the openings pass, the
per-connection decoding, then the two rules applied over all tasks, written here
independently: a connection's number is the rank of the frame that opened it, and the
retained message of a topic is the latest by (frame, connection, arrival).  The Spark
tests run read_tables and the pipeline themselves.
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
from spark_scenarios import capture_a, capture_b, capture_mixed, comparable_rows, ring_buffer

from mqttwire.capture import read_capture
from mqttwire.capture.ranges import plan_ranges
from mqttwire.spark.derive import CaptureTables

# The split modules need pyarrow (the spark extra), so every test here is marked spark:
# where the extra is missing (the wheel tests run `-m "not spark"`), they are deselected
# and these names are never used.
try:
    from mqttwire.spark.decoding import Decoding, table_batches
    from mqttwire.spark.split import (
        FACTS,
        PIECE_BYTES,
        FileSplit,
        check_file,
        decode_rows,
        flow_key,
        guessed_numbers,
        openings_of,
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


def read_ranges(raw: bytes, name: str, split_size: int, piece_bytes: int | None = None,
                facts: list[dict[str, Any]] | None = None
                ) -> tuple[FileSplit, list[Any], int]:
    """The range tasks of a file: its FileSplit, its connection rows, and how many
    ranges (``facts`` gets the ranges' facts).  ``piece_bytes``: default PIECE_BYTES
    (looked up at the call: without pyarrow the module imports, its tests deselected,
    and the name is not defined)."""
    if piece_bytes is None:
        piece_bytes = PIECE_BYTES
    if facts is None:
        facts = []
    rows: list[Any] = []
    ranges = plan_ranges(len(raw), split_size)
    for index, (start, end) in enumerate(ranges):
        for key, value in range_rows(io.BytesIO(raw), name, index, start, end, piece_bytes):
            if key[1] == FACTS:
                facts.append(json.loads(value[1]))
            else:
                rows.append((key, value))
    return check_file(facts), rows, len(ranges)


def split_tables(raw: bytes, name: str, split_size: int, codec: ModuleType,
                 tasks: int = 3, piece_bytes: int | None = None
                 ) -> dict[str, list[dict[str, Any]]]:
    """The tables of the split path, its Spark steps done in Python."""
    facts: list[dict[str, Any]] = []
    split, rows, _ = read_ranges(raw, name, split_size, piece_bytes, facts)
    assert split.problem is None, split.problem
    return shuffled_tables(name, split, rows, codec, tasks, facts)[0]


def shuffled_tables(name: str, split: FileSplit, rows: list[Any], codec: ModuleType,
                    tasks: int, facts: list[dict[str, Any]]
                    ) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """The shuffle and the decoding of a split capture's rows, as SplitRead.written
    does it: with the connection numbers guessed from the ranges' facts, then, if the
    decoding found other frames opening the connections, again with those.  Also how
    many decodings it took (1 or 2); the frames found are those of the openings step
    (openings_of, the reassembler run over the rows alone)."""
    parts: list[list[Any]] = [[] for _ in range(tasks)]
    for row in rows:
        parts[zlib.crc32(row[0][1]) % tasks].append(row)
    for part in parts:
        part.sort(key=lambda row: row[0])
    how = Decoding((1883,), ALL, None)
    # Connection numbers: the rank of the opening frame among all the capture's.
    exact = sorted(split.offsets[index] + number for part in parts
                   for index, number in openings_of(name, part, how, codec))
    assert len(exact) == len(set(exact)), "a frame opened two connections"
    numbers = guessed_numbers(facts, split)
    for decodings in (1, 2):
        out: dict[str, list[dict[str, Any]]] = defaultdict(list)
        opened: list[int] = []
        for part in parts:
            for table, batch in decode_rows(name, part, split, numbers, how, codec=codec,
                                            opened=opened):
                out[table] += batch.to_pylist()
        assert sorted(opened) == exact
        found = {frame: n for n, frame in enumerate(sorted(opened), 1)}
        if found == numbers:
            break
        assert decodings == 1, "the numbers found were not kept"
        numbers = found
    # Retained: the latest event per topic, unless it removed the message.
    latest: dict[str, dict[str, Any]] = {}
    for event in out.pop("retain_events", []):
        order = (event.pop("order_frame"), event.pop("order_connection"),
                 event.pop("order_seen"))
        if event["topic"] not in latest or latest[event["topic"]]["order"] < order:
            latest[event["topic"]] = {"order": order, "row": event}
    assert not out["retained"], "a task chose retained messages itself"
    out["retained"] = [held["row"] for held in latest.values() if held["row"]["payload_length"]]
    return out, decodings


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


@pytest.mark.parametrize("piece_bytes", [1, 300])
def test_a_connection_cut_into_several_rows_of_a_range(mixed: dict[str, bytes],
                                                       piece_bytes: int,
                                                       codec: ModuleType) -> None:
    """A connection's frames of one range are cut into rows of about ``piece_bytes``
    (one frame each at 1 byte): the same tables."""
    raw = mixed["pcap"]
    _, rows, _ = read_ranges(raw, "m", 4096, piece_bytes)
    assert max(key[3] for key, _ in rows) > 0
    same_tables(split_tables(raw, "m", 4096, codec, piece_bytes=piece_bytes),
                whole_tables(raw, "m", codec))


def test_a_range_ships_a_row_per_connection(mixed: dict[str, bytes]) -> None:
    """What crosses the JVM: one row per connection and range, not one per frame."""
    raw = mixed["pcapng"]
    _, rows, ranges = read_ranges(raw, "m", 4096)
    frames = sum(len(numbers) // 8 for _, (numbers, _) in rows)
    per_range: dict[int, set[bytes]] = defaultdict(set)
    for key, _ in rows:
        per_range[key[2]].add(key[1])
    assert len(rows) == sum(len(flows) for flows in per_range.values())
    assert frames > 4 * len(rows)


@pytest.mark.parametrize("make", [capture_a, capture_b], ids=["a", "b"])
def test_split_tables_of_the_pipeline_captures(make: Any, tmp_path: Path,
                                               codec: ModuleType) -> None:
    written = make(tmp_path / "x.cap")
    raw = written.path.read_bytes()
    for split_size in (100, 300):
        same_tables(split_tables(raw, "x", split_size, codec),
                    whole_tables(raw, "x", codec))


@pytest.mark.parametrize("make", [capture_a, capture_b], ids=["a", "b"])
def test_one_decoding_where_each_connection_opens_at_its_first_frame(
        make: Any, tmp_path: Path, codec: ModuleType) -> None:
    """The connection numbers guessed from the ranges' facts (each 4-tuple's first frame
    opened it) are the reassembler's for captures of one connection per 4-tuple: the
    rows are decoded once (the shuffle output read once)."""
    raw = make(tmp_path / "x.cap").path.read_bytes()
    facts: list[dict[str, Any]] = []
    split, rows, ranges = read_ranges(raw, "x", 200, facts=facts)
    assert ranges > 1 and split.problem is None
    tables, decodings = shuffled_tables("x", split, rows, codec, 3, facts)
    assert decodings == 1
    same_tables(tables, whole_tables(raw, "x", codec))


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_a_4_tuple_used_again_makes_a_second_decoding(mixed: dict[str, bytes], fmt: str,
                                                      codec: ModuleType) -> None:
    """The mixed capture's client "reuse" connects twice from the same port: the second
    connection has no first frame of its own key, so the guess misses it, the decoding
    finds it, and the second decoding's tables are the whole file's."""
    raw = mixed[fmt]
    facts: list[dict[str, Any]] = []
    split, rows, _ = read_ranges(raw, "m", 1000, facts=facts)
    guess = guessed_numbers(facts, split)
    tables, decodings = shuffled_tables("m", split, rows, codec, 3, facts)
    assert decodings == 2
    assert len(guess) < len({row["connection_id"] for row in tables["connections"]}) + 1
    same_tables(tables, whole_tables(raw, "m", codec))


def test_a_truncated_file_is_read_whole(mixed: dict[str, bytes]) -> None:
    """A range that meets a format error makes the file fall back to one task, which
    reports the error as a whole-file read does."""
    raw = mixed["pcapng"][:-10]
    split, _, _ = read_ranges(raw, "m", 1000)
    assert split.problem is not None and split.problem.startswith("range ")


def test_a_range_without_records_of_its_own(mixed: dict[str, bytes],
                                            codec: ModuleType) -> None:
    """Ranges smaller than one frame: most hold no record start, and the chain still
    proves itself."""
    split, rows, ranges = read_ranges(mixed["pcap"], "m", 16)
    assert split.problem is None
    assert ranges > 3 * len(split.offsets) // 4 and len(rows) > 100
    same_tables(split_tables(mixed["pcap"], "m", 16, codec),
                whole_tables(mixed["pcap"], "m", codec))
    assert split.offsets == sorted(split.offsets)


def test_flow_key_is_the_same_both_ways() -> None:
    from mqttwire.capture import parse_frame
    from mqttwire.capture.link import LINKTYPE_RAW
    from mqttwire.capture.writers import TcpFlow

    f = TcpFlow(("10.0.0.1", 5000), ("10.0.0.2", 1883))
    a, b, _ = f.open()
    key_a = flow_key(parse_frame(LINKTYPE_RAW, memoryview(f.ip(a))))  # type: ignore[arg-type]
    key_b = flow_key(parse_frame(LINKTYPE_RAW, memoryview(f.ip(b))))  # type: ignore[arg-type]
    assert key_a == key_b == bytes([10, 0, 0, 1]) + (5000).to_bytes(2, "big") + bytes(
        [10, 0, 0, 2]) + (1883).to_bytes(2, "big")
    other = TcpFlow(("10.0.0.1", 5001), ("10.0.0.2", 1883))
    assert flow_key(parse_frame(LINKTYPE_RAW, memoryview(other.ip(other.open()[0])))) != key_a  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# With Spark: read_tables and the pipeline (the runs of conftest.py's local_run; the
# marker local_run names the parts each test reads).  once: split against whole reads,
# the same codec in both; what splitting changes is Spark's side (ranges, the shuffle of
# rows by connection, the stages' tasks), and the split steps' decoding is proven on both
# codecs without Spark above.  Without them, the pure pass makes no split run at all.

SPARK_TABLES = ("packets", "connections", "messages", "retained", "errors")


@pytest.mark.once
@pytest.mark.local_run("mixed")
def test_read_tables_split_equals_whole(local_run: Any) -> None:
    """Every input of the pipeline tests (a truncated capture, which falls back to one
    task, a text file and a missing path among them), the mixed captures and a ring
    buffer of the mixed pcapng (a folder of editcap -c's files, one capture), split into
    ranges of a few frames and decoded per connection by Spark: the same five tables as
    each file (and the ring buffer) read by one task."""
    whole, split = local_run.mixed["whole"], local_run.mixed["split"]
    # A folder's files are named by their path in it (the folder's name first).
    ring = sorted(f"ring/{path.name}" for path in local_run.ring.iterdir())
    assert {row["capture"] for row in whole["connections"]} >= {"mixed.pcap",
                                                                "mixed.pcapng", ring[0]}
    # The ring buffer and the mixed captures went the split way; the ring's packets
    # name the files they came from.
    assert {"mixed.pcap", "mixed.pcapng", ring[0]} <= set(local_run.split_files)
    assert len({row["file"] for row in split["packets"]} & set(ring)) > 3
    for table in SPARK_TABLES:
        assert split[table] == whole[table], table


@pytest.mark.once
@pytest.mark.local_run("split")
def test_split_stages_do_not_run_a_task_per_shuffle_partition(local_run: Any) -> None:
    """The split run's stages have a task per range or per connection group, not one per
    spark.sql.shuffle.partitions (200).  The connection ids, made by a window over a
    shuffle, were cached with 200 partitions, mostly empty, and every table's join read
    them in 200 tasks: a 5 KiB capture took 14 s to write instead of 6."""
    assert local_run.split_tasks, "no stage of the split run was seen"
    assert max(local_run.split_tasks) < local_run.shuffle_partitions, local_run.split_tasks


@pytest.mark.once
@pytest.mark.local_run("stream", "split")
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


# ---------------------------------------------------------------------------------------
# A set of files (a ring buffer) read as one capture, its files' rows shuffled together


def set_tables(paths: list[Path], codec: ModuleType) -> dict[str, list[dict[str, Any]]]:
    """The tables of the set read whole, as one capture (the ordinary path: .set_files)."""
    from mqttwire.capture import MqttStreams, read_chain
    from mqttwire.capture.sets import FileChain

    name = paths[0].name
    chain = FileChain([(p.name, lambda p=p: open(p, "rb")) for p in paths])
    handler = MqttStreams(name, ports=(1883,), codec=codec, payload_limit=ALL,
                          stream_ends=True)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with chain:
        for table, batch in table_batches(read_chain(chain, handler), CaptureTables(name),
                                          None, chain.files_of):
            out[table] += batch.to_pylist()
    return out


def split_set_tables(paths: list[Path], split_size: int, codec: ModuleType,
                     tasks: int = 3) -> dict[str, list[dict[str, Any]]]:
    """The tables of the split path over the set's files, its Spark steps in Python."""
    name = paths[0].name
    facts: list[dict[str, Any]] = []
    rows: list[Any] = []
    index = 0
    for member, path in enumerate(paths):
        raw = path.read_bytes()
        for start, end in plan_ranges(len(raw), split_size):
            for key, value in range_rows(io.BytesIO(raw), name, index, start, end,
                                         member=member):
                if key[1] == FACTS:
                    facts.append(json.loads(value[1]))
                else:
                    rows.append((key, value))
            index += 1
    split = check_file(facts, [p.name for p in paths])
    assert split.problem is None, split.problem
    return shuffled_tables(name, split, rows, codec, tasks, facts)[0]


@pytest.mark.parametrize("frames", [7, 40])
@pytest.mark.parametrize("split_size", [300, 1 << 20])
def test_a_ring_buffer_split_equals_the_set_read_whole(mixed: dict[str, bytes],
                                                       tmp_path: Path, frames: int,
                                                       split_size: int,
                                                       codec: ModuleType) -> None:
    """The mixed capture cut by editcap -c into files of a few frames: each file read in
    ranges (or whole, at 1 MiB), every file's rows of a connection decoded together, the
    same tables as the set read as one capture, the ``file`` of each packet included;
    and the same as the uncut file's, but for that column."""
    paths = ring_buffer(mixed["pcapng"], tmp_path / "ring", frames)
    assert len(paths) > 3
    got = split_set_tables(paths, split_size, codec)
    same_tables(got, set_tables(paths, codec))
    files = {row["file"] for row in got["packets"]}
    assert len(files) > 3 and files <= {p.name for p in paths}
    whole = whole_tables(mixed["pcapng"], paths[0].name, codec)
    for row in got["packets"] + got["errors"]:
        row["file"] = paths[0].name
    same_tables(got, whole)


def test_a_ring_buffer_with_a_corrupt_file_is_read_whole(mixed: dict[str, bytes],
                                                         tmp_path: Path) -> None:
    paths = ring_buffer(mixed["pcapng"], tmp_path / "ring", 40)
    paths[1].write_bytes(paths[1].read_bytes()[:-10])
    facts = []
    for member, path in enumerate(paths):
        raw = path.read_bytes()
        for key, value in range_rows(io.BytesIO(raw), "r", member, 0, len(raw),
                                     member=member, label=path.name):
            if key[1] == FACTS:
                facts.append(json.loads(value[1]))
    problem = check_file(facts, [p.name for p in paths]).problem
    assert problem is not None and paths[1].name in problem


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_the_compiled_keys_make_the_same_rows(mixed: dict[str, bytes], fmt: str) -> None:
    """The range tasks take the common frames' connection keys from the compiled loop's
    parser where it is built: the same rows (and facts) as link.py's keys for all."""
    from mqttwire.capture import loop_c  # noqa: F401  # fails loudly where not built

    raw = mixed[fmt]
    for index, (start, end) in enumerate(plan_ranges(len(raw), 1000)):
        assert list(range_rows(io.BytesIO(raw), "m", index, start, end, compiled=True)) == (
            list(range_rows(io.BytesIO(raw), "m", index, start, end, compiled=False)))


def test_the_split_line_says_what_crossed_the_shuffle() -> None:
    from mqttwire.spark.inputs import CaptureFile
    from mqttwire.spark.split import SplitRead

    read = SplitRead([CaptureFile("file:/a.pcap", 10, "a.pcap")],
                     [CaptureFile("file:/b.pcap", 10, "b.pcap")], None,  # type: ignore[arg-type]
                     {}, {}, Decoding((1883,), ALL, None), 1234, 3 << 20)
    assert read.line() == ("1 capture(s) split, 1,234 rows (3.0 MiB) through the shuffle; "
                           "read whole: b.pcap")
