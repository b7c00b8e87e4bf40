"""The derived tables of one capture (mqttwire.spark.derive), without Spark: from the
synthetic capture A through the capture layer (with each codec), and from hand-made
records for the edge cases of the QoS exchanges and the retained-message rules.

Every test runs both ways: with the common records taken by the compiled path
(mqttwire.spark.derive_c, which must be built: an ImportError fails the test) and by
CaptureTables.add alone (the reference); test_derive_compiled.py compares the two on
whole captures."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from spark_scenarios import capture_a

from mqttwire.capture import Record, read_capture
from mqttwire.spark.derive import CaptureTables, derive


@pytest.fixture(autouse=True)
def compiled(derive_way: bool) -> bool:
    """Every test both ways (tests/conftest.py ``derive_way``)."""
    return derive_way


CLIENT = ("10.0.0.1", 50001)
SERVER = ("10.0.0.2", 1883)


def rec(packet_type: str | None, direction: str = "c2s", ts: int = 0, kind: str = "packet",
        **fields: Any) -> Record:
    """A record of connection cap#1 between CLIENT and SERVER."""
    src, dst = (CLIENT, SERVER) if direction == "c2s" else (SERVER, CLIENT)
    fields.setdefault("length", 2)
    return Record(kind, "cap", ts, connection_id="cap#1", direction=direction,
                  src_ip=src[0], src_port=src[1], dst_ip=dst[0], dst_port=dst[1],
                  protocol_version=5, packet_type=packet_type, **fields)


def publish(direction: str = "c2s", ts: int = 0, *, topic: str = "t", qos: int = 0,
            packet_id: int | None = None, retain: bool = False, dup: bool = False,
            size: int = 1) -> Record:
    return rec("PUBLISH", direction, ts, topic=topic, qos=qos, packet_id=packet_id,
               retain=retain, dup=dup, payload_length=size)


def ack(packet_type: str, direction: str, ts: int, packet_id: int, code: int = 0) -> Record:
    return rec(packet_type, direction, ts, packet_id=packet_id, reason_code=code)


def end(direction: str, ts: int, reason: str) -> Record:
    """The end of a direction's TCP stream, as ``read_capture(..., stream_ends=True)``
    reports it."""
    return rec(None, direction, ts, kind="end", length=0, end_reason=reason)


def run(*records: Record) -> tuple[list[dict], list[dict], list[dict]]:
    return derive(records, "cap")


# ---------------------------------------------------------------------------------------
# Through the capture layer


def test_capture_a(tmp_path: Path, codec: ModuleType) -> None:
    written = capture_a(tmp_path / "a.pcapng")
    with open(written.path, "rb") as f:
        records = list(read_capture(f, name="a.pcapng", codec=codec, stream_ends=True))
    connections, messages, retained = derive(records, "a.pcapng")
    t = written.times
    by_client = {c["client_id"]: c for c in connections}
    assert by_client["alpha"]["close_reason"] == "disconnect"
    assert by_client["alpha"]["tcp_end"] == "fin"
    assert by_client["alpha"]["tcp_closed_by"] == "client"
    assert by_client["beta"]["close_reason"] == "rst"
    assert by_client["beta"]["close_ts"] == t["beta rst"]
    statuses = sorted((m["topic"], m["direction"], m["status"] or "-") for m in messages)
    assert statuses == [
        ("t/a", "c2s", "-"), ("t/a", "c2s", "-"), ("t/b", "c2s", "complete"),
        ("t/b", "s2c", "complete"), ("t/c", "c2s", "complete"), ("t/d", "c2s", "incomplete"),
        ("t/e", "c2s", "failed"), ("t/r", "c2s", "complete"), ("t/r", "c2s", "complete"),
        ("t/r", "s2c", "-"),
    ]
    t_c = next(m for m in messages if m["topic"] == "t/c")
    assert (t_c["pubrec_ts"], t_c["pubrel_ts"], t_c["pubcomp_ts"]) == (
        t["t/c pubrec"], t["t/c pubrel"], t["t/c pubcomp"])
    assert t_c["latency_ms"] == (t["t/c pubcomp"] - t["t/c"]) / 1e6
    assert [(r["topic"], r["client_id"], r["ts"]) for r in retained] == [
        ("t/r", "beta", t["t/r new"])]


