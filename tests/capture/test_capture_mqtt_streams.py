"""MQTT records from synthetic captures: every field against what was sent, every link
type and file flavour, segmentation, loss, errors and the byte accounting."""

from __future__ import annotations

import io
from types import ModuleType
from typing import Any

import pytest
from capture_helpers import (
    T0,
    Sent,
    check_accounting,
    completing_segment,
    conversation,
    encode_all,
    frames_for,
    read,
    segments_for,
    write,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqttwire._constants import PACKET_NAMES
from mqttwire.capture import read_capture
from mqttwire.capture.link import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from mqttwire.capture.writers import (
    Frame,
    TcpFlow,
    ipv4_fragments,
    ipv4_packet,
    tcp_header,
)

CLIENT = ("192.168.1.10", 51000)
SERVER = ("192.168.1.20", 1883)


def _expect_packet(rec: Any, sent: Sent, version: int, client_id: str,
                   aliases: dict[int, str]) -> None:
    """A packet record against the packet that was sent.  ``aliases``: the Topic Alias
    map of the sender's direction so far (the test's own bookkeeping)."""
    p = sent.packet
    assert rec.kind == "packet"
    assert rec.direction == ("c2s" if sent.side == 0 else "s2c")
    assert (rec.stream_offset, rec.length) == (sent.offset, len(sent.wire))
    assert rec.packet_type == PACKET_NAMES[sent.wire[0] >> 4]
    assert rec.flags == sent.wire[0] & 0x0F
    assert rec.client_id == client_id
    assert rec.protocol_version == version
    assert rec.packet_id == getattr(p, "packet_id", None)
    assert rec.packet == p
    if rec.packet_type == "PUBLISH":
        assert (rec.qos, rec.retain, rec.dup) == (p.qos, p.retain, p.dup)
        assert rec.payload_length == len(p.payload)
        alias = p.properties.topic_alias if p.properties is not None else None
        if p.topic:
            if alias is not None:
                aliases[alias] = p.topic
            assert (rec.topic, rec.topic_from_alias) == (p.topic, False)
        else:
            assert (rec.topic, rec.topic_from_alias) == (aliases[alias], True)
    else:
        assert rec.topic is None and rec.qos is None and rec.payload_length is None
    if rec.packet_type in ("SUBACK", "UNSUBACK"):
        assert rec.reason_codes == list(p.reason_codes)
        assert rec.reason_code == (p.reason_codes[0] if p.reason_codes else None)
    elif rec.packet_type == "SUBSCRIBE":
        assert rec.topic_filters == [s.topic_filter for s in p.subscriptions]
    elif rec.packet_type == "UNSUBSCRIBE":
        assert rec.topic_filters == list(p.topic_filters)
    elif hasattr(p, "reason_code"):
        assert rec.reason_code == p.reason_code
    assert rec.properties == getattr(p, "properties", None)


def _lengths(sent: list[Sent], cid: str = "t.pcapng#1") -> dict[tuple[str, str], int]:
    return {(cid, "c2s"): sum(len(s.wire) for s in sent if s.side == 0),
            (cid, "s2c"): sum(len(s.wire) for s in sent if s.side == 1)}


def _check_session(records: list[Any], sent: list[Sent], version: int, client_id: str,
                   cid: str = "t.pcapng#1") -> None:
    for side, name in ((0, "c2s"), (1, "s2c")):
        mine = [r for r in records if r.direction == name and r.connection_id == cid]
        theirs = [s for s in sent if s.side == side]
        assert [r.kind for r in mine] == ["packet"] * len(theirs)
        aliases: dict[int, str] = {}
        for rec, s in zip(mine, theirs):
            _expect_packet(rec, s, version, client_id, aliases)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_session_every_field(codec: ModuleType, version: int) -> None:
    # The server's ISN is near 2**32: its stream wraps around after ~300 bytes.
    flow = TcpFlow(CLIENT, SERVER, isn_client=3_000_000, isn_server=0xFFFFFF00)
    sent = encode_all(conversation(codec, version, f"cid-{version}"), version)
    # 7-byte segments cut every header; 1000-byte ones hold several packets.
    segs = flow.open() + segments_for(flow, sent, sizes=[7, 1000, 3]) + flow.close()
    records = read(write(frames_for(flow, segs)), codec, payload_limit=3)
    _check_session(records, sent, version, f"cid-{version}")
    for rec in records:
        side = 0 if rec.direction == "c2s" else 1
        assert (rec.src_ip, rec.src_port) == (CLIENT, SERVER)[side]
        assert (rec.dst_ip, rec.dst_port) == (SERVER, CLIENT)[side]
        assert rec.connection_id == "t.pcapng#1"
        # ts and frame: of the segment that holds the packet's last byte.
        index = completing_segment(flow, segs, side, rec.stream_offset + rec.length)
        assert (rec.ts, rec.frame) == (T0 + index * 1000, index + 1)
        if rec.packet_type == "PUBLISH":
            assert rec.payload == rec.packet.payload[:3]
    check_accounting(records, _lengths(sent))


def test_payloads_are_off_by_default(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all(conversation(codec, 4), 4)
    segs = flow.open() + segments_for(flow, sent) + flow.close()
    records = read(write(frames_for(flow, segs)), codec)
    publishes = [r for r in records if r.packet_type == "PUBLISH"]
    assert publishes and all(r.payload is None for r in publishes)
    assert [r.payload_length for r in publishes] == [4, 3072, 1, 4]


LINKS = [LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_NULL,
         LINKTYPE_LOOP, LINKTYPE_RAW]


@pytest.mark.parametrize("linktype", LINKS)
@pytest.mark.parametrize("fmt, byteorder, fine", [("pcap", "<", False), ("pcap", ">", True),
                                                  ("pcapng", "<", True), ("pcapng", ">", False)])
def test_link_types_and_file_flavours(codec: ModuleType, linktype: int, fmt: str,
                                      byteorder: str, fine: bool) -> None:
    flow = TcpFlow(("2001:db8::10", 51000), ("2001:db8::20", 1883))
    sent = encode_all(conversation(codec, 5), 5)
    segs = flow.open() + segments_for(flow, sent, sizes=[100]) + flow.close()
    frames = frames_for(flow, segs, step=1_234_567)  # ns steps, so resolution shows
    if fmt == "pcap":
        raw = write(frames, "pcap", linktype=linktype, byteorder=byteorder, nanoseconds=fine)
    else:
        raw = write(frames, linktypes=[linktype], byteorder=byteorder,
                    tsresol=[9 if fine else 6])
    records = read(raw, codec)
    _check_session(records, sent, 5, "client")
    assert records[0].src_ip == "2001:db8::10"
    index = completing_segment(flow, segs, 0, len(sent[0].wire))
    ts = T0 + index * 1_234_567
    assert records[0].ts == (ts if fine else ts // 1000 * 1000)


def test_out_of_order_retransmitted_and_overlapping(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER, isn_client=0xFFFFFFF0)
    sent = encode_all(conversation(codec, 5), 5)
    opening = flow.open()
    segs = segments_for(flow, sent, sizes=[50])
    # Swap neighbours of the same side, repeat some, and add an overlapping copy.
    shuffled = []
    i = 0
    while i < len(segs):
        a = segs[i]
        b = segs[i + 1] if i + 1 < len(segs) else None
        if b is not None and a.side == b.side and a.payload and b.payload:
            shuffled += [b, a, a]  # b early, a late, a again (retransmitted)
            over = type(a)(a.side, (a.seq + 20) & 0xFFFFFFFF, a.ack, a.flags,
                           a.payload[20:] + b.payload[:10])
            shuffled.append(over)
            i += 2
        else:
            shuffled.append(a)
            i += 1
    records = read(write(frames_for(flow, opening + shuffled + flow.close())), codec)
    _check_session(records, sent, 5, "client")
    check_accounting(records, _lengths(sent))


def test_lost_segment_gap_and_resync(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    mw = codec
    conv = [
        (0, mw.Connect("lossy", protocol_version=4)),
        (1, mw.ConnAck()),
        (0, mw.Publish("a", b"1" * 30)),
        (0, mw.Publish("b", b"2" * 30)),
        (0, mw.Publish("c", b"3" * 30)),
        (0, mw.Publish("d", b"4" * 30)),
    ]
    sent = encode_all(conv, 4)
    opening = flow.open()
    c_connect = flow.send(0, sent[0].wire)
    s_connack = flow.send(1, sent[1].wire)
    # PUBLISH "a": 2 + 2 + 1 + 30 = 35 bytes.  Segments: [a + first 10 of b] [rest of b]
    # (lost) [c] [d]: after the loss, "c" starts a segment and decodes: resync there.
    body = b"".join(s.wire for s in sent[2:])
    assert len(sent[2].wire) == 35
    s1 = flow.send(0, body[:45])
    flow.send(0, body[45:70])  # the rest of b: sent, never captured
    s3 = flow.send(0, body[70:105])
    s4 = flow.send(0, body[105:])
    ack = flow.ack(1)
    records = read(write(frames_for(flow, opening + c_connect + s_connack + s1 + s3 + s4
                                    + [ack] + flow.close())), codec)
    c2s = [r for r in records if r.direction == "c2s"]
    base = len(sent[0].wire)  # the CONNECT; PUBLISH "a" follows it
    assert [(r.kind, r.stream_offset, r.length) for r in c2s] == [
        ("packet", 0, base),
        ("packet", base, 35),
        ("error", base + 35, 10),  # the start of b, cut short by the gap
        ("gap", base + 45, 25),
        ("packet", base + 70, 35),  # c: a segment start that decodes: trusted
        ("packet", base + 105, 35),
    ]
    assert [r.topic for r in c2s if r.kind == "packet"][1:] == ["a", "c", "d"]
    assert "gap" in c2s[2].error and c2s[2].reason_code is None
    check_accounting(records, _lengths(sent))


def test_resync_skips_untrusted_segment_starts(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    mw = codec
    conv = [(0, mw.Connect("x", protocol_version=5)), (0, mw.Publish("t", b"p" * 40)),
            (0, mw.Publish("u", b"q" * 40)), (0, mw.Publish("v", b"r" * 5))]
    sent = encode_all(conv, 5)
    # PUBLISH "t" (v5): 2 + 2 + 1 + 1 (property length 0) + 40 = 46 bytes.
    assert len(sent[1].wire) == 46
    body = b"".join(s.wire for s in sent[1:])
    opening = flow.open()
    connect = flow.send(0, sent[0].wire)
    flow.send(0, body[:10])  # sent, never captured
    mid = flow.send(0, body[10:60])  # starts inside "t": its bytes 'pppp' are no header
    rest = flow.send(0, body[60:])  # starts inside "u" too ('q' = 0x71: type 7 flags 1)
    records = read(write(frames_for(flow, opening + connect + mid + rest + [flow.ack(1)])),
                   codec)
    c2s = [(r.kind, r.stream_offset, r.length) for r in records if r.direction == "c2s"]
    n = len(sent[0].wire)
    # No segment after the gap starts a packet: all of it is skipped, none guessed.
    assert c2s == [("packet", 0, n), ("gap", n, 10), ("error", n + 10, len(body) - 10)]
    check_accounting(records)


def test_bad_packet_costs_only_itself(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    mw = codec
    good = [mw.Connect("bad", protocol_version=4).encode(4), mw.Publish("ok", b"1").encode(4)]
    # 0x36 = PUBLISH with both QoS bits set [MQTT-3.3.1-4], Remaining Length 2.
    bad = bytes([0x36, 0x02, 0x00, 0x00])
    tail = mw.PingReq().encode(4)
    c2s_bytes = b"".join(good)
    opening = flow.open()
    # One segment holds the good PUBLISH and the bad bytes: the PUBLISH comes first.
    segs = (flow.send(0, good[0]) + flow.send(1, mw.ConnAck().encode(4))
            + flow.send(0, good[1] + bad) + flow.send(0, tail)
            + flow.send(1, mw.PingResp().encode(4)) + flow.close())
    records = read(write(frames_for(flow, opening + segs)), codec)
    c2s = [r for r in records if r.direction == "c2s"]
    n = len(c2s_bytes)
    assert [(r.kind, r.packet_type, r.stream_offset, r.length) for r in c2s] == [
        ("packet", "CONNECT", 0, len(good[0])),
        ("packet", "PUBLISH", len(good[0]), len(good[1])),
        ("error", "PUBLISH", n, 4),  # found in the segment that held it
        ("packet", "PINGREQ", n + 4, 2),  # its Remaining Length was valid: decoding goes on
    ]
    err = c2s[2]
    assert err.reason_code == 0x81 and err.error_offset == n and err.flags == 6
    assert "[MQTT-3.3.1-4]" in err.error
    assert err.ts == c2s[1].ts  # same segment
    assert c2s[3].protocol_version == 4 and c2s[3].version_source == "connect"
    # The other direction decodes on.
    assert [r.packet_type for r in records if r.direction == "s2c"] == ["CONNACK", "PINGRESP"]
    check_accounting(records)


def test_interleaved_connections_vlan_ipv6_fragment(codec: ModuleType) -> None:
    mw = codec
    flows = [
        (TcpFlow(("10.1.0.1", 40001), ("10.1.0.9", 1883)), 3, (7,)),
        (TcpFlow(("10.1.0.2", 40002), ("10.1.0.9", 1883)), 4, ()),
        (TcpFlow(("fd00::2", 40003), ("fd00::9", 1883)), 5, (8, 9)),
    ]
    plans = []
    for n, (flow, version, vlan) in enumerate(flows):
        sent = encode_all(conversation(mw, version, f"c{n}"), version)
        plans.append([(flow, s, vlan) for s in
                      flow.open() + segments_for(flow, sent, sizes=[60]) + flow.close()])
        plans[-1].append(sent)  # type: ignore[arg-type]
    sents = [p.pop() for p in plans]
    frames = []
    # Round-robin: one segment of each connection in turn.
    while any(plans):
        for plan in plans:
            if plan:
                flow, seg, vlan = plan.pop(0)
                frames.append(Frame(T0 + len(frames), flow.ip(seg), vlan=vlan))
    # An IPv4 fragment of an unrelated TCP segment, mid-capture.
    src, dst = bytes([10, 9, 9, 1]), bytes([10, 9, 9, 2])
    frag = ipv4_fragments(src, dst, tcp_header(src, dst, 5555, 1883, 1, 0, 0x18, bytes(40)),
                          16, ident=77)[0]
    frames.insert(10, Frame(T0 + 10, frag))
    records = read(write(frames), codec)
    for n, (sent, (_, version, _)) in enumerate(zip(sents, flows)):
        _check_session(records, sent, version, f"c{n}", cid=f"t.pcapng#{n + 1}")
    (fragment,) = [r for r in records if r.kind == "fragment"]
    assert (fragment.src_ip, fragment.dst_port, fragment.frame, fragment.length) == (
        "10.9.9.1", 1883, 11, 16)
    assert "id 0x4d" in fragment.error and "more follow" in fragment.error
    check_accounting(records)


def test_connect_on_another_port_and_other_traffic(codec: ModuleType) -> None:
    mw = codec
    mqtt = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 8883))
    other = TcpFlow(("10.0.0.1", 40001), ("10.0.0.2", 80))
    sent = encode_all(conversation(mw, 4, "sniffed"), 4)
    # The CONNECT arrives in 3-byte pieces: the sniffer must wait for enough bytes.
    segs = mqtt.open() + segments_for(mqtt, sent, sizes=[3, 500]) + mqtt.close()
    http = other.open() + other.send(0, b"GET / HTTP/1.1\r\n\r\n") + other.send(
        1, b"HTTP/1.1 200 OK\r\n\r\n") + other.close()
    frames = frames_for(other, http) + frames_for(mqtt, segs, start=len(http))
    records = read(write(frames), codec)
    assert {r.connection_id for r in records} == {"t.pcapng#2"}
    _check_session(records, sent, 4, "sniffed", cid="t.pcapng#2")
    # Told that 8883 is an MQTT port, it finds the same by port.
    by_port = read(write(frames), codec, ports=[8883])
    assert [r.packet_type for r in by_port] == [r.packet_type for r in records]


def test_midstream_capture(codec: ModuleType) -> None:
    mw = codec
    flow = TcpFlow(CLIENT, SERVER)
    conv = [(0, mw.Connect("early", protocol_version=4)), (1, mw.ConnAck()),
            (0, mw.Publish("x", b"1")), (0, mw.Publish("y", b"2", qos=1, packet_id=5)),
            (1, mw.PubAck(5))]
    sent = encode_all(conv, 4)
    uncaptured = flow.open() + flow.send(0, sent[0].wire) + flow.send(1, sent[1].wire)
    assert uncaptured
    captured = (flow.send(0, sent[2].wire) + flow.send(0, sent[3].wire)
                + flow.send(1, sent[4].wire))
    raw = write(frames_for(flow, captured))
    # Without the CONNECT the level is inferred from the traffic: the PUBLISH payloads
    # "1" and "2" would be 5.0 property lengths of 0x31 and 0x32 bytes, which the packets
    # do not hold; at 3.1.1 every packet decodes.
    inferred = read(raw, codec)
    # PUBLISH "x" QoS 0: 2 header + 3 topic + 1 payload = 6 bytes; "y" QoS 1 adds a
    # 2-byte packet id: 8 bytes.  PUBACK (3.1.1): 4 bytes.
    assert [(r.kind, r.packet_type, r.direction, r.stream_offset, r.length, r.topic,
             r.protocol_version, r.version_source) for r in inferred] == [
        ("packet", "PUBLISH", "c2s", 0, 6, "x", 4, "inferred"),
        ("packet", "PUBLISH", "c2s", 6, 8, "y", 4, "inferred"),
        ("packet", "PUBACK", "s2c", 0, 4, None, 4, "inferred")]
    # With the level assumed, decoding starts at the first segment (a trusted boundary).
    told = read(raw, codec, version=4)
    assert [(r.packet_type, r.topic, r.protocol_version, r.version_source)
            for r in told] == [("PUBLISH", "x", 4, "option"), ("PUBLISH", "y", 4, "option"),
                               ("PUBACK", None, 4, "option")]
    assert all(r.client_id is None for r in told)


def test_truncated_file_yields_records_then_capture_error(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all(conversation(codec, 5), 5)
    segs = flow.open() + segments_for(flow, sent) + flow.close()
    raw = write(frames_for(flow, segs))
    cut = raw[: len(raw) * 2 // 3]
    records = read(cut, codec, name="cut.pcapng")
    last = records[-1]
    assert last.kind == "capture_error" and "cut.pcapng" in last.error
    assert last.error_offset is not None and last.error_offset < len(cut)
    packets = [r for r in records if r.kind == "packet"]
    assert packets and packets[0].packet_type == "CONNECT"
    check_accounting(records)
    garbage = read(b"\x00" * 64, codec, name="junk")
    assert [(r.kind, r.error_offset) for r in garbage] == [("capture_error", 0)]


def test_read_capture_from_path(codec: ModuleType, tmp_path: Any) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all(conversation(codec, 4), 4)
    path = tmp_path / "session.pcap"
    path.write_bytes(write(frames_for(flow, flow.open() + segments_for(flow, sent)), "pcap"))
    records = list(read_capture(path, codec=codec))
    assert records[0].capture == "session.pcap"
    assert records[0].connection_id == "session.pcap#1"
    # No FIN: the streams end with the capture; every packet was whole, so no error.
    assert len(records) == len(sent) and all(r.kind == "packet" for r in records)
    first = next(read_capture(io.BytesIO(path.read_bytes()), codec=codec, name="n"))
    assert first.capture == "n"


# ---------------------------------------------------------------------------------------
# Stream ends (read_capture's stream_ends)


def _shape(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.kind, r.direction, r.stream_offset, r.length, r.ts, r.frame, r.end_reason)
            for r in records]


def test_stream_ends_fin(codec: ModuleType) -> None:
    flow = TcpFlow(CLIENT, SERVER)
    other = TcpFlow(("192.168.1.10", 51001), ("192.168.1.20", 80))
    sent = encode_all(conversation(codec, 4), 4)
    # The server closes first: FIN from the server, FIN from the client, last ACK.
    segs = flow.open() + segments_for(flow, sent) + flow.close(first=1)
    http = other.open() + other.send(0, b"GET / HTTP/1.1\r\n\r\n") + other.close()
    raw = write(frames_for(flow, segs) + frames_for(other, http, start=len(segs)))
    records = read(raw, codec, stream_ends=True)
    plain = read(raw, codec)
    assert [r for r in records if r.kind == "end"] == records[-2:]
    # Off by default; on, it adds the ends and changes nothing else.
    assert _shape(records[:-2]) == _shape(plain)
    assert all(r.kind != "end" and r.end_reason is None for r in plain)
    n = len(segs)
    lengths = _lengths(sent)
    # The server's FIN is segs[n - 3], frame n - 2; the client's is segs[n - 2], frame
    # n - 1 (frames count from 1, at T0 + 1000 ns per segment).  Each end sits at its
    # direction's length; the port-80 connection is not MQTT and gets none.
    assert _shape(records[-2:]) == [
        ("end", "s2c", lengths[("t.pcapng#1", "s2c")], 0, T0 + (n - 3) * 1000, n - 2, "fin"),
        ("end", "c2s", lengths[("t.pcapng#1", "c2s")], 0, T0 + (n - 2) * 1000, n - 1, "fin"),
    ]
    server_end, client_end = records[-2:]
    assert (server_end.src_ip, server_end.src_port, server_end.dst_ip,
            server_end.dst_port) == (*SERVER, *CLIENT)
    assert (client_end.src_ip, client_end.src_port, client_end.dst_ip,
            client_end.dst_port) == (*CLIENT, *SERVER)
    assert {(r.connection_id, r.client_id, r.protocol_version) for r in records[-2:]} == {
        ("t.pcapng#1", "client", 4)}
    check_accounting(records, lengths)


def test_stream_ends_rst_after_a_cut_packet(codec: ModuleType) -> None:
    mw = codec
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all([(0, mw.Connect("r", protocol_version=4)), (1, mw.ConnAck())], 4)
    # PUBLISH "t" b"x" * 10 (3.1.1, QoS 0): 2 header + 3 topic + 10 payload = 15 bytes,
    # of which the client sends 6 before the server resets the connection.
    publish = mw.Publish("t", b"x" * 10).encode(4)
    assert len(publish) == 15
    segs = (flow.open() + segments_for(flow, sent) + flow.send(0, publish[:6])
            + [flow.reset(1)])
    records = read(write(frames_for(flow, segs)), codec, stream_ends=True)
    c2s, s2c = len(sent[0].wire), len(sent[1].wire)
    n = len(segs)
    rst = (T0 + (n - 1) * 1000, n)  # the RST is the last segment
    # A RST ends both directions at once: the client's first (the connection's
    # initiator), after the error record of its cut packet.
    assert _shape(records[-3:]) == [
        ("error", "c2s", c2s, 6, *rst, None),
        ("end", "c2s", c2s + 6, 0, *rst, "rst"),
        ("end", "s2c", s2c, 0, *rst, "rst"),
    ]
    assert "(rst)" in records[-3].error
    assert [r.kind for r in records[:-3]] == ["packet", "packet"]
    check_accounting(records, {("t.pcapng#1", "c2s"): c2s + 6, ("t.pcapng#1", "s2c"): s2c})


def test_stream_ends_at_the_end_of_the_capture(codec: ModuleType) -> None:
    mw = codec
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all([(0, mw.Connect("e", protocol_version=5)), (1, mw.ConnAck())], 5)
    publish = mw.Publish("t", b"x" * 10).encode(5)
    segs = flow.open() + segments_for(flow, sent) + flow.send(0, publish[:4])
    # The capture's last frame is a UDP datagram: the ends take its time.
    src, dst = bytes([10, 9, 9, 1]), bytes([10, 9, 9, 2])
    last = Frame(T0 + 10**9, ipv4_packet(src, dst, bytes(12), proto=17))
    records = read(write([*frames_for(flow, segs), last]), codec, stream_ends=True)
    c2s, s2c = len(sent[0].wire), len(sent[1].wire)
    assert [(r.kind, r.direction, r.stream_offset, r.length, r.end_reason)
            for r in records[-3:]] == [
        ("error", "c2s", c2s, 4, None),  # the PUBLISH, cut by the end of the capture
        ("end", "c2s", c2s + 4, 0, "eof"),
        ("end", "s2c", s2c, 0, "eof"),
    ]
    assert "(eof)" in records[-3].error
    assert [r.ts for r in records[-3:]] == [T0 + 10**9] * 3
    check_accounting(records, {("t.pcapng#1", "c2s"): c2s + 4, ("t.pcapng#1", "s2c"): s2c})


def _valid_capture(codec: ModuleType) -> bytes:
    flow = TcpFlow(CLIENT, SERVER)
    sent = encode_all(conversation(codec, 5), 5)
    return write(frames_for(flow, flow.open() + segments_for(flow, sent, sizes=[40])
                            + flow.close()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_captures_never_crash(codec: ModuleType, data: st.DataObject) -> None:
    """Random byte changes, cuts and insertions anywhere in a valid capture (file
    headers, lengths, IP/TCP headers, MQTT bytes): read_capture ends, without raising,
    whatever it decodes is still accounted byte for byte, and each direction has at most
    one end, after its other records, where they stop."""
    raw = bytearray(_valid_capture(codec))
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["set", "cut", "insert"]))
        if action == "set":
            raw[pos] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del raw[pos : pos + data.draw(st.integers(1, 64))]
        else:
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
        if not raw:
            raw = bytearray(b"\0")
    records = read(bytes(raw), codec, stream_ends=True)
    assert all(r.kind != "capture_error" for r in records[:-1])
    check_accounting(records)
    by_direction: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        if r.connection_id is not None:
            by_direction.setdefault((r.connection_id, r.direction), []).append(r)
    for mine in by_direction.values():
        ends = [r for r in mine if r.kind == "end"]
        assert len(ends) <= 1
        if ends:
            assert mine[-1] is ends[0]
            assert ends[0].stream_offset == sum(r.length for r in mine[:-1])


def test_a_record_pickles_and_a_pickle_naming_its_old_module_loads() -> None:
    """Record lives in record.py; a pickle made when it lived in mqtt_streams.py (which
    names it ``mqttwire.capture.mqtt_streams.Record``) still loads, as the same class."""
    import dataclasses
    import pickle

    from mqttwire.capture import Record

    rec = Record("packet", "c.pcap", ts=T0, topic="a/b", topic_filters=["a/#"], qos=1)
    fields = dataclasses.astuple(rec)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert dataclasses.astuple(pickle.loads(pickle.dumps(rec, protocol))) == fields
    # Protocol 2 names the class as text: its module is rewritten to the old one.
    data = pickle.dumps(rec, 2)
    assert b"cmqttwire.capture.record\nRecord\n" in data
    old = pickle.loads(data.replace(b"mqttwire.capture.record\n",
                                    b"mqttwire.capture.mqtt_streams\n"))
    assert type(old) is Record and dataclasses.astuple(old) == fields
