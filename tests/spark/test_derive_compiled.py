"""The compiled path of CaptureTables.add_many (mqttwire.spark.derive_c) against the
reference (CaptureTables.add, one record at a time): the same rows for whole captures,
the records handed over in batches of several sizes, and the records it must leave to
the reference left to it."""

from __future__ import annotations

import importlib
import random
from pathlib import Path
from typing import Any

import pytest
from spark_scenarios import capture_a, capture_b, capture_c, capture_mixed

from mqttwire.capture import Record, read_capture
from mqttwire.capture.arrow import columns_batch, sink
from mqttwire.spark import columnar, derive
from mqttwire.spark.decoding import rows_batch
from mqttwire.spark.derive import CaptureTables
from mqttwire.spark.schema import MESSAGES, PACKETS

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


# ---------------------------------------------------------------------------------------
# The state that the compiled path holds in C (derive_c.Deriver): the pending QoS 1 and 2
# exchanges of the PUBLISHes it took (a hash table keyed by connection, direction and
# packet id) and the connections' packet and byte counters, given back to _Conn before
# Python code looks at them.

T0 = 1_700_000_000_000_000_000
#: The client id of each connection: one str object, as the capture loop gives every record
#: of a connection (the compiled path tells an unchanged identity by the object).
_IDS: dict[int, str] = {}


def _rec(conn: int, packet_type: str | None, direction: str, frame: int,
         **fields: Any) -> Record:
    """A packet record of connection cap#<conn> at frame ``frame`` (time T0 + frame)."""
    client = (f"10.0.{conn // 200}.{conn % 200 + 1}", 40000 + conn)
    server = ("10.9.9.9", 1883)
    src, dst = (client, server) if direction == "c2s" else (server, client)
    kind = fields.pop("kind", "packet")
    ts = fields.pop("ts", T0 + frame)
    fields.setdefault("length", 10 + frame % 7)
    fields.setdefault("protocol_version", 5)
    fields.setdefault("client_id", _IDS.setdefault(conn, f"c{conn}"))
    return Record(kind, "cap", ts, frame=frame, connection_id=f"cap#{conn}",
                  direction=direction, src_ip=src[0], src_port=src[1], dst_ip=dst[0],
                  dst_port=dst[1], packet_type=packet_type, **fields)


def _pub(conn: int, direction: str, frame: int, packet_id: int | None, qos: int = 1,
         **fields: Any) -> Record:
    payload = fields.pop("payload", b"m%d" % frame)
    fields.setdefault("topic", f"t/{conn % 3}")
    fields.setdefault("retain", False)
    fields.setdefault("dup", False)
    return _rec(conn, "PUBLISH", direction, frame, qos=qos, packet_id=packet_id,
                topic_from_alias=False, stream_offset=frame * 16, payload=payload,
                payload_length=len(payload), **fields)


def _ack(conn: int, packet_type: str, direction: str, frame: int, packet_id: int,
         code: int = 0) -> Record:
    return _rec(conn, packet_type, direction, frame, packet_id=packet_id, reason_code=code)


def _many_connections() -> list[Record]:
    """300 connections with QoS 1 exchanges both ways under packet ids 1 to 4, the same on
    every connection (their entries share the hash table, and its buckets as it grows),
    acknowledged a round later and the ids then reused; one exchange in five never
    acknowledged (its id taken again while pending, or incomplete at the end); a PINGREQ
    (a record for CaptureTables.add) amid a connection's pending exchanges; a third of
    the connections closed with exchanges pending."""
    records: list[Record] = []
    frame = 0

    def at() -> int:
        nonlocal frame
        frame += 1
        return frame

    conns = range(1, 301)
    for c in conns:
        records += [_rec(c, "SUBSCRIBE", "c2s", at()),
                    _rec(c, "SUBACK", "s2c", at(), reason_code=0)]
    for round_ in range(7):
        pid = round_ % 4 + 1
        for c in conns:
            records += [_pub(c, "c2s", at(), pid), _pub(c, "s2c", at(), pid)]
            if c % 7 == round_:
                records.append(_rec(c, "PINGREQ", "c2s", at()))
        for c in conns:
            if (c + round_) % 5:
                records += [_ack(c, "PUBACK", "s2c", at(), pid),
                            _ack(c, "PUBACK", "c2s", at(), pid)]
    for c in conns:
        if c % 3 == 0:
            records += [_rec(c, None, side, at(), kind="end", length=0, end_reason="fin")
                        for side in ("c2s", "s2c")]
    return records


