"""The tables' Arrow columns built both ways (mqttwire.spark.columns): the compiled buffers
of mqttwire.spark.columns_c and the reference, ``pa.array`` over the list of values, must
give equal arrays for every capture and every kind of value, including those the
compiled side declines (then the reference builds the column, errors included)."""

from __future__ import annotations

import importlib
import io
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import generated_capture

from mqttwire.capture import Record

# pyarrow comes with the spark extra: every test here is marked spark, so that where the
# extra is missing (the wheel tests run `-m "not spark"`) they are deselected.
try:
    import pyarrow as pa

    from mqttwire.spark import columns
    from mqttwire.spark.decoding import decode_capture, packets_batch
    from mqttwire.spark.schema import PACKETS, TIMESTAMP
except ModuleNotFoundError as exc:
    if exc.name != "pyarrow":
        raise

pytestmark = pytest.mark.spark


@pytest.fixture(params=[pytest.param(True, id="cython", marks=pytest.mark.c_extension),
                        pytest.param(False, id="python", marks=pytest.mark.pure_twin)])
def compiled(request: pytest.FixtureRequest) -> bool:
    """Whether the columns are built by the compiled module (which must be built: an
    ImportError fails the test) or the reference way."""
    if request.param:
        importlib.import_module("mqttwire.spark.columns_c")
    return bool(request.param)


def test_the_compiled_module_is_used_where_built() -> None:
    try:
        importlib.import_module("mqttwire.spark.columns_c")
    except ImportError:
        assert not columns.COMPILED
    else:
        assert columns.COMPILED


