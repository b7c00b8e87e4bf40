"""Link layers, IPv4/IPv6 (mqttwire.capture.link) and TCP reassembly (.tcp)."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from mqttwire.capture import IPFragment, TcpReassembler, TcpSegment, parse_frame
from mqttwire.capture.link import (
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from mqttwire.capture.writers import (
    Segment,
    TcpFlow,
    ipv4_fragments,
    ipv4_packet,
    link_frame,
    tcp_header,
)

V4 = (("10.0.0.1", 40000), ("10.0.0.2", 1883))
V6 = (("2001:db8::1", 40000), ("2001:db8::2", 1883))


@pytest.mark.parametrize("linktype", [LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL,
                                      LINKTYPE_LINUX_SLL2, LINKTYPE_NULL, LINKTYPE_LOOP,
                                      LINKTYPE_RAW])
@pytest.mark.parametrize("ends", [V4, V6], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_link_types(linktype: int, ends: Any, byteorder: str) -> None:
    flow = TcpFlow(*ends, isn_client=7)
    seg = flow.send(0, b"hello")[0]
    frame = link_frame(linktype, flow.ip(seg), byteorder=byteorder)
    got = parse_frame(linktype, memoryview(frame))
    assert isinstance(got, TcpSegment)
    assert (got.sport, got.dport, got.seq, bytes(got.payload), got.wire_len) == (
        40000, 1883, 7, b"hello", 5)
    assert len(got.src) == (4 if ends is V4 else 16)


def test_raw_ipv4_and_ipv6_link_types() -> None:
    for ends, linktype in ((V4, LINKTYPE_IPV4), (V6, LINKTYPE_IPV6)):
        flow = TcpFlow(*ends)
        got = parse_frame(linktype, memoryview(flow.ip(flow.send(0, b"x")[0])))
        assert isinstance(got, TcpSegment) and bytes(got.payload) == b"x"


@pytest.mark.parametrize("tags", [(5,), (100, 200)], ids=["802.1Q", "QinQ"])
def test_vlan_tags(tags: tuple[int, ...]) -> None:
    flow = TcpFlow(*V4)
    frame = link_frame(LINKTYPE_ETHERNET, flow.ip(flow.send(0, b"abc")[0]), vlan=tags)
    # 14-byte Ethernet header + 4 bytes per tag before the IP header.
    assert frame[14 + 4 * len(tags)] == 0x45
    got = parse_frame(LINKTYPE_ETHERNET, memoryview(frame))
    assert isinstance(got, TcpSegment) and bytes(got.payload) == b"abc"


def test_ethernet_padding_is_not_payload() -> None:
    # A 1-byte segment: 14 + 20 + 20 + 1 = 55 bytes, padded to the 60-byte minimum frame.
    flow = TcpFlow(*V4)
    frame = link_frame(LINKTYPE_ETHERNET, flow.ip(flow.send(0, b"Z")[0])) + b"\0" * 5
    got = parse_frame(LINKTYPE_ETHERNET, memoryview(frame))
    assert isinstance(got, TcpSegment) and bytes(got.payload) == b"Z"


def test_snaplen_cut_reports_wire_length() -> None:
    flow = TcpFlow(*V4)
    ip = flow.ip(flow.send(0, b"0123456789")[0])
    got = parse_frame(LINKTYPE_RAW, memoryview(ip[:45]))  # 20 IP + 20 TCP + 5 payload bytes
    assert isinstance(got, TcpSegment)
    assert (bytes(got.payload), got.wire_len) == (b"01234", 10)


def test_ipv4_fragments_are_reported() -> None:
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    segment = tcp_header(src, dst, 40000, 1883, 1, 0, 0x18, b"x" * 40)  # 60 bytes
    first, second = ipv4_fragments(src, dst, segment, 32, ident=0x1234)
    a = parse_frame(LINKTYPE_RAW, memoryview(first))
    b = parse_frame(LINKTYPE_RAW, memoryview(second))
    assert a == IPFragment(src, dst, 6, 0x1234, 0, True, 40000, 1883, 32)
    assert b == IPFragment(src, dst, 6, 0x1234, 32, False, None, None, 28)


def test_ipv6_fragment_header_is_reported() -> None:
    src, dst = bytes(15) + b"\1", bytes(15) + b"\2"
    tcp = tcp_header(src, dst, 40000, 1883, 1, 0, 0x18, b"y" * 8)
    # Fragment header: next header 6, reserved, offset 0 with M=1, identification 9.
    frag = struct.pack("!BBHI", 6, 0, 1, 9) + tcp
    ip = struct.pack("!IHBB", 6 << 28, len(frag), 44, 64) + src + dst + frag
    got = parse_frame(LINKTYPE_RAW, memoryview(ip))
    assert got == IPFragment(src, dst, 6, 9, 0, True, 40000, 1883, len(tcp))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x45" + bytes(10),  # IPv4 header cut short
        ipv4_packet(bytes(4), bytes(4), bytes(8), proto=17),  # UDP
        ipv4_packet(bytes(4), bytes(4), bytes(10)),  # TCP header cut short
        ipv4_packet(bytes(4), bytes(4), bytes(40), total_length=10),  # length < header
        b"\x75" + bytes(40),  # IP version 7
    ],
)
def test_not_tcp_or_broken_gives_none(data: bytes) -> None:
    assert parse_frame(LINKTYPE_RAW, memoryview(data)) is None
    assert parse_frame(9999, memoryview(data)) is None  # unknown link type


# ---------------------------------------------------------------------------------------
# TCP reassembly


class Recorder:
    """A handler that records what the reassembler reports."""

    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.events: list[tuple[Any, ...]] = []
        self.data: dict[tuple[int, int], bytearray] = {}
        self.gap_ts: list[int] = []

    def on_connection(self, conn: Any) -> bool:
        self.events.append(("conn", conn.index, conn.syn_seen))
        return self.accept

    def on_data(self, stream: Any, offset: int, data: Any, ts: int, boundary: bool) -> None:
        buf = self.data.setdefault((stream.conn.index, stream.side), bytearray())
        assert offset == len(buf)  # in order, without holes (gaps are filled below)
        buf += data
        self.events.append(("data", stream.conn.index, stream.side, offset, bytes(data), ts,
                            boundary))

    def on_gap(self, stream: Any, offset: int, length: int, ts: int) -> None:
        buf = self.data.setdefault((stream.conn.index, stream.side), bytearray())
        assert offset == len(buf)
        buf += b"?" * length
        self.events.append(("gap", stream.conn.index, stream.side, offset, length))
        self.gap_ts.append(ts)

    def on_end(self, stream: Any, ts: int, reason: str) -> None:
        self.events.append(("end", stream.conn.index, stream.side, reason))

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == kind]


def _run(flow: TcpFlow, segments: list[Segment], **kwargs: Any) -> Recorder:
    rec = Recorder()
    r = TcpReassembler(rec, **kwargs)
    for i, seg in enumerate(segments):
        got = parse_frame(LINKTYPE_RAW, memoryview(flow.ip(seg)))
        assert isinstance(got, TcpSegment)
        r.add(1000 + i, got)
    r.flush(99999)
    return rec


DATA = bytes(range(256)) * 4  # 1024 distinct-ish bytes


@pytest.mark.parametrize("isn", [1000, 0xFFFFFF00, 0xFFFFFFFF], ids=["plain", "wraps", "syn-wraps"])
def test_in_order_and_wraparound(isn: int) -> None:
    # ISN 0xFFFFFF00: the data passes sequence number 2**32 after 255 bytes;
    # ISN 0xFFFFFFFF: the SYN itself takes the last number, data starts at seq 0.
    flow = TcpFlow(*V4, isn_client=isn)
    segs = flow.open() + flow.send(0, DATA, sizes=[100, 300]) + flow.close()
    rec = _run(flow, segs)
    assert rec.data[(1, 0)] == DATA
    assert rec.of("end") == [("end", 1, 0, "fin"), ("end", 1, 1, "fin")]
    assert rec.of("conn") == [("conn", 1, True)]


def test_out_of_order_retransmission_and_overlap() -> None:
    flow = TcpFlow(*V4, isn_client=0xFFFFFFF0)
    opening = flow.open()
    s = flow.send(0, DATA, sizes=[100])  # 11 segments
    # Overlap: a segment covering the end of s[1] and the start of s[2].
    overlap = Segment(0, s[1].seq + 50, s[1].ack, 0x18, DATA[150:250])
    order = [s[0], s[2], s[1], s[1], overlap, s[4], s[3], s[5], s[5], s[7], s[6], s[8],
             s[10], s[9]]
    rec = _run(flow, opening + order + flow.close())
    assert rec.data[(1, 0)] == DATA
    assert rec.of("gap") == []
    # s[2] waited for s[1]; both are handed over when s[1] arrives (at its frame's time).
    data = rec.of("data")
    assert data[1][3:6] == (100, DATA[100:200], 1000 + 5)
    assert data[2][3:6] == (200, DATA[200:300], 1000 + 5)


def test_retransmission_with_partial_new_data_is_trimmed() -> None:
    flow = TcpFlow(*V4)
    opening = flow.open()
    s = flow.send(0, DATA[:300], sizes=[100])
    bigger = Segment(0, s[0].seq, s[0].ack, 0x18, DATA[:150])  # resends 100, adds 50
    rec = _run(flow, opening + [s[0], bigger, s[1], s[2]])
    assert rec.data[(1, 0)] == DATA[:300]
    trimmed = rec.of("data")[1]
    assert trimmed[3:5] == (100, DATA[100:150]) and trimmed[6] is False  # not a boundary


def test_lost_segment_found_by_ack() -> None:
    flow = TcpFlow(*V4)
    opening = flow.open()
    s = flow.send(0, DATA[:400], sizes=[100])
    ack = flow.ack(1)  # the server acknowledges all 400 bytes, s[1] included
    rec = _run(flow, opening + [s[0], s[2], s[3], ack] + flow.close())
    assert rec.of("gap") == [("gap", 1, 0, 100, 100)]
    assert rec.data[(1, 0)] == DATA[:100] + b"?" * 100 + DATA[200:400]
    # The gap is declared when the ACK arrives: segment index 3 (handshake) + 3 = 6, so
    # ts 1006; not at the FIN or the end of the capture.
    assert rec.gap_ts == [1006]


def test_lost_last_segment_found_at_fin_and_at_eof() -> None:
    flow = TcpFlow(*V4)
    opening = flow.open()
    s = flow.send(0, DATA[:300], sizes=[100])
    fin = flow.close()[0]  # the client's FIN, after all 300 bytes
    rec = _run(flow, opening + [s[0], s[2], fin])
    # Nothing acknowledged s[1]; the capture ends with the hole open: a gap at EOF.
    assert rec.of("gap") == [("gap", 1, 0, 100, 100)]
    assert rec.data[(1, 0)] == DATA[:100] + b"?" * 100 + DATA[200:300]


def test_pending_data_is_capped() -> None:
    flow = TcpFlow(*V4)
    opening = flow.open()
    s = flow.send(0, DATA, sizes=[100])
    # s[0] is lost; 250 bytes may wait: when s[3] arrives 300 wait, so the hole goes.
    rec = _run(flow, opening + s[1:4], max_pending=250)
    # Declared when s[3] arrives (index 3 + 2 = 5), not at the flush (ts 99999).
    assert rec.of("gap") == [("gap", 1, 0, 0, 100)]
    assert rec.gap_ts == [1005]


def test_rst_ends_both_directions_and_tuple_reuse() -> None:
    flow = TcpFlow(*V4)
    first = flow.open() + flow.send(0, b"abc") + [flow.reset(1)]
    again = TcpFlow(*V4, isn_client=77_000)  # same 4-tuple, new ISNs
    second = again.open() + again.send(0, b"xyz") + again.close()
    rec = Recorder()
    r = TcpReassembler(rec)
    late = flow.send(0, b"late")  # after the RST: ignored
    for i, (f, seg) in enumerate([(flow, s) for s in first] + [(flow, s) for s in late]
                                 + [(again, s) for s in second]):
        got = parse_frame(LINKTYPE_RAW, memoryview(f.ip(seg)))
        assert isinstance(got, TcpSegment)
        r.add(i, got)
    r.flush(0)
    assert rec.data[(1, 0)] == b"abc" and rec.data[(2, 0)] == b"xyz"
    assert ("end", 1, 0, "rst") in rec.events and ("end", 1, 1, "rst") in rec.events
    assert rec.of("conn") == [("conn", 1, True), ("conn", 2, True)]


def test_midstream_start_and_ignored_connections() -> None:
    flow = TcpFlow(*V4, isn_client=5000)
    flow.open()  # not captured
    rec = _run(flow, flow.send(0, b"hello") + flow.send(1, b"hi"))
    assert rec.of("conn") == [("conn", 1, False)]
    assert rec.data[(1, 0)] == b"hello" and rec.data[(1, 1)] == b"hi"
    ignoring = Recorder(accept=False)
    r = TcpReassembler(ignoring)
    for seg in flow.send(0, b"more"):
        got = parse_frame(LINKTYPE_RAW, memoryview(flow.ip(seg)))
        assert isinstance(got, TcpSegment)
        r.add(0, got)
    assert ignoring.of("data") == []


def test_snaplen_cut_segment_is_a_gap() -> None:
    flow = TcpFlow(*V4)
    opening = flow.open()
    s = flow.send(0, DATA[:200], sizes=[100])
    rec = Recorder()
    r = TcpReassembler(rec)
    for seg in opening:
        r.add(0, parse_frame(LINKTYPE_RAW, memoryview(flow.ip(seg))))  # type: ignore[arg-type]
    cut = parse_frame(LINKTYPE_RAW, memoryview(flow.ip(s[0])[: 40 + 60]))  # 60 of 100
    r.add(1, cut)  # type: ignore[arg-type]
    r.add(2, parse_frame(LINKTYPE_RAW, memoryview(flow.ip(s[1]))))  # type: ignore[arg-type]
    r.flush(3)
    assert rec.of("gap") == [("gap", 1, 0, 60, 40)]
    assert rec.data[(1, 0)] == DATA[:60] + b"?" * 40 + DATA[100:200]


def test_ack_of_unseen_data_does_not_wipe_the_stream() -> None:
    flow = TcpFlow(*V4)
    opening = flow.open()
    first = flow.send(0, DATA[:100])
    forged = flow.ack(1)
    forged.ack = (forged.ack + 1_000_000) & 0xFFFFFFFF  # acknowledges bytes never sent
    rest = flow.send(0, DATA[100:300])
    rec = _run(flow, opening + first + [forged] + rest + flow.close())
    assert rec.of("gap") == []
    assert rec.data[(1, 0)] == DATA[:300]
