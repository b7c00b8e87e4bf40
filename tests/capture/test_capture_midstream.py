"""Connections without their CONNECT in the capture: where the first packet starts, and
the protocol level inferred from the traffic of both directions (direction.py)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from capture_helpers import (
    T0,
    check_accounting,
    completing_segment,
    conversation,
    encode_all,
    expected_exchanges,
    frame_senders,
    frames_for,
    read,
    segments_for,
    write,
)

from mqttwire.capture.boundaries import first_boundary
from mqttwire.capture.direction import WINDOW
from mqttwire.capture.writers import Frame, Segment, TcpFlow
from mqttwire.spark.derive import derive

CLIENT = ("10.0.0.1", 50000)
SERVER = ("10.0.0.2", 1883)


def _no_connect(codec: ModuleType, version: int) -> list[tuple[int, object]]:
    """The test conversation without its CONNECT and CONNACK (sent before the capture)."""
    return conversation(codec, version)[2:]


@pytest.mark.parametrize("version", [4, 5])
def test_level_inferred_from_traffic(codec: ModuleType, version: int) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    flow.open()  # the handshake happened before the capture began
    sent = encode_all(_no_connect(codec, version), version)
    segs = segments_for(flow, sent)
    records = read(write(frames_for(flow, segs)), codec)
    assert [r.kind for r in records] == ["packet"] * len(sent)
    assert {(r.protocol_version, r.version_source) for r in records} == {(version, "inferred")}
    # Each direction's packets, in order, at the offsets they were sent at (the stream
    # offsets count from the first byte captured, which is where this capture begins).
    for side, name in ((0, "c2s"), (1, "s2c")):
        mine = [s for s in sent if s.side == side]
        got = [r for r in records if r.direction == name]
        assert [(r.packet_type, r.stream_offset, r.length) for r in got] == [
            (type(s.packet).__name__.upper(), s.offset - mine[0].offset, len(s.wire))
            for s in mine]
        assert [r.packet for r in got] == [s.packet for s in mine]
    if version == 5:  # a Topic Alias set inside the capture resolves as usual
        aliased = [r for r in records if r.topic_from_alias]
        assert [r.topic for r in aliased] == ["alias/topic", "down/alias"]
    check_accounting(records)


def test_capture_begins_inside_a_packet(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    flow.open()
    big = codec.Publish("big", bytes(range(256)) * 12, qos=1, packet_id=2).encode(4)
    after = [codec.Publish("next", b"21.5").encode(4), codec.PingReq().encode(4)]
    assert flow.send(0, big[:1000])  # sent before the capture began
    segs = (flow.send(0, big[1000:] + b"".join(after), sizes=[1000])
            + flow.send(1, codec.PubAck(2).encode(4) + codec.PingResp().encode(4)))
    records = read(write(frames_for(flow, segs)), codec)
    c2s = [r for r in records if r.direction == "c2s"]
    skipped = len(big) - 1000  # the rest of the big PUBLISH
    assert (c2s[0].kind, c2s[0].stream_offset, c2s[0].length, c2s[0].error) == (
        "error", 0, skipped, "skipped: the capture began inside a packet")
    assert [(r.kind, r.packet_type, r.stream_offset) for r in c2s[1:]] == [
        ("packet", "PUBLISH", skipped), ("packet", "PINGREQ", skipped + len(after[0]))]
    assert [r.packet_type for r in records if r.direction == "s2c"] == ["PUBACK", "PINGRESP"]
    # "21.5" would be a 5.0 property length of 0x32 bytes: 3.1.1 it is.
    assert {(r.protocol_version, r.version_source) for r in records} == {(4, "inferred")}
    check_accounting(records)


def test_only_pings_fall_back_to_3_1_1_and_say_so(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    flow.open()
    segs: list[Segment] = []
    for _ in range(3):
        segs += flow.send(0, codec.PingReq().encode(5)) + flow.send(1, codec.PingResp().encode(5))
    records = read(write(frames_for(flow, segs)), codec)
    # (A window's records come when it is decided: here, at the end, direction by
    # direction.)
    assert [(r.packet_type, r.protocol_version, r.version_source) for r in records] == [
        ("PINGREQ", 4, "default")] * 3 + [("PINGRESP", 4, "default")] * 3


def test_connack_settles_the_level_of_a_refused_connect(codec: ModuleType) -> None:
    """A CONNECT of a level the server does not know (7): the client's bytes are one
    error; the server's CONNACK decodes at the level its length shows (2 bytes: 3.x,
    return code 0x01; 3 or more: 5.0, reason code 0x84)."""
    connect = bytes([0x10, 13, 0, 4]) + b"MQTT" + bytes([7, 2, 0, 60, 0, 1]) + b"c"
    for connack, level, code in ((bytes([0x20, 2, 0, 0x01]), 4, 0x01),
                                 (bytes([0x20, 3, 0, 0x84, 0]), 5, 0x84)):
        flow = TcpFlow(CLIENT, SERVER)
        segs = (flow.open() + flow.send(0, connect) + flow.send(1, connack)
                + flow.close(1))
        records = read(write(frames_for(flow, segs)), codec)
        assert [(r.kind, r.direction, r.packet_type, r.length) for r in records] == [
            ("error", "c2s", "CONNECT", len(connect)),
            ("packet", "s2c", "CONNACK", len(connack))]
        assert "[MQTT-3.1.2-2]" in records[0].error  # type: ignore[operator]
        ack = records[1]
        assert (ack.reason_code, ack.protocol_version, ack.version_source) == (
            code, level, "inferred")


def test_window_replays_each_packet_with_its_own_frame(codec: ModuleType) -> None:
    """More than a window of traffic: the packets held while the level was unknown are
    reported with the frame and time of the segment that completed each."""
    flow = TcpFlow(CLIENT, SERVER)
    flow.open()
    conv = [(i % 2, codec.Publish(f"t/{i}", bytes(range(256)) * 2, qos=0))
            for i in range(2 * WINDOW // 500)]
    sent = encode_all(conv, 5)
    segs = segments_for(flow, sent, sizes=[700, 300])
    records = read(write(frames_for(flow, segs)), codec)
    assert [r.kind for r in records].count("packet") == len(sent)
    assert {r.version_source for r in records} == {"inferred"}
    for side, name in ((0, "c2s"), (1, "s2c")):
        base = next(s.offset for s in sent if s.side == side)
        for rec in (r for r in records if r.direction == name):
            index = completing_segment(flow, segs, side, base + rec.stream_offset + rec.length)
            assert (rec.frame, rec.ts) == (index + 1, T0 + index * 1000)
    check_accounting(records)


def test_lost_connect_then_inference(codec: ModuleType) -> None:
    """The SYN is captured but the CONNECT's segment is lost: the level is inferred after
    the gap, and the skipped bytes say that bytes were lost."""
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all(conversation(codec, 5), 5)
    segs = flow.open() + segments_for(flow, sent)
    lost = segs.index(next(s for s in segs if s.side == 0 and s.payload))
    del segs[lost]
    records = read(write(frames_for(flow, segs)), codec)
    c2s = [r for r in records if r.direction == "c2s"]
    assert (c2s[0].kind, c2s[0].length) == ("gap", len(sent[0].wire))
    assert all(r.kind == "packet" for r in records if r is not c2s[0])
    assert {r.version_source for r in records if r.kind == "packet"} == {"inferred"}
    assert {r.protocol_version for r in records if r.kind == "packet"} == {5}
    check_accounting(records)


@pytest.mark.parametrize("level", [4, 5])
def test_first_boundary(codec: ModuleType, level: int) -> None:
    """first_boundary on hand-made windows (MQTT 3.1.1 §3.4, MQTT 5.0 §3.4.2.1)."""
    puback = bytes([0x40, 2, 0, 7])  # PUBACK, packet id 7: both levels
    assert first_boundary(puback * 3, level, codec, 1 << 20) == (0, 0, 0)
    # Two stray bytes of an earlier packet, then the packets.
    assert first_boundary(b"\x07\x01" + puback * 3, level, codec, 1 << 20) == (2, 0, 0)
    # A 5.0 PUBACK with reason code 0x10 and property length 0: 3.x allows RL 2 only.
    v5 = bytes([0x40, 4, 0, 7, 0x10, 0])
    assert (first_boundary(v5 * 3, level, codec, 1 << 20) is None) == (level == 4)
    # A PUBLISH whose length runs past what the limit allows is no boundary.
    assert first_boundary(bytes([0x30, 0x7F]) + bytes(127), level, codec, 100) is None


def _released_by_the_ack(codec: ModuleType) -> bytes:
    """Three connections joined mid-stream, as a live capture that missed a segment of
    each at its start: the bytes after the missed one are held behind the hole until
    the other direction's acknowledgement of the hole proves it lost (tcp.py), so they
    are delivered with the frame of that segment, which also carries the PUBACK (or
    PUBREC) of the PUBLISH among them.  Every exchange whose PUBLISH is in the capture
    completes; the steps whose PUBLISH was missed (or came before the capture) are
    unmatched: 1, 3 and 2 of them."""
    frames: list[Frame] = []

    def put(flow: TcpFlow, seg: Segment) -> None:
        frames.append(Frame(T0 + len(frames) * 1000, flow.ip(seg)))

    def send(flow: TcpFlow, side: int, *packets: Any, lost: bool = False) -> None:
        for seg in flow.send(side, b"".join(p.encode(4) for p in packets)):
            if not lost:
                put(flow, seg)

    def publish(pid: int, qos: int) -> Any:
        return codec.Publish("in/flight", b"m" * 200, qos=qos, packet_id=pid)

    # The handshakes came before the capture began, as every packet up to here.
    sub, pub, late = (TcpFlow((f"10.0.0.{n}", 50000 + n), SERVER) for n in (1, 2, 3))
    for flow in (sub, pub, late):
        flow.open()
    send(sub, 1, publish(5, 1))
    send(sub, 0, codec.PubAck(5))
    send(pub, 0, publish(1, 2))
    send(pub, 1, codec.PubRec(1))
    send(pub, 0, codec.PubRel(1))
    send(pub, 1, codec.PubComp(1))
    # The third connection's first segments: the client's PUBACK of a PUBLISH sent
    # before the capture, then the server's bare ACK, so that its stream starts at the
    # hole (the direction, still without a level, then waits in a window again:
    # direction.py).
    send(late, 0, codec.PubAck(4))
    put(late, late.ack(1))
    send(sub, 1, publish(6, 1), lost=True)
    send(sub, 1, publish(7, 1))
    send(pub, 0, publish(2, 2), lost=True)
    send(pub, 0, publish(3, 2))
    send(late, 1, publish(5, 1), lost=True)
    send(late, 1, publish(6, 1), publish(7, 1))
    # Each acknowledges the hole and releases the PUBLISH held behind it: the PUBLISH
    # and its PUBACK (PUBREC) have one frame, the acknowledgement at the lower stream
    # offset (of its own direction: offsets of two directions are not comparable).
    send(sub, 0, codec.PubAck(6), codec.PubAck(7))
    send(pub, 1, codec.PubRec(2), codec.PubRec(3))
    send(late, 0, codec.PubAck(5), codec.PubAck(6))
    send(pub, 0, codec.PubRel(2), codec.PubRel(3))
    send(pub, 1, codec.PubComp(2), codec.PubComp(3))
    send(late, 0, codec.PubAck(7))
    return write(frames)


@pytest.mark.parametrize("version", [None, 4], ids=["inferred", "assumed-4"])
def test_publish_released_in_the_frame_of_its_ack(codec: ModuleType, version: int | None,
                                                  derive_way: bool) -> None:
    """tests/capture/test_capture_inflight.py's cases, made deterministic: a PUBLISH and
    its acknowledgement with the same frame (the PUBLISH held behind a hole, released by
    that frame) are one complete exchange, in whatever order the reader yields the two,
    both in the derived tables and in that test's expectations
    (capture_helpers.expected_exchanges).  The expectations once ordered the two by
    their stream offsets (the acknowledgement first); CaptureTables, when the PUBLISH
    came after the acknowledgement, took the acknowledgement as unmatched."""
    raw = _released_by_the_ack(codec)
    records = read(raw, codec, version=version, stream_ends=True)
    at = {(r.connection_id, r.packet_type, r.packet_id): i for i, r in enumerate(records)
          if r.kind == "packet"}
    for conn, ack, pid in (("#1", "PUBACK", 7), ("#2", "PUBREC", 3), ("#3", "PUBACK", 6)):
        publish, answer = (records[at["t.pcapng" + conn, t, pid]] for t in ("PUBLISH", ack))
        assert publish.frame == answer.frame
    if version is None:  # the third connection's PUBLISH waited in its window
        assert at["t.pcapng#3", "PUBLISH", 6] > at["t.pcapng#3", "PUBACK", 6]
    assert [(r.connection_id, r.direction) for r in records if r.kind == "gap"] == [
        ("t.pcapng#1", "s2c"), ("t.pcapng#2", "c2s"), ("t.pcapng#3", "s2c")]
    connections, messages, _ = derive(records, "t.pcapng")
    got = sorted((m["connection_id"], m["direction"], m["packet_id"], m["status"])
                 for m in messages)
    assert got == [("t.pcapng#1", "s2c", 5, "complete"), ("t.pcapng#1", "s2c", 7, "complete"),
                   ("t.pcapng#2", "c2s", 1, "complete"), ("t.pcapng#2", "c2s", 3, "complete"),
                   ("t.pcapng#3", "s2c", 6, "complete"), ("t.pcapng#3", "s2c", 7, "complete")]
    assert [c["unmatched_acks"] for c in connections] == [1, 3, 2]
    status, unmatched = expected_exchanges(records, frame_senders(raw, SERVER[1]))
    assert status == {(m["connection_id"], m["direction"], m["stream_offset"]): m["status"]
                      for m in messages}
    assert unmatched == 6
    check_accounting(records)