# ---------------------------------------------------------------------------------------
# QoS exchanges


def test_qos1_complete_with_latency() -> None:
    _, messages, _ = run(publish(ts=1_000_000, qos=1, packet_id=7),
                         ack("PUBACK", "s2c", 3_500_000, 7))
    (m,) = messages
    assert (m["status"], m["puback_ts"], m["completed_ts"]) == ("complete", 3_500_000, 3_500_000)
    assert m["latency_ms"] == 2.5  # (3.5 ms - 1 ms)


def test_ack_must_come_from_the_other_side() -> None:
    # A PUBACK in the PUBLISH's own direction answers nothing (MQTT 3.1.1 §4.3.2: the
    # receiver acknowledges).
    _, messages, _ = run(publish(qos=1, packet_id=7), ack("PUBACK", "c2s", 1, 7))
    assert [m["status"] for m in messages] == ["incomplete"]


def test_qos2_needs_every_step_in_order() -> None:
    # PUBACK does not end a QoS 2 exchange, and PUBCOMP before PUBREL is ignored.
    _, messages, _ = run(publish(ts=0, qos=2, packet_id=1), ack("PUBACK", "s2c", 1, 1),
                         ack("PUBCOMP", "s2c", 2, 1), ack("PUBREC", "s2c", 3, 1))
    (m,) = messages
    assert (m["status"], m["puback_ts"], m["pubrec_ts"], m["pubcomp_ts"]) == (
        "incomplete", None, 3, None)
    _, messages, _ = run(publish(ts=0, qos=2, packet_id=1), ack("PUBREC", "s2c", 1, 1),
                         ack("PUBREL", "c2s", 2, 1), ack("PUBCOMP", "s2c", 4, 1))
    (m,) = messages
    assert (m["status"], m["pubrel_ts"], m["completed_ts"]) == ("complete", 2, 4)


def test_rejecting_acks_end_the_exchange_as_failed() -> None:
    # A v5 PUBACK or PUBREC with a reason code of 0x80 or more ends the flow (MQTT 5.0
    # §4.3.2, §4.3.3); below 0x80 (0x10 No matching subscribers) it is a success.
    _, messages, _ = run(publish(qos=1, packet_id=1), ack("PUBACK", "s2c", 1, 1, 0x87),
                         publish(qos=2, packet_id=2), ack("PUBREC", "s2c", 2, 2, 0x80),
                         publish(qos=1, packet_id=3), ack("PUBACK", "s2c", 3, 3, 0x10))
    assert [(m["packet_id"], m["status"], m["ack_reason_code"]) for m in messages] == [
        (1, "failed", 0x87), (2, "failed", 0x80), (3, "complete", 0x10)]


def test_dup_resend_is_the_same_message() -> None:
    _, messages, _ = run(publish(ts=0, qos=1, packet_id=4),
                         publish(ts=5, qos=1, packet_id=4, dup=True),
                         ack("PUBACK", "s2c", 9, 4))
    (m,) = messages
    assert (m["retransmissions"], m["ts"], m["latency_ms"]) == (1, 0, 9 / 1e6)


def test_packet_id_reused_before_completion() -> None:
    # A new (not DUP) PUBLISH under a packet id still in flight: the capture missed the
    # first exchange's end, which is reported incomplete; the new one goes on.
    _, messages, _ = run(publish(ts=0, topic="first", qos=1, packet_id=4),
                         publish(ts=1, topic="second", qos=1, packet_id=4),
                         ack("PUBACK", "s2c", 2, 4))
    assert [(m["topic"], m["status"]) for m in messages] == [
        ("first", "incomplete"), ("second", "complete")]


def test_both_directions_use_their_own_packet_ids() -> None:
    # Packet ids of client and server are separate spaces [MQTT-2.2.1-3 / §2.3.1].
    _, messages, _ = run(publish("c2s", 0, qos=1, packet_id=1),
                         publish("s2c", 1, qos=1, packet_id=1),
                         ack("PUBACK", "c2s", 2, 1))
    assert sorted((m["direction"], m["status"]) for m in messages) == [
        ("c2s", "incomplete"), ("s2c", "complete")]


