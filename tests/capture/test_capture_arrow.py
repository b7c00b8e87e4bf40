"""mqttwire.capture.arrow.packets_table: one capture's packets table as a pyarrow.Table,
with either codec (the compiled loop's columns, or Records the reference way)."""

from __future__ import annotations

import io
from types import ModuleType
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # the spark extra's; no stubs
import pytest
from capture_helpers import T0, conversation, encode_all, segments_for, write
from loop_checks import reference_packets_table

from mqttwire.capture import read_capture
from mqttwire.capture.arrow import BATCH_ROWS, packets_table
from mqttwire.capture.writers import Frame, TcpFlow


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
