"""Reading one byte range of a capture (mqttwire.capture.ranges): the ranges of a file,
read one by one and put together, are exactly the frames the whole-file reader gives, and
whenever a range's resynchronisation is fooled (frames that carry capture files, late
interface or section blocks, truncated or non-conforming files) the chain check says so.

Every range's ``sync`` and ``next`` are also checked against the record and block
offsets walked here independently, by the length fields alone.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqttwire.capture import pcap
from mqttwire.capture.link import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_RAW
from mqttwire.capture.ranges import (
    CHAIN,
    RangeRead,
    chain_problem,
    check_chain,
    plan_ranges,
    read_range,
)
from mqttwire.capture.writers import Frame, TcpFlow, pcapng_block, write_pcap, write_pcapng

T0 = 1_700_000_000_123_456_789  # ns
NAME = "split-test.cap"
SHB_MAGIC = b"\x0a\x0d\x0d\x0a"

Key = tuple[Any, ...]


# ---------------------------------------------------------------------------------------
# Helpers


def key(frame: pcap.Frame) -> Key:
    """Every field of a frame, with the types that matter, so that any difference shows."""
    assert type(frame) is pcap.Frame
    assert type(frame.data) is memoryview
    return (frame.number, frame.offset, frame.ts, frame.linktype, bytes(frame.data),
            frame.orig_len, frame.interface)


def whole(raw: bytes) -> list[Key]:
    """The frames of the whole file, as iter_frames reads them."""
    return [key(f) for f in pcap.iter_frames(io.BytesIO(raw), NAME)]


def read_split(raw: bytes, split: int) -> tuple[list[Key], list[RangeRead]]:
    """Every range of ``raw`` read in turn, the frames renumbered for the file.  The
    ranges share one file object (tasks would each open the file): every read seeks."""
    f = io.BytesIO(raw)
    frames: list[Key] = []
    results = []
    for start, end in plan_ranges(len(raw), split):
        result = read_range(f, start, end, NAME)
        got = [key(frame) for frame in result]
        assert [k[0] for k in got] == list(range(1, len(got) + 1))  # numbered in the range
        assert result.count == len(got)
        base = len(frames)
        frames += [(k[0] + base, *k[1:]) for k in got]
        results.append(result)
    return frames, results


def outcome(raw: bytes, split: int) -> list[Key] | None:
    """The frames read range by range, or None when the caller would fall back to one
    pass: a range raised CaptureFormatError or the chain check failed."""
    try:
        frames, results = read_split(raw, split)
    except pcap.CaptureFormatError as exc:
        assert exc.capture == NAME
        return None
    return frames if check_chain(results) else None


def boundaries(raw: bytes) -> list[int]:
    """The offset of every record (pcap) or block (pcapng), walked by the lengths only."""
    out = []
    if raw[:4] == SHB_MAGIC:
        pos, endian = 0, "<"
        while pos < len(raw):
            if raw[pos : pos + 4] == SHB_MAGIC:  # each section has its own byte order
                endian = "<" if raw[pos + 8 : pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            out.append(pos)
            pos += struct.unpack_from(endian + "I", raw, pos + 4)[0]
        return out
    endian = "<" if raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    pos = 24
    while pos < len(raw):
        out.append(pos)
        pos += 16 + struct.unpack_from(endian + "I", raw, pos + 8)[0]
    return out


def assert_exact_split(raw: bytes, split: int) -> list[RangeRead]:
    """Reading ``raw`` in ranges of ``split`` bytes gives exactly the whole file's frames,
    the chain check passes, and each range's sync and next are the walked offsets."""
    frames, results = read_split(raw, split)
    assert chain_problem(results) is None
    assert check_chain(results)
    assert frames == whole(raw)
    offsets = [k[1] for k in frames]
    assert offsets == sorted(set(offsets))  # each frame once, in file order
    bounds = boundaries(raw)
    for result in results:
        inside = [b for b in bounds if result.start <= b < result.end]
        assert result.sync == (inside[0] if inside else None), (result.start, result.end)
        if inside:
            after = [b for b in bounds if b >= result.end]
            assert result.next == (after[0] if after else len(raw))
        else:
            assert result.next is None and result.count == 0
    return results


def tcp_frames(sizes: Sequence[int], interfaces: int = 1, seed: int = 0,
               fill: str = "random") -> list[Frame]:
    """One TCP segment (capture.writers) per size, both directions in turn; the times go forward
    by about a second and now and then back by half a second, as merged interfaces do."""
    rng = random.Random(seed)
    flow = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", 1883))
    segments = flow.open()
    for i, size in enumerate(sizes):
        data = {"random": rng.randbytes(size), "zeros": bytes(size),
                "ff": b"\xff" * size}[fill]
        side = i % 2
        segments += flow.send(side, data, sizes=[size]) if size else [flow.ack(side)]
    return [Frame(T0 + i * 1_000_003_000 - (500_000_000 if i % 5 == 3 else 0), flow.ip(seg),
                  interface=i % interfaces)
            for i, seg in enumerate(segments)]


