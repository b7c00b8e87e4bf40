"""mqttwire.capture.arrow.packets_table: one capture's packets table as a pyarrow.Table,
with either codec (the compiled loop's columns, or Records the reference way); the
compiled columns' table of contexts (the values a direction's rows share)."""

from __future__ import annotations

import io
from types import ModuleType
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # the spark extra's; no stubs
import pytest
from capture_helpers import T0, conversation, encode_all, read, segments_for, write
from loop_checks import cython_codec, reference_packets_table

from mqttwire.capture import read_capture
from mqttwire.capture.arrow import BATCH_ROWS, packets_table
from mqttwire.capture.writers import (
    Frame,
    Segment,
    TcpFlow,
    websocket_frame,
    websocket_request,
    websocket_response,
)


def _capture(codec: ModuleType, publishes: int = 0) -> bytes:
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 1883))
    conv = conversation(codec, 5, "arrow-client")
    sent = encode_all(conv, 5)
    segs = flow.open() + segments_for(flow, sent)
    if publishes:
        extra = encode_all([(0, codec.Publish(f"t/{i % 7}", b"x" * (i % 13), qos=0))
                            for i in range(publishes)], 5)
        segs += segments_for(flow, extra, sizes=[300])
    segs += flow.close()
    return write([Frame(T0 + i * 1000, flow.ip(s)) for i, s in enumerate(segs)])


def test_the_table_of_a_known_capture(codec: ModuleType) -> None:
    """Checked against what the capture was written to hold, not against the code."""
    raw = _capture(codec, publishes=20)
    table = packets_table(io.BytesIO(raw), name="k.pcapng", codec=codec, payload_limit=4)
    assert isinstance(table, pa.Table)
    sent = encode_all(conversation(codec, 5, "arrow-client"), 5)
    assert table.num_rows == len(sent) + 20
    assert table["packet_type"].to_pylist()[0] == "CONNECT"
    tail = table.slice(len(sent))
    assert tail["topic"].to_pylist() == [f"t/{i % 7}" for i in range(20)]
    assert tail["payload_length"].to_pylist() == [i % 13 for i in range(20)]
    assert tail["payload"].to_pylist() == [b"x" * min(4, i % 13) for i in range(20)]
    assert set(table["capture"].to_pylist()) == {"k.pcapng"}
    assert set(table["file"].to_pylist()) == {"k.pcapng"}
    assert set(table["client_id"].to_pylist()) == {"arrow-client"}
    assert set(table["protocol_version"].to_pylist()) == {5}
    assert table["ts_ns"][0].as_py() >= T0
    assert table["ts"][0].value == table["ts_ns"][0].as_py() // 1000
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("publishes", [0, BATCH_ROWS + 3])
def test_equal_to_the_records_table(codec: ModuleType, publishes: int, tmp_path: Any) -> None:
    """The table of a path equals the one built the reference way from read_capture's
    records (of the pure loop, whatever the codec: tests/capture/conftest.py), over
    more than one batch."""
    path = tmp_path / "e.pcapng"
    path.write_bytes(_capture(codec, publishes))
    table = packets_table(str(path), codec=codec, payload_limit=100)
    records = list(read_capture(str(path), codec=codec, payload_limit=100))
    expected = reference_packets_table(records)
    assert table.num_rows == len(records)
    assert table.equals(expected)


def test_a_damaged_capture_ends_with_its_error_row(codec: ModuleType) -> None:
    raw = _capture(codec, publishes=5)
    table = packets_table(io.BytesIO(raw[:-7]), name="d.pcapng", codec=codec)
    kinds = table["kind"].to_pylist()
    assert kinds[-1] == "capture_error"
    assert table["error"][-1].as_py()
    assert kinds.count("packet") == len(kinds) - 1


