"""pcap and pcapng readers (mqttwire.capture.pcap): formats, byte orders, timestamps,
block types, and corrupt or truncated files."""

from __future__ import annotations

import io
import struct
import tracemalloc

import pytest

from mqttwire.capture import CaptureFormatError, iter_frames
from mqttwire.capture.link import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from mqttwire.capture.writers import (
    Frame,
    link_frame,
    pcapng_block,
    write_pcap,
    write_pcapng,
)

T0 = 1_700_000_000_123_456_789  # ns; its microseconds are ...123456, its ns part 789


def _frames(n: int = 3) -> list[Frame]:
    # IP bytes need not be valid for the file layer; vary lengths (incl. odd ones).
    return [Frame(T0 + i * 1_000_001, bytes([0x45]) + bytes(range(i + 20)), interface=i % 2)
            for i in range(n)]


@pytest.mark.parametrize("byteorder", ["<", ">"])
@pytest.mark.parametrize("nanoseconds", [False, True])
def test_pcap_byte_orders_and_resolutions(byteorder: str, nanoseconds: bool) -> None:
    frames = _frames()
    buf = io.BytesIO()
    write_pcap(buf, frames, linktype=LINKTYPE_RAW, byteorder=byteorder, nanoseconds=nanoseconds)
    raw = buf.getvalue()
    # The magic as written: a1b2c3d4 (us) or a1b23c4d (ns), in the file's byte order.
    magic = bytes.fromhex("a1b23c4d" if nanoseconds else "a1b2c3d4")
    assert raw[:4] == (magic if byteorder == ">" else magic[::-1])
    got = list(iter_frames(io.BytesIO(raw), "x.pcap"))
    assert [f.number for f in got] == [1, 2, 3]
    # Record offsets: 24-byte file header, then 16-byte record headers + data.
    assert got[0].offset == 24
    assert got[1].offset == 24 + 16 + len(frames[0].ip)
    for frame, sent in zip(got, frames):
        assert frame.linktype == LINKTYPE_RAW
        assert bytes(frame.data) == sent.ip
        assert frame.orig_len == len(sent.ip)
        # Microsecond files lose the last three digits: ...123456789 -> ...123456000.
        expected = sent.ts if nanoseconds else sent.ts // 1000 * 1000
        assert frame.ts == expected


@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_pcapng_interfaces_resolutions_and_unknown_blocks(byteorder: str) -> None:
    frames = _frames(4)
    buf = io.BytesIO()
    # Interface 0: Ethernet, default microseconds; interface 1: SLL, nanoseconds (9).
    write_pcapng(buf, frames, linktypes=[LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL],
                 byteorder=byteorder, tsresol=[6, 9])
    raw = buf.getvalue()
    # Insert an unknown block (type 0x0BAD, 5 bytes of body padded to 8) after the IDBs:
    # it must be skipped by its length.
    shb_len = struct.unpack_from(byteorder + "I", raw, 4)[0]
    idb1 = struct.unpack_from(byteorder + "I", raw, shb_len + 4)[0]
    idb2 = struct.unpack_from(byteorder + "I", raw, shb_len + idb1 + 4)[0]
    cut = shb_len + idb1 + idb2
    raw = raw[:cut] + pcapng_block(0x0BAD, b"hello", byteorder) + raw[cut:]
    got = list(iter_frames(io.BytesIO(raw), "x.pcapng"))
    assert len(got) == 4
    for frame, sent in zip(got, frames):
        assert frame.interface == sent.interface
        if sent.interface == 0:
            assert frame.linktype == LINKTYPE_ETHERNET
            assert frame.ts == sent.ts // 1000 * 1000
        else:
            assert frame.linktype == LINKTYPE_LINUX_SLL
            assert frame.ts == sent.ts
        assert bytes(frame.data) == link_frame(frame.linktype, sent.ip)


def test_pcapng_power_of_two_resolution_and_offset() -> None:
    # if_tsresol 0x80|10: units of 2**-10 s; if_tsoffset 100 s.  A timestamp of 3 * 1024 + 512
    # units is 3.5 s, +100 s offset = 103.5 s = 103_500_000_000 ns.
    o = "<"
    options = (struct.pack(o + "HHB3x", 9, 1, 0x8A) + struct.pack(o + "HHq", 14, 8, 100)
               + struct.pack(o + "HH", 0, 0))
    units = 3 * 1024 + 512
    data = link_frame(LINKTYPE_RAW, b"\x45" + bytes(19))
    raw = (pcapng_block(0x0A0D0D0A, struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1))
           + pcapng_block(1, struct.pack(o + "HHI", LINKTYPE_RAW, 0, 0) + options)
           + pcapng_block(6, struct.pack(o + "IIIII", 0, units >> 32, units & 0xFFFFFFFF,
                                         len(data), len(data)) + data))
    (frame,) = iter_frames(io.BytesIO(raw))
    assert frame.ts == 103_500_000_000


def test_pcapng_simple_packet_blocks_and_two_sections() -> None:
    frames = _frames(2)
    for f in frames:
        f.interface = 0
    first = io.BytesIO()
    write_pcapng(first, frames, linktypes=[LINKTYPE_NULL], simple=True)
    second = io.BytesIO()
    # A second section in the other byte order, with its own interface numbering.
    write_pcapng(second, frames[:1], linktypes=[LINKTYPE_LINUX_SLL2], byteorder=">")
    got = list(iter_frames(io.BytesIO(first.getvalue() + second.getvalue())))
    assert [f.linktype for f in got] == [LINKTYPE_NULL, LINKTYPE_NULL, LINKTYPE_LINUX_SLL2]
    assert got[0].ts == 0  # a Simple Packet Block has no timestamp
    assert bytes(got[1].data) == link_frame(LINKTYPE_NULL, frames[1].ip)
    assert bytes(got[2].data) == link_frame(LINKTYPE_LINUX_SLL2, frames[0].ip)
    assert got[2].ts == frames[0].ts // 1000 * 1000