def write(fmt: str, frames: Sequence[Frame], byteorder: str = "<", nanoseconds: bool = False,
          simple: bool = False) -> bytes:
    """A pcap file (Ethernet) or a pcapng file with three interfaces of different link
    types and timestamp resolutions (us, ns, ms), or Simple Packet Blocks."""
    buf = io.BytesIO()
    if fmt == "pcap":
        write_pcap(buf, frames, byteorder=byteorder, nanoseconds=nanoseconds)
    else:
        write_pcapng(buf, frames, byteorder=byteorder, simple=simple,
                     linktypes=[LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_RAW],
                     tsresol=[6, 9, 3])
    return buf.getvalue()


def raw_frames(lengths: Sequence[int], byte: int = 0xFF, step: int = 1_000_000_000) -> list[Frame]:
    """Frames of the given lengths filled with ``byte`` (written as LINKTYPE_RAW, the
    data is exactly these bytes), one second apart."""
    return [Frame(T0 + i * step, bytes([byte]) * n) for i, n in enumerate(lengths)]


# (format, byte order, nanosecond pcap, Simple Packet Blocks)
FORMATS = [
    ("pcap", "<", False, False),
    ("pcap", ">", False, False),
    ("pcap", "<", True, False),
    ("pcap", ">", True, False),
    ("pcapng", "<", False, False),
    ("pcapng", ">", False, False),
    ("pcapng", "<", False, True),
]
SMALL_SIZES = [0, 1, 3, 17, 60, 200, 5, 0, 90, 33]
LARGE_SIZES = [0, 60, 1400, 1460, 9000, 3, 30000, 200, 1460, 12000, 7, 1400] * 2


# ---------------------------------------------------------------------------------------
# plan_ranges


def test_plan_ranges_cover_the_file() -> None:
    assert plan_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert plan_ranges(8, 4) == [(0, 4), (4, 8)]
    assert plan_ranges(3, 10) == [(0, 3)]
    assert plan_ranges(10, 10) == [(0, 10)]
    assert plan_ranges(3, 1) == [(0, 1), (1, 2), (2, 3)]
    assert plan_ranges(0, 5) == [(0, 0)]


@pytest.mark.parametrize("size, split", [(-1, 4), (10, 0), (10, -3), (10.0, 4), (10, True)])
def test_plan_ranges_rejects_bad_arguments(size: Any, split: Any) -> None:
    with pytest.raises(ValueError, match="size"):
        plan_ranges(size, split)


# ---------------------------------------------------------------------------------------
# Offsets checked by hand


def test_pcap_ranges_by_hand() -> None:
    # LINKTYPE_RAW records of 20, 30 and 40 bytes of 0xff: the 24-byte file header, then
    # records at 24 (16 + 20 = 36 bytes), 60 (46 bytes) and 106 (56 bytes); size 162.
    buf = io.BytesIO()
    write_pcap(buf, raw_frames([20, 30, 40]), linktype=LINKTYPE_RAW)
    raw = buf.getvalue()
    assert len(raw) == 162
    assert [k[1] for k in whole(raw)] == [24, 60, 106]
    f = io.BytesIO(raw)
    first = read_range(f, 0, 61, NAME)
    assert first.sync == 24 and first.first == 24
    assert [k[1] for k in map(key, first)] == [24, 60]
    assert first.next == 106
    # 61..99 lies in the record at 60 (header to 76, data to 106): no record begins there.
    # The scan looks at 61..99 and finds nothing, which is right, and raises nothing: the
    # range may just be inside a long record.
    middle = read_range(f, 61, 100, NAME)
    assert middle.sync is None and list(middle) == [] and middle.next is None
    last = read_range(f, 100, 162, NAME)
    assert last.sync == 106
    frames = [key(fr) for fr in last]
    assert [(k[0], k[1]) for k in frames] == [(1, 106)]  # numbered within the range
    assert frames[0][2] == (T0 + 2_000_000_000) // 1000 * 1000  # microsecond file
    assert last.next == 162
    assert check_chain([first, middle, last])
    # Out of order, or with a gap, the same results do not pass.
    assert not check_chain([first, last])
    assert not check_chain([middle, first, last])
    # Ranges that end exactly where a record ends: the record at 60 is the next range's.
    exact = [read_range(f, s, e, NAME) for s, e in [(0, 60), (60, 106), (106, 162)]]
    assert [[k[1] for k in map(key, r)] for r in exact] == [[24], [60], [106]]
    assert [(r.sync, r.next) for r in exact] == [(24, 60), (60, 106), (106, 162)]
    assert check_chain(exact)