@pytest.mark.c_extension
def test_columns_repeat_a_value_of_the_same_object_exactly() -> None:
    """PacketColumns' rows read back as they were given: values repeated from the same
    objects, changed, null between, ints of one digit and more, negative ones, ASCII and
    other str, in every kind of column and across take_buffers."""
    from mqttwire.capture import Record, arrow_c  # fails loudly where not built
    from mqttwire.capture.arrow import columns_batch

    schema = pa.schema([("kind", pa.string()), ("frame", pa.int64()),
                        ("ts", pa.timestamp("us", tz="UTC")), ("qos", pa.int8()),
                        ("dup", pa.bool_()), ("topic", pa.string()), ("payload", pa.binary()),
                        ("packet_id", pa.int32())])
    spec = [(name, kind, 0) for name, kind in [("kind", b"s"), ("frame", b"l"), ("ts", b"t"),
                                               ("qos", b"b"), ("dup", b"?"), ("topic", b"s"),
                                               ("payload", b"y"), ("packet_id", b"i")]]
    big, topic, payload = 10**15 + 7, "a/" + "x" * 40, b"\x00\xff" * 9
    # Each value object used again and again, with other objects and None in between: a
    # value built anew each time (int(str(...)), "".join) is equal but not the same object.
    values = [
        (big, big, 1, True, topic, payload, 70000),
        (big, big, 1, True, topic, payload, 70000),
        (None, None, None, None, None, None, None),
        (big, big, 2, False, topic, payload, 70000),
        (int(str(big)), int(str(big)), 2, False, "".join(["a/", "x" * 40]), bytes(payload), 5),
        (big, big, 2, False, topic, b"", 5),
        (big, big, 2, False, topic, b"", 5),
        # Negative and one-digit ints, and a str that is not ASCII (read another way).
        (-5, -(2**40), -1, False, "caf\u00e9/\U0001f600", b"", 0),
        (0, 0, 0, False, "", b"", 2**31 - 1),
    ]
    columns = arrow_c.PacketColumns(spec)
    got = []
    for rows in (values, values[3:], values[:1]):
        for frame, ts, qos, dup, tpc, pay, pid in rows:
            columns.add_record(Record("packet", "c", ts=ts, frame=frame, qos=qos, dup=dup,
                                      topic=tpc, payload=pay, packet_id=pid))
        n = len(columns)
        got += columns_batch(columns.take_buffers(), n, schema, "").to_pylist()
    # The ts column holds microseconds, from the record's nanoseconds.
    expected = [pa.RecordBatch.from_pylist([{
        "kind": "packet", "frame": frame, "ts": None if ts is None else ts // 1000,
        "qos": qos, "dup": dup, "topic": tpc, "payload": pay, "packet_id": pid}],
        schema=schema).to_pylist()[0]
        for rows in (values, values[3:], values[:1])
        for frame, ts, qos, dup, tpc, pay, pid in rows]
    assert got == expected


@pytest.mark.c_extension
@pytest.mark.parametrize("field, kind, value, error", [
    ("qos", b"b", 128, OverflowError), ("qos", b"b", -129, OverflowError),
    ("packet_id", b"i", 2**31, OverflowError), ("frame", b"l", 2**63, OverflowError),
    ("frame", b"l", -(2**63) - 1, OverflowError), ("frame", b"l", True, TypeError),
    ("frame", b"l", 1.0, TypeError), ("topic", b"s", b"t", TypeError),
    ("payload", b"y", "p", TypeError),
])
def test_columns_refuse_a_value_their_kind_cannot_hold(field: str, kind: bytes, value: Any,
                                                      error: type[Exception]) -> None:
    """A value out of its column's range, or of another type (a bool is not an int
    there), raises rather than being stored wrapped or converted."""
    from mqttwire.capture import Record, arrow_c  # fails loudly where not built

    columns = arrow_c.PacketColumns([(field, kind, 0)])
    with pytest.raises(error, match=field):
        columns.add_record(Record("packet", "c", **{field: value}))


def _interleaved(flows: list[tuple[TcpFlow, list[Segment]]]) -> bytes:
    """The flows' segments as one capture, a frame of each flow in turn."""
    frames: list[Frame] = []
    while any(segs for _, segs in flows):
        for flow, segs in flows:
            if segs:
                frames.append(Frame(T0 + len(frames) * 1000, flow.ip(segs.pop(0))))
    return write(frames)


