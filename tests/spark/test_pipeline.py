"""The whole pipeline on local[2] over the synthetic captures of spark_scenarios.py: every
table's content checked against what the captures hold, for both readers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from spark_scenarios import DELTA_PAYLOAD, comparable_rows, read_rows

pytestmark = pytest.mark.spark

#: once: a comparison of the pipeline's readers, writers, shares, split runs or figure
#: engines over the same captures (the binaryfile reader's tables are checked as the
#: stream reader's are).  What differs between them is Spark's side (how the files reach
#: the tasks, who writes the Parquet files, which tasks read which bytes, Spark's jobs or
#: Arrow over the written files), never the codec, which each of them calls the same
#: way: the stream run's tests prove the pure codec in Spark's Python workers in
#: scripts/test.sh's pure pass, which then makes no other run (tests/spark/conftest.py:
#: local_run makes what the selected tests read).
COMPARISON = pytest.mark.once
# local_run: the parts of the local run that each test reads (tests/spark/conftest.py).
READERS = [pytest.param("stream", marks=pytest.mark.local_run("stream")),
           pytest.param("binaryfile",
                        marks=[pytest.mark.local_run("binaryfile"), COMPARISON])]
TABLES = ("packets", "connections", "messages", "retained", "errors")
US = 1000  # ns per microsecond: the tables' timestamps have microseconds


def us(ns: int) -> int:
    return ns // US


@pytest.fixture(params=READERS)
def out(request: pytest.FixtureRequest, local_run) -> Path:
    return local_run.out[request.param]


def test_every_table_written(out: Path) -> None:
    for table in TABLES:
        assert (out / table / "_SUCCESS").exists(), table
    assert (out / "summary.md").exists()
    png = (out / "message_rate.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_packets(out: Path, captures) -> None:
    rows = read_rows(out, "packets")
    kinds = Counter((r["capture"], r["kind"]) for r in rows)
    # A: alpha sends 11 packets and receives 6, beta sends 3 and receives 4 (see the
    # scenario); B: CONNECT, CONNACK, PUBLISH, then the malformed PUBLISH (an error);
    # C: CONNECT, CONNACK, PUBLISH, then the cut block; the text file (opened, and no
    # capture): one capture_error; the missing path, which nothing opened, none (its
    # capture_error is in errors only: test_errors).
    assert kinds == Counter({
        ("a.pcapng", "packet"): 24,
        ("b.pcap", "packet"): 3, ("b.pcap", "error"): 1,
        ("c.pcapng", "packet"): 3, ("c.pcapng", "capture_error"): 1,
        ("notes.txt", "capture_error"): 1,
    })
    by_type = Counter((r["packet_type"], r["protocol_version"]) for r in rows
                      if r["capture"] == "a.pcapng")
    assert by_type == Counter({
        ("CONNECT", 5): 1, ("CONNACK", 5): 1, ("PUBLISH", 5): 8, ("PUBACK", 5): 2,
        ("PUBREC", 5): 2, ("PUBREL", 5): 1, ("PUBCOMP", 5): 1, ("DISCONNECT", 5): 1,
        ("CONNECT", 4): 1, ("CONNACK", 4): 1, ("PUBLISH", 4): 3, ("PUBACK", 4): 2,
    })
    dup = [r for r in rows if r["dup"]]
    assert len(dup) == 1 and dup[0]["topic"] == "t/d" and dup[0]["packet_id"] == 3
    connect = next(r for r in rows if r["packet_type"] == "CONNECT" and r["client_id"] == "alpha")
    assert _us(connect["ts"]) == us(captures.a.times["alpha connect"])
    assert connect["ts_ns"] == captures.a.times["alpha connect"]
    assert (connect["src_ip"], connect["src_port"], connect["dst_ip"], connect["dst_port"]) == (
        "10.0.0.1", 50001, "10.0.0.2", 1883)
    assert connect["direction"] == "c2s" and connect["stream_offset"] == 0
    # MQTT straight on TCP in every connection; no transport where there is no connection.
    assert {(r["kind"], r["transport"]) for r in rows} == {
        ("packet", "tcp"), ("error", "tcp"), ("capture_error", None)}
    # --payload-limit 4 keeps the first 4 bytes of each payload: "keep" whole, "c22" whole.
    payloads = {r["topic"]: r["payload"] for r in rows
                if r["packet_type"] == "PUBLISH" and r["direction"] == "c2s"
                and r["capture"] == "a.pcapng"}
    assert payloads["t/r"] in (b"keep", b"new")
    assert payloads["t/c"] == b"c22"
    (d_x,) = [r for r in rows if r["topic"] == "d/x"]
    assert d_x["payload"] == DELTA_PAYLOAD[:4] and d_x["payload_length"] == len(DELTA_PAYLOAD)
    pubrec = next(r for r in rows if r["packet_type"] == "PUBREC" and r["packet_id"] == 5)
    assert pubrec["reason_code"] == 0x97


def test_connections(out: Path, captures) -> None:
    rows = {r["client_id"]: r for r in read_rows(out, "connections")}
    assert set(rows) == {"alpha", "beta", "gamma", "delta"}
    assert {r["transport"] for r in rows.values()} == {"tcp"}
    t = captures.a.times
    alpha = rows["alpha"]
    assert (alpha["protocol_version"], alpha["clean_start"], alpha["keep_alive"]) == (5, True, 30)
    assert (alpha["will_topic"], alpha["will_qos"], alpha["will_retain"]) == ("w/alpha", 1, True)
    assert (alpha["username_present"], alpha["password_present"]) == (True, False)
    assert (alpha["close_reason"], alpha["disconnect_by"], alpha["tcp_end"],
            alpha["tcp_closed_by"]) == ("disconnect", "client", "fin", "client")
    assert _us(alpha["connect_ts"]) == us(t["alpha connect"])
    assert _us(alpha["close_ts"]) == us(t["alpha disconnect"])
    assert (alpha["packets_c2s"], alpha["packets_s2c"]) == (11, 6)

    beta = rows["beta"]
    assert (beta["protocol_version"], beta["clean_start"], beta["keep_alive"]) == (4, False, 10)
    assert beta["session_present"] is True and beta["will_topic"] is None
    assert (beta["close_reason"], beta["tcp_end"], beta["disconnect_by"]) == ("rst", "rst", None)
    assert _us(beta["close_ts"]) == us(captures.a.times["beta rst"])
    assert (beta["packets_c2s"], beta["packets_s2c"]) == (3, 4)

    gamma = rows["gamma"]  # still open when capture B ends, after a malformed packet
    assert (gamma["close_reason"], gamma["close_ts"], gamma["errors"]) == ("eof", None, 1)
    assert rows["delta"]["close_reason"] == "fin"


def test_messages(out: Path, captures) -> None:
    rows = read_rows(out, "messages")
    t = captures.a.times
    got = Counter((r["client_id"], r["direction"], r["topic"], r["qos"], r["status"])
                  for r in rows)
    assert got == Counter({
        ("alpha", "c2s", "t/a", 0, None): 2,
        ("alpha", "c2s", "t/b", 1, "complete"): 1,
        ("alpha", "c2s", "t/c", 2, "complete"): 1,
        ("alpha", "c2s", "t/d", 1, "incomplete"): 1,  # its DUP resend is not a new message
        ("alpha", "c2s", "t/r", 1, "complete"): 1,
        ("alpha", "c2s", "t/e", 2, "failed"): 1,
        ("beta", "c2s", "t/r", 1, "complete"): 1,
        ("beta", "s2c", "t/b", 1, "complete"): 1,
        ("beta", "s2c", "t/r", 0, None): 1,
        ("gamma", "c2s", "g/x", 0, None): 1,
        ("delta", "c2s", "d/x", 0, None): 1,
    })
    by_topic = {(r["client_id"], r["direction"], r["topic"]): r for r in rows}
    t_d = by_topic[("alpha", "c2s", "t/d")]
    assert t_d["retransmissions"] == 1 and t_d["completed_ts"] is None
    t_c = by_topic[("alpha", "c2s", "t/c")]
    assert _us(t_c["pubrec_ts"]) == us(t["t/c pubrec"])
    assert _us(t_c["pubrel_ts"]) == us(t["t/c pubrel"])
    assert _us(t_c["pubcomp_ts"]) == us(t["t/c pubcomp"])
    assert t_c["latency_ms"] == pytest.approx((t["t/c pubcomp"] - t["t/c"]) / 1e6)
    t_b = by_topic[("alpha", "c2s", "t/b")]
    assert t_b["latency_ms"] == pytest.approx((t["t/b puback"] - t["t/b"]) / 1e6)
    t_e = by_topic[("alpha", "c2s", "t/e")]
    assert t_e["ack_reason_code"] == 0x97
    assert t_e["latency_ms"] == pytest.approx((t["t/e pubrec"] - t["t/e"]) / 1e6)
    beta_in = by_topic[("beta", "s2c", "t/b")]
    assert beta_in["latency_ms"] == pytest.approx((t["beta t/b puback"] - t["beta t/b"]) / 1e6)


def test_retained(out: Path, captures) -> None:
    rows = read_rows(out, "retained")
    # A: t/a set then cleared by an empty retained PUBLISH; t/r set by alpha, replaced by
    # beta; the server's retained PUBLISH to beta does not count.  B: g/x.
    assert [(r["capture"], r["topic"], r["client_id"], r["payload_length"], r["payload"])
            for r in sorted(rows, key=lambda r: r["capture"])] == [
        ("a.pcapng", "t/r", "beta", 3, b"new"),
        ("b.pcap", "g/x", "gamma", 1, b"1"),
    ]
    assert _us(rows[0]["ts"]) == us(captures.a.times["t/r new"])


def test_errors(out: Path, captures) -> None:
    rows = read_rows(out, "errors")
    got = {(r["capture"], r["kind"]) for r in rows}
    assert got == {("b.pcap", "error"), ("c.pcapng", "capture_error"),
                   ("notes.txt", "capture_error"), ("missing.pcap", "capture_error")}
    bad = next(r for r in rows if r["kind"] == "error")
    # The malformed PUBLISH follows the CONNECT (2 fixed header + 10 variable header
    # + 2+5 client id "gamma" = 19 bytes) and the PUBLISH g/x (2 + 2+3 topic + 1 payload
    # = 8 bytes): it starts at client stream offset 27 and is 5 bytes long.
    assert bad["reason_code"] == 0x81 and "MQTT-3.3.1-4" in bad["error"]
    assert (bad["direction"], bad["stream_offset"], bad["length"]) == ("c2s", 27, 5)
    assert bad["transport"] == "tcp"
    assert _us(bad["ts"]) == us(captures.b.times["bad"])
    missing = next(r for r in rows if r["capture"] == "missing.pcap")
    assert "no such file" in missing["error"]


@pytest.mark.local_run("stream")
def test_result_and_summary(local_run) -> None:
    result = local_run.results["stream"]
    assert sorted(result.bad_captures) == ["c.pcapng", "missing.pcap", "notes.txt"]
    assert result.packets == 30  # 24 + 3 + 3 packet records
    assert result.counts["messages"] == 12
    assert list(result.timings) == ["list", "decode", "write", "summary"]
    assert all(seconds >= 0 for seconds in result.timings.values())
    assert sum(result.timings.values()) <= result.elapsed + 0.01
    text = (local_run.out["stream"] / "summary.md").read_text()
    assert "| t/r |" in text and "did not complete" in text
    assert "message_rate.png" in text
    # The missing input, never opened, is an errors row only: the packets table's rows
    # are the 30 packets, b.pcap's error and two capture_errors (c.pcapng, notes.txt).
    assert "| packets | 33 |" in text and "| errors | 4 |" in text
    # t/a set and cleared, t/r twice (alpha, beta), g/x: five retained PUBLISHes from
    # clients; t/r and g/x hold a message at the end.
    assert ("5 retained PUBLISH packets from clients; at the end of the captures 2 "
            "topics hold a retained message") in text


@pytest.mark.local_run("stream", "read_tables")
def test_read_tables_are_the_written_tables_with_whole_payloads(local_run) -> None:
    """read_tables' DataFrames hold what the pipeline writes; without a payload limit
    (read_tables' default, and the command's) each payload is whole."""
    assert local_run.frames["packets"], "read_tables gave no packet"
    for table in TABLES:
        frames = local_run.frames[table]
        cut = [dict(r, payload=r["payload"][:4]) if r.get("payload") is not None else r
               for r in frames]
        written = comparable_rows(read_rows(local_run.out["stream"], table))
        assert comparable_rows(cut) == written, table
    for table in ("packets", "messages"):
        (d_x,) = [r for r in local_run.frames[table] if r["topic"] == "d/x"]
        assert d_x["payload"] == DELTA_PAYLOAD, table


@COMPARISON
@pytest.mark.local_run("stream", "binaryfile")
def test_readers_agree(local_run) -> None:
    for table in TABLES:
        assert read_rows(local_run.out["stream"], table) == read_rows(
            local_run.out["binaryfile"], table), table


@COMPARISON
@pytest.mark.local_run("stream", "spark-writer")
def test_tasks_write_the_tables_that_spark_writes(local_run) -> None:
    """With a local output directory the decoding tasks write the files themselves
    (pyarrow); with writer "spark", Spark does: the same tables, row for row, in the same
    layout, and the same summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tasks, spark = local_run.out["stream"], local_run.out["spark-writer"]
    for table in TABLES:
        assert read_rows(tasks, table) == read_rows(spark, table), table
        assert (spark / table / "_SUCCESS").exists()

    def files(out: Path) -> dict[str, set[str]]:
        return {table: {str(p.parent.relative_to(out)) for p in (out / table).rglob("*.parquet")}
                for table in TABLES}

    assert files(tasks) == files(spark)
    assert not (tasks / "_temporary").exists()

    def writers(out: Path) -> set[str]:
        return {pq.ParquetFile(p).metadata.created_by.split()[0]
                for p in out.rglob("*.parquet")}

    assert writers(tasks) == {"parquet-cpp-arrow"}
    assert writers(spark) == {"parquet-mr"}
    # Both write times as INT64 microseconds, UTC (not Spark's legacy INT96).
    for out in (tasks, spark):
        part = sorted((out / "messages").glob("*.parquet"))[0]
        assert pq.read_schema(part).field("ts").type == pa.timestamp("us", tz="UTC")
    assert (local_run.results["stream"].summary_text.replace(str(tasks), "OUT")
            == local_run.results["spark-writer"].summary_text.replace(str(spark), "OUT"))


