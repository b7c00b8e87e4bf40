"""The compiled path of CaptureTables.add_many (mqttwire.spark.derive_c) against the
reference (CaptureTables.add, one record at a time): the same rows for whole captures,
the records handed over in batches of several sizes, and the records it must leave to
the reference left to it."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import capture_a, capture_b, capture_c, capture_mixed

from mqttwire.capture import Record, read_capture
from mqttwire.spark import derive
from mqttwire.spark.derive import CaptureTables

pytestmark = pytest.mark.c_extension

#: The bundled sample capture (examples/make_sample_capture.py: real Mosquitto traffic
#: at MQTT 3.1, 3.1.1 and 5.0).
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample.pcapng"


@pytest.fixture(autouse=True)
def _built() -> None:
    importlib.import_module("mqttwire.spark.derive_c")  # must be built here: else a failure


def test_the_compiled_path_is_used_where_built() -> None:
    assert derive.COMPILED


def _tables(records: list[Record], chunk: int | None, monkeypatch: pytest.MonkeyPatch
            ) -> tuple[list[dict[str, Any]], ...]:
    """The three tables: by add alone (chunk None), or by add_many in chunks."""
    tables = CaptureTables("cap")
    if chunk is None:
        for rec in records:
            tables.add(rec)
    else:
        monkeypatch.setattr(derive, "COMPILED", True)
        for start in range(0, len(records), chunk):
            tables.add_many(records[start:start + chunk])
    retained = tables.finish()
    return tables.connections, tables.messages, retained


def _captures(tmp_path: Path) -> list[Path]:
    paths = [capture_a(tmp_path / "a.pcapng").path, capture_b(tmp_path / "b.pcap").path,
             capture_c(tmp_path / "c.pcap").path, capture_mixed(tmp_path / "m.pcapng"),
             capture_mixed(tmp_path / "m.pcap", "pcap"), SAMPLE]
    return [Path(p) for p in paths]


@pytest.mark.parametrize("version", [None, 4, 5])
def test_the_same_rows_as_the_reference(tmp_path: Path, version: int | None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for path in _captures(tmp_path):
        with open(path, "rb") as f:
            records = list(read_capture(f, name="cap", ports=(1883, 8883), version=version,
                                        payload_limit=1 << 20, stream_ends=True))
        reference = _tables(records, None, monkeypatch)
        assert reference[1], f"{path.name}: no messages, nothing compared"
        for chunk in (1, 7, 8192):
            assert _tables(records, chunk, monkeypatch) == reference, (path.name, chunk)


class _Other(Record):
    """A record of another class: the compiled path reads the slots of Record only."""

    __slots__ = ()


def test_records_of_another_class_go_to_add(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[Record] = []
    tables = CaptureTables("cap")
    add = tables.add

    def watched(rec: Record) -> None:
        taken.append(rec)
        add(rec)

    monkeypatch.setattr(tables, "add", watched)
    monkeypatch.setattr(derive, "COMPILED", True)
    fields: dict[str, Any] = dict(
        connection_id="cap#1", direction="c2s", src_ip="10.0.0.1", src_port=50001,
        dst_ip="10.0.0.2", dst_port=1883, protocol_version=4, packet_type="PUBLISH",
        topic="t", qos=0, retain=False, dup=False, length=5, payload_length=1)
    first = Record("packet", "cap", 1, **fields)  # a new connection: add
    common = Record("packet", "cap", 2, **fields)  # an open connection's PUBLISH: compiled
    other = _Other("packet", "cap", 3, **fields)
    tables.add_many([first, common, other])
    assert taken == [first, other]
    tables.finish()
    (c,) = tables.connections
    assert (c["packets_c2s"], c["bytes_c2s"], c["last_ts"]) == (3, 15, 3)
    assert [m["ts"] for m in tables.messages] == [1, 2, 3]