def _changing_contexts(codec: ModuleType) -> bytes:
    """Three connections interleaved frame by frame: A joined mid-stream (its level
    inferred from a window of traffic, then its client id and the level's source learnt
    from a CONNECT in the middle of a segment); B with a bad packet (an error row); C
    in WebSocket (all its rows the pure code's)."""
    a = TcpFlow(("10.6.0.1", 46000), ("10.6.0.99", 1883))
    a.open()  # before the capture began
    # More than the 64 kB window (direction.WINDOW): the level is inferred from these.
    segs_a = a.send(0, b"".join(codec.Publish("a/early", b"e" * 1000).encode(4)
                                for _ in range(70)))
    segs_a += a.send(1, codec.Publish("a/down", b"d").encode(4) * 3, sizes=[1 << 16])
    for text in (b"k1", b"k2"):
        segs_a += a.send(0, codec.Publish("a/known", text).encode(4) * 4, sizes=[1 << 16])
    segs_a += a.send(0, codec.Publish("a/before", b"1").encode(4)
                     + codec.Connect("late", protocol_version=4).encode(4)
                     + codec.Publish("a/after", b"2").encode(4) * 3, sizes=[1 << 16])
    segs_a.append(a.ack(1))
    segs_a += a.send(0, codec.Publish("a/later", b"3", qos=1, packet_id=5).encode(4),
                     sizes=[1 << 16])
    segs_a += a.send(1, codec.PubAck(5).encode(4))
    b = TcpFlow(("10.6.0.2", 46001), ("10.6.0.99", 1883))
    segs_b = b.open()
    segs_b += b.send(0, codec.Connect("b", protocol_version=5).encode(5))
    segs_b += b.send(1, codec.ConnAck().encode(5))
    for i in range(6):
        segs_b += b.send(0, codec.Publish("b/t", b"%d" % i, qos=1, packet_id=i + 1).encode(5))
        # the fourth acknowledgement has packet identifier 0 [MQTT-2.2.1-3]: an error row
        segs_b += b.send(1, b"\x40\x02\x00\x00" if i == 3 else codec.PubAck(i + 1).encode(5))
    segs_b += b.close()
    c = TcpFlow(("10.6.0.3", 46002), ("10.6.0.99", 8080))  # found by its Upgrade
    segs_c = c.open()
    segs_c += c.send(0, websocket_request())
    segs_c += c.send(1, websocket_response())
    segs_c += c.send(0, websocket_frame(codec.Connect("ws", protocol_version=4).encode(4),
                                        mask=b"\x01\x02\x03\x04"))
    segs_c += c.send(1, websocket_frame(codec.ConnAck().encode(4)))
    for i in range(5):
        segs_c += c.send(0, websocket_frame(codec.Publish("c/t", b"%d" % i).encode(4),
                                            mask=b"\x05\x06\x07\x08"))
    segs_c += c.close()
    return _interleaved([(a, segs_a), (b, segs_b), (c, segs_c)])


def test_rows_whose_context_changes_mid_stream(codec: ModuleType) -> None:
    """A connection's values that every row of a direction shares (client id, level and
    its source, ends, transport...) as each row had them when it was read: learnt
    mid-stream, in the middle of a segment, with other connections' rows, error rows
    and WebSocket rows in between (the compiled loop's columns write them once per
    context: arrow_c.pyx).  Checked against the traffic, and against the reference
    table (tests/capture/conftest.py also builds the compiled loop's table in batches
    of 5 rows, so that batches begin everywhere)."""
    raw = _changing_contexts(codec)
    records = read(raw, codec, name="ctx.pcapng")
    table = packets_table(io.BytesIO(raw), codec=codec, name="ctx.pcapng")
    assert table.equals(reference_packets_table(records))
    rows = table.to_pylist()
    a = [r for r in rows if 46000 in (r["src_port"], r["dst_port"])]
    a_up = [r for r in a if r["direction"] == "c2s" and r["kind"] == "packet"]
    at = [r["packet_type"] for r in a_up].index("CONNECT")
    assert at > 70
    assert [r["client_id"] for r in a_up] == [None] * at + ["late"] * (len(a_up) - at)
    assert [r["version_source"] for r in a_up] == (["inferred"] * at
                                                   + ["connect"] * (len(a_up) - at))
    assert {r["protocol_version"] for r in a} == {4}
    assert [r["topic"] for r in a_up[at - 1:at + 5]] == [
        "a/before", None, "a/after", "a/after", "a/after", "a/later"]
    b = [r for r in rows if 46001 in (r["src_port"], r["dst_port"])]
    assert [r["kind"] for r in b].count("error") == 1
    assert {(r["client_id"], r["protocol_version"], r["transport"]) for r in b} == {
        ("b", 5, "tcp")}
    c = [r for r in rows if 46002 in (r["src_port"], r["dst_port"])]
    assert [r["packet_type"] for r in c] == ["CONNECT", "CONNACK"] + ["PUBLISH"] * 5
    assert {(r["client_id"], r["transport"]) for r in c} == {("ws", "websocket")}


