"""A capture read in shares of its connections (mqttwire.spark.connection_shares), without Spark:
every share's tables together, with the retained rows merged from their events, are the
tables of the whole-file read, on every scenario capture.  The pipeline's own run in
shares is compared with its whole-file run in test_pipeline.py."""

from __future__ import annotations

import io
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import generated_capture

# pyarrow comes with the spark extra (see test_columns.py).
try:
    import pyarrow as pa

    from mqttwire.capture import read_capture
    from mqttwire.spark.connection_shares import Share, merge_retained
    from mqttwire.spark.decoding import decode_capture
    from mqttwire.spark.plan import SHARE_SIZE, share_count
except ModuleNotFoundError as exc:
    if exc.name != "pyarrow":
        raise

pytestmark = pytest.mark.spark


def _tables(data: bytes, share: Share | None) -> dict[str, list[pa.RecordBatch]]:
    out: dict[str, list[pa.RecordBatch]] = defaultdict(list)
    for table, batch in decode_capture(io.BytesIO(data), "x.pcap", payload_limit=sys.maxsize,
                                       share=share):
        out[table].append(batch)
    return out


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    rows = [row for batch in batches for row in batch.to_pylist()]
    return sorted(rows, key=lambda r: repr(sorted(r.items())))


def _assert_shares_make_the_whole(data: bytes, count: int) -> None:
    whole = _tables(data, None)
    assert "retain_events" not in whole
    parts = [_tables(data, Share(index, count)) for index in range(count)]
    for table in ("packets", "errors", "connections", "messages"):
        together = [batch for part in parts for batch in part.get(table, [])]
        assert _rows(together) == _rows(whole.get(table, [])), table
    assert all("retained" not in part for part in parts)
    events = [batch for part in parts for batch in part.get("retain_events", [])]
    merged = (merge_retained(pa.Table.from_batches(events)).to_batches() if events else [])
    assert _rows(merged) == _rows(whole.get("retained", []))


def _scenario_files(captures: Any) -> list[Path]:
    return [captures.a.path, captures.b.path, captures.c.path, *captures.mixed]


@pytest.mark.parametrize("count", [2, 3])
def test_the_shares_of_every_scenario_capture_make_its_tables(captures: Any,
                                                              count: int) -> None:
    for path in _scenario_files(captures):
        _assert_shares_make_the_whole(Path(path).read_bytes(), count)


def test_the_shares_of_a_generated_capture_make_its_tables(tmp_path: Path) -> None:
    path = generated_capture(tmp_path / "gen.pcap", 1_000_000)
    _assert_shares_make_the_whole(path.read_bytes(), 2)


def test_a_retained_message_replaced_and_removed_from_other_shares(captures: Any) -> None:
    """capture_a sets t/r from one connection and replaces it from another; the mixed
    capture removes a topic's message from another connection than the one that set
    it.  Whatever share each connection falls into, the merge keeps the latest."""
    for path in (captures.a.path, *captures.mixed):
        data = Path(path).read_bytes()
        whole = _rows(_tables(data, None)["retained"])
        assert whole, path
        for count in (2, 3, 4):
            _assert_shares_make_the_whole(data, count)


def test_the_shares_records_are_disjoint_and_complete(captures: Any) -> None:
    """decode_capture's reader for each share: a connection is one share's; the records
    of no connection (an IP fragment in the mixed captures) are share 0's alone."""
    from mqttwire import _implementation
    from mqttwire.capture import MqttStreams, read_with

    def key(rec: Any) -> tuple[Any, ...]:
        return (rec.kind, rec.connection_id, rec.frame, rec.direction, rec.stream_offset,
                rec.packet_type, rec.error)

    unconnected = 0
    for path in _scenario_files(captures):
        whole = [key(rec) for rec in read_capture(str(path), stream_ends=True)]
        seen: list[tuple[Any, ...]] = []
        for index in range(3):
            share = Share(index, 3)
            handler = MqttStreams(Path(path).name, ports=(1883,), codec=_implementation.impl,
                                  stream_ends=True, keep=share.keeps,
                                  unconnected=index == 0)
            with open(path, "rb") as f:
                mine = [key(rec) for rec in read_with(f, handler)]
            seen += mine
            numbers = {int(k[1].rsplit("#", 1)[1]) % 3 for k in mine if k[1] is not None}
            assert numbers <= {(index + 1) % 3}
            if index:
                assert all(k[1] is not None for k in mine)
            else:
                unconnected += sum(k[1] is None for k in mine)
        assert sorted(seen, key=repr) == sorted(whole, key=repr)
    assert unconnected  # the captures have records of no connection


def test_share_count() -> None:
    assert SHARE_SIZE == 32 << 20
    assert share_count(10 << 20, SHARE_SIZE, 8) == 1  # under the share size: one task
    assert share_count(200 << 20, SHARE_SIZE, 2) == 2  # at most one per core
    assert share_count(100 << 20, SHARE_SIZE, 8) == 3  # one per share size
    assert share_count(200 << 20, None, 8) == 1  # never
    assert share_count(5, 1, 1) == 1


@pytest.mark.parametrize("share_size", [0, -5, 1.5, "32m"])
def test_the_pipeline_refuses_a_bad_share_size(tmp_path: Path, share_size: Any) -> None:
    from mqttwire.spark import PipelineOptions, run_pipeline

    options = PipelineOptions(["x.pcap"], str(tmp_path), share_size=share_size)
    with pytest.raises(ValueError, match="share_size must be a positive number of bytes"):
        # Checked before Spark is used: no session is needed.
        run_pipeline(options, spark=object())  # type: ignore[arg-type]