def _random_records(seed: int, n: int = 300) -> list[Record]:
    """Records of one to four connections drawn at random (packet ids 1 to 3, so that
    they collide): PUBLISHes of each level, repeated (DUP) and retained, every step of
    the exchanges, some a few frames late (a direction held back), other packets, a
    changed client id, times and lengths missing, and streams ending."""
    rng = random.Random(seed)
    records: list[Record] = []
    conns = rng.randint(1, 4)
    ids = {c: f"c{c}" for c in range(1, conns + 1)}
    for frame in range(1, n + 1):
        c = rng.randint(1, conns)
        direction = rng.choice(("c2s", "s2c"))
        at = max(1, frame - rng.randint(1, 3)) if rng.random() < 0.1 else frame
        fields: dict[str, Any] = {"client_id": ids[c]}
        if rng.random() < 0.05:
            fields["ts"] = None
        if rng.random() < 0.05:
            fields["length"] = None
        what = rng.choice(["pub0", "pub1", "pub1", "pub1", "pub2", "puback", "puback",
                           "puback", "pubrec", "pubrel", "pubcomp", "other", "id", "end"])
        pid = rng.randint(1, 3)
        if what.startswith("pub") and what[3:].isdigit():
            qos = int(what[3:])
            records.append(_pub(c, direction, at, pid if qos else None, qos,
                                dup=bool(qos) and rng.random() < 0.15,
                                retain=rng.random() < 0.1, **fields))
        elif what in ("puback", "pubrec", "pubrel", "pubcomp"):
            records.append(_rec(c, what.upper(), direction, at, packet_id=pid,
                                reason_code=rng.choice([0, 0, 0, 0x80, 0x10]), **fields))
        elif what == "other":
            records.append(_rec(c, rng.choice(["PINGREQ", "SUBSCRIBE", "PINGRESP"]),
                                direction, at, **fields))
        elif what == "id":
            ids[c] = f"c{c}.{frame}"  # the next records change the connection's identity
        elif rng.random() < 0.3:
            records.append(_rec(c, None, direction, at, kind="end", end_reason="fin",
                                **{**fields, "length": 0}))
    return records


def _columnar_tables(records: list[Record]) -> tuple[list[dict[str, Any]], ...]:
    """The tables as a columnar decoding makes them (mqttwire/spark/columnar.py): each
    record through the deriver's capsule function (arrow_c.PacketColumns.add_record),
    the messages rows into Arrow columns; the messages as the rows of those."""
    tables = CaptureTables("cap")
    columns = sink(PACKETS)
    deriver = derive.derive_c.Deriver(Record, derive._Conn)
    columns.derive_into(tables, deriver, deriver.capsule())
    arrow_c = importlib.import_module("mqttwire.capture.arrow_c")  # not in the pure wheel
    messages = arrow_c.PacketColumns(columnar._message_spec())
    deriver.message_columns(messages, arrow_c.row_capsule(), MESSAGES.names)
    for rec in records:
        columns.add_record(rec)
    deriver.drain(tables)
    deriver.materialize_all(tables)
    retained = tables.finish()
    deriver.drain(tables)
    n = len(messages)  # before take_buffers, which empties it
    rows = columns_batch(messages.take_buffers(), n, MESSAGES, "").to_pylist()
    return tables.connections, rows, retained


def _both_ways(records: list[Record], monkeypatch: pytest.MonkeyPatch) -> None:
    """add_many in chunks, and the capsule function, give the reference's tables."""
    reference = _tables(records, None, monkeypatch)
    assert reference[1], "no messages, nothing compared"
    for chunk in (1, 7, 8192):
        assert _tables(records, chunk, monkeypatch) == reference, chunk
    connections, rows, retained = _columnar_tables(records)
    assert (connections, retained) == (reference[0], reference[2])
    assert rows == rows_batch("messages", reference[1]).to_pylist()


def test_many_connections_with_colliding_packet_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    records = _many_connections()
    _both_ways(records, monkeypatch)
    _, messages, _ = _tables(records, None, monkeypatch)
    statuses = {m["status"] for m in messages}
    assert statuses == {"complete", "incomplete"}, statuses  # both kinds compared