def test_reads_in_chunks_across_boundaries() -> None:
    # 3000 frames of ~700 bytes: > 2 MB, so records straddle the reader's 1 MiB chunks.
    frames = [Frame(T0 + i, bytes([0x45]) + bytes([i % 256]) * (600 + i % 200))
              for i in range(3000)]
    buf = io.BytesIO()
    write_pcap(buf, frames, linktype=LINKTYPE_RAW, nanoseconds=True)
    got = list(iter_frames(io.BytesIO(buf.getvalue())))
    assert len(got) == 3000
    assert all(bytes(g.data) == f.ip for g, f in zip(got, frames))


# ---------------------------------------------------------------------------------------
# Hostile files


def _pcap(n: int = 2) -> bytes:
    buf = io.BytesIO()
    write_pcap(buf, [Frame(T0, b"\x45" + bytes(39)) for _ in range(n)], linktype=LINKTYPE_RAW)
    return buf.getvalue()


def _errors(raw: bytes, name: str = "bad.pcap") -> tuple[int, CaptureFormatError]:
    frames = 0
    with pytest.raises(CaptureFormatError) as info:
        for _ in iter_frames(io.BytesIO(raw), name):
            frames += 1
    assert name in str(info.value)
    assert f"at offset {info.value.offset}" in str(info.value)
    return frames, info.value


def test_pcap_record_length_lies() -> None:
    raw = bytearray(_pcap(2))
    # Second record's header starts at 24 + 16 + 40 = 80; its caplen field is at 80 + 8.
    struct.pack_into("<I", raw, 88, 1000)  # claims 1000 bytes, 40 are there
    frames, err = _errors(bytes(raw))
    assert frames == 1
    assert err.offset == 80
    assert "claims 1000 bytes" in str(err)


def test_pcap_huge_length_is_not_allocated() -> None:
    raw = bytearray(_pcap(1))
    struct.pack_into("<I", raw, 24 + 8, 0x0FFFFFFF)  # just under MAX_FRAME: 256 MiB claimed
    tracemalloc.start()
    try:
        frames, err = _errors(bytes(raw))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (frames, err.offset) == (0, 24)
    assert peak < 8 << 20  # the file is 80 bytes: no 256 MiB buffer was made
    struct.pack_into("<I", raw, 24 + 8, 0xFFFFFFFF)
    _, err = _errors(bytes(raw))
    assert "implausible" in str(err)


@pytest.mark.parametrize("cut", [10, 30, 24 + 16 + 39])
def test_pcap_truncated(cut: int) -> None:
    # 10: inside the file header; 30: inside the first record header; 79: one byte
    # short of the end of the first record's data.
    frames, err = _errors(_pcap(1)[:cut])
    assert frames == 0
    assert err.offset == (0 if cut < 24 else 24)


@pytest.mark.parametrize("raw", [b"", b"\x00\x01", b"GET / HTTP/1.1\r\n\r\n", bytes(100)])
def test_not_a_capture(raw: bytes) -> None:
    frames, err = _errors(raw)
    assert frames == 0 and err.offset == 0


def _pcapng(n: int = 2) -> bytes:
    buf = io.BytesIO()
    write_pcapng(buf, [Frame(T0, b"\x45" + bytes(39)) for _ in range(n)], linktypes=[LINKTYPE_RAW])
    return buf.getvalue()


# Layout of _pcapng(): SHB 28 bytes (12 + 16 body), IDB 20 bytes (12 + 8), then EPBs of
# 12 + 20 + 40 = 72 bytes each: the first at 48, the second at 120.


def test_pcapng_block_length_overruns_file() -> None:
    raw = bytearray(_pcapng(2))
    struct.pack_into("<I", raw, 120 + 4, 4000)  # second EPB claims 4000 bytes
    frames, err = _errors(bytes(raw), "bad.pcapng")
    assert (frames, err.offset) == (1, 120)
    assert "claims 4000 bytes" in str(err)


@pytest.mark.parametrize(
    "total, words",
    [(70, "invalid"), (8, "invalid"), (76, "trailer"), (0x7FFFFFFC, "implausible")],
)
def test_pcapng_bad_block_lengths(total: int, words: str) -> None:
    raw = bytearray(_pcapng(2) + _pcapng(1)[48:])  # three EPBs, so 76 fits in the file
    struct.pack_into("<I", raw, 48 + 4, total)
    frames, err = _errors(bytes(raw), "bad.pcapng")
    assert (frames, err.offset) == (0, 48)
    assert words in str(err)


def test_pcapng_packet_overruns_its_block() -> None:
    raw = bytearray(_pcapng(1))
    struct.pack_into("<I", raw, 48 + 8 + 12, 41)  # caplen 41 in a block with room for 40
    frames, err = _errors(bytes(raw), "bad.pcapng")
    assert (frames, err.offset) == (0, 48)


def test_pcapng_undefined_interface_and_truncation() -> None:
    raw = bytearray(_pcapng(1))
    struct.pack_into("<I", raw, 48 + 8, 3)  # interface 3 of 1
    _, err = _errors(bytes(raw), "bad.pcapng")
    assert "undefined interface 3" in str(err)
    frames, err = _errors(_pcapng(2)[:-5], "bad.pcapng")
    assert (frames, err.offset) == (1, 120)