def at(record: Record, frame: int) -> Record:
    """``record`` as the capture's frame number ``frame``."""
    record.frame = frame
    return record


def test_steps_matched_by_frame_when_a_direction_comes_late() -> None:
    # The reader held the server's direction (a window of a connection joined
    # mid-stream), so the client's PUBLISH and PUBREL come before the PUBREC and
    # PUBCOMP between them, and a PUBACK before its PUBLISH: each step is matched by
    # frame, not by arrival (MQTT 3.1.1 §4.3.2, §4.3.3).
    connections, messages, _ = run(
        at(publish(ts=10, qos=2, packet_id=1), 10), at(ack("PUBREL", "c2s", 30, 1), 30),
        at(publish(ts=50, qos=2, packet_id=1), 50), at(ack("PUBREL", "c2s", 70, 1), 70),
        at(ack("PUBACK", "c2s", 90, 9), 90),
        at(ack("PUBREC", "s2c", 20, 1), 20), at(ack("PUBCOMP", "s2c", 40, 1), 40),
        at(ack("PUBREC", "s2c", 60, 1), 60), at(ack("PUBCOMP", "s2c", 80, 1), 80),
        at(publish("s2c", ts=85, qos=1, packet_id=9), 85))
    assert sorted((m["ts"], m["status"], m["pubrec_ts"], m["pubrel_ts"], m["completed_ts"])
                  for m in messages) == [(10, "complete", 20, 30, 40),
                                         (50, "complete", 60, 70, 80),
                                         (85, "complete", None, None, 90)]
    assert connections[0]["unmatched_acks"] == 0


def test_acks_of_publishes_before_the_capture_are_unmatched() -> None:
    # A PUBACK and a PUBREL whose PUBLISH was sent before the capture began: not
    # messages, counted; and so is a PUBACK that repeats one already taken.
    connections, messages, _ = run(
        at(publish(ts=1, qos=1, packet_id=5), 1),
        at(ack("PUBACK", "s2c", 2, 4), 2), at(ack("PUBREL", "c2s", 3, 6), 3),
        at(ack("PUBACK", "s2c", 4, 5), 4), at(ack("PUBACK", "s2c", 5, 5), 5),
        at(publish(ts=6, qos=1, packet_id=4), 6))
    assert [(m["packet_id"], m["status"]) for m in messages] == [(5, "complete"),
                                                                 (4, "incomplete")]
    assert connections[0]["unmatched_acks"] == 3


def test_ack_held_for_a_late_publish_direction_then_unmatched() -> None:
    # The client's direction comes late: a PUBACK from the server is held until the
    # client's records pass its frame; one whose PUBLISH never comes is unmatched, and
    # one whose PUBLISH is later than it too (a packet id used again).
    connections, messages, _ = run(
        at(ack("PUBACK", "s2c", 20, 3), 20), at(ack("PUBACK", "s2c", 21, 7), 21),
        at(publish(ts=10, qos=1, packet_id=3), 10), at(publish(ts=30, qos=1, packet_id=7), 30))
    assert [(m["packet_id"], m["status"]) for m in messages] == [(3, "complete"),
                                                                 (7, "incomplete")]
    assert connections[0]["unmatched_acks"] == 1


def test_superseded_exchange_gets_its_late_answer() -> None:
    # The packet id is used again (the first exchange over) before the server's
    # direction comes: its PUBACK still completes the first exchange, not the second.
    _, messages, _ = run(
        at(publish(ts=10, topic="first", qos=1, packet_id=4), 10),
        at(publish(ts=30, topic="second", qos=1, packet_id=4), 30),
        at(ack("PUBACK", "s2c", 20, 4), 20), at(ack("PUBACK", "s2c", 40, 4), 40))
    assert sorted((m["topic"], m["status"], m["completed_ts"]) for m in messages) == [
        ("first", "complete", 20), ("second", "complete", 40)]