@pytest.mark.parametrize("seed", range(40))
def test_random_traffic(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _both_ways(_random_records(seed), monkeypatch)


def _state(tables: CaptureTables) -> dict[str, Any]:
    """What Python code sees of each open connection: its pending exchanges, in order,
    and its counters."""
    return {conn_id: (list(conn.pending.items()), conn.packets_c2s, conn.packets_s2c,
                      conn.bytes_c2s, conn.bytes_s2c)
            for conn_id, conn in tables._conns.items()}


def test_the_state_is_held_in_c_and_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A QoS 1 PUBLISH taken by the capsule function and the counters of the records taken
    stay in the Deriver until given back: then _Conn holds what the reference's holds,
    the exchange pending after one that CaptureTables.add made pending before it."""
    records = [_rec(1, "SUBSCRIBE", "c2s", 1), _pub(1, "c2s", 2, 5, 2),  # QoS 2: held here
               _pub(1, "c2s", 3, 5, 1, topic="x"),  # id 5 pending: Python's
               _ack(1, "PUBREC", "s2c", 4, 5),
               _pub(1, "c2s", 5, 6), _pub(1, "s2c", 6, 6, 0), _pub(1, "s2c", 7, 6)]
    reference = CaptureTables("cap")
    for rec in records:
        reference.add(rec)
    tables = CaptureTables("cap")
    columns = sink(PACKETS)
    deriver = derive.derive_c.Deriver(Record, derive._Conn)
    columns.derive_into(tables, deriver, deriver.capsule())
    for rec in records:
        columns.add_record(rec)
    conn = tables._conns["cap#1"]
    assert [key for key, _ in conn.pending.items()] == [("c2s", 5)]  # (6, c2s/s2c) in C
    assert (conn.packets_c2s, conn.packets_s2c) == (3, 1)  # the last three: in C
    deriver.materialize_all(tables)
    assert _state(tables) == _state(reference)
    assert [key for key, _ in conn.pending.items()] == [("c2s", 5), ("c2s", 6), ("s2c", 6)]


def test_add_many_gives_the_state_back_at_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two calls of add_many the caller sees every connection as the reference
    leaves it (decoding.py looks at the tables after each chunk)."""
    monkeypatch.setattr(derive, "COMPILED", True)
    records = _many_connections()
    reference, tables = CaptureTables("cap"), CaptureTables("cap")
    for start in range(0, len(records), 500):
        chunk = records[start:start + 500]
        for rec in chunk:
            reference.add(rec)
        tables.add_many(chunk)
        assert _state(tables) == _state(reference), start


def test_an_exchange_seen_by_python_then_completed_here(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Exchanges held here when a record of their connection goes to CaptureTables.add
    (a DUP retransmission: it counts on the row it finds pending) become rows it can
    change, and their PUBACKs still complete them, in order."""
    records = [_rec(1, "SUBSCRIBE", "c2s", 1), _pub(1, "c2s", 2, 1), _pub(1, "c2s", 3, 2),
               _pub(1, "c2s", 4, 1, dup=True), _ack(1, "PUBACK", "s2c", 5, 2),
               _ack(1, "PUBACK", "s2c", 6, 1), _pub(1, "c2s", 7, 1),
               _ack(1, "PUBACK", "s2c", 8, 1, 0x80), _pub(1, "c2s", 9, 2)]
    _both_ways(records, monkeypatch)
    _, messages, _ = _tables(records, 8192, monkeypatch)
    assert [(m["packet_id"], m["status"], m["retransmissions"]) for m in messages] == [
        (2, "complete", 0), (1, "complete", 1), (1, "failed", 0), (2, "incomplete", 0)]
    assert messages[1]["latency_ms"] == 4 / 1e6


def test_values_beyond_the_c_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Times, frames, lengths and packet ids too large for the C integers of the compiled
    path: Python's arithmetic and comparisons, or CaptureTables.add, with the same rows
    (add_many only: the Arrow columns hold 64-bit times)."""
    big = 1 << 70
    records = [_rec(1, "SUBSCRIBE", "c2s", 1), _pub(1, "c2s", 2, 1, ts=big),
               _pub(1, "c2s", big, 2, length=1 << 40), _pub(1, "c2s", 4, 70000),
               _ack(1, "PUBACK", "s2c", big + 1, 1), _rec(1, "PINGRESP", "s2c", 6, ts=big + 7),
               _ack(1, "PUBACK", "s2c", big, 2), _ack(1, "PUBACK", "s2c", 8, 70000)]
    reference = _tables(records, None, monkeypatch)
    for chunk in (1, 8192):
        assert _tables(records, chunk, monkeypatch) == reference, chunk
    assert [(m["packet_id"], m["status"]) for m in reference[1]] == [
        (1, "complete"), (2, "complete"), (70000, "complete")]
    assert reference[1][0]["latency_ms"] == (T0 + big + 1 - big) / 1e6
    assert reference[0][0]["bytes_c2s"] > 1 << 40