def test_many_connections_interleaved_frame_by_frame(codec: ModuleType) -> None:
    """More connections than the compiled columns' cache of contexts has places (256),
    a frame of each in turn: every row has its own connection's values."""
    flows = []
    for n in range(300):
        flow = TcpFlow((f"10.7.{n // 200}.{n % 200 + 1}", 47000 + n), ("10.7.9.99", 1883))
        segs = flow.open() + flow.send(0, codec.Connect(f"m{n}", protocol_version=4).encode(4))
        segs += flow.send(1, codec.ConnAck().encode(4))
        for i in range(3):
            segs += flow.send(0, codec.Publish(f"t/{n}", b"%d" % i, qos=1,
                                               packet_id=i + 1).encode(4))
            segs += flow.send(1, codec.PubAck(i + 1).encode(4))
        segs += flow.close()
        flows.append((flow, segs))
    raw = _interleaved(flows)
    records = read(raw, codec, name="many.pcapng")
    table = packets_table(io.BytesIO(raw), codec=codec, name="many.pcapng")
    assert table.equals(reference_packets_table(records))
    assert table.num_rows == 300 * 8
    for r in table.to_pylist():
        port = r["src_port"] if r["direction"] == "c2s" else r["dst_port"]
        n = port - 47000
        assert (r["client_id"], r["connection_id"] is not None, r["protocol_version"]) == (
            f"m{n}", True, 4)
        assert r["src_ip" if r["direction"] == "c2s" else "dst_ip"] == (
            f"10.7.{n // 200}.{n % 200 + 1}")
    assert len({r["connection_id"] for r in table.to_pylist()}) == 300


@pytest.mark.c_extension
def test_a_direction_s_rows_share_their_context() -> None:
    """The compiled loop's columns hold a direction's context once a batch, not once a
    row: a table of few contexts (that the rows' values are still each row's own: the
    tests above)."""
    from mqttwire.capture import MqttStreams, loop_c
    from mqttwire.capture.arrow import sink
    from mqttwire.spark.schema import PACKETS

    mw = cython_codec()
    raw = _capture(mw, publishes=600)
    handler = MqttStreams("s.pcapng", ports=[1883], codec=mw)
    columns = sink(PACKETS)
    loop_c.FastReader(io.BytesIO(raw), handler).fill(columns, 1 << 20)
    assert len(columns) > 600
    # c2s and s2c (more only where their cache slots collide, or the pure code's rows
    # hold other objects of the same values)
    assert 2 <= columns.contexts <= 8
    columns.take_buffers()
    assert columns.contexts == 0


