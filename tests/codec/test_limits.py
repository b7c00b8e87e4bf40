"""Resource limits under attack: each hostile input gets a clear error (or, from the capture
reader, an error record), no allocation larger than the bytes really received, and the
process keeps working afterwards.

- a fixed header claiming 268,435,455 bytes followed by nothing;
- 1 MiB fed one byte at a time;
- 100,000 tiny packets in one chunk;
- MQTT 5.0 user properties repeated up to max_packet_size;
- pcap files whose record lengths lie;
- pcapng files with an unknown block type, and with a block length that overruns the file.
"""

from __future__ import annotations

import functools
import io
import struct
import sys
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from mqttwire import IncompletePacket, MalformedPacket, PacketTooLarge, _pure
from mqttwire.capture import read_capture
from mqttwire.capture.writers import Frame, TcpFlow, pcapng_block, write_pcap, write_pcapng

MiB = 1 << 20


def peak_allocated(action: Callable[[], Any]) -> int:
    """The peak of memory allocated through Python's allocators (objects, PyMem: what
    both implementations allocate with) while ``action`` runs, above the start."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        action()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def max_rss() -> int:
    """The process's peak resident set size so far, in bytes; 0 where it is not measured
    (only Linux is: Windows has no ``resource``, and macOS counts it differently)."""
    if sys.platform != "linux":
        return 0
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def still_works(codec: ModuleType) -> None:
    """The codec decodes after the attack: PUBACK 40 02 00 07 (type 4 << 4 = 0x40,
    Remaining Length 2, packet id 7)."""
    assert codec.decode(b"\x40\x02\x00\x07", version=5) == codec.PubAck(7)
    assert codec.StreamDecoder(5).feed(b"\xc0\x00") == [codec.PingReq()]


# ---------------------------------------------------------------------------------------
# The codec

# PUBLISH QoS 0 (0x30 == 3 << 4) with Remaining Length FF FF FF 7F:
# 127 + 127*128 + 127*128**2 + 127*128**3 = 268,435,455, the largest there is
# (MQTT 5.0 §1.5.5); the whole packet would be 1 + 4 + 268,435,455 = 268,435,460 bytes.
HUGE_HEADER = b"\x30\xff\xff\xff\x7f"
HUGE_TOTAL = 268_435_460


def test_huge_claimed_length_decode(codec: ModuleType) -> None:
    """decode_from waits for the bytes (None) and decode says they are missing, without
    allocating for what the header claims."""
    before = max_rss()

    def attack() -> None:
        assert codec.decode_from(HUGE_HEADER, version=5) is None
        with pytest.raises(IncompletePacket, match="268435460 bytes needed, 5 given"):
            codec.decode(HUGE_HEADER, version=5)

    assert peak_allocated(attack) < 64 * 1024
    assert max_rss() - before < 64 * MiB  # far below the 256 MiB claimed
    still_works(codec)


def test_huge_claimed_length_refused_from_the_header(codec: ModuleType) -> None:
    """With max_packet_size, the five header bytes are enough to refuse the packet
    (PacketTooLarge 0x95, offset 0), and the decoder stays failed."""
    dec = codec.StreamDecoder(5, max_packet_size=1024)
    with pytest.raises(PacketTooLarge) as info:
        dec.feed(HUGE_HEADER)
    assert info.value.reason_code == 0x95 and info.value.offset == 0
    assert str(HUGE_TOTAL) in str(info.value)
    with pytest.raises(PacketTooLarge):
        dec.feed(b"\xc0\x00")
    still_works(codec)


def _header_then_64k(dec: Any) -> None:
    assert dec.feed(HUGE_HEADER) == []
    assert dec.buffered == 5
    assert dec.feed(bytes(64 * 1024)) == []
    assert dec.buffered == 5 + 64 * 1024


def test_huge_claimed_length_buffers_only_what_arrived(codec: ModuleType) -> None:
    """Without a limit (or with one just big enough), the decoder holds the bytes that
    arrived, not the 256 MiB claimed: 5 header bytes, then 5 + 64 KiB."""
    for limit in (None, HUGE_TOTAL):
        dec = codec.StreamDecoder(5, max_packet_size=limit)
        assert peak_allocated(functools.partial(_header_then_64k, dec)) < 2 * MiB
    still_works(codec)


def _stream_of(total: int) -> tuple[bytes, int]:
    """About ``total`` bytes of MQTT 5.0 packets: one 512 KiB PUBLISH, then PUBACKs and
    PINGREQs.  (bytes, number of packets)."""
    big = _pure.Publish("big", bytes(512 * 1024), qos=1, packet_id=1).encode(5)
    # PUBACK 40 02 00 01 (4 bytes) and PINGREQ c0 00 (2 bytes): 6 bytes a pair.
    pairs = (total - len(big)) // 6
    return big + b"\x40\x02\x00\x01\xc0\x00" * pairs, 1 + 2 * pairs


def test_one_byte_at_a_time_for_a_mebibyte(codec: ModuleType) -> None:
    """1 MiB fed one byte per feed(): every packet comes out, in order, and the decoder
    never holds more than the packet in progress."""
    data, count = _stream_of(MiB)
    dec = codec.StreamDecoder(5)
    feed = dec.feed
    out: list[Any] = []
    most = 0
    for i in range(len(data)):
        out += feed(data[i : i + 1])
        if i & 0xFFF == 0:
            most = max(most, dec.buffered)
    assert len(out) == count and dec.buffered == 0
    assert out[0] == codec.Publish("big", bytes(512 * 1024), qos=1, packet_id=1)
    assert out[1] == codec.PubAck(1) and out[-1] == codec.PingReq()
    assert most < 512 * 1024 + 8
    still_works(codec)


def test_100000_tiny_packets_in_one_chunk(codec: ModuleType) -> None:
    """100,000 packets of 2 and 4 bytes in one 300,000-byte chunk: all decoded, by the
    stream decoder and by a decode_from loop."""
    data = b"\x40\x02\x00\x01\xc0\x00" * 50_000  # PUBACK(1), PINGREQ: 6 bytes a pair
    packets = codec.StreamDecoder(5).feed(data)
    assert len(packets) == 100_000
    assert packets[0] == codec.PubAck(1) and packets[1] == codec.PingReq()
    assert packets[-2] == codec.PubAck(1) and packets[-1] == codec.PingReq()
    pos, n = 0, 0
    while (found := codec.decode_from(data, pos, version=5)) is not None:
        pos = found[1]
        n += 1
    assert n == 100_000 and pos == len(data)
    still_works(codec)


# A PUBLISH of exactly 1 MiB that is nothing but empty user properties.  Each user property
# is 26 00 00 00 00 (identifier 0x26, empty key, empty value): 5 bytes.
#   packet = 1 (first byte) + 3 (Remaining Length < 2,097,152) + RL  = 1,048,576
#   -> RL = 1,048,572 = 3 (topic "t": 00 01 74) + 3 (property length) + 5*N + payload
#   -> 5*N + payload = 1,048,566: N = 209,713 (1,048,565 bytes) and a 1-byte payload;
#   property length 1,048,565 < 2,097,152 takes 3 bytes, as assumed.
USER_PROPERTIES = 209_713


def _user_property_flood() -> bytes:
    properties = b"\x26\x00\x00\x00\x00" * USER_PROPERTIES
    body = b"\x00\x01t" + _varint(len(properties)) + properties + b"!"
    packet = b"\x30" + _varint(len(body)) + body
    assert len(packet) == MiB
    return packet


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_user_properties_up_to_the_packet_limit(codec: ModuleType) -> None:
    """209,713 user properties filling a packet of exactly max_packet_size decode (all of
    them, in order); one byte of limit less refuses the packet from its header alone."""
    packet = _user_property_flood()
    [pkt] = codec.StreamDecoder(5, max_packet_size=MiB).feed(packet)
    assert pkt.topic == "t" and pkt.payload == b"!"
    assert pkt.properties.user_properties == [("", "")] * USER_PROPERTIES
    dec = codec.StreamDecoder(5, max_packet_size=MiB - 1)
    with pytest.raises(PacketTooLarge) as info:
        dec.feed(packet[:4])  # the fixed header: 1 byte + 3 of Remaining Length
    assert info.value.offset == 0
    still_works(codec)


def test_user_properties_overrunning_the_packet(codec: ModuleType) -> None:
    """A property length claiming more than the packet holds is refused at once, without
    reading past the packet: PUBLISH 30 0a, topic 00 01 74, property length FF FF FF 7F
    (268,435,455), then 26 00 00; Remaining Length 10 = 3 + 4 + 3, so 3 bytes are left
    for the claimed 268,435,455 (MalformedPacket, 0x81)."""
    data = b"\x30\x0a\x00\x01t\xff\xff\xff\x7f\x26\x00\x00"
    with pytest.raises(MalformedPacket) as info:
        codec.decode(data, version=5)
    assert info.value.reason_code == 0x81
    still_works(codec)


# ---------------------------------------------------------------------------------------
# The capture reader


def _session_frames() -> list[Frame]:
    """A connection that sends a CONNECT and a PUBLISH: 2 MQTT records."""
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 1883))
    segs = flow.open()
    segs += flow.send(0, _pure.Connect("c", protocol_version=4).encode(4))
    segs += flow.send(0, _pure.Publish("t", b"x").encode(4))
    return [Frame(1_700_000_000_000_000_000 + i, flow.ip(s)) for i, s in enumerate(segs)]


def _pcap(frames: list[Frame]) -> bytes:
    buf = io.BytesIO()
    write_pcap(buf, frames)
    return buf.getvalue()


def _read(data: bytes) -> list[Any]:
    return list(read_capture(io.BytesIO(data), codec=_pure, name="t"))


def _good_capture_still_reads() -> None:
    assert [r.kind for r in _read(_pcap(_session_frames()))] == ["packet", "packet"]


# A classic pcap record header (little-endian, as capture.writers writes): ts_sec, ts_usec, caplen,
# orig_len, 16 bytes; the file header is 24 bytes.
RECORD = struct.Struct("<IIII")


@pytest.mark.parametrize(
    "caplen, message",
    [
        (0xFFFF_FFFF, "pcap record length 4294967295 is implausible"),
        (200_000_000, "pcap record claims 200000000 bytes but the file ends"),
        (1000, "pcap record claims 1000 bytes but the file ends"),
    ],
    ids=["beyond-max-frame", "200MB-claimed", "1000-claimed"],
)
def test_pcap_record_length_lies(caplen: int, message: str) -> None:
    """A last record claiming more bytes than the file holds: the records before it,
    then a capture_error record naming its offset, and no allocation of the claim."""
    good = _pcap(_session_frames())
    data = good + RECORD.pack(1, 0, caplen, caplen) + b"only ten b"
    records: list[Any] = []
    assert peak_allocated(lambda: records.extend(_read(data))) < 8 * MiB
    assert [r.kind for r in records] == ["packet", "packet", "capture_error"]
    assert message in records[-1].error
    assert records[-1].error_offset == len(good)
    _good_capture_still_reads()


def test_pcap_record_length_too_short() -> None:
    """A record whose caplen is shorter than its frame: the rest of the frame is read as
    the next record header, which is garbage.  Whatever comes out, it is records (the
    frames that parse, then a capture_error), never an exception."""
    frames = _session_frames()
    good = _pcap(frames)
    # Cut the first record's caplen (at byte 24 + 8) from its real length to 20.
    real = RECORD.unpack_from(good, 24)[2]
    bad = good[:32] + struct.pack("<I", 20) + good[36:]
    records = _read(bad)
    assert all(r.kind in ("packet", "error", "gap", "capture_error") for r in records)
    assert records and records[-1].kind == "capture_error"
    assert real > 20
    _good_capture_still_reads()


def test_pcap_orig_len_smaller_than_caplen() -> None:
    """orig_len (the length on the wire) below caplen is a lie the frames survive: the
    captured bytes are what is read."""
    good = bytearray(_pcap(_session_frames()))
    pos = 24
    while pos < len(good):
        caplen = RECORD.unpack_from(good, pos)[2]
        struct.pack_into("<I", good, pos + 12, 1)
        pos += 16 + caplen
    assert [r.kind for r in _read(bytes(good))] == ["packet", "packet"]


def _pcapng(extra: bytes) -> bytes:
    buf = io.BytesIO()
    write_pcapng(buf, _session_frames())
    return buf.getvalue() + extra


def test_pcapng_unknown_block_type_is_skipped() -> None:
    """An unknown block (type 0x0BADB10C, a 4-byte body: 12 + 4 = 16 bytes) between the
    interface and the packets is skipped; every packet is still read."""
    buf = io.BytesIO()
    write_pcapng(buf, _session_frames())
    data = buf.getvalue()
    # SHB (28 bytes: 12 + magic 4 + version 4 + section length 8) and IDB (20 bytes:
    # 12 + link type 2 + reserved 2 + snaplen 4) come first.
    head = 28 + 20
    unknown = pcapng_block(0x0BADB10C, b"\x01\x02\x03\x04")
    assert len(unknown) == 16
    records = _read(data[:head] + unknown + data[head:])
    assert [r.kind for r in records] == ["packet", "packet"]
    # And many of them, at the end: still nothing but the packets.
    assert [r.kind for r in _read(_pcapng(unknown * 10_000))] == ["packet", "packet"]


@pytest.mark.parametrize("claimed", [1_000_000, 0x0FFF_FFFC], ids=["1MB", "256MB"])
def test_pcapng_block_length_overruns_the_file(claimed: int) -> None:
    """A last block whose length runs past the end of the file: the records before it,
    then a capture_error record at the block's offset; no allocation of the claim."""
    good = _pcapng(b"")
    bad = good + struct.pack("<II", 6, claimed) + bytes(40)
    records: list[Any] = []
    assert peak_allocated(lambda: records.extend(_read(bad))) < 8 * MiB
    assert [r.kind for r in records] == ["packet", "packet", "capture_error"]
    assert f"pcapng block claims {claimed} bytes but the file ends" in records[-1].error
    assert records[-1].error_offset == len(good)
    _good_capture_still_reads()