# ---------------------------------------------------------------------------------------
# Retained messages (MQTT 3.1.1 §3.3.1.3)


def test_retained_replaced_cleared_and_client_only() -> None:
    *_, retained = run(
        publish(ts=1, topic="a", retain=True, size=3),
        publish(ts=2, topic="a", retain=True, size=5),  # replaces [MQTT-3.3.1-5]
        publish(ts=3, topic="b", retain=True, size=2),
        publish(ts=4, topic="b", retain=True, size=0),  # clears [MQTT-3.3.1-10]
        publish(ts=5, topic="c", retain=True, size=0),  # never stored [MQTT-3.3.1-11]
        publish("s2c", ts=6, topic="d", retain=True, size=4),  # server to client: no
        publish(ts=7, topic="e", retain=False, size=4),  # not retained
        publish(ts=8, topic="f", qos=1, packet_id=1, retain=True, size=1),
    )
    assert [(r["topic"], r["ts"], r["payload_length"]) for r in retained] == [
        ("a", 2, 5), ("f", 8, 1)]


# ---------------------------------------------------------------------------------------
# Connections


def test_connection_close_by_server_disconnect_then_fin() -> None:
    connections, _, _ = run(
        rec("DISCONNECT", "s2c", 10, reason_code=0x8E),  # Session taken over (MQTT 5.0)
        end("s2c", 11, "fin"),
        end("c2s", 12, "fin"),
    )
    (c,) = connections
    assert (c["close_reason"], c["disconnect_by"], c["disconnect_reason_code"]) == (
        "disconnect", "server", 0x8E)
    assert (c["close_ts"], c["tcp_end"], c["tcp_closed_by"]) == (10, "fin", "server")
    assert (c["packets_c2s"], c["packets_s2c"], c["bytes_s2c"]) == (0, 1, 2)


def test_connection_counts_errors_and_gaps_and_stays_open() -> None:
    tables = CaptureTables("cap")
    tables.add_many([publish(ts=1), rec(None, "c2s", 2, kind="gap", length=100),
                     rec(None, "s2c", 3, kind="error", length=7)])
    assert tables.connections == []  # not ended yet
    tables.finish()
    (c,) = tables.connections
    assert (c["gaps"], c["errors"], c["packets_c2s"]) == (1, 1, 1)
    assert (c["close_reason"], c["close_ts"], c["first_ts"], c["last_ts"]) == ("eof", None, 1, 3)


def test_connection_row_is_emitted_when_both_directions_end() -> None:
    tables = CaptureTables("cap")
    tables.add_many([publish(ts=1), end("c2s", 2, "rst")])
    assert tables.connections == []
    tables.add_many([end("s2c", 2, "rst")])
    (c,) = tables.connections
    assert (c["close_reason"], c["tcp_closed_by"], c["close_ts"]) == ("rst", None, 2)


def test_times_and_counters_of_packets_without_a_time() -> None:
    """Records without a time count, and the first time comes later: first_ts is the
    first record's that has one, and an acknowledgement without a time completes its
    exchange without one."""
    connections, messages, _ = run(
        publish(ts=None, qos=1, packet_id=1),  # type: ignore[arg-type]
        ack("PUBACK", "s2c", None, 1),  # type: ignore[arg-type]
        publish(ts=7),
        rec("PUBACK", "s2c", 9, packet_id=1, reason_code=0, length=None),  # answered before
    )
    (c,) = connections
    assert (c["first_ts"], c["last_ts"]) == (7, 9)
    assert (c["packets_c2s"], c["bytes_c2s"], c["packets_s2c"], c["bytes_s2c"]) == (2, 4, 2, 2)
    first, second = messages
    assert (first["status"], first["puback_ts"], first["completed_ts"], first["latency_ms"]) \
        == ("complete", None, None, None)
    assert (second["ts"], second["qos"], second["status"]) == (7, 0, None)


@pytest.mark.parametrize("kind", ["fragment", "capture_error"])
def test_records_without_a_connection_are_ignored(kind: str) -> None:
    assert run(Record(kind, "cap", 1, error="x")) == ([], [], [])