def test_pcapng_ranges_by_hand() -> None:
    # SHB 28 bytes (12 + byte-order magic 4 + version 4 + section length 8) at 0, IDB 20
    # bytes (12 + link type, reserved, snaplen) at 28, then EPBs of 32 + data padded to 4:
    # 52 bytes at 48, 64 at 100, 72 at 164; size 236.
    buf = io.BytesIO()
    write_pcapng(buf, raw_frames([20, 30, 40]), linktypes=[LINKTYPE_RAW])
    raw = buf.getvalue()
    assert len(raw) == 236
    assert boundaries(raw) == [0, 28, 48, 100, 164]
    f = io.BytesIO(raw)
    head = read_range(f, 0, 10, NAME)
    assert head.sync == 0 and head.first == 0
    assert list(head) == [] and head.next == 28  # the IDB, known from the head
    idb = read_range(f, 10, 50, NAME)
    assert idb.sync == 28
    assert [k[1] for k in map(key, idb)] == [48]
    assert idb.next == 100
    # From 50 the scan looks at 52, 56, ... (blocks begin at multiples of 4) and finds the
    # EPB at 100, whose chain (100, 164) reaches exactly the end of the file.
    rest = read_range(f, 50, 236, NAME)
    assert rest.sync == 100
    assert [(k[0], k[1], k[3]) for k in map(key, rest)] == [(1, 100, LINKTYPE_RAW),
                                                            (2, 164, LINKTYPE_RAW)]
    assert rest.next == 236 and rest.late_head_block is None
    assert check_chain([head, idb, rest])
    # Ranges that end exactly where a block ends.
    exact = [read_range(f, s, e, NAME) for s, e in [(0, 48), (48, 100), (100, 236)]]
    assert [[k[1] for k in map(key, r)] for r in exact] == [[], [48], [100, 164]]
    assert [(r.sync, r.next) for r in exact] == [(0, 48), (48, 100), (100, 236)]
    assert check_chain(exact)


# ---------------------------------------------------------------------------------------
# Whole file == ranges put together


@pytest.mark.parametrize("fmt, byteorder, nanoseconds, simple", FORMATS)
def test_small_capture_any_split(fmt: str, byteorder: str, nanoseconds: bool,
                                 simple: bool) -> None:
    frames = tcp_frames(SMALL_SIZES, interfaces=1 if simple else 3)
    raw = write(fmt, frames, byteorder, nanoseconds, simple)
    assert len(whole(raw)) == len(frames)
    for split in [1, 7, 64, 100, 1000, len(raw) - 1, len(raw), len(raw) + 1000]:
        assert_exact_split(raw, split)


@pytest.mark.parametrize("fmt, byteorder, nanoseconds, simple", FORMATS)
def test_large_capture_any_split(fmt: str, byteorder: str, nanoseconds: bool,
                                 simple: bool) -> None:
    frames = tcp_frames(LARGE_SIZES, interfaces=1 if simple else 3, seed=1)
    raw = write(fmt, frames, byteorder, nanoseconds, simple)
    for split in [100, 4096, 65536, len(raw)]:
        results = assert_exact_split(raw, split)
        if split == 100:
            # 30000-byte frames span many 100-byte ranges, which hold no boundary.
            assert sum(r.sync is None for r in results) > 500


def test_huge_frame_spans_ranges_without_a_boundary() -> None:
    # Records at 24 (16 + 40), 80 (16 + 20000), 20096 (16 + 40); size 20152.  With 1000-
    # byte ranges, [1000, 2000) ... [19000, 20000) lie inside the big frame's data.
    buf = io.BytesIO()
    write_pcap(buf, raw_frames([40, 20000, 40], byte=0x00), linktype=LINKTYPE_RAW)
    raw = buf.getvalue()
    assert boundaries(raw) == [24, 80, 20096] and len(raw) == 20152
    results = assert_exact_split(raw, 1000)
    assert [i for i, r in enumerate(results) if r.sync is None] == list(range(1, 20))
    assert results[0].next == 20096
    assert results[20].sync == 20096


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_capture_without_frames(fmt: str) -> None:
    # A pcap file header alone (24 bytes), or an SHB (28) and three IDBs (20; 32 with an
    # if_tsresol option: 4 + 1 byte padded to 4, then opt_endofopt 4): no record, and
    # the chain (24, or the head's blocks) ends at the file size.
    raw = write(fmt, [])
    assert boundaries(raw) == ([] if fmt == "pcap" else [0, 28, 48, 80])
    assert len(raw) == (24 if fmt == "pcap" else 112)
    assert whole(raw) == []
    for split in [1, 5, 24, 100]:
        results = assert_exact_split(raw, split)
        assert all(r.count == 0 for r in results)
    with pytest.raises(pcap.CaptureFormatError) as err:
        read_range(io.BytesIO(b""), *plan_ranges(0, 10)[0], NAME)
    assert (err.value.capture, err.value.offset) == (NAME, 0)


