"""The pipeline's helpers, without Spark: input naming and routing, the summary's
formatting, and the Arrow rows (those need pyarrow, from the spark extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mqttwire._pure as mw
from mqttwire.capture import Record
from mqttwire.spark.inputs import CaptureFile, local_path, name_captures
from mqttwire.spark.plan import BINARY_FILE_LIMIT, route
from mqttwire.spark.report import duration_text, markdown_table, rate_buckets
from mqttwire.spark.run import IMPORTS_AHEAD
from mqttwire.spark.startup import is_on_this_host


def test_local_path() -> None:
    assert local_path("file:/data/a%20b.pcap") == "/data/a b.pcap"
    assert local_path("/data/a.pcap") == "/data/a.pcap"
    assert local_path("hdfs://nn:8020/data/a.pcap") is None
    assert local_path("s3a://bucket/a.pcap") is None


@pytest.mark.spark  # pandas, pyarrow and matplotlib come with the spark extra
def test_the_imports_ahead_are_modules() -> None:
    """The pipeline imports them on a thread and ignores what fails there (the step that
    needs a missing one says so): a misspelt name would be skipped in silence."""
    import importlib.util

    assert all(importlib.util.find_spec(name) is not None for name in IMPORTS_AHEAD)


def test_capture_names_are_unique() -> None:
    files = [CaptureFile("file:/x/a.pcap"), CaptureFile("file:/y/a.pcap"),
             CaptureFile("hdfs://nn/b.pcapng")]
    name_captures(files)
    assert [f.name for f in files] == ["x/a.pcap", "y/a.pcap", "b.pcapng"]


def test_plan_routes_files_to_readers() -> None:
    local = CaptureFile("file:/x/a.pcap", 10)
    remote = CaptureFile("hdfs://nn/b.pcap", 10)
    huge = CaptureFile("s3a://bkt/c.pcap", BINARY_FILE_LIMIT + 1)
    missing = CaptureFile("/x/gone.pcap", problem="no such file")
    stream, binary = route([local, remote, huge, missing], "auto")
    assert (stream[0], stream[2], binary) == (local, missing, [remote])
    # What cannot be read is a copy that says why; the listed file is left as it was.
    assert stream[1].uri == huge.uri and "2 GiB" in (stream[1].problem or "")
    assert huge.problem is None

    stream, binary = route([local, remote], "binaryfile")
    assert (stream, binary) == ([], [local, remote])

    stream, binary = route([local, remote], "stream")
    assert stream[0] == local and binary == []
    assert "not a local path" in (stream[1].problem or "") and remote.problem is None


def test_the_plan_is_made_without_spark() -> None:
    """make_plan: the listed files with the routing's problems, a task per input file
    (one packing task for the small local ones), binaryFile's files, those to split; the
    cores and the packing asked only when files are opened by path."""
    from mqttwire.spark.packing import Packing
    from mqttwire.spark.plan import Listing, make_plan

    files = [CaptureFile("file:/x/a.pcap", 10, "a.pcap"),
             CaptureFile("file:/x/big.pcap", 300 << 20, "big.pcap"),
             CaptureFile("hdfs://nn/b.pcap", 10, "b.pcap"),
             CaptureFile("s3a://bkt/c.pcap", BINARY_FILE_LIMIT + 1, "c.pcap"),
             CaptureFile("/x/gone.pcap", name="gone.pcap", problem="no such file")]
    asked: list[str] = []

    def cores() -> int:
        asked.append("cores")
        return 2

    def packing() -> Packing:
        asked.append("packing")
        return Packing(min_partitions=2)

    plan = make_plan(Listing(files, files), split_size=128 << 20, cores=cores,
                     packing=packing, payload_limit=100)
    assert [f.problem is not None for f in plan.files] == [False, False, False, True, True]
    assert plan.binary == [files[2]] and plan.split == [files[1]]
    # Packed by size as Spark packs files (.packing), the largest first: c.pcap's
    # 2 GiB fills a task (it only makes its error row).
    assert [[t.name for t in task] for task in plan.tasks] == [
        ["c.pcap"], ["a.pcap", "gone.pcap"]]
    assert asked == ["cores", "packing"] and plan.how.payload_limit == 100
    # A split file whose ranges do not join up is read whole instead: a task of its own.
    whole = plan.reading_whole([files[1]])
    assert whole.split == [] and len(whole.tasks) == 3
    assert [[(t.name, t.path) for t in task] for task in whole.tasks][1] == [
        ("big.pcap", "/x/big.pcap")]  # the largest tasks first
    # Only remote files: neither the cores nor the packing is asked for.
    asked.clear()
    assert make_plan(Listing(files[2:3], files[2:3]), cores=cores, packing=packing).tasks == []
    assert asked == []


@pytest.mark.parametrize(("master", "here"), [
    ("local[*]", True), ("local[2]", True), ("spark://127.0.0.1:7077", True),
    ("spark://localhost:7077", True), ("spark://10.1.2.3:7077", False), ("yarn", False),
    (None, False),
])
def test_is_on_this_host(master: str | None, here: bool) -> None:
    assert is_on_this_host(master) is here


def test_markdown_table_escapes() -> None:
    assert markdown_table(["a", "b"], [["x|y", None], [1, "two\nlines"]]) == (
        "| a | b |\n|---|---|\n| x\\|y |  |\n| 1 | two lines |")


def test_rate_buckets() -> None:
    # The smallest round width (1, 2, 5 x 10^k us) giving at most 100 buckets.  10 s:
    # 100 ms would give 10_000_000 // 100_000 + 1 = 101 buckets, 200 ms gives 51.
    assert rate_buckets(0, 10_000_000) == 200_000
    # A span of 1001 us: 10 us gives 101 buckets, 20 us gives 51.
    assert rate_buckets(5, 1006) == 20
    # 99 us: 1 us gives exactly 100 buckets; 100 us needs 2 us (51).
    assert rate_buckets(0, 99) == 1
    assert rate_buckets(0, 100) == 2
    assert rate_buckets(7, 7) == 1  # a single instant
    assert rate_buckets(0, 130_000) == 2_000  # 0.13 s in 2 ms buckets (66)


def test_duration_text() -> None:
    assert duration_text(1) == "1 us"
    assert duration_text(500) == "500 us"
    assert duration_text(2_000) == "2 ms"
    assert duration_text(200_000) == "200 ms"
    assert duration_text(5_000_000) == "5 s"
    assert duration_text(200_000_000) == "200 s"


# ---------------------------------------------------------------------------------------
# Arrow rows (pyarrow)


@pytest.mark.spark
def test_properties_json() -> None:
    from mqttwire.spark.decoding import properties_json

    props = mw.Properties(content_type="text/plain", correlation_data=b"\x01\xff",
                          user_properties=[("k", "v"), ("k", "w")], topic_alias=3)
    assert json.loads(properties_json(props) or "") == {
        "content_type": "text/plain", "correlation_data": "01ff",
        "user_properties": [["k", "v"], ["k", "w"]], "topic_alias": 3}
    assert properties_json(None) is None
    assert properties_json(mw.Properties()) is None


@pytest.mark.spark
def test_packets_batch_columns() -> None:
    from mqttwire.spark.decoding import capture_error_batches, packets_batch
    from mqttwire.spark.schema import ERRORS, PACKETS

    rec = Record("packet", "cap", 1_700_000_000_123_456_789, 1, connection_id="cap#1",
                 direction="c2s", packet_type="PINGREQ", flags=0, length=2)
    batch = packets_batch([rec])
    assert batch.schema == PACKETS and batch.num_rows == 1
    packet = batch.to_pylist()[0]
    # ts has microseconds (the 789 ns are cut); ts_ns keeps them.
    assert packet["ts_ns"] == 1_700_000_000_123_456_789
    assert packet["ts"].timestamp() == pytest.approx(1_700_000_000.123456, abs=1e-6)
    assert packet["ts"].microsecond == 123456
    assert (packet["capture"], packet["kind"], packet["packet_type"], packet["length"]) == (
        "cap", "packet", "PINGREQ", 2)
    assert packet["topic_from_alias"] is False

    # A capture that cannot be read: one row in packets, the same in errors.
    (t1, packets), (t2, errors) = capture_error_batches("x.pcap", "no such file")
    assert (t1, t2) == ("packets", "errors")
    assert packets.schema == PACKETS and errors.schema == ERRORS
    err = packets.to_pylist()[0]
    assert (err["capture"], err["kind"], err["error"], err["topic_from_alias"]) == (
        "x.pcap", "capture_error", "no such file", None)
    assert errors.to_pylist() == [{name: err[name] for name in ERRORS.names}]


@pytest.mark.spark
def test_rows_batch_cuts_times_to_microseconds() -> None:
    from mqttwire.spark.decoding import rows_batch
    from mqttwire.spark.schema import RETAINED

    row = {"capture": "cap", "topic": "t", "connection_id": "cap#1", "client_id": "c",
           "protocol_version": 4, "ts": 1_500_000_000_000_000_999, "qos": 1,
           "payload_length": 3, "payload": b"abc", "stream_offset": 40}
    (got,) = rows_batch("retained", [row]).to_pylist()
    assert rows_batch("retained", [row]).schema == RETAINED
    assert got["ts"].timestamp() == 1_500_000_000.0 and got["ts"].microsecond == 0
    assert {k: v for k, v in got.items() if k != "ts"} == {
        k: v for k, v in row.items() if k != "ts"}


@pytest.mark.spark
def test_stage_round_trip() -> None:
    import pyarrow as pa

    from mqttwire.spark.decoding import stage, unstage
    from mqttwire.spark.schema import STAGED

    batch = pa.record_batch([pa.array([1, None, 3], pa.int32()), pa.array(["a", "b", None])],
                            names=["n", "s"])
    staged = stage("messages", batch)
    assert staged.schema == STAGED and staged.num_rows == 1
    assert staged.column(0).to_pylist() == ["messages"]
    # unstage takes batches of the data column, as Spark hands them over (two rows here).
    data = pa.record_batch([pa.concat_arrays([staged.column(1), staged.column(1)])],
                           names=["data"])
    assert [b.to_pylist() for b in unstage([data])] == [batch.to_pylist()] * 2


def test_tables_by_name_and_repr() -> None:
    from mqttwire.spark import TABLE_NAMES, Tables
    from mqttwire.spark.inputs import CaptureFile

    frames = {name: object() for name in TABLE_NAMES}  # stand-ins for the DataFrames
    files = [CaptureFile(f"file:/d/{n}", 1, n) for n in ("a.pcap", "b.pcap", "c.pcap", "d.pcap")]
    tables = Tables(**frames, files=files, staged=None)  # type: ignore[arg-type]
    assert tables["messages"] is frames["messages"] is tables.messages
    assert [name for name, _ in tables.items()] == list(TABLE_NAMES)
    assert all(frame is frames[name] for name, frame in tables.items())
    with pytest.raises(KeyError, match="no table 'message': the tables are packets, "):
        tables["message"]
    assert repr(tables) == ("<Tables packets, connections, messages, retained, errors of 4 "
                            "input file(s): a.pcap, b.pcap, c.pcap, ...>")


def test_summary_sentences_for_empty_sections() -> None:
    from mqttwire.spark.report import _all_complete_text, _retained_text

    assert _all_complete_text(True) == "Every QoS 1 and 2 exchange in the captures completed."
    # No QoS 1 or 2 PUBLISH at all: nothing "completed".
    assert "completed" not in _all_complete_text(False)
    assert _all_complete_text(False).startswith("No PUBLISH at QoS 1 or 2")
    assert _retained_text(0, 0).startswith("No client sent a PUBLISH with the RETAIN flag")
    assert _retained_text(0, 2).startswith("2 retained PUBLISH packets from clients, each "
                                           "topic cleared again")
    assert _retained_text(0, 1).startswith("1 retained PUBLISH packet from clients, its "
                                           "topic cleared again")
    assert _retained_text(1, 3).startswith("3 retained PUBLISH packets from clients; at the "
                                           "end of the captures 1 topic holds")
    assert _retained_text(2, 3).startswith("3 retained PUBLISH packets from clients; at the "
                                           "end of the captures 2 topics hold")


def test_summary_connections_with_none_one_and_many() -> None:
    # Each sentence read with zero, one and many of each thing.
    from mqttwire.spark.report import _connections_text, count

    assert (count(0, "file"), count(1, "file"), count(2, "file")) == (
        "0 files", "1 file", "2 files")
    assert _connections_text(0, {}) == "No MQTT connection in the captures."
    assert _connections_text(1, {}) == "1 MQTT connection; its CONNECT is in the capture."
    assert _connections_text(1, {"inferred": 1}) == (
        "1 MQTT connection; it joined mid-stream (its CONNECT is not in the capture: it was "
        "open when the capture began, or the CONNECT was lost): the level of 1 inferred "
        "from its traffic.")
    assert _connections_text(3, {"option": 2}) == (
        "3 MQTT connections; 2 joined mid-stream (no CONNECT of theirs in the captures: "
        "open when a capture began, or the CONNECT was lost): the level of 2 given by "
        "--assume-version.")
    assert _connections_text(2, {"inferred": 2}).startswith(
        "2 MQTT connections; all of them joined mid-stream")


@pytest.mark.spark  # needs pyarrow
def test_the_collector_runs_less_often_while_a_capture_decodes_only() -> None:
    import gc

    from mqttwire.spark import decoding
    from mqttwire.spark.derive import CaptureTables

    before = gc.get_threshold()
    seen: list[int] = []

    def records():  # type: ignore[no-untyped-def]
        seen.append(gc.get_threshold()[0])
        yield Record("gap", "c", connection_id="c#1", direction="c2s", ts=1, length=3)

    assert [t for t, _ in decoding.table_batches(records(), CaptureTables("c"))] == [
        "packets", "errors", "connections"]
    assert seen == [decoding.GC_THRESHOLD] and gc.get_threshold() == before
    # Also when the consumer stops early.
    partial = decoding.table_batches(records(), CaptureTables("c"))
    next(partial)
    assert gc.get_threshold()[0] == decoding.GC_THRESHOLD
    partial.close()
    assert gc.get_threshold() == before


@pytest.mark.parametrize("values", [
    [], [3.0], [3.0, 1.0], [1.0, 2.0, 10.0, 10.0], [5.0, 5.0, 5.0, 7.0],
    [0.25, 0.5, 0.75, 1.0, 4.0, 4.0, 9.5], list(map(float, range(1, 101))) * 3])
def test_median_of_counts_is_the_median(values: list[float]) -> None:
    """figures.median_of_counts over (value, count) pairs is the median of the values
    (statistics.median: the middle value, or the mean of the two middle ones; the
    values are exact in binary, so both ways of interpolating give the same float)."""
    import statistics
    from collections import Counter

    from mqttwire.spark.aggregates import median_of_counts

    counts = sorted(Counter(values).items())
    assert median_of_counts(counts) == (statistics.median(values) if values else None)


@pytest.mark.spark
def test_transport_columns() -> None:
    """packets, errors and connections say how each connection carries MQTT: a WebSocket
    connection (on no MQTT port) beside a plain one, decoded as a task does."""
    import io

    from mqttwire.capture.writers import (
        Frame,
        TcpFlow,
        websocket_frame,
        websocket_request,
        websocket_response,
        write_pcapng,
    )
    from mqttwire.spark.decoding import decode_capture

    ws = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", 8080))
    tcp = TcpFlow(("10.0.0.3", 50001), ("10.0.0.2", 1883))
    segs = [(ws, s) for s in ws.open() + ws.send(0, websocket_request())
            + ws.send(1, websocket_response())
            + ws.send(0, websocket_frame(mw.Connect("ws", protocol_version=4).encode(4),
                                         mask=b"\x01\x02\x03\x04"))
            + ws.send(1, websocket_frame(mw.ConnAck().encode(4)))
            + ws.send(0, websocket_frame(b"text", opcode=1, mask=b"\x01\x02\x03\x04"))]
    segs += [(tcp, s) for s in tcp.open() + tcp.send(0, mw.Connect("tcp").encode(5))]
    frames = [Frame(1_700_000_000_000_000_000 + i * 1000, flow.ip(s))
              for i, (flow, s) in enumerate(segs)]
    buf = io.BytesIO()
    write_pcapng(buf, frames)
    buf.seek(0)
    tables: dict[str, list[dict[str, object]]] = {}
    for table, batch in decode_capture(buf, "x.pcapng"):
        tables.setdefault(table, []).extend(batch.to_pylist())
    assert sorted((r["client_id"], r["kind"], r["transport"]) for r in tables["packets"]) == [
        ("tcp", "packet", "tcp"), ("ws", "error", "websocket"),
        ("ws", "packet", "websocket"), ("ws", "packet", "websocket")]
    (error,) = tables["errors"]
    assert error["transport"] == "websocket" and "[MQTT-6.0.0-1]" in str(error["error"])
    assert sorted((r["client_id"], r["transport"], r["server_port"])
                  for r in tables["connections"]) == [("tcp", "tcp", 1883),
                                                      ("ws", "websocket", 8080)]


def test_summary_counts_websocket_connections() -> None:
    from mqttwire.spark.report import _connections_text

    assert _connections_text(3, {}) == (
        "3 MQTT connections; the CONNECT of each is in the captures.")
    assert _connections_text(3, {}, 2) == (
        "3 MQTT connections (2 over WebSocket); the CONNECT of each is in the captures.")
    assert _connections_text(3, {"inferred": 1}, 1).startswith(
        "3 MQTT connections (1 over WebSocket); 1 joined mid-stream")


@pytest.mark.spark  # needs matplotlib
def test_rate_chart_starts_at_zero_and_draws_a_partial_last_bucket_as_partial() -> None:
    # 446 s of messages in 5 s buckets: the 90th bucket holds 1 s of them only (the
    # captures end), so it is drawn 1 s wide on a band that says so, rather than as a
    # drop; the axis starts at 0 although no bucket is below 20 a second.
    from mqttwire.spark.report import rate_figure

    counts = [{"direction": "c2s", "bucket": b, "count": 500 if b < 89 else 100}
              for b in range(90)]
    fig = rate_figure(counts, 0, 445_999_999, 5_000_000)
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0
    xs, ys = ax.lines[0].get_data()
    assert (xs[-2], xs[-1], ys[-2], max(ys)) == (445.0, 446.0, 20.0, 100.0)
    labels = ax.get_legend_handles_labels()[1]
    assert "last bucket partial (1 s of 5 s): the captures end" in labels
    # A full last bucket has no band, nor has a single one (nothing to compare it with).
    for chart_counts, hi, end in ((counts, 449_999_999, 450.0), (counts[:1], 999_999, 1.0)):
        ax = rate_figure(chart_counts, 0, hi, 5_000_000).axes[0]
        assert ax.lines[0].get_data()[0][-1] == end
        assert not any("partial" in label for label in ax.get_legend_handles_labels()[1])


WORKER_IMPORTS = """
import sys
import mqttwire.spark.tasks, mqttwire.spark.decoding, mqttwire.spark.parquet
driver = ("mqttwire.spark.run", "mqttwire.spark.startup", "mqttwire.spark.tables",
          "mqttwire.spark.write", "mqttwire.spark.progress", "mqttwire.spark.report",
          "pyspark", "pyarrow.compute", "pandas", "matplotlib")