def _batches(data: bytes, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    with monkeypatch.context() as m:
        m.setattr(columns, "COMPILED", compiled)
        return list(decode_capture(io.BytesIO(data), "x.pcap", payload_limit=sys.maxsize))


def _assert_same_tables(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _batches(data, True, monkeypatch)
    reference = _batches(data, False, monkeypatch)
    assert [table for table, _ in fast] == [table for table, _ in reference]
    for (table, got), (_, want) in zip(fast, reference):
        assert got.schema == want.schema, table
        assert got.equals(want), table
        got.validate(full=True)


@pytest.mark.c_extension
def test_every_scenario_capture_gives_the_same_batches(
        captures: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    importlib.import_module("mqttwire.spark.columns_c")
    paths = [captures.a.path, captures.b.path, captures.c.path, *captures.mixed]
    for path in paths:
        _assert_same_tables(Path(path).read_bytes(), monkeypatch)


@pytest.mark.c_extension
def test_a_generated_capture_gives_the_same_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """make_capture.py's traffic (levels 4 and 5, QoS 0 and 1, many batches)."""
    importlib.import_module("mqttwire.spark.columns_c")
    path = generated_capture(tmp_path / "gen.pcap", 3_000_000)
    _assert_same_tables(path.read_bytes(), monkeypatch)


ROW = {"i8": -128, "i32": 2**31 - 1, "i64": -(2**63), "ts": -1, "flag": True, "ms": 0.5,
       "text": "héllo \u20ac", "blob": b"\x00\xff"}
NULLS = dict.fromkeys(ROW)


def _schema() -> pa.Schema:
    """A column of every type the compiled side takes (a function: pyarrow may be
    missing where this module is collected)."""
    return pa.schema([("i8", pa.int8()), ("i32", pa.int32()), ("i64", pa.int64()),
                      ("ts", TIMESTAMP), ("flag", pa.bool_()), ("ms", pa.float64()),
                      ("text", pa.string()), ("blob", pa.binary())])


def _build(rows: list[dict[str, Any]], compiled: bool, schema: pa.Schema | None = None
           ) -> pa.RecordBatch:
    schema = schema or _schema()
    arrays = columns.arrays(rows, schema.names, schema, mapping=True, compiled=compiled)
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    batch.validate(full=True)
    return batch


def test_values_of_every_type(compiled: bool) -> None:
    rows = [ROW, NULLS, dict(ROW, ts=1_999, flag=False, text="", blob=b""), ROW]
    got = _build(rows, compiled).to_pylist()
    assert got[1] == NULLS
    assert got[0]["i64"] == -(2**63) and got[0]["ms"] == 0.5
    assert got[0]["text"] == "héllo \u20ac" and got[0]["blob"] == b"\x00\xff"
    # Nanoseconds to microseconds, rounded down: -1 ns is 1 us before the epoch.
    assert got[0]["ts"].timestamp() == -1e-6
    assert got[2]["ts"].timestamp() == 1e-6
    assert (got[2]["flag"], got[2]["text"], got[2]["blob"]) == (False, "", b"")
    assert got == _build(rows, False).to_pylist()


def test_no_rows(compiled: bool) -> None:
    batch = _build([], compiled)
    assert batch.num_rows == 0 and batch.schema == _schema()


def test_many_rows_with_nulls_in_every_place(compiled: bool) -> None:
    # Past one byte of validity bitmap, with nulls at bit 0 and 7 of some bytes.
    rows = [NULLS if i % 7 == 0 or i % 8 == 7 else dict(ROW, i64=i, text=str(i) * (i % 5))
            for i in range(1000)]
    assert _build(rows, compiled).equals(_build(rows, False))


@pytest.mark.parametrize(("column", "value"), [
    ("i8", 128), ("i8", -129), ("i32", 2**31), ("i64", 2**63), ("ts", 2**64), ("ts", 2**80),
    ("i32", True), ("i32", 7.0), ("ms", 3), ("flag", 1), ("text", b"bytes"),
    ("blob", bytearray(b"ab")), ("blob", "text"), ("text", "\ud800")])
def test_other_python_types_behave_as_in_pyarrow(compiled: bool, column: str,
                                                 value: Any) -> None:
    """Values the compiled side does not take as they are (out of the C type's range, or
    another Python type): the column is built the reference way, so it is what pyarrow
    makes of them, or pyarrow's error."""
    rows = [ROW, dict(ROW, **{column: value})]
    try:
        want = _build(rows, False)
    except Exception as exc:  # pyarrow's error, whichever it is
        with pytest.raises(type(exc)):
            _build(rows, compiled)
    else:
        assert _build(rows, compiled).equals(want)


def test_float_columns_keep_nan_and_infinity(compiled: bool) -> None:
    got = _build([dict(ROW, ms=math.inf), dict(ROW, ms=math.nan)], compiled).column("ms")
    assert got[0].as_py() == math.inf and math.isnan(got[1].as_py())


def test_a_missing_key_is_a_key_error(compiled: bool) -> None:
    with pytest.raises(KeyError):
        _build([ROW, {"i8": 1}], compiled)


def test_records_by_attribute_and_by_value_list(compiled: bool) -> None:
    """Record slots, a list of values (the properties column), and an attribute of
    another class among Records (read by getattr)."""
    class Marked(Record):
        __slots__ = ()

    recs = [Record("packet", "c", ts=5_000, frame=1, topic="t", payload=b"p", qos=1,
                   retain=True, properties=None),
            Marked("gap", "c", ts=None, frame=2, length=3)]
    for objs in (recs[:1], recs):
        batch = packets_batch(objs)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(columns, "COMPILED", compiled)
            assert packets_batch(objs).equals(batch)
            assert packets_batch(objs).schema == PACKETS


def test_an_unset_slot_is_an_attribute_error(compiled: bool) -> None:
    class Slotted:
        __slots__ = ("text",)

    obj = Slotted()
    schema = pa.schema([("text", pa.string())])
    with pytest.raises(AttributeError):
        columns.arrays([obj], ["text"], schema, compiled=compiled)
    obj.text = "x"
    got = columns.arrays([obj], ["text"], schema, compiled=compiled)
    assert got[0].to_pylist() == ["x"]


def test_list_columns_are_built_the_reference_way(compiled: bool) -> None:
    schema = pa.schema([("codes", pa.list_(pa.int32())), ("names", pa.list_(pa.string()))])
    rows = [{"codes": [0, 1, 0x80], "names": ["a/#"]}, {"codes": None, "names": []}]
    got = columns.arrays(rows, schema.names, schema, mapping=True, compiled=compiled)
    assert [a.to_pylist() for a in got] == [[[0, 1, 0x80], None], [["a/#"], []]]


@pytest.mark.c_extension
def test_bad_arguments() -> None:
    module = importlib.import_module("mqttwire.spark.columns_c")
    with pytest.raises(ValueError, match="one per object"):
        module.buffers([ROW], [[1, 2]], b"l", True)
    with pytest.raises(TypeError, match="takes dicts"):
        module.buffers([ROW, 3], ["i8"], b"b", True)
    with pytest.raises(ValueError, match="one type code per column"):
        module.buffers([ROW], ["i8", "i32"], b"b", True)
    assert module.buffers([ROW], ["i8"], b"-", True) == [None]


def test_a_message_row_starts_with_every_messages_column() -> None:
    from mqttwire.spark.derive import _MESSAGE
    from mqttwire.spark.schema import MESSAGES

    assert list(_MESSAGE) == MESSAGES.names