@pytest.mark.c_extension
def test_context_values_made_and_freed_row_by_row() -> None:
    """Rows whose client id is a new object every third row, freed once the row is
    written (its address is likely the next one's: the columns must not take it for the
    same value), with values repeated across take_buffers; then rows whose every context
    value changes from row to row."""
    from mqttwire.capture import Record
    from mqttwire.capture.arrow import columns_batch, sink
    from mqttwire.spark.schema import PACKETS

    def expected(batch: int, i: int) -> tuple[Any, ...]:
        if i < 300:
            cid = "kept" if i % 3 == 0 else None if i % 3 == 1 else f"c{batch}-{i}"
            return ("packet", "conn", "c2s", 40000, cid, 4)
        return ("packet" if i % 11 else "error", f"conn{i % 4}", "c2s" if i % 2 else "s2c",
                40000 + i % 5, "kept" if i % 7 else None, 3 + i % 3)

    columns = sink(PACKETS)
    kept = "kept"
    batches = []
    for batch in range(3):
        for i in range(600):
            kind, conn, direction, port, cid, level = expected(batch, i)
            if i < 300 and i % 3 == 2:
                cid = "".join(["c", str(batch), "-", str(i)])  # a new object, freed below
            elif cid is not None:
                cid = kept
            columns.add_record(Record(kind, "cap", T0 + i, i, conn, direction, "10.0.0.1",
                                      port, "10.0.0.2", 1883, client_id=cid,
                                      protocol_version=level, version_source="connect",
                                      transport="tcp"))
            del cid
        n = len(columns)
        batches.append(columns_batch(columns.take_buffers(), n, PACKETS, "cap"))
    table = pa.Table.from_batches(batches)
    got = zip(*[table[name].to_pylist() for name in (
        "kind", "connection_id", "direction", "src_port", "client_id", "protocol_version")])
    assert list(got) == [expected(b, i) for b in range(3) for i in range(600)]
    assert set(table["capture"].to_pylist()) == {"cap"}


def _message_values(k: int) -> list[Any]:
    """Row ``k`` of the messages columns' values: edge values of each kind in turn (None,
    non-ASCII text, ints at and near the ends of their ranges, negative times, a large
    payload), as CaptureTables' and the compiled derived tables' rows may hold them."""
    text = [None, "", "c", "client-é", "日本語/トピック", "x" * 300][k % 6]
    small = [None, 0, 1, -1, 127, -128, 5][k % 7]
    i32 = [None, 0, 65535, 2**31 - 1, -(2**31), 7][k % 6]
    i64 = [None, 0, 2**62, 2**63 - 1, -(2**63), 1 << 40, 3][k % 7]
    ts = [None, 1_700_000_000_123_456_789, -1, -1001, 0, 999, 2**63 - 1][k % 7]
    flag = [None, True, False][k % 3]
    payload = [None, b"", b"\x00\xff", b"p" * 5000][k % 4]
    latency = [None, 0.0, -1.5, 1e300][k % 4]
    return [text, text, text, small, text, ts, i64, i64, text, flag, small, flag, flag, i32,
            i64, payload, text, i32, ts, ts, ts, ts, i32, ts, latency]


def _message_columns(extra: bool) -> Any:
    from mqttwire.capture import arrow_c
    from mqttwire.spark import columnar

    spec = columnar._message_spec()
    if extra:  # one more column: not the messages layout, every row by PacketColumns.row
        spec.append(("extra", b"l", 0, len(spec)))
    return arrow_c.PacketColumns(spec)


@pytest.mark.c_extension
def test_messages_rows_of_their_layout_as_row_writes_them() -> None:
    """The messages table's columns, which the derived tables' compiled code fills (each
    column written by its kind's code alone), hold the same buffers as the same columns
    written by PacketColumns.row, over edge values and more than one batch."""
    fixed, general = _message_columns(False), _message_columns(True)
    assert fixed.message_layout and not general.message_layout
    for batch in (3000, 7):  # the first past the columns' first room (1024 rows)
        for k in range(batch):
            fixed.append(_message_values(k))
            general.append(_message_values(k) + [None])
        assert fixed.take_buffers() == general.take_buffers()[:-1]


@pytest.mark.c_extension
@pytest.mark.parametrize("column, value", [
    (3, 128), (3, -129), (10, True), (13, 2**31), (6, 2**63), (6, -(2**63) - 1),
    (5, 2**64), (6, 1.0), (0, b"c"), (8, 3), (15, "p"), (9, 1), (24, 1),
    (4, type("S", (str,), {})("c")),  # a str subclass: not a str there
])
def test_messages_rows_refuse_what_row_refuses(column: int, value: Any) -> None:
    """A value that PacketColumns.row refuses in a messages column raises the same error,
    naming the same column, in the messages layout."""
    errors = []
    for columns in (_message_columns(False), _message_columns(True)):
        values = _message_values(1) + [None]
        values[column] = value
        with pytest.raises((TypeError, OverflowError)) as info:
            columns.append(values)
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]