print(sorted(name for name in driver if name in sys.modules))
import mqttwire.spark as package
print(package.run_pipeline.__module__, package.Counters.__module__, sorted(dir(package)) ==
      sorted(set(dir(package)) | set(package.__all__)))
"""


@pytest.mark.spark  # pyarrow comes with the spark extra
def test_a_workers_modules_import_without_the_drivers() -> None:
    """A Spark worker imports the package to reach the task code: the driver's modules,
    pyspark and pyarrow.compute (for error rows only) stay out of its start; the
    package's public names are still there when asked for."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", WORKER_IMPORTS], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    assert done.stdout.splitlines() == ["[]", "mqttwire.spark.run mqttwire.spark.tasks True"]


@pytest.fixture
def spark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Spark distribution of a few jars, as pyspark finds it (SPARK_HOME), in the
    file system's order: not the order busy_jars_first puts them in."""
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    for name in ("zstd-jni-1.5.7-6.jar", "ivy-2.5.3.jar", "scala-library-2.13.18.jar",
                 "spark-catalyst_2.13-4.3.0.jar", "README.txt", "py4j-0.10.9.9.jar"):
        (home / "jars" / name).touch()
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)  # not under spark-submit
    return home


@pytest.mark.spark  # pyspark finds the Spark home
def test_busy_jars_first(spark_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mqttwire.spark.startup import _settings, busy_jars_first

    jars = spark_home / "jars"
    expected = os.pathsep.join(str(jars / name) for name in (
        "spark-catalyst_2.13-4.3.0.jar", "scala-library-2.13.18.jar", "ivy-2.5.3.jar",
        "py4j-0.10.9.9.jar"))
    assert busy_jars_first() == busy_jars_first({"spark.ui.enabled": "false"}) == expected
    monkeypatch.setattr("mqttwire.spark.startup.find_java", lambda: "java")
    assert _settings("local[1]", None)["spark.driver.extraClassPath"] == expected
    # A class path of the user's own is theirs alone: never ours ahead of it.
    mine = {"spark.driver.extraClassPath": "/opt/mine.jar"}
    assert busy_jars_first(mine) is None
    assert _settings("local[1]", mine)["spark.driver.extraClassPath"] == "/opt/mine.jar"


@pytest.mark.spark
def test_busy_jars_first_leaves_a_defaults_files_class_path(
        spark_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mqttwire.spark.startup import busy_jars_first

    (spark_home / "conf").mkdir()
    defaults = spark_home / "conf" / "spark-defaults.conf"
    defaults.write_text("spark.driver.memory 2g\n# spark.driver.extraClassPath /x.jar\n")
    assert busy_jars_first() is not None  # a comment sets nothing
    defaults.write_text("spark.driver.memory 2g\nspark.driver.extraClassPath  /x.jar\n")
    assert busy_jars_first() is None
    elsewhere = tmp_path / "conf"  # SPARK_CONF_DIR is where Spark reads it then
    elsewhere.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(elsewhere))
    assert busy_jars_first() is not None
    (elsewhere / "spark-defaults.conf").write_text("spark.driver.extraClassPath\t/y.jar\n")
    assert busy_jars_first() is None


@pytest.mark.spark
def test_busy_jars_first_only_where_it_applies(
        spark_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mqttwire.spark.startup import busy_jars_first

    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # spark-submit started the JVM
    assert busy_jars_first() is None
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT")
    for jar in (spark_home / "jars").iterdir():
        jar.unlink()
    assert busy_jars_first() is None  # none of the busy jars
    (spark_home / "jars").rmdir()
    assert busy_jars_first() is None  # no jars directory


@pytest.mark.spark  # pyspark's SparkContext holds the gateway
def test_a_jvm_that_does_not_exit_in_time_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """ClassArchive.finish waits for the JVM to write its archive as it exits; one that
    takes longer than the bound is killed rather than failing a run that is done."""
    from pyspark import SparkContext

    from mqttwire.spark.startup import _end_jvm

    class Gateway:  # a JVM that ignores its standard input closing, as one busy would
        proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)
        closed = False

        def close(self) -> None:
            self.closed = True

    gateway = Gateway()
    monkeypatch.setattr(SparkContext, "_gateway", gateway)
    monkeypatch.setattr(SparkContext, "_jvm", object())
    _end_jvm(timeout=0.5)
    assert gateway.closed and SparkContext._gateway is None and SparkContext._jvm is None
    assert gateway.proc.returncode == -9  # killed, and waited for


@pytest.mark.spark
@pytest.mark.c_extension
def test_a_decoding_task_does_not_import_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas at its first ``pa.array`` over a Python list or first
    ``pa.scalar`` (0.4 s of CPU), and a Spark Python worker needs pandas for nothing else:
    a task's columns on the compiled path (the packets' list columns and ``file`` column
    among them) and its result rows are made from buffers.  In a fresh interpreter: a
    capture with SUBSCRIBE and SUBACK decoded, its tables written, the task's row made."""
    from spark_scenarios import CLIENT, SERVER, Step, flow, write_capture

    steps = [
        Step("a", CLIENT, mw.Connect("a", protocol_version=5)),
        Step("a", SERVER, mw.ConnAck()),
        Step("a", CLIENT, mw.Subscribe(1, [mw.Subscription("t/#", qos=1),
                                           mw.Subscription("u/+")])),
        Step("a", SERVER, mw.SubAck(1, [1, 0x80])),
        Step("a", SERVER, mw.Publish("t/x", b"p", qos=1, packet_id=2)),
        Step("a", CLIENT, mw.PubAck(2)),
    ]
    capture = write_capture(tmp_path / "s.pcapng", {"a": (flow(50001), 5)}, steps).path
    code = f"""
import sys
from mqttwire.spark.decoding import decode_capture
from mqttwire.spark.parquet import PartFiles
from mqttwire.spark.tasks import Counters, written_report
batches = decode_capture(open({str(capture)!r}, "rb"), "s", payload_limit=None)
rows = [r for b in PartFiles({str(tmp_path / "out")!r}).write(batches) for r in b.to_pylist()]
assert sorted(r["table"] for r in rows) == ["connections", "messages", "packets"], rows
assert written_report(Counters()).num_rows == 1
print("pandas" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False", done.stdout + done.stderr