@COMPARISON
@pytest.mark.local_run("stream", "shares")
def test_files_read_in_shares_give_the_same_tables(local_run) -> None:
    """Every capture read by two tasks, each keeping a share of the connections
    (mqttwire.spark.connection_shares): the tables, row for row, the totals and the summary of the
    whole-file run."""
    shares, whole = local_run.out["shares"], local_run.out["stream"]
    for table in TABLES:
        assert read_rows(shares, table) == read_rows(whole, table), table
    assert read_rows(whole, "retained")  # one retained topic replaced across connections
    a, b = local_run.results["shares"], local_run.results["stream"]
    assert (a.records, a.packets, a.error_records, a.counts) == (
        b.records, b.packets, b.error_records, b.counts)
    assert (a.summary_text.replace(str(shares), "OUT")
            == b.summary_text.replace(str(whole), "OUT"))
    assert not (shares / "_temporary").exists()


@pytest.mark.local_run("partitions")
def test_partition_directories_are_named_as_spark_names_them(local_run) -> None:
    # from spark_scenarios, not conftest: with tests/capture in the same run, "conftest"
    # may be the other directory's module (this failed now and then)
    from spark_scenarios import PARTITION_NAMES

    from mqttwire.spark.parquet import partition_dir

    assert sorted(partition_dir("capture", name) for name in PARTITION_NAMES) == (
        local_run.partition_dirs)