def test_record_header_across_a_64k_boundary() -> None:
    # The scan reads the file in 64 KiB pages: a record header at 65528 spans two of
    # them.  Records at 24 (16 + 65488 bytes of 0xff), then 65528, 65584, ... (16 + 40).
    buf = io.BytesIO()
    write_pcap(buf, raw_frames([65488] + [40] * 10), linktype=LINKTYPE_RAW)
    raw = buf.getvalue()
    assert boundaries(raw)[:3] == [24, 65528, 65584]
    assert read_range(io.BytesIO(raw), 100, len(raw), NAME).sync == 65528
    assert read_range(io.BytesIO(raw), 65530, len(raw), NAME).sync == 65584
    assert_exact_split(raw, 8192)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_hypothesis_random_frames_and_splits(data: st.DataObject) -> None:
    fmt, byteorder, nanoseconds, simple = data.draw(st.sampled_from(FORMATS))
    sizes = data.draw(st.lists(st.one_of(st.integers(0, 300), st.integers(0, 6000)),
                               max_size=14))
    fill = data.draw(st.sampled_from(["random", "zeros", "ff"]))
    frames = tcp_frames(sizes, 1 if simple else 3, data.draw(st.integers(0, 1000)), fill)
    raw = write(fmt, frames, byteorder, nanoseconds, simple)
    # Any split from tiny to beyond the file, but at most about 200 ranges (speed); or
    # one that makes the first range end exactly where a record or block begins.
    split = data.draw(st.one_of(st.integers(max(1, len(raw) // 200), len(raw) + 50),
                                st.sampled_from(boundaries(raw)[1:] or [len(raw)])))
    assert_exact_split(raw, split)


# ---------------------------------------------------------------------------------------
# Adversarial files: exact, or the check fails; never silently wrong


def _pcap_carrying_a_pcap(byteorder: str, nanoseconds: bool) -> tuple[bytes, int, int]:
    """A pcap (RAW) whose fourth frame is a whole pcap file of 12 records of the same
    byte order, resolution and epoch: (file, offset of that frame's record, its length).
    Its last inner record ends where the outer frame does, so a chain that starts on an
    inner record runs on, undetectably, into the file's own records."""
    inner = io.BytesIO()
    write_pcap(inner, raw_frames([30 + i for i in range(12)], byte=0x11, step=1000),
               linktype=LINKTYPE_RAW, byteorder=byteorder, nanoseconds=nanoseconds)
    frames = raw_frames([40, 25, 33]) + [Frame(T0 + 3_000_000_000, inner.getvalue())]
    frames += raw_frames([40, 25, 33, 12])
    for i, frame in enumerate(frames):
        frame.ts = T0 + i * 1_000_000_000
    outer = io.BytesIO()
    write_pcap(outer, frames, linktype=LINKTYPE_RAW, byteorder=byteorder,
               nanoseconds=nanoseconds)
    return outer.getvalue(), 24 + (16 + 40) + (16 + 25) + (16 + 33), len(inner.getvalue())


@pytest.mark.parametrize("byteorder, nanoseconds", [("<", False), (">", True)])
def test_pcap_inside_a_frame_fools_the_scan_and_the_check_catches_it(
        byteorder: str, nanoseconds: bool) -> None:
    raw, outer, inner_len = _pcap_carrying_a_pcap(byteorder, nanoseconds)
    assert outer in boundaries(raw) and outer + 16 + inner_len in boundaries(raw)
    f = io.BytesIO(raw)
    # A range starting inside the inner file header (outer data begins at outer + 16).
    first = read_range(f, 0, outer + 17, NAME)
    list(first)
    second = read_range(f, outer + 17, len(raw), NAME)
    fooled = [key(fr) for fr in second]
    # The scan took the inner first record (after its 24-byte header) for a boundary, and
    # its chain merged into the file's own: the range ends where it should.
    assert second.sync == outer + 16 + 24
    assert fooled[0][1] == outer + 16 + 24
    assert fooled[0][1] not in [k[1] for k in whole(raw)]
    assert second.next == len(raw)
    # Only the comparison with the previous range's next catches it.
    assert first.next == outer + 16 + inner_len
    assert not check_chain([first, second])
    assert f"started at {outer + 40}" in str(chain_problem([first, second]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split=st.integers(1, 400), byteorder=st.sampled_from("<>"), nanoseconds=st.booleans())
def test_pcap_inside_a_frame_any_split(split: int, byteorder: str, nanoseconds: bool) -> None:
    raw, _outer, _inner_len = _pcap_carrying_a_pcap(byteorder, nanoseconds)
    got = outcome(raw, split)
    assert got is None or got == whole(raw)


def test_pcap_inside_a_frame_some_splits_fall_back() -> None:
    """The sweep above really meets fooled ranges (else it would test nothing)."""
    raw, _outer, _inner_len = _pcap_carrying_a_pcap("<", False)
    results = [outcome(raw, split) for split in range(40, 200, 3)]
    assert any(r is None for r in results)
    assert all(r is None or r == whole(raw) for r in results)


def _pcapng_carrying(inner: bytes) -> tuple[bytes, int]:
    """A pcapng file (one RAW interface) whose third EPB carries ``inner`` (a multiple of
    4 bytes, so no padding): (file, offset of that EPB)."""
    assert len(inner) % 4 == 0
    frames = raw_frames([40, 24]) + [Frame(T0 + 2_000_000_000, inner)] + raw_frames([40, 8, 12])
    for i, frame in enumerate(frames):
        frame.ts = T0 + i * 1_000_000_000
    buf = io.BytesIO()
    write_pcapng(buf, frames, linktypes=[LINKTYPE_RAW])
    # SHB 28 + IDB 20, then EPBs of 32 + 40 and 32 + 24 bytes.
    return buf.getvalue(), 28 + 20 + 72 + 56


def _inner_pcapng(blocks: int = 10) -> bytes:
    buf = io.BytesIO()
    write_pcapng(buf, raw_frames([16 + 4 * i for i in range(blocks)], byte=0x22),
                 linktypes=[LINKTYPE_RAW])
    return buf.getvalue()


def test_pcapng_inside_a_frame_reports_the_inner_section() -> None:
    inner = _inner_pcapng()
    raw, outer = _pcapng_carrying(inner)
    assert outer in boundaries(raw)
    f = io.BytesIO(raw)
    results = [read_range(f, 0, outer + 1, NAME)]
    # From outer + 1 the scan looks at outer + 4 (the EPB's length), + 8 (interface 0),
    # + 12/16 (timestamp), + 20/24 (lengths), then + 28: the inner SHB, whose chain (SHB,
    # IDB, EPBs) is plausible.  The range ends inside the inner blocks.
    middle = read_range(f, outer + 1, outer + 28 + 100, NAME)
    results.append(middle)
    assert middle.sync == outer + 28
    for result in results:
        list(result)
    assert middle.late_head_block == outer + 28
    assert not check_chain(results)


def test_pcapng_blocks_inside_a_frame_run_into_the_trailer() -> None:
    # The inner file without its SHB and IDB (28 + 20 bytes): EPBs on interface 0 only,
    # which the outer file has too.  Followed from a fooled sync, the chain ends at the
    # outer EPB's trailing length field, which is no block.
    inner = _inner_pcapng()[48:]
    raw, outer = _pcapng_carrying(inner)
    trailer = outer + 28 + len(inner)
    assert trailer + 4 in boundaries(raw)
    fooled = read_range(io.BytesIO(raw), outer + 1, len(raw), NAME)
    assert fooled.sync == outer + 28
    with pytest.raises(pcap.CaptureFormatError) as err:
        list(fooled)
    assert err.value.capture == NAME and err.value.offset == trailer


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(split=st.integers(1, 500), whole_inner=st.booleans())
def test_pcapng_inside_a_frame_any_split(split: int, whole_inner: bool) -> None:
    inner = _inner_pcapng() if whole_inner else _inner_pcapng()[48:]
    raw, _outer = _pcapng_carrying(inner)
    got = outcome(raw, split)
    assert got is None or got == whole(raw)


def test_pcapng_inside_a_frame_some_splits_fall_back() -> None:
    for inner in (_inner_pcapng(), _inner_pcapng()[48:]):
        raw, _outer = _pcapng_carrying(inner)
        results = [outcome(raw, split) for split in range(40, 300, 7)]
        assert any(r is None for r in results)
        assert all(r is None or r == whole(raw) for r in results)


def _sync_over_blocks(inner: bytes) -> tuple[int | None, int, int]:
    """The sync of a range starting 1 byte into an EPB (of a one-interface file) whose
    data is ``inner``: (sync, that EPB's data offset, the offset of the block after it)."""
    raw, outer = _pcapng_carrying(inner)
    after = outer + 32 + len(inner)
    assert after in boundaries(raw)
    return read_range(io.BytesIO(raw), outer + 1, len(raw), NAME).sync, outer + 28, after


def _fake_epbs(count: int = CHAIN, if_id: int = 0, caplen: int | None = None,
               trailer: int | None = None) -> bytes:
    """``count`` EPBs of 16 bytes of data each (48 bytes), with the given interface id,
    captured length field and trailing length field, to hide in a frame."""
    out = b""
    for i in range(count):
        block = _epb(if_id, i, bytes(16))
        if caplen is not None:
            block = block[:20] + struct.pack("<I", caplen) + block[24:]
        if trailer is not None:
            block = block[:-4] + struct.pack("<I", trailer)
        out += block
    return out


def test_pcapng_scan_rules_each_reject_a_fake_chain() -> None:
    # A chain of CHAIN well-formed EPBs inside a frame fools the scan (the control), and
    # breaking any one rule in all of them makes the scan pass over them to the block
    # after the frame.
    sync, data, _after = _sync_over_blocks(_fake_epbs())
    assert sync == data
    for inner in (
        _fake_epbs(if_id=1),  # the file has one interface (draft: Interface ID)
        _fake_epbs(caplen=17),  # 16 data bytes in a 48-byte block: at most 48 - 32
        _fake_epbs(trailer=44),  # the trailing Block Total Length differs
    ):
        sync, data, after = _sync_over_blocks(inner)
        assert sync == after
    # A section header (in this byte order), an IDB, then EPBs of interface 0: CHAIN
    # blocks, the control.  With a wrong byte-order magic it is no section header, and
    # the chains from the blocks after it are too short (the frame ends after CHAIN - 1).
    idb = pcapng_block(1, struct.pack("<HHI", LINKTYPE_RAW, 0, 0))
    for magic, fooled in ((0x1A2B3C4D, True), (0x1A2B3C4E, False)):
        shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", magic, 1, 0, -1))
        sync, data, after = _sync_over_blocks(shb + idb + _fake_epbs(CHAIN - 2))
        assert sync == (data if fooled else after)
    # A new section numbers its interfaces from 0 again: without an IDB after the SHB,
    # its EPBs name no interface.
    sync, data, after = _sync_over_blocks(
        pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
        + _fake_epbs(CHAIN - 1))
    assert sync == after
    # Blocks begin at multiples of 4 ("General Block Structure": lengths are multiples
    # of 4, and the first block is at 0): the same EPBs 2 bytes further on do not count.
    sync, data, after = _sync_over_blocks(b"\0\0" + _fake_epbs() + b"\0\0")
    assert sync == after
    # Only the known block types count ("Block Type Codes"): after a custom block
    # (0x0BAD), more custom blocks fool the scan, blocks of an unassigned type do not.
    for block_type, fooled in ((0x0BAD, True), (0x1234, False)):
        sync, data, after = _sync_over_blocks(
            pcapng_block(0x0BAD, bytes(36)) + pcapng_block(block_type, bytes(36)) * (CHAIN - 1))
        assert sync == (data if fooled else after)


def _pcap_fake_sync(fake_ts: int, *, frac: int | None = None, skip: int = 0,
                    orig_less: int = 0, snaplen: int = 262144, late: int = 0,
                    last: bool = False) -> tuple[int | None, int, int]:
    """A pcap (RAW, microseconds) of 12 records of 40 bytes (56 with their headers, at
    24, 80, 136, ...), one of which (the second, or the ``last``) carries in its first 16
    bytes a fake record header: time ``fake_ts`` (or the fraction ``frac``), captured
    length 24 + 56 * ``skip``, so that it ends exactly on a real record (the one after the
    carrier, ``skip`` records later) or at the end of the file, and an original length
    ``orig_less`` bytes shorter.  The records from the carrier on are ``late`` ns later.

    Returns the sync of a range starting 1 byte into the carrier, the fake record's offset
    and that of the real record after the carrier."""
    carrier = 11 if last else 1
    seconds, rest = divmod(fake_ts, 1_000_000_000)
    caplen = 24 + 56 * skip
    fake = struct.pack("<IIII", seconds, rest // 1000 if frac is None else frac, caplen,
                       caplen - orig_less) + b"\xff" * 24
    frames = raw_frames([40] * 12)
    frames[carrier].ip = fake
    for i, frame in enumerate(frames):
        frame.ts += late if i >= carrier else 0
    buf = io.BytesIO()
    write_pcap(buf, frames, linktype=LINKTYPE_RAW, snaplen=snaplen)
    raw = buf.getvalue()
    outer = 24 + 56 * carrier
    assert boundaries(raw) == [24 + 56 * i for i in range(12)]
    return read_range(io.BytesIO(raw), outer + 1, len(raw), NAME).sync, outer + 16, outer + 56


def test_pcap_scan_rules_each_reject_a_fake_record() -> None:
    # The control: a fake record header in a frame, 0.5 s after it, whose length lands on
    # the next real record, fools the scan (its chain then is the file's own).
    second = 1_000_000_000
    t1 = T0 + second  # the carrier's time
    sync, fake, real = _pcap_fake_sync(t1 + second // 2)
    assert sync == fake
    # draft-ietf-opsawg-pcap, "Packet Record": the microseconds are below 10**6, and the
    # captured length is at most the original length and the file's SnapLen.
    assert _pcap_fake_sync(t1, frac=1_000_000)[0] == real
    assert _pcap_fake_sync(t1, orig_less=1)[0] == real
    assert _pcap_fake_sync(t1, skip=2, snaplen=0)[0] == fake  # SnapLen 0: no limit
    assert _pcap_fake_sync(t1, skip=2, snaplen=100)[0] == real  # 136 > 100
    # Times: not more than TS_BACK before the file's first record (T0) ...
    assert _pcap_fake_sync(T0 - 3000 * second)[0] == fake
    assert _pcap_fake_sync(T0 - 4000 * second)[0] == real
    # ... nor TS_BACK before the previous record of the chain (the fake is the previous
    # one of the real record it lands on, at t1 + 1 s) ...
    assert _pcap_fake_sync(t1 + 3000 * second)[0] == fake
    assert _pcap_fake_sync(t1 + 4000 * second)[0] == real
    # ... nor TS_FORWARD after it (the records from the carrier on are 3 days late) ...
    late = 3 * 86400 * second
    assert _pcap_fake_sync(t1 + late - 3600 * second, late=late)[0] == fake
    assert _pcap_fake_sync(T0, late=late)[0] == real
    # ... nor TS_SPAN after the file's first record: here the fake record is the last
    # of the file, its chain reaches the end of the file at once, and no other rule
    # looks at its time.
    day = 86400 * second
    sync, fake, _real = _pcap_fake_sync(T0 + 300 * day, last=True)
    assert sync == fake == 24 + 56 * 11 + 16
    assert _pcap_fake_sync(T0 + 400 * day, last=True)[0] is None


@pytest.mark.parametrize("overrun, fooled", [(0, True), (1, False)])
def test_pcap_scan_record_must_fit_in_the_file(overrun: int, fooled: bool) -> None:
    # The file's last frame carries CHAIN fake records (16 + 8 bytes each) that end
    # exactly at the end of the file: they fool the scan.  If the last of them claims one
    # byte more than the file has, it is not plausible, and no chain from the fakes is.
    fakes = b""
    for i in range(CHAIN):
        caplen = 8 + (overrun if i == CHAIN - 1 else 0)
        fakes += struct.pack("<IIII", T0 // 10**9 + 11, 1000 * i, caplen, caplen) + bytes(8)
    frames = raw_frames([40] * 11) + [Frame(T0 + 11_000_000_000, fakes)]
    buf = io.BytesIO()
    write_pcap(buf, frames, linktype=LINKTYPE_RAW)
    raw = buf.getvalue()
    carrier = 24 + 56 * 11
    assert boundaries(raw)[-1] == carrier and len(raw) == carrier + 16 + 24 * CHAIN
    sync = read_range(io.BytesIO(raw), carrier + 1, len(raw), NAME).sync
    assert sync == (carrier + 16 if fooled else None)


# ---------------------------------------------------------------------------------------
# Interface and section blocks after the head


def _epb(if_id: int, i: int, data: bytes) -> bytes:
    units = (T0 + i * 1_000_000_000) // 1000  # microseconds, the default resolution
    return pcapng_block(6, struct.pack("<IIIII", if_id, units >> 32, units & 0xFFFFFFFF,
                                       len(data), len(data)) + data)


def _late_idb_capture() -> tuple[bytes, int]:
    """SHB, IDB (Ethernet), 10 EPBs on interface 0, then an IDB (RAW) and 10 EPBs on
    both interfaces: (file, offset of the second IDB)."""
    shb = pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb0 = pcapng_block(1, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 0))
    idb1 = pcapng_block(1, struct.pack("<HHI", LINKTYPE_RAW, 0, 0))
    data = bytes(range(42))  # 42 bytes, padded to 44: each EPB is 32 + 44 = 76 bytes
    before = b"".join(_epb(0, i, data) for i in range(10))
    after = b"".join(_epb(i % 2, 10 + i, data) for i in range(10))
    raw = shb + idb0 + before + idb1 + after
    return raw, 28 + 20 + 10 * 76


def test_late_idb_is_reported() -> None:
    raw, idb = _late_idb_capture()
    assert idb == 808 and idb in boundaries(raw)
    assert {k[3] for k in whole(raw)} == {LINKTYPE_ETHERNET, LINKTYPE_RAW}
    f = io.BytesIO(raw)
    first = read_range(f, 0, idb + 1, NAME)
    assert len(list(first)) == 10
    assert first.late_head_block == idb and first.next == idb + 20
    # Whatever the next range does, the chain check fails: the later range read
    # interface 1's packets with the head's one interface.
    rest = read_range(f, idb + 1, len(raw), NAME)
    try:
        list(rest)
    except pcap.CaptureFormatError:
        pass
    assert f"block at {idb}" in str(chain_problem([first, rest]))
    # In the last range, the IDB was read on the chain like iter_frames reads it: fine.
    single = read_range(f, 0, len(raw), NAME)
    assert [key(fr) for fr in single] == whole(raw)
    assert single.late_head_block == idb
    assert check_chain([single])


@pytest.mark.parametrize("split", [1, 7, 64, 100, 300, 700, 1000])
def test_late_idb_never_passes(split: int) -> None:
    raw, _idb = _late_idb_capture()
    assert outcome(raw, split) is None


def test_late_section_is_reported_and_fine_in_the_last_range() -> None:
    # Two pcapng files end to end (as `cat a.pcapng b.pcapng` makes): the second SHB, in
    # the other byte order, starts a section with other interfaces.
    a = write("pcapng", tcp_frames(SMALL_SIZES, 3, seed=2))
    b_buf = io.BytesIO()
    write_pcapng(b_buf, tcp_frames(SMALL_SIZES, seed=3), byteorder=">",
                 linktypes=[LINKTYPE_RAW])
    raw = a + b_buf.getvalue()
    assert len(a) in boundaries(raw)
    f = io.BytesIO(raw)
    single = read_range(f, 0, len(raw), NAME)
    assert [key(fr) for fr in single] == whole(raw)
    assert single.late_head_block == len(a) and check_chain([single])
    ranges = [(0, 100), (100, len(a) + 1), (len(a) + 1, len(raw))]
    results = []
    for start, end in ranges:
        result = read_range(f, start, end, NAME)
        try:
            list(result)
        except pcap.CaptureFormatError:
            pass
        results.append(result)
    assert results[1].late_head_block == len(a)
    assert not check_chain(results)
    for split in [64, 500, len(a) // 2]:
        got = outcome(raw, split)
        assert got is None or got == whole(raw)


# ---------------------------------------------------------------------------------------
# Truncated and non-conforming files


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("cut", [5, 12, 20])
def test_truncated_file_never_passes(fmt: str, cut: int) -> None:
    full = write(fmt, tcp_frames(SMALL_SIZES, 3))
    raw = full[:-cut]  # inside the last record or block
    last = boundaries(full)[-1]
    with pytest.raises(pcap.CaptureFormatError) as whole_err:
        whole(raw)
    assert whole_err.value.offset == last
    # One range: the same error as the whole-file reader, same offset.
    single = read_range(io.BytesIO(raw), 0, len(raw), NAME)
    with pytest.raises(pcap.CaptureFormatError) as err:
        list(single)
    assert (err.value.capture, err.value.offset) == (NAME, last)
    for split in [1, 7, 64, 100, 1000, len(raw)]:
        assert outcome(raw, split) is None


def test_no_boundary_where_one_must_be_raises() -> None:
    # A non-conforming file: SnapLen 100 (file header) but a record of 1000 bytes at 60
    # (records at 24: 16 + 20, 60: 16 + 1000, 1076: 16 + 20; size 1112).  A range starting
    # at 100 must meet a boundary within 16 + 100 bytes if the file kept its SnapLen, and
    # the 0xff data holds none.
    buf = io.BytesIO()
    write_pcap(buf, raw_frames([20, 1000, 20]), linktype=LINKTYPE_RAW, snaplen=100)
    raw = buf.getvalue()
    assert boundaries(raw) == [24, 60, 1076] and len(raw) == 1112
    assert len(whole(raw)) == 3  # the whole-file reader does not enforce SnapLen
    with pytest.raises(pcap.CaptureFormatError) as err:
        read_range(io.BytesIO(raw), 100, 1112, NAME)
    assert (err.value.capture, err.value.offset) == (NAME, 100)
    # A range shorter than that may lie inside a long record: no boundary, no error.
    assert read_range(io.BytesIO(raw), 100, 200, NAME).sync is None
    # Read in ranges, such a file falls back (and iter_frames reads it).
    assert outcome(raw, 300) is None


def test_chain_of_zero_records_is_not_a_boundary() -> None:
    # 16 zero bytes make a plausible empty record of 1970; a frame of zeros is a chain of
    # them.  The file's first record's time (2023) rules them out.
    buf = io.BytesIO()
    write_pcap(buf, raw_frames([40, 2000, 40], byte=0), linktype=LINKTYPE_RAW)
    raw = buf.getvalue()
    assert read_range(io.BytesIO(raw), 100, 200, NAME).sync is None
    assert_exact_split(raw, 50)


# ---------------------------------------------------------------------------------------
# The chain check itself, and the API's edges


def _valid_results(split: int = 300) -> tuple[bytes, list[RangeRead]]:
    raw = write("pcap", tcp_frames(SMALL_SIZES))
    return raw, assert_exact_split(raw, split)


def test_chain_check_rejects_tampered_results() -> None:
    raw, results = _valid_results()
    assert len(results) >= 4 and check_chain(results)
    assert not check_chain([])
    assert not check_chain(results[:-1])  # does not reach the end of the file
    assert not check_chain(results[:1] + results[2:])  # a gap
    assert not check_chain(results[1:])  # does not start at 0
    results[2].sync = (results[2].sync or 0) + 1
    assert "started at" in str(chain_problem(results))
    raw, results = _valid_results()
    results[1].next = (results[1].next or 0) + 16
    assert not check_chain(results)
    raw, results = _valid_results()
    results[1].late_head_block = results[1].sync
    assert not check_chain(results)
    raw, results = _valid_results()
    results[-1].late_head_block = results[-1].sync
    assert check_chain(results)  # the last range: nothing reads on after it
    # A range that was not iterated to its end has no next.
    f = io.BytesIO(raw)
    partial = [read_range(f, s, e, NAME) for s, e in plan_ranges(len(raw), 300)]
    for result in partial[1:]:
        list(result)
    assert "not read to its end" in str(chain_problem(partial))


def test_ranges_share_one_file_object() -> None:
    # Two ranges iterated in turn, frame by frame, on one file object: each reads at its
    # own position (it seeks before every read).
    raw = write("pcapng", tcp_frames(LARGE_SIZES[:12], 3))
    f = io.BytesIO(raw)
    mid = len(raw) // 2
    results = [read_range(f, 0, mid, NAME), read_range(f, mid, len(raw), NAME)]
    iterators = [iter(r) for r in results]
    got: list[list[Key]] = [[], []]
    live = [0, 1]
    while live:
        for i in list(live):
            try:
                got[i].append(key(next(iterators[i])))
            except StopIteration:
                live.remove(i)
    assert got[0] and got[1]
    assert check_chain(results)
    assert got[0] + [(k[0] + len(got[0]), *k[1:]) for k in got[1]] == whole(raw)


def test_read_range_rejects_bad_ranges_and_files() -> None:
    raw = write("pcap", tcp_frames([10]))
    for start, end in [(5, 4), (-1, 10), (True, 10)]:
        with pytest.raises(ValueError, match="range|start"):
            read_range(io.BytesIO(raw), start, end, NAME)
    with pytest.raises(pcap.CaptureFormatError) as err:
        read_range(io.BytesIO(b"not a capture file"), 0, 18, NAME)
    assert (err.value.capture, err.value.offset) == (NAME, 0)
    result = read_range(io.BytesIO(raw), 0, len(raw), NAME)
    list(result)
    with pytest.raises(RuntimeError):
        list(result)


def test_short_chain_must_reach_the_end_of_the_file() -> None:
    # After the head (SHB 28 + IDB 20), EPBs of 32 + 20 = 52 bytes at 48, 100, ...  From
    # 49 the scan's first candidate is the EPB at 100 (inside the one at 48 it meets only
    # lengths, interface 0, a timestamp and 0xff data).
    def capture(epbs: int, tail: bytes) -> bytes:
        buf = io.BytesIO()
        write_pcapng(buf, raw_frames([20] * epbs), linktypes=[LINKTYPE_RAW])
        return buf.getvalue() + tail

    # Fewer than CHAIN blocks from 100 on: plausible only because they end exactly at
    # the end of the file.
    short = capture(CHAIN - 2, b"")
    assert read_range(io.BytesIO(short), 49, len(short), NAME).sync == 100
    # With 4 bytes of garbage after them, the chain ends in no block: no sync.
    short = capture(CHAIN - 2, b"\xee" * 4)
    assert read_range(io.BytesIO(short), 49, len(short), NAME).sync is None
    # CHAIN blocks before the garbage are enough (the range then reads into the
    # garbage, and says so).
    long = capture(CHAIN + 1, b"\xee" * 4)
    result = read_range(io.BytesIO(long), 49, len(long), NAME)
    assert result.sync == 100
    with pytest.raises(pcap.CaptureFormatError) as err:
        list(result)
    assert err.value.offset == len(long) - 4