def test_writer_option_is_checked_before_spark_starts(captures) -> None:
    from mqttwire.spark import PipelineOptions, run_pipeline

    with pytest.raises(ValueError, match="writer must be auto, tasks or spark, not 'x'"):
        run_pipeline(PipelineOptions(captures.inputs, "/tmp/x", writer="x"))
    with pytest.raises(ValueError, match="writer 'tasks' needs the output on a local path, "
                                         "not 'hdfs://nn/out'"):
        run_pipeline(PipelineOptions(captures.inputs, "hdfs://nn/out", writer="tasks"))


def _us(value) -> int:
    """A timestamp read back from Parquet (an aware datetime) in microseconds."""
    return round(value.timestamp() * 1_000_000)


@COMPARISON
@pytest.mark.local_run("figures")
@pytest.mark.parametrize("reader", ["stream", "split"])
def test_both_figure_engines_give_the_same_summary(local_run, reader: str) -> None:
    """The summary's figures are the same from Spark's jobs and from Arrow over the
    files (mqttwire.spark.aggregates: the pipeline uses Arrow when the driver sees the
    output), and so is the summary written from each."""
    arrow, spark = local_run.figures[reader]["arrow"], local_run.figures[reader]["spark"]
    assert arrow == spark
    # every figure has something to compare: the scenarios' unfinished exchanges, error
    # rows, bad captures, latencies and retained PUBLISHes
    assert arrow["unfinished"] and arrow["first_errors"] and arrow["bad"]
    assert [r["median_ms"] for r in arrow["qos"] if r["median_ms"] is not None]
    assert arrow["retained_sent"] == 5
    assert local_run.spark_summaries[reader] == local_run.results[reader].summary_text
